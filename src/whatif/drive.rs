//! A whole trace replayed under one policy: the predictive policies'
//! predictor learns online from the replayed iterations, as in a run.

use std::borrow::Cow;

use serde::Serialize;

use super::replay::replay_iteration;
use super::source::Timings;
use super::{replay_agents, IterationTimings, WhatIfError};
use crate::policy::proactive::within_budget;
use crate::policy::{plan_moves, ControlKind, PolicyPlan};
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
    /// Units computed by a worker other than their owner, per iteration.
    pub moved_units_per_iteration: f64,
    /// Units moved (or cloned) before iterations by a plan, per iteration.
    pub planned_units_per_iteration: f64,
    /// Copies of cloned units computed in vain or dropped, per iteration.
    pub wasted_copies_per_iteration: f64,
    /// Control messages, per iteration.
    pub messages_per_iteration: f64,
}

/// The load-balancing bound of one iteration, µs.
pub fn bound_us(t: &IterationTimings) -> f64 {
    let rows: u64 = t.own.iter().flatten().map(|u| u64::from(u.rows)).sum();
    let speed: f64 = t
        .us_per_row
        .iter()
        .filter(|&&u| u > 0.0)
        .map(|u| 1.0 / u)
        .sum();
    if speed > 0.0 {
        rows as f64 / speed
    } else {
        0.0
    }
}

/// Moves the plan's units before the iteration: from the end of each giver's
/// list to the end of its receiver's, at the receiver's speed. Returns the
/// units moved.
fn apply_plan(
    t: &mut IterationTimings,
    history: &OnlineHistory,
    predictor: &OnlinePredictor,
    config: &crate::policy::ProactiveConfig,
) -> u64 {
    let predicted = history.predict(predictor.as_predictor());
    let own: Vec<u32> = t.own.iter().map(|o| o.len() as u32).collect();
    let mut moved = 0;
    for m in plan_moves(&own, &predicted, config) {
        for _ in 0..m.count {
            let Some(mut unit) = t.own[m.from as usize].pop() else {
                break;
            };
            unit.owner_us = (f64::from(unit.rows) * t.us_per_row[m.to as usize]).round() as u64;
            t.own[m.to as usize].push(unit);
            moved += 1;
        }
    }
    moved
}

/// The clones a `proactive-clone` plan sends as the iteration begins: the
/// plan's moves within the budget, as `Clone` messages.
fn clone_plan(
    t: &IterationTimings,
    history: &OnlineHistory,
    predictor: &OnlinePredictor,
    config: &crate::policy::ProactiveConfig,
    budget: f64,
) -> Vec<(u32, u32, ControlKind)> {
    let predicted = history.predict(predictor.as_predictor());
    let own: Vec<u32> = t.own.iter().map(|o| o.len() as u32).collect();
    let total: u32 = own.iter().sum();
    let moves = plan_moves(&own, &predicted, config);
    within_budget(&moves, (f64::from(total) * budget).floor() as u32)
        .into_iter()
        .map(|m| (m.from, m.to, ControlKind::Clone { count: m.count }))
        .collect()
}

/// Replays every iteration of `timings` under `policy` (with `predictor` for
/// the predictive ones); control messages take `latency_us`.
pub fn replay_policy(
    timings: &Timings,
    policy: &PolicyPlan,
    predictor: Option<&OnlinePredictor>,
    latency_us: u64,
) -> Result<Outcome, WhatIfError> {
    if timings.is_empty() {
        return Err(WhatIfError::EmptyTrace);
    }
    if timings.workers() >= 1 << 24 {
        return Err(WhatIfError::TooManyWorkers(timings.workers()));
    }
    let workers = timings.workers() as u32;
    let plan = match (policy.proactive(), predictor) {
        (Some(config), Some(p)) => Some((config, p)),
        (Some(_), None) => return Err(WhatIfError::NoPredictor(policy.as_str())),
        _ => None,
    };
    let mut agents = match policy {
        PolicyPlan::Proactive(_) | PolicyPlan::ProactiveClone { .. } => {
            vec![None; workers as usize]
        }
        PolicyPlan::Forestall { reassign, .. } => {
            replay_agents(&PolicyPlan::RapidReassign(*reassign), workers)?
        }
        other => replay_agents(other, workers)?,
    };
    let clones = match policy {
        PolicyPlan::ProactiveClone { budget, .. } => Some(*budget),
        _ => None,
    };
    let peerless = agents.iter().all(Option::is_none) && clones.is_none();
    let mut history = OnlineHistory::new(workers);
    let (mut total, mut bound, mut moved, mut planned, mut messages) = (0.0, 0.0, 0u64, 0u64, 0u64);
    let mut wasted = 0u64;
    let mut per_iteration = Vec::with_capacity(timings.len());
    for i in 0..timings.len() {
        let mut t: Cow<'_, IterationTimings> = timings.get(i);
        bound += bound_us(&t) + t.overhead_us as f64;
        let mut sends = Vec::new();
        if let Some((config, predictor)) = plan {
            match clones {
                None => planned += apply_plan(t.to_mut(), &history, predictor, config),
                Some(budget) => {
                    sends = clone_plan(&t, &history, predictor, config, budget);
                    planned += sends
                        .iter()
                        .map(|s| match s.2 {
                            ControlKind::Clone { count } => u64::from(count),
                            _ => 0,
                        })
                        .sum::<u64>();
                }
            }
        }
        let (makespan, finish, units) = if peerless {
            // Nobody hands work over: each worker computes its own list.
            let finish: Vec<u64> = t
                .own
                .iter()
                .map(|o| o.iter().map(|u| u.owner_us).sum())
                .collect();
            let units: Vec<u32> = t.own.iter().map(|o| o.len() as u32).collect();
            (finish.iter().copied().max().unwrap_or(0), finish, units)
        } else {
            let r = replay_iteration(&t, &mut agents, latency_us, &sends);
            moved += u64::from(r.reassigned);
            wasted += u64::from(r.wasted);
            messages += u64::from(r.messages);
            let mut units = vec![0u32; workers as usize];
            for &(_, w) in &r.executed {
                units[w as usize] += 1;
            }
            (r.makespan_us, r.finish_us, units)
        };
        total += (makespan + t.overhead_us) as f64;
        per_iteration.push((makespan + t.overhead_us) as f64);
        if plan.is_some() {
            for w in 0..workers {
                history.record(
                    t.iteration,
                    w,
                    Timing {
                        units: units[w as usize],
                        busy_us: finish[w as usize],
                    },
                );
            }
        }
    }
    let n = timings.len() as f64;
    Ok(Outcome {
        policy: policy.as_str().to_owned(),
        iterations: timings.len(),
        mean_iteration_us: total / n,
        median_iteration_us: crate::analyze::classify::median(&mut per_iteration),
        bound_iteration_us: bound / n,
        vs_bound: if bound > 0.0 { total / bound } else { 1.0 },
        moved_units_per_iteration: moved as f64 / n,
        planned_units_per_iteration: planned as f64 / n,
        wasted_copies_per_iteration: wasted as f64 / n,
        messages_per_iteration: messages as f64 / n,
    })
}
