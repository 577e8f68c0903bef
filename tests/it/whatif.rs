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
