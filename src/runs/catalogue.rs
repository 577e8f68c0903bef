//! The runs under a directory: every run directory (`forestall run` writes
//! `runs/<job>/<UTC time>/`) and every bench results directory (one entry per
//! row of its results), with the headline numbers of each. A run that
//! crashed or is still being written (no readable `summary.json`, the last
//! file a run writes) is listed as incomplete with the reason, never skipped.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use super::origin::RunOrigin;
use super::RunsError;
use crate::bench::dir::{bench_origin, bench_rows, is_bench_dir};
use crate::bench::resume::PARTS;
use crate::trace::{read_iterations_file, TraceTable};

/// Whether a run finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunState {
    /// Its summary is written: the run finished.
    Complete,
    /// It crashed or is still running: no readable summary (or, for a bench,
    /// not every job's results).
    Incomplete,
}

/// One run as the catalogue lists it. Fields a run did not record are `None`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunEntry {
    /// The run directory (for a bench row: the bench results directory).
    pub path: String,
    /// Whether it finished.
    pub state: RunState,
    /// Why it counts as incomplete.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// The bench it belongs to (bench rows only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bench: Option<String>,
    /// Its sweep in the bench (bench rows only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sweep: Option<String>,
    /// Job name.
    pub job: Option<String>,
    /// The model kind trained.
    pub workload: Option<String>,
    /// Mitigation policy (for a bench's reference loops, the loop).
    pub policy: Option<String>,
    /// Injected straggler pattern.
    pub pattern: Option<String>,
    /// Workers.
    pub workers: Option<u32>,
    /// Iterations run (planned, for an incomplete run: see `problem`).
    pub iterations: Option<u64>,
    /// Seed.
    pub seed: Option<u64>,
    /// Wall time, s: of the dataflow for a run, of the iterations for a
    /// bench row (time per iteration × iterations).
    pub time_s: Option<f64>,
    /// Final test accuracy.
    pub test_accuracy: Option<f64>,
    /// SHA-256 of the final parameters.
    pub params_sha256: Option<String>,
    /// When it started, UTC (`YYYY-MM-DD HH:MM:SS`; a bench of older
    /// versions records the day only).
    pub date: Option<String>,
    /// Git revision of the binary that ran it.
    pub git_revision: Option<String>,
    /// CPU model of the machine it ran on.
    pub cpu: Option<String>,
}

impl RunEntry {
    fn empty(path: &Path, state: RunState) -> Self {
        Self {
            path: path.display().to_string(),
            state,
            problem: None,
            bench: None,
            sweep: None,
            job: None,
            workload: None,
            policy: None,
            pattern: None,
            workers: None,
            iterations: None,
            seed: None,
            time_s: None,
            test_accuracy: None,
            params_sha256: None,
            date: None,
            git_revision: None,
            cpu: None,
        }
    }
}

/// Whether `dir` is a run directory: it has the plan a run writes first or
/// the summary it writes last.
pub fn is_run_dir(dir: &Path) -> bool {
    dir.join("plan.json").is_file() || dir.join("summary.json").is_file()
}

/// Most directory levels searched below the listed directory.
const MAX_DEPTH: usize = 4;

/// Every run and bench row under `dir` (or `dir` itself, when it is a run or a
/// bench), sorted by date, then path.
pub fn list_runs(dir: &Path) -> Result<Vec<RunEntry>, RunsError> {
    if !dir.is_dir() {
        return Err(RunsError::NotADirectory { path: dir.into() });
    }
    let mut entries = Vec::new();
    walk(dir, 0, &mut entries)?;
    entries.sort_by(|a, b| a.date.cmp(&b.date).then_with(|| a.path.cmp(&b.path)));
    Ok(entries)
}

fn walk(dir: &Path, depth: usize, out: &mut Vec<RunEntry>) -> Result<(), RunsError> {
    if is_run_dir(dir) {
        out.push(read_run(dir));
        return Ok(());
    }
    if is_bench_dir(dir) {
        out.extend(read_bench(dir));
        return Ok(());
    }
    if depth >= MAX_DEPTH {
        return Ok(());
    }
    let io = |source| RunsError::Io {
        path: dir.into(),
        source,
    };
    let mut children: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .collect();
    children.sort();
    for child in children {
        walk(&child, depth + 1, out)?;
    }
    Ok(())
}

fn read_json(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    serde_json::from_str(&text).map_err(|e| e.to_string())
}

/// The name of an enum value as serde writes it: a string, the single key
/// of an object, or its `name`/`kind` field.
fn tag(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(m) => m
            .get("name")
            .or_else(|| m.get("kind"))
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| (m.len() == 1).then(|| m.keys().next().cloned()).flatten()),
        _ => None,
    }
}

/// Reads one run directory; whatever is missing or unreadable makes it
/// incomplete, with the reason.
pub fn read_run(dir: &Path) -> RunEntry {
    let origin = RunOrigin::read(dir);
    let stamp = first_stamp(&dir.join("trace"));
    let mut e = match read_json(&dir.join("summary.json")) {
        Ok(s) => {
            let mut e = RunEntry::empty(dir, RunState::Complete);
            let text = |k: &str| s[k].as_str().map(str::to_owned);
            e.job = text("job");
            e.workload = text("workload");
            e.policy = text("policy");
            e.pattern = text("pattern");
            e.workers = s["workers"].as_u64().map(|w| w as u32);
            e.iterations = s["iterations"].as_u64();
            e.time_s = s["wall_s"].as_f64();
            e.test_accuracy = s["test_accuracy"].as_f64();
            e.params_sha256 = text("params_sha256");
            e
        }
        Err(why) => {
            let mut e = RunEntry::empty(dir, RunState::Incomplete);
            let summary = dir.join("summary.json");
            let mut problem = if summary.exists() {
                format!("summary.json unreadable ({why})")
            } else {
                "no summary.json".to_owned()
            };
            if let Some(job) = origin.as_ref().and_then(|o| o.job.as_ref()) {
                e.job = Some(job.name.clone());
                e.workload = Some(job.workload.clone());
                e.policy = Some(job.policy.clone());
                e.pattern = Some(job.pattern.clone());
                e.workers = Some(job.workers);
                e.iterations = Some(job.iterations);
            } else if let Ok(plan) = read_json(&dir.join("plan.json")) {
                // a run without machine.json: its plan as serde wrote it
                e.job = plan["name"].as_str().map(str::to_owned);
                e.workload = tag(&plan["model"]);
                e.policy = tag(&plan["policy"]);
                e.pattern = tag(&plan["pattern"]);
                e.workers = plan["workers"].as_u64().map(|w| w as u32);
                e.iterations = plan["iterations"].as_u64();
            } else {
                problem.push_str(", no readable plan.json");
            }
            problem.push_str(": ");
            problem.push_str(&trace_progress(&dir.join("trace"), e.iterations));
            e.problem = Some(problem);
            e
        }
    };
    e.seed = origin
        .as_ref()
        .and_then(|o| o.job.as_ref().map(|j| j.seed))
        .or_else(|| {
            read_json(&dir.join("plan.json"))
                .ok()
                .and_then(|p| p["seed"].as_u64())
        });
    e.git_revision = origin
        .as_ref()
        .map(|o| o.git_revision.clone())
        .or(stamp.map(|s| s.git_revision));
    e.cpu = origin.as_ref().map(|o| o.machine.cpu.clone());
    e.date = origin.map(|o| o.started).or_else(|| date_of(dir));
    e
}

/// The stamp of the first readable part of a trace's iterations table.
fn first_stamp(trace: &Path) -> Option<crate::trace::TraceStamp> {
    let table = trace.join(TraceTable::Iterations.name());
    let mut parts: Vec<PathBuf> = std::fs::read_dir(table)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "parquet"))
        .filter(|p| !hidden(p))
        .collect();
    parts.sort();
    parts
        .iter()
        .find_map(|p| read_iterations_file(p).ok().map(|part| part.stamp))
}

fn hidden(p: &Path) -> bool {
    p.file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
}

/// How far an unfinished run's trace got: iterations in its readable parts,
/// and the parts that are unreadable or were never closed.
pub fn trace_progress(trace: &Path, planned: Option<u64>) -> String {
    let table = trace.join(TraceTable::Iterations.name());
    let Ok(read) = std::fs::read_dir(&table) else {
        return "no trace written".to_owned();
    };
    let mut files: Vec<PathBuf> = read.filter_map(Result::ok).map(|e| e.path()).collect();
    files.sort();
    let (mut iterations, mut broken, mut open) = (0u64, Vec::new(), 0usize);
    for f in &files {
        if hidden(f) {
            open += 1; // a writer's part not yet closed
            continue;
        }
        if f.extension().is_none_or(|x| x != "parquet") {
            continue;
        }
        match read_iterations_file(f) {
            Ok(part) => iterations += part.records.len() as u64,
            Err(_) => broken.push(
                f.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            ),
        }
    }
    let mut s = match planned {
        Some(p) => format!("the trace holds {iterations} of {p} iterations"),
        None => format!("the trace holds {iterations} iterations"),
    };
    if open > 0 {
        s.push_str(&format!(", {open} part(s) never closed"));
    }
    if !broken.is_empty() {
        s.push_str(&format!(
            ", unreadable part(s) {} (no footer: the run stopped while writing)",
            broken.join(", ")
        ));
    }
    s
}

/// The date of a run without `machine.json`: its directory's name when it
/// is a UTC stamp (`YYYYMMDD-HHMMSS`), else the time its plan was written.
fn date_of(dir: &Path) -> Option<String> {
    let name = dir.file_name()?.to_string_lossy().into_owned();
    let b = name.as_bytes();
    let stamp = b.len() == 15
        && b[8] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 8 || c.is_ascii_digit());
    if stamp {
        return Some(format!(
            "{}-{}-{} {}:{}:{}",
            &name[0..4],
            &name[4..6],
            &name[6..8],
            &name[9..11],
            &name[11..13],
            &name[13..15]
        ));
    }
    let modified = std::fs::metadata(dir.join("plan.json"))
        .or_else(|_| std::fs::metadata(dir.join("summary.json")))
        .and_then(|m| m.modified())
        .ok()?;
    Some(crate::bench::machine::utc_time(modified))
}

fn read_bench(dir: &Path) -> Vec<RunEntry> {
    let origin = bench_origin(dir);
    let base = |state| RunEntry {
        bench: origin.name.clone(),
        date: origin.date.clone(),
        git_revision: origin.git_revision.clone(),
        cpu: origin.cpu.clone(),
        ..RunEntry::empty(dir, state)
    };
    let (rows, finished) = match bench_rows(dir) {
        Ok(r) => r,
        Err(why) => {
            return vec![RunEntry {
                problem: Some(format!("bench results unreadable: {why}")),
                ..base(RunState::Incomplete)
            }]
        }
    };
    let mut entries: Vec<RunEntry> = rows
        .iter()
        .map(|r| RunEntry {
            sweep: Some(r.sweep.clone()),
            job: Some(r.job.clone()),
            workload: Some(r.workload.clone()).filter(|w| !w.is_empty()),
            policy: Some(r.policy.clone()).filter(|p| !p.is_empty()),
            pattern: Some(r.pattern.clone()).filter(|p| !p.is_empty()),
            workers: Some(r.workers),
            iterations: Some(r.iterations),
            seed: Some(r.seed),
            time_s: Some(r.time_per_iteration_ms * r.iterations as f64 / 1000.0),
            test_accuracy: Some(r.test_accuracy),
            params_sha256: Some(r.params_sha256.clone()).filter(|d| !d.is_empty()),
            ..base(RunState::Complete)
        })
        .collect();
    if !finished {
        let jobs = std::fs::read_dir(dir.join(PARTS)).map_or(0, |r| r.count());
        entries.push(RunEntry {
            problem: Some(match origin.jobs {
                Some(n) => format!(
                    "unfinished bench: {jobs} of {n} jobs complete (the same command resumes it)"
                ),
                None => format!("unfinished bench: {jobs} jobs complete"),
            }),
            ..base(RunState::Incomplete)
        });
    }
    entries
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_dates_come_from_stamped_names() {
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path().join("20261126-051000");
        std::fs::create_dir_all(&run).unwrap();
        assert_eq!(date_of(&run).as_deref(), Some("2026-11-26 05:10:00"));
    }

    #[test]
    fn serde_tags() {
        assert_eq!(tag(&serde_json::json!("bsp")).as_deref(), Some("bsp"));
        assert_eq!(
            tag(&serde_json::json!({"SlowWorker": {"p": 1}})).as_deref(),
            Some("SlowWorker")
        );
        assert_eq!(
            tag(&serde_json::json!({"name": "flexrr", "x": 1})).as_deref(),
            Some("flexrr")
        );
    }
}
