//! Checkpoints, resume and supervised restarts with real processes and real
//! signals: a job killed with SIGKILL at a random iteration and resumed ends
//! with the parameters of an uninterrupted run, and its trace holds every
//! record exactly once.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use forestall::checkpoint::store;
use forestall::trace::read_trace_dir;

use crate::common::{adult_path, forestall_in as forestall};

const ITERATIONS: u64 = 40;
const UNITS: usize = 16 * 2;

/// 40 paced iterations (a few seconds), a checkpoint every 4.
fn write_job(dir: &Path, policy: &str) {
    std::fs::write(
        dir.join("job.toml"),
        format!(
            "[job]\nname = \"resume\"\niterations = {ITERATIONS}\nseed = 9\n[data]\npath = \"{}\"\npartitions = 16\nunits_per_partition = 2\nbatch_fraction = 0.25\n[workers]\ncount = 4\npace_ns_per_row = 40000\n[straggler]\npattern = \"slow-worker\"\nprobability = 0.2\ndelay_percent = 200\n[policy]\nname = \"{policy}\"\n[checkpoint]\nevery = 4\n",
            adult_path().display()
        ),
    )
    .expect("job");
}

fn summary(o: &Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&o.stdout);
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["type"] == "summary")
        .unwrap_or_else(|| {
            panic!(
                "no summary in {stdout} / {}",
                String::from_utf8_lossy(&o.stderr)
            )
        })["data"]
        .clone()
}

fn spawn(dir: &Path, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_forestall"))
        .current_dir(dir)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("forestall starts")
}

/// A pseudo-random iteration past the first checkpoint, from the clock.
fn random_iteration() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    5 + u64::from(nanos) % (ITERATIONS / 2)
}

/// Waits until process 0 has committed trace rows up to `iteration` (or a
/// checkpoint after it exists).
fn wait_for_iteration(out: &Path, iteration: u64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let reached = std::fs::read_dir(out.join("checkpoints"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.strip_prefix("it-")?.parse::<u64>().ok()
            })
            .max()
            .unwrap_or(0);
        if reached >= iteration {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the job never reached {iteration}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn sigkill(pid: u32) {
    let status = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -KILL {pid}");
}

/// Every (iteration, partition, unit) once, every iteration row and every
/// (iteration, worker) row once. A copy of a unit slowed in flight
/// (`forestall`'s clones) has a record of its own, marked as a clone: it
/// counts as the copy, not as the unit computed twice.
fn assert_exactly_once(out: &Path) {
    let trace = read_trace_dir(&out.join("trace")).expect("every committed part reads");
    let key = |u: &forestall::trace::UnitRecord| (u.iteration, u.partition, u.unit);
    let mut originals: Vec<(u64, u32, u32)> = trace
        .units
        .iter()
        .filter(|u| u.action.is_original())
        .map(key)
        .collect();
    originals.sort_unstable();
    let total = originals.len();
    originals.dedup();
    assert_eq!(total, originals.len(), "a unit record appears twice");
    let mut every: Vec<(u64, u32, u32)> = trace.units.iter().map(key).collect();
    every.sort_unstable();
    every.dedup();
    assert_eq!(
        every.len(),
        ITERATIONS as usize * UNITS,
        "every unit of every iteration"
    );
    let iterations: Vec<u64> = trace.iterations.iter().map(|r| r.iteration).collect();
    assert_eq!(iterations, (0..ITERATIONS).collect::<Vec<_>>());
    assert_eq!(trace.workers.len(), ITERATIONS as usize * 4);
    for table in ["units", "workers", "iterations"] {
        let hidden = std::fs::read_dir(out.join("trace").join(table))
            .expect("table dir")
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
            .count();
        assert_eq!(hidden, 0, "{table}: a half-written part was left behind");
    }
}

fn uninterrupted_digest(dir: &Path, out: &str) -> String {
    let o = forestall(dir, &["--json", "run", "job.toml", "--out", out]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    summary(&o)["params_sha256"]
        .as_str()
        .expect("digest")
        .to_owned()
}

#[test]
fn a_worker_process_killed_at_a_random_iteration_is_restarted_with_identical_results() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    for policy in ["bsp", "forestall"] {
        write_job(dir, policy);
        let expected = uninterrupted_digest(dir, &format!("threads-{policy}"));
        let out = format!("supervised-{policy}");
        let child = spawn(
            dir,
            &[
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
                &out,
            ],
        );
        let kill_at = random_iteration();
        wait_for_iteration(&dir.join(&out), kill_at);
        let pids = std::fs::read_to_string(dir.join(&out).join("pids")).expect("pids");
        let victim: u32 = pids
            .lines()
            .nth(1)
            .expect("process 1")
            .parse()
            .expect("pid");
        sigkill(victim);
        let o = child.wait_with_output().expect("launcher ends");
        assert!(
            o.status.success(),
            "{policy}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        // One line from the process that lost its peer, if it noticed before
        // the launcher stopped it: not the panics that follow in it.
        let stderr = String::from_utf8_lossy(&o.stderr);
        let lines = stderr
            .lines()
            .filter(|l| l.starts_with("error: process 0:"))
            .count();
        assert!(lines <= 1, "{policy}: {stderr}");
        assert!(
            !stderr.contains("poisoned") && !stderr.contains("panic"),
            "{policy}: {stderr}"
        );
        let stdout = String::from_utf8_lossy(&o.stdout);
        let restart = stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["type"] == "restart")
            .unwrap_or_else(|| panic!("{policy}: no restart line in {stdout}"));
        assert_eq!(restart["data"]["failed_process"], 1, "{restart}");
        assert!(
            restart["data"]["status"]
                .as_str()
                .is_some_and(|s| s.contains("SIGKILL") || s.contains('9')),
            "{restart}"
        );
        assert!(restart["data"]["from_iteration"].as_u64() >= Some(4));
        assert_eq!(
            summary(&o)["params_sha256"].as_str(),
            Some(expected.as_str()),
            "{policy}: killed at ≈{kill_at}, restarted: the parameters differ from an uninterrupted run"
        );
        assert_exactly_once(&dir.join(&out));
    }
}

#[test]
fn resume_continues_a_killed_run_with_identical_results() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir, "rapid-reassign");
    let expected = uninterrupted_digest(dir, "whole");
    let child = spawn(dir, &["-q", "run", "job.toml", "--out", "killed"]);
    wait_for_iteration(&dir.join("killed"), random_iteration());
    sigkill(child.id());
    let _ = child.wait_with_output();
    assert!(!dir.join("killed/summary.json").exists(), "it was killed");
    let o = forestall(dir, &["--json", "run", "job.toml", "--resume", "killed"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        summary(&o)["params_sha256"].as_str(),
        Some(expected.as_str())
    );
    assert_exactly_once(&dir.join("killed"));
    // a checkpoint holds every partition's holders: its owner, its replica,
    // and any worker a moved unit made a holder (the final one has no next
    // iteration to hold data for)
    let text = std::fs::read_to_string(dir.join("job.toml")).expect("job");
    let hash = crate::common::plan(&text).hash();
    let before_last = store::iteration_dir(&dir.join("killed"), ITERATIONS - 4);
    let checkpoint = store::load(&before_last, &hash, 4, None).expect("the checkpoint loads");
    for partition in 0..16u32 {
        let holders = checkpoint
            .placement
            .iter()
            .filter(|(p, _)| *p == partition)
            .count();
        assert!(
            holders >= 2,
            "partition {partition}: {:?}",
            checkpoint.placement
        );
    }
}

#[test]
fn a_corrupt_checkpoint_falls_back_to_the_previous_one_and_says_so() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir, "bsp");
    // One shard per worker (the other tests run this small model's default,
    // one shard): a checkpoint then has four shard files.
    let job = std::fs::read_to_string(dir.join("job.toml")).expect("job");
    let job = job.replace("count = 4\n", "count = 4\nshards = 4\n");
    std::fs::write(dir.join("job.toml"), job).expect("job");
    let expected = uninterrupted_digest(dir, "run");
    // the run keeps its last two checkpoints: 36 and 40
    let files = |it: &str| {
        let mut names: Vec<String> = std::fs::read_dir(dir.join("run/checkpoints").join(it))
            .expect("checkpoint dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("shard-"))
            .collect();
        names.sort();
        names
    };
    assert_eq!(files("it-00000040").len(), 4);
    let newest = dir.join("run/checkpoints/it-00000040/shard-00002.ckpt");
    let bytes = std::fs::read(&newest).expect("checkpoint file");
    std::fs::write(&newest, &bytes[..bytes.len() / 2]).expect("truncate");
    let o = forestall(dir, &["--json", "run", "job.toml", "--resume", "run"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("shard-00002.ckpt")
            && err.contains("truncated")
            && err.contains("falling back"),
        "{err}"
    );
    assert_eq!(
        summary(&o)["params_sha256"].as_str(),
        Some(expected.as_str())
    );
    assert_exactly_once(&dir.join("run"));
    // with both checkpoints unusable, --resume refuses and changes nothing
    let older = dir.join("run/checkpoints/it-00000036/cut-p000.ckpt");
    std::fs::write(&older, b"FORESTALL-CHECKPOINT-1\ngarbage").expect("corrupt");
    let newest = dir.join("run/checkpoints/it-00000040/cut-p000.ckpt");
    std::fs::write(&newest, b"not a checkpoint").expect("corrupt");
    let o = forestall(dir, &["run", "job.toml", "--resume", "run"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("no complete checkpoint"), "{err}");
    assert_exactly_once(&dir.join("run"));
}

#[test]
fn resume_refuses_another_jobs_directory() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir, "bsp");
    uninterrupted_digest(dir, "run");
    let o = forestall(dir, &["run", "job.toml", "--seed", "10", "--resume", "run"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("another job"), "{err}");
    let o = forestall(dir, &["run", "job.toml", "--resume", "nowhere"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--resume nowhere") && err.contains("plan.json"),
        "{err}"
    );
    // a fresh run into the used directory needs --force
    let o = forestall(dir, &["run", "job.toml", "--out", "run"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--force"), "{err}");
    assert_exactly_once(&dir.join("run"));
}

#[test]
fn a_diverging_run_stops_naming_the_iteration_and_is_not_restarted() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    std::fs::write(
        dir.join("job.toml"),
        format!(
            "[job]\niterations = 20\n[data]\npath = \"{}\"\n[model]\nlearning_rate = 1e300\n[workers]\ncount = 2\n",
            adult_path().display()
        ),
    )
    .expect("job");
    let o = forestall(dir, &["run", "job.toml", "--out", "threads"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("training diverged at iteration "), "{err}");
    assert!(!dir.join("threads/summary.json").exists());
    let o = forestall(
        dir,
        &[
            "run",
            "job.toml",
            "--processes",
            "2",
            "--max-restarts",
            "3",
            "--out",
            "p",
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("not restarting"), "{err}");
    assert_eq!(err.matches("launching").count(), 1, "no restart: {err}");
}

#[test]
fn a_taken_port_is_named() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir, "bsp");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let free = forestall::run::cluster::free_loopback_addresses(1).expect("port");
    std::fs::write(
        dir.join("hosts"),
        format!("127.0.0.1:{port}\n{}\n", free[0]),
    )
    .expect("hosts");
    let o = forestall(
        dir,
        &[
            "run",
            "job.toml",
            "--hostfile",
            "hosts",
            "--process",
            "0",
            "--threads",
            "2",
            "--out",
            "x",
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("cannot listen on 127.0.0.1:{port}")),
        "{err}"
    );
}

/// A disk that fills up mid-run (the writers' byte quota): the run stops with
/// an error naming the file, and what was committed before still reads.
#[test]
fn a_full_disk_stops_the_run_and_keeps_what_was_committed() {
    use forestall::fsutil::Quota;
    use forestall::run::{run_job_in_cluster, RunOptions};
    use forestall::trace::TraceStamp;

    let plan = crate::common::plan(
        "[job]\niterations = 30\nseed = 3\n[data]\npartitions = 8\nunits_per_partition = 2\n[workers]\ncount = 2\n[checkpoint]\nevery = 5\n[trace]\npart_iterations = 5\n",
    );
    let stamp = TraceStamp {
        job_id: "full".into(),
        git_revision: "test".into(),
        plan_hash: plan.hash(),
        seed: plan.seed,
    };
    let used = |dir: &Path| -> u64 {
        fn walk(p: &Path) -> u64 {
            std::fs::read_dir(p)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| {
                    let m = e.metadata().expect("metadata");
                    if m.is_dir() {
                        walk(&e.path())
                    } else {
                        m.len()
                    }
                })
                .sum()
        }
        walk(dir)
    };
    let whole = tempfile::tempdir().expect("dir");
    let options = RunOptions {
        checkpoint_dir: Some(whole.path().to_owned()),
        ..RunOptions::default()
    };
    run_job_in_cluster(
        &plan,
        crate::common::adult(),
        &whole.path().join("trace"),
        stamp.clone(),
        options,
    )
    .expect("runs");
    let total = used(whole.path());

    let full = tempfile::tempdir().expect("dir");
    let options = RunOptions {
        checkpoint_dir: Some(full.path().to_owned()),
        quota: Quota::bytes(total / 2),
        ..RunOptions::default()
    };
    let err = run_job_in_cluster(
        &plan,
        crate::common::adult(),
        &full.path().join("trace"),
        stamp,
        options,
    )
    .expect_err("the disk fills");
    let mut chain = vec![err.to_string()];
    let mut source = std::error::Error::source(&err);
    while let Some(s) = source {
        chain.push(s.to_string());
        source = s.source();
    }
    let err = chain.join(": ");
    assert!(
        err.contains("No space left") || err.contains("i/o error"),
        "{err}"
    );
    assert!(
        err.contains(".parquet") || err.contains(".ckpt"),
        "names the file: {err}"
    );
    // every committed part reads; the newest complete checkpoint loads
    let trace = read_trace_dir(&full.path().join("trace")).expect("committed parts read");
    assert!(trace.iterations.len() < 30);
    let checkpoint = store::newest_valid(full.path(), &plan.hash(), 2, None, &mut |_| {});
    assert!(checkpoint.is_some(), "an earlier checkpoint survives");
}
