//! The summary printed at the end of `forestall run`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::run::RunOutput;
use crate::spec::JobPlan;
use crate::stats::quantile;
use crate::trace::IterationRecord;

/// The headline numbers of a run. Times in seconds or milliseconds, as named.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSummary {
    /// Job name.
    pub job: String,
    /// The model kind trained (`[model] kind`).
    pub workload: String,
    /// Output directory.
    pub out_dir: String,
    /// Workers.
    pub workers: u32,
    /// Injected pattern.
    pub pattern: String,
    /// Policy.
    pub policy: String,
    /// Iterations run.
    pub iterations: u64,
    /// The plan's iterations, when the run stopped before its last
    /// (`--stop-after`); its last checkpoint continues it (`--resume`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_of: Option<u64>,
    /// Wall time of the dataflow, s.
    pub wall_s: f64,
    /// Median iteration wall time, ms.
    pub median_iteration_ms: f64,
    /// 95th percentile iteration wall time, ms.
    pub p95_iteration_ms: f64,
    /// Time lost waiting for the laggard: Σ over iterations and workers of the
    /// barrier wait, s (worker-seconds).
    pub barrier_wait_s: f64,
    /// Σ of iteration wall times, s.
    pub iteration_s: f64,
    /// Estimate of that sum without the injected delays (each iteration's
    /// slowest worker minus what was injected into it), s.
    pub ideal_iteration_s: f64,
    /// Σ of the iterations' load-balancing bounds, s: each iteration's work
    /// spread over the workers in proportion to their speed (see
    /// [`crate::run::bound`]); no policy with BSP semantics does better.
    pub bound_iteration_s: f64,
    /// Σ of the iterations' bounds with whole units, s: their units (each
    /// of the mean unit's work) placed where they finish earliest; between
    /// the load-balancing bound and any BSP placement of units.
    #[serde(default)]
    pub unit_bound_iteration_s: f64,
    /// Whether the policy keeps BSP semantics (the bound is its limit).
    pub bsp_semantics: bool,
    /// Iterations in which a laggard was named.
    pub laggard_iterations: u64,
    /// Final test accuracy.
    pub test_accuracy: f64,
    /// Final test log-loss.
    pub test_log_loss: f64,
    /// Accuracy of always predicting the majority class on the test rows.
    pub majority_accuracy: f64,
    /// The workload's own final test metrics, as `test_<name>` (e.g. `test_auc`).
    #[serde(flatten)]
    pub test_metrics: BTreeMap<String, f64>,
    /// SHA-256 of the final parameters.
    pub params_sha256: String,
    /// First iteration at which the training loss changed less than 2 % over the
    /// previous 10 (FlexRR's stopping rule), if it did within the run.
    pub converged_iteration: Option<u64>,
    /// Time from the job's start to the end of that iteration, s.
    pub converged_s: Option<f64>,
    /// The checkpoint iteration this run resumed from (its wall time counts
    /// from there).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumed_from: Option<u64>,
    /// MD5 and SHA-256 of the image file trained on (which copy of the
    /// dataset), as in the plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<crate::data::fetch::FileChecksums>,
    /// What the workload says about the trained model (LDA: each topic's
    /// top words), a line each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
    /// A pipeline run's stages (`[parallel]`); None for data-parallel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<PipelineSummary>,
}

/// A pipeline run's layout and each stage's activation memory.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PipelineSummary {
    /// Stages S.
    pub stages: u32,
    /// Replicas R.
    pub replicas: u32,
    /// The schedule's name.
    pub schedule: String,
    /// Each stage's layers, by name, joined with `+`.
    pub layers: Vec<String>,
    /// Each stage's most activations one of its workers kept at once.
    pub activations_kept: Vec<u32>,
    /// Their bytes, MB.
    pub activation_mb: Vec<f64>,
    /// Each stage's bubble: the share of the iterations' time its workers
    /// spent outside their passes (waiting for a neighbour stage or the
    /// next version).
    pub bubble: Vec<f64>,
    /// `rebalance-stages`: how often the work moved, and the placement it
    /// ended with (each replica's stages and partitions).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub recuts: Vec<Recut>,
    /// Versions evaluated through the stages on the test set.
    pub evaluated_in_stages: u32,
    /// Versions evaluated whole instead (their stages' scores did not all
    /// arrive).
    pub evaluated_whole: u32,
}

/// A new placement of a pipeline's work.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recut {
    /// Its first iteration.
    pub iteration: u64,
    /// Each replica's stages' layers, joined with `+`.
    pub layers: Vec<Vec<String>>,
    /// How many units each replica holds.
    pub units: Vec<u32>,
}

impl PipelineSummary {
    fn new(plan: &JobPlan, out: &RunOutput) -> Option<Self> {
        let layout = plan.parallel.as_ref()?;
        let names = crate::workload::cnn::net::stages::LAYERS;
        let memory = |s: u32| out.stage_memory.get(&s).copied().unwrap_or((0, 0));
        Some(Self {
            stages: layout.stages,
            replicas: layout.replicas,
            schedule: layout.schedule.to_string(),
            layers: (0..layout.stages)
                .map(|s| names[layout.layers(s)].join("+"))
                .collect(),
            activations_kept: (0..layout.stages).map(|s| memory(s).0).collect(),
            activation_mb: (0..layout.stages)
                .map(|s| memory(s).1 as f64 / 1e6)
                .collect(),
            evaluated_in_stages: out.stage_evaluations.0,
            evaluated_whole: out.stage_evaluations.1,
            recuts: out
                .recuts
                .iter()
                .map(|(iteration, p)| Recut {
                    iteration: *iteration,
                    layers: (0..layout.replicas)
                        .map(|r| {
                            (0..layout.stages)
                                .map(|s| names[p.layers(r, s)].join("+"))
                                .collect()
                        })
                        .collect(),
                    units: p.units.iter().map(|q| q.len() as u32).collect(),
                })
                .collect(),
            bubble: (0..layout.stages)
                .map(|s| {
                    let (idle, wall) = out.stage_bubble.get(&s).copied().unwrap_or((0, 0));
                    idle as f64 / (wall.max(1)) as f64
                })
                .collect(),
        })
    }
}

/// FlexRR's stopping rule: the first iteration `t ≥ window` whose training loss
/// differs by less than `tolerance` (relative) from the loss `window` iterations
/// before, with the time (µs since the job started) at which it ended.
pub fn converged_at(
    iterations: &[IterationRecord],
    window: usize,
    tolerance: f64,
) -> Option<(u64, u64)> {
    iterations.windows(window + 1).find_map(|w| {
        let (old, new) = (w[0].train_loss, w[window].train_loss);
        ((new - old).abs() < tolerance * old.abs())
            .then_some((w[window].iteration, w[window].end_us))
    })
}

/// Iterations over which the stopping rule compares the loss.
pub const CONVERGENCE_WINDOW: usize = 10;
/// Relative change of the loss under which the run counts as converged.
pub const CONVERGENCE_TOLERANCE: f64 = 0.02;

impl RunSummary {
    /// Summarises a finished run.
    pub fn new(plan: &JobPlan, out: &RunOutput, out_dir: &Path, majority_rate: f64) -> Self {
        let converged = converged_at(&out.iterations, CONVERGENCE_WINDOW, CONVERGENCE_TOLERANCE);
        let walls: Vec<f64> = out
            .iterations
            .iter()
            .map(|r| r.wall_us as f64 / 1000.0)
            .collect();
        Self {
            job: plan.name.clone(),
            workload: plan.model.kind().to_owned(),
            out_dir: out_dir.display().to_string(),
            workers: plan.workers,
            pattern: plan.pattern.name().to_owned(),
            policy: plan.policy.as_str().to_owned(),
            iterations: out.iterations.len() as u64,
            stopped_of: ((out.iterations.len() as u64) < plan.iterations)
                .then_some(plan.iterations),
            wall_s: out.wall_us as f64 / 1e6,
            median_iteration_ms: quantile(&walls, 0.5),
            p95_iteration_ms: quantile(&walls, 0.95),
            barrier_wait_s: out
                .iterations
                .iter()
                .map(|r| r.barrier_wait_us as f64)
                .sum::<f64>()
                / 1e6,
            iteration_s: out.iterations.iter().map(|r| r.wall_us as f64).sum::<f64>() / 1e6,
            ideal_iteration_s: out.ideal_us as f64 / 1e6,
            bound_iteration_s: out.bound_us as f64 / 1e6,
            unit_bound_iteration_s: out.unit_bound_us as f64 / 1e6,
            bsp_semantics: plan.policy.keeps_bsp_semantics(),
            laggard_iterations: out
                .iterations
                .iter()
                .filter(|r| r.laggard.is_some())
                .count() as u64,
            test_accuracy: out.eval.accuracy,
            test_log_loss: out.eval.log_loss,
            majority_accuracy: majority_rate,
            test_metrics: out
                .eval
                .metrics
                .iter()
                .map(|(name, value)| (format!("test_{name}"), *value))
                .collect(),
            params_sha256: out.digest.clone(),
            converged_iteration: converged.map(|c| c.0),
            converged_s: converged.map(|c| c.1 as f64 / 1e6),
            resumed_from: (out.first_iteration > 0).then_some(out.first_iteration),
            dataset: plan.data.checksums.clone(),
            details: Vec::new(),
            pipeline: PipelineSummary::new(plan, out),
        }
    }

    /// The summary as aligned text lines.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "job          {} ({}, {} workers, pattern {}, policy {})",
            self.job, self.workload, self.workers, self.pattern, self.policy
        );
        let of = self
            .stopped_of
            .map(|n| format!(" of {n} (stopped; --resume continues it)"))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "iterations   {}{of} in {:.2} s; per iteration median {:.1} ms, p95 {:.1} ms",
            self.iterations, self.wall_s, self.median_iteration_ms, self.p95_iteration_ms
        );
        let _ = writeln!(
            s,
            "waiting      {:.2} worker-s at the barrier; a laggard held up {} of {} iterations",
            self.barrier_wait_s, self.laggard_iterations, self.iterations
        );
        let cost = if self.ideal_iteration_s > 0.0 {
            format!(
                "{:+.1} %",
                (self.iteration_s / self.ideal_iteration_s - 1.0) * 100.0
            )
        } else {
            "n/a".to_owned()
        };
        // (a pipeline's stages wait on each other: a delay on one shows on
        // all, so what an iteration would take without it is a run under
        // `ideal`, not an estimate from the rows)
        if self.pipeline.is_none() {
            let _ = writeln!(
                s,
                "ideal        {:.2} s of iteration time without the injected delays, against {:.2} s: stragglers cost {cost}",
                self.ideal_iteration_s, self.iteration_s
            );
        }
        if let Some(p) = &self.pipeline {
            let _ = writeln!(
                s,
                "pipeline     {} stages × {} replicas, {}: {}",
                p.stages,
                p.replicas,
                p.schedule,
                p.layers.join(" | ")
            );
            let memory: Vec<String> = (p.activations_kept.iter().zip(&p.activation_mb))
                .enumerate()
                .map(|(i, (n, mb))| format!("stage {i} {n} ({mb:.2} MB)"))
                .collect();
            let _ = writeln!(
                s,
                "activations  kept at most, per worker: {}",
                memory.join(", ")
            );
            let bubble: Vec<String> = (p.bubble.iter().enumerate())
                .map(|(i, b)| format!("stage {i} {:.1} %", b * 100.0))
                .collect();
            let _ = writeln!(
                s,
                "bubble       of the iteration time outside the passes: {}",
                bubble.join(", ")
            );
            let _ = writeln!(
                s,
                "evaluated    {} versions through the stages{}",
                p.evaluated_in_stages,
                match p.evaluated_whole {
                    0 => String::new(),
                    n => format!(", {n} whole (their scores did not all arrive)"),
                }
            );
            if let Some(last) = p.recuts.last() {
                let replicas: Vec<String> = (last.layers.iter().zip(&last.units))
                    .enumerate()
                    .map(|(r, (l, q))| format!("replica {r} {} on {q} units", l.join(" | ")))
                    .collect();
                let _ = writeln!(
                    s,
                    "rebalanced   {} times; from iteration {}: {}",
                    p.recuts.len(),
                    last.iteration,
                    replicas.join("; ")
                );
            }
        }
        if self.bound_iteration_s > 0.0 && self.pipeline.is_some() {
            let _ = writeln!(
                s,
                "bound        {:.2} s at the best cuts and data shares for the stage workers' speeds, the schedule's bubble included: this run took {:.3}× the bound",
                self.bound_iteration_s,
                self.iteration_s / self.bound_iteration_s
            );
            if self.unit_bound_iteration_s > 0.0 {
                let _ = writeln!(
                    s,
                    "             {:.2} s at the job's cut with only the data shares moving between replicas: {:.3}× that",
                    self.unit_bound_iteration_s,
                    self.iteration_s / self.unit_bound_iteration_s
                );
            }
        }
        if self.bound_iteration_s > 0.0 && self.bsp_semantics && self.pipeline.is_none() {
            let _ = writeln!(
                s,
                "bound        {:.2} s with the work spread in proportion to the workers' speed: this run took {:.3}× the bound",
                self.bound_iteration_s,
                self.iteration_s / self.bound_iteration_s
            );
            if self.unit_bound_iteration_s > 0.0 {
                let _ = writeln!(
                    s,
                    "             {:.2} s with whole units (each of the mean unit's work) placed where they finish earliest: {:.3}× that",
                    self.unit_bound_iteration_s,
                    self.iteration_s / self.unit_bound_iteration_s
                );
            }
        }
        let metric = |name: &str| self.test_metrics.get(name).copied();
        let _ = match (metric("test_rmse"), metric("test_loglik_per_token")) {
            (Some(rmse), _) => writeln!(
                s,
                "test         rmse {rmse:.4} (user-plus-item-bias baseline {:.4}), exact-star accuracy {:.4}",
                metric("test_bias_baseline_rmse").unwrap_or(f64::NAN),
                self.test_accuracy
            ),
            (None, Some(per_token)) => writeln!(
                s,
                "fit          log p(w, z) per token {per_token:.4} (joint log-likelihood {:.1})",
                metric("test_loglik").unwrap_or(f64::NAN)
            ),
            (None, None) => {
                let own: String = self
                    .test_metrics
                    .iter()
                    .map(|(name, value)| {
                        format!(", {} {value:.4}", name.trim_start_matches("test_"))
                    })
                    .collect();
                writeln!(
                    s,
                    "test         accuracy {:.4} (majority class {:.4}), log-loss {:.4}{own}",
                    self.test_accuracy, self.majority_accuracy, self.test_log_loss
                )
            }
        };
        let _ = match (self.converged_iteration, self.converged_s) {
            (Some(t), Some(secs)) => writeln!(
                s,
                "converged    at iteration {t} after {secs:.2} s (loss changed < 2 % over 10 iterations)"
            ),
            _ => writeln!(s, "converged    not within the run (loss still changing ≥ 2 % over 10 iterations)"),
        };
        if let Some(c) = self.resumed_from {
            let _ = writeln!(
                s,
                "resumed      from the checkpoint at iteration {c} (the wall time is this run's)"
            );
        }
        if let Some(d) = &self.dataset {
            let _ = writeln!(s, "dataset      md5 {} sha256 {}", d.md5, d.sha256);
        }
        for (i, line) in self.details.iter().enumerate() {
            let _ = writeln!(s, "{:<13}{line}", if i == 0 { "model" } else { "" });
        }
        let _ = writeln!(s, "parameters   sha256 {}", self.params_sha256);
        let _ = writeln!(s, "output       {}", self.out_dir);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(losses: &[f64]) -> Vec<IterationRecord> {
        losses
            .iter()
            .enumerate()
            .map(|(i, &l)| IterationRecord {
                iteration: i as u64,
                start_us: i as u64 * 10,
                end_us: i as u64 * 10 + 9,
                wall_us: 9,
                train_loss: l,
                test_loss: None,
                test_accuracy: None,
                test_metrics: BTreeMap::new(),
                workload: "logistic".into(),
                laggard: None,
                lag_us: 0,
                median_busy_us: 0,
                barrier_wait_us: 0,
                units: 1,
                rows: 1,
                dropped_partitions: String::new(),
            })
            .collect()
    }

    #[test]
    fn convergence_is_a_small_change_over_the_window() {
        // halves every iteration until 0.5, then flat
        let mut l = vec![8.0, 4.0, 2.0, 1.0, 0.5];
        l.extend(std::iter::repeat_n(0.5, 12));
        // t = 14 is the first with t - 10 ≥ 4 (both 0.5)
        assert_eq!(converged_at(&rows(&l), 10, 0.02), Some((14, 149)));
        assert_eq!(converged_at(&rows(&l[..12]), 10, 0.02), None);
        assert_eq!(converged_at(&rows(&[1.0; 5]), 10, 0.02), None);
    }
}
