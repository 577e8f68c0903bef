//! A bench run as real processes: `forestall run … --processes N` started as
//! a child, its output read back into a [`RunOutput`] from the summary and the
//! trace every process wrote, so a launched run's row is computed exactly as a
//! threads run's is. With a kill iteration, process 1 is killed with SIGKILL
//! once process 0 reports that iteration, and the time until the restarted job
//! completes its first iteration is measured.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use super::spec::RunSpec;
use crate::run::RunOutput;
use crate::spec::JobPlan;
use crate::trace::{read_trace_dir, UnitAction};
use crate::workload::Evaluation;

/// What a launched run produced.
pub struct Launched {
    /// The run, as the coordinator and the trace tell it.
    pub output: RunOutput,
    /// Seconds from the kill to the restarted job's first completed iteration.
    pub recovery_s: Option<f64>,
}

/// Why a launched run failed.
#[derive(Debug, thiserror::Error)]
#[error("launched run ({processes} processes)")]
pub struct LaunchError {
    pub(super) processes: u32,
    #[source]
    pub(super) failure: LaunchFailure,
}

/// What went wrong in a launched run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchFailure {
    /// The workers cannot be dealt evenly to the processes.
    #[error("{workers} workers do not split evenly into {processes} processes")]
    Uneven {
        /// The job's workers.
        workers: u32,
        /// The processes asked for.
        processes: u32,
    },
    /// The running binary could not be found.
    #[error("no forestall binary")]
    Binary(#[source] std::io::Error),
    /// `forestall run` could not be started or waited for.
    #[error("cannot {doing}")]
    Process {
        /// `start` or `wait`.
        doing: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `forestall run` failed.
    #[error("exited with {status}: {stderr}")]
    Exited {
        /// Its exit status.
        status: std::process::ExitStatus,
        /// What it printed on stderr.
        stderr: String,
    },
    /// Process 1 could not be killed.
    #[error("cannot kill process 1: {reason}")]
    Kill {
        /// Why.
        reason: String,
        /// The error behind it, if any.
        #[source]
        source: Option<std::io::Error>,
    },
    /// The hosts' network namespaces could not be made (root is needed).
    #[error("cannot make the hosts' network namespaces (hosts = [...] needs root): {0}")]
    Namespaces(String),
    /// A file of the run's output could not be read.
    #[error("cannot read {file}")]
    Output {
        /// The file, relative to the output directory.
        file: &'static str,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Runs `run` (validated as `plan`) as `processes` local processes with its
/// output in `out_dir`.
pub fn run_launched(
    run: &RunSpec,
    plan: &JobPlan,
    processes: u32,
    out_dir: &Path,
) -> Result<Launched, LaunchError> {
    let fail = |failure: LaunchFailure| LaunchError { processes, failure };
    if processes == 0 || !plan.workers.is_multiple_of(processes) {
        return Err(fail(LaunchFailure::Uneven {
            workers: plan.workers,
            processes,
        }));
    }
    let exe = std::env::current_exe().map_err(|e| fail(LaunchFailure::Binary(e)))?;
    let mut command = Command::new(exe);
    command
        .args(["--json", "-q", "run"])
        .arg(&run.job)
        .args(run.overrides.words())
        .args(["--processes", &processes.to_string()])
        .args(["--threads", &(plan.workers / processes).to_string()])
        .arg("--out")
        .arg(out_dir)
        .arg("--force")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if run.kill_at.is_some() {
        command.args(["--max-restarts", "1"]);
    }
    let mut child = command.spawn().map_err(|source| {
        fail(LaunchFailure::Process {
            doing: "start",
            source,
        })
    })?;
    let stdout = child.stdout.take().expect("piped");
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send((Instant::now(), line)).is_err() {
                break;
            }
        }
    });
    let (mut killed, mut restarted, mut recovery_s) = (None, false, None);
    for (at, line) in received {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        match v["type"].as_str() {
            Some("restart") => restarted = true,
            Some("iteration") => {
                let iteration = v["data"]["iteration"].as_u64().unwrap_or(0);
                if let (Some(k), None) = (run.kill_at, killed) {
                    if iteration >= k {
                        kill_process_1(out_dir).map_err(fail)?;
                        killed = Some(Instant::now());
                    }
                } else if let (Some(t), true, None) = (killed, restarted, recovery_s) {
                    recovery_s = Some(at.duration_since(t).as_secs_f64());
                }
            }
            _ => {}
        }
    }
    let result = child.wait_with_output().map_err(|source| {
        fail(LaunchFailure::Process {
            doing: "wait",
            source,
        })
    })?;
    if !result.status.success() {
        return Err(fail(LaunchFailure::Exited {
            status: result.status,
            stderr: String::from_utf8_lossy(&result.stderr).trim().to_owned(),
        }));
    }
    let output = read_back(out_dir).map_err(fail)?;
    Ok(Launched { output, recovery_s })
}

fn kill_process_1(out_dir: &Path) -> Result<(), LaunchFailure> {
    let kill =
        |reason: String, source: Option<std::io::Error>| LaunchFailure::Kill { reason, source };
    let pids = std::fs::read_to_string(out_dir.join("pids"))
        .map_err(|e| kill("cannot read the pids file".into(), Some(e)))?;
    let pid = pids
        .lines()
        .nth(1)
        .ok_or_else(|| kill("a kill needs at least 2 processes".into(), None))?;
    let status = Command::new("kill")
        .args(["-KILL", pid])
        .status()
        .map_err(|e| kill(format!("cannot run kill -KILL {pid}"), Some(e)))?;
    status
        .success()
        .then_some(())
        .ok_or_else(|| kill(format!("kill -KILL {pid} failed"), None))
}

/// The run as its output directory holds it.
pub(super) fn read_back(out_dir: &Path) -> Result<RunOutput, LaunchFailure> {
    let output = |file: &'static str| {
        move |e: Box<dyn std::error::Error + Send + Sync>| LaunchFailure::Output { file, source: e }
    };
    let summary: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out_dir.join("summary.json"))
            .map_err(|e| output("summary.json")(e.into()))?,
    )
    .map_err(|e| output("summary.json")(e.into()))?;
    let trace = read_trace_dir(&out_dir.join("trace")).map_err(|e| output("trace")(e.into()))?;
    let count = |action: UnitAction| trace.units.iter().filter(|u| u.action == action).count();
    let number = |key: &str| summary[key].as_f64().unwrap_or(f64::NAN);
    Ok(RunOutput {
        digest: summary["params_sha256"].as_str().unwrap_or("").to_owned(),
        params: Vec::new(),
        eval: Evaluation {
            log_loss: number("test_log_loss"),
            accuracy: number("test_accuracy"),
            // the workload's own, flattened into the summary as `test_<name>`
            metrics: summary
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(k, _)| !matches!(k.as_str(), "test_accuracy" | "test_log_loss"))
                .filter_map(|(k, v)| Some((k.strip_prefix("test_")?.to_owned(), v.as_f64()?)))
                .collect(),
        },
        wall_us: (number("wall_s") * 1e6) as u64,
        parts: Vec::new(),
        ideal_us: (number("ideal_iteration_s") * 1e6) as u64,
        bound_us: (number("bound_iteration_s") * 1e6) as u64,
        unit_bound_us: (number("unit_bound_iteration_s") * 1e6) as u64,
        units_total: trace.units.len() as u64,
        units_reassigned: count(UnitAction::Reassigned) as u64,
        units_cloned: count(UnitAction::Clone) as u64,
        checkpoints: Vec::new(),
        stage_memory: Default::default(),
        stage_bubble: Default::default(),
        recuts: Vec::new(),
        stage_evaluations: (0, 0),
        bytes_sent: trace.workers.iter().map(|w| w.bytes_sent).sum(),
        first_iteration: 0,
        iterations: trace.iterations,
    })
}
