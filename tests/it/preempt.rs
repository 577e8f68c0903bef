//! SIGTERM, as a scheduler preempts: every process of the job stops at one
//! iteration they agree on, checkpoints it and exits 143; the same command
//! with `--resume-if-any` (a requeued job) continues to the parameters of
//! the uninterrupted run.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, ExitStatus};

use crate::common::{adult_path, spawn_in, summary_digest};

/// A job of 40 paced iterations (about 80 ms each) with no checkpoints of
/// its own: a stop must make the one it resumes from.
pub fn write_job(dir: &Path) {
    write_paced_job(dir, 40, 40_000);
}

/// [`write_job`] with `iterations` paced at `pace_ns` a row (40,000: about
/// 80 ms an iteration).
fn write_paced_job(dir: &Path, iterations: u64, pace_ns: u64) {
    std::fs::write(
        dir.join("job.toml"),
        format!(
            "[job]\nname = \"preempt\"\niterations = {iterations}\nseed = 5\n[data]\npath = \"{}\"\npartitions = 16\nunits_per_partition = 2\nbatch_fraction = 0.25\n[workers]\ncount = 4\npace_ns_per_row = {pace_ns}\n[straggler]\npattern = \"slow-worker\"\nprobability = 0.2\ndelay_percent = 300\n[checkpoint]\nevery = 0\n",
            adult_path().display()
        ),
    )
    .expect("job");
}

/// What a process printed and how it ended.
pub struct Ended {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Ended {
    /// The parameter digest of its `--json` summary, once it succeeded.
    pub fn digest(&self) -> String {
        assert!(self.status.success(), "{}", self.stderr);
        summary_digest(&std::process::Output {
            status: self.status,
            stdout: self.stdout.clone().into_bytes(),
            stderr: Vec::new(),
        })
    }

    /// The iteration its "stopped … at iteration E" line names.
    pub fn stopped_at(&self) -> u64 {
        let at = self
            .stderr
            .split("at iteration ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok());
        at.unwrap_or_else(|| panic!("no stop line in {}", self.stderr))
    }
}

/// Sends SIGTERM to `pid`.
pub fn sigterm(pid: u32) {
    signal(pid, libc::SIGTERM);
}

/// Sends `signal` to `pid`.
fn signal(pid: u32, signal: libc::c_int) {
    // SAFETY: kill(2) on a child this test started.
    let rc = unsafe { libc::kill(pid as libc::pid_t, signal) };
    assert_eq!(rc, 0, "kill");
}

/// Waits until `watched` (a `--json` process) has printed `rows` iteration
/// rows, then sends SIGTERM to `targets` (pids); returns how `watched`
/// ended.
pub fn sigterm_after(watched: Child, rows: usize, targets: &[u32]) -> Ended {
    signal_after(watched, rows, targets, libc::SIGTERM)
}

/// [`sigterm_after`], sending `sent` instead of SIGTERM.
fn signal_after(mut watched: Child, rows: usize, targets: &[u32], sent: libc::c_int) -> Ended {
    let stdout = watched.stdout.take().expect("piped");
    let mut stderr = watched.stderr.take().expect("piped");
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let mut out = String::new();
    let mut seen = 0;
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("stdout");
        if line.contains("\"type\":\"iteration\"") {
            seen += 1;
            if seen == rows {
                for &pid in targets {
                    signal(pid, sent);
                }
            }
        }
        out.push_str(&line);
        out.push('\n');
    }
    Ended {
        status: watched.wait().expect("ends"),
        stdout: out,
        stderr: errors.join().expect("stderr"),
    }
}

/// How `child` ended.
pub fn ended(child: Child) -> Ended {
    let o = child.wait_with_output().expect("ends");
    Ended {
        status: o.status,
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// `dir/hosts`: two free ports on loopback.
fn write_hostfile(dir: &Path) {
    let addresses = forestall::run::cluster::free_loopback_addresses(2).expect("ports");
    std::fs::write(dir.join("hosts"), addresses.join("\n")).expect("hosts");
}

fn no_env() -> [(&'static str, &'static str); 0] {
    []
}

fn uninterrupted(dir: &Path, policy: &str) -> String {
    let o = crate::common::forestall_in(
        dir,
        &[
            "--json",
            "run",
            "job.toml",
            "--policy",
            policy,
            "--out",
            &format!("whole-{policy}"),
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    summary_digest(&o)
}

/// One process under policies with and without BSP semantics: SIGTERM (and
/// Ctrl-C's SIGINT) stops it at an iteration boundary with a checkpoint
/// there and exit 143, saying which signal; the same command with
/// `--resume-if-any` continues, and under BSP semantics ends with the
/// uninterrupted run's parameters.
#[test]
fn sigterm_checkpoints_at_an_iteration_boundary_and_the_requeued_command_continues() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir);
    for (policy, bsp_semantics, sent) in [
        ("bsp", true, libc::SIGTERM),
        ("forestall", true, libc::SIGTERM),
        ("ssp", false, libc::SIGTERM),
        ("rapid-reassign", true, libc::SIGINT),
    ] {
        let name = if sent == libc::SIGINT {
            "SIGINT"
        } else {
            "SIGTERM"
        };
        let out = format!("cut-{policy}-{name}");
        let args = [
            "--json",
            "run",
            "job.toml",
            "--policy",
            policy,
            "--out",
            out.as_str(),
            "--resume-if-any",
        ];
        let child = spawn_in(dir, &args, no_env());
        let pid = child.id();
        let first = signal_after(child, 3, &[pid], sent);
        assert_eq!(first.status.code(), Some(143), "{policy}: {}", first.stderr);
        assert!(
            first
                .stderr
                .contains(&format!("stopped on {name} at iteration")),
            "{policy}: {}",
            first.stderr
        );
        let at = first.stopped_at();
        assert!((4..40).contains(&at), "{policy}: stopped at {at}");
        assert!(
            dir.join(&out)
                .join(format!("checkpoints/it-{at:08}/cut-p000.ckpt"))
                .exists(),
            "{policy}: the checkpoint at {at}"
        );
        let summary: serde_json::Value = serde_json::from_slice(
            &std::fs::read(dir.join(&out).join("summary.json")).expect("summary"),
        )
        .expect("json");
        assert_eq!(summary["iterations"], at, "{policy}");
        assert_eq!(summary["stopped_of"], 40, "{policy}");
        let second = ended(spawn_in(dir, &args, no_env()));
        assert!(second.status.success(), "{policy}: {}", second.stderr);
        let rows = crate::common::json_data(second.stdout.as_bytes());
        let first_row = rows.iter().find(|d| d.get("iteration").is_some());
        assert_eq!(
            first_row.and_then(|d| d["iteration"].as_u64()),
            Some(at),
            "{policy}: the requeued command continues from the stop"
        );
        if bsp_semantics {
            assert_eq!(second.digest(), uninterrupted(dir, policy), "{policy}");
        }
    }
}

/// Two processes started by hand: SIGTERM to process 1 alone stops both at
/// the same iteration, each with exit 143; both started again continue to
/// the uninterrupted parameters.
#[test]
fn sigterm_to_one_process_stops_the_whole_job_at_one_iteration() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir);
    let expected = uninterrupted(dir, "bsp");
    write_hostfile(dir);
    let args = |i: &'static str| -> Vec<&'static str> {
        vec![
            "--json",
            "run",
            "job.toml",
            "--hostfile",
            "hosts",
            "--process",
            i,
            "--threads",
            "2",
            "--out",
            "two",
            "--resume-if-any",
        ]
    };
    let zero = spawn_in(dir, &args("0"), no_env());
    let one = spawn_in(dir, &args("1"), no_env());
    let one_pid = one.id();
    let zero = sigterm_after(zero, 3, &[one_pid]);
    let one = ended(one);
    for (i, e) in [(0, &zero), (1, &one)] {
        assert_eq!(e.status.code(), Some(143), "process {i}: {}", e.stderr);
    }
    assert_eq!(zero.stopped_at(), one.stopped_at(), "one iteration for all");
    assert!(
        zero.stderr.contains("as another process was asked to"),
        "{}",
        zero.stderr
    );
    let zero = spawn_in(dir, &args("0"), no_env());
    let one = spawn_in(dir, &args("1"), no_env());
    let (zero, one) = (ended(zero), ended(one));
    assert!(one.status.success(), "{}", one.stderr);
    assert_eq!(zero.digest(), expected);
}

/// The launcher passes SIGTERM on: its processes stop together, it exits
/// 143 without restarting them, and the same command with
/// `--resume-if-any` continues to the uninterrupted parameters.
#[test]
fn the_launcher_passes_sigterm_on_and_does_not_restart() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir);
    let expected = uninterrupted(dir, "bsp");
    let args = [
        "--json",
        "run",
        "job.toml",
        "--processes",
        "2",
        "--threads",
        "2",
        "--max-restarts",
        "2",
        "--out",
        "launched",
        "--resume-if-any",
    ];
    let launcher = spawn_in(dir, &args, no_env());
    let pid = launcher.id();
    let first = sigterm_after(launcher, 3, &[pid]);
    assert_eq!(first.status.code(), Some(143), "{}", first.stderr);
    assert!(!first.stdout.contains("\"restart\""), "{}", first.stdout);
    let at = first.stopped_at();
    assert!(dir
        .join(format!("launched/checkpoints/it-{at:08}/cut-p001.ckpt"))
        .exists());
    let second = ended(spawn_in(dir, &args, no_env()));
    assert_eq!(second.digest(), expected);
}

/// SIGTERM before training starts (waiting for a peer) ends the process at
/// once: nothing trained is lost, and nothing waits for the connect timeout.
#[test]
fn sigterm_while_connecting_ends_at_once() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir);
    write_hostfile(dir);
    let started = std::time::Instant::now();
    let zero = spawn_in(
        dir,
        &[
            "run",
            "job.toml",
            "--hostfile",
            "hosts",
            "--process",
            "0",
            "--connect-timeout",
            "60",
            "--out",
            "alone",
        ],
        no_env(),
    );
    std::thread::sleep(std::time::Duration::from_millis(800));
    sigterm(zero.id());
    let e = ended(zero);
    assert_eq!(e.status.code(), Some(143), "{}", e.stderr);
    assert!(e.stderr.contains("stopping now"), "{}", e.stderr);
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
}

/// `--resume-if-any` needs `--out`, and refuses `--resume` and `--force`
/// beside it; a directory holding another job's checkpoint is refused by
/// name.
#[test]
fn resume_if_any_refuses_what_it_cannot_mean() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir);
    for extra in [
        &["--resume-if-any"][..],
        &["--resume-if-any", "--out", "x", "--force"][..],
        &["--resume-if-any", "--resume", "x"][..],
    ] {
        let o = crate::common::forestall_in(dir, &[&["run", "job.toml"][..], extra].concat());
        assert_eq!(o.status.code(), Some(2), "{extra:?}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("--resume-if-any"),
            "{extra:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let first = crate::common::forestall_in(
        dir,
        &[
            "run",
            "job.toml",
            "--iterations",
            "4",
            "--checkpoint-every",
            "2",
            "--out",
            "other",
        ],
    );
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let o = crate::common::forestall_in(
        dir,
        &["run", "job.toml", "--out", "other", "--resume-if-any"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("other"), "{err}");
}

/// A run stuck inside an iteration (here one paced to last minutes) never
/// reaches the boundary a stop waits for: once SIGTERM asked, it trains no
/// iteration for its grace (`--stop-grace`, ten of its longest iterations
/// when longer) and stops at once, with exit 143, saying so.
#[test]
fn a_run_stuck_inside_an_iteration_stops_after_its_grace() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_paced_job(dir, 3, 100_000_000);
    let mut child = spawn_in(
        dir,
        &["run", "job.toml", "--out", "stuck", "--stop-grace", "2"],
        no_env(),
    );
    let stderr = child.stderr.take().expect("piped");
    let (training, began) = std::sync::mpsc::channel();
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        for line in BufReader::new(stderr).lines() {
            let line = line.expect("stderr");
            if line.starts_with("training ") {
                let _ = training.send(());
            }
            text.push_str(&line);
            text.push('\n');
        }
        text
    });
    began
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("training begins");
    // (armed once training runs: the line comes just before)
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let asked = std::time::Instant::now();
    sigterm(child.id());
    let status = child.wait().expect("ends");
    let waited = asked.elapsed();
    let stderr = errors.join().expect("stderr");
    assert_eq!(status.code(), Some(143), "{stderr}");
    assert!(
        stderr.contains("stopping at the next iteration boundary"),
        "first the stop at a boundary is asked: {stderr}"
    );
    assert!(
        stderr.contains("SIGTERM: no iteration trained in the last"),
        "{stderr}"
    );
    assert!(
        waited >= std::time::Duration::from_millis(1500)
            && waited < std::time::Duration::from_secs(30),
        "after its grace of 2 s, not at once nor at the iteration's end: {waited:?}"
    );
}

/// Iterations longer than the grace's floor are waited for: ten times the
/// longest so far (a straggler may slow the next ones). With `--stop-grace
/// 1` and iterations of about 1.2 s, a SIGTERM after the second still stops
/// at a boundary with a checkpoint.
#[test]
fn a_stop_waits_for_iterations_longer_than_the_grace() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_paced_job(dir, 12, 600_000);
    let args = [
        "--json",
        "run",
        "job.toml",
        "--out",
        "long",
        "--stop-grace",
        "1",
    ];
    let child = spawn_in(dir, &args, no_env());
    let pid = child.id();
    let ended = sigterm_after(child, 2, &[pid]);
    assert_eq!(ended.status.code(), Some(143), "{}", ended.stderr);
    assert!(
        !ended.stderr.contains("no iteration trained"),
        "{}",
        ended.stderr
    );
    let at = ended.stopped_at();
    assert!(
        dir.join(format!("long/checkpoints/it-{at:08}/cut-p000.ckpt"))
            .exists(),
        "a checkpoint at {at}"
    );
}

/// A grace of 0 s is refused by name, before anything runs.
#[test]
fn a_stop_grace_of_zero_is_refused() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir);
    let o = crate::common::forestall_in(dir, &["run", "job.toml", "--stop-grace", "0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--stop-grace"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let left: Vec<_> = std::fs::read_dir(dir)
        .expect("dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(left, ["job.toml"], "nothing written");
}
