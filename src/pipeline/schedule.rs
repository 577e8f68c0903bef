//! The order in which a pipeline stage runs the forward and backward passes
//! of an iteration's micro-batches, by schedule ([`Schedule::order`]), and
//! what that order costs when every pass waits for its neighbour stage
//! ([`timeline`]).
//!
//! - `gpipe` (fill–drain, GPipe): every forward in micro-batch order, then
//!   every backward in micro-batch order. All activations of the iteration
//!   are kept until their backward.
//! - `1f1b` (PipeDream-flush, Megatron-LM's non-interleaved schedule):
//!   stage s of S runs `min(S − 1 − s, M)` forwards to fill the pipe, then
//!   alternates one forward and one backward, then drains the backwards; at
//!   most `S − s` micro-batches' activations are kept. It needs at least as
//!   many micro-batches as stages.
//!
//! Both run each stage's backwards in micro-batch order, so a stage folds
//! its micro-batches' gradients in that order as they come, the order
//! data-parallel training folds them in.

use std::fmt;
use std::str::FromStr;

/// A named pipeline schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Schedule {
    /// Fill–drain: all forwards, then all backwards.
    #[serde(rename = "gpipe")]
    GPipe,
    /// One forward, one backward, after a fill.
    #[serde(rename = "1f1b")]
    OneFOneB,
}

/// The schedules' names, as a job file spells them.
pub const SCHEDULES: &str = "gpipe, 1f1b";

/// A forward or backward pass of one micro-batch on one stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pass {
    /// Forward of micro-batch `.0`.
    Forward(u32),
    /// Backward of micro-batch `.0`.
    Backward(u32),
}

/// A pipeline that a schedule cannot run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// A name that is not a schedule.
    #[error("unknown pipeline schedule '{0}'; accepted: {SCHEDULES}")]
    Unknown(String),
    /// No stage, or a stage index past the last.
    #[error("stage {stage} of a pipeline of {stages} stages")]
    Stage {
        /// The stage asked for.
        stage: u32,
        /// Stages.
        stages: u32,
    },
    /// More stages than layers, or none.
    #[error("{stages} stages for a net of {layers} layers: a stage holds at least one layer")]
    Layers {
        /// Stages.
        stages: u32,
        /// Layers.
        layers: usize,
    },
    /// 1F1B with fewer micro-batches than stages.
    #[error("the 1f1b schedule needs at least as many micro-batches as stages: {micro} micro-batches for {stages} stages (use more micro-batches, or gpipe)")]
    TooFewMicroBatches {
        /// Micro-batches.
        micro: u32,
        /// Stages.
        stages: u32,
    },
    /// A stage's costs that are not finite and non-negative.
    #[error("stage {stage}'s cost {value} is not a finite, non-negative time")]
    Cost {
        /// The stage.
        stage: usize,
        /// The cost.
        value: f64,
    },
}

impl FromStr for Schedule {
    type Err = ScheduleError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "gpipe" => Ok(Schedule::GPipe),
            "1f1b" => Ok(Schedule::OneFOneB),
            other => Err(ScheduleError::Unknown(other.to_owned())),
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Schedule::GPipe => "gpipe",
            Schedule::OneFOneB => "1f1b",
        })
    }
}

impl Schedule {
    /// The fewest micro-batches an iteration over `stages` stages needs
    /// (1F1B: one a stage; GPipe: one).
    pub fn least_micro(self, stages: u32) -> u32 {
        match self {
            Schedule::OneFOneB => stages,
            Schedule::GPipe => 1,
        }
    }

    /// Whether `micro` micro-batches over `stages` stages can run.
    pub fn check(self, stages: u32, micro: u32) -> Result<(), ScheduleError> {
        if stages == 0 {
            return Err(ScheduleError::Stage { stage: 0, stages });
        }
        if self == Schedule::OneFOneB && micro < self.least_micro(stages) {
            return Err(ScheduleError::TooFewMicroBatches { micro, stages });
        }
        Ok(())
    }

    /// The passes stage `stage` of `stages` runs in an iteration of
    /// `micro` micro-batches, in order.
    pub fn order(self, stages: u32, stage: u32, micro: u32) -> Result<Vec<Pass>, ScheduleError> {
        self.check(stages, micro)?;
        if stage >= stages {
            return Err(ScheduleError::Stage { stage, stages });
        }
        let forwards = (0..micro).map(Pass::Forward);
        let backwards = (0..micro).map(Pass::Backward);
        Ok(match self {
            Schedule::GPipe => forwards.chain(backwards).collect(),
            Schedule::OneFOneB => {
                let warmup = (stages - 1 - stage).min(micro);
                let mut order: Vec<Pass> = (0..warmup).map(Pass::Forward).collect();
                for m in warmup..micro {
                    order.push(Pass::Forward(m));
                    order.push(Pass::Backward(m - warmup));
                }
                order.extend((micro - warmup..micro).map(Pass::Backward));
                order
            }
        })
    }

    /// The most micro-batches whose activations stage `stage` keeps at
    /// once (forwarded, not yet backwarded).
    pub fn in_flight(self, stages: u32, stage: u32, micro: u32) -> Result<u32, ScheduleError> {
        let order = self.order(stages, stage, micro)?;
        let (mut now, mut most) = (0u32, 0u32);
        for pass in order {
            match pass {
                Pass::Forward(_) => {
                    now += 1;
                    most = most.max(now);
                }
                Pass::Backward(_) => now -= 1,
            }
        }
        Ok(most)
    }
}

/// What one micro-batch's passes take on a stage's worker, s.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StageCost {
    /// A forward pass.
    pub forward: f64,
    /// A backward pass.
    pub backward: f64,
}

/// An iteration of a pipeline as its schedule and costs make it.
#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    /// From the first pass's start to the last one's end, s.
    pub makespan: f64,
    /// Each stage's time computing, s.
    pub busy: Vec<f64>,
    /// Each stage's share of the makespan spent waiting (the bubble).
    pub bubble: Vec<f64>,
    /// Each stage's passes with their start and end, in the schedule's
    /// order.
    pub passes: Vec<Vec<(Pass, f64, f64)>>,
}

/// The iteration of `micro` micro-batches through stages of `costs` under
/// `schedule`: each stage runs its passes in the schedule's order, a
/// forward after the stage before finished it and `transfer` s more (its
/// activation's send), a backward after the stage after finished it and
/// `transfer` more (the last stage's backward after its own forward).
pub fn timeline(
    schedule: Schedule,
    costs: &[StageCost],
    micro: u32,
    transfer: f64,
) -> Result<Timeline, ScheduleError> {
    let stages = costs.len();
    let s_count = u32::try_from(stages).unwrap_or(u32::MAX);
    schedule.check(s_count, micro)?;
    for (stage, c) in costs.iter().enumerate() {
        for value in [c.forward, c.backward, transfer] {
            if !value.is_finite() || value < 0.0 {
                return Err(ScheduleError::Cost { stage, value });
            }
        }
    }
    let orders: Vec<Vec<Pass>> = (0..s_count)
        .map(|s| schedule.order(s_count, s, micro))
        .collect::<Result<_, _>>()?;
    let m = micro as usize;
    // ends of each stage's forwards and backwards, by micro-batch
    let mut fwd = vec![vec![None::<f64>; m]; stages];
    let mut bwd = vec![vec![None::<f64>; m]; stages];
    let mut next = vec![0usize; stages]; // each stage's next pass
    let mut free = vec![0.0f64; stages]; // when each stage is free
    let mut passes: Vec<Vec<(Pass, f64, f64)>> = vec![Vec::new(); stages];
    let total: usize = orders.iter().map(Vec::len).sum();
    let mut done = 0;
    while done < total {
        let mut progressed = false;
        for s in 0..stages {
            while let Some(&pass) = orders[s].get(next[s]) {
                let ready = match pass {
                    Pass::Forward(_) if s == 0 => Some(0.0),
                    Pass::Forward(i) => fwd[s - 1][i as usize].map(|t| t + transfer),
                    Pass::Backward(i) if s + 1 == stages => fwd[s][i as usize],
                    Pass::Backward(i) => bwd[s + 1][i as usize].map(|t| t + transfer),
                };
                let Some(ready) = ready else { break };
                let start = ready.max(free[s]);
                let (end, slot) = match pass {
                    Pass::Forward(i) => (start + costs[s].forward, &mut fwd[s][i as usize]),
                    Pass::Backward(i) => (start + costs[s].backward, &mut bwd[s][i as usize]),
                };
                *slot = Some(end);
                free[s] = end;
                passes[s].push((pass, start, end));
                next[s] += 1;
                done += 1;
                progressed = true;
            }
        }
        assert!(
            progressed,
            "a schedule's passes wait on each other in a cycle"
        );
    }
    let makespan = free.iter().copied().fold(0.0, f64::max);
    let busy: Vec<f64> = costs
        .iter()
        .map(|c| f64::from(micro) * (c.forward + c.backward))
        .collect();
    let bubble = busy
        .iter()
        .map(|b| {
            if makespan > 0.0 {
                1.0 - b / makespan
            } else {
                0.0
            }
        })
        .collect();
    Ok(Timeline {
        makespan,
        busy,
        bubble,
        passes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use Pass::{Backward as B, Forward as F};

    #[test]
    fn names_parse_and_print_and_an_unknown_one_lists_them() {
        for s in [Schedule::GPipe, Schedule::OneFOneB] {
            assert_eq!(s.to_string().parse::<Schedule>(), Ok(s));
        }
        let err = "pipedream".parse::<Schedule>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown pipeline schedule 'pipedream'; accepted: gpipe, 1f1b"
        );
    }

    #[test]
    fn one_f_one_b_fills_alternates_and_drains() {
        let s = Schedule::OneFOneB;
        assert_eq!(
            s.order(4, 0, 6).unwrap(),
            [
                F(0),
                F(1),
                F(2),
                F(3),
                B(0),
                F(4),
                B(1),
                F(5),
                B(2),
                B(3),
                B(4),
                B(5)
            ]
        );
        assert_eq!(
            s.order(4, 3, 6).unwrap(),
            [
                F(0),
                B(0),
                F(1),
                B(1),
                F(2),
                B(2),
                F(3),
                B(3),
                F(4),
                B(4),
                F(5),
                B(5)
            ]
        );
        assert_eq!(
            Schedule::GPipe.order(2, 1, 3).unwrap(),
            [F(0), F(1), F(2), B(0), B(1), B(2)]
        );
        // what each stage keeps: S − s under 1F1B, every micro-batch under GPipe
        for stage in 0..4 {
            assert_eq!(s.in_flight(4, stage, 6), Ok(4 - stage));
            assert_eq!(Schedule::GPipe.in_flight(4, stage, 6), Ok(6));
        }
    }

    #[test]
    fn every_order_runs_each_pass_once_backwards_in_micro_batch_order() {
        for schedule in [Schedule::GPipe, Schedule::OneFOneB] {
            for stages in 1..6 {
                for micro in stages..stages + 7 {
                    for stage in 0..stages {
                        let order = schedule.order(stages, stage, micro).unwrap();
                        let mut sorted = order.clone();
                        sorted.sort();
                        let all: Vec<Pass> = (0..micro).map(F).chain((0..micro).map(B)).collect();
                        assert_eq!(sorted, all);
                        let backwards: Vec<Pass> = order
                            .iter()
                            .copied()
                            .filter(|p| matches!(p, B(_)))
                            .collect();
                        assert_eq!(backwards, (0..micro).map(B).collect::<Vec<_>>());
                        for m in 0..micro {
                            let at = |p| order.iter().position(|&q| q == p);
                            assert!(at(F(m)) < at(B(m)));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn equal_stages_take_the_textbook_time_and_bubble() {
        // S stages of t forward and t backward, M micro-batches: 2 (M + S − 1) t
        // under both schedules, a bubble of (S − 1) / (M + S − 1)
        let t = 0.5;
        for schedule in [Schedule::GPipe, Schedule::OneFOneB] {
            for (stages, micro) in [(1, 1), (2, 4), (4, 8), (3, 3)] {
                let costs = vec![
                    StageCost {
                        forward: t,
                        backward: t
                    };
                    stages
                ];
                let tl = timeline(schedule, &costs, micro, 0.0).unwrap();
                let (s, m) = (stages as f64, f64::from(micro));
                assert!(
                    (tl.makespan - 2.0 * (m + s - 1.0) * t).abs() < 1e-12,
                    "{schedule} {stages} {micro}: {}",
                    tl.makespan
                );
                for b in &tl.bubble {
                    assert!((b - (s - 1.0) / (m + s - 1.0)).abs() < 1e-12);
                }
            }
        }
        // a transfer between stages adds to each crossing of the critical path
        let costs = [StageCost {
            forward: 1.0,
            backward: 2.0,
        }; 2];
        let tl = timeline(Schedule::GPipe, &costs, 1, 0.25).unwrap();
        assert_eq!(tl.makespan, 1.0 + 0.25 + 1.0 + 2.0 + 0.25 + 2.0);
    }

    #[test]
    fn a_slow_stage_sets_the_pace() {
        // the second stage 3× slower: with many micro-batches the iteration
        // tends to M × its cost
        let costs = [
            StageCost {
                forward: 1.0,
                backward: 1.0,
            },
            StageCost {
                forward: 3.0,
                backward: 3.0,
            },
        ];
        let tl = timeline(Schedule::OneFOneB, &costs, 16, 0.0).unwrap();
        assert!(tl.makespan >= 16.0 * 6.0);
        assert!(tl.makespan <= 16.0 * 6.0 + 2.0, "{}", tl.makespan);
        assert!(tl.bubble[0] > 0.6 && tl.bubble[1] < 0.03, "{:?}", tl.bubble);
    }

    #[test]
    fn impossible_pipelines_are_refused_by_name() {
        assert_eq!(
            Schedule::OneFOneB.order(4, 0, 3).unwrap_err().to_string(),
            "the 1f1b schedule needs at least as many micro-batches as stages: 3 micro-batches for 4 stages (use more micro-batches, or gpipe)"
        );
        assert!(Schedule::GPipe.order(4, 0, 3).is_ok());
        assert!(matches!(
            Schedule::GPipe.order(2, 2, 3),
            Err(ScheduleError::Stage {
                stage: 2,
                stages: 2
            })
        ));
        assert!(matches!(
            timeline(Schedule::GPipe, &[], 3, 0.0),
            Err(ScheduleError::Stage { stages: 0, .. })
        ));
        let bad = [StageCost {
            forward: f64::NAN,
            backward: 1.0,
        }];
        assert!(matches!(
            timeline(Schedule::GPipe, &bad, 3, 0.0),
            Err(ScheduleError::Cost { stage: 0, .. })
        ));
    }
}
