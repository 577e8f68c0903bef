//! `forestall import` on the real public traces in `../shared/traces`, read as
//! their publishers ship them, and on broken copies of them.

use std::collections::BTreeMap;
use std::path::Path;

use forestall::import::{read, Format, OnBad};
use forestall::trace::read_trace_dir;

use crate::common::{forestall, shared};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// How often each worker is the iteration's laggard in an imported trace.
/// Also checks what every imported iteration row says of the model: its
/// workload is the import format, and it has no test metrics.
fn laggards(dir: &Path) -> (usize, BTreeMap<u32, usize>) {
    let trace = read_trace_dir(&dir.join("trace")).expect("the import reads back");
    let format = trace
        .stamp()
        .and_then(|s| s.job_id.split_once(':'))
        .map(|(format, _)| format.to_owned())
        .expect("an import's job id is <format>:<file stem>");
    assert!(
        ["alibaba-minibatch", "bytedance-ops"].contains(&format.as_str()),
        "{format}"
    );
    for it in &trace.iterations {
        assert_eq!(it.workload, format);
        assert!(it.test_metrics.is_empty() && it.test_loss.is_none());
    }
    let mut counts = BTreeMap::new();
    for it in &trace.iterations {
        if let Some(w) = it.laggard {
            *counts.entry(w).or_insert(0) += 1;
        }
    }
    (trace.iterations.len(), counts)
}

#[test]
#[ignore = "needs ../shared"]
fn alibaba_jobs_import_with_their_ten_workers_and_job_1s_straggler() {
    let files: Vec<_> = ["1", "2", "3"]
        .iter()
        .map(|j| shared(&format!("traces/alibaba-pai-minibatch/job_{j}_norm.csv")))
        .collect();
    let out = tempfile::tempdir().expect("temp dir");
    let mut args = vec!["import", "alibaba-minibatch"];
    args.extend(files.iter().map(|f| f.to_str().expect("utf-8 path")));
    args.extend(["--out", out.path().to_str().expect("utf-8 path")]);
    let o = forestall(&args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let stdout = text(&o.stdout);
    assert!(stdout.contains("job_2_norm: 10 workers, 254 iterations, 2401 samples; 0 bad rows skipped, 1 exact repeats dropped"), "{stdout}");
    let (iterations, counts) = laggards(&out.path().join("job_1_norm"));
    assert_eq!(iterations, 300);
    // The source: in job 1 a straggler (worker 6) emerges mid-training.
    let top = counts.iter().max_by_key(|(_, &n)| n).map(|(&w, _)| w);
    assert_eq!(top, Some(6), "laggard counts {counts:?}");
    let import: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.path().join("job_2_norm/import.json")).expect("import.json"),
    )
    .expect("json");
    assert_eq!(import["notes"][0]["place"], "line 2392");
}

#[test]
#[ignore = "needs ../shared"]
fn bytedance_traces_sum_local_compute_per_step_and_rank() {
    let ar = shared("traces/bytedance-stragglers/trace-AR.parquet");
    let st = shared("traces/bytedance-stragglers/trace-ST.parquet");
    let ar = read(Format::BytedanceOps, &ar, OnBad::Reject).expect("AR imports");
    assert_eq!(ar.workers.len(), 16);
    assert_eq!(ar.samples.len(), 16 * 44);
    let st = read(Format::BytedanceOps, &st, OnBad::Reject).expect("ST imports");
    assert_eq!((st.workers.len(), st.samples.len()), (8, 8 * 32));
    assert!(st.samples.iter().all(|s| s.us > 0));
    // AR: one worker is persistently slow, so one rank is the slowest in
    // nearly every step.
    let mut slowest: BTreeMap<u32, usize> = BTreeMap::new();
    for step in ar.samples.chunks(16) {
        let w = step.iter().max_by_key(|s| s.us).expect("16 ranks").worker;
        *slowest.entry(w).or_default() += 1;
    }
    let most = slowest.values().max().copied().unwrap_or(0);
    assert!(most * 10 >= 44 * 8, "slowest rank per step: {slowest:?}");
}

/// The real traces re-saved with other column types read as the published
/// files do: the `ops.parquet` an import keeps (wider integers, f64, plain
/// strings where the publisher wrote an int8 dictionary), and the Alibaba
/// CSV saved again without its row index, its columns reordered, with a
/// byte-order mark and CRLF line ends.
#[test]
#[ignore = "needs ../shared"]
fn real_traces_resaved_with_other_types_import_the_same() {
    let out = tempfile::tempdir().expect("temp dir");
    for trace in ["trace-AR", "trace-ST"] {
        let published = shared(&format!("traces/bytedance-stragglers/{trace}.parquet"));
        let a = read(Format::BytedanceOps, &published, OnBad::Reject).expect("imports");
        let resaved = out.path().join(format!("{trace}-ops.parquet"));
        forestall::ops::write_ops(&resaved, a.ops.as_deref().expect("ops kept")).expect("written");
        let b =
            read(Format::BytedanceOps, &resaved, OnBad::Reject).expect("the re-saved copy imports");
        assert_eq!(
            (&a.workers, &a.samples, &a.steps),
            (&b.workers, &b.samples, &b.steps),
            "{trace}"
        );
        assert!(b.skipped.is_empty(), "{trace}: {:?}", b.skipped);
    }
    let job = shared("traces/alibaba-pai-minibatch/job_3_norm.csv");
    let a = read(Format::AlibabaMinibatch, &job, OnBad::Reject).expect("imports");
    let csv = std::fs::read_to_string(&job).expect("reads");
    let mut resaved = String::from("\u{feff}time,batch_time_norm,worker,gpu\r\n");
    for line in csv.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        resaved.push_str(&format!("{},{},{},{}\r\n", f[3], f[4], f[1], f[2]));
    }
    let copy = out.path().join("job_3_norm.csv");
    std::fs::write(&copy, resaved).expect("writes");
    let b =
        read(Format::AlibabaMinibatch, &copy, OnBad::Reject).expect("the re-saved copy imports");
    assert_eq!(
        (&a.workers, &a.samples, &a.steps),
        (&b.workers, &b.samples, &b.steps)
    );
}

#[test]
#[ignore = "needs ../shared"]
fn bad_rows_are_named_and_reject_or_skip_as_asked() {
    let job = shared("traces/alibaba-pai-minibatch/job_1_norm.csv");
    let tmp = tempfile::tempdir().expect("temp dir");
    let mut csv = std::fs::read_to_string(job).expect("reads");
    csv.push_str("3000,2,25,9999,NaN\n3001,2,25,10000,-4\n");
    let broken = tmp.path().join("broken.csv");
    std::fs::write(&broken, csv).expect("writes");
    let out = tmp.path().join("out");
    let (b, o) = (broken.to_str().unwrap(), out.to_str().unwrap());

    let rejected = forestall(&["import", "alibaba-minibatch", b, "--out", o]);
    assert_eq!(rejected.status.code(), Some(2));
    let err = text(&rejected.stderr);
    assert!(
        err.contains("broken.csv: 2 bad row(s)") && err.contains("line 3002"),
        "{err}"
    );
    assert!(!out.exists(), "nothing written when a file is rejected");

    let skipped = forestall(&[
        "import",
        "alibaba-minibatch",
        b,
        "--out",
        o,
        "--on-bad",
        "skip",
    ]);
    assert!(skipped.status.success(), "{}", text(&skipped.stderr));
    assert!(text(&skipped.stdout).contains("2 bad rows skipped"));
    let (iterations, _) = laggards(&out.join("broken"));
    assert_eq!(iterations, 300, "the bad rows' iterations are left out");
    let again = forestall(&[
        "import",
        "alibaba-minibatch",
        b,
        "--out",
        o,
        "--on-bad",
        "skip",
    ]);
    assert!(
        text(&again.stderr).contains("--force"),
        "an existing import is kept"
    );
}

#[test]
fn wrong_formats_and_missing_files_are_clear_errors() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let out = tmp.path().join("out");
    let o = out.to_str().unwrap();
    let adult = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/adult.parquet");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["alibaba-minibatch".into(), adult.display().to_string()],
            "not in the alibaba-minibatch format: not UTF-8 text",
        ),
        (
            vec!["bytedance-ops".into(), adult.display().to_string()],
            "column \"rank\" is missing",
        ),
        (
            vec!["bytedance-ops".into(), "no-such.parquet".into()],
            "no-such.parquet: No such file",
        ),
        (vec!["sheep".into(), "x".into()], "invalid value 'sheep'"),
    ];
    for (args, expected) in cases {
        let mut full = vec!["import".to_owned()];
        full.extend(args);
        full.extend(["--out".to_owned(), o.to_owned()]);
        let refs: Vec<&str> = full.iter().map(String::as_str).collect();
        let r = forestall(&refs);
        assert_eq!(r.status.code(), Some(2), "{full:?}");
        let err = text(&r.stderr);
        assert!(err.contains(expected), "{full:?}: {err}");
    }
    // A truncated Parquet file.
    let bytes = std::fs::read(&adult).expect("reads");
    let cut = tmp.path().join("cut.parquet");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).expect("writes");
    let r = forestall(&["import", "bytedance-ops", cut.to_str().unwrap(), "--out", o]);
    assert_eq!(r.status.code(), Some(2));
    assert!(
        text(&r.stderr).contains("not a readable Parquet file"),
        "{}",
        text(&r.stderr)
    );
    assert!(!out.exists());
}

/// The baselines scored on real imported traces: ByteDance AR's persistent
/// straggler is called by `last` with high recall, and the table names every built predictor.
#[test]
#[ignore = "needs ../shared"]
fn predictor_eval_scores_the_baselines_on_imported_traces() {
    let ar = shared("traces/bytedance-stragglers/trace-AR.parquet");
    let out = tempfile::tempdir().expect("temp dir");
    let o = out.path().to_str().unwrap();
    let imported = forestall(&["import", "bytedance-ops", ar.to_str().unwrap(), "--out", o]);
    assert!(imported.status.success(), "{}", text(&imported.stderr));
    let dir = out.path().join("trace-AR");
    let (iterations, _) = laggards(&dir);
    assert_eq!(iterations, 44);
    let r = forestall(&["predictor", "eval", dir.to_str().unwrap(), "--json"]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    let scores = crate::common::json_data(&r.stdout);
    let names: Vec<&str> = scores
        .iter()
        .filter_map(|s| s["predictor"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "last",
            "ewma",
            "sustained",
            "median",
            "linear",
            "svm",
            "auto"
        ]
    );
    // auto follows the better of its candidates on AR's persistent straggler
    let mae = |name: &str| {
        scores
            .iter()
            .find(|s| s["predictor"] == name)
            .and_then(|s| s["mae_us"].as_f64())
            .unwrap_or(f64::NAN)
    };
    let best = mae("last")
        .min(mae("ewma"))
        .min(mae("sustained"))
        .min(mae("median"));
    assert!(
        mae("auto") <= 1.02 * best,
        "auto {} against the best candidate {best}",
        mae("auto")
    );
    assert_eq!(scores[0]["predictions"], 16 * 22);
    let recall = scores[0]["recall"].as_f64().unwrap_or(0.0);
    assert!(
        recall >= 0.9,
        "last on a persistent straggler: {}",
        scores[0]
    );

    // linear fitted on another trace (ST) and tested on AR: no leakage across jobs
    let st = shared("traces/bytedance-stragglers/trace-ST.parquet");
    let st_import = forestall(&["import", "bytedance-ops", st.to_str().unwrap(), "--out", o]);
    assert!(st_import.status.success(), "{}", text(&st_import.stderr));
    let st_dir = out.path().join("trace-ST");
    let cross = forestall(&[
        "predictor",
        "eval",
        dir.to_str().unwrap(),
        "--train",
        st_dir.to_str().unwrap(),
        "--json",
    ]);
    assert!(cross.status.success(), "{}", text(&cross.stderr));
    assert!(text(&cross.stdout).contains("\"predictor\":\"linear\""));
    let short = forestall(&["predictor", "eval", dir.to_str().unwrap(), "--lags", "0"]);
    assert!(text(&short.stderr).contains("--lags must be at least 1"));

    let bad = forestall(&[
        "predictor",
        "eval",
        dir.to_str().unwrap(),
        "--tail-from",
        "1.5",
    ]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad.stderr).contains("--tail-from must be in [0, 1)"));
    let missing = forestall(&["predictor", "eval", "no-such-dir"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        text(&missing.stderr).contains("no-such-dir"),
        "{}",
        text(&missing.stderr)
    );
}
