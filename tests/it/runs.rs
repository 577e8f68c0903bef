//! `forestall runs`, `forestall compare` and the report's curves, on real
//! runs of the quick start (a few iterations each).

use std::path::{Path, PathBuf};

use crate::common::{forestall_in, json_data};

fn quickstart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("pipelines/quickstart.toml")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `forestall run` of the quick start for `iterations` with `extra` flags
/// into `dir/out`.
fn run(dir: &Path, out: &str, extra: &[&str]) {
    let job = quickstart();
    let mut args = vec![
        "-q",
        "run",
        job.to_str().expect("utf-8"),
        "--iterations",
        "6",
        "--out",
        out,
    ];
    args.extend_from_slice(extra);
    let o = forestall_in(dir, &args);
    assert!(o.status.success(), "{}", text(&o.stderr));
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read dir") {
        let e = e.expect("entry");
        let target = to.join(e.file_name());
        if e.file_type().expect("type").is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).expect("copy");
        }
    }
}

fn iteration_parts(run: &Path) -> Vec<PathBuf> {
    let mut parts: Vec<PathBuf> = std::fs::read_dir(run.join("trace/iterations"))
        .expect("iterations table")
        .map(|e| e.expect("entry").path())
        .collect();
    parts.sort();
    parts
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map_or_else(|| "unknown".to_owned(), |v| v.trim().to_owned())
}

#[test]
fn runs_lists_finished_and_crashed_runs_by_date() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let d = tmp.path();
    run(d, "runs/quickstart/a", &[]);
    run(
        d,
        "runs/quickstart/b",
        &["--policy", "rapid-reassign", "--workers", "2"],
    );
    let runs = d.join("runs/quickstart");
    // a crash before the summary, with its last trace part cut short (no
    // footer), and a run whose summary is garbage
    copy_dir(&runs.join("a"), &runs.join("crashed"));
    std::fs::remove_file(runs.join("crashed/summary.json")).expect("rm summary");
    let last = iteration_parts(&runs.join("crashed"))
        .pop()
        .expect("a part");
    let bytes = std::fs::read(&last).expect("part");
    std::fs::write(&last, &bytes[..bytes.len() / 2]).expect("cut part");
    copy_dir(&runs.join("a"), &runs.join("garbled"));
    std::fs::write(runs.join("garbled/summary.json"), "{ not json").expect("garble");

    let o = forestall_in(d, &["runs"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 5, "a header and four runs: {out}");
    assert!(
        lines[0].starts_with("date") && lines[0].contains("digest"),
        "{out}"
    );
    let line_of = |name: &str| {
        *lines
            .iter()
            .find(|l| l.contains(&format!("quickstart/{name}")))
            .unwrap_or_else(|| panic!("{name} listed: {out}"))
    };
    assert!(line_of("a").contains("bsp") && !line_of("a").contains("INCOMPLETE"));
    assert!(line_of("b").contains("rapid-reassign"), "{out}");
    let crashed = line_of("crashed");
    assert!(
        crashed.contains("INCOMPLETE: no summary.json")
            && crashed.contains("unreadable part(s)")
            && crashed.contains("of 6 iterations"),
        "{crashed}"
    );
    assert!(
        line_of("garbled").contains("INCOMPLETE: summary.json unreadable"),
        "{out}"
    );

    let o = forestall_in(d, &["--json", "runs", "runs"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let data = json_data(&o.stdout);
    assert_eq!(data.len(), 4);
    for line in text(&o.stdout).lines() {
        assert!(line.starts_with(r#"{"type":"run","data":{"#), "{line}");
    }
    let dates: Vec<&str> = data
        .iter()
        .map(|v| v["date"].as_str().expect("a date"))
        .collect();
    assert!(
        dates.windows(2).all(|w| w[0] <= w[1]),
        "sorted by date: {dates:?}"
    );
    let a = data
        .iter()
        .find(|v| {
            v["path"]
                .as_str()
                .is_some_and(|p| p.ends_with("quickstart/a"))
        })
        .expect("run a");
    assert_eq!(a["state"], "complete");
    assert_eq!(a["job"], "quickstart");
    assert_eq!(a["workload"], "logistic");
    assert_eq!(a["workers"], 4);
    assert_eq!(a["iterations"], 6);
    assert_eq!(
        a["cpu"],
        cpu_model().as_str(),
        "the run records its machine"
    );
    assert!(a["git_revision"].as_str().is_some_and(|r| !r.is_empty()));
    assert_eq!(a["params_sha256"].as_str().map(str::len), Some(64));
    assert!(a["test_accuracy"].as_f64().is_some_and(|x| x > 0.5));
    let crashed = data
        .iter()
        .find(|v| v["path"].as_str().is_some_and(|p| p.ends_with("crashed")))
        .expect("crashed run");
    assert_eq!(crashed["state"], "incomplete");
    assert_eq!(crashed["policy"], "bsp", "from machine.json");

    // one run directory lists itself; a missing directory is an error
    let o = forestall_in(d, &["--json", "runs", "runs/quickstart/b"]);
    assert_eq!(json_data(&o.stdout).len(), 1);
    let o = forestall_in(d, &["runs", "nowhere"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("nowhere is not a directory"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn compare_puts_runs_side_by_side_and_overlays_their_curves() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let d = tmp.path();
    run(d, "a", &[]);
    run(d, "b", &["--policy", "rapid-reassign"]);

    let o = forestall_in(d, &["compare", "a", "b", "--out", "cmp.html"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.starts_with("| field | a | b |"), "{out}");
    assert!(out.contains("| policy | bsp | rapid-reassign |"), "{out}");
    assert!(out.contains("cmp.html"), "{out}");
    // same machine, same binary: nothing to warn about
    assert!(!text(&o.stderr).contains("warning"), "{}", text(&o.stderr));
    let html = std::fs::read_to_string(d.join("cmp.html")).expect("page");
    for id in ["loss", "accuracy", "iteration-time"] {
        assert!(html.contains(&format!("id=\"{id}\"")), "{id} plot");
    }
    let loss = &html[html.find("id=\"loss\"").expect("loss")..];
    assert!(
        loss.contains(">\na\n<") && loss.contains(">\nb\n<"),
        "both runs in the legend"
    );

    // another machine and another revision: warned about, on stderr and as
    // JSON lines
    let origin = d.join("b/machine.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&origin).expect("machine.json"))
            .expect("json");
    v["machine"]["cpu"] = "Imaginary CPU 9000".into();
    v["git_revision"] = "0123456789ab".into();
    std::fs::write(&origin, v.to_string()).expect("write");
    let o = forestall_in(d, &["compare", "a", "b", "--out", "cmp.html"]);
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("different machines") && err.contains("Imaginary CPU 9000 (b)"),
        "{err}"
    );
    assert!(err.contains("different git revisions"), "{err}");
    let o = forestall_in(d, &["--json", "compare", "a", "b", "--out", "cmp.html"]);
    let lines: Vec<serde_json::Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    let kinds: Vec<&str> = lines
        .iter()
        .map(|l| l["type"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "warning").count(),
        2,
        "{kinds:?}"
    );
    assert_eq!(
        kinds.iter().filter(|k| **k == "run").count(),
        2,
        "{kinds:?}"
    );
    assert_eq!(kinds.last(), Some(&"compare"));
    let run_a = lines.iter().find(|l| l["type"] == "run").expect("run line");
    assert_eq!(run_a["data"]["summary"]["iterations"], 6);
}

#[test]
fn compare_says_what_is_not_comparable_and_refuses_what_is_not_a_run() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let d = tmp.path();
    run(d, "a", &[]);
    // The same run relabelled as another job of another workload: compare
    // reads the job and workload from the run's files.
    copy_dir(&d.join("a"), &d.join("other"));
    for file in ["summary.json", "machine.json"] {
        let path = d.join("other").join(file);
        let t = std::fs::read_to_string(&path).expect("read");
        let t = t
            .replace("\"quickstart\"", "\"mnist\"")
            .replace("\"logistic\"", "\"softmax\"");
        std::fs::write(&path, t).expect("write");
    }
    let o = forestall_in(d, &["compare", "a", "other", "--out", "cmp.html"]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        out.contains("note: the runs are of different jobs"),
        "{out}"
    );
    assert!(
        out.contains("note: the runs train different workloads: logistic (a); softmax (other)"),
        "{out}"
    );
    assert!(out.contains("curves (iteration-time)"), "{out}");
    let html = std::fs::read_to_string(d.join("cmp.html")).expect("page");
    assert!(html.contains("id=\"iteration-time\"") && !html.contains("id=\"loss\""));

    // not a run, no run at all, a missing directory: exit 2, named
    std::fs::create_dir_all(d.join("empty")).expect("mkdir");
    for (args, needle) in [
        (
            vec!["compare", "a", "empty"],
            "empty is not a run directory",
        ),
        (
            vec!["compare", "a", "missing"],
            "missing is not a directory",
        ),
        (vec!["compare"], "required"),
    ] {
        let o = forestall_in(d, &args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{needle:?} in {err}");
    }
    assert!(
        !d.join("compare.html").exists(),
        "nothing written on bad input"
    );
}

#[test]
fn a_runs_report_has_loss_accuracy_and_iteration_time_curves() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let d = tmp.path();
    run(d, "a", &[]);
    let o = forestall_in(d, &["report", "a"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let html = std::fs::read_to_string(d.join("a/report.html")).expect("page");
    for id in ["loss", "accuracy", "iteration-time"] {
        assert!(html.contains(&format!("id=\"{id}\"")), "{id} curve");
    }
    let md = std::fs::read_to_string(d.join("a/report.md")).expect("md");
    assert!(
        md.contains("| training loss |") && md.contains("over 6 iterations"),
        "{md}"
    );
}
