//! FlexRR's RapidReassignment (Harlap et al., SoCC 2016), one worker's side.
//!
//! Every worker has a *helper group*: the next `group_size` workers in a ring
//! that starts in other processes. The protocol, all within one iteration:
//!
//! 1. A worker that has done `checkpoint` of its own units, and again when it has
//!    done all of them, sends a **progress report** to its group.
//! 2. A worker that gets a report from a peer it expects to finish more than
//!    two of that peer's units after gives that peer units from the **end** of
//!    its list (**assign**): as many as make all expect to finish together,
//!    judged by each one's time per unit so far (its own: the mean of its units
//!    done, or the unit in flight's time so far when longer), at least
//!    `initial_units` — or, when it is only more loaded than the peer and not
//!    slower per unit, its part of that among the peers that may be giving
//!    too. The units leave its list before the message is sent, so ownership
//!    moves once and no unit is done twice; they no longer count as the giver's
//!    own, so its reports (done of total) stay true.
//! 3. A helper that has finished everything it holds **offers** help to the peer
//!    of its group whose last report shows it furthest behind; that peer answers
//!    with units from the end of its list (the same balance, at least
//!    `follow_up_units`), or **declines** when it has at most one left (none
//!    with a unit in flight) or the helper would finish a unit no sooner than
//!    it finishes everything, and the helper tries the next peer behind.
//!
//! A worker answers control messages at once, also while a unit is in flight
//! (`respond = "at-once"`, the default), or only between units. The agent is
//! pure: callers pass in what happened and send what it returns.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// Default helper-group size.
pub const DEFAULT_GROUP_SIZE: u32 = 8;
/// Default progress checkpoint (share of a worker's own units).
pub const DEFAULT_CHECKPOINT: f64 = 0.75;
/// Default size of a first reassignment.
pub const DEFAULT_INITIAL_UNITS: u32 = 2;
/// Iterations of peers' progress an agent remembers.
const HISTORY: u64 = 4;

/// Default size of a follow-up reassignment.
pub const DEFAULT_FOLLOW_UP_UNITS: u32 = 1;

/// Knobs of rapid reassignment.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ReassignConfig {
    /// Peers a worker reports to and may help.
    pub group_size: u32,
    /// Share of its own units after which a worker reports progress.
    pub checkpoint: f64,
    /// Units given to a peer that reported being ahead.
    pub initial_units: u32,
    /// Units given in answer to a help offer.
    pub follow_up_units: u32,
}

impl Default for ReassignConfig {
    fn default() -> Self {
        Self {
            group_size: DEFAULT_GROUP_SIZE,
            checkpoint: DEFAULT_CHECKPOINT,
            initial_units: DEFAULT_INITIAL_UNITS,
            follow_up_units: DEFAULT_FOLLOW_UP_UNITS,
        }
    }
}

/// What one worker tells another about the current iteration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ControlKind {
    /// "I have done `done` of my `total` own units, taking `unit_us` per unit."
    Progress {
        /// Own units done.
        done: u32,
        /// Own units in all.
        total: u32,
        /// Mean time per unit so far this iteration, µs.
        unit_us: u64,
    },
    /// "I am idle and take `unit_us` per unit; give me work."
    Offer {
        /// Mean time per unit so far this iteration, µs.
        unit_us: u64,
    },
    /// "These many units from the end of my list are yours now" (the operator
    /// fills in which).
    Assign {
        /// How many.
        count: u32,
    },
    /// "I have nothing to give."
    Decline,
    /// Speculation: "compute copies of these units of mine; I keep them too, and
    /// whichever of us finishes one first wins" (the operator fills in which).
    Clone {
        /// How many.
        count: u32,
    },
    /// Speculation: "I finished these cloned units; skip them."
    Done,
    /// Proactive plan: "these many units from the end of my list are yours
    /// this iteration, as the plan says" (counted as the receiver's own).
    Planned {
        /// How many.
        count: u32,
    },
    /// Online prediction: "I went idle in this iteration after `units` units
    /// taking `busy_us`" (sent once per iteration, to worker 0).
    Timing {
        /// Units computed.
        units: u32,
        /// From the iteration's start to the last unit's end, µs.
        busy_us: u64,
    },
    /// Online prediction, from worker 0 once every worker's timing of the
    /// iteration is in: all of them, by worker, as (units, busy µs).
    Timings {
        /// Every worker's timing.
        all: Vec<(u32, u64)>,
    },
}

/// The helper group of `worker` among `workers` workers of which `per_process`
/// run in each process: the next workers in a ring that starts in the next
/// process, so helpers are in other processes first.
pub fn helper_group(worker: u32, workers: u32, per_process: u32, size: u32) -> Vec<u32> {
    let size = size.min(workers.saturating_sub(1)) as usize;
    let per_process = per_process.max(1);
    let process = worker / per_process;
    let start = (process + 1) * per_process + worker % per_process;
    let ring = (0..workers)
        .map(|k| (start + k) % workers)
        .filter(|&w| w != worker);
    // Other processes first, each group in ring order; each pass stops as
    // soon as the group is full (O(size) with one process, not O(workers)).
    let mut group: Vec<u32> = Vec::with_capacity(size);
    if workers > per_process {
        group.extend(
            ring.clone()
                .filter(|&w| w / per_process != process)
                .take(size),
        );
    }
    let missing = size - group.len();
    group.extend(ring.filter(|&w| w / per_process == process).take(missing));
    group
}

/// A giver's side of a balance.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Giver {
    /// Own units in its list.
    pub(crate) left: usize,
    /// Its time per unit, µs.
    pub(crate) unit_us: u64,
    /// How long until its unit in flight ends, if one is, µs.
    pub(crate) in_flight_left_us: Option<u64>,
}

impl Giver {
    /// Units of its list it keeps at least: one, unless a unit is in flight.
    fn keep_least(&self) -> usize {
        usize::from(self.in_flight_left_us.is_none())
    }

    /// When it expects to have finished everything it holds, µs from now.
    fn remaining_us(&self) -> u64 {
        self.in_flight_left_us.unwrap_or(0) + self.left as u64 * self.unit_us
    }
}

/// A worker's own progress in the current iteration and the reports it owes its
/// group: one at `mark` (a share of its own units) and one at the end.
#[derive(Debug, Clone, Default)]
pub(crate) struct Reporter {
    pub(crate) own_total: u32,
    pub(crate) own_done: u32,
    /// Mean time per unit so far this iteration, µs.
    pub(crate) unit_us: u64,
    /// How long the unit in flight has run so far, µs, if one is: a floor
    /// on the time per unit before that unit ends.
    pub(crate) running_us: Option<u64>,
    reported_mark: bool,
    reported_end: bool,
}

impl Reporter {
    /// A new iteration with `own_total` units of this worker's own.
    pub(crate) fn begin(&mut self, own_total: u32) {
        *self = Reporter {
            own_total,
            ..Reporter::default()
        };
    }

    /// This worker as a giver with `left` units in its list: its time per
    /// unit as it stands (the mean of the units done, or the unit in
    /// flight's time so far when that is longer) and how long until the unit
    /// in flight ends by that measure.
    pub(crate) fn giver(&self, left: usize) -> Giver {
        let running = self.running_us;
        let unit_us = self.unit_us.max(running.unwrap_or(0));
        Giver {
            left,
            unit_us,
            in_flight_left_us: running.map(|r| unit_us - r),
        }
    }

    /// One own unit is done; returns the reports to send to `group`.
    pub(crate) fn unit_done(
        &mut self,
        unit_us: u64,
        mark: f64,
        group: &[u32],
    ) -> Vec<(u32, ControlKind)> {
        self.own_done += 1;
        self.unit_us = unit_us;
        self.running_us = None;
        let at_end = self.own_done == self.own_total && !self.reported_end;
        let at_mark =
            ReassignAgent::fraction(self.own_done, self.own_total) >= mark && !self.reported_mark;
        if !(at_end || at_mark) {
            return Vec::new();
        }
        self.reported_mark = true;
        self.reported_end |= at_end;
        let report = ControlKind::Progress {
            done: self.own_done,
            total: self.own_total,
            unit_us,
        };
        group.iter().map(|&to| (to, report.clone())).collect()
    }
}

/// Progress reports by peer: (peer, (done, total)), sorted by peer.
#[derive(Debug, Clone, Default)]
struct Peers(Vec<(u32, (u32, u32))>);

impl Peers {
    fn new() -> Self {
        Self::default()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn clear(&mut self) {
        self.0.clear();
    }

    /// Records `peer`'s latest report.
    fn set(&mut self, peer: u32, report: (u32, u32)) {
        match self.0.binary_search_by_key(&peer, |&(w, _)| w) {
            Ok(i) => self.0[i].1 = report,
            Err(i) => self.0.insert(i, (peer, report)),
        }
    }
}

/// One worker's state of the protocol for the current iteration.
#[derive(Debug, Clone)]
pub struct ReassignAgent {
    me: u32,
    group: Vec<u32>,
    config: ReassignConfig,
    progress: Reporter,
    /// Last progress each peer reported to us: (peer, (done, total)), by peer
    /// (a helper group is small: a sorted vector beats a map).
    peers: Peers,
    /// The iteration this worker is in.
    iteration: u64,
    /// Progress peers reported in earlier iterations that may still be open
    /// (SSP): (iteration, peers), oldest first.
    history: VecDeque<(u64, Peers)>,
    /// The (iteration, peer) we offered help to and are waiting for.
    waiting_on: Option<(u64, u32)>,
    /// (iteration, peer) pairs that declined.
    declined: Vec<(u64, u32)>,
    /// Peers given units this iteration: the others may still ask, and
    /// share what is left.
    helped: Vec<u32>,
    /// Peers whose last report this iteration was no faster per unit than
    /// this worker: they will not take its units.
    no_faster: Vec<u32>,
    /// Each reporting peer's work left at its last report this iteration,
    /// µs: (peer, left).
    left_us: Vec<(u32, u64)>,
}

impl ReassignAgent {
    /// The agent of worker `me` with helper group `group`.
    pub fn new(me: u32, group: Vec<u32>, config: ReassignConfig) -> Self {
        Self {
            me,
            group,
            config,
            progress: Reporter::default(),
            peers: Peers::new(),
            iteration: 0,
            history: VecDeque::new(),
            waiting_on: None,
            declined: Vec::new(),
            helped: Vec::new(),
            no_faster: Vec::new(),
            left_us: Vec::new(),
        }
    }

    /// Starts `iteration`, in which this worker owns `own_total` units. What
    /// peers reported about earlier iterations is kept a while: under SSP a
    /// worker may help with an iteration it has already left.
    pub fn begin(&mut self, iteration: u64, own_total: u32) {
        let keep_from = iteration.saturating_sub(HISTORY);
        // Forgotten iterations lend their buffer to the next one's reports.
        let mut spare = Peers::new();
        while self.history.front().is_some_and(|&(t, _)| t < keep_from) {
            if let Some((_, old)) = self.history.pop_front() {
                spare = old;
            }
        }
        spare.clear();
        let previous = std::mem::replace(&mut self.peers, spare);
        if !previous.is_empty() && self.iteration >= keep_from {
            let at = self.history.partition_point(|&(t, _)| t < self.iteration);
            self.history.insert(at, (self.iteration, previous));
        }
        self.declined.retain(|&(t, _)| t >= keep_from);
        self.helped.clear();
        self.no_faster.clear();
        self.left_us.clear();
        self.iteration = iteration;
        self.progress.begin(own_total);
    }

    pub(crate) fn fraction(done: u32, total: u32) -> f64 {
        if total == 0 {
            1.0
        } else {
            f64::from(done) / f64::from(total)
        }
    }

    /// Units to give a peer with `their_left` units left at `their_unit_us` per
    /// unit, when `giver` has `helpers` peers like it that may help: as many
    /// as make all of us finish together if each helper took the same share,
    /// at least `floor`; the giver keeps one unless it has one in flight.
    ///
    /// With `T` the common finish time, the giver finishes the unit in flight
    /// (`rem` from now) and then `(T - rem) / mine` units, each helper
    /// `T / theirs - their_left` more, and all of it adds up to `left`:
    /// `T = (left + helpers · their_left + rem / mine) / (1 / mine + helpers / theirs)`.
    /// The giver keeps what it finishes by `T` (rounded) and the helpers share
    /// the rest, rounded up: a slow worker's unit left over costs more than a
    /// helper's.
    pub(crate) fn balance(
        giver: Giver,
        helpers: usize,
        their_left: u32,
        their_unit_us: u64,
        floor: u32,
    ) -> u32 {
        let keep_least = giver.keep_least();
        if giver.left <= keep_least {
            return 0;
        }
        let mine = giver.unit_us.max(1) as f64;
        let theirs = their_unit_us.max(1) as f64;
        let rem = giver.in_flight_left_us.unwrap_or(0) as f64;
        let g = helpers.max(1) as f64;
        let n = giver.left as f64;
        let finish = (n + g * f64::from(their_left) + rem / mine) / (1.0 / mine + g / theirs);
        let keep = ((finish - rem) / mine).round().clamp(keep_least as f64, n);
        let share = ((n - keep) / g).ceil();
        (share.max(f64::from(floor)) as usize).min(giver.left - keep_least) as u32
    }

    /// Call when one of this worker's *own* units is done; `unit_us` is its mean
    /// time per unit so far. Returns the progress reports to send (at the
    /// checkpoint and at the end).
    pub fn on_own_unit_done(&mut self, unit_us: u64) -> Vec<(u32, ControlKind)> {
        self.progress
            .unit_done(unit_us, self.config.checkpoint, &self.group)
    }

    /// How long the unit in flight has run so far, if one is (call before
    /// `on_message`): until it ends, this worker's time per unit is taken to
    /// be at least that, and it may give away every unit of its list.
    pub fn on_running(&mut self, running_us: Option<u64>) {
        self.progress.running_us = running_us;
    }

    /// Call for every control message. `left` is how many units are still in
    /// this worker's list (not counting one being computed). Returns the messages
    /// to send; an `Assign { count }` means: take `count` units from the end of
    /// the list and send them to that peer (they no longer count as this
    /// worker's own).
    pub fn on_message(
        &mut self,
        from: u32,
        kind: &ControlKind,
        left: usize,
    ) -> Vec<(u32, ControlKind)> {
        let out = self.answer(from, kind, left);
        for (to, sent) in &out {
            if let ControlKind::Assign { count } = sent {
                self.progress.own_total -= count;
                if !self.helped.contains(to) {
                    self.helped.push(*to);
                }
            }
        }
        out
    }

    /// Peers that may still take units: the group size less those given
    /// some already and those no faster than this worker (at least one, the
    /// one asking).
    fn helpers_left(&self) -> usize {
        let idle = self.no_faster.iter().filter(|w| !self.helped.contains(w));
        (self
            .group
            .len()
            .saturating_sub(self.helped.len() + idle.count()))
        .max(1)
    }

    /// How many workers may answer `reporter`'s report with units: this one,
    /// every peer that reported well more work left than `reporter` has
    /// (`their_left_us`, two of its units more), and every peer of the group
    /// not heard from yet this iteration. Each gives its part, so a peer that
    /// is ahead is not buried under everyone's units at once; the rest it
    /// gets by offering help when idle, one peer at a time.
    fn givers(&self, reporter: u32, their_left_us: u64, their_unit_us: u64) -> u32 {
        let behind = self
            .left_us
            .iter()
            .filter(|&&(w, l)| w != reporter && l > their_left_us + 2 * their_unit_us)
            .count();
        let unheard = self
            .group
            .iter()
            .filter(|&&w| w != reporter && !self.left_us.iter().any(|e| e.0 == w))
            .count();
        1 + (behind + unheard) as u32
    }

    fn answer(&mut self, from: u32, kind: &ControlKind, left: usize) -> Vec<(u32, ControlKind)> {
        match *kind {
            ControlKind::Progress {
                done,
                total,
                unit_us,
            } => {
                self.peers.set(from, (done, total));
                let me = self.progress.giver(left);
                let no_faster = self.no_faster.iter().position(|&w| w == from);
                match (unit_us >= me.unit_us && me.unit_us > 0, no_faster) {
                    (true, None) => self.no_faster.push(from),
                    (false, Some(i)) => {
                        self.no_faster.swap_remove(i);
                    }
                    _ => {}
                }
                // Only when we expect to finish after them by more than two of
                // their units: a peer a unit ahead (timer noise) is no reason
                // to move any, and moves between near-equals make work churn.
                let mine = me.remaining_us();
                let theirs = u64::from(total - done) * unit_us;
                match self.left_us.iter_mut().find(|e| e.0 == from) {
                    Some(e) => e.1 = theirs,
                    None => self.left_us.push((from, theirs)),
                }
                if mine.saturating_sub(theirs) > 2 * unit_us {
                    let share = Self::balance(me, self.helpers_left(), total - done, unit_us, 0);
                    if share > 0 {
                        // Our part; alone, at least `initial_units`; within
                        // what may be given.
                        let most = (left - me.keep_least()) as u32;
                        // A worker clearly slower per unit is a straggler its
                        // peers are not: it gives its whole share. One that
                        // is only more loaded (a plan gone stale, uneven
                        // units) may be one of many: it gives its part.
                        let straggler = 2 * me.unit_us > 3 * unit_us;
                        let givers = self.givers(from, theirs, unit_us);
                        let count = if straggler || givers == 1 {
                            share.max(self.config.initial_units)
                        } else {
                            share.div_ceil(givers)
                        };
                        return vec![(
                            from,
                            ControlKind::Assign {
                                count: count.min(most),
                            },
                        )];
                    }
                }
                Vec::new()
            }
            ControlKind::Offer { unit_us } => {
                let me = self.progress.giver(left);
                // A unit helps only if they finish it before we finish all.
                let count = if unit_us < me.remaining_us() {
                    Self::balance(
                        me,
                        self.helpers_left(),
                        0,
                        unit_us,
                        self.config.follow_up_units,
                    )
                } else {
                    0
                };
                if count > 0 {
                    vec![(from, ControlKind::Assign { count })]
                } else {
                    vec![(from, ControlKind::Decline)]
                }
            }
            ControlKind::Assign { .. } | ControlKind::Decline => {
                self.on_reply(self.iteration, from, kind);
                Vec::new()
            }
            ControlKind::Clone { .. }
            | ControlKind::Done
            | ControlKind::Planned { .. }
            | ControlKind::Timing { .. }
            | ControlKind::Timings { .. } => Vec::new(),
        }
    }

    /// A peer's report about an earlier iteration this worker has left.
    pub fn note_progress(&mut self, iteration: u64, from: u32, done: u32, total: u32) {
        if iteration < self.iteration {
            let at = self.history.partition_point(|&(t, _)| t < iteration);
            if self.history.get(at).is_none_or(|&(t, _)| t != iteration) {
                self.history.insert(at, (iteration, Peers::new()));
            }
            if let Some((_, peers)) = self.history.get_mut(at) {
                peers.set(from, (done, total));
            }
        }
    }

    /// A peer answered an offer for `iteration` (with units or a decline).
    pub fn on_reply(&mut self, iteration: u64, from: u32, kind: &ControlKind) {
        if self.waiting_on == Some((iteration, from)) {
            self.waiting_on = None;
        }
        if let ControlKind::Decline = kind {
            self.declined.push((iteration, from));
        }
    }

    /// Call when this worker has nothing left to compute; `unit_us` is its mean
    /// time per unit so far and `oldest_open` the oldest iteration not yet
    /// reduced. Offers help to the peer furthest behind in the oldest open
    /// iteration it has heard of (under BSP: the current one), unless that peer
    /// declined; at most one offer is outstanding. Returns (peer, iteration,
    /// offer).
    pub fn on_idle(&mut self, unit_us: u64, oldest_open: u64) -> Vec<(u32, u64, ControlKind)> {
        // Nothing to help with when the current iteration is already reduced
        // (the worker is waiting to begin the next one).
        if self.waiting_on.is_some() || oldest_open > self.iteration {
            return Vec::new();
        }
        let current = std::iter::once((self.iteration, &self.peers));
        let earlier = self
            .history
            .iter()
            .filter(|&&(t, _)| t >= oldest_open && t < self.iteration)
            .map(|(t, peers)| (*t, peers));
        let behind = earlier.chain(current).find_map(|(t, peers)| {
            peers
                .0
                .iter()
                .filter(|&&(w, (done, total))| {
                    done < total && !self.declined.contains(&(t, w)) && w != self.me
                })
                .min_by(|a, b| {
                    let fa = Self::fraction(a.1 .0, a.1 .1);
                    let fb = Self::fraction(b.1 .0, b.1 .1);
                    fa.total_cmp(&fb).then(a.0.cmp(&b.0))
                })
                .map(|&(w, _)| (t, w))
        });
        match behind {
            Some((t, w)) => {
                self.waiting_on = Some((t, w));
                vec![(w, t, ControlKind::Offer { unit_us })]
            }
            None => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(me: u32) -> ReassignAgent {
        ReassignAgent::new(me, helper_group(me, 4, 4, 3), ReassignConfig::default())
    }

    /// The count of the one `Assign` to `to` in `out` (panics on anything else).
    fn assigned(out: &[(u32, ControlKind)], to: u32) -> u32 {
        match out {
            [(peer, ControlKind::Assign { count })] if *peer == to => *count,
            other => panic!("expected one Assign to {to}: {other:?}"),
        }
    }

    #[test]
    fn groups_prefer_other_processes() {
        // 2 processes × 2 threads: worker 0's helpers start in process 1
        assert_eq!(helper_group(0, 4, 2, 2), vec![2, 3]);
        assert_eq!(helper_group(3, 4, 2, 2), vec![1, 0]);
        // one process: the next workers in the ring
        assert_eq!(helper_group(2, 4, 4, 3), vec![3, 0, 1]);
        // groups never exceed W - 1 and never contain the worker
        assert_eq!(helper_group(1, 2, 2, 4), vec![0]);
        assert!(helper_group(0, 1, 1, 4).is_empty());
    }

    #[test]
    fn reports_at_the_checkpoint_and_at_the_end() {
        let mut a = agent(0);
        a.begin(0, 8);
        for _ in 0..5 {
            assert!(a.on_own_unit_done(100).is_empty());
        }
        let at_75 = a.on_own_unit_done(100);
        assert_eq!(at_75.len(), 3);
        assert_eq!(
            at_75[0].1,
            ControlKind::Progress {
                done: 6,
                total: 8,
                unit_us: 100
            }
        );
        assert!(a.on_own_unit_done(100).is_empty());
        let done = a.on_own_unit_done(100);
        assert_eq!(
            done[0].1,
            ControlKind::Progress {
                done: 8,
                total: 8,
                unit_us: 100
            }
        );
    }

    /// A worker 5× slower than its 3 helpers, with 41 units left while each has
    /// 12: all finish together at T = (41 + 3·12) / (1/500 + 3/100) = 2406 µs,
    /// by when it finishes 4.8 → 5 of its own; the other 36 are shared by the
    /// 3 helpers: 12 each.
    #[test]
    fn a_slow_worker_gives_enough_units_to_finish_together() {
        let mut slow = agent(1);
        slow.begin(0, 48);
        for _ in 0..7 {
            slow.on_own_unit_done(500);
        }
        let progress = ControlKind::Progress {
            done: 36,
            total: 48,
            unit_us: 100,
        };
        assert_eq!(
            slow.on_message(2, &progress, 41),
            vec![(2, ControlKind::Assign { count: 12 })]
        );
        // equal speeds, a unit apart: nothing moves (no churn)
        let mut even = agent(1);
        even.begin(0, 8);
        even.on_own_unit_done(100);
        let ahead = ControlKind::Progress {
            done: 2,
            total: 8,
            unit_us: 100,
        };
        assert!(even.on_message(2, &ahead, 7).is_empty());
    }

    /// Before its first unit ends, a worker knows only that the unit in
    /// flight has run this long: 2000 µs against a peer's 100 is slow enough
    /// to give, and with a unit in flight it may give its whole list.
    #[test]
    fn a_unit_in_flight_says_how_slow_a_worker_is() {
        let offer = ControlKind::Offer { unit_us: 100 };
        let given = |running_us| {
            let mut w = agent(1);
            w.begin(0, 8);
            w.on_running(Some(running_us));
            assigned(&w.on_message(3, &offer, 7), 3)
        };
        // 50 µs in, it may be faster than the helper: it keeps 3 and the 3
        // helpers share 4; 2000 µs in, it is 20× slower: it keeps none and
        // each of the 3 helpers gets a third
        assert_eq!(given(50), 2);
        assert_eq!(given(2000), 3);
        // everything may go while a unit is in flight; nothing without one
        let mut last = agent(1);
        last.begin(0, 2);
        last.on_own_unit_done(5000);
        last.on_running(Some(100));
        assert_eq!(
            last.on_message(3, &offer, 1),
            vec![(3, ControlKind::Assign { count: 1 })]
        );
        last.on_running(None);
        assert_eq!(
            last.on_message(3, &offer, 1),
            vec![(3, ControlKind::Decline)]
        );
    }

    /// Units given away stop counting as the giver's own, so its report at
    /// the end still comes once it has done what it kept.
    #[test]
    fn units_given_away_leave_the_giver_s_total() {
        let mut slow = agent(1);
        slow.begin(0, 8);
        slow.on_own_unit_done(500);
        let offer = ControlKind::Offer { unit_us: 100 };
        let given = assigned(&slow.on_message(3, &offer, 7), 3);
        let kept = 7 - given;
        let mut reports = Vec::new();
        for _ in 0..kept {
            reports = slow.on_own_unit_done(500);
        }
        assert!(
            reports.iter().any(|(_, k)| matches!(
                k,
                ControlKind::Progress { done, total, .. } if done == total
            )),
            "the end report after {kept} kept units: {reports:?}"
        );
    }

    /// A worker as fast as the reporter but with more work (a stale plan)
    /// may be one of many givers: it gives its part, the group's peers not
    /// heard from counted as givers too; a straggler gives its whole share.
    #[test]
    fn a_loaded_worker_gives_its_part_a_straggler_all_of_its_share() {
        let ahead = ControlKind::Progress {
            done: 3,
            total: 4,
            unit_us: 100,
        };
        let mut loaded = agent(1);
        loaded.begin(0, 30);
        loaded.on_own_unit_done(100);
        let part = assigned(&loaded.on_message(2, &ahead, 29), 2);
        let mut straggler = agent(1);
        straggler.begin(0, 30);
        straggler.on_own_unit_done(500);
        let whole = assigned(&straggler.on_message(2, &ahead, 29), 2);
        assert!(part >= 1 && part < whole, "part {part}, whole {whole}");
    }

    /// A peer slower per unit than all our work left takes nothing.
    #[test]
    fn an_offer_from_a_slower_peer_is_declined() {
        let mut w = agent(1);
        w.begin(0, 8);
        w.on_own_unit_done(100);
        let slow_offer = ControlKind::Offer { unit_us: 900 };
        assert_eq!(
            w.on_message(3, &slow_offer, 5),
            vec![(3, ControlKind::Decline)]
        );
    }

    #[test]
    fn a_slow_worker_keeps_its_last_unit_and_a_peer_behind_gets_nothing() {
        let mut slow = agent(1);
        slow.begin(0, 8);
        slow.on_own_unit_done(500);
        let done = ControlKind::Progress {
            done: 8,
            total: 8,
            unit_us: 100,
        };
        assert!(slow.on_message(3, &done, 1).is_empty());
        let offer = ControlKind::Offer { unit_us: 100 };
        assert_eq!(
            slow.on_message(3, &offer, 1),
            vec![(3, ControlKind::Decline)]
        );
        // 3 idle helpers, 10 left at 5× the time: T = 10 / (1/500 + 3/100) = 312.5,
        // each helper takes 3.1 → 3
        assert_eq!(
            slow.on_message(3, &offer, 10),
            vec![(3, ControlKind::Assign { count: 3 })]
        );
        let mut fast = agent(2);
        fast.begin(0, 8);
        for _ in 0..7 {
            fast.on_own_unit_done(100);
        }
        let behind = ControlKind::Progress {
            done: 1,
            total: 8,
            unit_us: 500,
        };
        assert!(fast.on_message(1, &behind, 1).is_empty());
    }

    #[test]
    fn an_idle_helper_offers_to_the_peer_furthest_behind_one_at_a_time() {
        let p = |done| ControlKind::Progress {
            done,
            total: 8,
            unit_us: 100,
        };
        let mut h = agent(0);
        h.begin(0, 2);
        h.on_own_unit_done(100);
        h.on_own_unit_done(100);
        h.on_message(1, &p(6), 0);
        h.on_message(3, &p(2), 0);
        h.on_message(2, &p(8), 0);
        let offer = ControlKind::Offer { unit_us: 100 };
        assert_eq!(h.on_idle(100, 0), vec![(3, 0, offer.clone())]);
        assert!(h.on_idle(100, 0).is_empty(), "one outstanding offer");
        h.on_message(3, &ControlKind::Decline, 0);
        assert_eq!(h.on_idle(100, 0), vec![(1, 0, offer.clone())]);
        h.on_message(1, &ControlKind::Assign { count: 1 }, 0);
        assert_eq!(h.on_idle(100, 0), vec![(1, 0, offer)]);
    }

    /// Under SSP a helper in iteration 5 that is blocked offers help with the
    /// oldest open iteration, 4, to the peer that reported being behind there.
    #[test]
    fn a_helper_ahead_offers_help_with_the_oldest_open_iteration() {
        let mut h = agent(0);
        h.begin(4, 2);
        h.on_own_unit_done(100);
        h.on_own_unit_done(100);
        h.on_message(
            3,
            &ControlKind::Progress {
                done: 1,
                total: 8,
                unit_us: 500,
            },
            0,
        );
        h.begin(5, 2);
        h.on_own_unit_done(100);
        h.on_own_unit_done(100);
        h.note_progress(4, 2, 8, 8);
        let offer = ControlKind::Offer { unit_us: 100 };
        assert_eq!(h.on_idle(100, 4), vec![(3, 4, offer.clone())]);
        h.on_reply(4, 3, &ControlKind::Decline);
        assert!(h.on_idle(100, 4).is_empty(), "nobody else is behind");
        // once iteration 4 is reduced it is no longer offered
        assert!(h.on_idle(100, 5).is_empty());
        // and once the current one is reduced (the worker waits to begin the
        // next), there is nothing to offer at all
        assert!(h.on_idle(100, 6).is_empty());
    }
}
