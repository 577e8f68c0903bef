//! `forestall run JOB.toml`: validate, load, train, write, summarise.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::SystemTime;

use anyhow::{bail, Context};
use clap::Args;
use serde::Serialize;

use super::output::{print_stdout, progress_bar};
use super::GlobalArgs;
use crate::checkpoint::{store, Checkpoint};
use crate::fsutil::{fresh_dir, is_non_empty_dir, utc_stamp, write_atomic};
use crate::report::{json, RunSummary};
use crate::run::cluster::{read_hostfile, ClusterError, ClusterSpec};
use crate::run::{run_job_in_cluster, RunOptions, RunOutput};
use crate::spec::{read_job_file, validate::validate_with, JobPlan, Overrides};
use crate::trace::{IterationRecord, TraceStamp};
use crate::workload::{load_workload, ParamBlock};

/// The git revision this binary was built from.
pub const GIT_REVISION: &str = env!("FORESTALL_GIT_REVISION");

/// Arguments of `forestall run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The job file (TOML), e.g. pipelines/quickstart.toml.
    pub job: PathBuf,
    /// Number of timely workers (threads).
    #[arg(long)]
    pub workers: Option<u32>,
    /// Training iterations.
    #[arg(long)]
    pub iterations: Option<u64>,
    /// Seed of partitioning, sampling and the straggler schedule.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Straggler pattern: none, slow-worker, disrupted-machine, power-law, persistent.
    #[arg(long)]
    pub pattern: Option<String>,
    /// Injected delay in percent (slow-worker, disrupted-machine).
    #[arg(long)]
    pub delay: Option<f64>,
    /// Probability of a slowdown (slow-worker, disrupted-machine).
    #[arg(long)]
    pub probability: Option<f64>,
    /// Exponent α of the power-law pattern.
    #[arg(long)]
    pub alpha: Option<f64>,
    /// Mitigation policy.
    #[arg(long)]
    pub policy: Option<String>,
    /// Paced mode: nominal ns of work per row on a dedicated core (0 = native speed).
    #[arg(long, value_name = "NS_PER_ROW")]
    pub pace: Option<u64>,
    /// Checkpoint every N iterations and at the end (0: never; default: the
    /// job's [checkpoint] every, or 50).
    #[arg(long, value_name = "N")]
    pub checkpoint_every: Option<u64>,
    /// Output directory (default: runs/<job name>/<UTC time>).
    #[arg(long)]
    pub out: Option<String>,
    /// Replace the output directory if it already holds files.
    #[arg(long)]
    pub force: bool,
    /// Run as N local processes connected by timely's cluster mode over TCP
    /// on 127.0.0.1 (a launcher starts and watches them), each with --threads
    /// workers.
    #[arg(long, value_name = "N", conflicts_with_all = ["hostfile", "process"])]
    pub processes: Option<u32>,
    /// Worker threads per process (with --processes or --hostfile).
    #[arg(long, value_name = "T")]
    pub threads: Option<u32>,
    /// Join a multi-process job as process I of the hostfile's (one command
    /// per process, each with the same job and flags).
    #[arg(long, value_name = "FILE", requires = "process")]
    pub hostfile: Option<PathBuf>,
    /// This process's index in the hostfile (0 hosts worker 0 and writes the
    /// summary).
    #[arg(long, value_name = "I", requires = "hostfile")]
    pub process: Option<u32>,
    /// Accept hostfile addresses that are not loopback (timely's transport has
    /// no authentication).
    #[arg(long)]
    pub allow_remote: bool,
    /// Seconds to wait for every peer process to connect (with --hostfile).
    #[arg(long, value_name = "S", default_value_t = crate::run::cluster::DEFAULT_CONNECT_TIMEOUT_S)]
    pub connect_timeout: u64,
    /// Set by the launcher for its processes: the output directory is
    /// prepared; add to it.
    #[arg(long, hide = true)]
    pub joined: bool,
    /// The job clock's origin (µs since the Unix epoch) shared by every
    /// process; the launcher sets it.
    #[arg(long, hide = true, value_name = "US")]
    pub epoch_us: Option<u64>,
    /// Continue the job in DIR (a run's output directory) from its newest
    /// complete checkpoint; the job file and flags must be the same.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["out", "force"])]
    pub resume: Option<PathBuf>,
    /// With --processes: restart every process from the newest checkpoint
    /// when one exits abnormally, up to this many times.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub max_restarts: u32,
    /// Set by the launcher with --resume: the checkpoint every process
    /// continues from.
    #[arg(long, hide = true, value_name = "ITERATION", requires = "resume")]
    pub resume_at: Option<u64>,
}

impl RunArgs {
    /// The flags that change the job, as command-line words (for the
    /// launcher's processes).
    pub fn override_words(&self) -> Vec<String> {
        self.overrides().words()
    }

    /// The overrides as given (the launcher sets the worker count).
    pub fn overrides_for_launch(&self) -> Overrides {
        self.overrides()
    }

    fn overrides(&self) -> Overrides {
        Overrides {
            workers: self.workers,
            iterations: self.iterations,
            seed: self.seed,
            pattern: self.pattern.clone(),
            probability: self.probability,
            delay_percent: self.delay,
            alpha: self.alpha,
            policy: self.policy.clone(),
            pace_ns_per_row: self.pace,
            out: self.out.clone(),
            checkpoint_every: self.checkpoint_every,
        }
    }
}

/// The plan and where its output goes, with every input checked.
pub struct PreparedRun {
    /// The validated plan.
    pub plan: JobPlan,
    /// Output directory (not created yet).
    pub out_dir: PathBuf,
}

/// Reads, overrides and validates the job, and picks the output directory.
/// Nothing is written.
pub fn prepare(
    job: &Path,
    overrides: &Overrides,
    force: bool,
    resume: Option<&Path>,
) -> anyhow::Result<PreparedRun> {
    let (mut spec, text) = read_job_file(job)?;
    overrides.apply(&mut spec);
    let plan = validate_with(&spec, &text, Some(job), overrides)?;
    if let Some(dir) = resume {
        if !dir.join("plan.json").is_file() {
            bail!(
                "--resume {}: not the output directory of a run (it has no plan.json)",
                dir.display()
            );
        }
        return Ok(PreparedRun {
            plan,
            out_dir: dir.to_owned(),
        });
    }
    let out_dir = match &plan.out {
        Some(dir) => {
            if is_non_empty_dir(dir) && !force {
                bail!(
                    "output directory {} already holds files; pass --force to replace it or \
                     choose another --out",
                    dir.display()
                );
            }
            dir.clone()
        }
        None => fresh_dir(
            &Path::new("runs")
                .join(&plan.name)
                .join(utc_stamp(SystemTime::now())),
        ),
    };
    Ok(PreparedRun { plan, out_dir })
}

#[derive(Serialize)]
struct Begin<'a> {
    job: &'a str,
    plan_hash: String,
    workers: u32,
    iterations: u64,
    pattern: &'a str,
    policy: &'a str,
    out_dir: String,
    git_revision: &'a str,
}

#[derive(Serialize)]
struct Model<'a> {
    kind: &'a str,
    blocks: Vec<ParamBlock>,
    params: &'a [f64],
    params_sha256: &'a str,
    plan_hash: String,
    git_revision: &'a str,
}

/// Runs `forestall run`.
pub fn run(mut args: RunArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    apply_cluster_section(&mut args)?;
    if let Some(processes) = args.processes {
        return super::launch::launch(&args, global, processes);
    }
    if let Some(process) = args.process {
        // A peer that dies takes timely's connection threads down with a
        // panic: one line says so, not a backtrace.
        std::panic::set_hook(Box::new(move |info| {
            let message = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| info.payload().downcast_ref::<&str>().copied())
                .unwrap_or("panic");
            eprintln!("error: process {process}: {message}");
        }));
    }
    let cluster = match (&args.hostfile, args.process) {
        (Some(hostfile), Some(process)) => {
            let addresses = read_hostfile(hostfile, args.allow_remote)?;
            let processes = addresses.len() as u32;
            if process >= processes {
                bail!(ClusterError::Process {
                    path: hostfile.clone(),
                    process,
                    processes,
                });
            }
            let threads = args.threads.unwrap_or(1);
            if threads == 0 {
                bail!("--threads must be at least 1");
            }
            if args.workers.is_some_and(|w| w != processes * threads) {
                bail!(
                    "--workers {} disagrees with {processes} processes × {threads} threads",
                    args.workers.unwrap_or(0)
                );
            }
            args.workers = Some(processes * threads);
            Some(ClusterSpec {
                process,
                threads,
                addresses,
                epoch_us: args.epoch_us,
                connect_timeout: std::time::Duration::from_secs(args.connect_timeout.max(1)),
            })
        }
        _ => None,
    };
    let coordinator = cluster.as_ref().is_none_or(|c| c.process == 0);
    let force = args.force || args.joined;
    let PreparedRun { plan, out_dir } =
        prepare(&args.job, &args.overrides(), force, args.resume.as_deref())?;
    tracing::debug!(plan = %plan.to_json(), "resolved plan");
    let workload = load_workload(&plan)
        .with_context(|| format!("cannot load the dataset of {}", args.job.display()))?;
    let dataset = workload.data();
    if dataset.train.len() < plan.partitions as usize {
        bail!(
            "{}: [data] partitions = {} but the dataset has only {} training rows",
            args.job.display(),
            plan.partitions,
            dataset.train.len()
        );
    }

    let resume = match &args.resume {
        Some(dir) => Some(find_checkpoint(
            dir,
            &plan,
            workload.param_count(),
            args.resume_at,
        )?),
        None => None,
    };
    if let (Some(c), true) = (&resume, coordinator && global.quiet == 0 && !global.json) {
        eprintln!(
            "resuming from the checkpoint at iteration {} of {} ({})",
            c.iteration,
            plan.iterations,
            c.dir.display()
        );
    }

    // Every input is checked: from here on we write.
    if out_dir.exists() && !args.joined && resume.is_none() {
        std::fs::remove_dir_all(&out_dir)
            .with_context(|| format!("cannot clear output directory {}", out_dir.display()))?;
    }
    std::fs::create_dir_all(&out_dir)
        .with_context(|| format!("cannot create output directory {}", out_dir.display()))?;
    if !coordinator {
        // A worker process: its units go into the shared trace directory;
        // process 0 writes the plan, the model and the summary.
        let stamp = TraceStamp {
            job_id: format!("{}-{}", plan.name, &plan.hash()[..12]),
            git_revision: GIT_REVISION.to_owned(),
            plan_hash: plan.hash(),
            seed: plan.seed,
        };
        let options = RunOptions {
            cluster: cluster.as_ref(),
            checkpoint_dir: Some(out_dir.clone()),
            resume,
            ..RunOptions::default()
        };
        run_job_in_cluster(&plan, workload, &out_dir.join("trace"), stamp, options)
            .with_context(|| format!("run of {} failed", args.job.display()))?;
        return Ok(ExitCode::SUCCESS);
    }
    write_atomic(&out_dir.join("plan.json"), plan.to_json().as_bytes())
        .with_context(|| format!("cannot write {}", out_dir.join("plan.json").display()))?;
    crate::runs::RunOrigin::here(&plan, GIT_REVISION)
        .write(&out_dir)
        .with_context(|| format!("cannot write {}", out_dir.join(crate::runs::ORIGIN_FILE).display()))?;

    let plan_hash = plan.hash();
    if global.json {
        print_stdout(&json::line(
            "begin",
            &Begin {
                job: &plan.name,
                plan_hash: plan_hash.clone(),
                workers: plan.workers,
                iterations: plan.iterations,
                pattern: plan.pattern.name(),
                policy: plan.policy.as_str(),
                out_dir: out_dir.display().to_string(),
                git_revision: GIT_REVISION,
            },
        ));
    } else if global.quiet == 0 {
        eprintln!(
            "training {} ({}, {} parameters) on {} ({} train / {} test rows, {} features) with {} workers, pattern {}, policy {}",
            plan.name,
            workload.kind(),
            workload.param_count(),
            plan.data.path.display(),
            dataset.train.len(),
            dataset.test.len(),
            dataset.dims(),
            plan.workers,
            plan.pattern.name(),
            plan.policy.as_str()
        );
    }

    let bar = progress_bar(global, plan.iterations, "iterations");
    let observer_bar = bar.clone();
    let json_lines = global.json;
    let observer = Box::new(move |row: &IterationRecord| {
        if json_lines {
            print_stdout(&json::line("iteration", row));
        }
        observer_bar.inc(1);
        let mut msg = format!("train loss {:.4}", row.train_loss);
        if let Some(acc) = row.test_accuracy {
            msg.push_str(&format!("  test acc {acc:.4}"));
        }
        observer_bar.set_message(msg);
    });
    let stamp = TraceStamp {
        job_id: format!("{}-{}", plan.name, &plan_hash[..12]),
        git_revision: GIT_REVISION.to_owned(),
        plan_hash: plan_hash.clone(),
        seed: plan.seed,
    };
    let options = RunOptions {
        observer: Some(observer),
        cluster: cluster.as_ref(),
        checkpoint_dir: Some(out_dir.clone()),
        resume,
        ..RunOptions::default()
    };
    let output: RunOutput = run_job_in_cluster(
        &plan,
        Arc::clone(&workload),
        &out_dir.join("trace"),
        stamp,
        options,
    )
    .with_context(|| format!("run of {} failed", args.job.display()))?
    .context("process 0 ended without the final parameters")?;
    bar.finish_and_clear();

    let model = Model {
        kind: workload.kind(),
        blocks: workload.param_blocks(),
        params: &output.params,
        params_sha256: &output.digest,
        plan_hash,
        git_revision: GIT_REVISION,
    };
    let model_json = serde_json::to_vec_pretty(&model).context("cannot encode the model")?;
    write_atomic(&out_dir.join("model.json"), &model_json)
        .with_context(|| format!("cannot write {}", out_dir.join("model.json").display()))?;
    let summary = RunSummary::new(
        &plan,
        &output,
        &out_dir,
        workload.data().test_majority_rate(),
    );
    let summary_json = serde_json::to_vec_pretty(&summary).context("cannot encode the summary")?;
    write_atomic(&out_dir.join("summary.json"), &summary_json)
        .with_context(|| format!("cannot write {}", out_dir.join("summary.json").display()))?;
    if global.json {
        print_stdout(&json::line("summary", &summary));
    } else {
        print_stdout(summary.to_text().trim_end());
    }
    Ok(ExitCode::SUCCESS)
}

/// The checkpoint a resumed run continues from: the one at `at` (the
/// launcher's choice), or the newest complete one in `dir`, saying why each
/// newer one is passed over.
pub fn find_checkpoint(
    dir: &Path,
    plan: &JobPlan,
    dims: usize,
    at: Option<u64>,
) -> anyhow::Result<Checkpoint> {
    let hash = plan.hash();
    if let Some(at) = at {
        return store::load(
            &store::iteration_dir(dir, at),
            &hash,
            plan.workers,
            Some(dims),
        )
        .map_err(anyhow::Error::from);
    }
    let mut skipped = Vec::new();
    let found = store::newest_valid(dir, &hash, plan.workers, Some(dims), &mut |e| {
        eprintln!("warning: {e}; falling back to the previous checkpoint");
        skipped.push(e.to_string());
    });
    found.with_context(|| {
        format!(
            "--resume {}: no complete checkpoint{} (start the job afresh with --out {} --force)",
            dir.display(),
            if skipped.is_empty() {
                String::new()
            } else {
                format!(" ({})", skipped.join("; "))
            },
            dir.display()
        )
    })
}

/// Takes the job file's `[cluster]` settings that no flag overrides.
fn apply_cluster_section(args: &mut RunArgs) -> anyhow::Result<()> {
    if args.joined || args.process.is_some() {
        return Ok(()); // a launched or joining process: its flags say it all
    }
    let (spec, _) = read_job_file(&args.job)?;
    let c = spec.cluster;
    if args.hostfile.is_none() && args.processes.is_none() {
        args.processes = c.processes;
    }
    if args.processes.is_none() && args.hostfile.is_none() {
        if let Some(hostfile) = c.hostfile {
            let base = args.job.parent().unwrap_or_else(|| Path::new("."));
            args.hostfile = Some(base.join(hostfile));
        }
    }
    if args.hostfile.is_some() && args.process.is_none() {
        bail!(
            "{}: [cluster] hostfile needs --process I (this host's line in the hostfile)",
            args.job.display()
        );
    }
    args.threads = args.threads.or(c.threads);
    if args.max_restarts == 0 && args.processes.is_some() {
        args.max_restarts = c.max_restarts.unwrap_or(0);
    }
    if args.max_restarts > 0 && args.processes.is_none() {
        bail!(
            "--max-restarts needs --processes N (the launcher restarts the processes it starts); \
             for one process, use --processes 1 --threads T"
        );
    }
    Ok(())
}
