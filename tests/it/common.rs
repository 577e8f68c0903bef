//! Helpers shared by the integration tests.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use forestall::run::{run_job, RunOutput};
use forestall::spec::load_workload;
use forestall::spec::{parse_job, validate, JobPlan};
use forestall::trace::TraceStamp;
use forestall::workload::Workload;

/// The committed Adult dataset.
pub fn adult_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/adult.parquet")
}

/// A validated plan from job text; `data.path` defaults to the Adult file.
pub fn plan(text: &str) -> JobPlan {
    let spec = parse_job(text, None).expect("test job parses");
    validate(&spec, text, None).expect("test job is valid")
}

/// Logistic regression on the Adult dataset, loaded once per test binary.
pub fn adult() -> Arc<dyn Workload> {
    static DATA: OnceLock<Arc<dyn Workload>> = OnceLock::new();
    Arc::clone(DATA.get_or_init(|| load_workload(&plan("")).expect("Adult loads")))
}

/// Runs `plan` on the Adult data with its trace in `dir`.
pub fn run_in(plan: &JobPlan, dir: &Path) -> RunOutput {
    run_workload_in(plan, adult(), dir)
}

/// Runs `plan` on `workload` with its trace in `dir`.
pub fn run_workload_in(plan: &JobPlan, workload: Arc<dyn Workload>, dir: &Path) -> RunOutput {
    let stamp = TraceStamp {
        job_id: plan.name.clone(),
        git_revision: "test".into(),
        plan_hash: plan.hash(),
        seed: plan.seed,
    };
    run_job(plan, workload, dir, stamp, None).expect("run succeeds")
}

/// Runs `plan` on a thread with its trace in `dir` and returns what `then`
/// makes of the output, failing the test with `hang` if the run does not end
/// within `limit` (a lost or twice-counted unit hangs an iteration).
pub fn run_within<R: Send + 'static>(
    plan: JobPlan,
    dir: &Path,
    limit: std::time::Duration,
    hang: &str,
    then: impl FnOnce(RunOutput, &Path) -> R + Send + 'static,
) -> R {
    let (done, finished) = std::sync::mpsc::channel();
    let path = dir.to_owned();
    std::thread::spawn(move || {
        let out = run_in(&plan, &path);
        let _ = done.send(then(out, &path));
    });
    finished.recv_timeout(limit).expect(hang)
}

/// Runs `plan` with its trace in a throw-away directory.
pub fn run(plan: &JobPlan) -> RunOutput {
    let dir = tempfile::tempdir().expect("temp dir");
    run_in(plan, dir.path())
}

/// Four paced workers, worker 3 persistently 4× slower, 16 partitions × 4 units.
pub const STRAGGLER: &str = r#"
[job]
iterations = 12
seed = 21
[data]
partitions = 16
units_per_partition = 4
batch_fraction = 0.5
[workers]
count = 4
pace_ns_per_row = 4000
[straggler]
pattern = "persistent"
workers = [3]
factor = 4.0
"#;

/// A file under `../shared` (the project's shared data, beside the checkout).
/// Tests that call this are `#[ignore = "needs ../shared"]`; run with
/// `--include-ignored` and without the file, they fail here saying so.
pub fn shared(relative: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared")
        .join(relative);
    assert!(
        path.exists(),
        "{} is missing: this test needs ../shared (the project's shared traces and datasets) beside the checkout",
        path.display()
    );
    path
}

/// Runs the built `forestall` binary with `args`.
pub fn forestall(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_forestall"))
        .args(args)
        .output()
        .expect("the binary runs")
}

/// The `data` of every line of a `--json` command's standard output.
pub fn json_data(stdout: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("a JSON line")["data"].clone())
        .collect()
}

/// Runs the built `forestall` binary with `args` in `dir` (no RUST_LOG).
pub fn forestall_in(dir: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_forestall"))
        .args(args)
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .output()
        .expect("forestall runs")
}

/// Starts `forestall ARGS` in `dir` with `env` added, its output piped.
pub fn spawn_in<K, V>(
    dir: &Path,
    args: &[&str],
    env: impl IntoIterator<Item = (K, V)>,
) -> std::process::Child
where
    K: AsRef<std::ffi::OsStr>,
    V: AsRef<std::ffi::OsStr>,
{
    std::process::Command::new(env!("CARGO_BIN_EXE_forestall"))
        .args(args)
        .envs(env)
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("forestall starts")
}

/// `.npy` bytes of `descr` with `shape` and raw `data`.
pub fn npy(descr: &str, shape: &[usize], data: &[u8]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}\n");
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    out.extend(data);
    out
}

/// The trained parameters' digest in the summary line of a `--json` run.
pub fn summary_digest(o: &std::process::Output) -> String {
    let stdout = String::from_utf8_lossy(&o.stdout);
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["type"] == "summary")
        .and_then(|v| v["data"]["params_sha256"].as_str().map(str::to_owned))
        .unwrap_or_else(|| {
            panic!(
                "no summary in {stdout} / {}",
                String::from_utf8_lossy(&o.stderr)
            )
        })
}

/// Every copy's action of every unit, by (iteration, partition, unit).
pub type Ledger = std::collections::BTreeMap<(u64, u32, u32), Vec<forestall::trace::UnitAction>>;

/// Every copy of every unit in the trace, by (iteration, partition, unit).
pub fn ledger(trace: &forestall::trace::TraceSet) -> Ledger {
    let mut ledger = Ledger::new();
    for u in &trace.units {
        ledger
            .entry((u.iteration, u.partition, u.unit))
            .or_default()
            .push(u.action);
    }
    ledger
}

/// A validated plan from `text` (a job with `[workers] count = 1`) for
/// `workers` workers under `pattern` (a `[straggler]` line) and `policy`;
/// under a pattern, paced at `pace_ns_per_row`, so that a unit lasts long
/// enough for the policies to move work.
pub fn plan_under(
    text: &str,
    workers: u32,
    pattern: &str,
    policy: &str,
    pace_ns_per_row: u64,
) -> JobPlan {
    let workers = match pattern {
        "pattern = \"none\"" => format!("count = {workers}"),
        _ => format!("count = {workers}\npace_ns_per_row = {pace_ns_per_row}"),
    };
    let text = format!(
        "{}[straggler]\n{pattern}\n[policy]\nname = \"{policy}\"\n",
        text.replace("count = 1", &workers)
    );
    let spec = parse_job(&text, None).expect("parses");
    validate(&spec, &text, None).expect("valid")
}

/// Runs `forestall run` on `job` (written to `dir/job.toml`) with `extra`
/// flags; expects exit 2, `expected` in stderr, no panic and no output.
pub fn refused_in(dir: &Path, job: &str, extra: &[&str], expected: &str) {
    std::fs::write(dir.join("job.toml"), job).expect("job");
    let mut args = vec!["run", "job.toml", "--out", "out"];
    args.extend_from_slice(extra);
    let o = forestall_in(dir, &args);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{expected}: {stderr}");
    assert!(
        stderr.contains(expected),
        "expected '{expected}' in: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        !dir.join("out").exists(),
        "nothing is written for a refused job"
    );
}

/// Trains `text` (a job with `[workers] count = 1`, see [`plan_under`]) on
/// `workload` at W = 1 under `bsp`, and at W = 2 and 4 with worker 1
/// persistently 4× slower (paced at `pace_ns_per_row`) under
/// `rapid-reassign`, `forestall` and `speculate`. Asserts that every run ends
/// with the parameters `reference` and that each of those policies moved
/// work (else the run shows nothing); returns each run's policy and trace
/// directory.
pub fn same_digest_under_moving_policies(
    text: &str,
    workload: &Arc<dyn Workload>,
    pace_ns_per_row: u64,
    reference: &str,
) -> Vec<(&'static str, tempfile::TempDir)> {
    let slowed = "pattern = \"persistent\"\nworkers = [1]\nfactor = 4.0";
    let mut runs = Vec::new();
    for (workers, pattern, policy) in [
        (1, "pattern = \"none\"", "bsp"),
        (2, slowed, "rapid-reassign"),
        (4, slowed, "forestall"),
        (4, slowed, "speculate"),
    ] {
        let p = plan_under(text, workers, pattern, policy, pace_ns_per_row);
        let dir = tempfile::tempdir().expect("dir");
        let out = run_workload_in(&p, Arc::clone(workload), dir.path());
        assert_eq!(out.digest, reference, "{policy} at W = {workers}");
        if policy != "bsp" {
            assert!(
                out.units_reassigned + out.units_cloned > 0,
                "{policy} moved no work, so the test shows nothing"
            );
        }
        runs.push((policy, dir));
    }
    runs
}

/// `forestall run JOB` as process `process` of the job in `dir/hosts`,
/// with 2 threads: the start of every hand-started process's arguments.
pub fn hostfile_args<'a>(job: &'a str, process: &'a str) -> Vec<&'a str> {
    vec![
        "run",
        job,
        "--hostfile",
        "hosts",
        "--process",
        process,
        "--threads",
        "2",
    ]
}
