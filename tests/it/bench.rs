//! `forestall bench`: a tiny pipeline end to end, and bad pipelines.

use std::path::Path;

use crate::common::{adult_path, forestall_in as forestall};

pub(crate) fn write_job(dir: &Path) {
    std::fs::write(
        dir.join("job.toml"),
        format!(
            "[job]\nname = \"tiny\"\niterations = 12\n[data]\npath = \"{}\"\npartitions = 8\nunits_per_partition = 2\nbatch_fraction = 0.25\n[workers]\ncount = 2\n",
            adult_path().display()
        ),
    )
    .expect("write job");
}

#[test]
fn a_tiny_pipeline_writes_readme_raw_parquet_summary_and_plots() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    write_job(dir);
    // sweep "one" runs pinned to one CPU this process may use
    let cpu = forestall::bench::pin::available_cpus()[0];
    std::fs::write(
        dir.join("tiny.toml"),
        r#"
[bench]
name = "tiny"
about = "two delays, two policies"

[[sweep]]
name = "sw"
job = "job.toml"
pattern = "slow-worker"
probability = [0.5]
delay_percent = [0, 100]
policies = ["bsp", "rapid-reassign", "ideal"]
seeds = [1]
pace_ns_per_row = 2000
relative_to_policy = "ideal"

[[sweep]]
name = "one"
job = "job.toml"
pattern = "persistent"
policies = ["bsp", "proactive", "ideal"]
seeds = [1]
pace_ns_per_row = 2000
relative_to_policy = "ideal"
target_accuracy = 0.8
cpus = "CPU"
"#
        .replace("CPU", &cpu.to_string()),
    )
    .expect("write pipeline");
    let o = forestall(dir, &["-q", "bench", "tiny.toml", "--out", "res"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let res = dir.join("res");
    let readme = std::fs::read_to_string(res.join("README.md")).expect("README");
    assert!(
        readme.contains("| command |") && readme.contains("| git revision |"),
        "{readme}"
    );
    let summary = std::fs::read_to_string(res.join("summary.md")).expect("summary");
    assert!(
        summary.contains("| timely | rapid-reassign | 2 |"),
        "{summary}"
    );
    assert!(summary.contains("vs `ideal`"), "{summary}");
    assert!(
        !summary.contains("| NO |"),
        "BSP-semantics digests agree: {summary}"
    );
    assert!(res.join("plot-sw.svg").exists());
    // a sweep at one setting gets a bar per policy, and DPro-SM's mitigation
    assert!(res.join("plot-one.svg").exists());
    assert!(summary.contains("| mitigation |"), "{summary}");
    // every timely row is measured against the load-balancing bound, which
    // no run beats
    assert!(summary.contains("| vs bound |"), "{summary}");
    let vs_bound_column = summary
        .lines()
        .find(|l| l.starts_with("| kind"))
        .and_then(|h| h.split('|').map(str::trim).position(|c| c == "vs bound"))
        .expect("a vs bound column");
    for row in summary.lines().filter(|l| l.starts_with("| timely")) {
        let cell = row
            .split('|')
            .map(str::trim)
            .nth(vs_bound_column)
            .unwrap_or("");
        if row.contains("not BSP") || row.contains("stale reads") {
            assert_eq!(cell, "—", "no bound without BSP semantics: {row}");
            continue;
        }
        let ratio: f64 = cell.trim_end_matches('×').parse().unwrap_or(f64::NAN);
        assert!(ratio >= 0.99, "vs bound {cell:?} in {row}");
        // The bound with whole units lies between the fluid bound and the run.
        let units: f64 = row
            .split('|')
            .map(str::trim)
            .nth(vs_bound_column + 1)
            .unwrap_or("")
            .trim_end_matches('×')
            .parse()
            .unwrap_or(f64::NAN);
        assert!(
            (0.99..=ratio + 1e-9).contains(&units),
            "vs whole-unit bound {units} against {ratio} in {row}"
        );
    }
    // Adult's logistic regression passes 80 % test accuracy within 12 iterations
    assert!(summary.contains("| time to target acc s |"), "{summary}");
    let one = &summary[summary.find("## one").expect("sweep one")..];
    for row in one.lines().filter(|l| l.starts_with("| timely")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let to_target = cells[cells.len() - 3];
        assert!(
            to_target.parse::<f64>().is_ok(),
            "every run reaches the target (time {to_target:?}): {row}"
        );
    }
    assert!(
        summary.contains("| timely | ideal | 2 | 0 | 0 | 0 |"),
        "{summary}"
    );
    let file = std::fs::File::open(res.join("raw.parquet")).expect("raw.parquet");
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .expect("parquet")
        .build()
        .expect("reader");
    let rows: usize = reader.map(|b| b.expect("batch").num_rows()).sum();
    assert_eq!(rows, 2 * 3 + 3, "one row per run");
    // the pinned sweep says so, and every row has its rows per second
    assert!(one.contains(&format!("pinned to CPU {cpu}")), "{one}");
    for row in rows_of(&res.join("raw.parquet")) {
        let pinned = if row.sweep == "one" {
            cpu.to_string()
        } else {
            String::new()
        };
        assert_eq!(row.cpus, pinned, "{row:?}");
        assert!(row.rows_per_s.is_some_and(|r| r > 0.0), "{row:?}");
    }
}

#[test]
fn bad_pipelines_are_named_and_run_nothing() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    write_job(dir);
    let cases = [
        ("[bench]\nname = \"x\"\n[[sweep]]\nname = \"a\"\njob = \"job.toml\"\nseeds = [1]\nwokers = [2]\n", "unknown field `wokers`"),
        ("[bench]\nname = \"x\"\n[[sweep]]\nname = \"a\"\njob = \"job.toml\"\nseeds = []\n", "sweep 'a' has no seeds"),
        ("[bench]\nname = \"x\"\n[[sweep]]\nname = \"a\"\njob = \"job.toml\"\nseeds = [1]\nrelative_to = \"b\"\n", "sweep 'a' is relative to 'b', which is not a sweep (a)"),
        ("[bench]\nname = \"x\"\n[[sweep]]\nname = \"a\"\njob = \"job.toml\"\nseeds = [1]\npolicies = [\"magic\"]\n", "unknown policy 'magic'"),
        ("[bench]\nname = \"x\"\n[[sweep]]\nname = \"a\"\njob = \"missing.toml\"\nseeds = [1]\n", "failed to read job file"),
        ("[bench]\nname = \"x\"\n[[sweep]]\nname = \"a\"\njob = \"job.toml\"\nseeds = [1]\ntarget_accuracy = 1.5\n", "sweep 'a': target_accuracy must be in (0, 1] (got 1.5)"),
        ("[bench]\nname = \"x\"\n[[sweep]]\nname = \"a\"\njob = \"job.toml\"\nseeds = [1]\nreference = \"torch\"\n", "unknown reference 'torch'; accepted: plain, burn (cnn jobs)"),
        ("[bench]\nname = \"x\"\n[[sweep]]\nname = \"a\"\njob = \"job.toml\"\nseeds = [1]\ncpus = \"zero\"\n", "sweep 'a': cpus: 'zero' is not a CPU list"),
        ("[bench]\nname = \"x\"\n[[sweep]]\nname = \"a\"\njob = \"job.toml\"\nseeds = [1]\ncpus = \"1000\"\n", "sweep 'a': cpus: CPU 1000 not available to this process"),
    ];
    for (text, needle) in cases {
        std::fs::write(dir.join("p.toml"), text).expect("write");
        let o = forestall(dir, &["bench", "p.toml", "--out", "res"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{needle}: {err}");
        assert!(err.contains(needle), "expected {needle:?} in {err}");
        assert!(!dir.join("res").exists(), "nothing written for {needle}");
    }
}

/// A job found bad only against its data (a micro-batch that divides no
/// unit) or its measured compute (a pace no core keeps), in a sweep after a
/// good one: refused before the good sweep runs.
#[test]
fn jobs_bad_against_their_data_or_compute_run_nothing() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    write_job(dir);
    let job = std::fs::read_to_string(dir.join("job.toml")).expect("job");
    std::fs::write(
        dir.join("micro.toml"),
        job.replace(
            "batch_fraction = 0.25\n",
            "batch_fraction = 0.25\nmicro_batch = 10\n",
        ),
    )
    .expect("write");
    let cases = [
        ("job = \"micro.toml\"", "sweep 'b': "),
        ("job = \"job.toml\"\npace_ns_per_row = 1", "sweep 'b': "),
    ];
    let needles = [
        "[data] micro_batch: 10 rows does not divide a unit of 511 rows",
        "[workers] pace_ns_per_row: 1 ns per row is shorter than the measured compute",
    ];
    for ((second, sweep), needle) in cases.into_iter().zip(needles) {
        std::fs::write(
            dir.join("p.toml"),
            format!(
                "[bench]\nname = \"x\"\n[[sweep]]\nname = \"a\"\njob = \"job.toml\"\nseeds = [1]\n\
                 [[sweep]]\nname = \"b\"\n{second}\nseeds = [1]\n"
            ),
        )
        .expect("write");
        let o = forestall(dir, &["bench", "p.toml", "--out", "res"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{needle}: {err}");
        assert!(
            err.contains(sweep) && err.contains(needle),
            "expected {needle:?} in {err}"
        );
        assert!(!dir.join("res").exists(), "nothing written for {needle}");
    }
}

/// Every pipeline the project ships plans: its job files parse and validate,
/// and the files they name (datasets, LSTM models) exist.
#[test]
fn every_shipped_pipeline_plans() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("pipelines");
    let mut planned = 0;
    for entry in std::fs::read_dir(&dir).expect("pipelines/") {
        let path = entry.expect("entry").path();
        let Some(text) = path
            .extension()
            .is_some_and(|e| e == "toml")
            .then(|| std::fs::read_to_string(&path).expect("readable"))
        else {
            continue;
        };
        if !text.contains("[bench]") {
            continue; // a job file, planned through the pipelines that use it
        }
        if let Err(e) = forestall::bench::plan_pipeline(&path) {
            let message = e.to_string();
            // A dataset that `forestall data fetch` writes is not fetched
            // yet: the pipeline is fine, the machine lacks its data, and the
            // message says how to get it.
            assert!(
                message.contains("forestall data fetch"),
                "{}: {message}",
                path.display()
            );
            continue;
        }
        planned += 1;
    }
    assert!(planned > 0, "no pipeline planned");
}

/// A small pipeline of the tiny job: two policies × `seeds`, 6 iterations.
fn write_small_pipeline(dir: &Path, name: &str, seeds: &str) {
    write_pipeline_of(dir, name, seeds, 6);
}

fn write_pipeline_of(dir: &Path, name: &str, seeds: &str, iterations: u64) {
    write_job(dir);
    std::fs::write(
        dir.join(format!("{name}.toml")),
        format!(
            "[bench]\nname = \"{name}\"\n[[sweep]]\nname = \"sw\"\njob = \"job.toml\"\npattern = \"slow-worker\"\nprobability = [0.5]\ndelay_percent = [100]\npolicies = [\"bsp\", \"rapid-reassign\"]\nseeds = {seeds}\npace_ns_per_row = 2000\niterations = {iterations}\n"
        ),
    )
    .expect("write pipeline");
}

/// `--sweep NAME` runs that sweep of a pipeline and no other; a name the
/// pipeline does not have is refused with its sweeps, and nothing runs.
#[test]
fn one_sweep_of_a_pipeline_runs_alone() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    write_small_pipeline(dir, "two", "[1]");
    let text = std::fs::read_to_string(dir.join("two.toml")).expect("pipeline");
    let second = text
        .split("[[sweep]]")
        .nth(1)
        .expect("a sweep")
        .replace("name = \"sw\"", "name = \"other\"");
    std::fs::write(dir.join("two.toml"), format!("{text}[[sweep]]{second}")).expect("write");
    let o = forestall(
        dir,
        &["bench", "two.toml", "--sweep", "nope", "--out", "bad"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--sweep nope: no such sweep (the pipeline's: sw, other)"),
        "{err}"
    );
    assert!(!dir.join("bad").exists());
    let o = forestall(
        dir,
        &[
            "-q", "bench", "two.toml", "--sweep", "other", "--out", "res",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows = rows_of(&dir.join("res/raw.parquet"));
    assert_eq!(rows.len(), 2, "two policies, one seed");
    assert!(rows.iter().all(|r| r.sweep == "other"));
}

pub(crate) fn rows_of(path: &Path) -> Vec<forestall::bench::BenchRow> {
    forestall::bench::results::read_rows(path).expect("readable results")
}

#[test]
fn an_interrupted_bench_resumes_and_ends_as_an_uninterrupted_one() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    write_small_pipeline(dir, "small", "[1, 2]");
    let o = forestall(dir, &["-q", "bench", "small.toml", "--out", "whole"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let whole = rows_of(&dir.join("whole/raw.parquet"));
    assert_eq!(whole.len(), 4);
    assert!(dir.join("whole/bench.json").is_file());

    // Interrupted after two jobs: the results of the other two, the final
    // table and the plots were never written.
    let cut = dir.join("cut");
    std::fs::create_dir_all(cut.join("parts")).expect("mkdir");
    for f in [
        "README.md",
        "bench.json",
        "parts/0000.parquet",
        "parts/0001.parquet",
    ] {
        std::fs::copy(dir.join("whole").join(f), cut.join(f)).expect("copy");
    }
    let o = forestall(dir, &["bench", "small.toml", "--out", "cut"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("2 of 4 jobs complete, running the rest"),
        "{err}"
    );
    let resumed = rows_of(&cut.join("raw.parquet"));
    assert_eq!(resumed.len(), whole.len());
    for (i, (a, b)) in whole.iter().zip(&resumed).enumerate() {
        if i < 2 {
            // not run again: the very rows the first bench measured
            assert_eq!(format!("{a:?}"), format!("{b:?}"), "job {i}");
        } else {
            // run again: the same run, measured anew
            assert_eq!(
                (&a.sweep, a.kind, &a.policy, a.workers, a.seed),
                (&b.sweep, b.kind, &b.policy, b.workers, b.seed)
            );
            assert_eq!(a.params_sha256, b.params_sha256, "job {i}");
            assert_eq!(a.test_accuracy, b.test_accuracy, "job {i}");
            assert_eq!(a.digest_matches, b.digest_matches, "job {i}");
        }
    }
    assert!(cut.join("summary.md").is_file());
    // run again when finished: nothing is computed, the results stay
    let before = std::fs::read(cut.join("parts/0003.parquet")).expect("part");
    let o = forestall(dir, &["bench", "small.toml", "--out", "cut"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("4 of 4 jobs complete"));
    assert_eq!(
        std::fs::read(cut.join("parts/0003.parquet")).expect("part"),
        before
    );

    // the same directory with other runs (other seeds): refused, untouched
    write_small_pipeline(dir, "small", "[1, 2, 3]");
    let o = forestall(dir, &["bench", "small.toml", "--out", "cut"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("holds a bench 'small' of other runs (4 jobs")
            && err.contains("choose another --out"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(cut.join("parts/0003.parquet")).expect("part"),
        before
    );
}

#[test]
fn a_killed_bench_resumes_from_its_finished_jobs() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    // long enough jobs (40 iterations) that the kill comes before the end
    write_pipeline_of(dir, "small", "[1, 2, 3]", 40);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_forestall"))
        .args(["-q", "bench", "small.toml", "--out", "res"])
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("bench starts");
    let first = dir.join("res/parts/0000.parquet");
    let start = std::time::Instant::now();
    while !first.exists() && start.elapsed() < std::time::Duration::from_secs(120) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().expect("kill");
    child.wait().expect("reaped");
    assert!(
        first.exists(),
        "the first job's results are written as it finishes"
    );
    assert!(
        !dir.join("res/raw.parquet").exists(),
        "killed before the end"
    );
    let o = forestall(dir, &["bench", "small.toml", "--out", "res"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("resuming"), "{err}");
    let rows = rows_of(&dir.join("res/raw.parquet"));
    assert_eq!(rows.len(), 6);
    assert!(rows.iter().all(|r| r.digest_matches));
}

#[test]
fn a_bench_against_its_baseline_flags_rows_beyond_the_seed_spread() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    write_small_pipeline(dir, "small", "[1, 2]");
    let o = forestall(dir, &["-q", "bench", "small.toml", "--out", "before"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = forestall(
        dir,
        &[
            "--json",
            "bench",
            "small.toml",
            "--out",
            "after",
            "--baseline",
            "before",
        ],
    );
    // exit 1 only when a row regressed; the machine is shared, so either
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{err}");
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let compared: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["type"] == "baseline")
        .map(|l| &l["data"])
        .collect();
    assert_eq!(
        compared.len(),
        2 * 2,
        "two rows (policies), two measures each"
    );
    let mut regressed = false;
    for m in &compared {
        let (mean, base, allowed) = (
            m["mean"].as_f64().expect("mean"),
            m["baseline_mean"].as_f64().expect("baseline"),
            m["allowed"].as_f64().expect("allowed"),
        );
        assert_eq!(m["seeds"], serde_json::json!([2, 2]));
        let verdict = m["verdict"].as_str().expect("verdict");
        assert_eq!(verdict == "within", (mean - base).abs() <= allowed, "{m}");
        if m["measure"] == "test_accuracy" {
            assert_eq!(verdict, "within", "the same seeds train the same model");
            assert_eq!(mean, base);
        } else {
            assert!(allowed >= 0.02 * base - 1e-12, "the floor: {m}");
        }
        regressed |= verdict == "regressed";
    }
    assert_eq!(
        o.status.code(),
        Some(if regressed { 1 } else { 0 }),
        "{err}"
    );
    assert!(dir.join("after/baseline.md").is_file());
    assert!(!err.contains("another machine"), "same machine: {err}");

    // another machine and revision recorded in the baseline: warned about
    let manifest = dir.join("before/bench.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&manifest).expect("bench.json"))
            .expect("json");
    v["machine"]["cpu"] = "Imaginary CPU 9000".into();
    v["git_revision"] = "0123456789ab".into();
    std::fs::write(&manifest, v.to_string()).expect("write");
    let o = forestall(
        dir,
        &[
            "bench",
            "small.toml",
            "--out",
            "again",
            "--baseline",
            "before",
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("ran on another machine (CPU Imaginary CPU 9000"),
        "{err}"
    );
    assert!(
        err.contains("comes from git revision 0123456789ab"),
        "{err}"
    );

    // a baseline of another pipeline, or no bench at all: refused before
    // anything runs
    write_small_pipeline(dir, "other", "[1]");
    std::fs::create_dir_all(dir.join("plain-dir")).expect("mkdir");
    for (baseline, pipeline, needle) in [
        (
            "before",
            "other.toml",
            "--baseline before: results of the bench 'small', not of 'other'",
        ),
        (
            "plain-dir",
            "small.toml",
            "--baseline plain-dir: not a bench results directory",
        ),
        (
            "nowhere",
            "small.toml",
            "--baseline nowhere: not a directory",
        ),
    ] {
        let o = forestall(
            dir,
            &[
                "bench",
                pipeline,
                "--out",
                "refused",
                "--baseline",
                baseline,
            ],
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(needle), "{needle:?} in {err}");
        assert!(!dir.join("refused").exists(), "nothing written");
    }
}

#[test]
fn runs_lists_the_rows_of_a_bench() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    write_small_pipeline(dir, "small", "[1]");
    let o = forestall(dir, &["-q", "bench", "small.toml", "--out", "res"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = forestall(dir, &["--json", "runs", "res"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let data = crate::common::json_data(&o.stdout);
    assert_eq!(data.len(), 2, "one entry per row");
    for v in &data {
        assert_eq!(v["bench"], "small");
        assert_eq!(v["sweep"], "sw");
        assert_eq!(v["state"], "complete");
        assert_eq!(v["iterations"], 6);
    }
    // unfinished: its rows so far, and the bench marked incomplete
    std::fs::remove_file(dir.join("res/raw.parquet")).expect("rm");
    std::fs::remove_file(dir.join("res/parts/0001.parquet")).expect("rm");
    let o = forestall(dir, &["--json", "runs", "res"]);
    let data = crate::common::json_data(&o.stdout);
    assert_eq!(data.len(), 2);
    assert_eq!(data[1]["state"], "incomplete");
    assert!(
        data[1]["problem"]
            .as_str()
            .is_some_and(|p| p.contains("1 of 2 jobs complete")),
        "{data:?}"
    );
}

/// A sweep's `vary` makes a run of every value, for every policy that takes
/// the key (the others run once): the rows carry their values, the summary
/// labels its groups with them, and a `set` reaches every run (the pace).
#[test]
fn a_sweeps_varied_keys_make_a_run_of_every_value() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    write_job(dir);
    std::fs::write(
        dir.join("vary.toml"),
        r#"
[bench]
name = "vary"
[[sweep]]
name = "groups"
job = "job.toml"
workers = [4]
pattern = "slow-worker"
probability = [0.5]
delay_percent = [100]
policies = ["bsp", "flexrr"]
seeds = [1]
iterations = 4
set = ["workers.pace_ns_per_row=2000"]
vary = { "policy.group_size" = [1, 2] }
"#,
    )
    .expect("write pipeline");
    let o = forestall(dir, &["-q", "bench", "vary.toml", "--out", "res"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows = rows_of(&dir.join("res/raw.parquet"));
    let mut seen: Vec<(String, String, u64)> = rows
        .iter()
        .map(|r| (r.policy.clone(), r.settings.clone(), r.pace_ns_per_row))
        .collect();
    seen.sort();
    let row = |g: u32| ("flexrr".to_owned(), format!("policy.group_size={g}"), 2000);
    // bsp takes no group size: it runs once, the sweep's baseline
    assert_eq!(
        seen,
        [("bsp".to_owned(), String::new(), 2000), row(1), row(2)]
    );
    let summary = std::fs::read_to_string(dir.join("res/summary.md")).expect("summary");
    assert!(
        summary.contains("| flexrr (policy.group_size=2) |"),
        "{summary}"
    );
    assert!(summary.contains("| bsp |"), "{summary}");
    // a bad entry is named before anything runs
    let text = std::fs::read_to_string(dir.join("vary.toml"))
        .expect("pipeline")
        .replace("[1, 2]", "[]");
    std::fs::write(dir.join("bad.toml"), text).expect("write");
    let o = forestall(dir, &["bench", "bad.toml", "--out", "bad"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("vary: 'policy.group_size' has no values"),
        "{err}"
    );
    assert!(!dir.join("bad").exists());
}
