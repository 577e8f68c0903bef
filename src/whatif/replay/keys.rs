//! The units a replay looks up at every raced unit's end: which of them a
//! lane has seen finish, and when first.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::data::UnitKey;

/// The first end of each raced unit a lane finished a copy of, by unit:
/// hashed by a multiply and a rotation per word rather than SipHash (a
/// replay's keys are no adversary's, and only lookups are read, never an
/// order).
pub(in crate::whatif) type FirstEnds = HashMap<UnitKey, u64, BuildHasherDefault<KeyHasher>>;

/// The hasher of [`FirstEnds`] (FxHash's step).
#[derive(Default)]
pub(in crate::whatif) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, word: u32) {
        self.write_u64(u64::from(word));
    }

    fn write_u64(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}
