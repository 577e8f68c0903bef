//! `forestall`'s broker: one balance over all workers early in an iteration.
//!
//! Helper groups see only their neighbours: at hundreds of workers a group
//! with two stragglers in it is buried in their units while workers a few
//! groups away sit idle. So under `forestall` every worker also tells worker 0
//! its **pace** once per iteration, right after its first own unit (how many
//! units are in its own list, how many wait ahead of them, its time per unit
//! now and in the iteration before; or that it is idle, if it went idle
//! first). When every worker's pace
//! is in (or most are, and the others have had a first unit in flight for
//! [`PATIENCE`] median first units, by worker 0's timer: see [`QUORUM`]),
//! worker 0 balances the
//! whole iteration at once ([`balance_moves`]:
//! each worker as it stands, extrapolated from its pace to now) and tells
//! each giver whom to **give** how many units. The giver hands them over as an
//! ordinary assignment (units leave its list before the message, so each unit
//! still changes hands once); what the balance missed, the helper groups
//! mend. W − 1 paces an iteration (a few more from workers handed units
//! before the balance) and an order per move, all through one worker: the
//! price of seeing everyone.

use serde::{Deserialize, Serialize};

use super::proactive::{balance_moves, Load, Move};

/// Paces within this factor of the median are taken at the median (noise
/// at this sampling), and a peer slower than this is slowed (it gets no
/// gifts under the broker): the helper groups even out small differences.
pub const SLOW_PACE: f64 = 1.5;

/// A worker is taken for a straggler at its first unit's pace only when
/// that unit took this many times its usual pace (and that much more than
/// the median first unit): one unit is one sample, and the start of an
/// iteration is when workers of a shared machine start together; a first
/// unit 1.5–2× slow was, in the `bsp` traces of `policies-bound`, as often
/// a worker starting late as a slow one, and units moved on it came back.
/// Slower than this, a worker is slow; the helper groups mend the rest.
pub const STRAGGLER_PACE: f64 = 2.0;

/// The broker balances without waiting for every pace once this share of
/// them is in...
pub const QUORUM: f64 = 7.0 / 8.0;
/// ...and this many median first units have passed: a worker whose first
/// unit has run that long is a straggler, and waiting for its pace (a 5×
/// slow worker's first unit, a worker the machine scheduled late) kept the
/// balance from the workers that could have taken its units meanwhile.
///
/// Worker 0 keeps a timer for it ([`Broker::due_at`]): with a few heavy
/// units a worker, waiting for the next pace to arrive (a 5× slow worker's
/// own, at five first units) left the others to finish their lists before
/// they were handed anything (the what-if replay of 4 units a worker at
/// W = 1,000, slow-worker 400 %: 1.44× the fluid bound, 1.17–1.20× with
/// the timer). A worker not heard from by then is taken for twice as slow
/// as its first unit has run so far (see `fill_missing`): taken for only as
/// slow as that, a 5× slow worker kept more units than it could do in time,
/// which cost workers of many light units more than the timer gained them.
pub const PATIENCE: u64 = 3;

/// A worker's pace as it reports it to the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pace {
    /// Own units still in its list.
    pub left: u32,
    /// Units waiting ahead of them (peers' units, planned units that came
    /// with their rows).
    pub queued: u32,
    /// Its time per unit so far, µs (0: it has computed none).
    pub unit_us: u64,
    /// Time since it began the iteration, µs, when it sent this.
    pub elapsed_us: u64,
    /// Its mean time per unit in the iteration before, µs (0: none): a
    /// steadier pace than one unit, which may include warming up.
    pub usual_us: u64,
    /// How long its unit in flight had run when it sent this, µs (None:
    /// none in flight; a pace sent as peers hand it units comes mid-unit).
    #[serde(default)]
    pub running_us: Option<u64>,
}

/// Worker 0's side: the paces heard this iteration and whether it balanced.
#[derive(Debug, Clone)]
pub struct Broker {
    /// (when it arrived, µs, the pace), by worker.
    paces: Vec<Option<(u64, Pace)>>,
    heard: usize,
    balanced: bool,
    min_gain: f64,
    /// When worker 0 began the iteration, µs.
    started_us: u64,
    /// Every worker's units at the iteration's start, when known (see
    /// [`Broker::expect`]).
    lists: Vec<u32>,
    /// Micro-batches a unit it moves may be cut into (1: units move
    /// whole): set when the policy hands tails over and units have more
    /// than two micro-batches. It then balances micro-batches, and its
    /// moves count them: a giver hands over whole units and the tail of
    /// one more (see `ReassignAgent::ordered`). Receivers among equal
    /// finish times are then spread over the ring (see [`balance_moves`]):
    /// idle neighbours are what takes the tails.
    pub micro: u32,
    /// The first units of the paces heard (those above 0), sorted, kept up
    /// to date once a quorum is in: the median the patience is measured in,
    /// read at every pace from then on, without sorting them all again.
    firsts: Option<Vec<u64>>,
}

impl Broker {
    /// A broker for `workers` workers; a move must gain more than
    /// `min_gain` of the receiver's unit.
    pub fn new(workers: u32, min_gain: f64) -> Self {
        Self {
            paces: vec![None; workers as usize],
            heard: 0,
            balanced: false,
            min_gain,
            started_us: 0,
            lists: Vec::new(),
            micro: 1,
            firsts: None,
        }
    }

    /// A new iteration, begun at `now_us`: nothing heard yet, no lists
    /// known.
    pub fn begin(&mut self, now_us: u64) {
        self.paces.iter_mut().for_each(|p| *p = None);
        self.heard = 0;
        self.balanced = false;
        self.started_us = now_us;
        self.lists.clear();
        if let Some(firsts) = self.firsts.as_mut() {
            firsts.clear();
        }
    }

    /// Every worker's units at the iteration's start (its own after the
    /// plan's moves, by worker): a worker not heard from when the broker
    /// balances holds its list less the unit in flight. Without them the
    /// broker takes it to hold the median list of those heard from, which
    /// a plan that moved units off it makes too long: the broker then
    /// orders a slow worker to give units it no longer has, and what it
    /// does give leaves it idle early, to be handed units back at its slow
    /// pace.
    pub fn expect(&mut self, lists: Vec<u32>) {
        self.lists = lists;
    }

    /// `worker`'s pace arrived at `now_us` (a later one, before the balance,
    /// replaces its first: it was handed units meanwhile); once every
    /// worker's is in, the moves that balance the iteration.
    pub fn on_pace(&mut self, worker: u32, pace: Pace, now_us: u64) -> Vec<Move> {
        if self.balanced {
            return Vec::new();
        }
        let Some(slot) = self.paces.get_mut(worker as usize) else {
            return Vec::new();
        };
        let before = slot.map(|(_, p)| p.unit_us);
        if slot.is_none() {
            self.heard += 1;
        }
        *slot = Some((now_us, pace));
        self.firsts_replace(before, pace.unit_us);
        self.balance_if_due(now_us)
    }

    /// When the broker means to balance without the paces still missing
    /// ([`PATIENCE`] median first units after worker 0 began, once a
    /// [`QUORUM`] is in), if it has not balanced yet: worker 0 calls
    /// [`Broker::on_time`] then, whether or not a pace arrives, so a
    /// straggler's units do not wait for its own late pace.
    pub fn due_at(&mut self) -> Option<u64> {
        if self.balanced || (self.heard as f64) < QUORUM * self.paces.len() as f64 {
            return None;
        }
        let first = self.median_first_unit();
        (first > 0).then(|| self.started_us + PATIENCE * first)
    }

    /// The time has come, at `now_us`: the moves that balance the iteration,
    /// if the broker may balance now (see [`Broker::due_at`]).
    pub fn on_time(&mut self, now_us: u64) -> Vec<Move> {
        if self.balanced {
            return Vec::new();
        }
        self.balance_if_due(now_us)
    }

    /// The balance, once every pace is in or the broker has waited long
    /// enough for the missing ones.
    fn balance_if_due(&mut self, now_us: u64) -> Vec<Move> {
        if self.heard < self.paces.len() {
            if !self.waited_long_enough(now_us) {
                return Vec::new();
            }
            self.fill_missing(now_us);
        }
        self.balanced = true;
        balance_now(
            &self.paces,
            self.started_us,
            now_us,
            (self.min_gain, self.micro),
        )
    }
}

impl Broker {
    /// Whether it may balance without every pace: [`QUORUM`] of them are in
    /// and [`PATIENCE`] median first units have passed since worker 0
    /// began, so a worker not heard from yet has had a first unit in flight
    /// that long.
    fn waited_long_enough(&mut self, now_us: u64) -> bool {
        let n = self.paces.len() as f64;
        if (self.heard as f64) < QUORUM * n {
            return false;
        }
        let first = self.median_first_unit();
        first > 0 && now_us.saturating_sub(self.started_us) >= PATIENCE * first
    }

    /// [`median_first_unit`] of the paces heard, from the sorted first
    /// units (sorted now if they are not kept yet).
    fn median_first_unit(&mut self) -> u64 {
        let paces = &self.paces;
        let firsts = self.firsts.get_or_insert_with(Vec::new);
        if firsts.is_empty() {
            firsts.extend(paces.iter().flatten().map(|(_, p)| p.unit_us));
            firsts.retain(|&t| t > 0);
            firsts.sort_unstable();
        }
        firsts
            .get(firsts.len().saturating_sub(1) / 2)
            .copied()
            .unwrap_or(0)
    }

    /// A worker's first unit was `before` (None: not heard) and is
    /// `after`: the sorted first units, if kept, follow.
    fn firsts_replace(&mut self, before: Option<u64>, after: u64) {
        let Some(firsts) = self.firsts.as_mut().filter(|f| !f.is_empty()) else {
            return;
        };
        if let Some(t) = before.filter(|&t| t > 0) {
            if let Ok(i) = firsts.binary_search(&t) {
                firsts.remove(i);
            }
        }
        if after > 0 {
            let i = firsts.partition_point(|&t| t < after);
            firsts.insert(i, after);
        }
    }

    /// The workers not heard from, as the balance takes them: a first unit in
    /// flight since the iteration began, taken to end after twice that, and
    /// the rest of the list it began with, or, not knowing it, the median
    /// list of those heard from.
    fn fill_missing(&mut self, now_us: u64) {
        let elapsed = now_us.saturating_sub(self.started_us);
        let left = lower_median(
            self.paces
                .iter()
                .flatten()
                .map(|(_, p)| p.left + p.queued)
                .collect(),
            u32::cmp,
        )
        .unwrap_or(0);
        for (w, slot) in self.paces.iter_mut().enumerate() {
            if slot.is_some() {
                continue;
            }
            let left = self
                .lists
                .get(w)
                .map_or(left, |&units| units.saturating_sub(1));
            // A unit seen in flight for `elapsed` is, for all anyone knows,
            // halfway: taken as that slow, the worker would keep units it
            // cannot do in time (a 5× slow worker seen at 3× kept a third
            // more than its share), and the list it has after that unit
            // starts only when that unit ends, as if its pace came then.
            let unit_us = 2 * elapsed;
            *slot = Some(match self.micro {
                1 => (
                    self.started_us + unit_us,
                    Pace {
                        left,
                        queued: 0,
                        unit_us,
                        elapsed_us: unit_us,
                        usual_us: 0,
                        running_us: None,
                    },
                ),
                // Balanced in micro-batches, the unit in flight is part of
                // its load (halfway, at that pace): its micro-batches not
                // begun may go as its tail.
                _ => (
                    self.started_us,
                    Pace {
                        left: left + 1,
                        queued: 0,
                        unit_us,
                        elapsed_us: 0,
                        usual_us: 0,
                        running_us: None,
                    },
                ),
            });
        }
    }
}

/// The balance of the reported paces at `now_us`, worker 0 having begun the
/// iteration at `started_us`: each worker has done, since its report, as many
/// units as its pace allows (peers' units first), and cannot start a unit
/// given to it before the order and the units have travelled (two messages'
/// time, estimated as the median of how much later than sent, had every
/// worker begun with worker 0, the paces arrived); only workers expected to
/// finish two of their units after the median give.
fn balance_now(
    paces: &[Option<(u64, Pace)>],
    started_us: u64,
    now_us: u64,
    (min_gain, micro): (f64, u32),
) -> Vec<Move> {
    let mut delays: Vec<u64> = paces
        .iter()
        .flatten()
        .map(|&(at, p)| at.saturating_sub(started_us + p.elapsed_us))
        .collect();
    let middle = delays.len() / 2;
    let latency = if delays.is_empty() {
        0
    } else {
        *delays.select_nth_unstable(middle).1
    };
    let free = (now_us + 2 * latency) as f64;
    // The first units of an iteration share its start (parameters
    // arriving, every worker starting at once): a worker is a straggler when
    // its first unit is over `STRAGGLER_PACE` times its usual pace (the iteration
    // before) and slower than the median first unit by that much more, not
    // when its first unit is slow like everyone's.
    let first = median_first_unit(paces);
    // A straggler runs at its first unit's pace, every other worker at the
    // faster of its usual one and its first unit's (one noisy unit
    // extrapolated over a whole list would unbalance them, and a worker slow
    // in the iteration before may be fast again; a worker that computed
    // nothing yet runs at the median first unit's)...
    let paced: Vec<(bool, f64)> = paces
        .iter()
        .flatten()
        .map(|&(_, pace)| {
            let usual = [pace.usual_us, pace.unit_us, first]
                .into_iter()
                .find(|&t| t > 0)
                .unwrap_or(0) as f64;
            let own = pace.unit_us as f64;
            let straggler =
                own > STRAGGLER_PACE * usual && own > first as f64 + (STRAGGLER_PACE - 1.0) * usual;
            let t = if straggler {
                own
            } else if own > 0.0 {
                own.min(usual)
            } else {
                usual
            };
            (straggler, t)
        })
        .collect();
    // ...and those within `SLOW_PACE` of the median pace all at the median:
    // that close, a pace is noise at this sampling (a usual pace is one
    // iteration's, its tail included), a unit moved on noise costs its
    // receiver a whole unit, and what differs for long the plan learns from
    // whole iterations. A worker slow in the iteration before and slow
    // still (its first unit no slower than its usual pace) keeps its own.
    let common = lower_median(
        paced.iter().filter(|p| p.1 > 0.0).map(|p| p.1).collect(),
        f64::total_cmp,
    )
    .unwrap_or(0.0);
    let mut loads = Vec::with_capacity(paces.len());
    let mut unit_us = Vec::with_capacity(paces.len());
    for (&(at, pace), &(straggler, t)) in paces.iter().flatten().zip(&paced) {
        let t = if !straggler && t > 0.0 && t <= SLOW_PACE * common {
            common
        } else {
            t
        };
        // In micro-batches when units may be cut: a quantum of work.
        let quanta = f64::from(micro);
        let t = t / quanta;
        // Its state when it sent the pace, by worker 0's clock: in
        // micro-batches, with the unit it had in flight (begun that long
        // before, ahead of its list, as if queued; a pace sent as units
        // are handed to it comes mid-unit).
        let running = pace.running_us.filter(|_| micro > 1);
        let sent = (at.saturating_sub(latency)).saturating_sub(running.unwrap_or(0));
        let ahead = (pace.queued + u32::from(running.is_some())) * micro;
        let since = if t > 0.0 {
            (now_us.saturating_sub(sent) as f64 / t).floor() as u32
        } else {
            0
        };
        // The units still to do began when the ones done since the report
        // ended; a worker through them all is free from now.
        let units = (pace.left * micro + ahead).saturating_sub(since);
        let began = sent as f64 + f64::from(since) * t;
        loads.push(Load {
            start_us: began.max(free - f64::from(units) * t),
            units,
            givable: (pace.left * micro).saturating_sub(since.saturating_sub(ahead)),
            keep: 0,
        });
        unit_us.push((t > 0.0).then_some(t));
    }
    // Only a worker expected to finish well after the median (two units)
    // gives: slow, or holding more than its share...
    let finish = |l: &Load, t: Option<f64>| l.start_us + f64::from(l.units) * t.unwrap_or(0.0);
    let median_finish = lower_median(
        loads
            .iter()
            .zip(&unit_us)
            .map(|(l, &t)| finish(l, t))
            .collect(),
        f64::total_cmp,
    )
    .unwrap_or(0.0);
    // ...or after a fluid balance's finish (every worker busy until the same
    // time), when that is earlier: when most workers hold more than their
    // share (a plan that moved units off workers that have recovered), the
    // median is one of them, and the few with too little would otherwise
    // wait to offer help until their list ran out.
    let (rate, work) = loads
        .iter()
        .zip(&unit_us)
        .filter_map(|(l, t)| t.map(|t| (1.0 / t, l.start_us / t + f64::from(l.units))))
        .fold((0.0, 0.0), |(r, w), (dr, dw)| (r + dr, w + dw));
    let reference = if rate > 0.0 {
        median_finish.min(work / rate)
    } else {
        median_finish
    };
    for ((l, &t), &(straggler, _)) in loads.iter_mut().zip(&unit_us).zip(&paced) {
        // Two units at the common pace for a straggler: two of its own are
        // ten of the others' at 5× slow, and a straggler reporting late (a
        // first unit 5 median units long, the quorum reached only with it)
        // with two units left kept both, ending 10 units after the rest.
        // (in micro-batches, two of those: what a receiver then ends late by)
        let unit = match (straggler, t) {
            (true, _) if common > 0.0 => common / f64::from(micro),
            (_, t) => t.unwrap_or(0.0),
        };
        if finish(l, t) <= reference + 2.0 * unit {
            l.givable = 0;
        }
    }
    balance_moves(&loads, &unit_us, min_gain, micro > 1)
}

/// The (lower) median time per unit of the paces heard, µs (0: none).
fn median_first_unit(paces: &[Option<(u64, Pace)>]) -> u64 {
    lower_median(
        paces
            .iter()
            .flatten()
            .map(|(_, p)| p.unit_us)
            .filter(|&t| t > 0)
            .collect(),
        u64::cmp,
    )
    .unwrap_or(0)
}

/// The lower median of `values` in the order `cmp` (None when empty).
fn lower_median<T: Copy>(
    mut values: Vec<T>,
    cmp: impl Fn(&T, &T) -> std::cmp::Ordering,
) -> Option<T> {
    if values.is_empty() {
        return None;
    }
    // The element a sort would put there (`cmp` is a total order: what it
    // takes for equal is the same value).
    let k = (values.len() - 1) / 2;
    Some(*values.select_nth_unstable_by(k, cmp).1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pace sent at `at` by a worker that began with worker 0 at 0 and
    /// arrived at once.
    fn pace(left: u32, unit_us: u64, at: u64) -> Pace {
        Pace {
            left,
            queued: 0,
            unit_us,
            elapsed_us: at,
            usual_us: 0,
            running_us: None,
        }
    }

    /// A first unit of `unit_us` ended at that time, 20 units left, by a
    /// worker whose pace in the iteration before was `usual_us`.
    fn paced_at(unit_us: u64, usual_us: u64) -> Pace {
        Pace {
            left: 20,
            queued: 0,
            unit_us,
            elapsed_us: unit_us,
            usual_us,
            running_us: None,
        }
    }

    /// 64 workers at 100 µs a unit with 2 units left, worker 0 at 500 µs
    /// with 3: what it gives goes to the workers that would end first, all
    /// alike here. Whole units go to the lowest indices, one each; units
    /// that may be cut (8 micro-batches) move as micro-batches, one each to
    /// receivers spread over the ring, so none ends a whole unit late.
    #[test]
    fn units_that_may_be_cut_move_as_micro_batches_spread_over_the_ring() {
        let moves = |micro: u32| {
            let mut broker = Broker::new(64, 0.5);
            broker.micro = micro;
            for w in 1..64 {
                assert!(broker.on_pace(w, pace(2, 100, 100), 100).is_empty());
            }
            let moves = broker.on_pace(0, pace(3, 500, 500), 500);
            assert!(moves.iter().all(|m| m.from == 0), "{moves:?}");
            moves
        };
        let whole = moves(1);
        assert!(whole.iter().all(|m| m.count == 1), "{whole:?}");
        let to: Vec<u32> = whole.iter().map(|m| m.to).collect();
        assert_eq!(to, [1, 2, 3]);
        let cut = moves(8);
        assert!(cut.iter().all(|m| m.count == 1), "{cut:?}");
        let to: Vec<u32> = cut.iter().map(|m| m.to).collect();
        assert_eq!(to.len(), 24, "all of its 3 units: {to:?}");
        let span = to.iter().max().unwrap_or(&0) - to.iter().min().unwrap_or(&0);
        assert!(span as usize > to.len(), "spread over the ring: {to:?}");
    }

    /// A broker of 4 workers that heard workers 0–2 at their usual pace of
    /// 100 µs a unit (nothing to move yet): worker 3's pace decides.
    fn three_at_the_usual_pace() -> Broker {
        let mut broker = Broker::new(4, 0.5);
        for w in 0..3 {
            assert!(broker.on_pace(w, paced_at(100, 100), 100).is_empty());
        }
        broker
    }

    #[test]
    fn the_last_pace_balances_a_slow_worker_across_every_fast_one() {
        let mut broker = Broker::new(9, 0.5);
        for w in 0..8 {
            assert!(broker.on_pace(w, pace(15, 100, 200), 200).is_empty());
        }
        // Worker 8 is five times slower: 15 units left at 500 µs.
        let moves = broker.on_pace(8, pace(15, 500, 600), 600);
        assert!(moves.iter().all(|m| m.from == 8), "{moves:?}");
        let given: u32 = moves.iter().map(|m| m.count).sum();
        // Fast workers finish their own at 1700 µs; the slow one's 15 units
        // end at 8100 µs alone. Balanced, it keeps about a fifth of a fast
        // worker's share.
        assert!((11..=14).contains(&given), "{moves:?}");
        assert!(moves.iter().all(|m| m.count <= 2), "{moves:?}");
        // Balanced once: a later pace changes nothing.
        assert!(broker.on_pace(8, pace(1, 500, 700), 700).is_empty());
    }

    #[test]
    fn even_paces_move_nothing_and_a_new_iteration_starts_afresh() {
        let mut broker = Broker::new(4, 0.5);
        for w in 0..4 {
            assert!(broker.on_pace(w, pace(10, 100, 100), 100).is_empty());
        }
        broker.begin(0);
        for w in 0..3 {
            assert!(broker.on_pace(w, pace(10, 100, 100), 100).is_empty());
        }
        assert!(!broker.on_pace(3, pace(10, 1_000, 1_000), 1_000).is_empty());
    }

    #[test]
    fn a_worker_that_went_idle_first_takes_work_and_gives_none() {
        let mut broker = Broker::new(3, 0.5);
        assert!(broker.on_pace(0, pace(0, 0, 50), 50).is_empty());
        assert!(broker.on_pace(1, pace(9, 100, 100), 100).is_empty());
        let moves = broker.on_pace(2, pace(9, 400, 400), 400);
        assert!(moves.iter().all(|m| m.from == 2 && m.to != 2), "{moves:?}");
        assert!(!moves.is_empty());
    }

    #[test]
    fn a_pace_sent_again_before_the_balance_replaces_the_first() {
        // Worker 1 first reports an empty list, then that it was handed 20
        // units: the balance sees the 20 and sends nothing its way.
        let mut broker = Broker::new(3, 0.5);
        assert!(broker.on_pace(1, pace(0, 100, 100), 100).is_empty());
        let loaded = Pace {
            left: 0,
            queued: 20,
            unit_us: 100,
            elapsed_us: 200,
            usual_us: 0,
            running_us: None,
        };
        assert!(broker.on_pace(1, loaded, 200).is_empty());
        assert!(broker.on_pace(0, pace(10, 100, 200), 200).is_empty());
        let moves = broker.on_pace(2, pace(10, 500, 500), 500);
        assert!(moves.iter().all(|m| m.to != 1), "{moves:?}");
        assert!(!moves.is_empty(), "worker 2 still gives to worker 0");
    }

    /// Every first unit slow alike (the iteration's start shared by all) is
    /// no straggler; a worker slow in the iteration before and fast again is
    /// taken at its first unit's pace; one persistently slow, at its usual.
    #[test]
    fn first_units_slow_alike_make_no_straggler() {
        let mut broker = Broker::new(4, 0.5);
        for (w, p) in [
            (0, paced_at(400, 100)),
            (1, paced_at(380, 100)),
            (2, paced_at(420, 100)),
        ] {
            assert!(broker.on_pace(w, p, p.unit_us).is_empty());
        }
        let moves = broker.on_pace(3, paced_at(390, 100), 420);
        assert!(moves.is_empty(), "{moves:?}");
        // Worker 3 was slow before (usual 500) and is fast now; worker 1 is
        // persistently slow (usual and first unit 500): worker 1 gives, to
        // the others, and worker 3 is not taken for a straggler.
        let mut broker = Broker::new(4, 0.5);
        for (w, p) in [
            (0, paced_at(100, 100)),
            (1, paced_at(500, 500)),
            (2, paced_at(100, 100)),
        ] {
            assert!(broker.on_pace(w, p, p.unit_us).is_empty());
        }
        let moves = broker.on_pace(3, paced_at(100, 500), 500);
        assert!(!moves.is_empty());
        assert!(moves.iter().all(|m| m.from == 1), "{moves:?}");
    }

    /// A first unit 1.7× the usual pace (a worker that started late) is no
    /// straggler's; 2.5× is.
    #[test]
    fn a_first_unit_under_twice_the_usual_pace_is_no_straggler() {
        for (first, moves) in [(170, false), (250, true)] {
            let mut broker = three_at_the_usual_pace();
            let out = broker.on_pace(3, paced_at(first, 100), first);
            assert_eq!(!out.is_empty(), moves, "{first}: {out:?}");
            assert!(out.iter().all(|m| m.from == 3), "{out:?}");
        }
    }

    /// A straggler heard last, two units left at 5× the others' pace, gives
    /// them away though two of its own units would be ten of theirs: the
    /// margin for finishing late is two units at the common pace.
    #[test]
    fn a_straggler_heard_last_gives_its_last_two_units() {
        let mut broker = Broker::new(8, 0.5);
        // Seven at 1,000 µs a unit, their 4 units done by 4,000 µs.
        for w in 0..7 {
            assert!(broker.on_pace(w, pace(3, 1_000, 1_000), 1_000).is_empty());
        }
        // Worker 7's first unit took 5,000 µs (1,000 in the iteration before).
        let slow = Pace {
            usual_us: 1_000,
            ..pace(2, 5_000, 5_000)
        };
        let moves = broker.on_pace(7, slow, 5_000);
        assert!(moves.iter().all(|m| m.from == 7), "{moves:?}");
        let given: u32 = moves.iter().map(|m| m.count).sum();
        assert_eq!(given, 2, "both go to idle peers: {moves:?}");
    }

    /// Paces within `SLOW_PACE` of the median are noise: a worker whose
    /// usual pace is a quarter slower (one iteration's tail) would, taken at
    /// its own pace, finish 5 of its 20 units late and give; at the common
    /// pace nobody does. A straggler beyond the band still gives.
    #[test]
    fn paces_near_the_median_are_taken_alike() {
        let mut broker = three_at_the_usual_pace();
        let moves = broker.on_pace(3, paced_at(130, 125), 130);
        assert!(moves.is_empty(), "{moves:?}");
        let mut broker = three_at_the_usual_pace();
        let moves = broker.on_pace(3, paced_at(400, 100), 400);
        assert!(!moves.is_empty());
        assert!(moves.iter().all(|m| m.from == 3), "{moves:?}");
    }

    /// A plan moved 18 units off worker 0, which has recovered: it holds 6
    /// at the common pace while the other 7 hold 26 or 27. The median
    /// finish is a loaded worker's, so against it nobody is late; against
    /// the fluid balance (24 units each) the loaded ones are, and give
    /// worker 0 back about what it can do by then.
    #[test]
    fn most_workers_over_their_share_give_to_the_few_under_it() {
        let mut broker = Broker::new(8, 0.5);
        let lefts = [5, 26, 26, 26, 25, 25, 25, 25];
        for (w, &left) in lefts.iter().enumerate().skip(1) {
            assert!(broker
                .on_pace(w as u32, pace(left, 100, 100), 100)
                .is_empty());
        }
        let moves = broker.on_pace(0, pace(lefts[0], 100, 100), 100);
        assert!(moves.iter().all(|m| m.to == 0), "{moves:?}");
        let given: u32 = moves.iter().map(|m| m.count).sum();
        // 203 units left over 8 workers: about 25 each, so worker 0 takes
        // about 20 of them.
        assert!((15..=20).contains(&given), "{moves:?}");
    }

    #[test]
    fn units_done_since_the_report_cannot_be_given() {
        // Worker 0 reported 3 units left at 100 µs per unit, 1,000 µs ago: it
        // has finished them and gives nothing.
        let mut broker = Broker::new(2, 0.5);
        assert!(broker.on_pace(0, pace(3, 100, 0), 0).is_empty());
        let moves = broker.on_pace(1, pace(0, 0, 1_000), 1_000);
        assert!(moves.is_empty(), "{moves:?}");
    }

    /// With a quorum in, the broker names its time; at that time it
    /// balances without the paces missing, taking each missing worker for
    /// twice as slow as its first unit has run: it keeps none of its list,
    /// which it could not finish before the others.
    #[test]
    fn the_timer_balances_without_the_missing_paces() {
        let mut broker = Broker::new(16, 0.5);
        broker.begin(0);
        assert_eq!(broker.due_at(), None);
        for w in 0..13 {
            assert!(broker.on_pace(w, pace(7, 100, 100), 100).is_empty());
        }
        assert_eq!(broker.due_at(), None, "13 of 16 is no quorum");
        assert!(broker.on_pace(13, pace(7, 100, 100), 100).is_empty());
        assert_eq!(broker.due_at(), Some(300));
        assert!(broker.on_time(299).is_empty());
        let moves = broker.on_time(300);
        for from in [14, 15] {
            let given: u32 = moves
                .iter()
                .filter(|m| m.from == from)
                .map(|m| m.count)
                .sum();
            assert_eq!(given, 7, "{moves:?}");
        }
        assert!(moves.iter().all(|m| m.from >= 14), "{moves:?}");
        assert_eq!(broker.due_at(), None, "balanced once");
        assert!(broker.on_time(400).is_empty());
        assert!(broker.on_pace(15, pace(7, 500, 500), 500).is_empty());
    }

    #[test]
    fn most_paces_and_a_long_wait_balance_without_the_last() {
        // 16 workers; 14 report 7 units left at 100 µs a unit, at 100 µs.
        let mut broker = Broker::new(16, 0.5);
        for w in 0..14 {
            assert!(broker.on_pace(w, pace(7, 100, 100), 100).is_empty());
        }
        // A 15th at 200 µs: enough paces, not yet three first units.
        assert!(broker.on_pace(14, pace(6, 100, 200), 200).is_empty());
        // Worker 14 again at 350 µs (handed units meanwhile): worker 15's
        // first unit has run 3.5 of the others' by now; it is taken as that
        // slow, with 7 units in its list, and gives.
        let moves = broker.on_pace(14, pace(6, 100, 350), 350);
        assert!(!moves.is_empty());
        assert!(moves.iter().all(|m| m.from == 15), "{moves:?}");
        // Balanced once: its own pace, late, changes nothing.
        assert!(broker.on_pace(15, pace(7, 400, 400), 400).is_empty());
        // Told the lists the iteration began with, it takes a worker not
        // heard from to hold its own: one a plan left 3 units gives at most
        // the 2 not in flight.
        let mut planned = Broker::new(16, 0.5);
        let mut lists = vec![8; 16];
        lists[15] = 3;
        planned.expect(lists);
        for w in 0..14 {
            assert!(planned.on_pace(w, pace(7, 100, 100), 100).is_empty());
        }
        assert!(planned.on_pace(14, pace(6, 100, 200), 200).is_empty());
        let moves = planned.on_pace(14, pace(6, 100, 350), 350);
        let given: u32 = moves.iter().map(|m| m.count).sum();
        assert!(given <= 2, "{moves:?}");
        // A new iteration forgets them.
        planned.begin(0);
        assert!(planned.lists.is_empty());
        // Too few paces: no balance however long it waits.
        let mut few = Broker::new(16, 0.5);
        for w in 0..13 {
            assert!(few
                .on_pace(
                    w,
                    pace(7, 100, 100 + u64::from(w) * 100),
                    100 + u64::from(w) * 100
                )
                .is_empty());
        }
    }
}
