//! PyTorch peers in a bench: the scripts a user would run instead of
//! forestall (`pipelines/peers/`), run on the same data, seeds and straggler
//! schedule as a sweep, and reported beside its rows.
//!
//! A pipeline names them with `[[peer]]`:
//!
//! ```toml
//! [[peer]]
//! name = "torch-2-threads"
//! script = "peers/cnn_torch.py"   # relative to the pipeline file
//! kind = "single"                 # one process; or "ddp": ranks under stragglers
//! sweep = "cnn-w2"                # whose data, seeds, learning rate and target it mirrors
//! threads = 2
//! ```
//!
//! A `single` peer trains once per seed of its sweep (`threads`, `batch`
//! images per step, `steps`, an evaluation every `eval_every` steps); a `ddp`
//! peer runs once per (workers, pattern setting, seed) of its sweep with the
//! sweep's workers as ranks, `units` units of `batch` images per rank per
//! iteration, the sweep's pace and iterations, and the slowdown of every
//! (iteration, worker) that [`StragglerSchedule`] gives forestall's own runs,
//! written to a JSON file the script reads; plus one run without stragglers
//! per (workers, seed), its excess's denominator.
//!
//! Peers run when the bench's Python (`$FORESTALL_PYTHON`, else `python3`)
//! imports `torch`; otherwise the bench says once why they were skipped.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use super::results::BenchRow;
pub use super::spec::PeerSpec;
use super::spec::{PipelineSpec, RunSpec};
use super::BenchError;
use crate::inject::{Pattern, StragglerSchedule};
use crate::spec::JobPlan;
use crate::workload::ModelPlan;

/// The environment variable naming the Python that runs the peers.
pub const PYTHON_ENV: &str = "FORESTALL_PYTHON";
/// The directory of a results directory that holds the peers' files.
pub const PEERS_DIR: &str = "peers";
/// Images per step (single) or per unit (ddp) unless the peer says otherwise.
pub const DEFAULT_BATCH: u32 = 32;
/// Steps between a single peer's evaluations unless it says otherwise.
pub const DEFAULT_EVAL_EVERY: u64 = 16;
/// Units per rank per iteration of a ddp peer unless it says otherwise.
pub const DEFAULT_UNITS: u32 = 2;

/// What a peer script does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PeerKind {
    /// One process: time per step, time to the target accuracy.
    Single,
    /// Ranks under the sweep's straggler schedule: time per iteration and its
    /// excess over the same job without stragglers.
    Ddp,
}

impl PeerKind {
    /// Its name in pipeline files.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Single => "single",
            Self::Ddp => "ddp",
        }
    }
}

/// One run of a peer script, resolved from its sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerJob {
    /// Peer name.
    pub peer: String,
    /// Its kind.
    pub kind: PeerKind,
    /// The sweep it mirrors.
    pub sweep: String,
    /// The script.
    pub script: PathBuf,
    /// Seed.
    pub seed: u64,
    /// Ranks (ddp) or 1.
    pub workers: u32,
    /// Torch threads per process.
    pub threads: u32,
    /// The sweep's pattern name (`none` for a run without stragglers).
    pub pattern: String,
    /// Slowdown probability (0 when the pattern has none).
    pub probability: f64,
    /// Injected delay, percent (0 when the pattern has none).
    pub delay_percent: f64,
    /// Power-law exponent (0 when the pattern has none).
    pub alpha: f64,
    /// Iterations (ddp) or optimiser steps (single).
    pub iterations: u64,
    /// The sweep's target test accuracy.
    pub target_accuracy: Option<f64>,
    /// Slowdown of every (iteration, rank) (ddp with stragglers).
    pub schedule: Option<Vec<Vec<f64>>>,
    /// The script's arguments, except `--schedule`.
    pub args: Vec<String>,
    /// The CPUs it is pinned to (none: wherever the bench may run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<Vec<usize>>,
}

impl PeerJob {
    /// Whether no rank is ever slowed.
    pub fn without_stragglers(&self) -> bool {
        self.schedule
            .as_ref()
            .is_none_or(|s| s.iter().flatten().all(|&f| f == 1.0))
    }
}

/// One evaluation of a single peer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerEval {
    /// Training seconds up to it (evaluation excluded).
    pub elapsed_s: f64,
    /// Optimiser steps before it.
    pub step: u64,
    /// Images trained on before it.
    pub images: u64,
    /// Accuracy on the whole test set.
    pub test_accuracy: f64,
}

/// What one peer run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerRow {
    /// The run.
    pub job: PeerJob,
    /// Mean time per iteration (ddp) or per optimiser step (single), ms.
    pub time_per_iteration_ms: f64,
    /// Median of the same, ms (ddp).
    pub median_iteration_ms: Option<f64>,
    /// Training images per second (single).
    pub images_per_s: Option<f64>,
    /// The same peer's mean time per iteration without stragglers, same
    /// workers and seed, ms (ddp).
    pub no_straggler_ms: Option<f64>,
    /// `time_per_iteration_ms / no_straggler_ms` (ddp).
    pub excess: Option<f64>,
    /// Training seconds until the first of two consecutive evaluations at or
    /// above the target accuracy (single).
    pub time_to_accuracy_s: Option<f64>,
    /// Which evaluation that was (0: before the first step).
    pub reached_at_eval: Option<usize>,
    /// Accuracy of the last evaluation (single).
    pub final_test_accuracy: Option<f64>,
    /// Every evaluation (single).
    pub curve: Vec<PeerEval>,
    /// torch's version.
    pub torch: String,
}

/// Index of the first of two consecutive accuracies at or above `target`:
/// when a model "reaches" an accuracy, for forestall's runs and the peers
/// alike (test accuracy at 28 × 28 fluctuates by a few points between
/// evaluations, so one lucky evaluation does not count).
pub fn first_of_two_at_or_above(accuracies: &[f64], target: f64) -> Option<usize> {
    accuracies
        .windows(2)
        .position(|w| w[0] >= target && w[1] >= target)
}

fn invalid(path: &Path, peer: &str, message: String) -> BenchError {
    BenchError::Pipeline {
        path: path.to_owned(),
        message: format!("peer '{peer}': {message}"),
    }
}

/// Every peer run of the pipeline at `path`, checked against its sweeps'
/// planned runs: a peer whose script is missing, of an unknown kind, naming
/// no sweep of the pipeline, with a setting its kind does not take or out of
/// range, or mirroring a sweep it cannot (not a CNN, a pattern that is not a
/// function of the iteration, a ddp peer without a pace) is refused.
// BenchError is large (a failed run travels unboxed; see `plan_pipeline`).
#[allow(clippy::result_large_err)]
pub fn plan_peers(
    path: &Path,
    spec: &PipelineSpec,
    runs: &[(RunSpec, JobPlan)],
) -> Result<Vec<PeerJob>, BenchError> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let mut names = BTreeSet::new();
    let mut jobs = Vec::new();
    for peer in &spec.peers {
        let bad = |message: String| invalid(path, &peer.name, message);
        if !names.insert(peer.name.as_str()) {
            return Err(bad("two peers have this name".into()));
        }
        let kind = match peer.kind.as_str() {
            "single" => PeerKind::Single,
            "ddp" => PeerKind::Ddp,
            other => {
                return Err(bad(format!(
                    "unknown kind '{other}'; accepted: single, ddp"
                )))
            }
        };
        let script = dir.join(&peer.script);
        if !script.is_file() {
            return Err(bad(format!(
                "script {} not found (resolved to {}; relative to the pipeline file)",
                peer.script,
                script.display()
            )));
        }
        let of_kind = |setting: &str, set: bool, takes: PeerKind| {
            if set && kind != takes {
                Err(bad(format!(
                    "{setting} is a setting of {} peers, not of {}",
                    takes.as_str(),
                    kind.as_str()
                )))
            } else {
                Ok(())
            }
        };
        of_kind("threads", peer.threads.is_some(), PeerKind::Single)?;
        of_kind("steps", peer.steps.is_some(), PeerKind::Single)?;
        of_kind("eval_every", peer.eval_every.is_some(), PeerKind::Single)?;
        of_kind("units", peer.units.is_some(), PeerKind::Ddp)?;
        for (setting, value) in [
            ("threads", peer.threads.map(u64::from)),
            ("batch", peer.batch.map(u64::from)),
            ("steps", peer.steps),
            ("eval_every", peer.eval_every),
            ("units", peer.units.map(u64::from)),
        ] {
            if value == Some(0) {
                return Err(bad(format!("{setting} must be at least 1 (got 0)")));
            }
        }
        let cpus = match &peer.cpus {
            None => None,
            Some(list) => Some(
                super::pin::parse_cpus(list)
                    .and_then(|c| super::pin::check_available(&c).map(|()| c))
                    .map_err(|e| bad(format!("cpus: {e}")))?,
            ),
        };
        let mine: Vec<&(RunSpec, JobPlan)> =
            runs.iter().filter(|(r, _)| r.sweep == peer.sweep).collect();
        let Some((first_run, first)) = mine.first() else {
            let sweeps: Vec<&str> = spec.sweeps.iter().map(|s| s.name.as_str()).collect();
            return Err(bad(format!(
                "sweep '{}' is not a sweep of this pipeline ({})",
                peer.sweep,
                sweeps.join(", ")
            )));
        };
        let ModelPlan::Cnn {
            class_weighting, ..
        } = first.model
        else {
            return Err(bad(format!(
                "sweep '{}' trains {}; the peers are scripts of the CNN (cnn jobs)",
                peer.sweep,
                first.model.kind()
            )));
        };
        let batch = peer.batch.unwrap_or(DEFAULT_BATCH);
        let weighting = match class_weighting {
            crate::workload::ClassWeighting::Balanced => "balanced",
            crate::workload::ClassWeighting::None => "none",
        };
        let common = |plan: &JobPlan| {
            vec![
                "--data".to_owned(),
                plan.data.path.display().to_string(),
                "--seed".to_owned(),
                plan.seed.to_string(),
                "--batch".to_owned(),
                batch.to_string(),
                "--lr".to_owned(),
                plan.optimizer.learning_rate.to_string(),
                "--l2".to_owned(),
                plan.optimizer.l2.to_string(),
                "--class-weighting".to_owned(),
                weighting.to_owned(),
            ]
        };
        let job = |plan: &JobPlan, workers: u32, threads: u32, iterations: u64| PeerJob {
            peer: peer.name.clone(),
            kind,
            sweep: peer.sweep.clone(),
            script: script.clone(),
            seed: plan.seed,
            workers,
            threads,
            pattern: "none".into(),
            probability: 0.0,
            delay_percent: 0.0,
            alpha: 0.0,
            iterations,
            target_accuracy: first_run.target_accuracy,
            schedule: None,
            args: common(plan),
            cpus: cpus.clone(),
        };
        match kind {
            PeerKind::Single => {
                let threads = peer.threads.unwrap_or(1);
                let eval_every = peer.eval_every.unwrap_or(DEFAULT_EVAL_EVERY);
                let steps = peer.steps.unwrap_or(
                    first.iterations
                        * u64::from(first.partitions)
                        * u64::from(first.units_per_partition),
                );
                let mut seeds = BTreeSet::new();
                for (_, plan) in &mine {
                    if !seeds.insert(plan.seed) {
                        continue;
                    }
                    let mut j = job(plan, 1, threads, steps);
                    j.args.extend([
                        "--threads".to_owned(),
                        threads.to_string(),
                        "--steps".to_owned(),
                        steps.to_string(),
                        "--eval-every".to_owned(),
                        eval_every.to_string(),
                    ]);
                    if let Some(t) = first_run.target_accuracy {
                        j.args.extend(["--target".to_owned(), t.to_string()]);
                    }
                    jobs.push(j);
                }
            }
            PeerKind::Ddp => {
                let units = peer.units.unwrap_or(DEFAULT_UNITS);
                let mut seen = BTreeSet::new();
                let mut calm = BTreeSet::new();
                let mut planned = Vec::new();
                for (_, plan) in &mine {
                    let (probability, delay_percent, alpha) = match &plan.pattern {
                        Pattern::None => (0.0, 0.0, 0.0),
                        Pattern::SlowWorker {
                            probability,
                            delay_percent,
                        } => (*probability, *delay_percent, 0.0),
                        Pattern::PowerLaw { alpha, .. } => (0.0, 0.0, *alpha),
                        Pattern::Persistent { work_share, .. } => {
                            if work_share.is_some() {
                                return Err(bad(format!(
                                    "sweep '{}' gives some workers more data (work_share); the ddp peer shards the data evenly",
                                    peer.sweep
                                )));
                            }
                            (0.0, 0.0, 0.0)
                        }
                        Pattern::SlowLink { .. } => {
                            return Err(bad(format!(
                                "sweep '{}' uses slow-link; the ddp peer injects compute slowdowns only (slow-worker, power-law, persistent)",
                                peer.sweep
                            )))
                        }
                        Pattern::DisruptedMachine { .. } => {
                            return Err(bad(format!(
                                "sweep '{}' uses disrupted-machine, whose slowdowns follow the clock; the ddp peer replays slowdowns per iteration (slow-worker, power-law, persistent)",
                                peer.sweep
                            )))
                        }
                    };
                    if plan.pace_ns_per_row == 0 {
                        return Err(bad(format!(
                            "sweep '{}' runs at native speed; the ddp peer paces its units like forestall's paced mode (set pace_ns_per_row)",
                            peer.sweep
                        )));
                    }
                    let key = (
                        plan.workers,
                        plan.pattern.name().to_owned(),
                        probability.to_bits(),
                        delay_percent.to_bits(),
                        alpha.to_bits(),
                        plan.seed,
                    );
                    if !seen.insert(key) {
                        continue;
                    }
                    let schedule =
                        StragglerSchedule::new(plan.seed, plan.pattern.clone(), plan.workers);
                    let slowdowns: Vec<Vec<f64>> = (0..plan.iterations)
                        .map(|t| {
                            (0..plan.workers)
                                .map(|w| schedule.slowdown(w, t, 0))
                                .collect()
                        })
                        .collect();
                    let mut j = job(plan, plan.workers, 1, plan.iterations);
                    j.pattern = plan.pattern.name().to_owned();
                    j.probability = probability;
                    j.delay_percent = delay_percent;
                    j.alpha = alpha;
                    j.schedule = Some(slowdowns);
                    j.args.extend([
                        "--ranks".to_owned(),
                        plan.workers.to_string(),
                        "--units".to_owned(),
                        units.to_string(),
                        "--iterations".to_owned(),
                        plan.iterations.to_string(),
                        "--pace-ns-per-row".to_owned(),
                        plan.pace_ns_per_row.to_string(),
                    ]);
                    if j.without_stragglers() {
                        calm.insert((plan.workers, plan.seed));
                    }
                    planned.push(j);
                }
                // the no-straggler run each (workers, seed) is measured against
                let mut extra = Vec::new();
                for j in &planned {
                    if calm.insert((j.workers, j.seed)) {
                        let mut none = j.clone();
                        none.pattern = "none".into();
                        none.probability = 0.0;
                        none.delay_percent = 0.0;
                        none.alpha = 0.0;
                        none.schedule = None;
                        extra.push(none);
                    }
                }
                jobs.extend(planned);
                jobs.extend(extra);
            }
        }
    }
    Ok(jobs)
}

/// The Python that runs the peers: `$FORESTALL_PYTHON`, else `python3`.
pub fn python() -> String {
    std::env::var(PYTHON_ENV)
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "python3".to_owned())
}

/// torch's version if `python` imports it, else why not (one line).
pub fn torch_version(python: &str) -> Result<String, String> {
    let out = Command::new(python)
        .args(["-c", "import torch; print(torch.__version__)"])
        .output()
        .map_err(|e| format!("cannot run {python}: {e}"))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("it exited with an error");
    Err(format!("{python} cannot import torch ({})", last.trim()))
}

/// What a peer script printed, read from its JSON lines.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerOutput {
    /// Mean ms per iteration (ddp) or per step (single).
    pub time_per_iteration_ms: f64,
    /// Median ms per iteration (ddp).
    pub median_iteration_ms: Option<f64>,
    /// Images per second (single).
    pub images_per_s: Option<f64>,
    /// Evaluations (single).
    pub curve: Vec<PeerEval>,
    /// torch's version.
    pub torch: String,
}

/// Reads a peer script's stdout: `eval` lines (single), `run` lines (ddp) and
/// the closing `done` line.
pub fn parse_output(kind: PeerKind, stdout: &str) -> Result<PeerOutput, String> {
    let mut curve = Vec::new();
    let mut done = None;
    let mut median = None;
    for (i, line) in stdout.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| format!("line {} of its output is not JSON ({e}): {line}", i + 1))?;
        match v["event"].as_str() {
            Some("eval") => curve.push(
                serde_json::from_value::<PeerEval>(v.clone())
                    .map_err(|e| format!("line {}: {e}", i + 1))?,
            ),
            Some("run") if median.is_none() => median = v["median_iteration_ms"].as_f64(),
            Some("done") => done = Some(v),
            _ => {}
        }
    }
    let done = done.ok_or("its output has no \"done\" line")?;
    let number = |name: &str| {
        done[name]
            .as_f64()
            .ok_or_else(|| format!("its \"done\" line has no number {name}"))
    };
    let torch = done["torch"].as_str().unwrap_or("?").to_owned();
    Ok(match kind {
        PeerKind::Single => PeerOutput {
            time_per_iteration_ms: 1000.0 * number("seconds_per_step")?,
            median_iteration_ms: None,
            images_per_s: Some(number("images_per_s")?),
            curve,
            torch,
        },
        PeerKind::Ddp => PeerOutput {
            time_per_iteration_ms: number("time_per_iteration_ms")?,
            median_iteration_ms: median,
            images_per_s: None,
            curve,
            torch,
        },
    })
}

fn peer_file(out_dir: &Path, index: usize, what: &str) -> PathBuf {
    out_dir.join(PEERS_DIR).join(format!("{index:04}{what}"))
}

/// Writes the slowdown of every (iteration, rank) of a ddp job as the script
/// reads it (`--schedule`).
pub fn write_schedule(job: &PeerJob, path: &Path) -> std::io::Result<()> {
    let json = serde_json::json!({
        "workers": job.workers,
        "iterations": job.iterations,
        "seed": job.seed,
        "pattern": job.pattern,
        "slowdown": job.schedule,
    });
    crate::fsutil::write_atomic(path, json.to_string().as_bytes())
}

/// The command that runs `job` with `python`, reading its slowdowns from
/// `schedule` (written by [`write_schedule`]) when it has some.
pub fn command(python: &str, job: &PeerJob, schedule: Option<&Path>) -> Command {
    let mut command = Command::new(python);
    command.arg(&job.script).args(&job.args);
    if let (Some(_), Some(path)) = (&job.schedule, schedule) {
        command.arg("--schedule").arg(path);
    }
    command
}

/// Runs one peer job with `python`, its schedule written beside its result.
// BenchError is large (a failed run travels unboxed; see `plan_pipeline`).
#[allow(clippy::result_large_err)]
fn run_one(
    python: &str,
    job: &PeerJob,
    out_dir: &Path,
    index: usize,
) -> Result<PeerRow, BenchError> {
    let failed = |message: String| BenchError::Peer {
        peer: job.peer.clone(),
        message,
    };
    let dir = out_dir.join(PEERS_DIR);
    std::fs::create_dir_all(&dir).map_err(|source| BenchError::Write {
        path: dir.clone(),
        source,
    })?;
    let schedule = peer_file(out_dir, index, "-schedule.json");
    if job.schedule.is_some() {
        write_schedule(job, &schedule).map_err(|source| BenchError::Write {
            path: schedule.clone(),
            source,
        })?;
    }
    let pinned = job
        .cpus
        .as_deref()
        .map(super::pin::Pinned::to)
        .transpose()
        .map_err(|e| failed(format!("cannot pin to CPUs {:?}: {e}", job.cpus)))?;
    let out = command(python, job, Some(&schedule))
        .output()
        .map_err(|e| failed(format!("cannot run {python} {}: {e}", job.script.display())))?;
    drop(pinned);
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(failed(format!(
            "{} exited with {}: {}",
            job.script.display(),
            out.status,
            tail.join(" | ")
        )));
    }
    let parsed = parse_output(job.kind, &String::from_utf8_lossy(&out.stdout))
        .map_err(|e| failed(format!("{}: {e}", job.script.display())))?;
    let accuracies: Vec<f64> = parsed.curve.iter().map(|e| e.test_accuracy).collect();
    let reached = job
        .target_accuracy
        .and_then(|t| first_of_two_at_or_above(&accuracies, t));
    Ok(PeerRow {
        job: job.clone(),
        time_per_iteration_ms: parsed.time_per_iteration_ms,
        median_iteration_ms: parsed.median_iteration_ms,
        images_per_s: parsed.images_per_s,
        no_straggler_ms: None,
        excess: None,
        time_to_accuracy_s: reached.map(|i| parsed.curve[i].elapsed_s),
        reached_at_eval: reached,
        final_test_accuracy: accuracies.last().copied(),
        curve: parsed.curve,
        torch: parsed.torch,
    })
}

/// Runs every peer job with `python` (resuming: a job whose result file in
/// `out_dir/peers/` holds the same job is not run again), then sets each ddp
/// row's excess over the no-straggler run of the same peer, workers and seed.
/// `progress` is called after each row.
// BenchError is large (a failed run travels unboxed; see `plan_pipeline`).
#[allow(clippy::result_large_err)]
pub fn run_peers(
    python: &str,
    jobs: &[PeerJob],
    out_dir: &Path,
    mut progress: impl FnMut(&PeerRow),
) -> Result<Vec<PeerRow>, BenchError> {
    let mut rows = Vec::with_capacity(jobs.len());
    for (i, job) in jobs.iter().enumerate() {
        let path = peer_file(out_dir, i, ".json");
        let earlier = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<PeerRow>(&b).ok())
            .filter(|r| r.job == *job);
        let row = match earlier {
            Some(row) => row,
            None => {
                let row = run_one(python, job, out_dir, i)?;
                let json = serde_json::to_vec_pretty(&row).unwrap_or_default();
                crate::fsutil::write_atomic(&path, &json).map_err(|source| BenchError::Write {
                    path: path.clone(),
                    source,
                })?;
                row
            }
        };
        progress(&row);
        rows.push(row);
    }
    let calm: Vec<(String, u32, u64, f64)> = rows
        .iter()
        .filter(|r| r.job.kind == PeerKind::Ddp && r.job.without_stragglers())
        .map(|r| {
            (
                r.job.peer.clone(),
                r.job.workers,
                r.job.seed,
                r.time_per_iteration_ms,
            )
        })
        .collect();
    for row in rows.iter_mut().filter(|r| r.job.kind == PeerKind::Ddp) {
        if let Some(&(.., t0)) = calm
            .iter()
            .find(|c| c.0 == row.job.peer && c.1 == row.job.workers && c.2 == row.job.seed)
        {
            row.no_straggler_ms = Some(t0);
            row.excess = (t0 > 0.0).then(|| row.time_per_iteration_ms / t0);
        }
    }
    Ok(rows)
}

/// Whether the peers ran, and if not, why.
#[derive(Debug, Clone, PartialEq)]
pub enum PeersOutcome {
    /// The pipeline names no peers.
    None,
    /// They ran (their rows).
    Ran(Vec<PeerRow>),
    /// They were skipped: why.
    Skipped(String),
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("—".to_owned(), |x| format!("{x:.digits$}"))
}

/// The `## peers` section of summary.md: every peer row per seed, and beside
/// each peer the figures of its sweep's own runs it is compared with.
pub fn summary_section(outcome: &PeersOutcome, ours: &[BenchRow]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let rows = match outcome {
        PeersOutcome::None => return s,
        PeersOutcome::Skipped(why) => {
            let _ = writeln!(s, "## peers\n\nskipped: {why}\n");
            return s;
        }
        PeersOutcome::Ran(rows) => rows,
    };
    let _ = writeln!(s, "## peers\n");
    let _ = writeln!(
        s,
        "PyTorch scripts of the same net, loss, class weights and Adam (`pipelines/peers/`), \
         on the data and seeds of the sweep they mirror. Time to target: training seconds (the \
         clock stops while a peer evaluates) until the first of two consecutive evaluations at \
         or above the target. Excess: time per iteration / the same peer's without stragglers \
         (same ranks and seed).\n"
    );
    let _ = writeln!(
        s,
        "| peer | kind | sweep | seed | ranks × threads | pattern | probability | α | delay % | ms per iteration (ddp) or step (single) | median ms | images/s | no-straggler ms | excess | time to target s | reached at evaluation | final test acc | torch |"
    );
    let _ = writeln!(
        s,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for r in rows {
        let j = &r.job;
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} × {} | {} | {} | {} | {} | {:.2} | {} | {} | {} | {} | {} | {} | {} | {} |",
            j.peer,
            j.kind.as_str(),
            j.sweep,
            j.seed,
            j.workers,
            j.threads,
            j.pattern,
            j.probability,
            j.alpha,
            j.delay_percent,
            r.time_per_iteration_ms,
            opt(r.median_iteration_ms, 2),
            opt(r.images_per_s, 1),
            opt(r.no_straggler_ms, 2),
            r.excess.map_or("—".to_owned(), |x| format!("{x:.3}×")),
            match (j.target_accuracy, r.time_to_accuracy_s) {
                (None, _) => "—".to_owned(),
                (Some(_), None) => "not reached".to_owned(),
                (Some(_), Some(t)) => format!("{t:.1}"),
            },
            r.reached_at_eval.map_or("—".to_owned(), |i| i.to_string()),
            opt(r.final_test_accuracy, 4),
            r.torch
        );
    }
    let _ = writeln!(s);
    // beside each peer, its sweep's own figures
    let peers: BTreeSet<(String, PeerKind, String)> = rows
        .iter()
        .map(|r| (r.job.peer.clone(), r.job.kind, r.job.sweep.clone()))
        .collect();
    for (peer, kind, sweep) in peers {
        let mine: Vec<&PeerRow> = rows.iter().filter(|r| r.job.peer == peer).collect();
        let theirs: Vec<&BenchRow> = ours
            .iter()
            .filter(|r| r.sweep == sweep && r.kind.is_timely())
            .collect();
        match kind {
            PeerKind::Single => {
                let reached: Vec<f64> = mine.iter().filter_map(|r| r.time_to_accuracy_s).collect();
                let peer_rate = median(mine.iter().filter_map(|r| r.images_per_s).collect());
                let _ = write!(
                    s,
                    "- `{peer}`{}: median time to target {} s ({} of {} seeds reached it), median {:.1} ms per step, {} images/s",
                    mine[0]
                        .job
                        .cpus
                        .as_deref()
                        .map(|c| format!(" (pinned to CPU {})", super::pin::cpu_list(c)))
                        .unwrap_or_default(),
                    opt(median(reached.clone()), 1),
                    reached.len(),
                    mine.len(),
                    median(mine.iter().map(|r| r.time_per_iteration_ms).collect()).unwrap_or(0.0),
                    opt(peer_rate, 1)
                );
                let policies: BTreeSet<&str> = theirs.iter().map(|r| r.policy.as_str()).collect();
                for policy in policies {
                    let of: Vec<&&BenchRow> =
                        theirs.iter().filter(|r| r.policy == policy).collect();
                    let t: Vec<f64> = of.iter().filter_map(|r| r.time_to_accuracy_s).collect();
                    let rate = median(of.iter().filter_map(|r| r.rows_per_s).collect());
                    let _ = write!(
                        s,
                        "; sweep `{sweep}` `{policy}`: median time to target {} s ({} of {} runs), {} images/s{}",
                        opt(median(t.clone()), 1),
                        t.len(),
                        of.len(),
                        opt(rate, 1),
                        match (rate, peer_rate) {
                            (Some(a), Some(b)) if b > 0.0 => format!(" ({:.2}× the peer's)", a / b),
                            _ => String::new(),
                        }
                    );
                }
                let _ = writeln!(s);
            }
            PeerKind::Ddp => {
                let delays: BTreeSet<u64> = mine
                    .iter()
                    .filter(|r| !r.job.without_stragglers())
                    .map(|r| r.job.delay_percent.to_bits())
                    .collect();
                for delay in delays {
                    let d = f64::from_bits(delay);
                    let ex: Vec<f64> = mine
                        .iter()
                        .filter(|r| {
                            r.job.delay_percent.to_bits() == delay && !r.job.without_stragglers()
                        })
                        .filter_map(|r| r.excess)
                        .collect();
                    let _ = write!(
                        s,
                        "- `{peer}` at delay {d} %: mean excess {}",
                        opt(
                            (!ex.is_empty()).then(|| ex.iter().sum::<f64>() / ex.len() as f64),
                            3
                        )
                    );
                    let at = |policy: &str| {
                        let t: Vec<f64> = theirs
                            .iter()
                            .filter(|r| r.policy == policy && r.delay_percent.to_bits() == delay)
                            .map(|r| r.time_per_iteration_ms)
                            .collect();
                        (!t.is_empty()).then(|| t.iter().sum::<f64>() / t.len() as f64)
                    };
                    if let Some(ideal) = at("ideal") {
                        let policies: BTreeSet<&str> = theirs
                            .iter()
                            .map(|r| r.policy.as_str())
                            .filter(|p| *p != "ideal")
                            .collect();
                        for policy in policies {
                            if let Some(t) = at(policy) {
                                let _ = write!(
                                    s,
                                    "; sweep `{sweep}` `{policy}` {:.3}× `ideal`",
                                    t / ideal
                                );
                            }
                        }
                    }
                    let _ = writeln!(s);
                }
            }
        }
    }
    let _ = writeln!(s);
    s
}

#[cfg(test)]
mod tests;
