//! Worker 0's broker as its agent sees it: every worker's pace, sent once
//! an iteration, and the broker's moves turned into orders to the givers.

use super::{ControlKind, Pace, ReassignAgent};
use crate::policy::proactive::Move;

/// Under the broker, a worker this many times slower per unit than a peer
/// that reports being ahead gives it nothing on that report when the
/// broker knows it that slow (its pace said so) or has not heard its pace
/// yet (it then takes it for a straggler): the broker places such a
/// worker's share over all workers, cutting its units into tails, and a
/// whole unit given on the report as well landed on a peer the broker was
/// loading too (the first to report, the fastest). With timings that carry
/// a little noise, one such peer in most iterations set the iteration's
/// end (the what-if replay at 1,000 workers of 4 units in 4 micro-batches,
/// 1 % noise: 1.32× the fluid bound, 1.04× with this rule). A worker
/// slowed only after its pace still gives: the broker did not see it.
pub const BROKERED_SLOWER: f64 = 3.0;

impl ReassignAgent {
    /// This worker's pace for the broker, first after its first own unit (or
    /// when idle before it), again whenever peers hand it units: to worker 0,
    /// or into its own broker (which may answer with moves at once).
    pub(super) fn pace(&mut self, left: u32, unit_us: u64, again: bool) -> Vec<(u32, ControlKind)> {
        if !self.config.broker || self.paced != again {
            return Vec::new();
        }
        self.paced = true;
        if self.paced_us == 0 {
            self.paced_us = unit_us;
        }
        let pace = Pace {
            left,
            queued: self.progress.queued as u32,
            unit_us,
            elapsed_us: self.now_us.saturating_sub(self.started_us),
            usual_us: self.usual_us,
            running_us: self.progress.running_us,
        };
        if self.me != 0 {
            return vec![(0, ControlKind::Pace(pace))];
        }
        self.brokered(0, pace, left as usize)
    }

    /// Worker 0 hears `from`'s pace: once all are in, the broker's moves, as
    /// orders to the givers (its own gifts it makes at once).
    pub(super) fn brokered(
        &mut self,
        from: u32,
        pace: Pace,
        left: usize,
    ) -> Vec<(u32, ControlKind)> {
        let Some(broker) = self.broker.as_mut() else {
            return Vec::new();
        };
        let moves = broker.on_pace(from, pace, self.now_us);
        self.ordered(moves, left)
    }

    /// When worker 0's broker wants [`ReassignAgent::on_broker_time`] called
    /// (its clock, µs), if it does: it balances then without the paces
    /// still missing.
    pub fn broker_due(&mut self) -> Option<u64> {
        self.broker.as_mut().and_then(|b| b.due_at())
    }

    /// Worker 0's clock reached [`ReassignAgent::broker_due`] (call after
    /// `observe`); `left` is its own list: the broker's moves, as orders to
    /// the givers (its own gifts it makes at once).
    pub fn on_broker_time(&mut self, left: usize) -> Vec<(u32, ControlKind)> {
        let Some(broker) = self.broker.as_mut() else {
            return Vec::new();
        };
        let moves = broker.on_time(self.now_us);
        let out = self.ordered(moves, left);
        self.account(&out);
        out
    }

    /// The broker's moves as orders to their givers; worker 0's own gifts,
    /// from its list of `left` units, it makes at once. Moves in
    /// micro-batches (the broker cuts units) become whole units and the
    /// micro-batches beyond them, each giver's whole units ordered before
    /// its cuts: a cut takes the tail of what the whole units leave.
    fn ordered(&mut self, moves: Vec<Move>, left: usize) -> Vec<(u32, ControlKind)> {
        let mut out = Vec::new();
        let mut left = left;
        // (moves in micro-batches when the broker cuts units)
        let micro = self.broker.as_ref().map_or(1, |b| b.micro.max(1));
        // Whole units first, then the cuts: a giver cuts the units its
        // whole ones leave at the end of its list.
        let whole = (moves.iter())
            .filter(|m| m.count >= micro)
            .map(|m| (m, m.count / micro, 0));
        let cuts = (moves.iter())
            .filter(|m| m.count % micro > 0)
            .map(|m| (m, 0, m.count % micro));
        let mut orders: Vec<(&Move, u32, u32)> = whole.chain(cuts).collect();
        orders.sort_by_key(|o| (o.0.from, o.2 > 0));
        for (m, count, cut) in orders {
            let give = ControlKind::Give {
                to: m.to,
                count,
                cut,
            };
            if m.from == self.me {
                for sent in self.answer(0, &give, left) {
                    if let (_, ControlKind::Assign { count }) = sent {
                        left -= count as usize;
                    }
                    out.push(sent);
                }
            } else {
                out.push((m.from, give));
            }
        }
        out
    }

    /// Whether, under the broker, this worker at `my_unit_us` a unit is
    /// [`BROKERED_SLOWER`] times slower than a peer at `their_unit_us` and
    /// the broker knows it that slow or has not heard its pace (it gives
    /// that peer nothing on its report: the broker places its share).
    pub(super) fn brokered_straggler(&self, my_unit_us: u64, their_unit_us: u64) -> bool {
        let slower = |us: u64| us as f64 > BROKERED_SLOWER * their_unit_us as f64;
        self.config.broker && slower(my_unit_us) && (self.paced_us == 0 || slower(self.paced_us))
    }
}
