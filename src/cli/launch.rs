//! `forestall run JOB --processes N --threads T`: the launcher. It checks the
//! job, prepares the output directory, writes a hostfile of N free loopback
//! ports, starts N `forestall run … --hostfile … --process i` processes (timely
//! cluster mode), relays process 0's output, and stops every process as soon
//! as one fails.

use std::process::{Child, Command, ExitCode, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};

use super::run::{prepare, PreparedRun, RunArgs};
use super::GlobalArgs;
use crate::fsutil::write_atomic;
use crate::run::cluster::free_loopback_addresses;

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
    if args.workers.is_some_and(|w| w != workers) {
        bail!(
            "--workers {} disagrees with {processes} processes × {threads} threads",
            args.workers.unwrap_or(0)
        );
    }
    // Check the whole job (with its worker count) before anything starts.
    let mut overrides = args.override_words();
    let mut check = args.overrides_for_launch();
    check.workers = Some(workers);
    let PreparedRun { out_dir, .. } = prepare(&args.job, &check, args.force)?;
    if out_dir.exists() {
        std::fs::remove_dir_all(&out_dir)
            .with_context(|| format!("cannot clear output directory {}", out_dir.display()))?;
    }
    std::fs::create_dir_all(&out_dir)
        .with_context(|| format!("cannot create output directory {}", out_dir.display()))?;
    let addresses = free_loopback_addresses(processes)?;
    let hostfile = out_dir.join("hostfile");
    write_atomic(&hostfile, format!("{}\n", addresses.join("\n")).as_bytes())
        .with_context(|| format!("cannot write {}", hostfile.display()))?;
    if global.quiet == 0 && !global.json {
        eprintln!(
            "launching {processes} processes × {threads} threads on {}",
            addresses.join(", ")
        );
    }
    let exe = std::env::current_exe().context("cannot find the forestall binary")?;
    overrides.extend(["--out".into(), out_dir.display().to_string()]);
    // One job clock: every process measures from the same wall-clock origin
    // (the processes' data loading then shows before the first iteration).
    let epoch_us = crate::run::cluster::unix_now_us();
    overrides.extend(["--epoch-us".into(), epoch_us.to_string()]);
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
            .args(&overrides)
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
        match command.spawn() {
            Ok(child) => children.push(child),
            Err(e) => {
                stop(&mut children);
                return Err(e).context(format!("cannot start process {i}"));
            }
        }
    }
    // Watch: the first process to fail stops the others.
    let mut done = vec![false; children.len()];
    while done.iter().any(|d| !d) {
        for (i, child) in children.iter_mut().enumerate() {
            if done[i] {
                continue;
            }
            if let Some(status) = child.try_wait().context("cannot watch a process")? {
                done[i] = true;
                if !status.success() {
                    stop(&mut children);
                    bail!("process {i} of {processes} exited with {status}; stopped the others");
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(ExitCode::SUCCESS)
}

/// Kills every process still running and reaps it.
fn stop(children: &mut [Child]) {
    for child in children.iter_mut() {
        let _ = child.kill();
        let _ = child.wait();
    }
}
