//! The `forestall` binary as a user runs it: exit codes, stdout, stderr, and
//! what lands on disk.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use arrow_array::{Float64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};

use crate::common::adult_path;

struct Dir {
    tmp: tempfile::TempDir,
}

impl Dir {
    fn new() -> Self {
        Self {
            tmp: tempfile::tempdir().expect("temp dir"),
        }
    }

    fn path(&self) -> &Path {
        self.tmp.path()
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path().join(name);
        std::fs::write(&p, text).expect("write");
        p
    }

    fn forestall(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_forestall"))
            .args(args)
            .current_dir(self.path())
            .env_remove("RUST_LOG")
            .output()
            .expect("forestall runs")
    }
}

fn small_job(extra: &str) -> String {
    format!(
        "[job]\nname = \"small\"\niterations = 6\n[data]\npath = \"{}\"\npartitions = 8\nunits_per_partition = 2\n[workers]\ncount = 2\n{extra}",
        adult_path().display()
    )
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn run_writes_plan_model_summary_and_trace() {
    let d = Dir::new();
    d.write("job.toml", &small_job(""));
    let o = d.forestall(&["run", "job.toml", "--out", "out"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("iterations   6 in"), "{text}");
    assert!(text.contains("parameters   sha256 "), "{text}");
    let out = d.path().join("out");
    for f in [
        "plan.json",
        "model.json",
        "summary.json",
        "trace/units",
        "trace/workers",
        "trace/iterations",
    ] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    let model: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("model.json")).expect("model"))
            .expect("json");
    assert_eq!(model["kind"], "logistic");
    let blocks = model["blocks"].as_array().expect("parameter blocks");
    assert_eq!(blocks[0]["name"], "bias");
    let covered: u64 = blocks.iter().filter_map(|b| b["len"].as_u64()).sum();
    assert_eq!(
        model["params"].as_array().map(Vec::len),
        Some(covered as usize)
    );
}

#[test]
fn json_mode_prints_only_json_lines_and_a_digest() {
    let d = Dir::new();
    d.write("job.toml", &small_job(""));
    let o = d.forestall(&["--json", "run", "job.toml", "--out", "a", "--workers", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let kinds: Vec<String> = stdout(&o)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("every line is JSON");
            v["type"].as_str().expect("type").to_owned()
        })
        .collect();
    assert_eq!(kinds.first().map(String::as_str), Some("begin"));
    assert_eq!(kinds.last().map(String::as_str), Some("summary"));
    assert_eq!(kinds.iter().filter(|k| *k == "iteration").count(), 6);

    // the digest is the same with 3 workers and an injected pattern
    let o3 = d.forestall(&[
        "--json",
        "run",
        "job.toml",
        "--out",
        "b",
        "--workers",
        "3",
        "--pattern",
        "slow-worker",
        "--delay",
        "100",
        "--probability",
        "0.5",
    ]);
    assert!(o3.status.success(), "{}", stderr(&o3));
    let digest = |o: &Output| {
        let last = stdout(o).lines().last().expect("summary line").to_owned();
        let v: serde_json::Value = serde_json::from_str(&last).expect("json");
        v["data"]["params_sha256"]
            .as_str()
            .expect("digest")
            .to_owned()
    };
    assert_eq!(digest(&o), digest(&o3));
}

macro_rules! rejects {
    ($($name:ident: $job:expr, $args:expr => $needle:expr;)*) => {$(
        #[test]
        fn $name() {
            let d = Dir::new();
            d.write("job.toml", $job.as_ref());
            let mut args = vec!["run", "job.toml", "--out", "out"];
            args.extend_from_slice(&$args);
            let o = d.forestall(&args);
            assert_eq!(o.status.code(), Some(2), "stdout: {}", stdout(&o));
            let err = stderr(&o);
            assert!(err.contains($needle), "expected {:?} in: {err}", $needle);
            assert!(!err.contains("panicked"), "{err}");
            assert!(!d.path().join("out").exists(), "nothing may be written for bad input");
        }
    )*};
}

rejects! {
    malformed_toml: "[job\niterations = 3\n", [] => "job.toml: TOML parse error at line 1";
    duplicate_table: small_job("[workers]\nthreads = 2\n"), [] => "duplicate key";
    unknown_field: "[job]\niters = 3\n", [] => "unknown field `iters`";
    zero_workers_flag: small_job(""), ["--workers", "0"] => "command line: [workers] count: must be at least 1 (got 0)";
    unknown_policy_flag: small_job(""), ["--policy", "magic"] => "unknown policy 'magic'; accepted: bsp";
    unknown_pattern_flag: small_job(""), ["--pattern", "gremlins"] => "unknown pattern 'gremlins'";
    probability_flag: small_job("[straggler]\npattern = \"slow-worker\"\n"), ["--probability", "2"] => "must be in [0, 1] (got 2)";
    too_many_workers: small_job(""), ["--workers", "9"] => "9 workers but only 8 partitions";
    missing_dataset: "[data]\npath = \"missing.parquet\"\n", [] => "job.toml:2: [data] path: dataset file";
    zero_micro_batch: micro_job(0), [] => "job.toml:8: [data] micro_batch: must be at least 1 row (got 0)";
    micro_batch_larger_than_a_unit: micro_job(1_000_000), [] => "job.toml:8: [data] micro_batch: 1000000 rows is larger than a unit";
    micro_batch_that_divides_no_unit: micro_job(7), [] => "job.toml:8: [data] micro_batch: 7 rows does not divide a unit of";
    pace_shorter_than_the_compute: small_job("pace_ns_per_row = 1\n"), [] => "job.toml:10: [workers] pace_ns_per_row: 1 ns per row is shorter than the measured compute: a row takes";
}

/// [`small_job`] with `[data] micro_batch = rows` (line 8).
fn micro_job(rows: u32) -> String {
    small_job("").replace(
        "units_per_partition = 2\n",
        &format!("units_per_partition = 2\nmicro_batch = {rows}\n"),
    )
}

#[test]
fn a_missing_job_file_is_an_error() {
    let d = Dir::new();
    let o = d.forestall(&["run", "nope.toml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("failed to read job file nope.toml"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn an_existing_output_directory_needs_force() {
    let d = Dir::new();
    d.write("job.toml", &small_job(""));
    std::fs::create_dir(d.path().join("out")).expect("mkdir");
    d.write("out/keep.txt", "mine");
    let o = d.forestall(&["run", "job.toml", "--out", "out"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("already holds files; pass --force"),
        "{}",
        stderr(&o)
    );
    assert!(d.path().join("out/keep.txt").exists());
    let o = d.forestall(&["run", "job.toml", "--out", "out", "--force", "-q"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!d.path().join("out/keep.txt").exists());
}

#[test]
fn a_corrupt_dataset_is_named() {
    let d = Dir::new();
    d.write("bad.parquet", "PAR1 this is not parquet");
    d.write("job.toml", "[data]\npath = \"bad.parquet\"\n");
    let o = d.forestall(&["run", "job.toml", "--out", "out"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("bad.parquet is not a readable Parquet file"),
        "{}",
        stderr(&o)
    );
    assert!(!d.path().join("out").exists());
}

#[test]
fn nan_in_the_data_is_named_with_column_and_row() {
    let d = Dir::new();
    let schema = Arc::new(Schema::new(vec![
        Field::new("x", DataType::Float64, true),
        Field::new("income", DataType::Utf8, false),
    ]));
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            Arc::new(Float64Array::from(vec![1.0, 2.0, f64::NAN, 4.0])),
            Arc::new(StringArray::from(vec![">50K", "<=50K", ">50K", "<=50K"])),
        ],
    )
    .expect("batch");
    let file = std::fs::File::create(d.path().join("nan.parquet")).expect("create");
    let mut w = parquet::arrow::ArrowWriter::try_new(file, schema, None).expect("writer");
    w.write(&batch).expect("write");
    w.close().expect("close");
    d.write(
        "job.toml",
        "[data]\npath = \"nan.parquet\"\npartitions = 1\n[workers]\ncount = 1\n",
    );
    let o = d.forestall(&["run", "job.toml", "--out", "out"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("column 'x' row 2 is NaN"),
        "{}",
        stderr(&o)
    );
    assert!(!d.path().join("out").exists());
}

/// The binary tells glibc to keep freed memory (`forestall::malloc`), and
/// leaves a user's own `GLIBC_TUNABLES` malloc settings alone.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn the_allocator_setting_is_made_unless_the_user_made_one() {
    let dir = Dir::new();
    let o = dir.forestall(&["-vv", "runs", "."]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("allocator: Set"), "{}", stderr(&o));
    let o = Command::new(env!("CARGO_BIN_EXE_forestall"))
        .args(["-vv", "runs", "."])
        .current_dir(dir.path())
        .env_remove("RUST_LOG")
        .env("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=4194304")
        .output()
        .expect("forestall runs");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("allocator: UserTunables"),
        "{}",
        stderr(&o)
    );
}
