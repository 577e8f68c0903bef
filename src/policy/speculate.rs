//! Speculative execution (Spark, LATE: Zaharia et al., OSDI 2008), one worker's
//! side, on the same progress reports as rapid reassignment.
//!
//! Workers report progress to their helper group at `quantile` of their own
//! units and when done. A worker that learns that a peer has finished while it
//! is itself more than `multiplier` times slower per unit asks that peer to
//! **clone** units from the end of its list — it keeps them too. Whoever
//! finishes a cloned unit first tells the other (**done**), and the other skips
//! it if it has not started it; if both compute it, the shard owner counts the
//! first copy and discards the second. At most `max_clone_share` of a worker's
//! own units are cloned per iteration.

use serde::{Deserialize, Serialize};

use super::reassign::{Giver, ReassignAgent, Reporter};
use super::ControlKind;

/// Default share of a worker's units after which it reports progress.
pub const DEFAULT_QUANTILE: f64 = 0.75;
/// Default slowness (time per unit against the peer's) that triggers clones.
pub const DEFAULT_MULTIPLIER: f64 = 1.5;
/// Default cap on the share of a worker's own units that are cloned.
pub const DEFAULT_MAX_CLONE_SHARE: f64 = 0.5;

/// Knobs of speculation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SpeculateConfig {
    /// Peers a worker reports to.
    pub group_size: u32,
    /// Share of its own units after which a worker reports progress.
    pub quantile: f64,
    /// Clone when this worker takes more than `multiplier` × a finished peer's
    /// time per unit.
    pub multiplier: f64,
    /// At most this share of a worker's own units is cloned per iteration.
    pub max_clone_share: f64,
}

/// One worker's state of speculation for the current iteration.
#[derive(Debug, Clone)]
pub struct SpeculateAgent {
    group: Vec<u32>,
    config: SpeculateConfig,
    progress: Reporter,
    cloned: u32,
}

impl SpeculateAgent {
    /// The agent of a worker with helper group `group`.
    pub fn new(group: Vec<u32>, config: SpeculateConfig) -> Self {
        Self {
            group,
            config,
            progress: Reporter::default(),
            cloned: 0,
        }
    }

    /// Starts an iteration in which this worker owns `own_total` units.
    pub fn begin(&mut self, own_total: u32) {
        self.progress.begin(own_total);
        self.cloned = 0;
    }

    /// Call when one of this worker's own units is done (or skipped because a
    /// clone finished it); `unit_us` is its mean time per unit so far.
    pub fn on_own_unit_done(&mut self, unit_us: u64) -> Vec<(u32, ControlKind)> {
        self.progress
            .unit_done(unit_us, self.config.quantile, false, &self.group)
    }

    /// How long the unit in flight has run so far, if one is (call before
    /// `on_message`).
    pub fn observe(&mut self, running_us: Option<u64>) {
        self.progress.running_us = running_us;
    }

    /// Call for every control message; `left` is how many of this worker's own
    /// units are still waiting and not cloned yet. A `Clone { count }` answer
    /// means: send copies of that many units from the end of the list.
    pub fn on_message(
        &mut self,
        from: u32,
        kind: &ControlKind,
        left: usize,
    ) -> Vec<(u32, ControlKind)> {
        let ControlKind::Progress {
            done,
            total,
            unit_us,
            ..
        } = *kind
        else {
            return Vec::new();
        };
        let peer_idle = done >= total;
        // Its time per unit as it stands (the unit in flight's time so far
        // when that is longer than the mean); it keeps its units either way.
        let me = Giver {
            ahead_us: None,
            ..self.progress.giver(left)
        };
        let slow = me.unit_us as f64 > self.config.multiplier * unit_us.max(1) as f64;
        let cap = (self.config.max_clone_share * f64::from(self.progress.own_total)).floor() as u32;
        if !(peer_idle && slow && self.cloned < cap && left > 1) {
            return Vec::new();
        }
        let balanced = ReassignAgent::balance(me, self.group.len(), 0, unit_us, 1);
        let count = balanced.min(cap - self.cloned);
        if count == 0 {
            return Vec::new();
        }
        self.cloned += count;
        vec![(from, ControlKind::Clone { count })]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> SpeculateConfig {
        SpeculateConfig {
            group_size: 3,
            quantile: DEFAULT_QUANTILE,
            multiplier: DEFAULT_MULTIPLIER,
            max_clone_share: 0.25,
        }
    }

    fn done(unit_us: u64) -> ControlKind {
        ControlKind::Progress {
            done: 8,
            total: 8,
            queued: 0,
            unit_us,
        }
    }

    #[test]
    fn a_slow_worker_clones_to_a_finished_peer_within_the_cap() {
        let mut slow = SpeculateAgent::new(vec![1, 2, 3], config());
        slow.begin(16);
        slow.on_own_unit_done(500);
        // 5x slower than an idle peer: clone; cap = 0.25 · 16 = 4 units in all
        let first = slow.on_message(1, &done(100), 15);
        let ControlKind::Clone { count } = first[0].1 else {
            panic!("{first:?}")
        };
        assert!((1..=4).contains(&count), "{count}");
        let mut total = count;
        for peer in [2, 3] {
            for (_, kind) in slow.on_message(peer, &done(100), 15) {
                if let ControlKind::Clone { count } = kind {
                    total += count;
                }
            }
        }
        assert!(total <= 4, "cloned {total} > cap");
    }

    #[test]
    fn no_clones_when_not_slow_enough_or_peer_busy() {
        let mut w = SpeculateAgent::new(vec![1], config());
        w.begin(8);
        w.on_own_unit_done(140);
        assert!(w.on_message(1, &done(100), 6).is_empty(), "1.4x < 1.5x");
        let busy = ControlKind::Progress {
            done: 6,
            total: 8,
            queued: 0,
            unit_us: 10,
        };
        assert!(w.on_message(1, &busy, 6).is_empty(), "peer still busy");
        w.on_own_unit_done(400);
        assert!(
            w.on_message(1, &done(100), 1).is_empty(),
            "keeps its last unit"
        );
    }

    #[test]
    fn reports_at_the_quantile_and_at_the_end() {
        let mut w = SpeculateAgent::new(vec![1, 2], config());
        w.begin(4);
        assert!(w.on_own_unit_done(10).is_empty());
        assert!(w.on_own_unit_done(10).is_empty());
        assert_eq!(w.on_own_unit_done(10).len(), 2);
        assert_eq!(w.on_own_unit_done(10).len(), 2);
    }
}
