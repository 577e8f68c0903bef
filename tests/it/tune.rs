//! `forestall run --stop-after` and `forestall tune`: a stopped run continued
//! from its checkpoint ends with the uninterrupted parameters; a tune's
//! configurations are ordinary runs scored on a validation slice, the
//! better half continuing from their checkpoints; an interrupted tune
//! continues; bad input is refused before anything is written.

use std::path::Path;

use crate::common::{adult_path, forestall_in as forestall, json_data};

const ITERATIONS: u64 = 8;

fn write_job(dir: &Path) {
    std::fs::write(
        dir.join("job.toml"),
        format!(
            "[job]\nname = \"tune-test\"\niterations = {ITERATIONS}\nseed = 5\n[data]\npath = \"{}\"\nlabel = \"income\"\npositive = \">50K\"\npartitions = 8\nunits_per_partition = 2\nbatch_fraction = 0.1\n[model]\nlearning_rate = 0.05\n[workers]\ncount = 2\n[straggler]\npattern = \"slow-worker\"\nprobability = 0.2\ndelay_percent = 200\n[checkpoint]\nevery = 0\n",
            adult_path().display()
        ),
    )
    .expect("job");
}

fn digest(dir: &Path) -> String {
    let text = std::fs::read_to_string(dir.join("summary.json")).expect("a summary");
    let v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    v["params_sha256"].as_str().expect("digest").to_owned()
}

fn ok(o: &std::process::Output) {
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn a_stopped_run_continued_from_its_checkpoint_ends_as_if_it_never_stopped() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_job(dir.path());
    // forestall's plan needs the predictor's history, which the checkpoint
    // at the stop must hold as any other does.
    for policy in ["bsp", "forestall"] {
        let (whole, cut) = (format!("whole-{policy}"), format!("cut-{policy}"));
        let p = ["--policy", policy];
        ok(&forestall(
            dir.path(),
            &[&["-q", "run", "job.toml", "--out", &whole][..], &p].concat(),
        ));
        let o = forestall(
            dir.path(),
            &[
                &[
                    "-q",
                    "--json",
                    "run",
                    "job.toml",
                    "--out",
                    &cut,
                    "--stop-after",
                    "3",
                ][..],
                &p,
            ]
            .concat(),
        );
        ok(&o);
        let summary = json_data(&o.stdout).pop().expect("a summary");
        assert_eq!(summary["iterations"], 3);
        assert_eq!(summary["stopped_of"], ITERATIONS);
        for stop in ["6", "8"] {
            ok(&forestall(
                dir.path(),
                &[
                    &[
                        "-q",
                        "run",
                        "job.toml",
                        "--resume",
                        &cut,
                        "--stop-after",
                        stop,
                    ][..],
                    &p,
                ]
                .concat(),
            ));
        }
        assert_eq!(
            digest(&dir.path().join(&cut)),
            digest(&dir.path().join(&whole)),
            "{policy}"
        );
        let mut stamp = None;
        let rows =
            forestall::trace::read_iterations(&dir.path().join(&cut).join("trace"), &mut stamp)
                .expect("rows");
        let iterations: Vec<u64> = rows.iter().map(|r| r.iteration).collect();
        assert_eq!(
            iterations,
            (0..ITERATIONS).collect::<Vec<_>>(),
            "each iteration once"
        );
    }
    // Stopping past the job, or where a resumed run already is, is refused.
    let o = forestall(
        dir.path(),
        &["run", "job.toml", "--out", "x", "--stop-after", "9"],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--stop-after 9"));
    assert!(!dir.path().join("x").exists());
    ok(&forestall(
        dir.path(),
        &["-q", "run", "job.toml", "--out", "y", "--stop-after", "4"],
    ));
    let o = forestall(
        dir.path(),
        &["run", "job.toml", "--resume", "y", "--stop-after", "4"],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("resumes at iteration 4"));
}

fn tune(dir: &Path, out: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "-q",
        "--json",
        "tune",
        "job.toml",
        "--over",
        "model.learning_rate=0.0005,0.05,0.5",
        "--over",
        "data.units_per_partition=1,2",
        "--target",
        "accuracy=0.8",
        "--out",
        out,
    ];
    args.extend_from_slice(extra);
    forestall(dir, &args)
}

fn segments(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("segments.jsonl"))
        .expect("segments")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a segment"))
        .collect()
}

#[test]
fn halving_ranks_ordinary_runs_on_a_validation_slice_and_continues_the_better_half() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_job(dir.path());
    let o = tune(dir.path(), "t", &[]);
    ok(&o);
    let ranked = json_data(&o.stdout);
    assert_eq!(ranked.len(), 6, "every configuration ran its first rung");
    let out = dir.path().join("t");
    // 6 configurations: rungs of 1, 2, 4 and 8 iterations; 6 → 3 → 2 → 1.
    let segs = segments(&out);
    let at = |n: u64| segs.iter().filter(|s| s["stop_after"] == n).count();
    assert_eq!((at(1), at(2), at(4), at(8)), (6, 3, 2, 1), "{segs:?}");
    let winner = ranked[0]["config"].as_u64().expect("config") as usize;
    assert!(
        segs.iter()
            .any(|s| s["stop_after"] == 8 && s["config"] == winner as u64),
        "the winner trained to the end"
    );
    assert_eq!(ranked[0]["iterations"], ITERATIONS);
    // Each configuration is an ordinary run that evaluates on a slice of the
    // training rows, never on the test part.
    let run = out.join(format!("configs/{winner:03}"));
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("plan.json")).expect("plan"))
            .expect("JSON");
    assert_eq!(plan["data"]["validation_fraction"], 0.1);
    // The winner was continued from its checkpoints rung by rung: its
    // parameters are those of one uninterrupted run with its settings.
    let label = ranked[0]["label"].as_str().expect("label");
    let mut args = vec![
        "-q",
        "run",
        "job.toml",
        "--out",
        "straight",
        "--set",
        "data.validation_fraction=0.1",
    ];
    for word in label.split(' ') {
        args.extend(["--set", word]);
    }
    ok(&forestall(dir.path(), &args));
    assert_eq!(digest(&run), digest(&dir.path().join("straight")));
    // Ranked: those that reached the target by their time to it first.
    let times: Vec<Option<f64>> = ranked
        .iter()
        .map(|r| r["time_to_target_s"].as_f64())
        .collect();
    let reached = times.iter().take_while(|t| t.is_some()).count();
    assert!(times[reached..].iter().all(Option::is_none), "{times:?}");
    assert!(
        times[..reached].windows(2).all(|w| w[0] <= w[1]),
        "{times:?}"
    );
    assert!(
        reached >= 1,
        "a learning rate of 0.05 or 0.5 reaches 0.8: {ranked:?}"
    );
    for f in ["tune.md", "curves.svg", "curves.png", "tune.json"] {
        assert!(out.join(f).is_file(), "{f}");
    }
    let md = std::fs::read_to_string(out.join("tune.md")).expect("report");
    assert!(
        md.contains(&format!("| 1 | {winner:03} | `{label}`")),
        "{md}"
    );
}

#[test]
fn an_interrupted_tune_continues_to_the_uninterrupted_result() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_job(dir.path());
    ok(&tune(
        dir.path(),
        "whole",
        &["--strategy", "random", "--samples", "3"],
    ));
    // A budget spent after the first run stops the tune; the same command
    // without it continues.
    let o = tune(
        dir.path(),
        "cut",
        &[
            "--strategy",
            "random",
            "--samples",
            "3",
            "--budget",
            // above the least the first rung's compute can take (measured
            // before the tune), below one run's wall time
            "0.05",
        ],
    );
    ok(&o);
    assert_eq!(
        json_data(&o.stdout).len(),
        1,
        "one run before the budget ran out"
    );
    let o = tune(
        dir.path(),
        "cut",
        &["--strategy", "random", "--samples", "3"],
    );
    ok(&o);
    let (cut, whole) = (dir.path().join("cut"), dir.path().join("whole"));
    assert_eq!(segments(&cut).len(), 3, "the first run is not repeated");
    let ranking = |d: &Path| -> Vec<(String, String)> {
        let o = segments(d);
        let mut v: Vec<(String, String)> = o
            .iter()
            .map(|s| {
                let c = s["config"].as_u64().expect("config");
                (c.to_string(), digest(&d.join(format!("configs/{c:03}"))))
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(ranking(&cut), ranking(&whole));
    assert!(segments(&cut).iter().all(|s| s["stop_after"] == ITERATIONS));
    // A directory of another tune is not continued.
    let o = forestall(
        dir.path(),
        &[
            "tune",
            "job.toml",
            "--over",
            "model.l2=0,0.1",
            "--out",
            "cut",
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("holds another tune"));
}

#[test]
fn bad_tune_input_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_job(dir.path());
    let cases: &[(&[&str], &str)] = &[
        (&["--over", "model.nonsense=1,2"], "nonsense"),
        (&["--over", "model.learning_rate=0.1,,0.2"], "empty"),
        (&["--over", "model.learning_rate=0.1,0.1"], "listed twice"),
        (&["--over", "model.learning_rate=fast,0.1"], "learning_rate"),
        (&["--over", "model.learning_rate=-1,0.1"], "learning_rate"),
        (&["--over", "learning_rate=1,2"], "SECTION.KEY"),
        (&["--over", "model.l2=0,1", "--over", "model.l2=2"], "twice"),
        (
            &["--over", "model.l2=0,1", "--set", "model.l2=2"],
            "both set",
        ),
        (
            &["--over", "model.l2=0,1", "--target", "loglik=3"],
            "which way",
        ),
        (&["--over", "model.l2=0,1", "--budget", "0"], "--budget"),
        (
            &[
                "--over",
                "model.l2=0,1",
                "--pace",
                "100000000",
                "--budget",
                "1",
            ],
            "below one run",
        ),
        // unpaced: below the compute of the first rung as measured here
        (
            &["--over", "model.l2=0,1", "--budget", "0.000001"],
            "below one run",
        ),
        (&["--over", "model.l2=0,1", "--samples", "2"], "random"),
    ];
    for (extra, expected) in cases {
        let mut args = vec!["tune", "job.toml", "--out", "out"];
        args.extend_from_slice(extra);
        let o = forestall(dir.path(), &args);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(
            stderr.contains(expected),
            "{extra:?}: expected '{expected}' in {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(!dir.path().join("out").exists(), "{extra:?} wrote");
    }
}

#[test]
fn a_stopped_run_of_two_processes_continues_as_two_processes() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_job(dir.path());
    let two = ["--processes", "2", "--threads", "1"];
    ok(&forestall(
        dir.path(),
        &[&["-q", "run", "job.toml", "--out", "whole"][..], &two].concat(),
    ));
    ok(&forestall(
        dir.path(),
        &[
            &["-q", "run", "job.toml", "--out", "cut", "--stop-after", "5"][..],
            &two,
        ]
        .concat(),
    ));
    let summary = std::fs::read_to_string(dir.path().join("cut/summary.json")).expect("summary");
    assert!(summary.contains("\"stopped_of\": 8"), "{summary}");
    ok(&forestall(
        dir.path(),
        &[&["-q", "run", "job.toml", "--resume", "cut"][..], &two].concat(),
    ));
    assert_eq!(
        digest(&dir.path().join("cut")),
        digest(&dir.path().join("whole"))
    );
}

/// Processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
        })
        .collect()
}

#[test]
fn a_tune_killed_outright_takes_its_run_along_and_continues_when_run_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_job(dir.path());
    // Paced so that a configuration's run takes about 3 s, longer than a
    // run left behind may take to go.
    let args = |out: &str| -> Vec<String> {
        [
            "-q",
            "tune",
            "job.toml",
            "--over",
            "model.learning_rate=0.0005,0.05,0.5",
            "--strategy",
            "random",
            "--target",
            "accuracy=0.8",
            "--pace",
            "200000",
            "--out",
            out,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    ok(&forestall(
        dir.path(),
        &args("whole").iter().map(String::as_str).collect::<Vec<_>>(),
    ));
    let mut tune = std::process::Command::new(env!("CARGO_BIN_EXE_forestall"))
        .args(args("killed"))
        .current_dir(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("tune starts");
    let cut = dir.path().join("killed");
    let started = std::time::Instant::now();
    // Kill it once one configuration is done and the next one's run is on.
    while !(cut.join("segments.jsonl").exists()
        && cut.join("configs").read_dir().is_ok_and(|d| d.count() >= 2))
    {
        assert!(
            started.elapsed().as_secs() < 120,
            "the tune made no progress"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    tune.kill().expect("SIGKILL");
    tune.wait().expect("reaped");
    // Its runs are named by the relative --out the tune passes on.
    let needle = "killed/configs";
    let gone = std::time::Instant::now();
    while !processes_mentioning(needle).is_empty() {
        assert!(
            gone.elapsed().as_millis() < 1000,
            "the run outlived its tune"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    ok(&forestall(
        dir.path(),
        &args("killed")
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    ));
    assert_eq!(segments(&cut).len(), 3, "each configuration once");
    for c in 0..3 {
        let config = format!("configs/{c:03}");
        assert_eq!(
            digest(&cut.join(&config)),
            digest(&dir.path().join("whole").join(&config)),
            "{config}"
        );
    }
}
