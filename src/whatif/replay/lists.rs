//! A lane's worker's lists as the handover reads and changes them.

use super::worker::Worker;
use crate::data::UnitKey;
use crate::policy::handover;
use crate::whatif::TimedUnit;

/// A lane's worker's lists for the handover: its own units are
/// `flat[head..tail]`.
pub(super) struct LaneLists<'a> {
    pub(super) worker: &'a mut Worker,
    pub(super) flat: &'a [TimedUnit],
}

impl handover::Lists for LaneLists<'_> {
    type Unit = TimedUnit;

    fn key(unit: &TimedUnit) -> UnitKey {
        unit.key
    }

    fn own(&self) -> impl DoubleEndedIterator<Item = &TimedUnit> {
        self.flat[self.worker.head..self.worker.tail].iter()
    }

    fn pop_own(&mut self) -> Option<TimedUnit> {
        if self.worker.tail == self.worker.head {
            return None;
        }
        // (the first part of a unit cut in two stays: its tail is with a
        // peer, and it goes only as a piece)
        let last = self.flat[self.worker.tail - 1].key;
        if self.worker.cut.contains(&last) {
            return None;
        }
        self.worker.tail -= 1;
        Some(self.flat[self.worker.tail])
    }

    fn cloned_to(&self, key: UnitKey) -> Option<u32> {
        self.worker
            .cloned_out
            .iter()
            .find(|c| c.0 == key)
            .map(|c| c.1)
    }

    fn set_cloned(&mut self, key: UnitKey, to: Option<u32>) {
        match to {
            Some(to) => self.worker.cloned_out.push((key, to)),
            None => self.worker.cloned_out.retain(|c| c.0 != key),
        }
    }

    fn drop_copy(&mut self, from: u32, key: UnitKey) -> bool {
        let before = self.worker.given.len();
        self.worker
            .given
            .retain(|g| !(g.0.key == key && g.1 == from && g.2));
        if self.worker.given.len() < before {
            return true;
        }
        // The copy in flight here: stopped, its compute in vain.
        let running =
            matches!(self.worker.running, Some((u, false, Some(f))) if u.key == key && f == from);
        if running {
            self.worker.running = None;
            self.worker.end_order = 0;
        }
        running
    }

    fn stop_running(&mut self, key: UnitKey) -> Option<bool> {
        let own = match self.worker.running {
            Some((u, own, None)) if u.key == key => own,
            _ => return None,
        };
        self.worker.running = None;
        self.worker.end_order = 0;
        Some(own)
    }

    fn skip_own(&mut self, key: UnitKey) -> bool {
        let pending = self.flat[self.worker.head..self.worker.tail]
            .iter()
            .any(|u| u.key == key);
        if pending {
            self.worker.skip.push(key);
        }
        pending
    }
}
