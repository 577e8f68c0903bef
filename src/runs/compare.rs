//! Runs side by side: their summary fields as one table (a column per run),
//! and their loss, accuracy and iteration-time curves overlaid, one plot
//! each. What cannot be compared is said, not hidden: runs of different
//! workloads get no loss or accuracy overlay (only the iteration time), and
//! runs from different machines (CPU model) or git revisions get a warning.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::catalogue::{is_run_dir, read_run, RunEntry, RunState};
use super::RunsError;
use crate::report::curves::{curve_svg, Curve, RunCurves};
use crate::report::html::markdown_to_html;
use crate::report::plot::Series;

/// One run of a comparison.
#[derive(Debug, Clone)]
pub struct ComparedRun {
    /// Its legend label (the directory as given).
    pub label: String,
    /// Its catalogue entry.
    pub entry: RunEntry,
    /// Its `summary.json` (None for an incomplete run).
    pub summary: Option<Value>,
    /// Its curves, from its trace.
    pub curves: RunCurves,
}

/// Runs compared, and what the reader must know about comparing them.
#[derive(Debug, Clone)]
pub struct Comparison {
    /// The runs, in the order given.
    pub runs: Vec<ComparedRun>,
    /// Differences that make the numbers hard to compare (machines,
    /// revisions).
    pub warnings: Vec<String>,
    /// What is and is not compared, and why.
    pub notes: Vec<String>,
    /// The curves overlaid.
    pub overlaid: Vec<Curve>,
}

/// Reads the runs in `dirs` and decides what can be compared. Every
/// directory must be a run directory.
pub fn compare_runs(dirs: &[PathBuf]) -> Result<Comparison, RunsError> {
    let mut runs = Vec::new();
    let mut notes = Vec::new();
    for dir in dirs {
        if !dir.is_dir() {
            return Err(RunsError::NotADirectory { path: dir.clone() });
        }
        if !is_run_dir(dir) {
            return Err(RunsError::NotARun { path: dir.clone() });
        }
        let entry = read_run(dir);
        let summary = std::fs::read_to_string(dir.join("summary.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
        let trace = dir.join("trace");
        let curves = if trace.is_dir() {
            match RunCurves::read(&trace) {
                Ok(c) => c,
                Err(e) => {
                    notes.push(format!(
                        "{}: its trace is unreadable ({e}); no curves",
                        dir.display()
                    ));
                    RunCurves::default()
                }
            }
        } else {
            notes.push(format!("{}: no trace, no curves", dir.display()));
            RunCurves::default()
        };
        if entry.state == RunState::Incomplete {
            notes.push(format!(
                "{} is incomplete ({}): its summary fields are missing, its curves show what its trace holds",
                dir.display(),
                entry.problem.as_deref().unwrap_or("no summary")
            ));
        }
        runs.push(ComparedRun {
            label: dir.display().to_string(),
            entry,
            summary,
            curves,
        });
    }
    let mut warnings = Vec::new();
    let differ = |what: &dyn Fn(&RunEntry) -> Option<String>| {
        let mut by: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        let mut unknown = Vec::new();
        for r in &runs {
            match what(&r.entry) {
                Some(v) => by.entry(v).or_default().push(&r.label),
                None => unknown.push(r.label.as_str()),
            }
        }
        let list = by
            .iter()
            .map(|(v, runs)| format!("{v} ({})", runs.join(", ")))
            .collect::<Vec<_>>();
        (by.len(), list.join("; "), unknown.join(", "))
    };
    let (cpus, cpu_list, no_cpu) = differ(&|e| e.cpu.clone());
    if cpus > 1 {
        warnings.push(format!(
            "the runs come from different machines: {cpu_list}; their times are not comparable"
        ));
    }
    if !no_cpu.is_empty() && runs.len() > 1 {
        warnings.push(format!(
            "{no_cpu}: no machine recorded (no machine.json); its times may come from another machine"
        ));
    }
    let (revisions, revision_list, _) = differ(&|e| e.git_revision.clone());
    if revisions > 1 {
        warnings.push(format!(
            "the runs come from different git revisions: {revision_list}"
        ));
    }
    let (jobs, job_list, _) = differ(&|e| e.job.clone());
    if jobs > 1 {
        notes.push(format!(
            "the runs are of different jobs: {job_list}; their fields are shown side by side, their parameters cannot agree"
        ));
    }
    let (workloads, workload_list, _) = differ(&|e| e.workload.clone());
    let overlaid = if workloads > 1 {
        notes.push(format!(
            "the runs train different workloads: {workload_list}; loss and accuracy are not comparable and are not overlaid, only the iteration time"
        ));
        vec![Curve::IterationTime]
    } else {
        Curve::ALL.to_vec()
    };
    Ok(Comparison {
        runs,
        warnings,
        notes,
        overlaid,
    })
}

/// Summary fields compared, in the table's order: (label, summary key).
const FIELDS: &[(&str, &str)] = &[
    ("workload", "workload"),
    ("workers", "workers"),
    ("pattern", "pattern"),
    ("policy", "policy"),
    ("iterations", "iterations"),
    ("wall s", "wall_s"),
    ("median iteration ms", "median_iteration_ms"),
    ("p95 iteration ms", "p95_iteration_ms"),
    ("barrier wait worker-s", "barrier_wait_s"),
    ("iteration s", "iteration_s"),
    ("bound s", "bound_iteration_s"),
    ("test accuracy", "test_accuracy"),
    ("test log-loss", "test_log_loss"),
    ("converged at iteration", "converged_iteration"),
    ("parameters sha256", "params_sha256"),
];

fn cell(v: &Value) -> String {
    match v {
        Value::Null => "—".to_owned(),
        Value::String(s) if s.len() == 64 => s[..16].to_owned(),
        Value::String(s) => s.clone(),
        Value::Number(n) => match (n.as_u64(), n.as_f64()) {
            (Some(u), _) => u.to_string(),
            (None, Some(f)) => format!("{f:.4}"),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

impl Comparison {
    /// The summary fields as a Markdown table: a row per field, a column per
    /// run.
    pub fn table(&self) -> String {
        let mut s = String::from("| field |");
        for r in &self.runs {
            let _ = write!(s, " {} |", r.label);
        }
        s.push_str("\n|---|");
        s.push_str(&"---|".repeat(self.runs.len()));
        s.push('\n');
        let mut row = |name: &str, values: Vec<String>| {
            let _ = writeln!(s, "| {name} | {} |", values.join(" | "));
        };
        row(
            "job",
            self.runs
                .iter()
                .map(|r| r.entry.job.clone().unwrap_or_else(|| "—".into()))
                .collect(),
        );
        row(
            "state",
            self.runs
                .iter()
                .map(|r| match r.entry.state {
                    RunState::Complete => "complete".to_owned(),
                    RunState::Incomplete => "INCOMPLETE".to_owned(),
                })
                .collect(),
        );
        for (name, key) in FIELDS {
            row(
                name,
                self.runs
                    .iter()
                    .map(|r| match &r.summary {
                        Some(s) => cell(&s[*key]),
                        None => "—".to_owned(),
                    })
                    .collect(),
            );
        }
        let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "—".into());
        row(
            "date",
            self.runs.iter().map(|r| opt(&r.entry.date)).collect(),
        );
        row(
            "git revision",
            self.runs
                .iter()
                .map(|r| opt(&r.entry.git_revision))
                .collect(),
        );
        row("CPU", self.runs.iter().map(|r| opt(&r.entry.cpu)).collect());
        s
    }

    /// One self-contained HTML page: warnings, notes, the table and the
    /// overlaid curves (inline SVG).
    pub fn page(&self) -> Result<String, RunsError> {
        let mut html = String::from(
            "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>forestall compare</title>\n<style>body{font-family:sans-serif;margin:2em;max-width:1000px}table{border-collapse:collapse;margin:1em 0}td{border:1px solid #ccc;padding:2px 8px;font-size:13px}.warning{color:#a00}</style></head><body>\n<h1>forestall compare</h1>\n",
        );
        for w in &self.warnings {
            let _ = writeln!(html, "<p class=\"warning\">warning: {}</p>", escape(w));
        }
        for n in &self.notes {
            let _ = writeln!(html, "<p class=\"note\">{}</p>", escape(n));
        }
        html.push_str(&markdown_to_html(&self.table()));
        for &curve in &self.overlaid {
            let series: Vec<Series> = self
                .runs
                .iter()
                .map(|r| Series {
                    label: r.label.clone(),
                    points: curve.of(&r.curves).to_vec(),
                })
                .collect();
            if series.iter().all(|s| s.points.is_empty()) {
                continue;
            }
            let svg = curve_svg(curve, &series).map_err(|message| RunsError::Plot {
                what: curve.labels().0.to_owned(),
                message,
            })?;
            let _ = writeln!(
                html,
                "<div class=\"curve\" id=\"{}\">{svg}</div>",
                curve.id()
            );
        }
        html.push_str("</body></html>\n");
        Ok(html)
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Where `forestall compare` writes its page without `--out`: compare.html
/// in the current directory.
pub fn default_page() -> &'static Path {
    Path::new("compare.html")
}
