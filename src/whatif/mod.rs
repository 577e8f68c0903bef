//! What-if replay: the policies' own agents driven by a plain event loop over
//! recorded timings instead of a timely run.
//!
//! [`timings_from_trace`] turns a trace into, per iteration, every worker's list
//! of own units with their recorded cost (duration and the idle gap before it)
//! and every worker's time per row, and the iteration's overhead beyond its
//! slowest worker (kept as recorded under every policy);
//! [`replay_iteration`] then plays one iteration as the compute operator would:
//! a worker computes one unit at a time, reads control messages as they arrive,
//! and hands units over exactly as [`crate::run::worker`] does, with a fixed
//! message latency. A unit computed by a peer takes its rows × the peer's time
//! per row. Iterations are replayed one after another with a barrier between
//! them (SSP's running ahead is not replayed).
//!
//! Only the peer-to-peer agents need a replay of their own: `bsp` and `ideal`
//! replay without one. The proactive policies (`proactive`, `forestall`) plan
//! their moves before each iteration from an online predictor that learns from
//! the replayed iterations ([`drive`]). Clones race their originals
//! (`speculate`, `proactive-clone`): the first copy to finish counts, its
//! finisher tells the other holder with a `Done`, which skips its copy if it
//! has not started it. The policies that change what is computed (`ssp`,
//! `flexrr`, `backup-workers`, `dpro-substitute`) are not replayed and are
//! refused.
//!
//! [`source::Timings`] reads a trace's timings (its units, or, without a units
//! table, its workers' rows cut into equal units).

mod bound;
mod clock;
pub mod drive;
mod fifo;
mod lanes;
mod replay;
pub mod source;

pub use clock::Clock;
pub use drive::{bound_us, replay_policy, replay_policy_on, replay_policy_watched, Outcome};
pub use lanes::{replay_iteration, Scratch};
pub use replay::Replayed;
pub use source::{SourceError, Timings};

use std::collections::BTreeMap;

use crate::data::UnitKey;
use crate::policy::{peer_agent, PeerAgent, PolicyPlan};
use crate::trace::{TraceSet, UnitAction};

/// One unit of a worker's own list, with its recorded duration there.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimedUnit {
    /// Which unit.
    pub key: UnitKey,
    /// Rows it covers.
    pub rows: u32,
    /// How long its owner took (recorded, or rows × the owner's time per row
    /// when a peer computed it in the recorded run), µs.
    pub owner_us: u64,
    /// Micro-batches it is computed in (0 and 1: at once); its rest may
    /// move between them ([`handover::rest_in_flight`](crate::policy::handover::rest_in_flight)).
    pub micro_batches: u32,
    /// Whether it is the rest of a unit a peer began: it travels only with
    /// the message that handed it over (its sums are there), so it is not
    /// passed on or copied, only its own rest handed over again.
    pub rest: bool,
    /// Whether it is a tail of a unit a peer computes the rest of
    /// ([`handover::tail_in_flight`](crate::policy::handover::tail_in_flight)):
    /// its micro-batches go as they are, so it is not passed on, copied, or
    /// handed over again, and it is not a unit of its own (the unit counts
    /// when its first part ends, and the iteration waits for its tails).
    pub piece: bool,
}

/// What one iteration of a recorded run says about its workers.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct IterationTimings {
    /// Iteration.
    pub iteration: u64,
    /// Every worker's own units, in list order.
    pub own: Vec<Vec<TimedUnit>>,
    /// Every worker's time per row in this iteration, µs.
    pub us_per_row: Vec<f64>,
    /// Time the iteration took beyond its slowest worker's busy time, up to
    /// the next iteration's start (parameter exchange, reduction), µs: added
    /// to every policy's replayed iteration as recorded.
    pub overhead_us: u64,
}

/// An iteration's timings with a plan's moves applied: the lists of the few
/// workers a plan touches are copied and changed, the others borrowed (a copy
/// of every list would cost more than the plan at thousands of workers).
#[derive(Debug, Clone)]
pub struct Planned<'a> {
    /// The iteration as recorded.
    pub base: &'a IterationTimings,
    changed: BTreeMap<usize, Vec<TimedUnit>>,
    /// The slowdowns over the job clock and the iteration's start on it,
    /// when they follow the clock (the recorded costs are then without
    /// them; see [`Clock`]).
    pub clock: Option<(&'a Clock, u64)>,
}

impl<'a> Planned<'a> {
    /// The iteration as recorded, nothing moved.
    pub fn new(base: &'a IterationTimings) -> Self {
        Self {
            base,
            changed: Default::default(),
            clock: None,
        }
    }

    /// The same, begun at `start_us` on the job clock of `clock`.
    pub fn at(self, clock: &'a Clock, start_us: u64) -> Self {
        Self {
            clock: Some((clock, start_us)),
            ..self
        }
    }

    /// Workers.
    pub fn workers(&self) -> usize {
        self.base.own.len()
    }

    /// Worker `w`'s own units, in list order.
    pub fn own(&self, w: usize) -> &[TimedUnit] {
        self.changed.get(&w).unwrap_or(&self.base.own[w])
    }

    /// Whether worker `w` is in the trace's iteration (it has units there).
    pub fn present(&self, w: usize) -> bool {
        !self.base.own[w].is_empty()
    }

    /// Moves up to `count` units from the end of `from`'s list to the end of
    /// `to`'s, timed at `to`'s speed; returns how many moved.
    pub fn move_units(&mut self, from: usize, to: usize, count: u32) -> u32 {
        let mut moved = 0;
        for _ in 0..count {
            let base = self.base;
            let Some(mut unit) = self
                .changed
                .entry(from)
                .or_insert_with(|| base.own[from].clone())
                .pop()
            else {
                break;
            };
            unit.owner_us = (f64::from(unit.rows) * self.base.us_per_row[to]).round() as u64;
            self.changed
                .entry(to)
                .or_insert_with(|| base.own[to].clone())
                .push(unit);
            moved += 1;
        }
        moved
    }
}

/// Why a replay cannot run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum WhatIfError {
    /// The trace has no units.
    #[error("the trace holds no unit rows to replay")]
    EmptyTrace,
    /// The policy has no replay yet.
    #[error("policy {0} cannot be replayed yet (bsp, ideal, rapid-reassign, speculate, proactive, proactive-clone and forestall can)")]
    Unsupported(&'static str),
    /// More workers than the replay's event keys hold.
    #[error("{0} workers: the replay takes at most 16,777,215")]
    TooManyWorkers(usize),
    /// A predictive policy was given no predictor.
    #[error("policy {0} plans from predictions and needs a predictor")]
    NoPredictor(&'static str),
    /// The trace's units waited for slow links, which the replay does not
    /// model (it moves work between workers of different speeds).
    #[error(
        "{units} units spent time sending through a slow link (slow-link): the replay models \
         slow compute, not links, and would take that time for work"
    )]
    SlowLinks {
        /// Units with a send time.
        units: usize,
    },
}

/// Per-iteration timings of `trace`, for `workers` workers.
pub fn timings_from_trace(trace: &TraceSet) -> Result<Vec<IterationTimings>, WhatIfError> {
    timings_of(trace, false)
}

/// [`timings_from_trace`], with every unit's cost divided by its recorded
/// slowdown when `unslowed` (for a replay that applies the slowdowns itself,
/// by the clock).
pub(crate) fn timings_of(
    trace: &TraceSet,
    unslowed: bool,
) -> Result<Vec<IterationTimings>, WhatIfError> {
    let unit_cost = |u: &crate::trace::UnitRecord| {
        let cost = unit_cost(u);
        if unslowed && u.gt_slowdown.is_finite() && u.gt_slowdown >= 1.0 {
            (cost as f64 / u.gt_slowdown).round() as u64
        } else {
            cost
        }
    };
    let workers = trace
        .units
        .iter()
        .map(|u| u.worker.max(u.owner) + 1)
        .max()
        .ok_or(WhatIfError::EmptyTrace)? as usize;
    let overhead = overheads(trace);
    let mut by_iteration: BTreeMap<u64, Vec<&crate::trace::UnitRecord>> = BTreeMap::new();
    // Rows and micro-batches of a unit's parts that do not count it: those
    // computed before its rest was handed over, and its tails.
    let mut split_rows: BTreeMap<(u64, u32, u32), (u32, u32)> = BTreeMap::new();
    for u in &trace.units {
        // A clone's twin is the original; replay each unit once.
        if u.action.is_original() {
            by_iteration.entry(u.iteration).or_default().push(u);
        } else if matches!(u.action, UnitAction::Split | UnitAction::Tail) {
            let part = split_rows
                .entry((u.iteration, u.partition, u.unit))
                .or_default();
            part.0 += u.rows;
            part.1 += u.micro_batches;
        }
    }
    Ok(by_iteration
        .into_iter()
        .map(|(iteration, units)| {
            let mut us = vec![0u64; workers];
            let mut rows = vec![0u64; workers];
            for u in &units {
                us[u.executor as usize] += unit_cost(u);
                rows[u.executor as usize] += u64::from(u.rows);
            }
            let mean = us.iter().sum::<u64>() as f64 / rows.iter().sum::<u64>().max(1) as f64;
            let us_per_row: Vec<f64> = (0..workers)
                .map(|w| match rows[w] {
                    0 => mean, // did nothing here: assume a typical worker
                    r => us[w] as f64 / r as f64,
                })
                .collect();
            let mut own = vec![Vec::new(); workers];
            for u in &units {
                let (split, split_micro) = split_rows
                    .get(&(u.iteration, u.partition, u.unit))
                    .copied()
                    .unwrap_or((0, 0));
                let rows = u.rows + split;
                let owner_us = if u.executor == u.owner && split == 0 {
                    unit_cost(u)
                } else {
                    (f64::from(rows) * us_per_row[u.owner as usize]).round() as u64
                };
                own[u.owner as usize].push(TimedUnit {
                    key: UnitKey {
                        partition: u.partition,
                        unit: u.unit,
                    },
                    rows,
                    owner_us,
                    micro_batches: u.micro_batches + split_micro,
                    rest: false,
                    piece: false,
                });
            }
            for list in &mut own {
                list.sort_by_key(|u| u.key);
            }
            IterationTimings {
                iteration,
                own,
                us_per_row,
                overhead_us: overhead.get(&iteration).copied().unwrap_or(0),
            }
        })
        .collect())
}

/// What a unit cost its executor: its computation and the idle gap before it
/// (between units a worker reads messages and sends gradients; the gaps of a
/// worker's units add up to its busy time).
fn unit_cost(u: &crate::trace::UnitRecord) -> u64 {
    u.end_us.saturating_sub(u.start_us) + u.wait_us
}

/// Per iteration, the time beyond its slowest worker's busy time up to the
/// next iteration's start (the last: up to its own end), µs.
pub fn overheads(trace: &TraceSet) -> BTreeMap<u64, u64> {
    let mut longest: BTreeMap<u64, u64> = BTreeMap::new();
    for w in &trace.workers {
        let l = longest.entry(w.iteration).or_default();
        *l = (*l).max(w.busy_us);
    }
    let its = &trace.iterations;
    its.iter()
        .enumerate()
        .map(|(i, it)| {
            let span = match its.get(i + 1) {
                Some(next) => next.start_us.saturating_sub(it.start_us),
                None => it.wall_us,
            };
            let busy = longest.get(&it.iteration).copied().unwrap_or(0);
            (it.iteration, span.saturating_sub(busy))
        })
        .collect()
}

/// The agents `policy` runs on `workers` workers of one process, or an error if
/// the policy cannot be replayed.
pub fn replay_agents(
    policy: &PolicyPlan,
    workers: u32,
) -> Result<Vec<Option<PeerAgent>>, WhatIfError> {
    match policy {
        PolicyPlan::Bsp
        | PolicyPlan::Ideal
        | PolicyPlan::RapidReassign(_)
        | PolicyPlan::Speculate(_) => Ok((0..workers)
            .map(|w| peer_agent(policy, w, workers, workers))
            .collect()),
        other => Err(WhatIfError::Unsupported(other.as_str())),
    }
}

/// Replays every iteration of `timings` under `policy`; returns one outcome per
/// iteration.
pub fn replay(
    timings: &[IterationTimings],
    policy: &PolicyPlan,
    latency_us: u64,
) -> Result<Vec<Replayed>, WhatIfError> {
    let workers = timings.first().map_or(0, |t| t.own.len()) as u32;
    let mut agents = replay_agents(policy, workers)?;
    Ok(timings
        .iter()
        .map(|t| replay_iteration(t, &mut agents, latency_us, &[]))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_moves_units_from_the_end_at_the_receivers_speed_and_copies_only_what_it_touches() {
        let unit = |w: u32, u: u32| TimedUnit {
            key: UnitKey {
                partition: w,
                unit: u,
            },
            rows: 10,
            owner_us: 10 * (w as u64 + 1),
            micro_batches: 1,
            rest: false,
            piece: false,
        };
        let t = IterationTimings {
            iteration: 3,
            own: (0..3)
                .map(|w| (0..3).map(|u| unit(w, u)).collect())
                .collect(),
            us_per_row: vec![1.0, 2.0, 3.0],
            overhead_us: 0,
        };
        let mut p = Planned::new(&t);
        assert_eq!(p.move_units(2, 0, 2), 2);
        assert_eq!(p.move_units(1, 0, 5), 3, "no more than it has");
        let keys = |w: usize| {
            p.own(w)
                .iter()
                .map(|u| (u.key.partition, u.key.unit))
                .collect::<Vec<_>>()
        };
        assert_eq!(keys(2), vec![(2, 0)]);
        assert_eq!(keys(1), vec![]);
        assert_eq!(
            keys(0),
            vec![
                (0, 0),
                (0, 1),
                (0, 2),
                (2, 2),
                (2, 1),
                (1, 2),
                (1, 1),
                (1, 0)
            ]
        );
        assert!(
            p.own(0)[3..].iter().all(|u| u.owner_us == 10),
            "at worker 0's 1 µs a row"
        );
        assert_eq!(t.own[2].len(), 3, "the recorded iteration is untouched");
    }
}
