//! Benchmark pipelines: sweeps of jobs over worker counts, patterns, delays and
//! seeds, with raw results in Parquet and a markdown report that records the
//! command, git revision and machine.

pub mod baseline;
pub mod dir;
pub mod hosts;
pub mod kind;
pub mod launched;
pub mod machine;
pub mod netns;
pub mod peers;
pub mod pin;
pub mod precheck;
pub mod report;
pub mod results;
pub mod resume;
pub mod spec;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use kind::RunKind;
pub use results::BenchRow;
pub use spec::{PipelineSpec, RunSpec, SweepSpec};

use crate::inject::Pattern;
use crate::report::RunSummary;
use crate::run::plain_burn::burn_reference;
use crate::run::{params_digest, plain::train_plain, run_job_in_cluster, RunOptions, RunOutput};
use crate::spec::load_workload;
use crate::spec::{plan_job, JobPlan};
use crate::trace::TraceStamp;
use crate::workload::Workload;

/// Errors of a benchmark pipeline.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// The pipeline file could not be read or parsed.
    #[error("{path}: {message}")]
    Pipeline {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A job of the pipeline is invalid.
    #[error("sweep '{sweep}': {source}")]
    Job {
        /// The sweep.
        sweep: String,
        /// Why.
        #[source]
        source: Box<crate::spec::SpecError>,
    },
    /// A dataset could not be loaded.
    #[error("sweep '{sweep}': {source}")]
    Data {
        /// The sweep.
        sweep: String,
        /// Why.
        #[source]
        source: crate::data::DataError,
    },
    /// A run as processes failed.
    #[error("sweep '{sweep}'")]
    Launched {
        /// The sweep.
        sweep: String,
        /// What happened.
        #[source]
        source: launched::LaunchError,
    },
    /// A job's trace directory could not be cleared.
    #[error("cannot clear {path}")]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A job's rows could not be written.
    #[error("cannot write {path}")]
    Results {
        /// The part file.
        path: PathBuf,
        /// Why.
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// A peer script failed.
    #[error("peer '{peer}': {message}")]
    Peer {
        /// The peer.
        peer: String,
        /// What happened.
        message: String,
    },
    /// A run failed.
    #[error("sweep '{sweep}': {source}")]
    Run {
        /// The sweep.
        sweep: String,
        /// Why.
        #[source]
        source: crate::run::RunError,
    },
}

/// Reads a pipeline file and expands it into runs, validating every job before
/// anything runs.
// A failed run's error travels unboxed, so that `main` can still find a
// diverged run in the error's chain (exit 3).
#[allow(clippy::result_large_err)]
pub fn plan_pipeline(path: &Path) -> Result<(PipelineSpec, Vec<(RunSpec, JobPlan)>), BenchError> {
    let text = std::fs::read_to_string(path).map_err(|e| BenchError::Pipeline {
        path: path.to_owned(),
        message: format!("cannot read: {e}"),
    })?;
    let spec: PipelineSpec = toml::from_str(&text).map_err(|e| BenchError::Pipeline {
        path: path.to_owned(),
        message: e.to_string().trim_end().to_owned(),
    })?;
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let names: Vec<&str> = spec.sweeps.iter().map(|s| s.name.as_str()).collect();
    let mut runs = Vec::new();
    for sweep in &spec.sweeps {
        if sweep.seeds.is_empty() {
            return Err(BenchError::Pipeline {
                path: path.to_owned(),
                message: format!("sweep '{}' has no seeds", sweep.name),
            });
        }
        if let Some(r) = &sweep.relative_to {
            if !names.contains(&r.as_str()) {
                return Err(BenchError::Pipeline {
                    path: path.to_owned(),
                    message: format!(
                        "sweep '{}' is relative to '{r}', which is not a sweep ({})",
                        sweep.name,
                        names.join(", ")
                    ),
                });
            }
        }
        if let Some(t) = sweep.target_accuracy {
            if !(t > 0.0 && t <= 1.0) {
                return Err(BenchError::Pipeline {
                    path: path.to_owned(),
                    message: format!(
                        "sweep '{}': target_accuracy must be in (0, 1] (got {t})",
                        sweep.name
                    ),
                });
            }
        }
        sweep
            .settings()
            .and(sweep.variations())
            .map_err(|message| BenchError::Pipeline {
                path: path.to_owned(),
                message,
            })?;
        if let Some(list) = &sweep.cpus {
            pin::parse_cpus(list)
                .and_then(|c| pin::check_available(&c))
                .map_err(|e| BenchError::Pipeline {
                    path: path.to_owned(),
                    message: format!("sweep '{}': cpus: {e}", sweep.name),
                })?;
        }
        if let Some(r) = &sweep.reference {
            if r != "plain" && r != "burn" {
                return Err(BenchError::Pipeline {
                    path: path.to_owned(),
                    message: format!(
                        "sweep '{}': unknown reference '{r}'; accepted: plain, burn (cnn jobs)",
                        sweep.name
                    ),
                });
            }
        }
        for run in sweep.runs(dir) {
            let job_err = |source| BenchError::Job {
                sweep: sweep.name.clone(),
                source: Box::new(source),
            };
            let plan = plan_job(&run.job, &run.overrides).map_err(job_err)?;
            runs.push((run, plan));
        }
    }
    peers::plan_peers(path, &spec, &runs)?;
    Ok((spec, runs))
}

/// Seconds from the first iteration's start until the run reached `target`
/// test accuracy: the first of two consecutive evaluations at or above it
/// ([`peers::first_of_two_at_or_above`], the peers' rule), each evaluation
/// timed at the start of the iteration whose starting parameters it scored,
/// the final model's at the end of the last iteration.
pub fn time_to_accuracy(out: &RunOutput, target: f64) -> Option<f64> {
    let first_start = out.iterations.first()?.start_us;
    let mut evaluations: Vec<(u64, f64)> = out
        .iterations
        .iter()
        .filter_map(|r| r.test_accuracy.map(|a| (r.start_us, a)))
        .collect();
    evaluations.push((
        out.iterations.last().map_or(0, |r| r.end_us),
        out.eval.accuracy,
    ));
    let accuracies: Vec<f64> = evaluations.iter().map(|e| e.1).collect();
    let i = peers::first_of_two_at_or_above(&accuracies, target)?;
    Some(evaluations[i].0.saturating_sub(first_start) as f64 / 1e6)
}

/// The workload `plan` trains, loaded once per dataset and model into
/// `loaded` (runs on the same data share it).
#[allow(clippy::result_large_err)]
pub(crate) fn workload_for(
    loaded: &mut HashMap<String, Arc<dyn Workload>>,
    run: &RunSpec,
    plan: &JobPlan,
) -> Result<Arc<dyn Workload>, BenchError> {
    let data_key = format!("{:?} {:?}", plan.data, plan.model);
    if let Some(w) = loaded.get(&data_key) {
        return Ok(Arc::clone(w));
    }
    let w = load_workload(plan).map_err(|source| BenchError::Data {
        sweep: run.sweep.clone(),
        source,
    })?;
    loaded.insert(data_key, Arc::clone(&w));
    Ok(w)
}

/// The row of a reference loop (`plain`, `plain-burn`) timed outside timely.
fn reference_row(
    base: &BenchRow,
    kind: RunKind,
    iteration_us: &[u64],
    load_us: u64,
    test_accuracy: f64,
    params_sha256: String,
) -> BenchRow {
    let mut walls: Vec<f64> = iteration_us.iter().map(|&u| u as f64 / 1000.0).collect();
    let total: f64 = walls.iter().sum();
    walls.sort_by(f64::total_cmp);
    BenchRow {
        kind,
        policy: kind.label(),
        workers: 1,
        time_per_iteration_ms: total / walls.len().max(1) as f64,
        load_ms: load_us as f64 / 1000.0,
        median_iteration_ms: crate::stats::quantile(&walls, 0.5),
        test_accuracy,
        params_sha256,
        ..base.clone()
    }
}

/// Runs every planned run in order, writing each run's trace under
/// `out_dir/traces/<sweep>/<index>` and its rows to
/// [`resume::part_path`] as soon as it finishes; `progress` is called after
/// each row. The jobs in `done` (rows of an interrupted bench, by index) are
/// not run again: their rows take their place, and the digest checks of later
/// runs compare with them as with rows just measured.
// A failed run's error travels unboxed, so that `main` can still find a
// diverged run in the error's chain (exit 3).
#[allow(clippy::result_large_err)]
pub fn run_pipeline(
    runs: &[(RunSpec, JobPlan)],
    out_dir: &Path,
    git_revision: &str,
    done: &BTreeMap<usize, Vec<BenchRow>>,
    mut progress: impl FnMut(&BenchRow),
) -> Result<Vec<BenchRow>, BenchError> {
    // Runs on the same data and model share one loaded workload.
    let mut workloads: HashMap<String, Arc<dyn Workload>> = HashMap::new();
    let mut first_digest: HashMap<String, String> = HashMap::new();
    let mut rows = Vec::new();
    for (i, (run, plan)) in runs.iter().enumerate() {
        if let Some(finished) = done.get(&i) {
            let key = plan.math_hash();
            for row in finished {
                // As below: the plain loop's digest and BSP timely runs' are
                // the ones later runs of the same math must match.
                let sets_digest = match row.kind {
                    RunKind::Plain => true,
                    RunKind::PlainBurn => false,
                    RunKind::Timely | RunKind::Launched { .. } | RunKind::Hosts { .. } => {
                        row.bsp_semantics
                    }
                };
                if sets_digest {
                    first_digest
                        .entry(key.clone())
                        .or_insert(row.params_sha256.clone());
                }
            }
            rows.extend(finished.iter().cloned());
            continue;
        }
        let job_start = rows.len();
        let workload = workload_for(&mut workloads, run, plan)?;
        let (delay_percent, probability) = match &plan.pattern {
            Pattern::SlowWorker {
                probability,
                delay_percent,
            }
            | Pattern::DisruptedMachine {
                probability,
                delay_percent,
                ..
            } => (*delay_percent, *probability),
            Pattern::SlowLink { probability, .. } => (0.0, *probability),
            _ => (0.0, 0.0),
        };
        let base = BenchRow {
            sweep: run.sweep.clone(),
            kind: RunKind::Timely,
            job: plan.name.clone(),
            workers: plan.workers,
            policy: plan.policy.as_str().to_owned(),
            pattern: plan.pattern.name().to_owned(),
            delay_percent,
            probability,
            alpha: match &plan.pattern {
                Pattern::PowerLaw { alpha, .. } => *alpha,
                _ => 0.0,
            },
            seed: plan.seed,
            pace_ns_per_row: plan.pace_ns_per_row,
            iterations: plan.iterations,
            time_per_iteration_ms: 0.0,
            load_ms: 0.0,
            median_iteration_ms: 0.0,
            bound_iteration_ms: None,
            unit_bound_iteration_ms: None,
            barrier_wait_s: 0.0,
            work_reassigned: 0.0,
            work_cloned: 0.0,
            converged_iteration: None,
            converged_s: None,
            test_accuracy: 0.0,
            workload: plan.model.kind().to_owned(),
            target_accuracy: run.target_accuracy,
            time_to_accuracy_s: None,
            test_metrics: String::new(),
            settings: run.varied.clone(),
            params_sha256: String::new(),
            digest_matches: true,
            bsp_semantics: plan.policy.keeps_bsp_semantics(),
            processes: 1,
            checkpoint_every: plan.checkpoint_every,
            recovery_s: None,
            start_ms: None,
            gather_s: None,
            rows_per_s: None,
            bubble: None,
            mb_sent_per_iteration: None,
            cpus: run.cpus.as_deref().map(pin::cpu_list).unwrap_or_default(),
        };
        let key = plan.math_hash();
        if run.plain_reference {
            let plain = train_plain(plan, workload.as_ref());
            let digest = params_digest(&plain.params);
            let row = BenchRow {
                digest_matches: first_digest.get(&key).is_none_or(|d| *d == digest),
                ..reference_row(
                    &base,
                    RunKind::Plain,
                    &plain.iteration_us,
                    plain.load_us,
                    workload.evaluate(&plain.params).accuracy,
                    digest.clone(),
                )
            };
            first_digest.entry(key.clone()).or_insert(digest);
            progress(&row);
            rows.push(row);
        }
        if run.burn_reference {
            let burn = burn_reference(plan).map_err(|source| BenchError::Data {
                sweep: run.sweep.clone(),
                source,
            })?;
            // burn's Adam is f32, ours f64: the loss curves agree, the bits do not
            let row = BenchRow {
                bsp_semantics: false,
                ..reference_row(
                    &base,
                    RunKind::PlainBurn,
                    &burn.iteration_us,
                    burn.load_us,
                    burn.eval.accuracy,
                    params_digest(&burn.params),
                )
            };
            progress(&row);
            rows.push(row);
        }
        let trace_dir = out_dir
            .join("traces")
            .join(&run.sweep)
            .join(format!("{i:04}"));
        if trace_dir.exists() {
            // what an interrupted bench left of this job
            std::fs::remove_dir_all(&trace_dir).map_err(|source| BenchError::Write {
                path: trace_dir.clone(),
                source,
            })?;
        }
        let stamp = TraceStamp {
            job_id: format!("{}-{}-{i}", plan.name, run.sweep),
            git_revision: git_revision.to_owned(),
            plan_hash: plan.hash(),
            seed: plan.seed,
        };
        let pinned = run
            .cpus
            .as_deref()
            .map(pin::Pinned::to)
            .transpose()
            .map_err(|source| BenchError::Write {
                path: trace_dir.clone(),
                source,
            })?;
        // recovery after a kill (processes); the slowest handshake and the
        // gather (hosts)
        let (out, kind, recovery_s, (start_ms, gather_s)) = match run.processes {
            Some(hosts) if run.namespaced => {
                let hosted = hosts::run_hosted(run, plan, hosts, &trace_dir).map_err(|source| {
                    BenchError::Launched {
                        sweep: run.sweep.clone(),
                        source,
                    }
                })?;
                let layout = RunKind::Hosts {
                    hosts,
                    threads: plan.workers / hosts,
                };
                let costs = (hosted.start_ms, hosted.gather_s);
                (hosted.output, layout, None, costs)
            }
            Some(processes) => {
                let launched =
                    launched::run_launched(run, plan, processes, &trace_dir).map_err(|source| {
                        BenchError::Launched {
                            sweep: run.sweep.clone(),
                            source,
                        }
                    })?;
                let layout = RunKind::Launched {
                    processes,
                    threads: plan.workers / processes,
                };
                (launched.output, layout, launched.recovery_s, (None, None))
            }
            None => {
                // The plan beside the trace, as `forestall run` writes it
                // (`whatif --cut` reads a pipeline's layout from it).
                std::fs::create_dir_all(&trace_dir)
                    .and_then(|()| std::fs::write(trace_dir.join("plan.json"), plan.to_json()))
                    .map_err(|source| BenchError::Write {
                        path: trace_dir.join("plan.json"),
                        source,
                    })?;
                // The run writes its checkpoints beside its trace, as `forestall
                // run` does, so their cost is in the figures.
                let options = RunOptions {
                    checkpoint_dir: Some(trace_dir.join("run")),
                    ..RunOptions::default()
                };
                let out =
                    run_job_in_cluster(plan, Arc::clone(&workload), &trace_dir, stamp, options)
                        .and_then(|o| o.ok_or(crate::run::RunError::Incomplete))
                        .map_err(|source| BenchError::Run {
                            sweep: run.sweep.clone(),
                            source,
                        })?;
                (out, RunKind::Timely, None, (None, None))
            }
        };
        drop(pinned);
        let summary = RunSummary::new(plan, &out, &trace_dir, workload.data().test_majority_rate());
        let load_us = out.iterations.first().map_or(0, |i| i.start_us);
        let span_us = out
            .iterations
            .last()
            .map_or(0, |i| i.end_us)
            .saturating_sub(load_us);
        // A bound per iteration: the span with each iteration's part from its
        // start to its last worker's finish replaced by its bound. It is the
        // limit of BSP semantics; under SSP iterations overlap and their
        // spans do not add up to the run's.
        let spanned = |bound_s: f64| {
            (bound_s > 0.0 && plan.policy.keeps_bsp_semantics()).then(|| {
                (span_us as f64 / 1000.0 - summary.iteration_s * 1000.0 + bound_s * 1000.0)
                    / plan.iterations as f64
            })
        };
        let row = BenchRow {
            kind,
            processes: run.processes.unwrap_or(1),
            recovery_s,
            start_ms,
            gather_s,
            // The iterations' span on the job clock: the same measure for
            // threads and for processes (whose clock starts at the launch).
            time_per_iteration_ms: span_us as f64 / 1000.0 / plan.iterations as f64,
            rows_per_s: (span_us > 0).then(|| {
                out.iterations.iter().map(|i| i.rows).sum::<u64>() as f64 / (span_us as f64 / 1e6)
            }),
            bubble: summary
                .pipeline
                .as_ref()
                .map(|p| p.bubble.iter().sum::<f64>() / p.bubble.len().max(1) as f64),
            mb_sent_per_iteration: Some(
                out.bytes_sent as f64 / 1e6 / out.iterations.len().max(1) as f64,
            ),
            load_ms: load_us as f64 / 1000.0,
            median_iteration_ms: summary.median_iteration_ms,
            bound_iteration_ms: spanned(summary.bound_iteration_s),
            unit_bound_iteration_ms: spanned(summary.unit_bound_iteration_s),
            barrier_wait_s: summary.barrier_wait_s,
            work_reassigned: out.units_reassigned as f64 / out.units_total.max(1) as f64,
            work_cloned: out.units_cloned as f64 / out.units_total.max(1) as f64,
            converged_iteration: summary.converged_iteration,
            converged_s: summary.converged_s,
            test_accuracy: out.eval.accuracy,
            test_metrics: if out.eval.metrics.is_empty() {
                String::new()
            } else {
                serde_json::to_string(&out.eval.metrics).unwrap_or_default()
            },
            time_to_accuracy_s: run
                .target_accuracy
                .and_then(|target| time_to_accuracy(&out, target)),
            digest_matches: !plan.policy.keeps_bsp_semantics()
                || first_digest.get(&key).is_none_or(|d| *d == out.digest),
            params_sha256: out.digest.clone(),
            ..base
        };
        if plan.policy.keeps_bsp_semantics() {
            first_digest.entry(key).or_insert(out.digest);
        }
        progress(&row);
        rows.push(row);
        let part = resume::part_path(out_dir, i);
        resume::write_part(out_dir, i, &rows[job_start..])
            .map_err(|source| BenchError::Results { path: part, source })?;
    }
    Ok(rows)
}
