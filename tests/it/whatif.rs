//! The what-if replay drives the same policy agents as a timely run, from a
//! plain loop over the timings a real run recorded.

use forestall::policy::{PolicyPlan, ReassignConfig};
use forestall::trace::{read_trace_dir, TraceSet};
use forestall::whatif::{replay, timings_from_trace, WhatIfError};

use crate::common::{plan, run_in, STRAGGLER};

fn recorded_bsp() -> TraceSet {
    let dir = tempfile::tempdir().expect("temp dir");
    run_in(&plan(STRAGGLER), dir.path());
    read_trace_dir(dir.path()).expect("trace reads")
}

#[test]
fn replaying_a_bsp_trace_reproduces_it_and_reassignment_shortens_it() {
    let trace = recorded_bsp();
    let timings = timings_from_trace(&trace).expect("timings");
    assert_eq!(timings.len(), 12);
    let total = |policy: &PolicyPlan| -> u64 {
        let out = replay(&timings, policy, 50).expect("replays");
        for r in &out {
            assert_eq!(r.executed.len(), 16 * 4, "every unit exactly once");
        }
        out.iter().map(|r| r.makespan_us).sum()
    };
    let bsp = total(&PolicyPlan::Bsp);
    // What the run recorded: each iteration's slowest worker, ready to finish.
    let recorded: u64 = (0..12)
        .map(|t| {
            trace
                .workers
                .iter()
                .filter(|w| w.iteration == t)
                .map(|w| w.busy_us)
                .max()
                .unwrap_or(0)
        })
        .sum();
    let ratio = bsp as f64 / recorded as f64;
    assert!(
        (0.8..=1.05).contains(&ratio),
        "bsp replay {bsp} µs vs recorded {recorded} µs"
    );
    let reassign = total(&PolicyPlan::RapidReassign(ReassignConfig::default()));
    assert!(
        (reassign as f64) < 0.6 * bsp as f64,
        "rapid-reassign replay {reassign} µs vs bsp {bsp} µs"
    );
}

#[test]
fn unsupported_policies_and_empty_traces_are_refused() {
    let trace = recorded_bsp();
    let timings = timings_from_trace(&trace).expect("timings");
    let ssp = PolicyPlan::Ssp { slack: 1 };
    assert_eq!(
        replay(&timings, &ssp, 50).unwrap_err(),
        WhatIfError::Unsupported("ssp")
    );
    let empty = TraceSet {
        units: Vec::new(),
        ..trace
    };
    assert_eq!(
        timings_from_trace(&empty).unwrap_err(),
        WhatIfError::EmptyTrace
    );
}

/// `forestall args` exits with 2 (bad input), names `needle` and does not
/// panic.
fn refused(args: &[&str], needle: &str) {
    let o = crate::common::forestall(args);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: {err:?} lacks {needle:?}");
    assert!(!err.contains("panicked"), "{err}");
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_synthetic_trace_replays_from_the_command_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("synth");
    let synth = crate::common::forestall(&[
        "--json",
        "trace",
        "synth",
        "--workers",
        "40",
        "--iterations",
        "15",
        "--pattern",
        "persistent",
        "--knob",
        "workers = [7]",
        "--knob",
        "factor = 5.0",
        "--out",
        out.to_str().expect("utf-8"),
    ]);
    assert!(synth.status.success(), "{}", text(&synth.stderr));
    let written: serde_json::Value =
        serde_json::from_str(text(&synth.stdout).trim()).expect("a JSON line");
    let synth_mean = written["data"]["mean_iteration_us"].as_f64().expect("mean");
    assert_eq!(synth_mean, 5.0 * 4.0 * 100.0 * 10.0);

    let replay = crate::common::forestall(&[
        "--json",
        "whatif",
        out.to_str().expect("utf-8"),
        "--policy",
        "bsp,rapid-reassign",
        "--policy",
        "forestall",
    ]);
    assert!(replay.status.success(), "{}", text(&replay.stderr));
    let lines: Vec<serde_json::Value> = text(&replay.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    let policies: Vec<&str> = lines
        .iter()
        .map(|l| l["data"]["policy"].as_str().expect("policy"))
        .collect();
    assert_eq!(policies, ["bsp", "rapid-reassign", "forestall"]);
    assert!(
        lines.iter().all(|l| l["data"]["slowdowns"] == "iteration"),
        "a persistent slowdown follows the iteration: {lines:?}"
    );
    assert!(
        lines
            .iter()
            .all(|l| l["data"]["absent_worker_iterations"] == 0),
        "every worker is in every iteration of a synthetic trace: {lines:?}"
    );
    let mean = |i: usize| {
        lines[i]["data"]["mean_iteration_us"]
            .as_f64()
            .expect("mean")
    };
    let vs_bound = |i: usize| lines[i]["data"]["vs_bound"].as_f64().expect("vs_bound");
    assert_eq!(mean(0), synth_mean, "bsp replays a synthetic trace exactly");
    assert!(
        mean(1) < 0.6 * mean(0),
        "rapid-reassign: {} vs bsp {}",
        mean(1),
        mean(0)
    );
    assert!(vs_bound(1) < vs_bound(0) && vs_bound(1) >= 1.0);
    // The bound with whole units lies between the fluid bound and every
    // replay of a BSP-semantics policy.
    for (i, line) in lines.iter().enumerate().take(3) {
        let units = line["data"]["vs_unit_bound"].as_f64().expect("units");
        assert!((1.0 - 1e-9..=vs_bound(i) + 1e-9).contains(&units), "{line}");
    }
    // forestall learns the persistent straggler and plans around it.
    assert!(
        lines[2]["data"]["planned_units_per_iteration"]
            .as_f64()
            .expect("planned")
            > 0.0
    );
    assert!(mean(2) < mean(0));
    // Clones race: speculation and the plan's clones beat bsp, never the bound.
    let clones = crate::common::forestall(&[
        "--json",
        "whatif",
        out.to_str().expect("utf-8"),
        "--policy",
        "speculate,proactive-clone",
    ]);
    assert!(clones.status.success(), "{}", text(&clones.stderr));
    for line in text(&clones.stdout).lines() {
        let l: serde_json::Value = serde_json::from_str(line).expect("JSON");
        let ratio = l["data"]["vs_bound"].as_f64().expect("vs_bound");
        assert!(
            ratio >= 0.999 && l["data"]["mean_iteration_us"].as_f64().expect("mean") < mean(0),
            "{l}"
        );
    }
    // The synthetic trace analyses like a run's: worker 7 is the persistent one.
    let analysis = crate::common::forestall(&["--json", "analyze", out.to_str().expect("utf-8")]);
    assert!(analysis.status.success(), "{}", text(&analysis.stderr));
    let a: serde_json::Value = serde_json::from_str(text(&analysis.stdout).trim()).expect("JSON");
    assert_eq!(a["data"]["per_worker"][7]["class"], "persistent");
}

#[test]
fn bad_whatif_and_synth_input_is_refused_clearly() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("t");
    let path = out.to_str().expect("utf-8");
    let synth = |extra: &[&str]| {
        let mut args = vec![
            "trace",
            "synth",
            "--workers",
            "4",
            "--iterations",
            "3",
            "--out",
            path,
        ];
        args.extend_from_slice(extra);
        args.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let run = |args: Vec<String>, needle: &str| {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        refused(&refs, needle);
    };
    run(
        synth(&["--pattern", "sideways"]),
        "unknown pattern 'sideways'",
    );
    run(synth(&["--knob", "alpha=4"]), "alpha");
    run(synth(&["--knob", "probability"]), "KEY=VALUE");
    run(synth(&["--knob", "probability=2"]), "probability");
    run(synth(&["--us-per-row", "NaN"]), "--us-per-row");
    refused(
        &[
            "trace",
            "synth",
            "--workers",
            "0",
            "--iterations",
            "3",
            "--out",
            path,
        ],
        "at least 1",
    );
    assert!(!out.exists(), "nothing written by a refused synth");

    let ok = crate::common::forestall(&[
        "trace",
        "synth",
        "--workers",
        "4",
        "--iterations",
        "3",
        "--out",
        path,
    ]);
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    refused(
        &[
            "trace",
            "synth",
            "--workers",
            "4",
            "--iterations",
            "3",
            "--out",
            path,
        ],
        "already holds files",
    );
    refused(
        &["whatif", path, "--policy", "teleport"],
        "command line: [policy] name: unknown policy 'teleport'",
    );
    refused(
        &[
            "whatif",
            path,
            "--policy",
            "proactive",
            "--predictor",
            "oracle",
        ],
        "command line: [predictor] name: unknown predictor 'oracle'",
    );
    refused(
        &["whatif", path, "--policy", "flexrr"],
        "cannot be replayed yet",
    );
    refused(
        &["whatif", path, "--policy", "forestall-ssp"],
        "cannot be replayed yet",
    );
    refused(
        &[
            "whatif",
            path,
            "--policy",
            "forestall",
            "--predictor",
            "oracle",
        ],
        "oracle",
    );
    refused(&["whatif", "/no/such/trace"], "/no/such/trace");
    // a latency past an hour (u64::MAX wrapped to "arrives before it was
    // sent", and forestall moved work that could never arrive)
    refused(
        &["whatif", path, "--latency-us", "18446744073709551615"],
        "--latency-us 18446744073709551615 must be at most 3600000000",
    );
}

/// Iterations of a policy without a plan replay on several threads; the
/// outcome is the same as on one, to the bit.
#[test]
fn threads_do_not_change_a_replay() {
    use forestall::spec::policy_named;
    use forestall::whatif::{replay_policy_on, Timings};
    let dir = tempfile::tempdir().expect("temp dir");
    let out = synth_trace(dir.path(), "24", "70", &["--pattern", "power-law"]);
    let timings = Timings::load(&out).expect("timings");
    for name in ["bsp", "rapid-reassign", "speculate"] {
        let (policy, _) = policy_named(name, None, 24).expect("policy");
        let one = replay_policy_on(&timings, &policy, None, 100, Some(1)).expect("replays");
        for threads in [2, 3, 7] {
            let many =
                replay_policy_on(&timings, &policy, None, 100, Some(threads)).expect("replays");
            assert_eq!(one, many, "{name} on {threads} threads");
        }
    }
}

/// A policy with a plan replays each large iteration in two lanes of workers
/// (see `whatif::lanes`); the outcome is the same as in one, to the bit.
#[test]
fn lanes_do_not_change_a_replay() {
    use forestall::run::context::load_predictor;
    use forestall::spec::policy_named;
    use forestall::whatif::{replay_policy_on, Timings};
    let dir = tempfile::tempdir().expect("temp dir");
    let out = synth_trace(
        dir.path(),
        "3000",
        "6",
        &["--pattern", "slow-worker", "--knob", "probability=0.2"],
    );
    let timings = Timings::load(&out).expect("timings");
    for name in ["forestall", "proactive"] {
        let (policy, predictor) = policy_named(name, None, 3000).expect("policy");
        let predictor = predictor.map(|p| load_predictor(&p).expect("predictor"));
        let one =
            replay_policy_on(&timings, &policy, predictor.as_ref(), 100, Some(1)).expect("replays");
        let two =
            replay_policy_on(&timings, &policy, predictor.as_ref(), 100, Some(2)).expect("replays");
        assert_eq!(one, two, "{name} in one lane and in two");
        assert!(
            one.moved_units_per_iteration > 0.0 || name == "proactive",
            "{one:?}"
        );
    }
}

/// A synthetic trace of `workers` × `iterations` with `extra` arguments and a
/// jitter of 0.1, written under `dir`.
fn synth_trace(
    dir: &std::path::Path,
    workers: &str,
    iterations: &str,
    extra: &[&str],
) -> std::path::PathBuf {
    let out = dir.join("synth");
    let mut args = vec![
        "trace",
        "synth",
        "--workers",
        workers,
        "--iterations",
        iterations,
        "--jitter",
        "0.1",
    ];
    args.extend_from_slice(extra);
    let path = out.to_str().expect("utf-8");
    args.extend_from_slice(&["--out", path]);
    let synth = crate::common::forestall(&args);
    assert!(synth.status.success(), "{}", text(&synth.stderr));
    out
}

/// One iteration of 32 workers with 16 units each, where six neighbours in
/// the ring are 5× slow: their helper groups overlap, so rapid reassignment
/// alone buries the few fast peers among them; `forestall`'s broker balances
/// over every worker and comes within 10 % of the load-balancing bound, each
/// unit still computed once.
#[test]
fn the_broker_balances_beyond_helper_groups() {
    use forestall::policy::peer_agent;
    use forestall::whatif::{bound_us, replay_iteration};
    let workers = 32u32;
    let us_per_row: Vec<f64> = (0..workers)
        .map(|w| if (4..10).contains(&w) { 50.0 } else { 10.0 })
        .collect();
    let t = iteration_of(0, 16, 25, &us_per_row);
    let makespan = |broker: bool| {
        let policy = PolicyPlan::RapidReassign(ReassignConfig {
            broker,
            ..ReassignConfig::default()
        });
        let mut agents: Vec<_> = (0..workers)
            .map(|w| peer_agent(&policy, w, workers, workers))
            .collect();
        let r = replay_iteration(&t, &mut agents, 100, &[]);
        let mut keys: Vec<_> = r.executed.iter().map(|e| e.0).collect();
        keys.sort_by_key(|k| (k.partition, k.unit));
        keys.dedup();
        assert_eq!(keys.len(), r.executed.len(), "a unit computed twice");
        assert_eq!(keys.len(), 32 * 16, "a unit lost");
        r.makespan_us as f64
    };
    let bound = bound_us(&t);
    let (groups, brokered) = (makespan(false), makespan(true));
    eprintln!("bound {bound:.0} µs, groups {groups:.0} µs, broker {brokered:.0} µs");
    assert!(
        brokered <= 1.10 * bound && brokered < groups,
        "bound {bound:.0} µs: groups alone {groups:.0} µs, with the broker {brokered:.0} µs"
    );
}

/// A trace may start late (a resumed run, an import cut from a longer job):
/// the predictive policies learn from its first iteration whatever its
/// number, and a persistently slow worker gets units planned away.
#[test]
fn a_trace_that_starts_late_still_feeds_the_predictor() {
    use forestall::run::context::load_predictor;
    use forestall::spec::policy_named;
    use forestall::whatif::{replay_policy, Timings};
    let workers = 4u32;
    let us_per_row = [10.0, 10.0, 10.0, 40.0];
    let timings = Timings::Units(
        (0..6)
            .map(|i| iteration_of(1000 + 3 * i, 8, 10, &us_per_row))
            .collect(),
    );
    let (policy, predictor) = policy_named("proactive", None, workers).expect("policy");
    let predictor = predictor.map(|p| load_predictor(&p).expect("predictor"));
    let o = replay_policy(&timings, &policy, predictor.as_ref(), 10).expect("replays");
    assert!(o.planned_units_per_iteration > 0.0, "{o:?}");
    assert!(o.mean_iteration_us < 8.0 * 400.0, "{o:?}");
}

/// Iteration `iteration` of one worker per entry of `us_per_row`, each with
/// `units` units of `rows` rows of its own, timed at its µs per row.
fn iteration_of(
    iteration: u64,
    units: u32,
    rows: u32,
    us_per_row: &[f64],
) -> forestall::whatif::IterationTimings {
    use forestall::data::UnitKey;
    use forestall::whatif::TimedUnit;
    forestall::whatif::IterationTimings {
        iteration,
        own: (0..us_per_row.len() as u32)
            .map(|w| {
                (0..units)
                    .map(|unit| TimedUnit {
                        key: UnitKey { partition: w, unit },
                        rows,
                        owner_us: (f64::from(rows) * us_per_row[w as usize]).round() as u64,
                        micro_batches: 1,
                        rest: false,
                        piece: false,
                    })
                    .collect()
            })
            .collect(),
        us_per_row: us_per_row.to_vec(),
        overhead_us: 0,
    }
}

/// `--predictor lstm` replays the predictive policies with a trained model
/// (its online gain included); the model is named with `--model`, and the
/// two must come together.
#[test]
fn a_replay_predicts_with_an_lstm_given_its_model() {
    let dir = tempfile::tempdir().expect("temp dir");
    let trace = synth_trace(
        dir.path(),
        "8",
        "30",
        &["--pattern", "persistent", "--units", "8"],
    );
    let trace = trace.to_str().expect("utf-8");
    let model = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/pipelines/models/lstm-policies-bound"
    );
    let replay = |predictor: &[&str]| {
        let mut args = vec!["whatif", trace, "--policy", "proactive,bsp", "--json"];
        args.extend_from_slice(predictor);
        let out = crate::common::forestall(&args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let rows = crate::common::json_data(&out.stdout);
        let mean = |policy: &str| {
            rows.iter()
                .find(|r| r["policy"] == policy)
                .and_then(|r| r["mean_iteration_us"].as_f64())
                .expect("a row per policy")
        };
        (mean("proactive"), mean("bsp"))
    };
    // A persistent straggler: the plan moves work off it before each
    // iteration, with the LSTM as with `sustained`.
    let (lstm, bsp) = replay(&["--predictor", "lstm", "--model", model]);
    assert!(lstm < 0.9 * bsp, "lstm plan {lstm} against bsp {bsp}");
    let (auto, _) = replay(&["--predictor", "auto", "--model", model]);
    assert!(auto < 0.9 * bsp, "auto plan {auto} against bsp {bsp}");

    refused(
        &["whatif", trace, "--predictor", "lstm"],
        "--predictor lstm needs --model",
    );
    refused(
        &["whatif", trace, "--predictor", "last", "--model", model],
        "--model applies to --predictor lstm or auto",
    );
    refused(
        &[
            "whatif",
            trace,
            "--predictor",
            "lstm",
            "--model",
            "/no/such/model",
        ],
        "/no/such/model",
    );
}
