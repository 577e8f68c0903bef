//! The what-if replay drives the same policy agents as a timely run, from a
//! plain loop over the timings a real run recorded.

use forestall::policy::{PolicyPlan, ReassignConfig, SpeculateConfig};
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
    let speculate = PolicyPlan::Speculate(SpeculateConfig {
        group_size: 3,
        quantile: 0.75,
        multiplier: 1.5,
        max_clone_share: 0.5,
    });
    assert_eq!(
        replay(&timings, &speculate, 50).unwrap_err(),
        WhatIfError::Unsupported("speculate")
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

/// Mean time per iteration of a trace: its iterations' span on the job clock.
fn span_per_iteration(trace: &TraceSet) -> f64 {
    let first = trace.iterations.first().expect("iterations");
    let last = trace.iterations.last().expect("iterations");
    (last.end_us - first.start_us) as f64 / trace.iterations.len() as f64
}

/// The replay of a `bsp` run predicts what a run of another policy measures.
#[test]
fn replays_of_a_bsp_run_predict_the_real_runs_of_other_policies_within_10_percent() {
    use forestall::whatif::{replay_policy, Timings};
    for pattern in [
        "pattern = \"persistent\"\nworkers = [3]\nfactor = 4.0",
        "pattern = \"slow-worker\"\nprobability = 0.2\ndelay_percent = 400",
    ] {
        let job = |policy: &str| {
            // Enough iterations that one iteration's timing luck averages out.
            let text = STRAGGLER
                .split("[straggler]")
                .next()
                .expect("the job has a straggler section")
                .replace("iterations = 12", "iterations = 30");
            plan(&format!(
                "{text}[straggler]\n{pattern}\n[policy]\nname = \"{policy}\"\n"
            ))
        };
        let dir = tempfile::tempdir().expect("temp dir");
        run_in(&job("bsp"), &dir.path().join("bsp"));
        let timings = Timings::load(&dir.path().join("bsp")).expect("timings");
        for policy in ["bsp", "rapid-reassign"] {
            let real_dir = dir.path().join(policy);
            if policy != "bsp" {
                run_in(&job(policy), &real_dir);
            }
            let real = span_per_iteration(&read_trace_dir(&real_dir).expect("trace"));
            let plan = job(policy);
            let predicted = replay_policy(&timings, &plan.policy, None, 100)
                .expect("replays")
                .mean_iteration_us;
            let error = (predicted - real).abs() / real;
            eprintln!("{policy}: replay {predicted:.0} µs, real {real:.0} µs");

            assert!(
                error <= 0.10,
                "{pattern:?}, {policy}: replay {predicted:.0} µs vs real {real:.0} µs ({:.1} %)",
                error * 100.0
            );
        }
    }
}
