//! Hosts as network namespaces: each "host" is a namespace with its own
//! non-loopback address on a bridge that lives in a namespace of its own
//! (so the root namespace's filters never see the traffic), and one
//! forestall process runs in each with `--hostfile` and `--allow-remote`.
//! The harness connects only to addresses of namespaces it made, and
//! removes them (their veths go with them) when the test ends, also when it
//! fails; names carry the test process's id and a counter, and leftovers of
//! a killed run are removed at the next start by their prefix.

use std::path::Path;
use std::process::{Child, Command, Output};

use crate::common::adult_path;

/// The library's harness ([`forestall::bench::netns`]), with the built
/// binary and panics for failures.
struct Hosts(forestall::bench::netns::Hosts);

impl Hosts {
    fn new(n: usize) -> Self {
        Self(forestall::bench::netns::Hosts::new(n).expect("namespaces"))
    }

    fn addresses(&self) -> &[String] {
        &self.0.addresses
    }

    /// `forestall ARGS` in host `i`'s namespace, in `dir`.
    fn forestall(&self, i: usize, dir: &Path, args: &[&str]) -> Child {
        self.forestall_with(i, dir, args, &[])
    }

    /// `forestall ARGS` in host `i`'s namespace, in `dir`, with `env` added.
    fn forestall_with(&self, i: usize, dir: &Path, args: &[&str], env: &[(&str, String)]) -> Child {
        let exe = Path::new(env!("CARGO_BIN_EXE_forestall"));
        self.0
            .forestall(i, exe, dir, args, env)
            .expect("ip netns exec runs")
    }

    /// Writes `dir/hosts`: the first `n` hosts at `port`.
    fn write_hostfile(&self, dir: &Path, n: usize, port: u16) {
        self.0.write_hostfile(dir, n, port).expect("hosts");
    }

    /// A shell command in host `i`'s namespace.
    fn shell(&self, i: usize, script: &str) -> Child {
        self.0.shell(i, script).expect("ip netns exec runs")
    }
}

fn write_job(dir: &Path) {
    std::fs::write(
        dir.join("job.toml"),
        format!(
            "[job]\nname = \"hosts\"\niterations = 8\nseed = 4\n[data]\npath = \"{}\"\npartitions = 16\nunits_per_partition = 2\nbatch_fraction = 0.25\n[workers]\ncount = 4\npace_ns_per_row = 3000\n[straggler]\npattern = \"persistent\"\nworkers = [3]\nfactor = 4.0\n",
            adult_path().display()
        ),
    )
    .expect("job");
    private_file(dir, "token", "a-secret-for-this-test");
}

/// `dir/name` holding `text`, readable by its owner only (a token file).
fn private_file(dir: &Path, name: &str, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(dir.join(name), text).expect("token");
    std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(0o600))
        .expect("chmod");
}

/// A port for a test's hosts: `base` plus a share of the process id.
fn port(base: u16) -> u16 {
    base + (std::process::id() % 90) as u16
}

/// Waits for processes 0 and 1, which must both succeed; process 0's
/// `forestall run JOB` as process `process` of the namespaced hosts in
/// `dir/hosts`: 2 threads, remote peers allowed, `dir/token`, waiting
/// `timeout` s to connect, then `rest` (its output: `--out DIR`, or
/// `--resume DIR`).
fn host_args<'a>(
    job: &'a str,
    process: &'a str,
    timeout: &'a str,
    rest: [&'a str; 2],
) -> Vec<&'a str> {
    let mut args = crate::common::hostfile_args(job, process);
    args.extend([
        "--allow-remote",
        "--token-file",
        "token",
        "--connect-timeout",
        timeout,
        rest[0],
        rest[1],
    ]);
    args
}

/// parameter digest.
fn joined_digest(zero: Child, one: Child) -> String {
    let (zero, one) = (ended(zero), ended(one));
    for o in [&zero, &one] {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    crate::common::summary_digest(&zero)
}

fn ended(child: Child) -> Output {
    child.wait_with_output().expect("ends")
}

/// Two hosts of 2 threads each end with the parameters of 4 threads in one
/// process, under `bsp`, `rapid-reassign` and `forestall`; a third host
/// that connects to process 0 first with garbage, and one that connects and
/// stays silent, change nothing.
#[test]
#[ignore = "needs root (network namespaces)"]
fn namespaced_hosts_train_the_parameters_of_threads() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir);
    let hosts = Hosts::new(3);
    let port = port(29_700);
    // the third host: garbage first, then a client that says nothing
    let rogue = || {
        hosts.shell(
            2,
            &format!(
                "a=/dev/tcp/{}/{port}; \
                 for i in $(seq 100); do (: > $a) 2>/dev/null && break; sleep 0.1; done; \
                 exec 3<>$a; printf 'x\\x01\\x00\\x00\\x00\\x00\\x00\\x00garbage' >&3; \
                 exec 3>&-; exec 4<>$a; sleep 8",
                hosts.addresses()[0]
            ),
        )
    };
    for (policy, err) in hosts_match_threads(&hosts, dir, "job.toml", port, Some(&rogue)) {
        assert!(
            err.contains(&format!(
                "refused a connection from {}",
                hosts.addresses()[2]
            )),
            "{policy}: the rogue is logged by its address: {err}"
        );
    }
}

/// Under `bsp`, `rapid-reassign` and `forestall`, `job` on 2 namespaced
/// hosts × 2 threads ends with the parameters of 4 threads in one process;
/// `alongside` starts a client of its own while process 0 waits for its
/// peer. Returns each policy's process-0 stderr.
fn hosts_match_threads(
    hosts: &Hosts,
    dir: &Path,
    job: &str,
    port: u16,
    alongside: Option<&dyn Fn() -> Child>,
) -> Vec<(&'static str, String)> {
    private_file(dir, "token", "a-secret-for-this-test");
    hosts.write_hostfile(dir, 2, port);
    let mut errs = Vec::new();
    for policy in ["bsp", "rapid-reassign", "forestall"] {
        let threads = crate::common::forestall_in(
            dir,
            &[
                "--json",
                "run",
                job,
                "--policy",
                policy,
                "--out",
                &format!("t-{policy}"),
            ],
        );
        assert!(
            threads.status.success(),
            "{policy}: {}",
            String::from_utf8_lossy(&threads.stderr)
        );
        let out = format!("h-{policy}");
        let args = |i: &'static str| {
            let mut args = host_args(job, i, "60", ["--out", &out]);
            args.extend(["--json", "--policy", policy]);
            args
        };
        let zero = hosts.forestall(0, dir, &args("0"));
        let mut other = alongside.map(|start| start());
        if other.is_some() {
            std::thread::sleep(std::time::Duration::from_millis(600));
        }
        let one = hosts.forestall(1, dir, &args("1"));
        let (zero, one) = (ended(zero), ended(one));
        if let Some(c) = other.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for o in [&zero, &one] {
            assert!(
                o.status.success(),
                "{policy}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        assert_eq!(
            crate::common::summary_digest(&zero),
            crate::common::summary_digest(&threads),
            "{policy}: {job} on 2 namespaced hosts × 2 threads vs 4 threads"
        );
        errs.push((policy, String::from_utf8_lossy(&zero.stderr).into_owned()));
    }
    errs
}

/// Without a token a job across hosts does not start; with another host's
/// token the peers refuse each other and both end within the timeout,
/// naming the missing process.
#[test]
#[ignore = "needs root (network namespaces)"]
fn namespaced_hosts_without_the_same_token_do_not_join() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir);
    private_file(dir, "other", "another-secret");
    let hosts = Hosts::new(2);
    let port = port(29_900);
    hosts.write_hostfile(dir, 2, port);
    let base = [
        "run",
        "job.toml",
        "--hostfile",
        "hosts",
        "--threads",
        "2",
        "--allow-remote",
    ];
    let o = ended(hosts.forestall(
        0,
        dir,
        &[&base[..], &["--process", "0", "--out", "x"]].concat(),
    ));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("needs a token"), "{err}");
    let started = std::time::Instant::now();
    let zero = hosts.forestall(
        0,
        dir,
        &[
            &base[..],
            &[
                "--process",
                "0",
                "--token-file",
                "token",
                "--connect-timeout",
                "3",
                "--out",
                "y",
            ],
        ]
        .concat(),
    );
    let one = hosts.forestall(
        1,
        dir,
        &[
            &base[..],
            &[
                "--process",
                "1",
                "--token-file",
                "other",
                "--connect-timeout",
                "3",
                "--out",
                "y",
            ],
        ]
        .concat(),
    );
    for o in [ended(zero), ended(one)] {
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains("not every peer connected within 3 s"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "no hang"
    );
}

/// A host's process killed with SIGKILL in the middle of the job: the other
/// host's process stops within seconds with one line naming it (exit 2, no
/// hang), and both, started again with `--resume`, continue from the newest
/// complete checkpoint and end with the parameters of the uninterrupted job.
#[test]
#[ignore = "needs root (network namespaces)"]
fn a_host_killed_mid_run_stops_the_job_and_it_resumes_bit_identically() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir);
    let text = std::fs::read_to_string(dir.join("job.toml")).expect("job");
    let text = text
        .replace("iterations = 8", "iterations = 40")
        .replace("pace_ns_per_row = 3000", "pace_ns_per_row = 40000")
        + "[checkpoint]\nevery = 4\n";
    std::fs::write(dir.join("job.toml"), text).expect("job");
    let threads = crate::common::forestall_in(dir, &["--json", "run", "job.toml", "--out", "t"]);
    assert!(
        threads.status.success(),
        "{}",
        String::from_utf8_lossy(&threads.stderr)
    );
    let expected = crate::common::summary_digest(&threads);
    let hosts = Hosts::new(2);
    let port = port(30_100);
    hosts.write_hostfile(dir, 2, port);
    let first = |i: &'static str| {
        let mut args = host_args("job.toml", i, "30", ["--out", "o"]);
        args.push("--json");
        args
    };
    let zero = hosts.forestall(0, dir, &first("0"));
    let one = hosts.forestall(1, dir, &first("1"));
    // until a checkpoint past the first two exists
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !dir.join("o/checkpoints/it-00000008").is_dir() {
        assert!(std::time::Instant::now() < deadline, "no checkpoint at 8");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let status = Command::new("kill")
        .args(["-KILL", &one.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let _ = ended(one);
    let killed = std::time::Instant::now();
    let zero = ended(zero);
    assert!(
        killed.elapsed() < std::time::Duration::from_secs(20),
        "process 0 stopped within seconds"
    );
    let err = String::from_utf8_lossy(&zero.stderr);
    assert_eq!(zero.status.code(), Some(2), "{err}");
    assert!(err.contains("lost the connection to process 1"), "{err}");
    assert!(
        !err.contains("panicked at"),
        "one line, not a backtrace: {err}"
    );
    assert!(!dir.join("o/summary.json").exists());
    let again = |i: &'static str| {
        let mut args = host_args("job.toml", i, "30", ["--resume", "o"]);
        args.push("--json");
        args
    };
    let zero = hosts.forestall(0, dir, &again("0"));
    let one = hosts.forestall(1, dir, &again("1"));
    assert_eq!(joined_digest(zero, one), expected, "resumed across hosts");
}

/// Processes placed by the environment alone (`FORESTALL_PROCESS`,
/// `FORESTALL_HOSTS`, `FORESTALL_TOKEN_FILE`), as a scheduler starts them:
/// SIGTERM to every process (as Slurm preempts) stops them at one iteration
/// with a checkpoint and exit 143, and the same commands again (a requeued
/// job, `--resume-if-any`) continue to the uninterrupted parameters.
#[test]
#[ignore = "needs root (network namespaces)"]
fn hosts_placed_by_the_environment_stop_on_sigterm_and_continue_when_requeued() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    crate::preempt::write_job(dir);
    private_file(dir, "token", "a-secret-for-this-test");
    let threads = crate::common::forestall_in(dir, &["--json", "run", "job.toml", "--out", "t"]);
    assert!(
        threads.status.success(),
        "{}",
        String::from_utf8_lossy(&threads.stderr)
    );
    let expected = crate::common::summary_digest(&threads);
    let hosts = Hosts::new(2);
    let port = port(30_300);
    let env = |i: usize| {
        vec![
            ("FORESTALL_PROCESS", i.to_string()),
            (
                "FORESTALL_HOSTS",
                format!(
                    "{}:{port},{}:{port}",
                    hosts.addresses()[0],
                    hosts.addresses()[1]
                ),
            ),
            (
                "FORESTALL_TOKEN_FILE",
                dir.join("token").display().to_string(),
            ),
        ]
    };
    let args = [
        "--json",
        "run",
        "job.toml",
        "--threads",
        "2",
        "--allow-remote",
        "--out",
        "o",
        "--resume-if-any",
    ];
    let zero = hosts.forestall_with(0, dir, &args, &env(0));
    let one = hosts.forestall_with(1, dir, &args, &env(1));
    let pids = [zero.id(), one.id()];
    let zero = crate::preempt::sigterm_after(zero, 3, &pids);
    let one = crate::preempt::ended(one);
    for (i, e) in [(0, &zero), (1, &one)] {
        assert_eq!(e.status.code(), Some(143), "process {i}: {}", e.stderr);
    }
    let at = zero.stopped_at();
    assert_eq!(at, one.stopped_at(), "one iteration for every host");
    assert!(dir.join(format!("o/checkpoints/it-{at:08}")).is_dir());
    let zero = hosts.forestall_with(0, dir, &args, &env(0));
    let one = hosts.forestall_with(1, dir, &args, &env(1));
    assert_eq!(joined_digest(zero, one), expected, "requeued across hosts");
}

/// The CNN on 2 namespaced hosts × 2 threads ends with the parameters of 4
/// threads in one process under `bsp`, `rapid-reassign` and `forestall`
/// (3 iterations of 4 units of 8 chest X-rays, worker 1 4× slower).
#[test]
#[ignore = "needs root (network namespaces) and ../shared (the chest X-ray set)"]
fn namespaced_hosts_train_the_cnn_of_threads() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    let npz = crate::common::shared("datasets/pneumoniamnist.npz");
    std::fs::write(
        dir.join("cnn.toml"),
        format!(
            "[job]\nname = \"cnn-hosts\"\niterations = 3\nseed = 5\n[data]\npath = \"{}\"\npartitions = 4\nunits_per_partition = 1\nbatch_fraction = 0.0083\n[model]\nkind = \"cnn\"\neval_every = 100\n[workers]\ncount = 4\n[straggler]\npattern = \"persistent\"\nworkers = [1]\nfactor = 4.0\n",
            npz.display()
        ),
    )
    .expect("job");
    let hosts = Hosts::new(2);
    hosts_match_threads(&hosts, dir, "cnn.toml", port(30_500), None);
}

/// A hostfile naming an address no namespace holds: the process given that
/// line cannot listen there and says so, and process 0 gives up at its
/// connect timeout naming the missing process and its address; both exit 2
/// within the timeout.
#[test]
#[ignore = "needs root (network namespaces)"]
fn a_hostfile_address_that_no_host_holds_is_named() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir);
    let hosts = Hosts::new(2);
    let port = port(30_700);
    let nowhere = "10.77.0.99";
    std::fs::write(
        dir.join("hosts"),
        format!("{}:{port}\n{nowhere}:{port}\n", hosts.addresses()[0]),
    )
    .expect("hosts");
    let args = |i: &'static str| host_args("job.toml", i, "3", ["--out", "o"]);
    let started = std::time::Instant::now();
    let zero = hosts.forestall(0, dir, &args("0"));
    let one = hosts.forestall(1, dir, &args("1"));
    let (zero, one) = (ended(zero), ended(one));
    let err = String::from_utf8_lossy(&one.stderr);
    assert_eq!(one.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("cannot listen on {nowhere}:{port}")),
        "{err}"
    );
    let err = String::from_utf8_lossy(&zero.stderr);
    assert_eq!(zero.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("process 1 at {nowhere}:{port}")),
        "{err}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}

/// `slow-link` made real: with `disruptor = "tc"` each host's process
/// limits its own interface with tc while the schedule says its link is
/// slow. The parameters are those of threads without the pattern (BSP);
/// nothing is emulated (`send_us` 0), the time shows as the workers'
/// `transit_us` measured at shard 0, `analyze` names the link, and no limit
/// is left on the interfaces.
#[test]
#[ignore = "needs root (network namespaces)"]
fn a_link_limited_with_tc_shows_as_transit_and_is_named_by_analyze() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir);
    let text = std::fs::read_to_string(dir.join("job.toml"))
        .expect("job")
        .replace(
            "pattern = \"persistent\"\nworkers = [3]\nfactor = 4.0\n",
            "pattern = \"slow-link\"\nprobability = 0.4\nlink_mbps = 0.2\ndisruptor = \"tc\"\n",
        );
    std::fs::write(dir.join("tc.toml"), text).expect("job");
    let threads = crate::common::forestall_in(
        dir,
        &[
            "--json",
            "run",
            "tc.toml",
            "--pattern",
            "none",
            "--out",
            "t",
        ],
    );
    assert!(
        threads.status.success(),
        "{}",
        String::from_utf8_lossy(&threads.stderr)
    );
    let refused = crate::common::forestall_in(dir, &["run", "tc.toml", "--out", "alone"]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(err.contains("run the job's processes on hosts"), "{err}");
    let hosts = Hosts::new(2);
    let port = port(30_900);
    hosts.write_hostfile(dir, 2, port);
    let args = |i: &'static str| {
        let mut args = host_args("tc.toml", i, "30", ["--out", "o"]);
        args.push("--json");
        args
    };
    let zero = hosts.forestall(0, dir, &args("0"));
    let one = hosts.forestall(1, dir, &args("1"));
    assert_eq!(
        joined_digest(zero, one),
        crate::common::summary_digest(&threads),
        "the link changes no parameter"
    );
    let trace = forestall::trace::read_trace_dir(&dir.join("o/trace")).expect("trace");
    assert!(
        trace.units.iter().all(|u| u.send_us == 0),
        "nothing emulated"
    );
    let slowed: Vec<_> = trace
        .units
        .iter()
        .filter(|u| u.process == 1 && u.gt_link_mbps > 0.0)
        .map(|u| u.iteration)
        .collect();
    assert!(
        !slowed.is_empty(),
        "process 1's link is slow in some iteration"
    );
    let transit = |w: &forestall::trace::WorkerRecord| w.transit_us;
    let late = trace
        .workers
        .iter()
        .filter(|w| w.process == 1 && slowed.contains(&w.iteration))
        .map(transit)
        .max()
        .unwrap_or(0);
    // 16 units' 920 bytes at 0.2 Mbit/s: tens of ms at least
    assert!(late >= 20_000, "transit {late} µs");
    assert!(trace
        .workers
        .iter()
        .filter(|w| w.process == 0)
        .all(|w| w.transit_us == 0));
    let analysis = crate::common::forestall_in(dir, &["--json", "analyze", "o"]);
    let line: serde_json::Value = serde_json::from_slice(&analysis.stdout).expect("one JSON line");
    let per_worker = line["data"]["per_worker"].as_array().expect("per worker");
    // process 1's workers (2 and 3) send across the limited link; process
    // 0's share shard 0's host, and only real CPU noise may slow them
    for w in per_worker
        .iter()
        .filter(|w| w["worker"].as_u64() >= Some(2))
    {
        assert_eq!(w["slow_in"], "link", "{w}");
    }
    for i in 0..2 {
        let shown = std::process::Command::new("ip")
            .args([
                "netns",
                "exec",
                &hosts.0.namespace(i),
                "tc",
                "qdisc",
                "show",
            ])
            .output()
            .expect("tc runs");
        let shown = String::from_utf8_lossy(&shown.stdout);
        assert!(!shown.contains("tbf"), "host {i} keeps a limit: {shown}");
    }
}

/// A bench sweep on namespaced hosts: its row has the threads run's
/// parameters and the start and gather costs, and its run directory holds
/// the gathered trace alone (the other hosts' own copies and the token are
/// removed), so `analyze` reads the bench's traces.
#[test]
#[ignore = "needs root (network namespaces)"]
fn a_bench_on_namespaced_hosts_keeps_the_gathered_trace_alone() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir);
    std::fs::write(
        dir.join("h.toml"),
        "[bench]\nname = \"h\"\nabout = \"threads and hosts\"\n\n\
         [[sweep]]\nname = \"threads\"\njob = \"job.toml\"\npolicies = [\"bsp\"]\nseeds = [1]\niterations = 4\n\n\
         [[sweep]]\nname = \"hosts\"\njob = \"job.toml\"\nhosts = [2]\npolicies = [\"bsp\"]\nseeds = [1]\niterations = 4\nrelative_to = \"threads\"\n",
    )
    .expect("pipeline");
    let o = crate::common::forestall_in(dir, &["-q", "bench", "h.toml", "--out", "res"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows = crate::bench::rows_of(&dir.join("res/raw.parquet"));
    assert_eq!(rows.len(), 2);
    let (threads, hosts) = (&rows[0], &rows[1]);
    assert_eq!(hosts.sweep, "hosts");
    assert_eq!(hosts.params_sha256, threads.params_sha256);
    assert!(hosts.start_ms.is_some_and(|ms| ms > 0.0), "{hosts:?}");
    assert!(hosts.gather_s.is_some_and(|s| s > 0.0), "{hosts:?}");
    let mut runs: Vec<_> = std::fs::read_dir(dir.join("res/traces/hosts"))
        .expect("the hosts sweep's runs")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let run = runs.pop().expect("one run");
    assert!(run.join("trace").is_dir(), "process 0's trace");
    assert!(!run.join("peers").exists() && !run.join("token").exists());
    let o = crate::common::forestall_in(dir, &["analyze", "res/traces"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}
