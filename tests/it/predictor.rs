//! `forestall predictor train` and `eval --model` on a real imported trace
//! (ByteDance ST from `../shared/traces`), and their refusals.

use std::path::{Path, PathBuf};

use crate::common::{forestall, shared};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Imports ByteDance ST into `out` and returns its directory.
fn import_st(out: &Path) -> PathBuf {
    let st = shared("traces/bytedance-stragglers/trace-ST.parquet");
    let r = forestall(&[
        "import",
        "bytedance-ops",
        st.to_str().expect("utf-8"),
        "--out",
        out.to_str().expect("utf-8"),
    ]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    out.join("trace-ST")
}

#[test]
#[ignore = "needs ../shared"]
fn an_lstm_trained_on_a_head_scores_on_the_unseen_tail_and_nowhere_else() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let st = import_st(&tmp.path().join("imported"));
    let st = st.to_str().expect("utf-8");
    let model = tmp.path().join("model");
    let m = model.to_str().expect("utf-8");
    let train = |extra: &[&str]| {
        let mut args = vec!["predictor", "train", "--model", "lstm", st, "--out", m];
        args.extend(extra);
        forestall(&args)
    };
    let r = train(&["--train-until", "0.5", "--window", "4", "--max-epochs", "5"]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    assert!(text(&r.stdout).contains("saved to"), "{}", text(&r.stdout));
    let card: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(model.join("model.json")).expect("model card"),
    )
    .expect("json");
    assert_eq!(card["feature_set"], "forestall-steps-v1");
    assert_eq!(card["trained_on"][0]["share"], 0.5);
    assert!(model.join("weights.bpk").is_file());

    // Scored on the tail it never saw: the table gains an lstm row.
    let r = forestall(&["predictor", "eval", "--model", m, st, "--json"]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    let rows = crate::common::json_data(&r.stdout);
    let mae = |name: &str| {
        let row = rows
            .iter()
            .find(|s| s["predictor"] == name)
            .unwrap_or_else(|| panic!("a {name} row"));
        assert_eq!(row["predictions"], 8 * 16);
        row["mae_us"].as_f64().expect("a finite MAE")
    };
    // The model alone, and with its online gain: never far from holding the
    // last value, wherever the model's changes do not help.
    let (lstm, raw, last) = (mae("lstm"), mae("lstm-uncalibrated"), mae("last"));
    assert!(raw.is_finite());
    assert!(lstm <= 1.02 * last, "lstm {lstm} against last {last}");

    // A tail that reaches into the training part is leakage: refused.
    let r = forestall(&["predictor", "eval", "--model", m, st, "--tail-from", "0.3"]);
    assert_eq!(r.status.code(), Some(2));
    assert!(
        text(&r.stderr).contains("overlaps the scored tail"),
        "{}",
        text(&r.stderr)
    );

    // The model directory exists: refused without --force, kept as it was.
    let before = std::fs::read(model.join("weights.bpk")).expect("weights");
    let r = train(&["--window", "4"]);
    assert_eq!(r.status.code(), Some(2));
    assert!(text(&r.stderr).contains("--force"), "{}", text(&r.stderr));
    assert_eq!(
        std::fs::read(model.join("weights.bpk")).expect("weights"),
        before
    );

    // A window longer than the trace: a clear error, the old model untouched.
    let r = train(&["--window", "400", "--force"]);
    assert_eq!(r.status.code(), Some(2));
    assert!(
        text(&r.stderr).contains("window of 400 steps"),
        "{}",
        text(&r.stderr)
    );
    assert_eq!(
        std::fs::read(model.join("weights.bpk")).expect("weights"),
        before
    );
    let leftovers: Vec<_> = std::fs::read_dir(tmp.path())
        .expect("dir")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().contains("partial"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // The model predicts online inside a run: each worker's prediction lands
    // in the trace next to what then happened.
    let job = tmp.path().join("job.toml");
    std::fs::write(
        &job,
        format!(
            "[job]\niterations = 6\n[workers]\ncount = 3\n[policy]\nname = \"forestall\"\n\
             [predictor]\nname = \"lstm\"\nmodel = \"{}\"\n",
            model.display()
        ),
    )
    .expect("job");
    let out_dir = tmp.path().join("run");
    let r = forestall(&[
        "run",
        job.to_str().expect("utf-8"),
        "--out",
        out_dir.to_str().expect("utf-8"),
    ]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    let trace = forestall::trace::read_trace_dir(&out_dir.join("trace")).expect("trace");
    let predicted = trace
        .workers
        .iter()
        .filter(|w| w.iteration >= 1)
        .filter(|w| {
            w.predicted_unit_us
                .is_some_and(|p| p.is_finite() && p > 0.0)
        })
        .count();
    assert_eq!(predicted, 5 * 3, "{:?}", trace.workers);

    // A model of another feature set, or not a model at all.
    let card_path = model.join("model.json");
    let card_text = std::fs::read_to_string(&card_path).expect("card");
    std::fs::write(
        &card_path,
        card_text.replace("forestall-steps-v1", "steps-v0"),
    )
    .expect("write");
    let r = forestall(&["predictor", "eval", "--model", m, st]);
    assert_eq!(r.status.code(), Some(2));
    assert!(
        text(&r.stderr).contains("feature set steps-v0"),
        "{}",
        text(&r.stderr)
    );
    std::fs::write(&card_path, "not json").expect("write");
    let r = forestall(&["predictor", "eval", "--model", m, st]);
    assert_eq!(r.status.code(), Some(2));
    assert!(
        text(&r.stderr).contains("not a forestall LSTM model card"),
        "{}",
        text(&r.stderr)
    );
    let r = forestall(&["predictor", "eval", "--model", "no-such-model", st]);
    assert_eq!(r.status.code(), Some(2));
    assert!(
        text(&r.stderr).contains("no-such-model"),
        "{}",
        text(&r.stderr)
    );
}

/// A trace too short to hold a prediction is refused with what is missing,
/// rather than scored as a table of zeros: one iteration has nothing before
/// it to predict from. Two iterations are scored.
#[test]
fn a_trace_with_nothing_to_predict_is_refused_by_name() {
    let tmp = tempfile::tempdir().expect("temp dir");
    for iterations in ["1", "2"] {
        let dir = tmp.path().join(iterations);
        let d = dir.to_str().expect("utf-8");
        let synth = forestall(&[
            "trace",
            "synth",
            "--workers",
            "4",
            "--iterations",
            iterations,
            "--out",
            d,
        ]);
        assert!(synth.status.success(), "{}", text(&synth.stderr));
        let r = forestall(&["predictor", "eval", d]);
        if iterations == "1" {
            assert_eq!(r.status.code(), Some(2), "{}", text(&r.stdout));
            let err = text(&r.stderr);
            assert!(
                err.contains("nothing to score") && err.contains("at most 1 iteration"),
                "{err}"
            );
            assert!(r.stdout.is_empty(), "no table: {}", text(&r.stdout));
        } else {
            assert!(r.status.success(), "{}", text(&r.stderr));
            assert!(
                text(&r.stdout).contains("| last | 4 |"),
                "{}",
                text(&r.stdout)
            );
        }
    }
}
