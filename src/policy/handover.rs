//! The worker side of a handover: what a worker does with its own list when
//! it gives units to a peer (`Assign`, `Planned`), clones them on a peer
//! (`Clone`), or hears that a peer's copy came first (`Done`). Written once
//! over [`Lists`], which the run's workers (`run::worker`) and the
//! what-if replay (`whatif`) implement over their own storage.
//!
//! A worker computes its own list from the front, so its tail is what it
//! reaches last and what it hands over:
//!
//! - **Give**: the last `count` units leave the list and travel in list order
//!   (the receiver computes them in the order the giver would have).
//! - **Clone**: copies of the last `count` units not cloned yet travel **last
//!   first**; the giver keeps them. The receiver starts at the unit the giver
//!   would reach last and works towards the front while the giver works
//!   towards the end, so the two meet once: at most the unit they meet on is
//!   computed twice, and every other copy the receiver finishes is one the
//!   giver skips. In list order the receiver would start with the unit the
//!   giver reaches first, and the two would race on the same units. Either
//!   order counts each unit once (the first copy), so results do not depend
//!   on it; only the time and the copies computed in vain do.
//! - **Done**: a peer finished a unit first. A copy of it this worker holds
//!   for that peer and has not begun is dropped; an own unit cloned to that
//!   peer and not begun is skipped (it is done, by the clone).

use crate::data::UnitKey;

/// A worker's units of one iteration, as the handover reads and changes them.
pub trait Lists {
    /// A unit as the worker holds it.
    type Unit: Clone;
    /// The unit's key.
    fn key(unit: &Self::Unit) -> UnitKey;
    /// Own units not begun, in list order (the front is computed next).
    fn own(&self) -> impl DoubleEndedIterator<Item = &Self::Unit>;
    /// Takes the last own unit off the list.
    fn pop_own(&mut self) -> Option<Self::Unit>;
    /// The peer own unit `key` is cloned to, if it is.
    fn cloned_to(&self, key: UnitKey) -> Option<u32>;
    /// Records own unit `key` as cloned to `to`, or forgets it (`None`).
    fn set_cloned(&mut self, key: UnitKey, to: Option<u32>);
    /// Drops the copy of `key` that `from` cloned here, if it waits here
    /// unbegun; whether it did.
    fn drop_copy(&mut self, from: u32, key: UnitKey) -> bool;
    /// Skips own unit `key` if it waits in the list unbegun; whether it did.
    fn skip_own(&mut self, key: UnitKey) -> bool;
}

/// `Assign` or `Planned { count }`: the last `count` own units leave the
/// list, appended to `out` in list order. Returns how many left.
pub fn give<L: Lists>(lists: &mut L, count: u32, out: &mut Vec<L::Unit>) -> usize {
    let start = out.len();
    for _ in 0..count {
        match lists.pop_own() {
            Some(unit) => out.push(unit),
            None => break,
        }
    }
    out[start..].reverse();
    out.len() - start
}

/// `Clone { count }` to `to`: copies of the last `count` own units not
/// cloned yet, appended to `out` last first (see the module docs); the
/// worker keeps them and records them as cloned to `to`. Returns how many.
pub fn clone_out<L: Lists>(lists: &mut L, to: u32, count: u32, out: &mut Vec<L::Unit>) -> usize {
    let start = out.len();
    out.extend(
        lists
            .own()
            .rev()
            .filter(|u| lists.cloned_to(L::key(u)).is_none())
            .take(count as usize)
            .cloned(),
    );
    for unit in &out[start..] {
        lists.set_cloned(L::key(unit), Some(to));
    }
    out.len() - start
}

/// What a `Done` cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancelled {
    /// Nothing waited here: the copy here is begun or done, or there is none.
    Nothing,
    /// A peer's unit this worker held a copy of: dropped.
    Copy,
    /// One of this worker's own units: skipped, done by the clone (its agent
    /// counts it as one of its own units done).
    Own,
}

/// A `Done` from `from` about `key`: `from` finished its copy first.
pub fn done<L: Lists>(lists: &mut L, from: u32, key: UnitKey) -> Cancelled {
    if lists.drop_copy(from, key) {
        return Cancelled::Copy;
    }
    if lists.cloned_to(key) != Some(from) {
        return Cancelled::Nothing;
    }
    lists.set_cloned(key, None);
    if lists.skip_own(key) {
        Cancelled::Own
    } else {
        Cancelled::Nothing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lists kept in vectors.
    #[derive(Default)]
    struct Plain {
        own: Vec<UnitKey>,
        copies: Vec<(UnitKey, u32)>,
        cloned: Vec<(UnitKey, u32)>,
    }

    impl Lists for Plain {
        type Unit = UnitKey;
        fn key(unit: &UnitKey) -> UnitKey {
            *unit
        }
        fn own(&self) -> impl DoubleEndedIterator<Item = &UnitKey> {
            self.own.iter()
        }
        fn pop_own(&mut self) -> Option<UnitKey> {
            self.own.pop()
        }
        fn cloned_to(&self, key: UnitKey) -> Option<u32> {
            self.cloned.iter().find(|c| c.0 == key).map(|c| c.1)
        }
        fn set_cloned(&mut self, key: UnitKey, to: Option<u32>) {
            self.cloned.retain(|c| c.0 != key);
            self.cloned.extend(to.map(|to| (key, to)));
        }
        fn drop_copy(&mut self, from: u32, key: UnitKey) -> bool {
            let before = self.copies.len();
            self.copies.retain(|c| *c != (key, from));
            self.copies.len() < before
        }
        fn skip_own(&mut self, key: UnitKey) -> bool {
            let before = self.own.len();
            self.own.retain(|u| *u != key);
            self.own.len() < before
        }
    }

    fn unit(unit: u32) -> UnitKey {
        UnitKey { partition: 0, unit }
    }

    fn units(of: &[UnitKey]) -> Vec<u32> {
        of.iter().map(|k| k.unit).collect()
    }

    fn lists(n: u32) -> Plain {
        Plain {
            own: (0..n).map(unit).collect(),
            ..Plain::default()
        }
    }

    #[test]
    fn a_gift_takes_the_tail_in_list_order() {
        let mut l = lists(6);
        let mut out = Vec::new();
        assert_eq!(give(&mut l, 2, &mut out), 2);
        assert_eq!(units(&out), [4, 5]);
        assert_eq!(give(&mut l, 9, &mut out), 4);
        assert_eq!(units(&out), [4, 5, 0, 1, 2, 3]);
        assert!(l.own.is_empty());
    }

    #[test]
    fn clones_go_last_first_and_never_twice() {
        let mut l = lists(6);
        let mut out = Vec::new();
        assert_eq!(clone_out(&mut l, 1, 3, &mut out), 3);
        // The receiver starts where the giver ends.
        assert_eq!(units(&out), [5, 4, 3]);
        assert_eq!(units(&l.own), [0, 1, 2, 3, 4, 5], "the giver keeps them");
        // A second clone skips the units cloned already.
        out.clear();
        assert_eq!(clone_out(&mut l, 2, 2, &mut out), 2);
        assert_eq!(units(&out), [2, 1]);
        assert_eq!(l.cloned_to(unit(5)), Some(1));
        assert_eq!(l.cloned_to(unit(1)), Some(2));
        assert_eq!(l.cloned_to(unit(0)), None);
    }

    #[test]
    fn done_drops_a_copy_or_skips_an_own_unit_cloned_to_the_sender() {
        let mut l = lists(4);
        clone_out(&mut l, 1, 2, &mut Vec::new());
        l.copies.push((
            UnitKey {
                partition: 7,
                unit: 0,
            },
            2,
        ));
        // Peer 1 finished its copy of unit 3 first.
        assert_eq!(done(&mut l, 1, unit(3)), Cancelled::Own);
        assert_eq!(units(&l.own), [0, 1, 2]);
        assert_eq!(l.cloned_to(unit(3)), None);
        // A notice from a peer the unit was not cloned to changes nothing.
        assert_eq!(done(&mut l, 2, unit(2)), Cancelled::Nothing);
        assert_eq!(units(&l.own), [0, 1, 2]);
        // Unit 2 already computed here: forgotten, nothing to skip.
        l.own.pop();
        assert_eq!(done(&mut l, 1, unit(2)), Cancelled::Nothing);
        assert_eq!(l.cloned_to(unit(2)), None);
        // Peer 2's unit, cloned here, finished there first.
        let theirs = UnitKey {
            partition: 7,
            unit: 0,
        };
        assert_eq!(done(&mut l, 2, theirs), Cancelled::Copy);
        assert_eq!(done(&mut l, 2, theirs), Cancelled::Nothing);
    }
}
