//! `forestall runs [DIR]`: the runs and bench rows under DIR, oldest first.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::output::print_stdout;
use super::GlobalArgs;
use crate::report::json;
use crate::runs::{list_runs, RunEntry, RunState};

/// Arguments of `forestall runs`.
#[derive(Debug, Args)]
pub struct RunsArgs {
    /// Where to look: a folder of runs (`forestall run` writes
    /// runs/JOB/UTC-TIME), one run, or a bench results directory (each
    /// of its rows is listed).
    #[arg(default_value = "runs")]
    pub dir: PathBuf,
}

/// A warning on stderr, or a `warning` JSON line under `--json`.
pub(crate) fn warn(global: &GlobalArgs, message: &str) {
    #[derive(serde::Serialize)]
    struct Warning<'a> {
        message: &'a str,
    }
    if global.json {
        print_stdout(&json::line("warning", &Warning { message }));
    } else {
        eprintln!("warning: {message}");
    }
}

fn row(e: &RunEntry) -> Vec<String> {
    let dash = || "—".to_owned();
    let s = |v: &Option<String>| v.clone().unwrap_or_else(dash);
    vec![
        s(&e.date),
        match (&e.bench, &e.sweep) {
            (Some(b), Some(sw)) => format!("{} ({b}/{sw})", s(&e.job)),
            (Some(b), None) => format!("bench {b}"),
            _ => s(&e.job),
        },
        s(&e.workload),
        s(&e.policy),
        s(&e.pattern),
        e.workers.map_or_else(dash, |w| w.to_string()),
        e.iterations.map_or_else(dash, |i| i.to_string()),
        e.time_s.map_or_else(dash, |t| format!("{t:.2}")),
        e.test_accuracy.map_or_else(dash, |a| format!("{a:.4}")),
        e.params_sha256
            .as_deref()
            .map_or_else(dash, |d| d[..d.len().min(12)].to_owned()),
        match e.state {
            RunState::Complete => e.path.clone(),
            RunState::Incomplete => format!(
                "{} INCOMPLETE: {}",
                e.path,
                e.problem.as_deref().unwrap_or("no summary")
            ),
        },
    ]
}

/// Runs `forestall runs`.
pub fn run(args: RunsArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let entries = list_runs(&args.dir)?;
    if global.json {
        for e in &entries {
            print_stdout(&json::line("run", e));
        }
        return Ok(ExitCode::SUCCESS);
    }
    if entries.is_empty() {
        if global.quiet == 0 {
            eprintln!("no runs under {}", args.dir.display());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let header: Vec<String> = [
        "date",
        "job",
        "workload",
        "policy",
        "pattern",
        "W",
        "iterations",
        "time s",
        "accuracy",
        "digest",
        "directory",
    ]
    .map(str::to_owned)
    .to_vec();
    let rows: Vec<Vec<String>> = std::iter::once(header)
        .chain(entries.iter().map(row))
        .collect();
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for r in &rows {
        let last = r.len() - 1;
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(c, v)| {
                if c == last {
                    v.clone()
                } else {
                    format!("{v:<w$}", w = widths[c])
                }
            })
            .collect();
        print_stdout(line.join("  ").trim_end());
    }
    Ok(ExitCode::SUCCESS)
}
