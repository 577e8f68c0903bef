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
//!   peer and not begun is skipped (it is done, by the clone); an own unit
//!   cloned to that peer *in flight* is stopped.
//! - **Clone in flight** ([`clone_in_flight`]): a worker whose list is empty
//!   but whose unit in flight is far from its end answers a peer's offer of
//!   help with a copy of that unit. Both copies compute the same bits; the
//!   first to finish is counted and the other stops or is discarded, so a
//!   unit slowed after it began is not a lost cause. The unit in flight may
//!   be one a peer handed over (a helper slowed in turn): a unit handed over
//!   is not final. Only a copy is never copied again.
//! - **Pass on** ([`pass_on`]): units peers handed to a worker that wait
//!   there unbegun move on, from the end of its queue, to a peer offering
//!   help or to a peer whose report says it has less work left
//!   ([`report_taker`]): a unit handed over is not final, whether its
//!   holder was slowed in turn or was handed units from two sides at once.
//! - **Rest in flight** ([`rest_in_flight`]): a unit computed in
//!   micro-batches that is slowed after some of them ended gives the rest —
//!   the micro-batches not yet ended — to the peer offering help, with the
//!   running sums of those that did (the in-order fold makes the finished
//!   sums the same bits whoever adds the rest). The worker stops it; what it
//!   computed of the micro-batch in progress is wasted. Preferred to a copy
//!   once a micro-batch has ended: the helper starts where the worker is,
//!   not from the beginning.

use crate::data::UnitKey;
use crate::policy::ControlKind;

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
    /// Stops unit `key` if it is the unit in flight and not itself a copy
    /// (its clone came first): `Some(true)` for an own unit, `Some(false)`
    /// for one a peer handed over; `None` if it was not in flight. Storage
    /// that never clones a unit in flight keeps the default.
    fn stop_running(&mut self, key: UnitKey) -> Option<bool> {
        let _ = key;
        None
    }
}

/// A unit in flight as its worker sees it: how long it has run and how many
/// of its micro-batches are done (a unit computed at once has one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InFlight {
    /// Time since it began, µs.
    pub elapsed_us: u64,
    /// Micro-batches done.
    pub done: u32,
    /// Micro-batches in all (at least 1).
    pub total: u32,
    /// When the last of those done ended, µs after it began (0: none).
    pub ended_us: u64,
}

impl InFlight {
    /// Its expected time left, µs: before the first micro-batch ends, as
    /// long again as it has run (a unit running late is expected to run as
    /// late again: the median of a memoryless wait). After, at the pace of
    /// the micro-batches done: what is left of the one in flight (or, once
    /// it has run longer than that pace, as long again as it has run), then
    /// the others at that pace, or at the one in flight's time so far when
    /// longer. (The time it has run over the micro-batches done counted the
    /// one in flight as not begun: a unit on pace 2.96 micro-batches into
    /// 4 was expected to need 1.5 more, and its rest went to a helper that
    /// ended it later, 100 µs away.) With no end recorded (`ended_us` 0),
    /// the last micro-batch done is taken to have ended now.
    pub fn left_us(&self) -> u64 {
        let total = u64::from(self.total.max(1));
        let done = u64::from(self.done.min(self.total));
        if done == 0 {
            return self.elapsed_us;
        }
        if done >= total {
            return 0;
        }
        let ended = match self.ended_us {
            0 => self.elapsed_us,
            e => e.min(self.elapsed_us),
        };
        let pace = ended / done;
        let current = self.elapsed_us - ended;
        let this_one = if current < pace {
            pace - current
        } else {
            current
        };
        this_one + (total - done - 1) * pace.max(current)
    }
}

/// How much longer than a helper's whole unit the unit in flight must be
/// expected to take before the helper computes a copy: the copy costs the
/// helper a unit and a round of messages, and is worth it only if it
/// clearly ends first.
pub const CLONE_IN_FLIGHT_MARGIN: f64 = 1.5;

/// Whether a peer offering help, at `helper_unit_us` per unit, should compute
/// a copy of the unit in flight `unit` (the worker has nothing else to give):
/// when the unit's expected time left is over [`CLONE_IN_FLIGHT_MARGIN`] ×
/// the helper's unit. A unit at the helper's pace never qualifies (it has
/// less than one unit left); one slowed 5× does once a fifth of it has run
/// with no micro-batch done, or at its first micro-batch's end.
pub fn clone_in_flight(unit: &InFlight, helper_unit_us: u64) -> bool {
    helper_unit_us > 0
        && unit.done < unit.total
        && unit.left_us() as f64 > CLONE_IN_FLIGHT_MARGIN * helper_unit_us as f64
}

/// Whether a peer offering help, at `helper_unit_us` per whole unit, should
/// take the rest of the unit in flight `unit` (the worker has nothing else
/// to give): when at least one of its micro-batches has ended and its
/// expected time left is over [`CLONE_IN_FLIGHT_MARGIN`] × the helper's time
/// for the micro-batches not yet ended. Before the first micro-batch ends
/// the rest is the whole unit, which a copy moves without giving up the
/// worker's own progress ([`clone_in_flight`]).
pub fn rest_in_flight(unit: &InFlight, helper_unit_us: u64) -> bool {
    if helper_unit_us == 0 || unit.done == 0 || unit.done >= unit.total {
        return false;
    }
    let rest = f64::from(unit.total - unit.done) / f64::from(unit.total);
    unit.left_us() as f64 > CLONE_IN_FLIGHT_MARGIN * rest * helper_unit_us as f64
}

/// How many of the unit in flight's micro-batches not yet begun to hand,
/// from its end, to a peer offering help at `helper_unit_us` per whole unit,
/// while this worker goes on with the others (a tail: the helper computes
/// each of them from zero and sends them as they are; the shard owners fold
/// them after this worker's sums, in order, so the unit's bits do not
/// change). The count that makes the two end earliest: this worker at its
/// time per micro-batch so far (those done, as they ended, or those and the
/// one in flight in the time it has run, whichever is longer), or `unit_us`
/// (its time per unit) shared among the unit's micro-batches when that is
/// longer, after the
/// micro-batch in flight (which stays); the helper at its own, paying one
/// micro-batch more for the messages. None when that gains under half a
/// helper's micro-batch, or the pace of either is not known, or — when the
/// worker may hand over the rest instead (`rest`: [`rest_in_flight`] says
/// so) — the helper would end the rest sooner than the two end the tail
/// and the piece kept (a worker slowed so much that the micro-batch in
/// flight alone outlasts the helper's whole rest).
pub fn tail_in_flight(unit: &InFlight, unit_us: u64, helper_unit_us: u64, rest: bool) -> u32 {
    let total = unit.total.max(1);
    if helper_unit_us == 0 || unit.done + 1 >= total {
        return 0;
    }
    let not_begun = u64::from(total - unit.done - 1);
    let per_mb = |us: u64| us as f64 / f64::from(total);
    // The micro-batches done at the pace they ended, and at least those and
    // the one in flight in the time it has run.
    let ended = match unit.done {
        0 => 0.0,
        d => unit.ended_us as f64 / f64::from(d),
    };
    let ran = unit.elapsed_us as f64 / f64::from(unit.done + 1);
    let mine = per_mb(unit_us).max(ran).max(ended);
    if mine <= 0.0 {
        return 0;
    }
    let theirs = per_mb(helper_unit_us);
    // What is left of the micro-batch in flight.
    let current = (mine * f64::from(unit.done + 1) - unit.elapsed_us as f64).max(0.0);
    let finish = |t: u64| {
        let here = current + (not_begun - t) as f64 * mine;
        match t {
            0 => here,
            t => here.max((t + 1) as f64 * theirs),
        }
    };
    let best = (0..=not_begun)
        .min_by(|&a, &b| finish(a).total_cmp(&finish(b)).then(a.cmp(&b)))
        .unwrap_or(0);
    if (finish(0) - finish(best)) * 2.0 <= theirs {
        return 0;
    }
    let rest_ends = f64::from(total - unit.done + 1) * theirs;
    if rest && rest_ends < finish(best) {
        return 0;
    }
    best as u32
}

/// A peer units may be passed on to: its time per unit, the work it has
/// before it would start them (0 for a peer offering help: it is idle), and
/// how many peers like it may take a share as well.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taker {
    /// Its time per unit, µs (0: not known yet).
    pub unit_us: u64,
    /// Its work before the units passed on, µs.
    pub ahead_us: u64,
    /// Peers like it, itself included, that may each take as many (at
    /// least 1): a peer reporting is one of the group's, which report
    /// together, and the first to report getting a balance with this
    /// worker alone took more than the group's share.
    pub alike: u32,
}

impl Taker {
    /// A peer offering help at `unit_us` per unit (offers come one at a
    /// time).
    pub fn idle(unit_us: u64) -> Self {
        Self {
            unit_us,
            ahead_us: 0,
            alike: 1,
        }
    }
}

/// How many of the `queued` units a peer handed to this worker (waiting,
/// not begun) to pass on to `taker`, taken from the end of the queue: the
/// count that makes them finish earliest, this worker after its unit in
/// flight (`running`, if any) and the rest of the queue at its time per
/// unit (less as many again for each of the taker's `alike` peers), the
/// taker after its own work and the units passed, when that gains more than
/// half a taker's unit. Its time per unit is `unit_us`, or the
/// unit in flight's time so far when longer; the unit in flight has
/// [`InFlight::left_us`] to go, and at least what is left of a unit at that
/// pace. A helper slowed in turn is not the end of the line for the units
/// it took. None when the taker's pace is not known yet.
pub fn pass_on(queued: usize, running: Option<&InFlight>, unit_us: u64, taker: Taker) -> usize {
    let unit_us = unit_us.max(running.map_or(0, |r| r.elapsed_us));
    if taker.unit_us == 0 || unit_us == 0 {
        return 0;
    }
    let ahead_us = running.map_or(0, |r| r.left_us().max(unit_us - r.elapsed_us));
    let alike = taker.alike.max(1) as usize;
    let finish = |n: usize| {
        let mine = ahead_us + (queued - alike * n) as u64 * unit_us;
        mine.max(taker.ahead_us + n as u64 * taker.unit_us)
    };
    let best = (0..=queued / alike)
        .min_by_key(|&n| (finish(n), n))
        .unwrap_or(0);
    // A gain under half a taker's unit is noise, not worth the messages.
    if finish(0).saturating_sub(finish(best)) * 2 <= taker.unit_us {
        return 0;
    }
    best
}

/// The peer a report makes a taker of this worker's queued units, when the
/// worker's own answer to it (`answer`, from its agent) gives none of its
/// own list: the reporter at its pace, after the work its report says it
/// has left (its own list and the units queued ahead of it), one of
/// `alike` peers that may take as much (its agent's helpers left).
///
/// Without it, units handed to a worker could move on only when a peer
/// offered help, that is, once that peer had nothing left at all. A worker
/// handed units from two sides at once (its helper group seeing it idle
/// early, and the broker's balance, neither knowing of the other) then
/// held them while its peers finished, and set the iteration's end: at
/// 10,000 workers of 16 units (the what-if replay, slow-worker 400 %) one
/// such worker in most iterations made `forestall` 1.40× the fluid bound.
pub fn report_taker(
    report: &ControlKind,
    answer: &[(u32, ControlKind)],
    alike: u32,
) -> Option<Taker> {
    let ControlKind::Progress {
        done,
        total,
        queued,
        unit_us,
    } = *report
    else {
        return None;
    };
    let gives = answer
        .iter()
        .any(|(_, k)| matches!(k, ControlKind::Assign { .. }));
    if gives || unit_us == 0 {
        return None;
    }
    let left = u64::from(total.saturating_sub(done)) + u64::from(queued);
    Some(Taker {
        unit_us,
        ahead_us: left.saturating_mul(unit_us),
        alike: alike.max(1),
    })
}

/// One step of a [`cut`]: what leaves the end of a worker's own list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutStep {
    /// The last unit goes as it is held (a whole unit, or the first part of
    /// one cut before), `micro_batches` of them.
    Whole {
        /// Its micro-batches as held.
        micro_batches: u32,
    },
    /// The last unit's micro-batches from `first` on go, `count` of them;
    /// the first `first` stay in the list, the unit's first part.
    Tail {
        /// Micro-batches that stay.
        first: u32,
        /// Micro-batches that go.
        count: u32,
    },
}

impl CutStep {
    /// Micro-batches that leave.
    pub fn micro_batches(&self) -> u32 {
        match *self {
            CutStep::Whole { micro_batches } => micro_batches,
            CutStep::Tail { count, .. } => count,
        }
    }
}

/// `Cut { count }` (the broker's micro-batches beyond whole units): the
/// last `count` micro-batches of the own list, from its end, given the
/// micro-batches held of each own unit, last first (`held`; a unit cut
/// before holds only its first part). A unit with no more micro-batches
/// than are still to go leaves whole and the count goes on into the unit
/// before it; the unit where the count ends is cut in two. Units that may
/// not be cut (`None` in `held`: copied to a peer, say) stop the walk.
pub fn cut(held: impl IntoIterator<Item = Option<u32>>, count: u32) -> Vec<CutStep> {
    let mut steps = Vec::new();
    let mut count = count;
    for micro_batches in held {
        let Some(micro_batches) = micro_batches.filter(|&m| m > 0) else {
            break;
        };
        if count == 0 {
            break;
        }
        if count >= micro_batches {
            steps.push(CutStep::Whole { micro_batches });
            count -= micro_batches;
        } else {
            steps.push(CutStep::Tail {
                first: micro_batches - count,
                count,
            });
            count = 0;
        }
    }
    steps
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
    /// This worker's own unit in flight: stopped, done by the clone (counted
    /// as `Own`; what it computed so far is wasted).
    Running,
    /// A unit a peer handed to this worker, in flight: stopped, done by its
    /// clone (not one of its own; what it computed so far is wasted).
    Handed,
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
        return Cancelled::Own;
    }
    match lists.stop_running(key) {
        Some(true) => Cancelled::Running,
        Some(false) => Cancelled::Handed,
        None => Cancelled::Nothing,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_cut_takes_whole_units_from_the_end_then_the_tail_of_one() {
        use CutStep::{Tail, Whole};
        // Units of 4 micro-batches, the last one cut before down to 2.
        let held = [Some(2), Some(4), Some(4)];
        assert_eq!(cut(held, 1), vec![Tail { first: 1, count: 1 }]);
        assert_eq!(cut(held, 2), vec![Whole { micro_batches: 2 }]);
        assert_eq!(
            cut(held, 5),
            vec![Whole { micro_batches: 2 }, Tail { first: 1, count: 3 }]
        );
        assert_eq!(
            cut(held, 99),
            vec![
                Whole { micro_batches: 2 },
                Whole { micro_batches: 4 },
                Whole { micro_batches: 4 }
            ]
        );
        assert_eq!(cut(held, 0), vec![]);
        // A unit that may not be cut stops the walk.
        assert_eq!(
            cut([Some(4), None, Some(4)], 6),
            vec![Whole { micro_batches: 4 }]
        );
        assert_eq!(cut([None, Some(4)], 2), vec![]);
    }

    use super::*;

    /// Lists kept in vectors.
    #[derive(Default)]
    struct Plain {
        own: Vec<UnitKey>,
        copies: Vec<(UnitKey, u32)>,
        cloned: Vec<(UnitKey, u32)>,
        /// The unit in flight, and whether it is one of its own.
        running: Option<(UnitKey, bool)>,
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
        fn stop_running(&mut self, key: UnitKey) -> Option<bool> {
            self.running.take_if(|r| r.0 == key).map(|r| r.1)
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

    #[test]
    fn done_stops_an_own_unit_in_flight_cloned_to_the_sender() {
        let mut l = lists(0);
        l.running = Some((unit(4), true));
        l.set_cloned(unit(4), Some(3));
        // Another peer's notice leaves it running.
        assert_eq!(done(&mut l, 2, unit(4)), Cancelled::Nothing);
        assert_eq!(l.running, Some((unit(4), true)));
        assert_eq!(done(&mut l, 3, unit(4)), Cancelled::Running);
        assert_eq!(l.running, None);
        assert_eq!(l.cloned_to(unit(4)), None);
    }

    #[test]
    fn done_stops_a_handed_over_unit_in_flight_cloned_to_the_sender() {
        // A helper slowed with a peer's unit in flight copied it to peer 5.
        let mut l = lists(2);
        l.running = Some((unit(9), false));
        l.set_cloned(unit(9), Some(5));
        assert_eq!(done(&mut l, 5, unit(9)), Cancelled::Handed);
        assert_eq!(l.running, None);
        assert_eq!(units(&l.own), [0, 1], "its own list is untouched");
    }

    #[test]
    fn queued_units_pass_on_to_a_faster_helper_as_far_as_it_gains() {
        let at = |elapsed_us, done, total| InFlight {
            elapsed_us,
            done,
            total,
            ended_us: 0,
        };
        // Slowed 5x (500 us a unit), 200 us into its unit in flight (300 us
        // left at that pace) and 3 queued: a helper at 100 us takes all 3
        // (done at 300 us, as we are).
        let slowed = at(200, 0, 1);
        let idle = Taker::idle;
        assert_eq!(pass_on(3, Some(&slowed), 500, idle(100)), 3);
        // At the same pace and nothing in flight: half of them.
        assert_eq!(pass_on(4, None, 100, idle(100)), 2);
        assert_eq!(pass_on(3, None, 100, idle(100)), 1);
        // A gain under half a helper unit moves nothing: 9 of 10
        // micro-batches done, 10 us left.
        assert_eq!(pass_on(1, Some(&at(90, 9, 10)), 100, idle(100)), 0);
        // Nothing queued, or no pace known yet: none.
        assert_eq!(pass_on(0, Some(&at(900, 0, 1)), 500, idle(100)), 0);
        assert_eq!(pass_on(3, Some(&slowed), 500, idle(0)), 0);
    }

    #[test]
    fn a_busy_taker_gets_what_evens_out_its_work_and_ours() {
        let busy = |ahead_us| Taker {
            unit_us: 100,
            ahead_us,
            alike: 1,
        };
        // 10 queued at 100 us, a peer with 400 us to go: 3 make us 700 and
        // it 700.
        assert_eq!(pass_on(10, None, 100, busy(400)), 3);
        // A peer with as much to do as we have, or more, gets none.
        assert_eq!(pass_on(10, None, 100, busy(1_000)), 0);
        assert_eq!(pass_on(10, None, 100, busy(5_000)), 0);
        // A peer a unit behind us: the gain is under half a unit.
        assert_eq!(pass_on(10, None, 100, busy(950)), 0);
        // One of four such peers: 1 each leaves us 600 and each 500 (2 each
        // would not end sooner); alone, the first would take 3.
        let one_of = |alike| Taker { alike, ..busy(400) };
        assert_eq!(pass_on(10, None, 100, one_of(4)), 1);
        assert_eq!(pass_on(10, None, 100, one_of(0)), 3, "at least itself");
        assert_eq!(pass_on(3, None, 100, one_of(4)), 0, "fewer than peers");
    }

    #[test]
    fn a_report_makes_a_taker_only_when_the_answer_gives_nothing() {
        let report = ControlKind::Progress {
            done: 12,
            total: 15,
            queued: 1,
            unit_us: 250,
        };
        assert_eq!(
            report_taker(&report, &[], 3),
            Some(Taker {
                unit_us: 250,
                ahead_us: 4 * 250,
                alike: 3,
            })
        );
        // Our own units went: nothing more.
        let gave = [(3, ControlKind::Assign { count: 2 })];
        assert_eq!(report_taker(&report, &gave, 3), None);
        // A reply of our own progress is not a gift.
        let replied = [(3, report.clone())];
        assert!(report_taker(&report, &replied, 3).is_some());
        // No pace yet, or not a report.
        let unpaced = ControlKind::Progress {
            done: 0,
            total: 4,
            queued: 0,
            unit_us: 0,
        };
        assert_eq!(report_taker(&unpaced, &[], 3), None);
        let offer = ControlKind::Offer { unit_us: 9 };
        assert_eq!(report_taker(&offer, &[], 3), None);
    }

    #[test]
    fn a_tail_balances_the_two_ends() {
        let at = |elapsed_us, done, total| InFlight {
            elapsed_us,
            done,
            total,
            ended_us: 0,
        };
        let ended = |ended_us, elapsed_us, done| InFlight {
            ended_us,
            ..at(elapsed_us, done, 8)
        };
        // 8 micro-batches of 125 µs at both paces, 100 µs into the first:
        // 7 not begun. Giving 3 ends here at 25 + 4 × 125 = 525 µs, there
        // at (3 + 1) × 125 = 500 (giving 4: 400 here, 625 there).
        assert_eq!(tail_in_flight(&at(100, 0, 8), 1_000, 1_000, false), 3);
        // A slowed worker, one micro-batch done and the next in flight at
        // 700 µs (350 µs a micro-batch at least) gives 4 of the 6 not
        // begun: 700 µs here, 625 there.
        assert_eq!(tail_in_flight(&at(700, 1, 8), 1_000, 1_000, false), 4);
        // Its first micro-batch ended at 600 µs: it gives all 6 (its
        // micro-batch in flight ends at 1,200 µs, the tail at 875).
        assert_eq!(tail_in_flight(&ended(600, 700, 1), 1_000, 1_000, false), 6);
        // Its time per unit says more than its first micro-batch so far.
        assert_eq!(tail_in_flight(&at(10, 0, 8), 5_000, 1_000, false), 7);
        assert_eq!(tail_in_flight(&at(10, 0, 8), 2_000, 1_000, false), 5);
        // Nothing not begun, one micro-batch, or no pace: nothing.
        assert_eq!(tail_in_flight(&at(900, 7, 8), 1_000, 1_000, false), 0);
        assert_eq!(tail_in_flight(&at(100, 0, 1), 1_000, 1_000, false), 0);
        assert_eq!(tail_in_flight(&at(100, 0, 8), 1_000, 0, false), 0);
        // Near its end at a helper's pace: too little to gain.
        assert_eq!(tail_in_flight(&at(760, 6, 8), 1_000, 1_000, false), 0);
        // Slowed so much that its micro-batch in flight ends after the
        // helper would end the rest (8 × 125 µs, from 110): the rest.
        assert_eq!(
            tail_in_flight(&ended(2_000, 2_100, 1), 1_000, 1_000, false),
            6
        );
        assert_eq!(
            tail_in_flight(&ended(2_000, 2_100, 1), 1_000, 1_000, true),
            0
        );
        // A helper far slower than the worker takes nothing.
        assert_eq!(tail_in_flight(&at(100, 0, 8), 1_000, 20_000, false), 0);
    }

    #[test]
    fn time_left_follows_the_micro_batches_done() {
        let at = |elapsed_us, done, total| InFlight {
            elapsed_us,
            done,
            total,
            ended_us: 0,
        };
        // 1 of 4 micro-batches in 500 µs: 1,500 µs to go
        assert_eq!(at(500, 1, 4).left_us(), 1_500);
        assert_eq!(at(900, 3, 4).left_us(), 300);
        // none done yet: as long again as it has run
        assert_eq!(at(700, 0, 4).left_us(), 700);
        assert_eq!(at(700, 4, 4).left_us(), 0);
        // 2 of 4 ended at 500 µs, the third 240 µs in: 10 µs of it and a
        // fourth of 250 to go
        let on_pace = InFlight {
            ended_us: 500,
            ..at(740, 2, 4)
        };
        assert_eq!(on_pace.left_us(), 260);
        // the third 400 µs in (late): as long again, and the fourth as long
        let late = InFlight {
            ended_us: 500,
            ..at(900, 2, 4)
        };
        assert_eq!(late.left_us(), 800);
    }

    #[test]
    fn only_a_unit_far_from_its_end_is_cloned_in_flight() {
        let helper_unit_us = 1_000;
        let at = |elapsed_us, done, total| InFlight {
            elapsed_us,
            done,
            total,
            ended_us: 0,
        };
        // at the helper's pace a unit never has more than a unit left
        assert!(!clone_in_flight(&at(250, 1, 4), helper_unit_us));
        assert!(!clone_in_flight(&at(999, 0, 1), helper_unit_us));
        // slowed 5×: after its first micro-batch (1,250 µs) 3,750 µs are left
        assert!(clone_in_flight(&at(1_250, 1, 4), helper_unit_us));
        // one micro-batch: once it has run 1.5 helper units
        assert!(clone_in_flight(&at(1_600, 0, 1), helper_unit_us));
        // done, or no pace known for the helper: never
        assert!(!clone_in_flight(&at(5_000, 4, 4), helper_unit_us));
        assert!(!clone_in_flight(&at(5_000, 0, 1), 0));
    }

    #[test]
    fn the_rest_goes_once_a_micro_batch_has_ended_and_it_is_far_from_its_end() {
        let helper_unit_us = 1_000;
        let at = |elapsed_us, done, total| InFlight {
            elapsed_us,
            done,
            total,
            ended_us: 0,
        };
        // slowed 5×: after 1 of 4 micro-batches (1,250 µs), 3,750 µs are
        // left; the helper does the other 3 in 750 µs
        assert!(rest_in_flight(&at(1_250, 1, 4), helper_unit_us));
        // slowed 2×: 3 of 4 done in 1,500 µs leaves 500 µs, against the
        // helper's 250 µs for the last one (× 1.5 = 375): it goes
        assert!(rest_in_flight(&at(1_500, 3, 4), helper_unit_us));
        // at the helper's pace it never goes
        assert!(!rest_in_flight(&at(250, 1, 4), helper_unit_us));
        assert!(!rest_in_flight(&at(750, 3, 4), helper_unit_us));
        // nothing ended yet (a copy's case), all ended, one micro-batch in
        // all, or no pace known for the helper: never
        assert!(!rest_in_flight(&at(3_000, 0, 4), helper_unit_us));
        assert!(!rest_in_flight(&at(5_000, 4, 4), helper_unit_us));
        assert!(!rest_in_flight(&at(5_000, 0, 1), helper_unit_us));
        assert!(!rest_in_flight(&at(1_250, 1, 4), 0));
    }
}
