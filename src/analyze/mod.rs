//! Offline trace analysis: which worker is slow, when, why, and what it costs.
//!
//! [`load::load`] reads a trace directory (a run's, a bench's, an import's)
//! and reports, per worker, its time per unit (median, p95, p99), its share of
//! iterations as the laggard and its barrier wait; per iteration, how many
//! workers straggled; each worker's straggling classified ([`classify`]); and
//! the slowdown **S = actual / ideal time**, where the ideal replaces each
//! worker's busy time in an iteration by that iteration's median (the
//! ByteDance definition on a synchronous trace: the iteration keeps its
//! overhead beyond the slowest worker), with each worker's own S — the ideal
//! with only that worker as recorded — and its share (S_w − 1) / (S − 1).
//!
//! When the trace came with operation records (an import of ByteDance
//! operation traces writes `ops.parquet` beside it), S and the attributions
//! come from replaying the operations' dependencies instead ([`crate::ops`]):
//! pipelines and collectives, not a barrier, decide what a slow worker costs.

pub mod classify;
pub mod load;

use std::path::{Path, PathBuf};

use serde::Serialize;

pub use classify::{Evidence, Straggling};
pub use load::{load, LoadError, Observed, MISSING};

use crate::ops::OpAnalysis;

/// One worker's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkerAnalysis {
    /// Worker index.
    pub worker: u32,
    /// Units it computed.
    pub units: usize,
    /// Median time per unit, µs.
    pub median_unit_us: f64,
    /// 95th percentile, µs.
    pub p95_unit_us: f64,
    /// 99th percentile, µs.
    pub p99_unit_us: f64,
    /// Share of iterations it was the detected laggard in.
    pub laggard_share: f64,
    /// Its total wait at barriers, µs.
    pub barrier_wait_us: u64,
    /// Its barrier wait over its busy plus wait time.
    pub barrier_wait_share: f64,
    /// Its straggling.
    pub class: Straggling,
    /// Why.
    pub evidence: Evidence,
    /// The evidence in words.
    pub why: String,
    /// S with only this worker as recorded (the rest ideal).
    pub slowdown: f64,
    /// (its S − 1) / (S − 1): its share of the slowdown (0 when S ≤ 1).
    pub share_of_slowdown: f64,
    /// Where its slow iterations lost their time: `link` when most of its
    /// time over the iteration's median went into sending its gradients or
    /// its parameter shard (the units' `send_us`, the workers' `transit_us`
    /// and `params_transit_us`), `compute` when
    /// most did not, `none` without a slow iteration. Read from what the
    /// run measured, never from the ground-truth columns.
    pub slow_in: &'static str,
    /// The share of its excess time in slow iterations spent sending.
    pub link_share: f64,
}

/// Stragglers of one iteration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Incidence {
    /// Iteration.
    pub iteration: u64,
    /// Workers slower than the threshold over the iteration's median.
    pub stragglers: u32,
    /// The detected laggard.
    pub laggard: Option<u32>,
}

/// The analysis of one trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Analysis {
    /// The trace directory (or operation file).
    pub trace: String,
    /// Its job id.
    pub job_id: String,
    /// Where S comes from: `barrier` (a synchronous trace's iterations) or
    /// `operations` (an operation trace's replayed dependencies).
    pub method: &'static str,
    /// Workers.
    pub workers: usize,
    /// Iterations.
    pub iterations: usize,
    /// Slow means busy > (1 + threshold) × the iteration's median.
    pub threshold: f64,
    /// S = actual / ideal time.
    pub slowdown: f64,
    /// Mean actual iteration time, µs.
    pub actual_iteration_us: f64,
    /// Mean ideal iteration time, µs.
    pub ideal_iteration_us: f64,
    /// Per worker.
    pub per_worker: Vec<WorkerAnalysis>,
    /// Iterations with at least one straggler.
    pub iterations_with_stragglers: usize,
    /// Per iteration.
    pub incidence: Vec<Incidence>,
    /// Worker rows missing (workers absent from some iterations).
    pub missing_rows: u64,
    /// Units of zero duration.
    pub zero_units: u64,
    /// The operation-level replay, when the trace has operations.
    pub operations: Option<OpAnalysis>,
    /// How well the run's online predictor did, when it had one.
    pub online_predictions: Option<PredictionScore>,
}

/// The run's own online predictions of each worker's time per unit, scored
/// against what the worker then took.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PredictionScore {
    /// Worker rows with a prediction.
    pub predictions: usize,
    /// Mean absolute error, µs.
    pub mae_us: f64,
    /// Mean absolute error over the actual time.
    pub mape: f64,
}

/// Scores (predicted, actual) pairs; `None` when there are none.
pub fn score_predictions(pairs: &[(f64, f64)]) -> Option<PredictionScore> {
    if pairs.is_empty() {
        return None;
    }
    let n = pairs.len() as f64;
    let mae_us = pairs.iter().map(|(p, a)| (p - a).abs()).sum::<f64>() / n;
    let mape = pairs
        .iter()
        .map(|(p, a)| (p - a).abs() / a.max(f64::MIN_POSITIVE))
        .sum::<f64>()
        / n;
    Some(PredictionScore {
        predictions: pairs.len(),
        mae_us,
        mape,
    })
}

/// Percentile `p` (0–100, nearest rank) of sorted `v`.
fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    f64::from(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Analyses what was read of a trace; `groups[w]` is worker w's group (a
/// pipeline stage) when the trace has one.
pub fn analyze_observed(
    trace: &str,
    observed: &Observed,
    threshold: f64,
    groups: Option<&[u32]>,
) -> Analysis {
    let n = observed.workers;
    let iterations = observed.iterations.len();
    let mut medians = Vec::with_capacity(iterations);
    let mut ratios: Vec<Vec<(usize, f64, Option<f64>)>> = vec![Vec::new(); n];
    let mut incidence = Vec::with_capacity(iterations);
    let (mut actual, mut ideal) = (0.0f64, 0.0f64);
    let mut overheads = Vec::with_capacity(iterations);
    for (i, busy) in observed.busy.iter().enumerate() {
        let present: Vec<usize> = (0..n).filter(|&w| busy[w] != MISSING).collect();
        let mut b: Vec<f64> = present.iter().map(|&w| busy[w] as f64).collect();
        let longest = b.iter().copied().fold(0.0, f64::max);
        let med = crate::stats::median(&mut b);
        let mut r: Vec<f64> = present
            .iter()
            .map(|&w| f64::from(observed.rows[i][w]))
            .collect();
        let med_rows = crate::stats::median(&mut r);
        let mut stragglers = 0;
        for &w in &present {
            let ratio = if med > 0.0 { busy[w] as f64 / med } else { 1.0 };
            stragglers += u32::from(ratio > 1.0 + threshold);
            let rows = (med_rows > 0.0).then(|| f64::from(observed.rows[i][w]) / med_rows);
            ratios[w].push((i, ratio, rows));
        }
        let wall = observed.wall[i] as f64;
        let overhead = (wall - longest).max(0.0);
        actual += wall;
        ideal += overhead + med;
        medians.push(med);
        overheads.push(overhead);
        incidence.push(Incidence {
            iteration: observed.iterations[i],
            stragglers,
            laggard: observed.laggard[i],
        });
    }
    let slowdown = if ideal > 0.0 { actual / ideal } else { 1.0 };
    // Which group is slow: the share of its workers slow in ≥ half their iterations.
    let mostly_slow: Vec<bool> = ratios
        .iter()
        .map(|r| 2 * r.iter().filter(|x| x.1 > 1.0 + threshold).count() >= r.len().max(1))
        .collect();
    let group_share = |w: usize| -> Option<f64> {
        let g = groups?;
        let members: Vec<usize> = (0..n).filter(|&v| g.get(v) == g.get(w)).collect();
        (members.len() > 1).then(|| {
            members.iter().filter(|&&v| mostly_slow[v]).count() as f64 / members.len() as f64
        })
    };
    let per_worker = (0..n)
        .map(|w| {
            let mut units = observed.unit_us.get(w).cloned().unwrap_or_default();
            units.sort_unstable();
            let (class, evidence) = classify::classify(&ratios[w], threshold, group_share(w));
            let mut kept = 0.0;
            for (i, busy) in observed.busy.iter().enumerate() {
                let own = if busy[w] == MISSING {
                    0.0
                } else {
                    busy[w] as f64
                };
                kept += overheads[i] + medians[i].max(own);
            }
            let own_slowdown = if ideal > 0.0 { kept / ideal } else { 1.0 };
            let busy_total: u64 = observed
                .busy
                .iter()
                .map(|b| b[w])
                .filter(|&b| b != MISSING)
                .sum();
            let wait: u64 = observed.barrier.iter().map(|b| b[w]).sum();
            let (slow_in, link_share) = slow_in(observed, &ratios[w], &medians, w, threshold);
            WorkerAnalysis {
                worker: w as u32,
                units: units.len(),
                median_unit_us: percentile(&units, 50.0),
                p95_unit_us: percentile(&units, 95.0),
                p99_unit_us: percentile(&units, 99.0),
                laggard_share: observed
                    .laggard
                    .iter()
                    .filter(|&&l| l == Some(w as u32))
                    .count() as f64
                    / iterations.max(1) as f64,
                barrier_wait_us: wait,
                barrier_wait_share: wait as f64 / (wait + busy_total).max(1) as f64,
                why: evidence.sentence(class, threshold),
                class,
                evidence,
                slowdown: own_slowdown,
                slow_in,
                link_share,
                share_of_slowdown: if slowdown > 1.0 {
                    (own_slowdown - 1.0) / (slowdown - 1.0)
                } else {
                    0.0
                },
            }
        })
        .collect();
    Analysis {
        trace: trace.to_owned(),
        job_id: observed
            .stamp
            .as_ref()
            .map(|s| s.job_id.clone())
            .unwrap_or_default(),
        method: "barrier",
        workers: n,
        iterations,
        threshold,
        slowdown,
        actual_iteration_us: actual / iterations.max(1) as f64,
        ideal_iteration_us: ideal / iterations.max(1) as f64,
        per_worker,
        iterations_with_stragglers: incidence.iter().filter(|i| i.stragglers > 0).count(),
        incidence,
        missing_rows: observed.missing_rows,
        zero_units: observed.zero_units,
        operations: None,
        online_predictions: score_predictions(&observed.predictions),
    }
}

/// Where worker `w`'s slow iterations (busy over `1 + threshold` times the
/// median) lost their time: the share of its excess over the median that
/// its gradients spent in its link beyond the link's time in the worker's
/// other iterations (so a loaded machine's late wake-ups, there all along,
/// are not a slow link), and `link` when that is most of it.
fn slow_in(
    observed: &Observed,
    ratios: &[(usize, f64, Option<f64>)],
    medians: &[f64],
    w: usize,
    threshold: f64,
) -> (&'static str, f64) {
    // emulated in the worker (send) or measured at the receivers (transit)
    let link = |i: usize| {
        let at = |table: &[Vec<u64>]| table.get(i).and_then(|s| s.get(w)).copied();
        (at(&observed.send).unwrap_or(0) + at(&observed.transit).unwrap_or(0)) as f64
    };
    let slow = |r: &&(usize, f64, Option<f64>)| r.1 > 1.0 + threshold;
    let mut usual: Vec<f64> = ratios
        .iter()
        .filter(|r| !slow(r))
        .map(|r| link(r.0))
        .collect();
    let usual = crate::stats::median(&mut usual);
    let (mut excess, mut sending) = (0.0, 0.0);
    for &(i, _, _) in ratios.iter().filter(slow) {
        let over = (observed.busy[i][w] as f64 - medians[i]).max(0.0);
        excess += over;
        sending += (link(i) - usual).clamp(0.0, over);
    }
    if excess <= 0.0 {
        return ("none", 0.0);
    }
    let share = sending / excess;
    (if share >= 0.5 { "link" } else { "compute" }, share)
}

/// Replaces S and the per-worker attributions of `analysis` by those of the
/// operation replay; worker w of the trace is the w-th rank in rank order.
pub fn with_operations(mut analysis: Analysis, ops: OpAnalysis) -> Analysis {
    let mut by_rank: Vec<_> = ops.by_worker.clone();
    by_rank.sort_by_key(|(w, _)| w.rank);
    let s = ops.slowdown;
    for (wa, (_, own)) in analysis.per_worker.iter_mut().zip(&by_rank) {
        wa.slowdown = *own;
        wa.share_of_slowdown = if s > 1.0 {
            (own - 1.0) / (s - 1.0)
        } else {
            0.0
        };
    }
    analysis.method = "operations";
    analysis.slowdown = s;
    analysis.actual_iteration_us = crate::stats::mean(&ops.replayed_s) * 1e6;
    analysis.ideal_iteration_us = crate::stats::mean(&ops.ideal_s) * 1e6;
    analysis.operations = Some(ops);
    analysis
}

/// Every trace directory at or under `path` (a directory holding `units/`,
/// `workers/` or `iterations/`), sorted; checkpoints and hidden directories
/// are not searched.
pub fn find_traces(path: &Path) -> Vec<PathBuf> {
    let is_trace = |p: &Path| {
        ["units", "workers", "iterations"]
            .iter()
            .any(|t| p.join(t).is_dir())
    };
    if is_trace(path) {
        return vec![path.to_path_buf()];
    }
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(path) else {
        return found;
    };
    let mut children: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            !name.starts_with('.') && name != "checkpoints"
        })
        .map(|e| e.path())
        .collect();
    children.sort();
    for c in children {
        found.extend(find_traces(&c));
    }
    found
}

/// The operation file that goes with trace directory `dir`: `ops.parquet`
/// in it or beside it (an import's `<name>/trace/` has `<name>/ops.parquet`).
pub fn ops_file_of(dir: &Path) -> Option<PathBuf> {
    let inside = dir.join("ops.parquet");
    if inside.is_file() {
        return Some(inside);
    }
    let beside = dir.parent()?.join("ops.parquet");
    (dir.file_name()? == "trace" && beside.is_file()).then_some(beside)
}

/// Stage of each worker of an operation trace, workers in rank order.
pub fn stages_by_rank(ops: &crate::ops::OpTrace) -> Vec<u32> {
    let mut w = ops.workers();
    w.sort_by_key(|w| w.rank);
    w.iter().map(|w| w.stage).collect()
}

#[cfg(test)]
mod tests;
