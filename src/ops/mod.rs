//! Operation-level traces (pipeline stages, micro-batches, collectives) and
//! their what-if replay: the ByteDance straggler study's definitions (Lin et
//! al., OSDI 2025), implemented from its paper and public analysis code.
//!
//! [`OpTrace::new`] builds every step's dependency graph ([`graph`]) from the
//! records and measures each collective member's *transfer* time (its end minus
//! the latest start in its collective). [`simulate::play`] replays a step with
//! chosen durations. The analysis ([`OpTrace::analyze`]):
//!
//! - **replayed** step time: the recorded durations replayed (the dependency
//!   model without the launch gaps the trace does not explain);
//! - **ideal** step time: every computation replaced by its kind's mean and
//!   every communication by its kind's median (duration and transfer), over all
//!   steps and workers;
//! - **slowdown S** = mean replayed / mean ideal;
//! - **attribution** to a data-parallel rank, a stage, an operation kind or a
//!   worker: mean step time with only that group's operations at their recorded
//!   durations (the rest ideal), over the mean ideal;
//! - **M_W** and **M_S**: the share of the slowdown removed by fixing the worst
//!   3 % of workers (by the smaller of their rank's and stage's attribution),
//!   or the last stage: (replayed − fixed) / (replayed − ideal).

pub mod graph;
pub mod placements;
pub mod record;
pub mod recut;
pub mod simulate;

use std::collections::BTreeMap;

use crate::stats::{mean, median};
pub use graph::{GraphError, StepGraph};
pub use record::{read_ops, write_ops, OpKind, OpRecord, OpsError};
use simulate::{play, Durations};

/// An operation trace with its dependency graphs.
#[derive(Debug, Clone)]
pub struct OpTrace {
    /// The operations.
    pub ops: Vec<OpRecord>,
    /// One graph per step, in step order.
    pub graphs: Vec<StepGraph>,
    /// Recorded durations, s.
    pub duration: Vec<f64>,
    /// Recorded transfer times of collective members (the duration elsewhere), s.
    pub transfer: Vec<f64>,
}

/// What removing or adding back a group of operations does (the paper's
/// Eq. 5): `removed` = (replayed − t_removed) / (replayed − ideal).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Explained {
    /// Mean replayed step time, s.
    pub t_replayed: f64,
    /// Mean ideal step time, s.
    pub t_ideal: f64,
    /// Mean step time with the group fixed (ideal) and the rest recorded, s.
    pub t_removed: f64,
    /// Mean step time with only the group recorded, s.
    pub t_added: f64,
    /// Share of the slowdown the fix removes.
    pub removed: f64,
    /// Share of the slowdown the group alone brings back.
    pub added: f64,
}

/// A worker of an operation trace: data-parallel rank × stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct OpWorker {
    /// Data-parallel rank.
    pub dp_rank: u32,
    /// Pipeline stage.
    pub stage: u32,
    /// Global rank.
    pub rank: u32,
}

/// The what-if analysis of an operation trace.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct OpAnalysis {
    /// Steps, in order.
    pub steps: Vec<i64>,
    /// Recorded step times, s.
    pub recorded_s: Vec<f64>,
    /// Replayed step times, s.
    pub replayed_s: Vec<f64>,
    /// Ideal step times, s.
    pub ideal_s: Vec<f64>,
    /// S = mean replayed / mean ideal.
    pub slowdown: f64,
    /// Mean |replayed − recorded| / recorded: how far the dependency model is
    /// from the trace.
    pub replay_error: f64,
    /// Slowdown with only one data-parallel rank's operations recorded.
    pub by_dp_rank: BTreeMap<u32, f64>,
    /// Slowdown with only one stage's operations recorded.
    pub by_stage: BTreeMap<u32, f64>,
    /// Slowdown with only one kind's operations recorded (sends and receives
    /// grouped as `forward-pp-comm` / `backward-pp-comm`).
    pub by_optype: BTreeMap<String, f64>,
    /// Slowdown with only one worker's operations recorded.
    pub by_worker: Vec<(OpWorker, f64)>,
    /// The workers M_W fixes.
    pub worst_workers: Vec<OpWorker>,
    /// M_W: fixing the worst 3 % of workers.
    pub m_w: Explained,
    /// M_S: fixing the last stage.
    pub m_s: Explained,
}

impl OpTrace {
    /// Builds the graphs of every step of `ops`.
    pub fn new(ops: Vec<OpRecord>) -> Result<OpTrace, GraphError> {
        let mut by_step: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
        for (i, o) in ops.iter().enumerate() {
            by_step.entry(o.step).or_default().push(i);
        }
        let graphs = by_step
            .values()
            .map(|indices| StepGraph::build(&ops, indices))
            .collect::<Result<Vec<_>, _>>()?;
        let duration: Vec<f64> = ops.iter().map(|o| o.duration_s).collect();
        let mut transfer = duration.clone();
        for g in &graphs {
            for members in &g.groups {
                let latest = members
                    .iter()
                    .map(|&m| ops[g.ops[m as usize]].start_s)
                    .fold(f64::MIN, f64::max);
                for &m in members {
                    let i = g.ops[m as usize];
                    transfer[i] = (ops[i].end_s() - latest).max(0.0);
                }
            }
        }
        Ok(OpTrace {
            ops,
            graphs,
            duration,
            transfer,
        })
    }

    /// Every worker, in (data-parallel rank, stage) order.
    pub fn workers(&self) -> Vec<OpWorker> {
        let mut w: Vec<OpWorker> = self
            .ops
            .iter()
            .map(|o| OpWorker {
                dp_rank: o.dp_rank,
                stage: o.stage,
                rank: o.rank,
            })
            .collect();
        w.sort();
        w.dedup_by_key(|w| (w.dp_rank, w.stage));
        w
    }

    /// The ideal durations and transfers.
    pub fn ideal(&self) -> (Vec<f64>, Vec<f64>) {
        let mut by_kind: BTreeMap<OpKind, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
        for (i, o) in self.ops.iter().enumerate() {
            let e = by_kind.entry(o.kind).or_default();
            e.0.push(self.duration[i]);
            e.1.push(self.transfer[i]);
        }
        let typical: BTreeMap<OpKind, (f64, f64)> = by_kind
            .into_iter()
            .map(|(kind, (mut d, mut t))| {
                let v = if kind.is_communication() {
                    (median(&mut d), median(&mut t))
                } else {
                    (mean(&d), mean(&t))
                };
                (kind, v)
            })
            .collect();
        self.ops.iter().map(|o| typical[&o.kind]).unzip()
    }

    /// Step times replayed with `duration` and `transfer`, s.
    pub fn replay(&self, duration: &[f64], transfer: &[f64]) -> Result<Vec<f64>, GraphError> {
        self.graphs
            .iter()
            .map(|g| play(g, Durations { duration, transfer }).map(|p| p.step_s()))
            .collect()
    }

    /// Mean step time with the operations `keep` picks recorded and the rest
    /// from `(duration, transfer)`.
    fn mixed(
        &self,
        base: (&[f64], &[f64]),
        other: (&[f64], &[f64]),
        pick: impl Fn(&OpRecord) -> bool,
    ) -> Result<f64, GraphError> {
        let (mut d, mut t) = (base.0.to_vec(), base.1.to_vec());
        for (i, o) in self.ops.iter().enumerate() {
            if pick(o) {
                d[i] = other.0[i];
                t[i] = other.1[i];
            }
        }
        Ok(mean(&self.replay(&d, &t)?))
    }

    /// The full analysis.
    pub fn analyze(&self) -> Result<OpAnalysis, GraphError> {
        let recorded = (&self.duration[..], &self.transfer[..]);
        let (id, it) = self.ideal();
        let ideal = (&id[..], &it[..]);
        let replayed_s = self.replay(recorded.0, recorded.1)?;
        let ideal_s = self.replay(ideal.0, ideal.1)?;
        let (t_replayed, t_ideal) = (mean(&replayed_s), mean(&ideal_s));
        let recorded_s: Vec<f64> = self
            .graphs
            .iter()
            .map(|g| {
                let ops = g.ops.iter().map(|&i| &self.ops[i]);
                let first = ops.clone().map(|o| o.start_s).fold(f64::MAX, f64::min);
                ops.map(|o| o.end_s()).fold(f64::MIN, f64::max) - first
            })
            .collect();
        let replay_error = mean(
            recorded_s
                .iter()
                .zip(&replayed_s)
                .map(|(r, p)| (p - r).abs() / r.max(f64::MIN_POSITIVE)),
        );
        let only = |pick: &dyn Fn(&OpRecord) -> bool| -> Result<f64, GraphError> {
            Ok(self.mixed(ideal, recorded, pick)? / t_ideal)
        };
        let workers = self.workers();
        let ranks: std::collections::BTreeSet<u32> = workers.iter().map(|w| w.dp_rank).collect();
        let stages: std::collections::BTreeSet<u32> = workers.iter().map(|w| w.stage).collect();
        let by_dp_rank = ranks
            .into_iter()
            .map(|r| Ok((r, only(&|o| o.dp_rank == r)?)))
            .collect::<Result<BTreeMap<_, _>, GraphError>>()?;
        let by_stage = stages
            .into_iter()
            .map(|s| Ok((s, only(&|o| o.stage == s)?)))
            .collect::<Result<BTreeMap<_, _>, GraphError>>()?;
        let mut by_optype = BTreeMap::new();
        let names: std::collections::BTreeSet<&str> =
            self.ops.iter().map(|o| o.kind.attribution_name()).collect();
        for name in names {
            by_optype.insert(
                name.to_owned(),
                only(&|o| o.kind.attribution_name() == name)?,
            );
        }
        let by_worker = workers
            .iter()
            .map(|w| Ok((*w, only(&|o| o.dp_rank == w.dp_rank && o.stage == w.stage)?)))
            .collect::<Result<Vec<_>, GraphError>>()?;
        // M_W: the worst ⌈3 % of workers⌉ by min(rank's, stage's attribution).
        let mut scored: Vec<(f64, OpWorker)> = workers
            .iter()
            .map(|w| (by_dp_rank[&w.dp_rank].min(by_stage[&w.stage]), *w))
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.rank.cmp(&b.1.rank)));
        let worst_workers: Vec<OpWorker> = scored
            .iter()
            .take((workers.len() * 3).div_ceil(100))
            .map(|s| s.1)
            .collect();
        let explain = |pick: &dyn Fn(&OpRecord) -> bool| -> Result<Explained, GraphError> {
            let t_removed = self.mixed(recorded, ideal, pick)?;
            let t_added = self.mixed(ideal, recorded, pick)?;
            let gap = t_replayed - t_ideal;
            Ok(Explained {
                t_replayed,
                t_ideal,
                t_removed,
                t_added,
                removed: (t_replayed - t_removed) / gap,
                added: (t_added - t_ideal) / gap,
            })
        };
        let m_w = explain(&|o| {
            worst_workers
                .iter()
                .any(|w| w.dp_rank == o.dp_rank && w.stage == o.stage)
        })?;
        let last_stage = workers.iter().map(|w| w.stage).max().unwrap_or(0);
        let m_s = explain(&|o| o.stage == last_stage)?;
        Ok(OpAnalysis {
            steps: self.graphs.iter().map(|g| g.step).collect(),
            recorded_s,
            replayed_s,
            ideal_s,
            slowdown: t_replayed / t_ideal,
            replay_error,
            by_dp_rank,
            by_stage,
            by_optype,
            by_worker,
            worst_workers,
            m_w,
            m_s,
        })
    }
}
