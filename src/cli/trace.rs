//! `forestall trace synth`: synthetic traces of any size from the injection
//! patterns, so that anyone can reproduce the what-if replay's scale figures.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use clap::{Args, Subcommand};
use serde::Serialize;
use sha2::Digest;

use super::output::print_stdout;
use super::run::GIT_REVISION;
use super::GlobalArgs;
use crate::fsutil::is_non_empty_dir;
use crate::inject::StragglerSchedule;
use crate::report::json;
use crate::spec::pattern_from_toml;
use crate::trace::synth::{write_synth, Synth};
use crate::trace::TraceStamp;

/// `forestall trace …`.
#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Write a synthetic trace (workers and iterations tables) of an injection
    /// pattern.
    Synth(SynthArgs),
}

/// Arguments of `forestall trace synth`.
#[derive(Debug, Args)]
pub struct SynthArgs {
    /// Workers.
    #[arg(long)]
    pub workers: u32,
    /// Iterations.
    #[arg(long)]
    pub iterations: u64,
    /// Injection pattern: none, slow-worker, disrupted-machine, power-law,
    /// persistent.
    #[arg(long, default_value = "slow-worker")]
    pub pattern: String,
    /// A `[straggler]` key of the job file, as KEY=VALUE in TOML (repeatable):
    /// `--knob probability=0.1 --knob delay_percent=400`; unset keys take the
    /// job file's defaults.
    #[arg(long = "knob", value_name = "KEY=VALUE")]
    pub knobs: Vec<String>,
    /// Units per worker per iteration.
    #[arg(long, default_value_t = 4)]
    pub units: u32,
    /// Rows per unit.
    #[arg(long, default_value_t = 100)]
    pub rows: u32,
    /// Nominal time per row, µs.
    #[arg(long, default_value_t = 10.0)]
    pub us_per_row: f64,
    /// Each worker-iteration is scaled by a uniform draw in 1 ± jitter.
    #[arg(long, default_value_t = 0.0)]
    pub jitter: f64,
    /// Seed of the pattern's draws.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Directory to write the trace into (must be new or empty).
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(Serialize)]
struct Written {
    trace: String,
    workers: u32,
    iterations: u64,
    pattern: &'static str,
    mean_iteration_us: f64,
}

/// Runs `forestall trace …`.
pub fn run(command: TraceCommand, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let TraceCommand::Synth(args) = command;
    if args.workers == 0 || args.iterations == 0 || args.units == 0 || args.rows == 0 {
        bail!("--workers, --iterations, --units and --rows must be at least 1");
    }
    if u64::from(args.workers) * args.iterations > 100_000_000 {
        bail!(
            "{} workers × {} iterations is more than 100 million worker rows; split the trace",
            args.workers,
            args.iterations
        );
    }
    if !(args.us_per_row.is_finite() && args.us_per_row > 0.0 && args.us_per_row <= 1e6) {
        bail!("--us-per-row {} must be in (0, 1e6]", args.us_per_row);
    }
    if !(0.0..1.0).contains(&args.jitter) {
        bail!("--jitter {} must be in [0, 1)", args.jitter);
    }
    if is_non_empty_dir(&args.out) {
        bail!(
            "{} already holds files; choose a new --out",
            args.out.display()
        );
    }
    let mut text = format!("pattern = {:?}\n", args.pattern);
    for knob in &args.knobs {
        let Some((key, value)) = knob.split_once('=') else {
            bail!("--knob {knob:?} must be KEY=VALUE");
        };
        text.push_str(&format!("{} = {}\n", key.trim(), value.trim()));
    }
    let pattern = pattern_from_toml(&text, args.workers)?;
    let name = pattern.name();
    let synth = Synth {
        workers: args.workers,
        iterations: args.iterations,
        units: args.units,
        rows: args.rows,
        us_per_row: args.us_per_row,
        jitter: args.jitter,
        schedule: StragglerSchedule::new(args.seed, pattern, args.workers),
    };
    let stamp = TraceStamp {
        job_id: format!("synth:{name}-{}x{}", args.workers, args.iterations),
        git_revision: GIT_REVISION.to_owned(),
        plan_hash: crate::fsutil::hex(&sha2::Sha256::digest(text.as_bytes())),
        seed: args.seed,
    };
    let mean = write_synth(&synth, &args.out, stamp)?;
    let written = Written {
        trace: args.out.display().to_string(),
        workers: args.workers,
        iterations: args.iterations,
        pattern: name,
        mean_iteration_us: mean,
    };
    if global.json {
        print_stdout(&json::line("synth", &written));
    } else if global.quiet == 0 {
        print_stdout(&format!(
            "{}: {} workers × {} iterations of {name}, mean iteration {:.3} ms under bsp",
            written.trace,
            args.workers,
            args.iterations,
            mean / 1e3
        ));
    }
    Ok(ExitCode::SUCCESS)
}
