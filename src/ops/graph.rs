//! The dependency model of one training step: which operation waits for which.
//!
//! Built from the step's own records, for Megatron-LM's 1F1B pipeline schedule
//! with data parallelism (the schedule of the ByteDance traces; interleaved
//! schedules, `mc > 0`, are refused). On each worker (a data-parallel rank ×
//! pipeline stage):
//!
//! - forward and backward passes run one after another in their recorded
//!   order;
//! - each kind of send and receive is its own stream, in sequence order;
//! - the i-th forward pass waits for the i-th forward receive, which is issued
//!   after forward pass i − 1; the i-th forward send follows forward pass i;
//!   backward passes, receives and sends alike; the first backward receive and
//!   send are issued after the forward pass just before the first backward;
//! - parameter all-gathers and gradient reduce-scatters share a stream; the
//!   first forward pass of a model chunk waits for its chunk's all-gather;
//! - after the last pass: gc → layer-norm all-reduce → embedding all-reduce →
//!   reduce-scatters (or, when a separate all-reduce overlaps the backward
//!   passes, that one) → gradient clipping → optimiser.
//!
//! Collectives finish together: a send with its receive (same data-parallel
//! rank, neighbouring stages, same sequence), an all-gather or reduce-scatter
//! with the same one on every data-parallel rank of its stage, the embedding
//! all-reduce of the first and last stage of a rank, and gradient clipping on
//! every worker. A collective ends at the latest start of its members plus each
//! member's own transfer time.

use std::collections::BTreeMap;

use super::{OpKind, OpRecord};

/// A node no collective holds.
const ALONE: u32 = u32::MAX;

/// One step's operations and their dependencies.
#[derive(Debug, Clone, PartialEq)]
pub struct StepGraph {
    /// The step.
    pub step: i64,
    /// Index of each node's operation in the op list the graph was built from.
    pub ops: Vec<usize>,
    /// Each node's predecessors (node indices).
    pub deps: Vec<Vec<u32>>,
    /// Each node's collective (index into `groups`), or `ALONE`.
    group_of: Vec<u32>,
    /// The collectives: their member nodes.
    pub groups: Vec<Vec<u32>>,
}

/// Why a step's dependencies cannot be modelled.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum GraphError {
    /// The records do not fit the modelled schedule.
    #[error("step {step}, data-parallel rank {dp_rank}, stage {stage}: {problem}")]
    Schedule {
        /// Step.
        step: i64,
        /// Worker's data-parallel rank.
        dp_rank: u32,
        /// Worker's stage.
        stage: u32,
        /// What does not fit.
        problem: String,
    },
    /// The dependencies wait on each other.
    #[error("step {step}: the operations' dependencies form a cycle ({stuck} operations can never start)")]
    Cycle {
        /// Step.
        step: i64,
        /// How many never start.
        stuck: usize,
    },
}

impl StepGraph {
    /// The collective of node `n`, if any.
    pub fn group(&self, n: usize) -> Option<usize> {
        (self.group_of[n] != ALONE).then_some(self.group_of[n] as usize)
    }

    /// Builds the graph of one step; `indices` are the positions in `ops` of
    /// the step's operations.
    pub fn build(ops: &[OpRecord], indices: &[usize]) -> Result<StepGraph, GraphError> {
        let step = indices.first().map_or(0, |&i| ops[i].step);
        let mut by_worker: BTreeMap<(u32, u32), Vec<u32>> = BTreeMap::new();
        for (node, &i) in indices.iter().enumerate() {
            by_worker
                .entry((ops[i].dp_rank, ops[i].stage))
                .or_default()
                .push(node as u32);
        }
        let op = |n: u32| &ops[indices[n as usize]];
        let mut graph = StepGraph {
            step,
            ops: indices.to_vec(),
            deps: vec![Vec::new(); indices.len()],
            group_of: vec![ALONE; indices.len()],
            groups: Vec::new(),
        };
        // Matched p2p nodes per (kind, dp_rank, stage), in sequence order.
        let mut p2p: BTreeMap<(OpKind, u32, u32), Vec<u32>> = BTreeMap::new();
        for (&(dp_rank, stage), nodes) in &mut by_worker {
            nodes.sort_by(|&a, &b| {
                let (a, b) = (op(a), op(b));
                a.start_s
                    .total_cmp(&b.start_s)
                    .then(a.seq_id.cmp(&b.seq_id))
                    .then(a.kind.cmp(&b.kind))
            });
            let fail = |problem: String| GraphError::Schedule {
                step,
                dp_rank,
                stage,
                problem,
            };
            if let Some(&n) = nodes.iter().find(|&&n| op(n).mc > 0) {
                return Err(fail(format!(
                    "{} has model chunk {}: interleaved pipeline schedules are not modelled",
                    op(n).kind.as_str(),
                    op(n).mc
                )));
            }
            let of = |kind: OpKind| -> Vec<u32> {
                let mut v: Vec<u32> = nodes
                    .iter()
                    .copied()
                    .filter(|&n| op(n).kind == kind)
                    .collect();
                v.sort_by_key(|&n| op(n).seq_id);
                v
            };
            let compute: Vec<u32> = nodes
                .iter()
                .copied()
                .filter(|&n| op(n).kind.is_compute())
                .collect();
            graph.chain(&compute, &[]);
            let first_backward = compute
                .iter()
                .position(|&n| op(n).kind == OpKind::BackwardCompute);
            let before_first_backward = first_backward
                .and_then(|i| i.checked_sub(1))
                .map(|i| compute[i]);
            for (pass, recv, send) in [
                (
                    OpKind::ForwardCompute,
                    OpKind::ForwardRecv,
                    OpKind::ForwardSend,
                ),
                (
                    OpKind::BackwardCompute,
                    OpKind::BackwardRecv,
                    OpKind::BackwardSend,
                ),
            ] {
                let passes = of(pass);
                let last_start = passes
                    .iter()
                    .map(|&n| op(n).start_s)
                    .fold(f64::MIN, f64::max);
                let first_end = passes
                    .iter()
                    .map(|&n| op(n).end_s())
                    .fold(f64::MAX, f64::min);
                const EPS: f64 = 5e-5;
                for (kind, is_recv) in [(recv, true), (send, false)] {
                    let stream = of(kind);
                    graph.chain(&stream, &[]);
                    // Issued before the first or after the last pass: no peer.
                    let (live, idle): (Vec<u32>, Vec<u32>) = stream.iter().partition(|&&n| {
                        if is_recv {
                            op(n).start_s <= last_start + EPS
                        } else {
                            op(n).end_s() >= first_end - EPS
                        }
                    });
                    for n in idle {
                        graph.solo(n);
                    }
                    let offset = match (live.len(), passes.len()) {
                        (0, _) => continue,
                        (l, p) if l == p => 0,
                        (l, p) if is_recv && l + 1 == p => 1,
                        (l, p) => {
                            return Err(fail(format!(
                                "{l} live {} for {p} {} (the 1F1B schedule has one each)",
                                kind.as_str(),
                                pass.as_str()
                            )))
                        }
                    };
                    for (i, &n) in live.iter().enumerate() {
                        let at = i + offset;
                        if is_recv {
                            graph.deps[passes[at] as usize].push(n);
                            if at > 0 {
                                graph.deps[n as usize].push(passes[at - 1]);
                            }
                        } else {
                            graph.deps[n as usize].push(passes[at]);
                        }
                        if i == 0 && pass == OpKind::BackwardCompute {
                            if let Some(f) = before_first_backward {
                                graph.deps[n as usize].push(f);
                            }
                        }
                    }
                    p2p.insert((kind, dp_rank, stage), live);
                }
            }
            // Data-parallel stream and the passes that wait on it.
            let mut dp_stream: Vec<u32> = nodes
                .iter()
                .copied()
                .filter(|&n| {
                    matches!(
                        op(n).kind,
                        OpKind::ParamsAllGather | OpKind::GradsReduceScatter
                    )
                })
                .collect();
            dp_stream.sort_by(|&a, &b| op(a).start_s.total_cmp(&op(b).start_s));
            graph.chain(&dp_stream, &[]);
            let gathers = of(OpKind::ParamsAllGather);
            let mut chunks_fed = Vec::new();
            for &g in gathers.iter().rev() {
                let mc = op(g).mc;
                if chunks_fed.contains(&mc) {
                    continue;
                }
                chunks_fed.push(mc);
                if let Some(&first) = compute.iter().find(|&&n| {
                    op(n).kind == OpKind::ForwardCompute && op(n).mc.max(0) == mc.max(0)
                }) {
                    graph.deps[first as usize].push(g);
                }
            }
            // After the last pass.
            let last_pass = compute
                .iter()
                .copied()
                .max_by(|&a, &b| op(a).end_s().total_cmp(&op(b).end_s()));
            let overlapped = !of(OpKind::SeparateGradsAllReduce).is_empty();
            let scatters = of(OpKind::GradsReduceScatter);
            let mut tail = of(OpKind::Gc);
            tail.extend(of(OpKind::LayernormGradsAllReduce));
            tail.extend(of(OpKind::EmbeddingGradsAllReduce));
            if overlapped {
                for &s in &scatters {
                    let chunk_last = compute
                        .iter()
                        .copied()
                        .filter(|&n| {
                            op(n).kind == OpKind::BackwardCompute
                                && op(n).mc.max(0) == op(s).mc.max(0)
                        })
                        .max_by(|&a, &b| op(a).end_s().total_cmp(&op(b).end_s()));
                    graph.deps[s as usize].extend(chunk_last);
                }
                tail.extend(of(OpKind::SeparateGradsAllReduce));
            } else {
                tail.extend(scatters.iter().copied());
            }
            tail.extend(of(OpKind::OptimizerClipMainGrad));
            tail.extend(of(OpKind::Optimizer));
            let mut head: Vec<u32> = last_pass.into_iter().collect();
            if overlapped {
                head.extend(scatters.last());
            }
            graph.chain(&tail, &head);
        }
        graph.collectives(ops, &p2p);
        for d in &mut graph.deps {
            d.sort_unstable();
            d.dedup();
        }
        Ok(graph)
    }

    /// Each of `nodes` waits for the one before; the first for all of `head`.
    fn chain(&mut self, nodes: &[u32], head: &[u32]) {
        let mut before: Vec<u32> = head.to_vec();
        for &n in nodes {
            self.deps[n as usize].extend(before.iter().copied().filter(|&b| b != n));
            before = vec![n];
        }
    }

    /// `n` is a collective of its own (a send or receive with no peer).
    fn solo(&mut self, n: u32) {
        self.join(&[n]);
    }

    fn join(&mut self, members: &[u32]) {
        let id = self.groups.len() as u32;
        for &m in members {
            self.group_of[m as usize] = id;
        }
        self.groups.push(members.to_vec());
    }

    fn collectives(&mut self, ops: &[OpRecord], p2p: &BTreeMap<(OpKind, u32, u32), Vec<u32>>) {
        let index = self.ops.clone();
        let op = |n: u32| &ops[index[n as usize]];
        let mut paired = vec![false; self.ops.len()];
        for (&(kind, dp_rank, stage), sends) in p2p {
            let peer = match kind {
                OpKind::ForwardSend => stage.checked_add(1).map(|s| (OpKind::ForwardRecv, s)),
                OpKind::BackwardSend => stage.checked_sub(1).map(|s| (OpKind::BackwardRecv, s)),
                _ => None,
            };
            let Some((peer_kind, peer_stage)) = peer else {
                continue;
            };
            let Some(recvs) = p2p.get(&(peer_kind, dp_rank, peer_stage)) else {
                continue;
            };
            for (&s, &r) in sends.iter().zip(recvs) {
                self.join(&[s, r]);
                paired[s as usize] = true;
                paired[r as usize] = true;
            }
        }
        let mut shared: BTreeMap<(OpKind, u32, u32, u32), Vec<u32>> = BTreeMap::new();
        for n in 0..self.ops.len() as u32 {
            let o = op(n);
            let key = match o.kind {
                k if k.is_p2p() => {
                    if !paired[n as usize] && self.group_of[n as usize] == ALONE {
                        self.solo(n);
                    }
                    continue;
                }
                // Every data-parallel rank of the stage.
                OpKind::ParamsAllGather
                | OpKind::GradsReduceScatter
                | OpKind::SeparateGradsAllReduce => (o.kind, o.seq_id, o.stage, 0),
                // The first and last stage of one data-parallel rank.
                OpKind::EmbeddingGradsAllReduce => (o.kind, o.seq_id, 0, o.dp_rank),
                // Every worker.
                OpKind::OptimizerClipMainGrad => (o.kind, o.seq_id, 0, 0),
                _ => continue,
            };
            shared.entry(key).or_default().push(n);
        }
        for members in shared.into_values() {
            self.join(&members);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn op(
        kind: OpKind,
        dp_rank: u32,
        stage: u32,
        seq_id: u32,
        start_s: f64,
        duration_s: f64,
    ) -> OpRecord {
        OpRecord {
            step: 0,
            dp_rank,
            stage,
            rank: dp_rank * 10 + stage,
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
    fn a_two_stage_pipeline_pairs_sends_with_receives() {
        use OpKind::*;
        // Stage 0: F0 → send; stage 1: recv → F0 → B0 → send back; stage 0: recv → B0.
        let ops = vec![
            op(ForwardCompute, 0, 0, 0, 0.0, 1.0),
            op(ForwardSend, 0, 0, 0, 1.0, 0.1),
            op(ForwardRecv, 0, 1, 0, 0.0, 1.1),
            op(ForwardCompute, 0, 1, 0, 1.1, 1.0),
            op(BackwardCompute, 0, 1, 0, 2.1, 2.0),
            op(BackwardSend, 0, 1, 0, 4.1, 0.1),
            op(BackwardRecv, 0, 0, 0, 1.1, 3.1),
            op(BackwardCompute, 0, 0, 0, 4.2, 2.0),
            op(OptimizerClipMainGrad, 0, 0, 0, 6.2, 0.1),
            op(OptimizerClipMainGrad, 0, 1, 0, 6.2, 0.1),
        ];
        let all: Vec<usize> = (0..ops.len()).collect();
        let g = StepGraph::build(&ops, &all).unwrap();
        let together = |a: usize, b: usize| g.group(a).is_some() && g.group(a) == g.group(b);
        assert!(together(1, 2), "forward send and receive");
        assert!(together(5, 6), "backward send and receive");
        assert!(together(8, 9), "clipping spans every worker");
        assert!(g.deps[3].contains(&2), "the pass waits for its receive");
        assert!(g.deps[1].contains(&0), "the send follows its pass");
        assert!(g.deps[7].contains(&6));
        assert!(g.deps[8].contains(&7), "clipping after the last pass");
    }

    #[test]
    fn interleaved_schedules_are_refused_with_their_worker() {
        let mut o = op(OpKind::ForwardCompute, 1, 2, 0, 0.0, 1.0);
        o.mc = 1;
        let e = StepGraph::build(&[o], &[0]).unwrap_err().to_string();
        assert!(
            e.contains("rank 1, stage 2") && e.contains("interleaved"),
            "{e}"
        );
    }
}
