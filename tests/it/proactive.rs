//! The proactive policies inside real runs: units move before an iteration
//! from the worker predicted to be slow, every unit is still computed exactly
//! once, the parameters are BSP's, and every worker's prediction is in the
//! trace next to what then happened.

use std::collections::BTreeMap;

use forestall::policy::PolicyPlan;
use forestall::spec::JobPlan;
use forestall::trace::{read_trace_dir, UnitAction};

use crate::common::{forestall, plan, run, run_in, run_within};

/// A persistent straggler (worker 1, 6× slower), many small units, and every
/// control message held a seeded random 0–5 activations.
fn job(policy: &str, predictor: &str) -> String {
    format!(
        r#"
[job]
iterations = 8
seed = 13
[data]
partitions = 32
units_per_partition = 8
batch_fraction = 1.0
[workers]
count = 4
pace_ns_per_row = 3000
[straggler]
pattern = "persistent"
workers = [1]
factor = 6.0
[policy]
name = "{policy}"
control_delay = 5
{predictor}
"#
    )
}

/// The digest of the same job under `bsp` (no predictor, native speed).
fn bsp_digest(p: &JobPlan) -> String {
    let mut bsp = p.clone();
    bsp.policy = PolicyPlan::Bsp;
    bsp.pace_ns_per_row = 0;
    bsp.control_delay = 0;
    bsp.predictor = None;
    run(&bsp).digest
}

/// Every unit of the job's 8 iterations × 32 partitions × 8 units is in the
/// trace once: computed once by its holder or a peer it moved to, or — under
/// `forestall`, which copies a unit slowed in flight — also (or only) as the
/// copy that finished first. The plan's moves themselves are never clones.
fn each_unit_once(trace: &forestall::trace::TraceSet, what: &str) {
    let copies_in_flight = what.starts_with("forestall") && what != "forestall-ssp";
    let mut ledger: BTreeMap<(u64, u32, u32), (u32, u32)> = BTreeMap::new();
    for u in &trace.units {
        let (moved, copied) = ledger
            .entry((u.iteration, u.partition, u.unit))
            .or_default();
        if u.action == UnitAction::Clone {
            assert!(copies_in_flight, "{what}: a clone");
            *copied += 1;
        } else {
            *moved += 1;
        }
    }
    assert_eq!(
        ledger.len(),
        8 * 32 * 8,
        "{what}: every unit is in the trace"
    );
    assert!(
        ledger
            .values()
            .all(|&(moved, copied)| moved == 1 || (moved == 0 && copied == 1)),
        "{what}: a unit computed twice"
    );
}

#[test]
fn proactive_policies_move_work_off_the_predicted_straggler_exactly_once() {
    for policy in ["proactive", "forestall"] {
        let p = plan(&job(policy, ""));
        let dir = tempfile::tempdir().expect("temp dir");
        let out = run_in(&p, dir.path());
        let trace = read_trace_dir(dir.path()).expect("trace reads");
        each_unit_once(&trace, policy);

        // Iteration 0 has no history; from iteration 4 on the straggler
        // gives most of its units away before the iteration starts: the
        // default predictor calls it slow once its slowdown has lasted two
        // iterations (from iteration 2), and the plan acts on that once such
        // a slowdown has gone on twice before (iterations 0–3 show it).
        // What it gives away is counted, not what it computes: under
        // `forestall` the broker may hand units back to it mid-iteration
        // when the machine slows its peers too (many tests on 2 cores).
        let straggler = |t: u64| {
            trace
                .workers
                .iter()
                .find(|w| w.worker == 1 && w.iteration == t)
                .expect("worker 1's row")
                .clone()
        };
        assert!(straggler(0).predicted_unit_us.is_none());
        for t in 2..8 {
            let w = straggler(t);
            assert!(
                t < 4 || w.units_given >= 64 / 2,
                "{policy} iteration {t}: worker 1 gave away only {} of its 64 units",
                w.units_given
            );
            let predicted = w
                .predicted_unit_us
                .expect("a prediction from iteration 1 on");
            let actual = w.busy_us as f64 / f64::from(w.units);
            assert!(
                predicted > 2.0 * actual / 6.0 && predicted < 3.0 * actual,
                "{policy} iteration {t}: predicted {predicted} µs per unit, took {actual}"
            );
        }
        for w in trace.workers.iter().filter(|w| w.iteration >= 1) {
            assert!(w.predicted_unit_us.is_some(), "{policy}: {w:?}");
        }
        // ... and the parameters are BSP's.
        assert_eq!(bsp_digest(&p), out.digest, "{policy}");
    }
}

/// `forestall-ssp` plans under slack: the plan for iteration t learns from
/// the iterations up to t − 1 − slack, which every worker has when it
/// begins t, so every worker computes the same plan and each unit is still
/// computed once; nobody runs ahead by more than the slack, and the
/// straggler's work moves off it.
#[test]
fn forestall_ssp_plans_under_slack_and_computes_each_unit_once() {
    let p = plan(&job("forestall-ssp", "slack = 1"));
    assert!(!p.policy.keeps_bsp_semantics());
    let dir = tempfile::tempdir().expect("temp dir");
    let out = run_in(&p, dir.path());
    assert_eq!(out.iterations.len(), 8);
    let trace = read_trace_dir(dir.path()).expect("trace reads");
    each_unit_once(&trace, "forestall-ssp");
    for w in &trace.workers {
        assert!(w.iteration - w.params_version <= 1, "{w:?}");
        // iteration t's plan knows the iterations up to t − 2
        assert_eq!(w.predicted_unit_us.is_some(), w.iteration >= 2, "{w:?}");
    }
    for t in 5..8 {
        let w = trace
            .workers
            .iter()
            .find(|w| w.worker == 1 && w.iteration == t)
            .expect("worker 1's row");
        assert!(
            w.units < 64 / 2,
            "iteration {t}: worker 1 computed {}",
            w.units
        );
    }
    assert!(out.eval.accuracy > 0.8, "accuracy {}", out.eval.accuracy);
}

/// At native speed a worker under slack can be an iteration ahead when a
/// peer's planned units for the iteration before reach it: it computes them
/// as that iteration's units, not as its own of the next, so every
/// iteration's sum completes (before, such a run could hang) and each unit
/// is computed once.
#[test]
fn forestall_ssp_at_native_speed_completes_every_iteration() {
    let p = plan(
        r#"
[job]
iterations = 60
seed = 7
[data]
partitions = 32
units_per_partition = 4
batch_fraction = 0.5
[workers]
count = 4
[straggler]
pattern = "slow-worker"
probability = 0.1
delay_percent = 400
[policy]
name = "forestall-ssp"
control_delay = 3
"#,
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let (iterations, trace) = run_within(
        p,
        dir.path(),
        std::time::Duration::from_secs(120),
        "the run ends within two minutes",
        |out, path| {
            let trace = read_trace_dir(path).expect("trace reads");
            (out.iterations.len(), trace)
        },
    );
    assert_eq!(iterations, 60);
    let mut ledger: BTreeMap<(u64, u32, u32), u32> = BTreeMap::new();
    for u in &trace.units {
        *ledger
            .entry((u.iteration, u.partition, u.unit))
            .or_default() += 1;
    }
    assert_eq!(ledger.len(), 60 * 32 * 4);
    assert!(ledger.values().all(|&n| n == 1));
}

/// `auto` picks among its candidates per worker; under a persistent
/// straggler the plan still moves its work away, each unit once, and the
/// parameters are BSP's.
#[test]
fn forestall_with_the_auto_predictor_moves_work_and_keeps_bsp_parameters() {
    let p = plan(&job("forestall", "[predictor]\nname = \"auto\""));
    let dir = tempfile::tempdir().expect("temp dir");
    let out = run_in(&p, dir.path());
    let trace = read_trace_dir(dir.path()).expect("trace reads");
    each_unit_once(&trace, "forestall with auto");
    let late: u32 = trace
        .workers
        .iter()
        .filter(|w| w.worker == 1 && w.iteration >= 2)
        .map(|w| w.units)
        .sum();
    assert!(
        late < 6 * 64 / 2,
        "worker 1 computed {late} units in iterations 2–7"
    );
    assert_eq!(bsp_digest(&p), out.digest);
}

/// Any policy may record predictions; the predictor changes nothing else.
#[test]
fn a_predictor_on_bsp_only_records_predictions() {
    let p = plan(&job("bsp", "[predictor]\nname = \"ewma\"\nalpha = 0.5"));
    let dir = tempfile::tempdir().expect("temp dir");
    let out = run_in(&p, dir.path());
    let trace = read_trace_dir(dir.path()).expect("trace reads");
    assert!(trace.units.iter().all(|u| u.action == UnitAction::Assigned));
    let w1: Vec<_> = trace.workers.iter().filter(|w| w.worker == 1).collect();
    assert!(w1.iter().skip(1).all(|w| w.predicted_unit_us.is_some()));
    let mut none = p.clone();
    none.predictor = None;
    assert_eq!(run(&none).digest, out.digest);
}

/// Clones of the predicted straggler's units on the others: every unit is
/// computed at least once, at most the budget twice, and the reduction counts
/// each once (BSP's parameters).
#[test]
fn proactive_clone_clones_within_its_budget_and_counts_every_unit_once() {
    // `extra` lands in [policy]
    let p = plan(&job("proactive-clone", "clone_budget = 0.2"));
    let dir = tempfile::tempdir().expect("temp dir");
    let out = run_in(&p, dir.path());
    let trace = read_trace_dir(dir.path()).expect("trace reads");
    let ledger = crate::common::ledger(&trace);
    assert_eq!(ledger.len(), 8 * 32 * 8, "every unit is in the trace");
    for t in 0..8u64 {
        let twice = ledger
            .iter()
            .filter(|((it, _, _), v)| *it == t && v.len() > 1)
            .count();
        assert!(
            twice <= 32 * 8 / 5,
            "iteration {t}: {twice} units computed twice"
        );
        assert!(ledger
            .iter()
            .filter(|((it, _, _), _)| *it == t)
            .all(|(_, v)| v.iter().filter(|a| a.is_original()).count() <= 1));
    }
    let clones = trace
        .units
        .iter()
        .filter(|u| u.action == UnitAction::Clone && u.iteration >= 2)
        .count();
    assert!(clones > 0, "the predicted straggler's units were cloned");
    assert!(trace
        .units
        .iter()
        .filter(|u| u.iteration < 1)
        .all(|u| u.action == UnitAction::Assigned));
    assert_eq!(bsp_digest(&p), out.digest);
}

/// DPro-SM's substitution: the predicted straggler computes a floor of its
/// partitions and the others' last gradients stand in; the iteration rows name
/// the substituted partitions, every other unit is computed exactly once, and
/// the result differs from BSP's (lossy) while training still progresses.
#[test]
fn dpro_substitute_replaces_the_predicted_stragglers_gradients_and_records_it() {
    let p = plan(&job("dpro-substitute", ""));
    let dir = tempfile::tempdir().expect("temp dir");
    let out = run_in(&p, dir.path());
    let trace = read_trace_dir(dir.path()).expect("trace reads");
    let owned_by_1: Vec<u32> = (0..32)
        .filter(|&q| trace.units.iter().any(|u| u.partition == q && u.owner == 1))
        .collect();
    for it in &trace.iterations {
        let dropped: Vec<u32> = it
            .dropped_partitions
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().expect("partition"))
            .collect();
        if it.iteration == 0 {
            assert!(dropped.is_empty(), "no history, no substitution");
            continue;
        }
        // the straggler keeps ⌈10 %⌉ of its 8 partitions: 7 substituted
        assert_eq!(dropped.len(), 7, "iteration {}: {dropped:?}", it.iteration);
        assert!(dropped.iter().all(|q| owned_by_1.contains(q)));
        let mut seen: BTreeMap<(u32, u32), u32> = BTreeMap::new();
        for u in trace.units.iter().filter(|u| u.iteration == it.iteration) {
            *seen.entry((u.partition, u.unit)).or_default() += 1;
        }
        assert!(seen.keys().all(|(q, _)| !dropped.contains(q)));
        assert_eq!(seen.len(), (32 - 7) * 8, "iteration {}", it.iteration);
        assert!(seen.values().all(|&n| n == 1));
    }
    let losses: Vec<f64> = trace.iterations.iter().map(|i| i.train_loss).collect();
    assert!(losses.iter().all(|l| l.is_finite()));
    assert!(losses.last() < losses.first(), "{losses:?}");
    assert_ne!(bsp_digest(&p), out.digest, "substitution is lossy");
}

#[test]
fn predictor_settings_are_checked() {
    let dir = tempfile::tempdir().expect("temp dir");
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write job");
        path
    };
    let cases = [
        (
            "[predictor]\nname = \"oracle\"\n",
            "unknown predictor 'oracle'; accepted: last, ewma, sustained, median, lstm, auto",
        ),
        (
            "[predictor]\nname = \"auto\"\nmodel = \"nowhere\"\n",
            "nowhere",
        ),
        (
            "[predictor]\nname = \"sustained\"\nmodel = \"m\"\n",
            "model: does not apply to predictor 'sustained'",
        ),
        (
            "[predictor]\nname = \"last\"\nalpha = 0.5\n",
            "alpha: does not apply to predictor 'last'",
        ),
        (
            "[predictor]\nname = \"ewma\"\nalpha = 0\n",
            "alpha: must be in (0, 1]",
        ),
        (
            "[predictor]\nname = \"lstm\"\n",
            "lstm needs `model = \"DIR\"`",
        ),
        (
            "[predictor]\nname = \"lstm\"\nmodel = \"nowhere\"\n",
            "nowhere",
        ),
        ("[predictor]\nk = 3\n", "k: set without [predictor] name"),
        (
            "[predictor]\nname = \"median\"\nwindow = 0\n",
            "window: must be at least 1 (got 0)",
        ),
        (
            "[predictor]\nname = \"sustained\"\nwindow = 8\n",
            "window: does not apply to predictor 'sustained' (it is a median knob)",
        ),
        (
            "[predictor]\nname = \"median\"\nk = 2\n",
            "k: does not apply to predictor 'median'",
        ),
        (
            "[predictor]\nwindow = 8\n",
            "window: set without [predictor] name",
        ),
        (
            "[policy]\nname = \"proactive\"\nfloor = 1.5\n",
            "floor: must be in [0, 1)",
        ),
        (
            "[policy]\nname = \"bsp\"\nmin_gain = 1\n",
            "min_gain: does not apply to policy 'bsp'",
        ),
        (
            "[policy]\nname = \"proactive-clone\"\nclone_budget = 0\n",
            "clone_budget: must be in (0, 1]",
        ),
        (
            "[policy]\nname = \"proactive\"\nclone_budget = 0.5\n",
            "clone_budget: does not apply to policy 'proactive'",
        ),
        (
            "[policy]\nname = \"dpro-substitute\"\nthreshold = 1\n",
            "threshold: must be a number above 1",
        ),
        (
            "[policy]\nname = \"bsp\"\nthreshold = 2\n",
            "threshold: does not apply to policy 'bsp'",
        ),
    ];
    for (i, (text, expected)) in cases.iter().enumerate() {
        let path = write(&format!("job{i}.toml"), text);
        let out = forestall(&[
            "run",
            path.to_str().expect("utf-8"),
            "--out",
            dir.path().join(format!("out{i}")).to_str().expect("utf-8"),
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text}: {err}");
        assert!(err.contains(expected), "{text}: {err}");
        assert!(
            !dir.path().join(format!("out{i}")).exists(),
            "{text}: wrote output"
        );
    }
}

/// Every worker's timing reaches every worker through worker 0: each sends
/// one message an iteration and worker 0 passes them on, so the control
/// traffic per worker does not grow with the worker count (a broadcast from
/// every worker to every worker would add W − 1 messages per worker).
#[test]
fn timings_travel_through_worker_0_so_traffic_per_worker_stays_flat() {
    let per_worker = |workers: u32| {
        let p = plan(&format!(
            r#"
[job]
iterations = 6
seed = 3
[data]
partitions = 32
units_per_partition = 2
batch_fraction = 0.25
[workers]
count = {workers}
pace_ns_per_row = 1000
[policy]
name = "forestall"
"#
        ));
        let dir = tempfile::tempdir().expect("temp dir");
        run_in(&p, dir.path());
        let trace = read_trace_dir(dir.path()).expect("trace");
        // Worker 0 passes every iteration's timings on to the others.
        let relayed: u32 = trace
            .workers
            .iter()
            .filter(|w| w.worker == 0)
            .map(|w| w.control_sent)
            .sum();
        assert!(relayed >= 5 * (workers - 1), "worker 0 sent {relayed}");
        let sent: u32 = trace.workers.iter().map(|w| w.control_sent).sum();
        f64::from(sent) / f64::from(workers) / 6.0
    };
    let (nine, sixteen) = (per_worker(9), per_worker(16));
    eprintln!("messages per worker and iteration: {nine:.1} at W = 9, {sixteen:.1} at W = 16");
    assert!(
        sixteen < nine + 3.0,
        "messages per worker and iteration: {nine:.1} at W = 9, {sixteen:.1} at W = 16"
    );
}
