//! Python interop: a run's traces read with pyarrow (`notebooks/check_trace.py`)
//! and the trace tour notebook executed headless with nbclient.
//!
//! These tests need `python3` with `notebooks/requirements.txt` installed, so
//! they are `#[ignore = "needs python (…)"]`: `cargo test --release --
//! --include-ignored` runs them, and without the packages they fail saying
//! what to install.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::adult_path;

const INSTALL: &str = "python3 -m pip install -r notebooks/requirements.txt";

/// Executes the notebook in `argv[1]` with the kernel's working directory
/// `argv[2]`; writes nothing, and prints how many figures the cells rendered.
const EXECUTE_NOTEBOOK: &str = r#"
import sys
import nbclient
import nbformat

nb = nbformat.read(sys.argv[1], as_version=4)
client = nbclient.NotebookClient(
    nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": sys.argv[2]}}
)
client.execute()
figures = sum(
    "image/png" in out.get("data", {}) for cell in nb.cells for out in cell.get("outputs", [])
)
print(f"figures {figures}")
"#;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn describe(o: &Output) -> String {
    format!(
        "{}\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        text(&o.stdout),
        text(&o.stderr)
    )
}

/// Fails the test, saying what to install, unless `python3` can import `modules`.
fn require_python(modules: &[&str]) {
    let probe = Command::new("python3")
        .arg("-c")
        .arg(format!("import {}", modules.join(", ")))
        .output();
    let problem = match probe {
        Ok(o) if o.status.success() => return,
        Ok(o) => {
            let err = text(&o.stderr);
            let last = err.lines().last().unwrap_or("").to_owned();
            format!("python3 cannot import {} ({last})", modules.join(", "))
        }
        Err(e) => format!("python3 is not available ({e})"),
    };
    panic!(
        "{problem}: install Python 3.11 and run `{INSTALL}` (in {})",
        repo().display()
    );
}

/// A small run of the built binary, in a temp dir that lives as long as this.
struct SmallRun {
    tmp: tempfile::TempDir,
}

impl SmallRun {
    /// 6 iterations on 2 workers, evaluated every 2, with slowed units and three
    /// parts per table.
    fn new() -> Self {
        let tmp = tempfile::tempdir().expect("temp dir");
        let job = format!(
            "[job]\nname = \"interop\"\niterations = 6\n\
             [data]\npath = \"{}\"\npartitions = 8\nunits_per_partition = 2\n\
             [model]\neval_every = 2\n\
             [workers]\ncount = 2\n\
             [straggler]\npattern = \"slow-worker\"\nprobability = 0.5\ndelay_percent = 400\n\
             [trace]\npart_iterations = 2\n",
            adult_path().display()
        );
        std::fs::write(tmp.path().join("job.toml"), job).expect("write job");
        let o = Command::new(env!("CARGO_BIN_EXE_forestall"))
            .args(["run", "job.toml", "--out", "out", "-q"])
            .current_dir(tmp.path())
            .env_remove("RUST_LOG")
            .output()
            .expect("forestall runs");
        assert!(o.status.success(), "forestall run: {}", describe(&o));
        Self { tmp }
    }

    fn dir(&self) -> PathBuf {
        self.tmp.path().join("out")
    }

    fn part(&self, table: &str, name: &str) -> PathBuf {
        self.dir().join("trace").join(table).join(name)
    }
}

fn check_trace(dir: &Path) -> Output {
    Command::new("python3")
        .arg(repo().join("notebooks/check_trace.py"))
        .arg(dir)
        .output()
        .expect("python3 runs")
}

#[test]
#[ignore = "needs python (pyarrow)"]
fn check_trace_accepts_a_fresh_run() {
    require_python(&["pyarrow"]);
    let run = SmallRun::new();
    let o = check_trace(&run.dir());
    assert!(o.status.success(), "check_trace.py: {}", describe(&o));
    let out = text(&o.stdout);
    assert!(out.starts_with("OK "), "{out}");
    assert!(
        out.contains("6 iterations, 2 workers, 96 units, 12 worker rows, 9 parts"),
        "{out}"
    );
    assert_eq!(out.lines().count(), 1, "{out}");
}

#[test]
#[ignore = "needs python (pyarrow)"]
fn check_trace_skips_hidden_parts_like_forestall() {
    require_python(&["pyarrow"]);
    let run = SmallRun::new();
    // What a crash while writing a part leaves behind: readers skip it.
    std::fs::write(
        run.part("units", ".part-p000-00003.parquet.tmp"),
        b"half a part",
    )
    .expect("write tmp");
    let o = check_trace(&run.dir());
    assert!(o.status.success(), "check_trace.py: {}", describe(&o));
}

#[test]
#[ignore = "needs python (pyarrow)"]
fn check_trace_rejects_a_lost_part() {
    require_python(&["pyarrow"]);
    let run = SmallRun::new();
    std::fs::remove_file(run.part("units", "part-p000-00001.parquet")).expect("remove part");
    let o = check_trace(&run.dir());
    assert_eq!(o.status.code(), Some(1), "check_trace.py: {}", describe(&o));
    let err = text(&o.stderr);
    assert!(
        err.contains("units: 32 (iteration, partition, unit) keys of 6 iterations x 8 partitions x 2 units are missing"),
        "{err}"
    );
    assert!(o.stdout.is_empty(), "{}", describe(&o));
}

#[test]
#[ignore = "needs python (pyarrow)"]
fn check_trace_rejects_a_missing_table() {
    require_python(&["pyarrow"]);
    let run = SmallRun::new();
    std::fs::remove_dir_all(run.dir().join("trace/iterations")).expect("remove table");
    let o = check_trace(&run.dir());
    assert_eq!(o.status.code(), Some(1), "check_trace.py: {}", describe(&o));
    let err = text(&o.stderr);
    assert!(
        err.contains("iterations: table directory is missing"),
        "{err}"
    );
}

#[test]
#[ignore = "needs python (pyarrow, pandas, matplotlib, jupyter nbclient)"]
fn trace_tour_notebook_executes_on_a_fresh_run() {
    let modules = [
        "nbformat",
        "nbclient",
        "ipykernel",
        "pyarrow",
        "pandas",
        "matplotlib",
    ];
    require_python(&modules);
    let run = SmallRun::new();
    // The kernel works in the temp dir, and the executed notebook stays in memory:
    // nothing is written into the repository.
    let o = Command::new("python3")
        .arg("-c")
        .arg(EXECUTE_NOTEBOOK)
        .arg(repo().join("notebooks/trace_tour.ipynb"))
        .arg(run.tmp.path())
        .env("FORESTALL_RUN_DIR", run.dir())
        .env("MPLBACKEND", "Agg")
        .output()
        .expect("python3 runs");
    assert!(o.status.success(), "notebook: {}", describe(&o));
    let out = text(&o.stdout);
    let figures: usize = out
        .trim()
        .strip_prefix("figures ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected output: {out}"));
    assert!(figures >= 5, "only {figures} figures rendered");
}

#[test]
fn trace_tour_notebook_is_stored_without_outputs() {
    let path = repo().join("notebooks/trace_tour.ipynb");
    let nb: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("read notebook")).expect("JSON");
    let cells = nb["cells"].as_array().expect("cells");
    assert!(!cells.is_empty());
    for (i, cell) in cells
        .iter()
        .filter(|c| c["cell_type"] == "code")
        .enumerate()
    {
        assert_eq!(
            cell["outputs"],
            serde_json::json!([]),
            "code cell {i} has outputs: clear them before committing"
        );
        assert!(
            cell["execution_count"].is_null(),
            "code cell {i} has an execution count"
        );
    }
    assert_eq!(nb["metadata"]["kernelspec"]["name"], "python3");
}

/// DuckDB reads every Parquet table forestall writes — a run's trace, an
/// import's trace and operations, a bench's raw.parquet — and its aggregates
/// equal forestall's own numbers.
#[test]
#[ignore = "needs python (duckdb) and ../shared"]
fn duckdb_reads_every_table_and_agrees_with_forestall() {
    use crate::common::{forestall, plan, run_in, shared, STRAGGLER};
    require_python(&["duckdb"]);
    let ar = shared("traces/bytedance-stragglers/trace-ST.parquet");
    let tmp = tempfile::tempdir().expect("temp dir");
    let run = tmp.path().join("run");
    run_in(&plan(STRAGGLER), &run.join("trace"));
    let imports = tmp.path().join("imports");
    let imported = forestall(&[
        "import",
        "bytedance-ops",
        ar.to_str().expect("utf-8"),
        "--out",
        imports.to_str().expect("utf-8"),
    ]);
    assert!(imported.status.success(), "{}", describe(&imported));
    let import_dir = imports.join("trace-ST");
    let raw = repo().join("pipelines/runs/2026-11-22-vm-baseline/raw.parquet");
    let out = Command::new("python3")
        .arg(repo().join("notebooks/duckdb_check.py"))
        .args([&run, &import_dir, &raw])
        .output()
        .expect("python3 runs");
    assert!(out.status.success(), "{}", describe(&out));
    let duck: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");

    // The run: barrier wait per worker and laggard counts, as analyze has them.
    let analysis = forestall(&["--json", "analyze", run.to_str().expect("utf-8")]);
    assert!(analysis.status.success(), "{}", describe(&analysis));
    let a: serde_json::Value = serde_json::from_slice(&analysis.stdout).expect("JSON");
    let iterations = a["data"]["iterations"].as_f64().expect("iterations");
    for w in a["data"]["per_worker"].as_array().expect("workers") {
        let id = w["worker"].to_string();
        assert_eq!(
            duck["barrier_wait_us"][&id], w["barrier_wait_us"],
            "worker {id}"
        );
        let lagged = (w["laggard_share"].as_f64().expect("share") * iterations).round() as u64;
        assert_eq!(
            duck["laggards"][&id].as_u64().unwrap_or(0),
            lagged,
            "worker {id}"
        );
    }
    let trace = forestall::trace::read_trace_dir(&run.join("trace")).expect("trace");
    assert_eq!(duck["units"].as_u64(), Some(trace.units.len() as u64));

    // The import: operations per kind, and workers.
    let ops = forestall::ops::read_ops(&import_dir.join("ops.parquet")).expect("ops");
    let mut by_kind = std::collections::BTreeMap::<&str, u64>::new();
    for o in &ops {
        *by_kind.entry(o.kind.as_str()).or_default() += 1;
    }
    for (kind, n) in &by_kind {
        assert_eq!(duck["ops_by_kind"][kind].as_u64(), Some(*n), "{kind}");
    }
    assert_eq!(duck["import_workers"].as_u64(), Some(8));

    // The bench: every row.
    let rows = parquet::file::reader::SerializedFileReader::new(
        std::fs::File::open(&raw).expect("raw.parquet"),
    )
    .map(|r| {
        use parquet::file::reader::FileReader;
        r.metadata().file_metadata().num_rows()
    })
    .expect("parquet");
    assert_eq!(duck["bench_rows"].as_i64(), Some(rows));
}

/// The notebooks a user opens first execute headless on what forestall
/// writes: a bench's raw.parquet, predictor scores on an imported real trace,
/// and a what-if replay of it.
#[test]
#[ignore = "needs python (pandas, matplotlib, jupyter nbclient) and ../shared"]
fn compare_predictors_and_whatif_notebooks_execute() {
    use crate::common::{forestall, shared};
    require_python(&["pandas", "matplotlib", "nbformat", "nbclient", "ipykernel"]);
    let job = shared("traces/alibaba-pai-minibatch/job_1_norm.csv");
    let tmp = tempfile::tempdir().expect("temp dir");
    let imports = tmp.path().join("imports");
    let imported = forestall(&[
        "import",
        "alibaba-minibatch",
        job.to_str().expect("utf-8"),
        "--out",
        imports.to_str().expect("utf-8"),
    ]);
    assert!(imported.status.success(), "{}", describe(&imported));
    let trace = imports.join("job_1_norm/trace");
    let trace = trace.to_str().expect("utf-8");
    let scores = tmp.path().join("scores");
    std::fs::create_dir(&scores).expect("scores dir");
    let eval = forestall(&["--json", "predictor", "eval", trace]);
    assert!(eval.status.success(), "{}", describe(&eval));
    std::fs::write(scores.join("job_1_norm.jsonl"), &eval.stdout).expect("scores");
    let whatif = forestall(&["--json", "whatif", trace, "--split", "8"]);
    assert!(whatif.status.success(), "{}", describe(&whatif));
    let replays = tmp.path().join("whatif.jsonl");
    std::fs::write(&replays, &whatif.stdout).expect("replays");
    for notebook in ["compare_policies", "predictors", "whatif"] {
        let path = repo().join(format!("notebooks/{notebook}.ipynb"));
        let raw = std::fs::read_to_string(&path).expect("notebook");
        assert!(
            !raw.contains("\"output_type\""),
            "{notebook}.ipynb is committed with its outputs cleared"
        );
        let o = Command::new("python3")
            .args(["-c", EXECUTE_NOTEBOOK])
            .arg(&path)
            .arg(tmp.path())
            .env("FORESTALL_SCORES_DIR", &scores)
            .env("FORESTALL_WHATIF", &replays)
            .env(
                "FORESTALL_BENCH_RAW",
                repo().join("pipelines/runs/2026-11-22-vm-flexrr-slow-worker/raw.parquet"),
            )
            .output()
            .expect("python3 runs");
        assert!(o.status.success(), "{notebook}: {}", describe(&o));
        let figures: usize = text(&o.stdout)
            .trim()
            .strip_prefix("figures ")
            .and_then(|n| n.parse().ok())
            .expect("a figure count");
        assert!(figures >= 1, "{notebook} drew no figure");
    }
}
