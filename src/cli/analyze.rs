//! `forestall analyze PATH…`: which worker is slow, when, why, and what it
//! costs, for every trace at or under each path.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Args;

use super::output::{print_stdout, progress_bar};
use super::GlobalArgs;
use crate::analyze::{
    analyze_observed, find_traces, load, ops_file_of, stages_by_rank, with_operations, Analysis,
    Observed,
};
use crate::ops::{read_ops, OpTrace};
use crate::report::json;

/// Arguments of `forestall analyze`.
#[derive(Debug, Args)]
pub struct AnalyzeArgs {
    /// Trace directories (a run's `OUT`, a bench's `OUT`, an import's `OUT`:
    /// every trace under them is analysed) or published operation files
    /// (ByteDance `trace-*.parquet`).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// A worker is slow in an iteration when its busy time exceeds the
    /// iteration's median by more than this fraction.
    #[arg(long, default_value_t = crate::spec::DEFAULT_LAGGARD_THRESHOLD)]
    pub threshold: f64,
    /// Exit with status 1 when any trace's slowdown S exceeds this (a CI gate).
    #[arg(long, value_name = "S")]
    pub fail_on_slowdown: Option<f64>,
}

/// What to analyse: a trace directory or an operation file.
enum Target {
    Dir(PathBuf),
    Ops(PathBuf),
}

fn targets(paths: &[PathBuf]) -> anyhow::Result<Vec<Target>> {
    let mut out = Vec::new();
    for path in paths {
        if path.is_file() {
            out.push(Target::Ops(path.clone()));
            continue;
        }
        if !path.is_dir() {
            bail!("{} does not exist", path.display());
        }
        let found = find_traces(path);
        if found.is_empty() {
            bail!(
                "{} holds no trace (no directory with units/, workers/ or iterations/)",
                path.display()
            );
        }
        out.extend(found.into_iter().map(Target::Dir));
    }
    Ok(out)
}

/// Per-(step, worker) compute of an operation trace, as a trace would hold it.
fn observed_from_ops(ops: &OpTrace) -> Observed {
    let mut workers = ops.workers();
    workers.sort_by_key(|w| w.rank);
    let index = |dp: u32, stage: u32| {
        workers
            .iter()
            .position(|w| w.dp_rank == dp && w.stage == stage)
            .expect("every op's worker is listed")
    };
    let n = workers.len();
    let mut o = Observed {
        workers: n,
        unit_us: vec![Vec::new(); n],
        ..Observed::default()
    };
    for g in &ops.graphs {
        let mut busy = vec![0u64; n];
        let mut first = f64::MAX;
        let mut last = f64::MIN;
        for &i in &g.ops {
            let op = &ops.ops[i];
            first = first.min(op.start_s);
            last = last.max(op.end_s());
            if op.kind.is_compute() {
                let w = index(op.dp_rank, op.stage);
                let us = (op.duration_s * 1e6).round() as u64;
                busy[w] += us;
                o.unit_us[w].push(u32::try_from(us).unwrap_or(u32::MAX));
                o.zero_units += u64::from(us == 0);
            }
        }
        let wall = ((last - first) * 1e6).round() as u64;
        o.laggard.push(laggard(&busy));
        o.iterations.push(u64::try_from(g.step).unwrap_or(0));
        o.barrier
            .push(busy.iter().map(|&b| wall.saturating_sub(b)).collect());
        o.rows.push(vec![0; n]);
        o.wall.push(wall);
        o.busy.push(busy);
    }
    o
}

/// The worker whose busy time exceeds the median of the others by more than
/// the run's laggard threshold (as the runtime's detector decides).
fn laggard(busy: &[u64]) -> Option<u32> {
    let (last, &longest) = busy.iter().enumerate().max_by_key(|&(w, &b)| (b, w))?;
    let mut others: Vec<f64> = busy
        .iter()
        .enumerate()
        .filter(|&(w, _)| w != last)
        .map(|(_, &b)| b as f64)
        .collect();
    let typical = crate::stats::median(&mut others);
    (!others.is_empty()
        && longest as f64 - typical > crate::spec::DEFAULT_LAGGARD_THRESHOLD * typical)
        .then_some(last as u32)
}

fn analyze_ops_file(path: &Path, threshold: f64) -> anyhow::Result<Analysis> {
    let ops = read_ops(path)?;
    let trace = OpTrace::new(ops).with_context(|| format!("{}", path.display()))?;
    let observed = observed_from_ops(&trace);
    let stages = stages_by_rank(&trace);
    let replay = trace
        .analyze()
        .with_context(|| format!("{}", path.display()))?;
    let base = analyze_observed(
        &path.display().to_string(),
        &observed,
        threshold,
        Some(&stages),
    );
    Ok(with_operations(base, replay))
}

fn analyze_dir(dir: &Path, threshold: f64) -> anyhow::Result<Analysis> {
    Ok(analyze_dir_observed(dir, threshold)?.0)
}

/// The analysis of trace directory `dir`, and what it was computed from.
pub fn analyze_dir_observed(dir: &Path, threshold: f64) -> anyhow::Result<(Analysis, Observed)> {
    let observed = load(dir)?;
    let name = dir.display().to_string();
    let Some(ops_path) = ops_file_of(dir) else {
        let analysis = analyze_observed(&name, &observed, threshold, None);
        return Ok((analysis, observed));
    };
    let ops = read_ops(&ops_path)?;
    let trace = OpTrace::new(ops).with_context(|| format!("{}", ops_path.display()))?;
    let stages = stages_by_rank(&trace);
    if stages.len() != observed.workers || trace.graphs.len() != observed.iterations.len() {
        bail!(
            "{} has {} workers × {} iterations but {} has {} × {}: they are not the same job",
            dir.display(),
            observed.workers,
            observed.iterations.len(),
            ops_path.display(),
            stages.len(),
            trace.graphs.len()
        );
    }
    // Per-operation times (micro-batch passes), and the trace's stamp.
    let observed = Observed {
        stamp: observed.stamp,
        ..observed_from_ops(&trace)
    };
    let replay = trace
        .analyze()
        .with_context(|| format!("{}", ops_path.display()))?;
    let analysis = with_operations(
        analyze_observed(&name, &observed, threshold, Some(&stages)),
        replay,
    );
    Ok((analysis, observed))
}

fn text(a: &Analysis) -> String {
    let mut s = format!(
        "{} ({}): S = {:.3} over {} iterations × {} workers ({}; mean iteration {:.1} ms, ideal {:.1} ms); stragglers in {} iterations",
        a.trace,
        if a.job_id.is_empty() { "no job id" } else { &a.job_id },
        a.slowdown,
        a.iterations,
        a.workers,
        match a.method {
            "operations" => "operations replayed",
            _ => "barrier per iteration",
        },
        a.actual_iteration_us / 1e3,
        a.ideal_iteration_us / 1e3,
        a.iterations_with_stragglers,
    );
    if a.missing_rows > 0 || a.zero_units > 0 {
        s.push_str(&format!(
            "\n  note: {} worker rows missing (workers absent from iterations), {} units of zero duration",
            a.missing_rows, a.zero_units
        ));
    }
    s.push_str(&format!(
        "\n  {:>6} {:>10} {:>10} {:>10} {:>8} {:>8} {:>11} {:>7} {:>6}  why",
        "worker", "median ms", "p95 ms", "p99 ms", "laggard", "barrier", "class", "S_w", "share"
    ));
    // The workers that matter first: by share of the slowdown, then index.
    let mut order: Vec<&crate::analyze::WorkerAnalysis> = a.per_worker.iter().collect();
    order.sort_by(|x, y| {
        y.share_of_slowdown
            .total_cmp(&x.share_of_slowdown)
            .then(x.worker.cmp(&y.worker))
    });
    const SHOWN: usize = 20;
    for w in order.iter().take(SHOWN) {
        s.push_str(&format!(
            "\n  {:>6} {:>10.2} {:>10.2} {:>10.2} {:>7.0}% {:>7.0}% {:>11} {:>7.3} {:>5.0}%  {}",
            w.worker,
            w.median_unit_us / 1e3,
            w.p95_unit_us / 1e3,
            w.p99_unit_us / 1e3,
            w.laggard_share * 100.0,
            w.barrier_wait_share * 100.0,
            w.class.as_str(),
            w.slowdown,
            w.share_of_slowdown * 100.0,
            match w.slow_in {
                "link" => format!(
                    "{}; slow in its link: {:.0} % of its time over the median went into sending",
                    w.why,
                    w.link_share * 100.0
                ),
                _ => w.why.clone(),
            }
        ));
    }
    if order.len() > SHOWN {
        s.push_str(&format!(
            "\n  … {} more workers (--json lists all)",
            order.len() - SHOWN
        ));
    }
    if let Some(p) = &a.online_predictions {
        s.push_str(&format!(
            "\n  the run's online predictor: {} predictions of a worker's time per unit, MAE {:.2} ms, MAPE {:.1} %",
            p.predictions,
            p.mae_us / 1e3,
            p.mape * 100.0
        ));
    }
    if let Some(ops) = &a.operations {
        let list = |m: &std::collections::BTreeMap<u32, f64>| {
            m.iter()
                .map(|(k, v)| format!("{k}: {v:.3}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut kinds: Vec<(&String, &f64)> = ops.by_optype.iter().collect();
        kinds.sort_by(|a, b| b.1.total_cmp(a.1));
        s.push_str(&format!(
            "\n  replay error {:.1} % (replayed vs recorded step time)\n  S with only one data-parallel rank recorded: {}\n  S with only one stage recorded: {}\n  S with only one kind recorded: {}\n  M_W {:.1} % (fixing {} worker(s): rank {}), M_S {:.1} % (fixing the last stage)",
            ops.replay_error * 100.0,
            list(&ops.by_dp_rank),
            list(&ops.by_stage),
            kinds.iter().take(4).map(|(k, v)| format!("{k}: {v:.3}")).collect::<Vec<_>>().join(", "),
            ops.m_w.removed * 100.0,
            ops.worst_workers.len(),
            ops.worst_workers.iter().map(|w| w.rank.to_string()).collect::<Vec<_>>().join(", "),
            ops.m_s.removed * 100.0,
        ));
    }
    s
}

/// Runs `forestall analyze`.
pub fn run(args: AnalyzeArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    if !(args.threshold.is_finite() && args.threshold > 0.0 && args.threshold <= 100.0) {
        bail!(
            "--threshold {} must be a number in (0, 100]",
            args.threshold
        );
    }
    if let Some(x) = args.fail_on_slowdown {
        if !(x.is_finite() && x >= 1.0) {
            bail!("--fail-on-slowdown {x} must be a number ≥ 1 (S is never below 1 for long)");
        }
    }
    let targets = targets(&args.paths)?;
    let bar = progress_bar(global, targets.len() as u64, "traces");
    let mut over = Vec::new();
    for target in &targets {
        let analysis = match target {
            Target::Dir(dir) => analyze_dir(dir, args.threshold)?,
            Target::Ops(file) => analyze_ops_file(file, args.threshold)?,
        };
        bar.inc(1);
        if global.json {
            print_stdout(&json::line("analysis", &analysis));
        } else if global.quiet == 0 {
            bar.suspend(|| print_stdout(&text(&analysis)));
        }
        if args.fail_on_slowdown.is_some_and(|x| analysis.slowdown > x) {
            over.push(format!("{} (S = {:.3})", analysis.trace, analysis.slowdown));
        }
    }
    bar.finish_and_clear();
    if let (Some(x), false) = (args.fail_on_slowdown, over.is_empty()) {
        eprintln!("slowdown above {x}: {}", over.join(", "));
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
