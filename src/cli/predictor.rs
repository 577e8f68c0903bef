//! `forestall predictor eval TRACES…`: score the predictors on recorded traces.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};

use super::output::print_stdout;
use super::GlobalArgs;
use crate::predict::{
    evaluate, tail_start, worker_series, Ewma, Last, LinearLags, Predictor, Scores, SvmStraggler,
    WorkerSeries, DEFAULT_LAGS, DEFAULT_STRAGGLER_THRESHOLD,
};
use crate::report::json;
use crate::trace::read_trace_dir;

/// `forestall predictor …`.
#[derive(Debug, Subcommand)]
pub enum PredictorCommand {
    /// Score every built predictor on the held-out tail of each worker's series.
    Eval(EvalArgs),
}

/// Arguments of `forestall predictor eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Run or import directories (holding `trace/`), or trace directories.
    #[arg(required = true)]
    pub traces: Vec<PathBuf>,
    /// Share of each worker's series before the scored tail (the tail is held out).
    #[arg(long, default_value_t = 0.5)]
    pub tail_from: f64,
    /// A worker straggles when slower than this × the iteration median.
    #[arg(long, default_value_t = DEFAULT_STRAGGLER_THRESHOLD)]
    pub threshold: f64,
    /// Traces to fit `linear` and `svm` on (default: the part of each evaluated
    /// series before its held-out tail).
    #[arg(long, num_args = 1..)]
    pub train: Vec<PathBuf>,
    /// Lagged ratios `linear` and `svm` use.
    #[arg(long, default_value_t = DEFAULT_LAGS)]
    pub lags: usize,
    /// Weight of the newest observation in `ewma`.
    #[arg(long, default_value_t = 0.3)]
    pub ewma_alpha: f64,
}

/// Runs `forestall predictor`.
pub fn run(command: PredictorCommand, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    match command {
        PredictorCommand::Eval(args) => eval(args, global),
    }
}

fn trace_dir(dir: &Path) -> PathBuf {
    let inner = dir.join("trace");
    if inner.is_dir() {
        inner
    } else {
        dir.to_path_buf()
    }
}

/// Every worker series of the traces in `dirs`.
fn read_series(dirs: &[PathBuf]) -> anyhow::Result<Vec<WorkerSeries>> {
    let mut series = Vec::new();
    for dir in dirs {
        let trace = read_trace_dir(&trace_dir(dir))
            .with_context(|| format!("cannot read the trace in {}", dir.display()))?;
        series.extend(worker_series(&trace).with_context(|| format!("{}", dir.display()))?);
    }
    Ok(series)
}

fn eval(args: EvalArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    if !(0.0..1.0).contains(&args.tail_from) {
        bail!("--tail-from must be in [0, 1) (got {})", args.tail_from);
    }
    if !(args.threshold.is_finite() && args.threshold > 1.0) {
        bail!(
            "--threshold must be a number above 1 (got {})",
            args.threshold
        );
    }
    if !(args.ewma_alpha > 0.0 && args.ewma_alpha <= 1.0) {
        bail!("--ewma-alpha must be in (0, 1] (got {})", args.ewma_alpha);
    }
    if args.lags == 0 {
        bail!("--lags must be at least 1");
    }
    let series = read_series(&args.traces)?;
    let mut predictors: Vec<Box<dyn Predictor>> = vec![
        Box::new(Last),
        Box::new(Ewma {
            alpha: args.ewma_alpha,
        }),
    ];
    // The learned models fit on other traces (--train) or on the part of each
    // evaluated series before its held-out tail.
    let (train, whole) = if args.train.is_empty() {
        (series.clone(), false)
    } else {
        (read_series(&args.train)?, true)
    };
    let end = |s: &WorkerSeries| {
        if whole {
            s.steps.len()
        } else {
            tail_start(s.steps.len(), args.tail_from)
        }
    };
    match LinearLags::fit(&train, args.lags, end) {
        Ok(model) => predictors.push(Box::new(model)),
        Err(e) => tracing::warn!("linear is left out: {e}"),
    }
    match SvmStraggler::fit(&train, args.lags, args.threshold, end) {
        Ok(model) => predictors.push(Box::new(model)),
        Err(e) => tracing::warn!("svm is left out: {e}"),
    }
    let scores: Vec<Scores> = predictors
        .iter()
        .map(|p| evaluate(p.as_ref(), &series, args.tail_from, args.threshold))
        .collect();
    if global.json {
        for s in &scores {
            print_stdout(&json::line("predictor-scores", s));
        }
        return Ok(ExitCode::SUCCESS);
    }
    print_stdout(&format!(
        "{} worker series from {} trace(s); tail from {:.0} % of each; straggler = slower than {} × median",
        series.len(),
        args.traces.len(),
        100.0 * args.tail_from,
        args.threshold
    ));
    print_stdout("| predictor | predictions | MAE µs | MAPE % | precision | recall | F1 | latency ns/worker |");
    print_stdout("|---|---|---|---|---|---|---|---|");
    for s in &scores {
        print_stdout(&format!(
            "| {} | {} | {:.1} | {:.1} | {:.3} | {:.3} | {:.3} | {:.0} |",
            s.predictor, s.predictions, s.mae_us, s.mape, s.precision, s.recall, s.f1, s.latency_ns
        ));
    }
    Ok(ExitCode::SUCCESS)
}
