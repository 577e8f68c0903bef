//! Several processes through timely's cluster mode: the launcher, the
//! bit-identical parameters against threads, and bad hostfiles.

use std::path::Path;
use std::process::Output;

use forestall::trace::read_trace_dir;

use crate::common::{adult_path, forestall_in as forestall};

/// A small paced job with worker 3 persistently 4× slower, so peers move work.
fn write_job(dir: &Path) {
    std::fs::write(
        dir.join("job.toml"),
        format!(
            "[job]\nname = \"mp\"\niterations = 8\nseed = 4\n[data]\npath = \"{}\"\npartitions = 16\nunits_per_partition = 2\nbatch_fraction = 0.25\n[workers]\ncount = 4\npace_ns_per_row = 3000\n[straggler]\npattern = \"persistent\"\nworkers = [3]\nfactor = 4.0\n",
            adult_path().display()
        ),
    )
    .expect("job");
}

/// Every unit, whichever process ran it, lies within its iteration's span
/// as the coordinator recorded it on the job clock (1 ms of slack).
fn every_unit_within_its_iteration(trace: &forestall::trace::TraceSet, label: &str) {
    for u in &trace.units {
        let it = &trace.iterations[u.iteration as usize];
        assert!(
            u.start_us + 1000 >= it.start_us && u.end_us <= it.end_us + 1000,
            "{label}: unit {:?} of process {} at {}..{} µs outside iteration {} at {}..{} µs",
            (u.partition, u.unit),
            u.process,
            u.start_us,
            u.end_us,
            u.iteration,
            it.start_us,
            it.end_us
        );
    }
}

fn digest(o: &Output) -> String {
    crate::common::summary_digest(o)
}

/// Two processes of `dir/job.toml` on loopback, started by hand: writes
/// `dir/hosts` with two free ports and returns how to start process `i`
/// (2 threads) with `extra` arguments and `env` added.
fn by_hand(dir: &Path) -> impl Fn(&str, &[&str], &[(&str, &str)]) -> std::process::Child + '_ {
    let addresses = forestall::run::cluster::free_loopback_addresses(2).expect("ports");
    std::fs::write(dir.join("hosts"), addresses.join("\n")).expect("hosts");
    move |process: &str, extra: &[&str], env: &[(&str, &str)]| {
        // the program's own flags (`--json`, `-v`) are global: they may follow `run`
        let mut args = crate::common::hostfile_args("job.toml", process);
        args.extend_from_slice(extra);
        crate::common::spawn_in(dir, &args, env.iter().copied())
    }
}

/// Waits for both processes.
fn both(zero: std::process::Child, one: std::process::Child) -> (Output, Output) {
    (
        zero.wait_with_output().expect("ends"),
        one.wait_with_output().expect("ends"),
    )
}

#[test]
fn two_processes_train_the_same_parameters_as_four_threads() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir);
    for policy in ["bsp", "rapid-reassign", "forestall"] {
        let threads = forestall(
            dir,
            &[
                "--json",
                "run",
                "job.toml",
                "--policy",
                policy,
                "--out",
                &format!("t-{policy}"),
            ],
        );
        assert!(
            threads.status.success(),
            "{}",
            String::from_utf8_lossy(&threads.stderr)
        );
        let out = format!("p-{policy}");
        let procs = forestall(
            dir,
            &[
                "--json",
                "run",
                "job.toml",
                "--policy",
                policy,
                "--processes",
                "2",
                "--threads",
                "2",
                "--out",
                &out,
            ],
        );
        assert!(
            procs.status.success(),
            "{}",
            String::from_utf8_lossy(&procs.stderr)
        );
        assert_eq!(
            digest(&procs),
            digest(&threads),
            "{policy}: 2 × 2 processes vs 4 threads"
        );
        // one output directory; unit parts from both processes; every
        // (iteration, partition, unit) counted once
        let trace = read_trace_dir(&dir.join(&out).join("trace")).expect("trace reads");
        assert!(
            trace.units.iter().any(|u| u.process == 1),
            "{policy}: process 1 wrote units"
        );
        let mut keys: Vec<(u64, u32, u32)> = trace
            .units
            .iter()
            .map(|u| (u.iteration, u.partition, u.unit))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(
            keys.len(),
            8 * 16 * 2,
            "{policy}: every unit of every iteration"
        );
        assert!(dir.join(&out).join("summary.json").exists());
        // one job clock: under bsp every unit, whichever process ran it, lies
        // within its iteration's span as the coordinator recorded it (1 ms of
        // slack; peer policies hand out units after a worker first reports)
        if policy == "bsp" {
            every_unit_within_its_iteration(&trace, policy);
        }
    }
}

#[test]
fn bad_hostfiles_and_process_indices_are_refused() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir);
    let cases = [
        (
            "127.0.0.1:4100\n127.0.0.1:4100\n",
            "0",
            "hosts:2: '127.0.0.1:4100' is listed twice",
        ),
        ("127.0.0.1\n", "0", "hosts:1: '127.0.0.1' is not host:port"),
        ("192.168.1.20:4100\n", "0", "is not a loopback address"),
        (
            "127.0.0.1:4100\n127.0.0.1:4101\n",
            "2",
            "--process 2 is not in hostfile hosts, which lists processes 0..2",
        ),
    ];
    for (hosts, process, needle) in cases {
        std::fs::write(dir.join("hosts"), hosts).expect("hosts");
        let mut args = crate::common::hostfile_args("job.toml", process);
        args.extend(["--out", "x"]);
        let o = forestall(dir, &args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{needle}: {err}");
        assert!(err.contains(needle), "expected {needle:?} in {err}");
        assert!(!dir.join("x").exists(), "nothing written for {needle}");
    }
    let o = forestall(
        dir,
        &[
            "run",
            "job.toml",
            "--processes",
            "2",
            "--threads",
            "2",
            "--workers",
            "3",
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr)
        .contains("--workers 3 disagrees with 2 processes × 2 threads"));
}

/// Fewer parameter shards than workers stay single-process: across
/// processes one that owns no shard would not stop with the others when the
/// training diverges.
#[test]
fn fewer_shards_than_workers_are_refused_across_processes() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir);
    let job = std::fs::read_to_string(dir.join("job.toml")).expect("job");
    let job = job.replace("count = 4\n", "count = 4\nshards = 2\n");
    std::fs::write(dir.join("job.toml"), job).expect("job");
    let o = forestall(
        dir,
        &[
            "run",
            "job.toml",
            "--processes",
            "2",
            "--threads",
            "2",
            "--out",
            "p",
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("[workers] shards = 2 with 4 workers in several processes"),
        "{err}"
    );
    // In one process the same job runs.
    let o = forestall(dir, &["run", "job.toml", "--out", "t"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn processes_with_different_plans_refuse_to_run() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir);
    let addresses = forestall::run::cluster::free_loopback_addresses(2).expect("ports");
    std::fs::write(dir.join("hosts"), addresses.join("\n")).expect("hosts");
    let start = |process: &str, iterations: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_forestall"))
            .args(crate::common::hostfile_args("job.toml", process))
            .args([
                "--iterations",
                iterations,
                "--out",
                &format!("out{process}"),
            ])
            .current_dir(dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("starts")
    };
    let a = start("0", "5");
    let b = start("1", "6");
    for child in [a, b] {
        let o = child.wait_with_output().expect("ends");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(
            err.contains("every process must run the same job file and flags"),
            "{err}"
        );
    }
}

#[test]
fn a_peer_that_never_connects_times_out_naming_it() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir);
    let addresses = forestall::run::cluster::free_loopback_addresses(2).expect("ports");
    std::fs::write(dir.join("hosts"), addresses.join("\n")).expect("hosts");
    // process 1 alone: process 0 never starts
    let started = std::time::Instant::now();
    let o = forestall(
        dir,
        &[
            "run",
            "job.toml",
            "--hostfile",
            "hosts",
            "--process",
            "1",
            "--threads",
            "2",
            "--connect-timeout",
            "2",
            "--out",
            "x",
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "not every peer connected within 2 s (process 0 at {})",
            addresses[0]
        )),
        "{err}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "no hang"
    );
}

#[test]
fn the_cluster_section_of_the_job_file_launches_processes() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir);
    let mut text = std::fs::read_to_string(dir.join("job.toml")).expect("job");
    text.push_str("[cluster]\nprocesses = 2\nthreads = 2\n");
    std::fs::write(dir.join("cluster.toml"), text).expect("job");
    let o = forestall(dir, &["--json", "run", "cluster.toml", "--out", "c"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let trace = read_trace_dir(&dir.join("c/trace")).expect("trace reads");
    assert!(trace.units.iter().any(|u| u.process == 1), "process 1 ran");
    // --max-restarts supervises processes the launcher starts
    let o = forestall(
        dir,
        &["run", "job.toml", "--max-restarts", "2", "--out", "d"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--max-restarts needs --processes"), "{err}");
    assert!(!dir.join("d").exists());
}

/// Processes a scheduler starts find their place in the environment, with no
/// hostfile: `FORESTALL_PROCESS`/`FORESTALL_HOSTS`, and a Slurm step's task
/// variables (two "nodes" 127.0.0.1 and 127.0.0.2 of one task each, the
/// threads from `SLURM_CPUS_PER_TASK`). Both end with the parameters of the
/// same job on 4 threads.
#[test]
fn processes_placed_by_the_environment_train_as_threads_do() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir);
    let threads = forestall(dir, &["--json", "run", "job.toml", "--out", "t"]);
    assert!(
        threads.status.success(),
        "{}",
        String::from_utf8_lossy(&threads.stderr)
    );
    let reference = digest(&threads);
    let addresses = forestall::run::cluster::free_loopback_addresses(2).expect("ports");
    let port = addresses[0]
        .rsplit_once(':')
        .expect("host:port")
        .1
        .to_owned();
    let generic = |process: u32| -> Vec<(String, String)> {
        vec![
            ("FORESTALL_PROCESS".into(), process.to_string()),
            ("FORESTALL_HOSTS".into(), addresses.join(",")),
        ]
    };
    let slurm = |process: u32| -> Vec<(String, String)> {
        [
            ("SLURM_JOB_ID", "77".to_owned()),
            ("SLURM_STEP_ID", "0".to_owned()),
            ("SLURM_PROCID", process.to_string()),
            ("SLURM_NTASKS", "2".to_owned()),
            ("SLURM_JOB_NODELIST", "127.0.0.[1-2]".to_owned()),
            ("SLURM_TASKS_PER_NODE", "1(x2)".to_owned()),
            ("SLURMD_NODENAME", format!("127.0.0.{}", process + 1)),
            ("SLURM_CPUS_PER_TASK", "2".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    };
    for (form, env, flags) in [
        (
            "generic",
            &generic as &dyn Fn(u32) -> Vec<(String, String)>,
            vec!["--threads", "2"],
        ),
        ("slurm", &slurm, vec!["--base-port", port.as_str()]),
    ] {
        // one output directory for both, as on shared storage
        let start = |process: u32| {
            let mut args = vec!["--json", "run", "job.toml", "--out", form];
            args.extend_from_slice(&flags);
            crate::common::spawn_in(dir, &args, env(process))
        };
        let (a, b) = (start(0), start(1));
        let (a, b) = (
            a.wait_with_output().expect("ends"),
            b.wait_with_output().expect("ends"),
        );
        for o in [&a, &b] {
            assert!(
                o.status.success(),
                "{form}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        assert_eq!(
            digest(&a),
            reference,
            "{form}: 2 placed processes vs 4 threads"
        );
        let trace = read_trace_dir(&dir.join(form).join("trace")).expect("trace reads");
        assert!(
            trace.units.iter().any(|u| u.process == 1),
            "{form}: process 1's parts"
        );
        assert!(
            trace.units.iter().any(|u| u.process == 0),
            "{form}: process 0's parts"
        );
    }
    // the directory of a finished run is not taken over
    let args = ["run", "job.toml", "--threads", "2", "--out", "generic"];
    let o = crate::common::spawn_in(dir, &args, generic(0))
        .wait_with_output()
        .expect("runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("holds another run"), "{err}");
}

/// An environment that names no place for this process is refused before
/// anything runs, naming the variable.
#[test]
fn a_scheduler_environment_that_does_not_fit_is_refused() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir);
    for (env, expected) in [
        (
            vec![("FORESTALL_PROCESS", "0")],
            "FORESTALL_HOSTS is not set",
        ),
        (
            vec![
                ("FORESTALL_PROCESS", "3"),
                ("FORESTALL_HOSTS", "127.0.0.1:9000"),
            ],
            "FORESTALL_PROCESS=\"3\": FORESTALL_HOSTS lists 1 processes",
        ),
        (
            vec![
                ("SLURM_STEP_ID", "0"),
                ("SLURM_PROCID", "0"),
                ("SLURM_JOB_NODELIST", "node[01-"),
            ],
            "SLURM_JOB_NODELIST=\"node[01-\": a bracket is not closed",
        ),
        (
            vec![
                ("SLURM_STEP_ID", "0"),
                ("SLURM_PROCID", "0"),
                ("SLURM_JOB_NODELIST", "node[01-02]"),
            ],
            "node01:29600 is not a loopback address",
        ),
    ] {
        let o =
            crate::common::spawn_in(dir, &["run", "job.toml", "--out", "x"], env.iter().copied())
                .wait_with_output()
                .expect("runs");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{env:?}: {err}");
        assert!(
            err.contains(expected),
            "{env:?}: expected '{expected}' in {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
        assert!(!dir.join("x").exists(), "{env:?} wrote");
    }
}

/// Processes started by hand share no clock origin. Process 1's wall clock
/// is shifted 5 s below the synchronisation (the test hook shifts what the
/// process reads; the sync code is not told): the clock exchange with
/// process 0 measures the shift to within its round trip, and every unit of
/// both processes lies within its iteration's span on the one job clock.
#[test]
fn a_host_whose_clock_is_off_is_synchronised_to_process_0() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir);
    let start = by_hand(dir);
    let extra = ["-v", "--json", "--policy", "bsp", "--out", "o"];
    let shift = forestall::run::cluster::CLOCK_SHIFT_VAR;
    let (zero, one) = both(
        start("0", &extra, &[(shift, "0")]),
        start("1", &extra, &[(shift, "-5000000")]),
    );
    for o in [&zero, &one] {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let err = String::from_utf8_lossy(&one.stderr);
    let line = err
        .lines()
        .find(|l| l.contains("the job clock is process 0's"))
        .unwrap_or_else(|| panic!("no clock line in {err}"));
    let number_after = |key: &str| -> i64 {
        let rest = &line[line.find(key).expect(key) + key.len()..];
        rest.trim_start()
            .split(' ')
            .next()
            .and_then(|n| n.trim_start_matches('+').parse().ok())
            .unwrap_or_else(|| panic!("a number after '{key}' in {line}"))
    };
    let offset = number_after("wall clock is");
    let round_trip = number_after("best round trip");
    assert!(
        (offset - 5_000_000).abs() <= round_trip.max(1),
        "offset {offset} µs against a 5 s shift, round trip {round_trip} µs: {line}"
    );
    let trace = read_trace_dir(&dir.join("o").join("trace")).expect("trace reads");
    assert!(trace.units.iter().any(|u| u.process == 1));
    every_unit_within_its_iteration(&trace, "shifted clock");
}

/// Two processes whose output directories are apart (hosts without shared
/// storage) with `--gather`: process 1's trace parts land in process 0's
/// directory, the trace reads as a one-directory run's (every unit of every
/// iteration, on one clock) and `analyze` reads it; process 1 keeps its
/// copy. `--gather` where nothing is to gather is refused.
#[test]
fn gather_brings_every_process_trace_parts_to_process_0() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir);
    let start = by_hand(dir);
    let (zero, one) = both(
        start("0", &["--json", "--out", "here", "--gather"], &[]),
        start("1", &["--json", "--out", "there", "--gather"], &[]),
    );
    for o in [&zero, &one] {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let trace = read_trace_dir(&dir.join("here/trace")).expect("trace reads");
    assert!(
        trace.units.iter().any(|u| u.process == 1),
        "process 1's units"
    );
    let mut keys: Vec<(u64, u32, u32)> = trace
        .units
        .iter()
        .map(|u| (u.iteration, u.partition, u.unit))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), 8 * 16 * 2, "every unit of every iteration");
    every_unit_within_its_iteration(&trace, "gathered");
    let kept = read_trace_dir(&dir.join("there/trace")).expect("kept");
    assert!(kept.units.iter().all(|u| u.process == 1) && !kept.units.is_empty());
    for tool in ["analyze", "report"] {
        let o = forestall(dir, &[tool, "here"]);
        assert!(
            o.status.success(),
            "{tool}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    for (extra, says) in [
        (&["--out", "alone"][..], "this job runs as one process"),
        (
            &["--processes", "2", "--out", "launched"][..],
            "share one output directory",
        ),
    ] {
        let o = forestall(dir, &[&["run", "job.toml", "--gather"][..], extra].concat());
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains("--gather") && err.contains(says), "{err}");
        assert!(
            !dir.join(extra[extra.len() - 1]).exists(),
            "nothing written"
        );
    }
}

/// A process that does not send its parts (started without `--gather`):
/// process 0 ends within its connect timeout with an error naming it and
/// where the parts are; the training's model and summary are written.
#[test]
fn a_gather_that_a_process_misses_names_it_and_keeps_the_results() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir);
    let start = by_hand(dir);
    let started = std::time::Instant::now();
    let timeout = ["--connect-timeout", "3"];
    let (zero, one) = both(
        start(
            "0",
            &[&timeout[..], &["--out", "here", "--gather"]].concat(),
            &[],
        ),
        start("1", &[&timeout[..], &["--out", "there"]].concat(), &[]),
    );
    assert!(
        one.status.success(),
        "{}",
        String::from_utf8_lossy(&one.stderr)
    );
    let err = String::from_utf8_lossy(&zero.stderr);
    assert_eq!(zero.status.code(), Some(2), "{err}");
    assert!(
        err.contains("gathering the trace") && err.contains("process 1"),
        "{err}"
    );
    assert!(err.contains("still in its own"), "{err}");
    assert!(dir.join("here/model.json").exists() && dir.join("here/summary.json").exists());
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "no hang"
    );
}

/// A host whose clock is off process 0's by more than the connect timeout
/// (5 s against 3 s, shifted below the clock exchange) is refused with an
/// error naming it and the offset; process 0 stops too (exit 2 for both,
/// no hang).
#[test]
fn a_clock_off_by_more_than_the_connect_timeout_is_refused() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir);
    let start = by_hand(dir);
    let extra = ["--connect-timeout", "3", "--out", "o"];
    let shift = forestall::run::cluster::CLOCK_SHIFT_VAR;
    let started = std::time::Instant::now();
    let (zero, one) = both(
        start("0", &extra, &[(shift, "0")]),
        start("1", &extra, &[(shift, "-5000000")]),
    );
    let err = String::from_utf8_lossy(&one.stderr);
    assert_eq!(one.status.code(), Some(2), "{err}");
    assert!(
        err.contains("process 1: its wall clock is 5.0 s off process 0's")
            && err.contains("--connect-timeout (3 s)"),
        "{err}"
    );
    assert_eq!(
        zero.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&zero.stderr)
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "no hang"
    );
    assert!(!dir.join("o/summary.json").exists());
}
