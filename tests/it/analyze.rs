//! `forestall analyze`: our own runs' traces, imported real operation traces
//! checked against their authors' what-if results, and bad input.

use std::path::Path;

use serde_json::Value;

use crate::common::{forestall, plan, run_in, shared, STRAGGLER};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The `analysis` JSON lines of `forestall analyze --json ARGS`.
fn analyses(args: &[&str]) -> Vec<Value> {
    let mut all = vec!["--json", "analyze"];
    all.extend_from_slice(args);
    let out = forestall(&all);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line"))
        .inspect(|v| assert_eq!(v["type"], "analysis"))
        .map(|v| v["data"].clone())
        .collect()
}

fn within(found: f64, expected: f64, relative: f64, what: &str) {
    assert!(
        (found - expected).abs() <= relative * expected.abs(),
        "{what}: {found} against the authors' {expected}"
    );
}

#[test]
#[ignore = "needs ../shared"]
fn bytedance_slowdowns_and_attributions_agree_with_the_authors() {
    let dir = shared("traces/bytedance-stragglers");
    let out = tempfile::tempdir().expect("temp dir");
    let files = ["AR", "ST"].map(|t| dir.join(format!("trace-{t}.parquet")));
    let imported = forestall(&[
        "import",
        "bytedance-ops",
        files[0].to_str().expect("test setup"),
        files[1].to_str().expect("test setup"),
        "--out",
        out.path().to_str().expect("test setup"),
    ]);
    assert!(imported.status.success(), "{}", text(&imported.stderr));
    let read = |name: &str| -> Value {
        serde_json::from_slice(&std::fs::read(dir.join(name)).expect("reference")).expect("JSON")
    };
    for t in ["AR", "ST"] {
        let import_dir = out.path().join(format!("trace-{t}"));
        assert!(
            import_dir.join("ops.parquet").is_file(),
            "the import keeps the operations"
        );
        let a = analyses(&[import_dir.to_str().expect("test setup")]);
        assert_eq!(a.len(), 1);
        let a = &a[0];
        assert_eq!(a["method"], "operations");
        let result = read(&format!("result-{t}.json"));
        within(
            a["slowdown"].as_f64().expect("test setup"),
            result["blocking_slowdown"].as_f64().expect("test setup"),
            0.05,
            &format!("{t} S"),
        );
        let ops = &a["operations"];
        for (ours, theirs) in [
            ("by_dp_rank", "blocking_decompose_by_dp_rank"),
            ("by_stage", "blocking_decompose_by_stage"),
            ("by_optype", "blocking_decompose_by_optype"),
        ] {
            let theirs = result[theirs].as_object().expect("an attribution map");
            assert_eq!(
                ops[ours].as_object().expect("test setup").len(),
                theirs.len(),
                "{t} {ours}"
            );
            for (key, value) in theirs {
                within(
                    ops[ours][key].as_f64().unwrap_or(f64::NAN),
                    value.as_f64().expect("test setup"),
                    0.05,
                    &format!("{t} {ours}[{key}]"),
                );
            }
        }
        // M_W and M_S are shares (near 0 for the cause that is absent): compare
        // them in absolute terms.
        for (ours, file, key) in [("m_w", "mw", "Mw"), ("m_s", "ms", "Ms")] {
            let theirs = read(&format!("{file}-{t}.json"))[key]
                .as_f64()
                .expect("test setup");
            let found = ops[ours]["removed"].as_f64().expect("test setup");
            assert!(
                (found - theirs).abs() < 0.05,
                "{t} {key}: {found} against {theirs}"
            );
        }
        // The per-worker view names the cause: AR's one slow worker, ST's last stage.
        let workers = a["per_worker"].as_array().expect("test setup");
        let classes: Vec<&str> = workers
            .iter()
            .map(|w| w["class"].as_str().expect("test setup"))
            .collect();
        match t {
            "AR" => {
                assert_eq!(
                    classes.iter().filter(|&&c| c == "persistent").count(),
                    1,
                    "{classes:?}"
                );
                assert!(
                    workers[0]["share_of_slowdown"]
                        .as_f64()
                        .expect("test setup")
                        > 0.9
                );
            }
            _ => assert_eq!(
                classes.iter().filter(|&&c| c == "structural").count(),
                2,
                "{classes:?}"
            ),
        }
    }
    // The published file analyses the same without an import.
    let direct = analyses(&[files[1].to_str().expect("test setup")]);
    within(
        direct[0]["slowdown"].as_f64().expect("test setup"),
        read("result-ST.json")["blocking_slowdown"]
            .as_f64()
            .expect("test setup"),
        0.05,
        "ST S, file",
    );
}

#[test]
fn a_runs_persistent_straggler_is_found_and_the_gate_fails() {
    let dir = tempfile::tempdir().expect("temp dir");
    run_in(&plan(STRAGGLER), dir.path());
    let a = &analyses(&[dir.path().to_str().expect("test setup")])[0];
    assert_eq!(a["method"], "barrier");
    assert_eq!(a["workers"], 4);
    assert_eq!(a["iterations"], 12);
    let workers = a["per_worker"].as_array().expect("test setup");
    assert_eq!(workers[3]["class"], "persistent", "{:?}", workers[3]);
    let s = a["slowdown"].as_f64().expect("test setup");
    assert!(s > 2.0, "a 4× slower worker under BSP: S = {s}");
    let share = |w: usize| {
        workers[w]["share_of_slowdown"]
            .as_f64()
            .expect("test setup")
    };
    assert!(share(3) > 0.9 && share(0) < 0.1, "{workers:?}");
    assert!(workers[3]["laggard_share"].as_f64().expect("test setup") > 0.9);
    assert!(
        workers[0]["barrier_wait_us"].as_u64().expect("test setup")
            > workers[3]["barrier_wait_us"].as_u64().expect("test setup")
    );

    assert!(a["online_predictions"].is_null(), "bsp predicts nothing");
    // A predictive policy's own predictions are scored.
    let predictive = tempfile::tempdir().expect("temp dir");
    run_in(
        &plan(&format!("{STRAGGLER}[policy]\nname = \"forestall\"\n")),
        predictive.path(),
    );
    let p = &analyses(&[predictive.path().to_str().expect("utf-8")])[0]["online_predictions"];
    assert!(p["predictions"].as_u64().expect("scored") > 0, "{p}");
    assert!(p["mape"].as_f64().expect("mape").is_finite());

    let path = dir.path().to_str().expect("test setup");
    let gate = forestall(&["-q", "analyze", path, "--fail-on-slowdown", "1.5"]);
    assert_eq!(gate.status.code(), Some(1), "{}", text(&gate.stderr));
    assert!(text(&gate.stderr).contains("slowdown above 1.5"));
    let pass = forestall(&["-q", "analyze", path, "--fail-on-slowdown", "50"]);
    assert_eq!(pass.status.code(), Some(0), "{}", text(&pass.stderr));
}

fn refused(args: &[&str], needles: &[&str]) {
    let out = forestall(args);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: {err:?} lacks {n:?}");
    }
    assert!(!err.contains("panicked"), "{err}");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("test setup");
    for e in std::fs::read_dir(from).expect("test setup") {
        let e = e.expect("test setup");
        let target = to.join(e.file_name());
        if e.file_type().expect("test setup").is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).expect("test setup");
        }
    }
}

#[test]
fn bad_input_is_refused_naming_the_culprit() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    refused(
        &["analyze", "/no/such/dir"],
        &["/no/such/dir", "does not exist"],
    );
    std::fs::create_dir(root.join("empty")).expect("test setup");
    refused(
        &["analyze", root.join("empty").to_str().expect("test setup")],
        &["holds no trace"],
    );
    refused(
        &[
            "analyze",
            root.to_str().expect("test setup"),
            "--threshold",
            "NaN",
        ],
        &["--threshold"],
    );

    // Two jobs in one directory: the second job's parts are named.
    let a = root.join("a");
    let b = root.join("b");
    run_in(&plan(STRAGGLER), &a);
    run_in(&plan(&STRAGGLER.replace("seed = 21", "seed = 22")), &b);
    let mixed = root.join("mixed");
    copy_dir(&a, &mixed);
    let part = std::fs::read_dir(b.join("workers"))
        .expect("test setup")
        .next()
        .expect("test setup")
        .expect("test setup");
    std::fs::copy(
        part.path(),
        mixed.join("workers").join("part-zzz-other.parquet"),
    )
    .expect("test setup");
    refused(
        &["analyze", mixed.to_str().expect("test setup")],
        &["part-zzz-other.parquet"],
    );

    // A trace whose tables are empty.
    let hollow = root.join("hollow");
    std::fs::create_dir_all(hollow.join("workers")).expect("test setup");
    refused(
        &["analyze", hollow.to_str().expect("test setup")],
        &["no worker rows"],
    );

    // A corrupt operation file beside a trace, and one of another job.
    let import = root.join("import");
    copy_dir(&a, &import.join("trace"));
    std::fs::write(import.join("ops.parquet"), b"PAR1 not really").expect("test setup");
    refused(
        &["analyze", import.to_str().expect("test setup")],
        &["ops.parquet", "Parquet"],
    );
    let not_ops = root.join("notes.txt");
    std::fs::write(&not_ops, "hello").expect("test setup");
    refused(
        &["analyze", not_ops.to_str().expect("test setup")],
        &["notes.txt"],
    );
}

/// Another job's operation file beside a trace is refused.
#[test]
#[ignore = "needs ../shared"]
fn operations_of_another_job_are_refused() {
    let st = shared("traces/bytedance-stragglers/trace-ST.parquet");
    let dir = tempfile::tempdir().expect("temp dir");
    let a = dir.path().join("a");
    run_in(&plan(STRAGGLER), &a);
    let import = dir.path().join("import");
    copy_dir(&a, &import.join("trace"));
    std::fs::copy(st, import.join("ops.parquet")).expect("test setup");
    refused(
        &["analyze", import.to_str().expect("test setup")],
        &["not the same job"],
    );
}
