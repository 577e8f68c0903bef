//! A bench run as processes on hosts in network namespaces
//! ([`super::netns`]): one `forestall run` a host with `--hostfile`,
//! `--allow-remote`, a token file, its own output directory and
//! `--gather`, so the run is what a job on machines without shared storage
//! does. Process 0's directory then holds the whole run, read back as a
//! launched run's is; the row adds the slowest handshake (the clock
//! exchange included) and the gather's time, from the processes' `-v`
//! lines. Once process 0's directory is read back, the other hosts'
//! directories and the token are removed: process 0 holds every part.

use std::path::Path;
use std::process::Child;

use super::launched::{read_back, LaunchError, LaunchFailure};
use super::netns::Hosts;
use super::spec::RunSpec;
use crate::run::RunOutput;
use crate::spec::JobPlan;

/// The port every host's process listens on (each host has its own).
const PORT: u16 = 29_600;

/// What a run on namespaced hosts produced.
pub struct Hosted {
    /// The run, as process 0's directory holds it.
    pub output: RunOutput,
    /// The slowest handshake of any process, ms.
    pub start_ms: Option<f64>,
    /// Process 0's gather of the others' trace parts, s.
    pub gather_s: Option<f64>,
}

/// Runs `run` (validated as `plan`) on `hosts` namespaced hosts with
/// process 0's output in `out_dir` and the others' beside it.
pub fn run_hosted(
    run: &RunSpec,
    plan: &JobPlan,
    hosts: u32,
    out_dir: &Path,
) -> Result<Hosted, LaunchError> {
    let fail = |failure: LaunchFailure| LaunchError {
        processes: hosts,
        failure,
    };
    if hosts == 0 || !plan.workers.is_multiple_of(hosts) {
        return Err(fail(LaunchFailure::Uneven {
            workers: plan.workers,
            processes: hosts,
        }));
    }
    let io = |doing: &'static str| {
        move |source: std::io::Error| LaunchFailure::Process { doing, source }
    };
    let exe = std::env::current_exe().map_err(|e| fail(LaunchFailure::Binary(e)))?;
    let cwd = std::env::current_dir().map_err(|e| fail(io("start")(e)))?;
    let machines = Hosts::new(hosts as usize).map_err(|e| fail(LaunchFailure::Namespaces(e)))?;
    std::fs::create_dir_all(out_dir).map_err(|e| fail(io("start")(e)))?;
    let token = out_dir.join("token");
    write_private(&token).map_err(|e| fail(io("start")(e)))?;
    machines
        .write_hostfile(out_dir, hosts as usize, PORT)
        .map_err(|e| fail(io("start")(e)))?;
    let job = cwd.join(&run.job);
    let threads = (plan.workers / hosts).to_string();
    let (hostfile, token) = (
        out_dir.join("hosts").display().to_string(),
        token.display().to_string(),
    );
    let mut children: Vec<Child> = Vec::new();
    for i in 0..hosts {
        let own = match i {
            0 => out_dir.to_owned(),
            _ => out_dir.join("peers").join(format!("h{i}")),
        };
        let (process, own) = (i.to_string(), own.display().to_string());
        let mut args: Vec<String> = ["--json", "-v", "run"].map(str::to_owned).to_vec();
        args.push(job.display().to_string());
        args.extend(run.overrides.words());
        args.extend(
            [
                "--hostfile",
                &hostfile,
                "--process",
                &process,
                "--threads",
                &threads,
                "--allow-remote",
                "--token-file",
                &token,
                "--connect-timeout",
                "60",
                "--out",
                &own,
                "--gather",
            ]
            .map(str::to_owned),
        );
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        match machines.forestall(i as usize, &exe, &cwd, &args, &[]) {
            Ok(c) => children.push(c),
            Err(e) => {
                for mut c in children {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return Err(fail(io("start")(e)));
            }
        }
    }
    let mut stderrs = Vec::new();
    let mut failed = None;
    for child in children {
        let o = child.wait_with_output().map_err(|e| fail(io("wait")(e)))?;
        let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
        if !o.status.success() && failed.is_none() {
            failed = Some(LaunchFailure::Exited {
                status: o.status,
                stderr: stderr.trim().to_owned(),
            });
        }
        stderrs.push(stderr);
    }
    if let Some(f) = failed {
        return Err(fail(f));
    }
    let start_ms = stderrs
        .iter()
        .filter_map(|e| number_after(e, "handshake_us="))
        .reduce(f64::max)
        .map(|us| us / 1000.0);
    let gather_s = stderrs
        .first()
        .and_then(|e| e.lines().find(|l| l.contains("trace gathered")))
        .and_then(|l| number_after(l, "gather_s="));
    let output = read_back(out_dir).map_err(fail)?;
    // Process 0 holds the whole trace now; the other hosts' own directories
    // (their copies of their parts) and the token are spent. Left behind,
    // the peers' partial traces would be found by `analyze` on the bench.
    for spent in [out_dir.join("peers"), out_dir.join("token")] {
        let gone = match std::fs::metadata(&spent) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(&spent),
            Ok(_) => std::fs::remove_file(&spent),
            Err(_) => Ok(()),
        };
        if let Err(e) = gone {
            tracing::warn!("could not remove {}: {e}", spent.display());
        }
    }
    Ok(Hosted {
        output,
        start_ms,
        gather_s,
    })
}

/// The number after the last `key` in `text`.
fn number_after(text: &str, key: &str) -> Option<f64> {
    let at = text.rfind(key)? + key.len();
    text[at..]
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .next()?
        .parse()
        .ok()
}

/// A fresh token in a file only its owner reads.
fn write_private(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let token = crate::run::token::fresh().map_err(std::io::Error::other)?;
    std::fs::write(path, token)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_read_after_their_key() {
        let e = "INFO process 1: … (handshake_us=1234, the clock…)\nINFO process 0: trace gathered: 3 parts, 9 bytes in 0.0125 s (gather_s=0.0125)";
        assert_eq!(number_after(e, "handshake_us="), Some(1234.0));
        assert_eq!(number_after(e, "gather_s="), Some(0.0125));
        assert_eq!(number_after(e, "missing="), None);
    }
}
