//! `forestall tune JOB.toml --over KEY=V1,V2,…`: hyperparameter tuning as a
//! batch of ordinary runs, ranked by time to a target on a validation slice.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::SystemTime;

use anyhow::Context;
use clap::Args;

use super::output::print_stdout;
use super::run::GIT_REVISION;
use super::GlobalArgs;
use crate::bench::machine::{this_machine, utc_time};
use crate::fsutil::utc_date;
use crate::report::json;
use crate::spec::Overrides;
use crate::tune::report::{ranking, ranking_text, write_report};
use crate::tune::runner::{run_tune, Event, TuneManifest};
use crate::tune::{plan_tune, Over, Strategy, Target, TuneSpec};

/// Arguments of `forestall tune`.
#[derive(Debug, Args)]
pub struct TuneArgs {
    /// The job file (TOML) whose settings are tuned.
    pub job: PathBuf,
    /// A job-file key and the values to try, e.g.
    /// `--over model.learning_rate=0.0003,0.001,0.003` (repeatable: every
    /// combination is a configuration).
    #[arg(long = "over", value_name = "SECTION.KEY=V1,V2,…", value_parser = Over::parse, required = true)]
    pub overs: Vec<Over>,
    /// Seconds the tune's runs may take in all (wall time, loading
    /// included); no run starts once they are spent, and the ranking covers
    /// the runs made.
    #[arg(long, value_name = "SECONDS")]
    pub budget: Option<f64>,
    /// halving: every configuration trains a few iterations and the better
    /// half continues from its checkpoint, until one trains to the job's
    /// end; random: a seeded sample of the configurations, each to the end.
    #[arg(long, value_enum, default_value_t = Strategy::Halving)]
    pub strategy: Strategy,
    /// With --strategy halving: the fewest iterations a rung trains (the
    /// first rung's otherwise: the job's iterations halved once per halving).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub min_iterations: u64,
    /// With --strategy random: how many configurations (default: all, in a
    /// random order).
    #[arg(long, value_name = "N")]
    pub samples: Option<usize>,
    /// What the configurations race to on the validation slice:
    /// METRIC=VALUE (accuracy, balanced_accuracy, auc: at least; loss,
    /// rmse: at most) or
    /// METRIC>=VALUE / METRIC<=VALUE. Default accuracy=0.85
    /// (the CNN: balanced_accuracy=0.85).
    #[arg(long, value_name = "METRIC=VALUE", value_parser = Target::parse)]
    pub target: Option<Target>,
    /// The job file's values given on the command line, for every
    /// configuration (`--out` is the tune's directory: default
    /// runs/tune/JOB-DATE; the same command run again into it continues an
    /// interrupted tune).
    #[command(flatten)]
    pub overrides: Overrides,
}

/// Runs `forestall tune`.
pub fn run(args: TuneArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let defaulted = args.target.is_none();
    let target = match args.target {
        Some(t) => t,
        None => Target::parse("accuracy=0.85").expect("a valid target"),
    };
    let spec = TuneSpec {
        job: args.job.clone(),
        overrides: args.overrides.clone(),
        overs: args.overs,
        strategy: args.strategy,
        samples: args.samples,
        target,
        budget_s: args.budget,
        min_iterations: args.min_iterations,
    };
    if args.samples.is_some() && args.strategy != Strategy::Random {
        anyhow::bail!("--samples applies to --strategy random only");
    }
    let mut tune = plan_tune(spec)?;
    let kind = tune.configs[0].plan.model.kind();
    match kind {
        _ if !defaulted => {}
        "logistic" | "softmax" => {}
        // A binary classifier's validation slice may be as skewed as its
        // training data (PneumoniaMNIST's is 90 % one class).
        "cnn" => {
            tune.spec.target = Target::parse("balanced_accuracy=0.85").expect("a valid target")
        }
        _ => anyhow::bail!(
            "{}: a {kind} model has no accuracy to race to; give --target (e.g. rmse=0.95)",
            args.job.display()
        ),
    }
    let out = match &args.overrides.out {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from("runs").join("tune").join(format!(
            "{}-{}",
            tune.configs[0].plan.name,
            utc_date(SystemTime::now())
        )),
    };
    let manifest = TuneManifest {
        job: args.job.display().to_string(),
        tune_hash: tune.hash(),
        git_revision: GIT_REVISION.to_owned(),
        started: utc_time(SystemTime::now()),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        strategy: tune.spec.strategy,
        target: tune.spec.target.to_string(),
        rungs: tune.rungs.clone(),
        configs: tune.configs.iter().map(|c| c.label.clone()).collect(),
        machine: this_machine(),
    };
    let exe = std::env::current_exe().context("cannot find the forestall binary")?;
    let talk = global.quiet == 0 && !global.json;
    if talk {
        eprintln!(
            "tuning {} over {} configurations ({:?}, rungs {:?}), target {} on the validation slice, into {}",
            args.job.display(),
            tune.configs.len(),
            tune.spec.strategy,
            tune.rungs,
            tune.spec.target,
            out.display()
        );
    }
    let target = tune.spec.target.clone();
    let result = run_tune(
        &tune,
        &out,
        &exe,
        manifest.clone(),
        global.verbose > 0,
        |e| {
            if !talk {
                return;
            }
            match e {
                Event::Starting {
                    config,
                    label,
                    stop_after,
                    from,
                } => eprintln!(
                    "config {config:03} {label}: training to iteration {stop_after}{}",
                    from.map(|f| format!(" from its checkpoint at {f}"))
                        .unwrap_or_default()
                ),
                Event::Done(s) | Event::Kept(s) => {
                    let kept = matches!(e, Event::Kept(_));
                    let what = match (&s.outcome.failed, s.outcome.reached(&target)) {
                        (Some(why), _) => format!("failed: {why}"),
                        (None, Some(p)) => format!("reached {target} after {:.2} s", p.seconds),
                        (None, None) => format!(
                            "best {} {}",
                            target.metric,
                            s.outcome
                                .best(&target)
                                .map_or_else(|| "-".into(), |b| format!("{b:.4}"))
                        ),
                    };
                    eprintln!(
                        "config {:03}: {} iterations, {what}{}",
                        s.config,
                        s.outcome.iterations,
                        if kept { " (done earlier)" } else { "" }
                    );
                }
                Event::BudgetSpent { spent_s } => {
                    eprintln!("the budget is spent ({spent_s:.1} s): no further runs")
                }
            }
        },
    )?;
    let ranked = ranking(&tune, &out, &result);
    let files =
        write_report(&tune, &out, &manifest, &result, &ranked).map_err(|e| anyhow::anyhow!(e))?;
    if global.json {
        for r in &ranked {
            print_stdout(&json::line("ranked", r));
        }
    } else {
        print_stdout(ranking_text(&tune, &ranked).trim_end());
    }
    if talk {
        for f in files {
            eprintln!("wrote {}", f.display());
        }
    }
    if ranked.iter().all(|r| r.failed.is_some()) {
        anyhow::bail!(
            "every configuration run failed (see {})",
            out.join("logs").display()
        );
    }
    Ok(ExitCode::SUCCESS)
}
