//! A tune's report: `tune.md` ranking the configurations, `curves.svg` and
//! `curves.png` plotting each one's validation metric against its training
//! time, and the ranking as text for the terminal.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::runner::{TuneManifest, TuneResult};
use super::TunePlan;
use crate::report::plot::{write_line_plot, LinePlot, Series};

/// One configuration's line of the ranking.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Ranked {
    /// 1 for the best.
    pub rank: usize,
    /// The configuration's index.
    pub config: usize,
    /// Its tuned values.
    pub label: String,
    /// Iterations it trained.
    pub iterations: u64,
    /// Training seconds until it reached the target, if it did.
    pub time_to_target_s: Option<f64>,
    /// The iteration whose parameters first reached it.
    pub reached_at_iteration: Option<u64>,
    /// Its best value of the target's metric.
    pub best: Option<f64>,
    /// Why it failed, if it did.
    pub failed: Option<String>,
    /// Its run directory.
    pub dir: String,
}

/// The ranking of `result`.
pub fn ranking(tune: &TunePlan, out: &Path, result: &TuneResult) -> Vec<Ranked> {
    let target = &tune.spec.target;
    result
        .ranking
        .iter()
        .enumerate()
        .filter_map(|(i, &c)| {
            let o = result.outcomes[c].as_ref()?;
            let reached = o.reached(target);
            Some(Ranked {
                rank: i + 1,
                config: c,
                label: tune.configs[c].label.clone(),
                iterations: o.iterations,
                time_to_target_s: reached.map(|p| p.seconds),
                reached_at_iteration: reached.map(|p| p.iteration),
                best: o.best(target),
                failed: o.failed.clone(),
                dir: TunePlan::config_dir(out, c).display().to_string(),
            })
        })
        .collect()
}

/// The ranking as aligned text.
pub fn ranking_text(tune: &TunePlan, ranked: &[Ranked]) -> String {
    let metric = &tune.spec.target.metric;
    let width = ranked
        .iter()
        .map(|r| r.label.len())
        .max()
        .unwrap_or(0)
        .max(13);
    let mut s = format!(
        "{:>4}  {:<width$}  {:>10}  {:>16}  {:>10}\n",
        "rank",
        "configuration",
        "iterations",
        "to target (s)",
        format!("best {metric}")
    );
    for r in ranked {
        let to = match (&r.failed, r.time_to_target_s) {
            (Some(_), _) => "failed".to_owned(),
            (None, Some(t)) => format!("{t:.2}"),
            (None, None) => "not reached".to_owned(),
        };
        let best = r.best.map_or_else(|| "-".to_owned(), |b| format!("{b:.4}"));
        let _ = writeln!(
            s,
            "{:>4}  {:<width$}  {:>10}  {:>16}  {:>10}",
            r.rank, r.label, r.iterations, to, best
        );
    }
    s
}

/// Writes `tune.md` and the plot of the curves into `out`; returns the files.
pub fn write_report(
    tune: &TunePlan,
    out: &Path,
    manifest: &TuneManifest,
    result: &TuneResult,
    ranked: &[Ranked],
) -> Result<Vec<PathBuf>, String> {
    let target = &tune.spec.target;
    let series: Vec<Series> = ranked
        .iter()
        .filter_map(|r| {
            let o = result.outcomes[r.config].as_ref()?;
            // The index only: the table names its values (long labels
            // would cover the curves).
            Some(Series {
                label: format!("config {:03}", r.config),
                points: o.points.iter().map(|p| (p.seconds, p.value)).collect(),
            })
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    let mut files = Vec::new();
    if !series.is_empty() {
        let plot = LinePlot {
            title: format!("validation {} against training time", target.metric),
            x_label: "training seconds (Σ iteration wall time)".into(),
            y_label: format!("validation {}", target.metric),
            series,
        };
        files.extend(write_line_plot(&out.join("curves"), &plot)?);
    }
    let mut md = String::new();
    let _ = writeln!(md, "# Tune of {}\n", manifest.job);
    let _ = writeln!(md, "- command: `{}`", manifest.command);
    let _ = writeln!(
        md,
        "- git revision {}, started {} (UTC), machine: {} ({} cores)",
        manifest.git_revision, manifest.started, manifest.machine.cpu, manifest.machine.cores
    );
    let _ = writeln!(
        md,
        "- strategy {:?}, rungs (iterations) {:?}; ranked by training time until two evaluations \
         in a row reach {target} on the validation slice (never the test part), under the job's \
         injected pattern",
        manifest.strategy, manifest.rungs
    );
    let _ = writeln!(
        md,
        "- {} configurations, {:.1} s of runs{}\n",
        tune.configs.len(),
        result.spent_s,
        if result.budget_spent {
            " (the budget ran out before the strategy ended: configurations not run are not ranked)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        md,
        "| rank | config | configuration | iterations | to target (s) | at iteration | best {} | run |",
        target.metric
    );
    let _ = writeln!(md, "|---:|---:|---|---:|---:|---:|---:|---|");
    for r in ranked {
        let to = match (&r.failed, r.time_to_target_s) {
            (Some(why), _) => format!("failed: {why}"),
            (None, Some(t)) => format!("{t:.2}"),
            (None, None) => "not reached".into(),
        };
        let _ = writeln!(
            md,
            "| {} | {:03} | `{}` | {} | {} | {} | {} | {} |",
            r.rank,
            r.config,
            r.label,
            r.iterations,
            to,
            r.reached_at_iteration
                .map_or_else(|| "-".into(), |i| i.to_string()),
            r.best.map_or_else(|| "-".into(), |b| format!("{b:.4}")),
            r.dir
        );
    }
    if !files.is_empty() {
        let _ = writeln!(md, "\n![curves](curves.svg)");
    }
    let path = out.join("tune.md");
    crate::fsutil::write_atomic(&path, md.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    files.push(path);
    Ok(files)
}
