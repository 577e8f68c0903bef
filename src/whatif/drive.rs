//! A whole trace replayed under one policy: the predictive policies'
//! predictor learns online from the replayed iterations, and they decide
//! before each one with [`crate::policy::decide`], as in a run.

use std::borrow::Cow;

use serde::Serialize;

use super::lanes::{replay_iteration_with, Scratch};
use super::source::Timings;
use super::{replay_agents, Clock, IterationTimings, Planned, WhatIfError};
use crate::policy::boundary::Action;
use crate::policy::{decide, peer_agent, ControlKind, Known, PeerAgent, PolicyPlan};
use crate::predict::online::{OnlineHistory, OnlinePredictor, Timing};

/// What a policy's replay came to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    /// The policy.
    pub policy: String,
    /// Iterations replayed.
    pub iterations: usize,
    /// Mean predicted time per iteration, µs.
    pub mean_iteration_us: f64,
    /// Median predicted time per iteration, µs.
    pub median_iteration_us: f64,
    /// Mean load-balancing bound per iteration, µs: the iteration's rows over
    /// the workers' combined speed (rows per µs), as if work were fluid, plus
    /// the iteration's recorded overhead beyond its slowest worker.
    pub bound_iteration_us: f64,
    /// `mean_iteration_us / bound_iteration_us`.
    pub vs_bound: f64,
    /// Mean bound with whole units per iteration, µs: the iteration's units,
    /// each of the mean unit's rows, placed where they finish earliest
    /// ([`crate::run::bound::IterationBound::units_us`]), plus the same
    /// overhead.
    pub unit_bound_iteration_us: f64,
    /// `mean_iteration_us / unit_bound_iteration_us`.
    pub vs_unit_bound: f64,
    /// Units computed by a worker other than their owner, per iteration.
    pub moved_units_per_iteration: f64,
    /// Units moved (or cloned) before iterations by a plan, per iteration.
    pub planned_units_per_iteration: f64,
    /// Copies of cloned units computed in vain, dropped, or still held
    /// when the iteration ended, per iteration.
    pub wasted_copies_per_iteration: f64,
    /// Control messages sent before the workers heard that the iteration
    /// ended (a message's time after its last unit), per iteration.
    pub messages_per_iteration: f64,
}

/// The load-balancing bound of one iteration, µs.
pub fn bound_us(t: &IterationTimings) -> f64 {
    bound_with(t, |_| 1.0).0
}

/// The bounds (fluid, with whole units) of one iteration whose recorded
/// costs are without slowdowns, begun at `at_us` on `clock`: each worker at
/// the slowdowns it meets on the clock from then on. Fluid: the shortest
/// time in which the workers get through all the rows between them; whole
/// units: the mean unit placed one by one where it finishes earliest.
fn bound_at(t: &IterationTimings, clock: &Clock, at_us: u64) -> (f64, f64) {
    let rows: u64 = t.own.iter().flatten().map(|u| u64::from(u.rows)).sum();
    let units = t.own.iter().map(|o| o.len() as u64).sum::<u64>();
    let workers: Vec<(usize, f64)> = (t.us_per_row.iter().copied().enumerate())
        .filter(|&(_, u)| u > 0.0)
        .collect();
    if rows == 0 || workers.is_empty() {
        return (0.0, 0.0);
    }
    let (rows, at) = (rows as f64, at_us as f64);
    let rows_in = |wall: f64| -> f64 {
        workers
            .iter()
            .map(|&(w, u)| clock.work_in(w, at, wall) / u)
            .sum()
    };
    // At full speed the rows take `lo`; slowed, up to the largest slowdown
    // times that.
    let (mut lo, _) = bound_with(t, |_| 1.0);
    let mut hi = lo.max(1.0);
    while rows_in(hi) < rows && hi < 1e15 {
        hi *= 2.0;
    }
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if rows_in(mid) >= rows {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    let fluid = hi;
    let whole = if units > 0 {
        let unit_rows = rows / units as f64;
        let end = |w: usize, f: f64| f + clock.span_f(w, at + f, unit_rows * t.us_per_row[w]);
        crate::run::bound::greedy_makespan(units, workers.iter().map(|&(w, _)| w), end).max(fluid)
    } else {
        fluid
    };
    (fluid, whole)
}

/// The bounds (fluid, with whole units) with worker `w`'s time per row
/// multiplied by `slowdown(w)`.
fn bound_with(t: &IterationTimings, slowdown: impl Fn(usize) -> f64) -> (f64, f64) {
    let rows: u64 = t.own.iter().flatten().map(|u| u64::from(u.rows)).sum();
    let units = t.own.iter().map(|o| o.len() as u64).sum::<u64>();
    // Rows per µs.
    let speeds: Vec<f64> = t
        .us_per_row
        .iter()
        .enumerate()
        .map(|(w, u)| u * slowdown(w))
        .map(|u| if u > 0.0 { 1.0 / u } else { 0.0 })
        .collect();
    super::bound::fluid_and_whole(rows as f64, units, &speeds)
}

/// What every range of a replay shares.
struct Setup<'a> {
    timings: &'a Timings,
    workers: u32,
    policy: &'a PolicyPlan,
    /// The predictor of a policy that plans.
    plan: Option<&'a OnlinePredictor>,
    /// Whether the plan's moves are clones.
    clones: bool,
    latency_us: u64,
    /// Called after each iteration is replayed, from the thread that
    /// replayed it.
    done: &'a (dyn Fn() + Sync),
}

/// What a range of iterations came to.
#[derive(Default)]
struct Partial {
    per_iteration: Vec<f64>,
    bounds: Vec<f64>,
    unit_bounds: Vec<f64>,
    moved: u64,
    planned: u64,
    messages: u64,
    wasted: u64,
    /// A digest of each iteration's replay (its times, every worker's
    /// finish, every unit's executor in finishing order), for the tests
    /// that pin a replay's outcome.
    #[cfg(test)]
    digests: Vec<u64>,
}

impl Partial {
    /// The ranges' outcomes `parts`, in order, as one.
    fn joined(parts: Vec<Partial>) -> Partial {
        let mut all = Partial::default();
        for p in parts {
            all.per_iteration.extend(p.per_iteration);
            all.bounds.extend(p.bounds);
            all.unit_bounds.extend(p.unit_bounds);
            all.moved += p.moved;
            all.planned += p.planned;
            all.messages += p.messages;
            all.wasted += p.wasted;
            #[cfg(test)]
            all.digests.extend(p.digests);
        }
        all
    }
}

impl Setup<'_> {
    /// Replays iterations `range` in order with `agents`.
    fn replay_range(
        &self,
        range: std::ops::Range<usize>,
        mut agents: Vec<Option<PeerAgent>>,
        alone: bool,
    ) -> Partial {
        let workers = self.workers;
        let peerless = agents.iter().all(Option::is_none) && !self.clones;
        let mut history = match self.plan {
            Some(predictor) => OnlineHistory::new(workers).judged_for(predictor),
            None => OnlineHistory::new(workers),
        };
        // Alone on the machine, a range splits large iterations between two
        // cores (same outcome).
        let mut scratch = if alone {
            Scratch::split()
        } else {
            Scratch::default()
        };
        let mut out = Partial::default();
        // Slowdowns that follow the clock meet the replay at its own times:
        // the range starts at the first iteration and runs on from there.
        let clock = self.timings.clock();
        let mut clock_us = clock.map_or(0, Clock::start_us);
        // The lists of the last iteration cut from a workers table, to be
        // filled anew.
        let mut spare: Option<IterationTimings> = None;
        // `replayed`: iterations replayed before, as the history numbers them.
        for (replayed, i) in range.enumerate() {
            let recorded: Cow<'_, IterationTimings> = match self.timings {
                // Cut into units in the lists of the iteration before.
                Timings::Workers(cells) => {
                    let mut t = spare.take().unwrap_or_default();
                    cells.iteration_into(i, &mut t);
                    Cow::Owned(t)
                }
                other => other.get(i),
            };
            let t = &*recorded;
            let mut lists = Planned::new(t);
            let (bound, unit_bound) = match clock {
                Some(clock) => {
                    lists = lists.at(clock, clock_us);
                    bound_at(t, clock, clock_us)
                }
                None => bound_with(t, |_| 1.0),
            };
            out.bounds.push(bound + t.overhead_us as f64);
            out.unit_bounds.push(unit_bound + t.overhead_us as f64);
            let sends = match self.plan {
                Some(predictor) => {
                    self.plan_iteration(&mut lists, &history, predictor, replayed as u64, &mut out)
                }
                None => Vec::new(),
            };
            let (makespan, finish, units) = if peerless && clock.is_none() {
                // Nobody hands work over: each worker computes its own list.
                let finish: Vec<u64> = (0..lists.workers())
                    .map(|w| lists.own(w).iter().map(|u| u.owner_us).sum())
                    .collect();
                let units: Vec<u32> = (0..lists.workers())
                    .map(|w| lists.own(w).len() as u32)
                    .collect();
                #[cfg(test)]
                out.digests.push(tests::digest(
                    [bound.to_bits(), unit_bound.to_bits(), sends.len() as u64]
                        .into_iter()
                        .chain(finish.iter().copied())
                        .chain(units.iter().map(|&u| u64::from(u))),
                ));
                (finish.iter().copied().max().unwrap_or(0), finish, units)
            } else {
                let r = replay_iteration_with(
                    &mut scratch,
                    &lists,
                    &mut agents,
                    self.latency_us,
                    &sends,
                );
                out.moved += u64::from(r.reassigned);
                out.wasted += u64::from(r.wasted);
                out.messages += u64::from(r.messages);
                // By executor, each in its finishing order (lanes append
                // their units one lane after the other).
                #[cfg(test)]
                let mut executed = r.executed.clone();
                #[cfg(test)]
                executed.sort_by_key(|&(_, w)| w);
                #[cfg(test)]
                out.digests.push(tests::digest(
                    [
                        bound.to_bits(),
                        unit_bound.to_bits(),
                        sends.len() as u64,
                        r.iteration,
                        r.makespan_us,
                        u64::from(r.reassigned),
                        u64::from(r.wasted),
                        u64::from(r.messages),
                    ]
                    .into_iter()
                    .chain(r.finish_us.iter().copied())
                    .chain(executed.iter().map(|&(k, w)| {
                        u64::from(k.partition) << 40 | u64::from(k.unit) << 24 | u64::from(w)
                    })),
                ));
                let mut units = vec![0u32; workers as usize];
                for &(_, w) in &r.executed {
                    units[w as usize] += 1;
                }
                (r.makespan_us, r.finish_us, units)
            };
            out.per_iteration.push((makespan + t.overhead_us) as f64);
            clock_us += makespan + t.overhead_us;
            if self.plan.is_some() {
                let timings: Vec<Timing> = units
                    .iter()
                    .zip(&finish)
                    .map(|(&units, &busy_us)| Timing { units, busy_us })
                    .collect();
                history.record_next(&timings);
            }
            if let Cow::Owned(t) = recorded {
                spare = Some(t);
            }
            (self.done)();
        }
        out
    }

    /// Replays every iteration on `threads` threads (`None`: one per core,
    /// up to 8), each range of iterations with agents from `make_agents`;
    /// returns the ranges' outcomes in order.
    fn replay_all(
        &self,
        threads: Option<usize>,
        make_agents: &dyn Fn() -> Result<Vec<Option<PeerAgent>>, WhatIfError>,
    ) -> Result<Vec<Partial>, WhatIfError> {
        let timings = self.timings;
        // Without a plan, an iteration's replay does not depend on the ones
        // before it (each begins every agent afresh and ends with every message
        // delivered): contiguous ranges replay on separate threads, each with its
        // own agents, and are joined in order, so the outcome is the same.
        // One thread asked for: no lanes either.
        let split = threads.is_none_or(|n| n > 1);
        // A plan learns from the iterations before, and slowdowns that follow
        // the clock meet each iteration when the ones before have ended: one
        // range, in order.
        let sequential = self.plan.is_some() || timings.clock().is_some();
        let threads = match (sequential, threads) {
            (true, _) => 1,
            (false, Some(n)) => n.max(1),
            (false, None) if timings.len() >= 64 => std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .min(8),
            (false, None) => 1,
        };
        let len = timings.len();
        if threads <= 1 {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            return Ok(vec![self.replay_range(
                0..len,
                make_agents()?,
                cores > 1 && split,
            )]);
        }
        let chunk = len.div_ceil(threads);
        let ranges: Vec<std::ops::Range<usize>> = (0..threads)
            .map(|k| k * chunk..((k + 1) * chunk).min(len))
            .filter(|r| !r.is_empty())
            .collect();
        let agents = ranges
            .iter()
            .map(|_| make_agents())
            .collect::<Result<Vec<_>, _>>()?;
        Ok(std::thread::scope(|scope| {
            let handles: Vec<_> = ranges
                .into_iter()
                .zip(agents)
                .map(|(range, agents)| scope.spawn(move || self.replay_range(range, agents, false)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a replay thread does not panic"))
                .collect()
        }))
    }

    /// The policy's decision before an iteration of `lists`, the
    /// `replayed`-th, from `history`: moves are made on `lists`, clones
    /// returned as the messages that leave as the iteration begins. Counts
    /// the units planned in `out`.
    fn plan_iteration(
        &self,
        lists: &mut Planned<'_>,
        history: &OnlineHistory,
        predictor: &OnlinePredictor,
        replayed: u64,
        out: &mut Partial,
    ) -> Vec<(u32, u32, ControlKind)> {
        let own: Vec<u32> = (0..lists.workers())
            .map(|w| lists.own(w).len() as u32)
            .collect();
        let known = Known {
            history,
            predictor,
            iteration: replayed,
            own: &own,
        };
        // A worker absent from the trace's iteration (an import whose job
        // lost workers) has no speed there to time units at: it takes none.
        let present = |m: &crate::policy::Move| lists.present(m.to as usize);
        match decide(self.policy, &known).action {
            // Before the iteration: from the end of each giver's list to the
            // end of its receiver's, at the receiver's speed.
            Action::Move(moves) => {
                let moves: Vec<_> = moves.into_iter().filter(present).collect();
                for m in moves {
                    let moved = lists.move_units(m.from as usize, m.to as usize, m.count);
                    out.planned += u64::from(moved);
                }
                Vec::new()
            }
            // Sent as the iteration begins.
            Action::Clone(moves) => {
                let moves: Vec<_> = moves.into_iter().filter(present).collect();
                out.planned += moves.iter().map(|m| u64::from(m.count)).sum::<u64>();
                moves
                    .into_iter()
                    .map(|m| (m.from, m.to, ControlKind::Clone { count: m.count }))
                    .collect()
            }
            Action::Keep | Action::Substitute { .. } => Vec::new(),
        }
    }
}

/// Replays every iteration of `timings` under `policy` (with `predictor` for
/// the predictive ones); control messages take `latency_us`. Policies without
/// a plan replay on every core (the outcome does not depend on it).
pub fn replay_policy(
    timings: &Timings,
    policy: &PolicyPlan,
    predictor: Option<&OnlinePredictor>,
    latency_us: u64,
) -> Result<Outcome, WhatIfError> {
    replay_policy_on(timings, policy, predictor, latency_us, None)
}

/// [`replay_policy`] on `threads` threads (`None`: one per core): ranges of
/// iterations for policies without a plan, two lanes of workers per
/// iteration for the others (see `whatif/lanes.rs`); the outcome is the same
/// for any number.
pub fn replay_policy_on(
    timings: &Timings,
    policy: &PolicyPlan,
    predictor: Option<&OnlinePredictor>,
    latency_us: u64,
    threads: Option<usize>,
) -> Result<Outcome, WhatIfError> {
    replay_policy_watched(timings, policy, predictor, latency_us, threads, &|| {})
}

/// [`replay_policy_on`], calling `done` after each iteration it has replayed
/// (from the thread that replayed it, in any order across threads): a
/// progress bar's tick for a replay of thousands of workers, which takes
/// seconds.
pub fn replay_policy_watched(
    timings: &Timings,
    policy: &PolicyPlan,
    predictor: Option<&OnlinePredictor>,
    latency_us: u64,
    threads: Option<usize>,
    done: &(dyn Fn() + Sync),
) -> Result<Outcome, WhatIfError> {
    let all = replay_parts(timings, policy, predictor, latency_us, threads, done)?;
    Ok(outcome(policy, timings.len(), all))
}

/// [`replay_policy_on`]'s iterations, before they are summed up.
fn replay_parts(
    timings: &Timings,
    policy: &PolicyPlan,
    predictor: Option<&OnlinePredictor>,
    latency_us: u64,
    threads: Option<usize>,
    done: &(dyn Fn() + Sync),
) -> Result<Partial, WhatIfError> {
    if timings.is_empty() {
        return Err(WhatIfError::EmptyTrace);
    }
    if timings.workers() >= 1 << 24 {
        return Err(WhatIfError::TooManyWorkers(timings.workers()));
    }
    let workers = timings.workers() as u32;
    let plan = match (policy.proactive(), predictor) {
        (Some(_), Some(p)) => Some(p),
        (Some(_), None) => return Err(WhatIfError::NoPredictor(policy.as_str())),
        _ => None,
    };
    let make_agents = || -> Result<Vec<Option<PeerAgent>>, WhatIfError> {
        match policy {
            PolicyPlan::Proactive(_) | PolicyPlan::ProactiveClone { .. } => {
                Ok(vec![None; workers as usize])
            }
            // Rapid reassignment's agents, offering help to silent peers
            // when the policy copies units in flight.
            PolicyPlan::Forestall { .. } => Ok((0..workers)
                .map(|w| peer_agent(policy, w, workers, workers))
                .collect()),
            other => replay_agents(other, workers),
        }
    };
    let clones = matches!(policy, PolicyPlan::ProactiveClone { .. });
    let setup = Setup {
        timings,
        workers,
        policy,
        plan,
        clones,
        latency_us,
        done,
    };
    Ok(Partial::joined(setup.replay_all(threads, &make_agents)?))
}

/// The outcome of `iterations` iterations replayed under `policy` as `all`.
fn outcome(policy: &PolicyPlan, iterations: usize, all: Partial) -> Outcome {
    let total: f64 = all.per_iteration.iter().sum();
    let bound: f64 = all.bounds.iter().sum();
    let unit_bound: f64 = all.unit_bounds.iter().sum();
    let (moved, planned, messages, wasted) = (all.moved, all.planned, all.messages, all.wasted);
    let mut per_iteration = all.per_iteration;
    let n = iterations as f64;
    Outcome {
        policy: policy.as_str().to_owned(),
        iterations,
        mean_iteration_us: total / n,
        median_iteration_us: crate::stats::median(&mut per_iteration),
        bound_iteration_us: bound / n,
        vs_bound: if bound > 0.0 { total / bound } else { 1.0 },
        unit_bound_iteration_us: unit_bound / n,
        vs_unit_bound: if unit_bound > 0.0 {
            total / unit_bound
        } else {
            1.0
        },
        moved_units_per_iteration: moved as f64 / n,
        planned_units_per_iteration: planned as f64 / n,
        wasted_copies_per_iteration: wasted as f64 / n,
        messages_per_iteration: messages as f64 / n,
    }
}

#[cfg(test)]
pub(super) mod tests;
