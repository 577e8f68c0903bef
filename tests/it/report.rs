//! `forestall report`: the page renders in headless Chromium with its heatmap
//! and no console errors; the Markdown twin holds the same tables.

use std::path::Path;
use std::process::Command;

use crate::common::{forestall, plan, run_in, STRAGGLER};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Debian's Chromium; tests that call this are `#[ignore = "needs chromium"]`
/// and fail here, saying what to install, when it is missing.
fn chromium() -> &'static str {
    let path = "/usr/bin/chromium";
    assert!(
        Path::new(path).exists(),
        "{path} is missing: this test needs headless Chromium (`apt-get install chromium`)"
    );
    path
}

fn headless(chromium: &str, profile: &Path, extra: &[&str], page: &Path) -> std::process::Output {
    Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium starts")
}

/// Runs a small job into `dir/run`, reports it, checks the page and its
/// Markdown twin, and returns the page.
fn reported_run(dir: &Path) -> std::path::PathBuf {
    let run = dir.join("run");
    run_in(&plan(STRAGGLER), &run.join("trace"));
    let out = forestall(&["report", run.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let page = run.join("report.html");
    let html = std::fs::read_to_string(&page).expect("report.html");
    let md = std::fs::read_to_string(run.join("report.md")).expect("report.md");
    assert!(html.contains("id=\"heatmap\"") && html.contains("<svg"));
    assert!(
        !html.contains("<script") && !html.contains("src=\"http"),
        "self-contained"
    );
    // The same tables in both: worker 3 is the persistent straggler.
    assert!(md.contains("| 3 |") && md.contains("persistent"), "{md}");
    assert!(html.contains("<td>persistent</td>"));
    page
}

#[test]
fn a_runs_report_holds_its_heatmap_and_tables() {
    let dir = tempfile::tempdir().expect("temp dir");
    reported_run(dir.path());
}

#[test]
#[ignore = "needs chromium"]
fn a_runs_report_renders_with_its_heatmap_and_no_console_errors() {
    let chromium = chromium();
    let dir = tempfile::tempdir().expect("temp dir");
    let page = reported_run(dir.path());
    let profile = dir.path().join("profile");
    let dom = headless(chromium, &profile, &["--dump-dom"], &page);
    assert!(dom.status.success(), "{}", text(&dom.stderr));
    let rendered = text(&dom.stdout);
    assert!(
        rendered.contains("id=\"heatmap\""),
        "the heatmap is in the rendered page"
    );
    assert!(rendered.contains("<rect"), "its cells are drawn");
    let log = text(&dom.stderr);
    for line in log.lines() {
        assert!(
            !(line.contains("CONSOLE") || line.contains("Uncaught")),
            "console error: {line}"
        );
    }
    // A screenshot kept as a test artefact.
    let artefacts = Path::new(env!("CARGO_TARGET_TMPDIR")).join("artefacts");
    std::fs::create_dir_all(&artefacts).expect("artefact dir");
    let shot = artefacts.join("report.png");
    let _ = std::fs::remove_file(&shot);
    let screenshot = headless(
        chromium,
        &profile,
        &[
            "--window-size=1100,1600",
            &format!("--screenshot={}", shot.display()),
        ],
        &page,
    );
    assert!(screenshot.status.success(), "{}", text(&screenshot.stderr));
    let png = std::fs::read(&shot).expect("a screenshot");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
}

#[test]
fn report_refuses_what_it_cannot_report() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = forestall(&["report", "/no/such/run"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(text(&missing.stderr).contains("/no/such/run"));
    let empty = forestall(&["report", dir.path().to_str().expect("utf-8")]);
    assert_eq!(empty.status.code(), Some(2));
    assert!(text(&empty.stderr).contains("no trace and no bench results"));
    assert!(!dir.path().join("report.html").exists(), "nothing written");
}
