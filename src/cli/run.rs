//! `forestall run JOB.toml`: validate, load, train, write, summarise.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context};
use serde::Serialize;

use super::output::{print_stdout, progress_bar};
pub use super::run_args::RunArgs;
use super::GlobalArgs;
use crate::checkpoint::{store, Checkpoint};
use crate::fsutil::write_atomic;
use crate::report::{json, RunSummary};
use crate::run::cluster::{parse_hostfile, read_hostfile, ClusterError, ClusterSpec};
use crate::run::prepare::{prepare, PreparedRun};
use crate::run::stop::{Stop, STOPPED};
use crate::run::{run_job_in_cluster, Progress, RunOptions, RunOutput};
use crate::spec::{load_workload, JobPlan};
use crate::trace::TraceStamp;
use crate::workload::ParamBlock;

/// The git revision this binary was built from.
pub const GIT_REVISION: &str = env!("FORESTALL_GIT_REVISION");

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

/// Where a process of several stands: every process's address, its own
/// index, where they came from (for messages) and its worker threads.
struct Hosts {
    addresses: Vec<String>,
    process: u32,
    source: PathBuf,
    threads: Option<u32>,
}

/// From `--hostfile` and `--process`, else from the environment a scheduler
/// set ([`crate::run::scheduler`]); `None` for a job of one process.
fn hosts_of(args: &RunArgs) -> anyhow::Result<Option<Hosts>> {
    if let (Some(hostfile), Some(process)) = (&args.hostfile, args.process) {
        return Ok(Some(Hosts {
            addresses: read_hostfile(hostfile, args.allow_remote)?,
            process,
            source: hostfile.clone(),
            threads: args.threads,
        }));
    }
    let var = |name: &str| std::env::var(name).ok();
    let Some(placed) = crate::run::scheduler::placed_from(&var, args.base_port)? else {
        return Ok(None);
    };
    // Messages name the variable the addresses came from, one a line.
    let source = PathBuf::from(format!("${}", placed.source));
    Ok(Some(Hosts {
        addresses: parse_hostfile(&source, &placed.addresses.join("\n"), args.allow_remote)?,
        process: placed.process,
        source,
        threads: args.threads.or(placed.threads),
    }))
}

/// Runs `forestall run`.
pub fn run(mut args: RunArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    args.apply_cluster_section()?;
    // SIGTERM (a scheduler's preemption) or Ctrl-C stops at an iteration
    // boundary with a checkpoint once training runs; before that it ends the
    // process.
    crate::run::stop::install_handler();
    crate::run::stop::set_grace_floor(args.stop_grace);
    let afresh_in_place = resume_if_any(&mut args);
    args.force |= afresh_in_place;
    if let Some(processes) = args.processes {
        if args.gather {
            bail!("--gather: the launcher's processes share one output directory already");
        }
        return super::launch::launch(&args, global, processes);
    }
    let cluster = match hosts_of(&args)? {
        Some(Hosts {
            addresses,
            process,
            source: hostfile,
            threads,
        }) => {
            let processes = addresses.len() as u32;
            if process >= processes {
                bail!(ClusterError::Process {
                    path: hostfile,
                    process,
                    processes,
                });
            }
            let threads = threads.unwrap_or(1);
            if threads == 0 {
                bail!("--threads must be at least 1");
            }
            if args
                .overrides
                .workers
                .is_some_and(|w| w != processes * threads)
            {
                bail!(
                    "--workers {} disagrees with {processes} processes × {threads} threads",
                    args.overrides.workers.unwrap_or(0)
                );
            }
            args.overrides.workers = Some(processes * threads);
            let key = crate::run::token::job_key(
                args.token_file.as_deref(),
                &|name| std::env::var(name).ok(),
                &addresses,
            )?;
            Some(ClusterSpec {
                process,
                threads,
                addresses,
                epoch_us: args.epoch_us,
                connect_timeout: std::time::Duration::from_secs(args.connect_timeout.max(1)),
                key,
            })
        }
        None => None,
    };
    if args.gather && cluster.is_none() {
        bail!(
            "--gather: this job runs as one process; it gathers the trace parts of processes \
             on several hosts (--hostfile, or a scheduler's environment)"
        );
    }
    let coordinator = cluster.as_ref().is_none_or(|c| c.process == 0);
    // Processes started one a host (by hand or by a scheduler) share one
    // output directory, which none of them clears: a peer may already be
    // writing its trace parts into it.
    let shared_out = cluster.is_some() && !args.joined;
    let force = args.force || args.joined || shared_out;
    let PreparedRun { plan, out_dir } =
        prepare(&args.job, &args.overrides, force, args.resume.as_deref())?;
    tracing::debug!(plan = %plan.to_json(), "resolved plan");
    let workload = load_workload(&plan)
        .with_context(|| format!("cannot load the dataset of {}", args.job.display()))?;
    let dataset = workload.data();
    crate::spec::check_against_data(&plan, dataset)?;
    if let Some(m) = crate::run::pace::check_pace(&plan, workload.as_ref())? {
        let note = crate::run::pace::shortfall(plan.workers, plan.pace_ns_per_row, &m);
        if let (Some(note), 0, false) = (note, global.quiet, global.json) {
            eprintln!("note: {note}");
        }
    }

    if let Some(n) = args.stop_after {
        if n == 0 || n > plan.iterations {
            bail!(
                "--stop-after {n}: must be between 1 and the job's {} iterations",
                plan.iterations
            );
        }
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
    if let (Some(n), Some(c)) = (args.stop_after, &resume) {
        if n <= c.iteration {
            bail!(
                "--stop-after {n}: the run resumes at iteration {}; stop after a later one",
                c.iteration
            );
        }
    }
    if let (Some(c), true) = (&resume, coordinator && global.quiet == 0 && !global.json) {
        eprintln!(
            "resuming from the checkpoint at iteration {} of {} ({})",
            c.iteration,
            plan.iterations,
            c.dir.display()
        );
    }

    if shared_out && coordinator && afresh_in_place {
        // this job's earlier start, stopped before its first checkpoint:
        // its records go (no peer writes before every process connected)
        for dir in ["trace", store::CHECKPOINTS_DIR] {
            let stale = out_dir.join(dir);
            if stale.exists() {
                std::fs::remove_dir_all(&stale)
                    .with_context(|| format!("cannot clear {}", stale.display()))?;
            }
        }
        let _ = std::fs::remove_file(out_dir.join("plan.json"));
    }
    if shared_out && coordinator && resume.is_none() && out_dir.join("plan.json").exists() {
        bail!(
            "output directory {} holds another run (its plan.json); a job of several \
             processes does not clear its directory, since its peers may be writing into it: \
             choose a new --out",
            out_dir.display()
        );
    }
    // Every input is checked: from here on we write.
    if out_dir.exists() && !args.joined && !shared_out && resume.is_none() {
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
        let stop = Arc::new(Stop::default());
        let options = RunOptions {
            cluster: cluster.as_ref(),
            checkpoint_dir: Some(out_dir.clone()),
            resume,
            stop_after: args.stop_after,
            stop: Some(Arc::clone(&stop)),
            ..RunOptions::default()
        };
        run_job_in_cluster(&plan, workload, &out_dir.join("trace"), stamp, options)
            .with_context(|| format!("run of {} failed", args.job.display()))?;
        gather(&args, cluster.as_ref(), &plan, &out_dir, global)?;
        return Ok(stopped(&stop, &plan, &out_dir, global));
    }
    write_atomic(&out_dir.join("plan.json"), plan.to_json().as_bytes())
        .with_context(|| format!("cannot write {}", out_dir.join("plan.json").display()))?;
    crate::runs::RunOrigin::here(&plan, GIT_REVISION)
        .write(&out_dir)
        .with_context(|| {
            format!(
                "cannot write {}",
                out_dir.join(crate::runs::ORIGIN_FILE).display()
            )
        })?;

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
    // The bar moves as iterations are trained; its message follows the
    // rows, which may wait for their evaluations (a resumed run's bar starts
    // where its checkpoint is).
    let observer = Box::new(move |progress: Progress<'_>| match progress {
        Progress::Trained { iteration } => {
            observer_bar.set_position(iteration + 1);
        }
        Progress::Row(row) => {
            if json_lines {
                print_stdout(&json::line("iteration", row));
            }
            let mut msg = format!(
                "iteration {} train loss {:.4}",
                row.iteration, row.train_loss
            );
            if let Some(acc) = row.test_accuracy {
                msg.push_str(&format!("  test acc {acc:.4}"));
            }
            observer_bar.set_message(msg);
        }
    });
    let stamp = TraceStamp {
        job_id: format!("{}-{}", plan.name, &plan_hash[..12]),
        git_revision: GIT_REVISION.to_owned(),
        plan_hash: plan_hash.clone(),
        seed: plan.seed,
    };
    let stop = Arc::new(Stop::default());
    let options = RunOptions {
        observer: Some(observer),
        cluster: cluster.as_ref(),
        checkpoint_dir: Some(out_dir.clone()),
        resume,
        stop_after: args.stop_after,
        stop: Some(Arc::clone(&stop)),
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
    let mut summary = RunSummary::new(
        &plan,
        &output,
        &out_dir,
        workload.data().test_majority_rate(),
    );
    summary.details = workload.describe(&output.params);
    let summary_json = serde_json::to_vec_pretty(&summary).context("cannot encode the summary")?;
    write_atomic(&out_dir.join("summary.json"), &summary_json)
        .with_context(|| format!("cannot write {}", out_dir.join("summary.json").display()))?;
    if global.json {
        print_stdout(&json::line("summary", &summary));
    } else {
        print_stdout(summary.to_text().trim_end());
    }
    gather(&args, cluster.as_ref(), &plan, &out_dir, global)?;
    Ok(stopped(&stop, &plan, &out_dir, global))
}

/// `--gather`: every process's trace parts into process 0's directory
/// ([`crate::run::gather`]).
fn gather(
    args: &RunArgs,
    cluster: Option<&ClusterSpec>,
    plan: &JobPlan,
    out_dir: &Path,
    global: &GlobalArgs,
) -> anyhow::Result<()> {
    let Some(c) = cluster.filter(|_| args.gather) else {
        return Ok(());
    };
    let trace = out_dir.join("trace");
    let g = crate::run::gather::gather(c, &plan.hash(), &trace).map_err(|e| {
        anyhow::anyhow!(
            "{e}; the training finished, and each process's trace parts are still in its own {}",
            trace.display()
        )
    })?;
    if c.process == 0 && global.quiet == 0 && !global.json {
        eprintln!(
            "gathered {} trace parts ({:.1} MB, {} already here) from {} processes in {:.2} s",
            g.files,
            g.bytes as f64 / 1e6,
            g.same,
            c.processes() - 1,
            g.seconds
        );
    }
    tracing::info!(
        "process {}: trace gathered: {} parts, {} bytes in {:.4} s (gather_s={:.4})",
        c.process,
        g.files,
        g.bytes,
        g.seconds,
        g.seconds
    );
    Ok(())
}

/// `--resume-if-any`: a `--out` with a complete checkpoint becomes
/// `--resume`; true when the run starts afresh in that directory instead.
fn resume_if_any(args: &mut RunArgs) -> bool {
    let Some(out) = args.overrides.out.clone().filter(|_| args.resume_if_any) else {
        return false;
    };
    let out = PathBuf::from(out);
    if !store::has_complete(&out) {
        return true;
    }
    args.overrides.out = None;
    args.resume = Some(out);
    false
}

/// How a run ends: success, or, when its processes agreed to stop early
/// (SIGTERM), [`STOPPED`] after one line saying where and how to continue.
fn stopped(stop: &Stop, plan: &JobPlan, out_dir: &Path, global: &GlobalArgs) -> ExitCode {
    let Some(end) = stop.at() else {
        return ExitCode::SUCCESS;
    };
    let why = if crate::run::stop::signalled() {
        format!("on {}", crate::run::stop::signal_name())
    } else {
        "as another process was asked to (SIGTERM or SIGINT)".to_owned()
    };
    if global.quiet == 0 {
        eprintln!(
            "stopped {why} at iteration {end} of {}, checkpointed in {}; continue with \
             --resume {} (a requeued job whose command has --resume-if-any does)",
            plan.iterations,
            out_dir.display(),
            out_dir.display()
        );
    }
    ExitCode::from(STOPPED)
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
