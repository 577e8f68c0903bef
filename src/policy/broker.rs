//! `forestall`'s broker: one balance over all workers early in an iteration.
//!
//! Helper groups see only their neighbours: at hundreds of workers a group
//! with two stragglers in it is buried in their units while workers a few
//! groups away sit idle. So under `forestall` every worker also tells worker 0
//! its **pace** once per iteration, right after its first own unit (how many
//! own units are left, how many peers' units wait ahead of them, its time per
//! unit; or that it is idle, if it went idle first). When every worker's pace
//! is in, worker 0 balances the whole iteration at once ([`balance_moves`]:
//! each worker as it stands, extrapolated from its pace to now) and tells
//! each giver whom to **give** how many units. The giver hands them over as an
//! ordinary assignment (units leave its list before the message, so each unit
//! still changes hands once); what the balance missed, the helper groups
//! mend. 2 (W − 1) messages an iteration plus one per move, all through one
//! worker: the price of seeing everyone.

use super::proactive::{balance_moves, Load, Move};

/// A worker's pace as it reports it to the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    /// Own units still in its list.
    pub left: u32,
    /// Peers' units waiting ahead of them.
    pub queued: u32,
    /// Its time per unit so far, µs (0: it has computed none).
    pub unit_us: u64,
}

/// Worker 0's side: the paces heard this iteration and whether it balanced.
#[derive(Debug, Clone)]
pub struct Broker {
    /// (when it arrived, µs, the pace), by worker.
    paces: Vec<Option<(u64, Pace)>>,
    heard: usize,
    balanced: bool,
    min_gain: f64,
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
        }
    }

    /// A new iteration: nothing heard yet.
    pub fn begin(&mut self) {
        self.paces.iter_mut().for_each(|p| *p = None);
        self.heard = 0;
        self.balanced = false;
    }

    /// `worker`'s pace arrived at `now_us`; once every worker's is in, the
    /// moves that balance the iteration (each worker's first pace counts).
    pub fn on_pace(&mut self, worker: u32, pace: Pace, now_us: u64) -> Vec<Move> {
        let Some(slot @ None) = self.paces.get_mut(worker as usize) else {
            return Vec::new();
        };
        *slot = Some((now_us, pace));
        self.heard += 1;
        if self.balanced || self.heard < self.paces.len() {
            return Vec::new();
        }
        self.balanced = true;
        balance_now(&self.paces, now_us, self.min_gain)
    }
}

/// The balance of the reported paces at `now_us`: each worker has done, since
/// its report, as many units as its pace allows (peers' units first), and
/// cannot start a unit given to it before now.
fn balance_now(paces: &[Option<(u64, Pace)>], now_us: u64, min_gain: f64) -> Vec<Move> {
    let now = now_us as f64;
    // A worker that computed nothing yet is taken to run at the median pace.
    let mut known: Vec<u64> = paces
        .iter()
        .flatten()
        .map(|(_, p)| p.unit_us)
        .filter(|&t| t > 0)
        .collect();
    known.sort_unstable();
    let median = known.get(known.len() / 2).copied().unwrap_or(0);
    let mut loads = Vec::with_capacity(paces.len());
    let mut unit_us = Vec::with_capacity(paces.len());
    for &(at, pace) in paces.iter().flatten() {
        let t = if pace.unit_us > 0 {
            pace.unit_us
        } else {
            median
        } as f64;
        let units = pace.left + pace.queued;
        let since = if t > 0.0 {
            (now_us.saturating_sub(at) as f64 / t).floor() as u32
        } else {
            0
        };
        let givable = pace.left.saturating_sub(since.saturating_sub(pace.queued));
        let units = units.saturating_sub(since);
        loads.push(Load {
            start_us: (now - f64::from(units) * t).max(at as f64),
            units,
            givable,
            keep: 0,
        });
        unit_us.push((t > 0.0).then_some(t));
    }
    balance_moves(&loads, &unit_us, min_gain)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pace(left: u32, unit_us: u64) -> Pace {
        Pace {
            left,
            queued: 0,
            unit_us,
        }
    }

    #[test]
    fn the_last_pace_balances_a_slow_worker_across_every_fast_one() {
        let mut broker = Broker::new(9, 0.5);
        for w in 0..8 {
            assert!(broker.on_pace(w, pace(15, 100), 200).is_empty());
        }
        // Worker 8 is five times slower: 15 units left at 500 µs.
        let moves = broker.on_pace(8, pace(15, 500), 600);
        assert!(moves.iter().all(|m| m.from == 8), "{moves:?}");
        let given: u32 = moves.iter().map(|m| m.count).sum();
        // Fast workers finish their own at 1700 µs; the slow one's 15 units
        // end at 8100 µs alone. Balanced, it keeps about a fifth of a fast
        // worker's share.
        assert!((11..=14).contains(&given), "{moves:?}");
        assert!(moves.iter().all(|m| m.count <= 2), "{moves:?}");
        // Heard once: a second pace changes nothing.
        assert!(broker.on_pace(8, pace(1, 500), 700).is_empty());
    }

    #[test]
    fn even_paces_move_nothing_and_a_new_iteration_starts_afresh() {
        let mut broker = Broker::new(4, 0.5);
        for w in 0..4 {
            assert!(broker.on_pace(w, pace(10, 100), 100).is_empty());
        }
        broker.begin();
        for w in 0..3 {
            assert!(broker.on_pace(w, pace(10, 100), 100).is_empty());
        }
        assert!(!broker.on_pace(3, pace(10, 1_000), 1_000).is_empty());
    }

    #[test]
    fn a_worker_that_went_idle_first_takes_work_and_gives_none() {
        let mut broker = Broker::new(3, 0.5);
        assert!(broker.on_pace(0, pace(0, 0), 50).is_empty());
        assert!(broker.on_pace(1, pace(9, 100), 100).is_empty());
        let moves = broker.on_pace(2, pace(9, 400), 400);
        assert!(moves.iter().all(|m| m.from == 2 && m.to != 2), "{moves:?}");
        assert!(!moves.is_empty());
    }

    #[test]
    fn units_done_since_the_report_cannot_be_given() {
        // Worker 0 reported 3 units left at 100 µs per unit, 1,000 µs ago: it
        // has finished them and gives nothing.
        let mut broker = Broker::new(2, 0.5);
        assert!(broker.on_pace(0, pace(3, 100), 0).is_empty());
        let moves = broker.on_pace(1, pace(0, 0), 1_000);
        assert!(moves.is_empty(), "{moves:?}");
    }
}
