//! `forestall run JOB --processes N --threads T`: the launcher. It checks the
//! job, prepares the output directory, writes a hostfile of N free loopback
//! ports, starts N `forestall run … --hostfile … --process i` processes (timely
//! cluster mode), relays process 0's output, and stops every process as soon
//! as one fails. With `--max-restarts K` it then starts them again from the
//! newest complete checkpoint, up to K times (torchrun's elastic restart).

use std::path::Path;
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};

use super::output::print_stdout;
use super::run_args::RunArgs;
use super::GlobalArgs;
use crate::checkpoint::store;
use crate::fsutil::write_atomic;
use crate::report::json;
use crate::run::cluster::free_loopback_addresses;
use crate::run::prepare::{prepare, PreparedRun};
use crate::run::stop::STOPPED;
use crate::spec::JobPlan;

/// Exit code of a process whose training diverged: restarting repeats it.
const DIVERGED: i32 = 3;

/// The `restart` line of `--json`.
#[derive(serde::Serialize)]
struct Restart {
    failed_process: usize,
    status: String,
    restart: u32,
    max_restarts: u32,
    /// The checkpoint the job continues from (none: from the start).
    from_iteration: Option<u64>,
}

/// Starts and watches the processes of a local multi-process run.
pub fn launch(args: &RunArgs, global: &GlobalArgs, processes: u32) -> anyhow::Result<ExitCode> {
    if processes == 0 {
        bail!("--processes must be at least 1");
    }
    let threads = args.threads.unwrap_or(1);
    if threads == 0 {
        bail!("--threads must be at least 1");
    }
    let workers = processes * threads;
    if args.overrides.workers.is_some_and(|w| w != workers) {
        bail!(
            "--workers {} disagrees with {processes} processes × {threads} threads",
            args.overrides.workers.unwrap_or(0)
        );
    }
    // Check the whole job (with its worker count) before anything starts.
    let mut check = args.overrides.clone();
    check.workers = Some(workers);
    let PreparedRun { plan, out_dir } =
        prepare(&args.job, &check, args.force, args.resume.as_deref())?;
    let say = |message: String| {
        if global.quiet == 0 && !global.json {
            eprintln!("{message}");
        }
    };
    let mut resume_at = match &args.resume {
        Some(dir) => Some(
            newest_checkpoint(dir, &plan)
                .with_context(|| format!("--resume {}: no complete checkpoint", dir.display()))?,
        ),
        None => {
            fresh_out_dir(&out_dir)?;
            None
        }
    };
    let mut restarts = 0;
    loop {
        let addresses = free_loopback_addresses(processes)?;
        let hostfile = out_dir.join("hostfile");
        write_atomic(&hostfile, format!("{}\n", addresses.join("\n")).as_bytes())
            .with_context(|| format!("cannot write {}", hostfile.display()))?;
        say(format!(
            "launching {processes} processes × {threads} threads on {}",
            addresses.join(", ")
        ));
        let mut children = start(args, global, &out_dir, processes, threads, resume_at)?;
        // SIGTERM (or Ctrl-C's SIGINT) now goes on to the processes, which
        // stop together at an iteration boundary with a checkpoint.
        crate::run::stop::arm();
        let (process, status) = match watch(&mut children)? {
            Watched::Done => return Ok(ExitCode::SUCCESS),
            Watched::Stopped => {
                let signal = crate::run::stop::signal_name();
                say(match newest_checkpoint(&out_dir, &plan) {
                    Some(c) => format!(
                        "the processes stopped on {signal}; continue from the checkpoint at \
                         iteration {c} with --resume {}",
                        out_dir.display()
                    ),
                    None => format!("the processes stopped on {signal} before a checkpoint"),
                });
                return Ok(ExitCode::from(STOPPED));
            }
            Watched::Failed(process, status) => (process, status),
        };
        if crate::run::stop::signalled() {
            bail!(
                "process {process} of {processes} exited with {status} while stopping on \
                 {}; stopped the others (not restarting)",
                crate::run::stop::signal_name()
            );
        }
        let failure = format!("process {process} of {processes} exited with {status}");
        if status.code() == Some(DIVERGED) {
            bail!("{failure}; stopped the others (training diverged: not restarting)");
        }
        if restarts >= args.max_restarts {
            let tried = if args.max_restarts > 0 {
                format!(
                    " after {restarts} restarts (--max-restarts {})",
                    args.max_restarts
                )
            } else {
                String::new()
            };
            bail!("{failure}; stopped the others{tried}");
        }
        restarts += 1;
        resume_at = newest_checkpoint(&out_dir, &plan);
        if global.json {
            print_stdout(&json::line(
                "restart",
                &Restart {
                    failed_process: process,
                    status: status.to_string(),
                    restart: restarts,
                    max_restarts: args.max_restarts,
                    from_iteration: resume_at,
                },
            ));
        }
        match resume_at {
            Some(c) => say(format!(
                "{failure}; stopped the others; restarting from the checkpoint at iteration {c} (restart {restarts} of {})",
                args.max_restarts
            )),
            None => {
                say(format!(
                    "{failure}; stopped the others; no complete checkpoint yet: restarting from the start (restart {restarts} of {})",
                    args.max_restarts
                ));
                fresh_out_dir(&out_dir)?;
            }
        }
    }
}

/// The newest complete checkpoint's iteration in `dir`, warning of newer ones
/// passed over.
fn newest_checkpoint(dir: &Path, plan: &JobPlan) -> Option<u64> {
    store::newest_valid(dir, &plan.hash(), plan.workers, None, &mut |e| {
        eprintln!("warning: {e}; falling back to the previous checkpoint");
    })
    .map(|c| c.iteration)
}

fn fresh_out_dir(out_dir: &Path) -> anyhow::Result<()> {
    if out_dir.exists() {
        std::fs::remove_dir_all(out_dir)
            .with_context(|| format!("cannot clear output directory {}", out_dir.display()))?;
    }
    std::fs::create_dir_all(out_dir)
        .with_context(|| format!("cannot create output directory {}", out_dir.display()))
}

/// Starts the N processes (continuing from checkpoint `resume_at`, if any).
fn start(
    args: &RunArgs,
    global: &GlobalArgs,
    out_dir: &Path,
    processes: u32,
    threads: u32,
    resume_at: Option<u64>,
) -> anyhow::Result<Vec<Child>> {
    let exe = std::env::current_exe().context("cannot find the forestall binary")?;
    let hostfile = out_dir.join("hostfile");
    let mut words = args.overrides.words();
    match resume_at {
        Some(at) => words.extend([
            "--resume".into(),
            out_dir.display().to_string(),
            "--resume-at".into(),
            at.to_string(),
        ]),
        None => words.extend(["--out".into(), out_dir.display().to_string()]),
    }
    if let Some(n) = args.stop_after {
        words.extend(["--stop-after".into(), n.to_string()]);
    }
    words.extend(["--stop-grace".into(), args.stop_grace.to_string()]);
    // One job clock: every process measures from the same wall-clock origin
    // (the processes' data loading then shows before the first iteration).
    let epoch_us = crate::run::cluster::unix_now_us();
    words.extend(["--epoch-us".into(), epoch_us.to_string()]);
    let token = match std::env::var(crate::run::token::TOKEN_VAR) {
        Ok(t) if !t.trim().is_empty() => t,
        _ => crate::run::token::fresh()?,
    };
    let mut children: Vec<Child> = Vec::with_capacity(processes as usize);
    for i in 0..processes {
        let mut command = Command::new(&exe);
        if global.json {
            command.arg("--json");
        }
        if i != 0 || global.quiet > 0 || global.no_progress {
            command.arg("-q");
        }
        command
            .arg("run")
            .arg(&args.job)
            .args(["--hostfile", &hostfile.display().to_string()])
            .args(["--process", &i.to_string()])
            .args(["--threads", &threads.to_string()])
            .arg("--joined")
            .args(&words)
            .stdin(Stdio::null())
            .stdout(if i == 0 {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .stderr(Stdio::inherit());
        if args.allow_remote {
            command.arg("--allow-remote");
        }
        // The processes prove this job's secret to each other: the user's
        // (a --token-file is passed on with the flags), else a fresh one.
        match &args.token_file {
            Some(file) => {
                command.arg("--token-file").arg(file);
            }
            None => {
                command.env(crate::run::token::TOKEN_VAR, &token);
            }
        }
        match command.spawn() {
            Ok(child) => children.push(child),
            Err(e) => {
                stop(&mut children);
                return Err(e).context(format!("cannot start process {i}"));
            }
        }
    }
    let pids: Vec<String> = children.iter().map(|c| c.id().to_string()).collect();
    let pid_file = out_dir.join("pids");
    write_atomic(&pid_file, format!("{}\n", pids.join("\n")).as_bytes())
        .with_context(|| format!("cannot write {}", pid_file.display()))?;
    Ok(children)
}

/// Waits for every process; the first to fail stops the others and is
/// returned.
///
/// A process that exits with [`STOPPED`] stopped with its peers at an
/// agreed iteration (SIGTERM): the others follow. SIGTERM to the launcher
/// goes on to every process.
///
/// A process that dies takes its peers down with it (their connections
/// break), so when one fails the others get a moment to exit too, and a
/// process killed by a signal is named as the cause over those that merely
/// lost it.
fn watch(children: &mut [Child]) -> anyhow::Result<Watched> {
    let mut done = vec![false; children.len()];
    let (mut forwarded, mut stopped) = (false, false);
    while done.iter().any(|d| !d) {
        if crate::run::stop::signalled() && !forwarded {
            forwarded = true;
            for (child, _) in children.iter().zip(&done).filter(|(_, d)| !**d) {
                crate::run::stop::forward(child.id());
            }
        }
        for i in 0..children.len() {
            if done[i] {
                continue;
            }
            if let Some(status) = children[i].try_wait().context("cannot watch a process")? {
                done[i] = true;
                stopped |= status.code() == Some(i32::from(STOPPED));
                if !status.success() && status.code() != Some(i32::from(STOPPED)) {
                    std::thread::sleep(Duration::from_millis(200));
                    let mut cause = (i, status);
                    for (j, child) in children.iter_mut().enumerate() {
                        if let Ok(Some(other)) = child.try_wait() {
                            if killed_by_signal(&other) && !killed_by_signal(&cause.1) {
                                cause = (j, other);
                            }
                        }
                    }
                    stop(children);
                    return Ok(Watched::Failed(cause.0, cause.1));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(if stopped {
        Watched::Stopped
    } else {
        Watched::Done
    })
}

/// How the processes of one launch ended.
enum Watched {
    /// All succeeded.
    Done,
    /// All stopped together with a checkpoint (or succeeded).
    Stopped,
    /// This one failed first (the others are stopped).
    Failed(usize, ExitStatus),
}

#[cfg(unix)]
fn killed_by_signal(status: &ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    status.signal().is_some()
}

#[cfg(not(unix))]
fn killed_by_signal(_: &ExitStatus) -> bool {
    false
}

/// Kills every process still running and reaps it.
fn stop(children: &mut [Child]) {
    for child in children.iter_mut() {
        let _ = child.kill();
        let _ = child.wait();
    }
}
