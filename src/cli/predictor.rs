//! `forestall predictor eval TRACES…`: score the predictors on recorded traces.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};

use super::output::{print_stdout, progress_bar};
use super::GlobalArgs;
use crate::fsutil::is_non_empty_dir;
use crate::predict::lstm::{Base, TrainedOn};
use crate::predict::{
    evaluate, tail_start, worker_series, Auto, CalibratedLstm, Ewma, Last, LinearLags,
    LstmPredictor, LstmSettings, Median, Predictor, Scores, Sustained, SvmStraggler, WorkerSeries,
    DEFAULT_EWMA_ALPHA, DEFAULT_LAGS, DEFAULT_STRAGGLER_THRESHOLD,
};
use crate::report::json;
use crate::trace::read_trace_dir;

/// `forestall predictor …`.
#[derive(Debug, Subcommand)]
pub enum PredictorCommand {
    /// Score every built predictor on the held-out tail of each worker's series.
    Eval(EvalArgs),
    /// Train the LSTM predictor on traces and save it to a model directory.
    Train(TrainArgs),
}

/// Models `forestall predictor train` can train.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ModelKind {
    /// burn LSTM over the last `--window` steps (DPro-SM).
    Lstm,
}

/// Arguments of `forestall predictor train`.
#[derive(Debug, Args)]
pub struct TrainArgs {
    /// Model to train.
    #[arg(long, value_enum, default_value = "lstm")]
    pub model: ModelKind,
    /// Run or import directories (holding `trace/`), or trace directories.
    #[arg(required = true)]
    pub traces: Vec<PathBuf>,
    /// Model directory to write (`model.json` + `weights.bpk`).
    #[arg(long)]
    pub out: PathBuf,
    /// Replace a non-empty `--out`.
    #[arg(long)]
    pub force: bool,
    /// Train only on the part of each series before this share, so `predictor
    /// eval --tail-from` the same share on the same traces stays unseen (1 = all).
    #[arg(long, default_value_t = 1.0)]
    pub train_until: f64,
    /// Steps of history the LSTM reads.
    #[arg(long, default_value_t = LstmSettings::default().window)]
    pub window: usize,
    /// Hidden units.
    #[arg(long, default_value_t = LstmSettings::default().hidden)]
    pub hidden: usize,
    /// Upper bound on epochs (early stopping usually ends sooner).
    #[arg(long, default_value_t = LstmSettings::default().max_epochs)]
    pub max_epochs: usize,
    /// Epochs without a better validation loss before stopping.
    #[arg(long, default_value_t = LstmSettings::default().patience)]
    pub patience: usize,
    /// Adam learning rate.
    #[arg(long, default_value_t = LstmSettings::default().learning_rate)]
    pub learning_rate: f64,
    /// Seed of the initial weights and the shuffles.
    #[arg(long, default_value_t = LstmSettings::default().seed)]
    pub seed: u64,
    /// What the predicted change is added to: the median ratio of the
    /// worker's last 16 steps (a silent model is `median`) or the last
    /// step's (it holds the last value).
    #[arg(long, value_enum, default_value = "median")]
    pub base: Base,
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
    #[arg(long, default_value_t = DEFAULT_EWMA_ALPHA)]
    pub ewma_alpha: f64,
    /// A model directory from `forestall predictor train` to score beside the others.
    #[arg(long)]
    pub model: Option<PathBuf>,
}

/// Runs `forestall predictor`.
pub fn run(command: PredictorCommand, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    match command {
        PredictorCommand::Eval(args) => eval(args, global),
        PredictorCommand::Train(args) => train(args, global),
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

/// The worker series of each trace in `dirs` (one job each).
fn read_jobs(dirs: &[PathBuf]) -> anyhow::Result<Vec<Vec<WorkerSeries>>> {
    dirs.iter()
        .map(|dir| {
            let trace = read_trace_dir(&trace_dir(dir))
                .with_context(|| format!("cannot read the trace in {}", dir.display()))?;
            worker_series(&trace).with_context(|| format!("{}", dir.display()))
        })
        .collect()
}

/// Every worker series of the traces in `dirs`.
fn read_series(dirs: &[PathBuf]) -> anyhow::Result<Vec<WorkerSeries>> {
    Ok(read_jobs(dirs)?.into_iter().flatten().collect())
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
    let lstm = match &args.model {
        Some(dir) => {
            let model = LstmPredictor::load(dir)
                .with_context(|| format!("cannot load the model in {}", dir.display()))?;
            check_unseen(&model, &args.traces, args.tail_from)?;
            Some(std::sync::Arc::new(model))
        }
        None => None,
    };
    let jobs = read_jobs(&args.traces)?;
    let series: Vec<WorkerSeries> = jobs.iter().flatten().cloned().collect();
    let mut predictors: Vec<Box<dyn Predictor>> = vec![
        Box::new(Last),
        Box::new(Ewma {
            alpha: args.ewma_alpha,
        }),
        Box::new(Sustained::default()),
        Box::new(Median::default()),
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
    if let Some(model) = &lstm {
        // the model alone, and with its online gain (what `lstm` is online)
        predictors.push(Box::new(std::sync::Arc::clone(model)));
        predictors.push(Box::new(CalibratedLstm::new(std::sync::Arc::clone(model))));
    }
    // auto chooses among the baselines and the same LSTM
    predictors.push(Box::new(Auto::new(lstm)));
    let scores: Vec<Scores> = predictors
        .iter()
        .map(|p| evaluate(p.as_ref(), &jobs, args.tail_from, args.threshold))
        .collect();
    if scores.iter().all(|s| s.predictions == 0) {
        let longest = series.iter().map(|s| s.steps.len()).max().unwrap_or(0);
        bail!(
            "nothing to score: the {} worker series hold at most {longest} iteration(s), and none \
             has an iteration in its held-out tail (from {:.0} %) with earlier ones to predict it \
             from; score longer traces or pass a lower --tail-from",
            series.len(),
            100.0 * args.tail_from
        );
    }
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
        if s.predictions == 0 {
            // (no prediction of its own: nothing to average)
            print_stdout(&format!("| {} | 0 | – | – | – | – | – | – |", s.predictor));
            continue;
        }
        print_stdout(&format!(
            "| {} | {} | {:.1} | {:.1} | {:.3} | {:.3} | {:.3} | {:.0} |",
            s.predictor, s.predictions, s.mae_us, s.mape, s.precision, s.recall, s.f1, s.latency_ns
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// Refuses to score a model on steps it was trained on: an evaluated trace that
/// was a training trace must have been trained on no further than `tail_from`.
fn check_unseen(model: &LstmPredictor, traces: &[PathBuf], tail_from: f64) -> anyhow::Result<()> {
    for trained in &model.card().trained_on {
        let seen = std::fs::canonicalize(trace_dir(&trained.path)).ok();
        for dir in traces {
            let scored = std::fs::canonicalize(trace_dir(dir)).ok();
            if seen.is_some() && seen == scored && trained.share > tail_from + 1e-9 {
                bail!(
                    "the model was trained on {:.0} % of {}, which overlaps the scored tail from {:.0} %: \
                     score other traces, or train with --train-until {} or less",
                    100.0 * trained.share,
                    dir.display(),
                    100.0 * tail_from,
                    tail_from
                );
            }
        }
    }
    Ok(())
}

fn train(args: TrainArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let ModelKind::Lstm = args.model;
    if !(args.train_until > 0.0 && args.train_until <= 1.0) {
        bail!("--train-until must be in (0, 1] (got {})", args.train_until);
    }
    if is_non_empty_dir(&args.out) && !args.force {
        bail!(
            "{} already holds files; pass --force to replace it or choose another --out",
            args.out.display()
        );
    }
    let settings = LstmSettings {
        window: args.window,
        hidden: args.hidden,
        max_epochs: args.max_epochs,
        patience: args.patience,
        learning_rate: args.learning_rate,
        seed: args.seed,
        base: args.base,
        ..LstmSettings::default()
    };
    let series = read_series(&args.traces)?;
    let trained_on = args
        .traces
        .iter()
        .map(|path| TrainedOn {
            path: path.clone(),
            share: args.train_until,
        })
        .collect();
    let end = |s: &WorkerSeries| {
        if args.train_until >= 1.0 {
            s.steps.len()
        } else {
            tail_start(s.steps.len(), args.train_until)
        }
    };
    let bar = progress_bar(global, settings.max_epochs as u64, "epochs (at most)");
    let model = LstmPredictor::train(&series, &end, &settings, trained_on, |epoch, loss| {
        bar.set_position(epoch as u64);
        bar.set_message(format!("validation loss {loss:.4}"));
    })?;
    bar.finish_and_clear();
    // Write beside the target and rename, so a failure leaves no half-written model.
    let parent = args
        .out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent)
        .with_context(|| format!("cannot create {}", parent.display()))?;
    let name = args.out.file_name().unwrap_or_default().to_string_lossy();
    let staging = parent.join(format!(".{name}.partial-{}", std::process::id()));
    let saved = std::fs::create_dir_all(&staging)
        .with_context(|| format!("cannot write in {}", parent.display()))
        .and_then(|()| Ok(model.save(&staging)?))
        .and_then(|()| {
            if args.out.exists() {
                std::fs::remove_dir_all(&args.out)
                    .with_context(|| format!("cannot replace {}", args.out.display()))?;
            }
            std::fs::rename(&staging, &args.out)
                .with_context(|| format!("cannot move the model to {}", args.out.display()))
        });
    if saved.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    saved?;
    let r = &model.card().report;
    if global.json {
        print_stdout(&json::line("predictor-trained", model.card()));
    } else {
        print_stdout(&format!(
            "lstm trained on {} windows ({} validation) from {} worker series: {} epochs, best {}; \
             validation MAE of the ratio {:.4} (holding the last value: {:.4})\nsaved to {}",
            r.train_windows,
            r.validation_windows,
            series.len(),
            r.epochs,
            r.best_epoch,
            r.validation_mae,
            r.validation_mae_last,
            args.out.display()
        ));
    }
    Ok(ExitCode::SUCCESS)
}
