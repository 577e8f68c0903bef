//! Plays a step's dependency graph with chosen durations.

use std::collections::VecDeque;

use super::graph::{GraphError, StepGraph};

/// Durations to play: `duration[i]` for an operation outside any collective,
/// `transfer[i]` (its time after the last member of its collective started)
/// for one inside; both indexed like the op list.
#[derive(Debug, Clone, Copy)]
pub struct Durations<'a> {
    /// Seconds, per operation.
    pub duration: &'a [f64],
    /// Seconds, per operation.
    pub transfer: &'a [f64],
}

/// When every node of a played step started and ended, seconds from the step's
/// start.
#[derive(Debug, Clone, PartialEq)]
pub struct Played {
    /// Per node.
    pub start: Vec<f64>,
    /// Per node.
    pub end: Vec<f64>,
}

impl Played {
    /// The step's time: when its last operation ended.
    pub fn step_s(&self) -> f64 {
        self.end.iter().copied().fold(0.0, f64::max)
    }
}

/// Plays `graph`: a node starts when its predecessors have ended; a node
/// outside a collective ends `duration` later; a collective's members end at
/// their latest start plus their own `transfer`.
pub fn play(graph: &StepGraph, d: Durations<'_>) -> Result<Played, GraphError> {
    let n = graph.ops.len();
    let mut waiting: Vec<u32> = graph.deps.iter().map(|d| d.len() as u32).collect();
    let mut next: Vec<Vec<u32>> = vec![Vec::new(); n];
    for (v, deps) in graph.deps.iter().enumerate() {
        for &u in deps {
            next[u as usize].push(v as u32);
        }
    }
    let mut started_in_group = vec![0usize; graph.groups.len()];
    let mut start = vec![0.0f64; n];
    let mut end = vec![f64::NAN; n];
    let mut queue: VecDeque<u32> = (0..n as u32)
        .filter(|&v| waiting[v as usize] == 0)
        .collect();
    let mut finished = 0usize;
    let mut done: Vec<u32> = Vec::new();
    while let Some(v) = queue.pop_front() {
        let vi = v as usize;
        start[vi] = graph.deps[vi]
            .iter()
            .map(|&u| end[u as usize])
            .fold(0.0, f64::max);
        done.clear();
        match graph.group(vi) {
            None => {
                end[vi] = start[vi] + d.duration[graph.ops[vi]];
                done.push(v);
            }
            Some(g) => {
                started_in_group[g] += 1;
                let members = &graph.groups[g];
                if started_in_group[g] == members.len() {
                    let at = members
                        .iter()
                        .map(|&m| start[m as usize])
                        .fold(0.0, f64::max);
                    for &m in members {
                        end[m as usize] = at + d.transfer[graph.ops[m as usize]].max(0.0);
                        done.push(m);
                    }
                }
            }
        }
        for &u in &done {
            finished += 1;
            for &w in &next[u as usize] {
                waiting[w as usize] -= 1;
                if waiting[w as usize] == 0 {
                    queue.push_back(w);
                }
            }
        }
    }
    if finished < n {
        return Err(GraphError::Cycle {
            step: graph.step,
            stuck: n - finished,
        });
    }
    Ok(Played { start, end })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{OpKind, OpRecord};

    fn op(kind: OpKind, stage: u32, seq_id: u32, start_s: f64, duration_s: f64) -> OpRecord {
        OpRecord {
            step: 0,
            dp_rank: 0,
            stage,
            rank: stage,
            kind,
            seq_id,
            mc: if kind.is_compute() { 0 } else { -1 },
            mb_id: -1,
            gmc: -1,
            start_s,
            duration_s,
        }
    }

    #[test]
    fn a_collective_waits_for_its_latest_member() {
        use OpKind::*;
        let ops = vec![
            op(ForwardCompute, 0, 0, 0.0, 1.0),
            op(ForwardCompute, 1, 0, 0.0, 3.0),
            op(OptimizerClipMainGrad, 0, 0, 1.0, 2.5),
            op(OptimizerClipMainGrad, 1, 0, 3.0, 0.5),
            op(Optimizer, 0, 0, 3.5, 1.0),
            op(Optimizer, 1, 0, 3.5, 1.0),
        ];
        let all: Vec<usize> = (0..ops.len()).collect();
        let g = crate::ops::graph::StepGraph::build(&ops, &all).unwrap();
        let duration: Vec<f64> = ops.iter().map(|o| o.duration_s).collect();
        let transfer = vec![0.5; ops.len()];
        let played = play(
            &g,
            Durations {
                duration: &duration,
                transfer: &transfer,
            },
        )
        .unwrap();
        // Clipping starts on stage 0 at 1.0, on stage 1 at 3.0: both end at 3.5.
        assert_eq!(played.end[2], 3.5);
        assert_eq!(played.end[3], 3.5);
        assert_eq!(played.step_s(), 4.5);
        // With the slow pass at 1.0 s the step takes 2.5 s.
        let mut even = duration.clone();
        even[1] = 1.0;
        let played = play(
            &g,
            Durations {
                duration: &even,
                transfer: &transfer,
            },
        )
        .unwrap();
        assert_eq!(played.step_s(), 2.5);
    }
}
