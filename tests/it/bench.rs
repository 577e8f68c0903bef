//! `forestall bench`: a tiny pipeline end to end, and bad pipelines.

use std::path::Path;

use crate::common::{adult_path, forestall_in as forestall};

fn write_job(dir: &Path) {
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
"#,
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
