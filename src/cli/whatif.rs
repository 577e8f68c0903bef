//! `forestall whatif TRACE… --policy P…`: a trace's timings replayed under
//! other policies, through the policies' own code.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Args;
use serde::Serialize;

use super::output::{print_stdout, progress_bar};
use super::GlobalArgs;
use crate::analyze::find_traces;
use crate::report::json;
use crate::run::context::load_predictor;
use crate::spec::{policy_named, policy_with_model};
use crate::whatif::{replay_policy_watched, Outcome, Timings};

/// The policies replayed when none is named.
pub const DEFAULT_POLICIES: [&str; 3] = ["bsp", "rapid-reassign", "forestall"];

/// The longest message latency a replay takes, µs (an hour: a control
/// message slower than that is no control at all).
const MAX_LATENCY_US: u64 = 3_600_000_000;

/// Arguments of `forestall whatif`.
#[derive(Debug, Args)]
pub struct WhatIfArgs {
    /// Trace directories (every trace under each is replayed).
    #[arg(required = true)]
    pub traces: Vec<PathBuf>,
    /// Policies to replay (repeat or separate by commas): bsp, rapid-reassign,
    /// speculate, proactive, proactive-clone, forestall. Default: bsp,
    /// rapid-reassign, forestall.
    #[arg(long = "policy", value_delimiter = ',')]
    pub policies: Vec<String>,
    /// Latency of a control message between workers, µs (at most an hour).
    #[arg(long, default_value_t = 100)]
    pub latency_us: u64,
    /// Cut each worker's iteration into this many equal units before
    /// replaying (an imported trace has one unit per worker and iteration,
    /// which no policy can split).
    #[arg(long, value_name = "UNITS")]
    pub split: Option<u32>,
    /// Replay every unit as this many micro-batches, between which
    /// `forestall` may hand the rest of a unit slowed in flight to a peer
    /// (a run's trace records its units' micro-batches; a workers-only
    /// trace, an import or a trace before schema version 6 does not).
    #[arg(long, value_name = "N")]
    pub micro_batches: Option<u32>,
    /// Predictor of the predictive policies: last, ewma, sustained, median,
    /// lstm (with --model), auto (their default: sustained; `auto` has the
    /// LSTM among its candidates when --model is given).
    #[arg(long)]
    pub predictor: Option<String>,
    /// Model directory of `--predictor lstm` or `auto`, from `forestall
    /// predictor train`.
    #[arg(long, value_name = "DIR")]
    pub model: Option<PathBuf>,
    /// A pipeline run (`[parallel]`) replayed with its layers cut
    /// elsewhere instead of under policies: the layers its stages after the
    /// first begin at (`conv3`, `conv2,lstm`), or `best` (each iteration's
    /// best cuts and data shares for its measured stage speeds).
    #[arg(long, value_name = "LAYER,…|best", conflicts_with_all = ["policies", "split", "micro_batches", "predictor", "model"])]
    pub cut: Option<String>,
}

#[derive(Serialize)]
struct Line<'a> {
    trace: String,
    workers: usize,
    /// What the trace's slowdowns follow: `iteration` (each iteration
    /// replays at its recorded speeds) or `clock` (they change within
    /// iterations, as `disrupted-machine` windows do, and meet the replay
    /// at its own times).
    slowdowns: &'static str,
    /// Worker-iterations absent from the trace, replayed without them.
    absent_worker_iterations: usize,
    #[serde(flatten)]
    outcome: &'a Outcome,
    /// Wall time of the replay, s.
    replay_s: f64,
}

/// Runs `forestall whatif`.
pub fn run(args: WhatIfArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let names: Vec<String> = if args.policies.is_empty() {
        DEFAULT_POLICIES.map(String::from).to_vec()
    } else {
        args.policies.clone()
    };
    match (args.predictor.as_deref(), &args.model) {
        (Some("lstm"), None) => {
            bail!("--predictor lstm needs --model DIR (from `forestall predictor train`)")
        }
        (Some("lstm" | "auto"), Some(model)) => {
            crate::predict::LstmPredictor::load(model)
                .with_context(|| format!("--model {}", model.display()))?;
        }
        (_, None) => {}
        (_, Some(_)) => bail!("--model applies to --predictor lstm or auto"),
    }
    let mut dirs = Vec::new();
    for path in &args.traces {
        if !path.is_dir() {
            bail!("{} is not a directory", path.display());
        }
        let found = find_traces(path);
        if found.is_empty() {
            bail!("{} holds no trace", path.display());
        }
        dirs.extend(found);
    }
    if args.latency_us > MAX_LATENCY_US {
        bail!(
            "--latency-us {} must be at most {MAX_LATENCY_US} (an hour)",
            args.latency_us
        );
    }
    if let Some(cut) = &args.cut {
        return super::whatif_cut::run(cut, &dirs, global);
    }
    for dir in &dirs {
        let mut timings = Timings::load(dir)?;
        if let Some(units) = args.split {
            if !(1..=10_000).contains(&units) {
                bail!("--split {units} must be in 1..=10000");
            }
            timings = timings.split(units);
        }
        if let Some(n) = args.micro_batches {
            if !(1..=10_000).contains(&n) {
                bail!("--micro-batches {n} must be in 1..=10000");
            }
            timings = timings.micro_batched(n);
        }
        let workers = timings.workers();
        let slowdowns = if timings.clock().is_some() {
            "clock"
        } else {
            "iteration"
        };
        // Every policy is checked before any is replayed.
        let mut plans = Vec::new();
        for name in &names {
            let predicts = policy_named(name, None, workers as u32)?.1.is_some();
            let chosen = args.predictor.as_deref().filter(|_| predicts);
            let model = args.model.as_deref().filter(|_| chosen.is_some());
            let (policy, predictor) = policy_with_model(name, chosen, model, workers as u32)?;
            let predictor = predictor
                .as_ref()
                .map(load_predictor)
                .transpose()
                .with_context(|| format!("policy {name}"))?;
            plans.push((policy, predictor));
        }
        // One tick per iteration replayed: a policy's replay of thousands of
        // workers takes seconds.
        let iterations = timings.len() as u64;
        let bar = progress_bar(global, plans.len() as u64 * iterations, "iterations");
        let tick = || bar.inc(1);
        let mut lines = Vec::new();
        for (policy, predictor) in &plans {
            bar.set_message(policy.as_str().to_owned());
            let started = Instant::now();
            let outcome = replay_policy_watched(
                &timings,
                policy,
                predictor.as_ref(),
                args.latency_us,
                None,
                &tick,
            )
            .with_context(|| format!("{}", dir.display()))?;
            lines.push((outcome, started.elapsed().as_secs_f64()));
        }
        bar.finish_and_clear();
        let absent = timings.absent();
        if global.json {
            for (outcome, replay_s) in &lines {
                print_stdout(&json::line(
                    "whatif",
                    &Line {
                        trace: dir.display().to_string(),
                        workers,
                        slowdowns,
                        absent_worker_iterations: absent,
                        outcome,
                        replay_s: *replay_s,
                    },
                ));
            }
        } else if global.quiet == 0 {
            print_stdout(&format!(
                "{}: {} workers × {} iterations, messages take {} µs{}",
                dir.display(),
                workers,
                timings.len(),
                args.latency_us,
                if timings.clock().is_some() {
                    "; slowdowns follow the clock (they change within iterations): each policy meets them at its own times"
                } else {
                    ""
                }
            ));
            if absent > 0 {
                print_stdout(&format!(
                    "  note: {absent} worker-iterations absent from the trace (workers missing from iterations): replayed without them, taking no units"
                ));
            }
            print_stdout(&format!(
                "  {:<16} {:>14} {:>9} {:>11} {:>12} {:>12} {:>12} {:>9}",
                "policy",
                "ms/iteration",
                "vs bound",
                "vs units",
                "moved/it",
                "planned/it",
                "messages/it",
                "replay s"
            ));
            for (o, replay_s) in &lines {
                print_stdout(&format!(
                    "  {:<16} {:>14.3} {:>8.3}× {:>10.3}× {:>12.1} {:>12.1} {:>12.1} {:>9.2}",
                    o.policy,
                    o.mean_iteration_us / 1e3,
                    o.vs_bound,
                    o.vs_unit_bound,
                    o.moved_units_per_iteration,
                    o.planned_units_per_iteration,
                    o.messages_per_iteration,
                    replay_s
                ));
            }
            if let Some((first, _)) = lines.first() {
                print_stdout(&format!(
                    "  load-balancing bound: {:.3} ms/iteration (the rows over the workers' combined speed); with whole units: {:.3} (`vs units`: the units, each of the mean unit's rows, placed where they finish earliest)",
                    first.bound_iteration_us / 1e3,
                    first.unit_bound_iteration_us / 1e3
                ));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
