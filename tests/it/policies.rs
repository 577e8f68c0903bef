//! Mitigation policies inside real runs: BSP semantics (bit-identical
//! parameters) and exactly-once per unit, checked on a per-unit ledger.

use std::collections::BTreeMap;

use forestall::trace::{read_trace_dir, UnitAction};

use crate::common::{ledger, plan, run, run_in, run_within, STRAGGLER};

const JOB: &str = r#"
[job]
iterations = 10
seed = 5
[data]
partitions = 12
units_per_partition = 4
batch_fraction = 0.5
"#;

#[test]
fn every_policy_gives_the_bsp_parameters_for_every_worker_count() {
    let reference = run(&plan(&format!("{JOB}\n[workers]\ncount = 1\n")));
    for workers in 1..=4 {
        for policy in [
            "bsp",
            "rapid-reassign",
            "speculate",
            "proactive",
            "proactive-clone",
            "forestall",
            "ideal",
        ] {
            for pattern in [
                "pattern = \"slow-worker\"\nprobability = 0.3\ndelay_percent = 400",
                "pattern = \"persistent\"\nworkers = [0]\nfactor = 4.0",
            ] {
                let p = plan(&format!(
                    "{JOB}\n[workers]\ncount = {workers}\npace_ns_per_row = 2000\n[policy]\nname = \"{policy}\"\n[straggler]\n{pattern}\n"
                ));
                let out = run(&p);
                assert_eq!(
                    out.digest, reference.digest,
                    "{policy}, {workers} workers, {pattern}"
                );
            }
        }
    }
}

/// Thousands of tiny units, a persistent straggler, and every control message
/// held back a seeded random 0–5 activations of its receiver (so messages are
/// read in shuffled orders): every unit of every iteration is computed exactly
/// once, some by a peer.
#[test]
fn rapid_reassign_computes_every_unit_exactly_once() {
    let p = plan(
        r#"
[job]
iterations = 6
seed = 11
[data]
partitions = 64
units_per_partition = 16
batch_fraction = 1.0
[workers]
count = 4
pace_ns_per_row = 3000
[straggler]
pattern = "persistent"
workers = [1]
factor = 6.0
[policy]
name = "rapid-reassign"
checkpoint = 0.5
initial_units = 1
follow_up_units = 1
control_delay = 5
"#,
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let out = run_in(&p, dir.path());
    let trace = read_trace_dir(dir.path()).expect("trace reads");
    let mut ledger: BTreeMap<(u64, u32, u32), Vec<(u32, UnitAction)>> = BTreeMap::new();
    for u in &trace.units {
        ledger
            .entry((u.iteration, u.partition, u.unit))
            .or_default()
            .push((u.executor, u.action));
        match u.action {
            UnitAction::Assigned => assert_eq!(u.executor, u.owner),
            UnitAction::Reassigned => assert_ne!(u.executor, u.owner),
            other => panic!("unexpected action {other:?}"),
        }
    }
    assert_eq!(
        ledger.len(),
        6 * 64 * 16,
        "every unit of every iteration is in the trace"
    );
    let twice: Vec<_> = ledger.iter().filter(|(_, v)| v.len() != 1).collect();
    assert!(twice.is_empty(), "units computed more than once: {twice:?}");
    let moved = trace
        .units
        .iter()
        .filter(|u| u.action == UnitAction::Reassigned)
        .count();
    assert!(moved > 0, "the straggler's peers took some of its units");
    let given: u32 = trace.workers.iter().map(|w| w.units_given).sum();
    assert_eq!(
        given as usize, moved,
        "units given = units computed as reassigned"
    );
    assert!(trace.workers.iter().any(|w| w.control_sent > 0));
    // the straggler gave more than any other worker (on a loaded machine the
    // others are slowed at random too, and trade units among themselves)
    let from = |owner: u32| {
        trace
            .units
            .iter()
            .filter(|u| u.action == UnitAction::Reassigned && u.owner == owner)
            .count()
    };
    let from_straggler = from(1);
    assert!(
        [0, 2, 3].iter().all(|&w| from(w) < from_straggler),
        "{from_straggler} of {moved} from worker 1, {:?} from 0, 2, 3",
        [from(0), from(2), from(3)]
    );

    // and the parameters are BSP's
    let mut bsp = p.clone();
    bsp.policy = forestall::policy::PolicyPlan::Bsp;
    bsp.pace_ns_per_row = 0;
    assert_eq!(run(&bsp).digest, out.digest);
}

#[test]
fn rapid_reassign_with_one_worker_is_bsp() {
    let p = plan(&format!(
        "{JOB}\n[workers]\ncount = 1\n[policy]\nname = \"rapid-reassign\"\n[straggler]\npattern = \"slow-worker\"\nprobability = 0.5\n"
    ));
    let dir = tempfile::tempdir().expect("temp dir");
    run_in(&p, dir.path());
    let trace = read_trace_dir(dir.path()).expect("trace reads");
    assert!(trace.units.iter().all(|u| u.action == UnitAction::Assigned));
    assert!(trace.workers.iter().all(|w| w.control_sent == 0));
}

/// Speculation: a unit may be computed twice (its owner and a clone), never
/// more, never lost, and the parameters are still BSP's: the shard owners
/// count the first copy only.
#[test]
fn speculate_clones_but_counts_every_unit_once() {
    let p = plan(
        r#"
[job]
iterations = 6
seed = 12
[data]
partitions = 32
units_per_partition = 16
[workers]
count = 4
pace_ns_per_row = 3000
[straggler]
pattern = "persistent"
workers = [2]
factor = 6.0
[policy]
name = "speculate"
max_clone_share = 0.5
control_delay = 5
"#,
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let out = run_in(&p, dir.path());
    let trace = read_trace_dir(dir.path()).expect("trace reads");
    let ledger = ledger(&trace);
    assert_eq!(ledger.len(), 6 * 32 * 16);
    for (key, actions) in &ledger {
        let mut a = actions.clone();
        a.sort_by_key(|x| x.as_str());
        assert!(
            a == [UnitAction::Assigned]
                || a == [UnitAction::Clone]
                || a == [UnitAction::Assigned, UnitAction::Clone],
            "{key:?}: {a:?}"
        );
    }
    let clones = trace
        .units
        .iter()
        .filter(|u| u.action == UnitAction::Clone)
        .count();
    assert!(clones > 0, "the straggler's units were cloned");
    assert!(
        trace.workers.iter().any(|w| w.units_cancelled > 0),
        "some copies were skipped"
    );
    let mut bsp = p.clone();
    bsp.policy = forestall::policy::PolicyPlan::Bsp;
    bsp.pace_ns_per_row = 0;
    assert_eq!(run(&bsp).digest, out.digest);
}

/// Unit keys repeat every iteration. A clone that reaches its helper after
/// its iteration was reduced (held back here up to 200 activations) must not
/// be computed and answered with a `Done` that names the helper's current
/// iteration: the owner would skip its own unit of that key there, and the
/// iteration would wait forever for it.
#[test]
fn a_late_clone_never_cancels_a_unit_of_a_later_iteration() {
    let p = plan(
        r#"
[job]
iterations = 60
seed = 5
[data]
partitions = 8
units_per_partition = 4
batch_fraction = 0.02
[workers]
count = 4
pace_ns_per_row = 2000
[straggler]
pattern = "persistent"
workers = [3]
factor = 5.0
[policy]
name = "speculate"
control_delay = 200
"#,
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let iterations = run_within(
        p,
        dir.path(),
        std::time::Duration::from_secs(60),
        "the run finishes (a lost unit would hang it)",
        |out, _| out.iterations.len(),
    );
    assert_eq!(iterations, 60);
}

#[test]
fn ssp_with_zero_slack_is_bsp() {
    let bsp = run(&plan(STRAGGLER));
    let ssp = run(&plan(&format!(
        "{STRAGGLER}\n[policy]\nname = \"ssp\"\nslack = 0\n"
    )));
    assert_eq!(ssp.digest, bsp.digest);
}

/// SSP lets fast workers run ahead by at most `slack` versions: every worker row
/// records a version within the bound, the straggler's peers do use stale
/// parameters, and every unit still enters its iteration's sum exactly once
/// (with `forestall-ssp`, whose plan moves units before an iteration too).
#[test]
fn ssp_and_flexrr_respect_the_slack_and_count_every_unit_once() {
    for policy in ["ssp", "flexrr", "forestall-ssp"] {
        let p = plan(&format!(
            "{STRAGGLER}\n[policy]\nname = \"{policy}\"\nslack = 2\n"
        ));
        let dir = tempfile::tempdir().expect("temp dir");
        let out = run_in(&p, dir.path());
        assert_eq!(out.iterations.len(), 12, "{policy}");
        let trace = read_trace_dir(dir.path()).expect("trace reads");
        for w in &trace.workers {
            assert!(w.params_version <= w.iteration, "{policy}: {w:?}");
            assert!(w.iteration - w.params_version <= 2, "{policy}: {w:?}");
        }
        assert!(
            trace.workers.iter().any(|w| w.params_version < w.iteration),
            "{policy}: somebody ran ahead of the straggler"
        );
        let mut ledger: BTreeMap<(u64, u32, u32), u32> = BTreeMap::new();
        for u in &trace.units {
            *ledger
                .entry((u.iteration, u.partition, u.unit))
                .or_default() += 1;
        }
        assert_eq!(ledger.len(), 12 * 16 * 4, "{policy}");
        assert!(ledger.values().all(|&n| n == 1), "{policy}");
        assert!(
            out.eval.accuracy > 0.8,
            "{policy}: accuracy {}",
            out.eval.accuracy
        );
    }
}

/// Backup workers are lossy by design: every iteration the partitions of
/// exactly `backups` workers are dropped, the trace names them, the dropped
/// worker stops computing what is no longer needed, and the model still learns.
#[test]
fn backup_workers_drop_the_last_workers_and_record_it() {
    let p = plan(
        r#"
[job]
iterations = 8
seed = 3
[data]
partitions = 12
units_per_partition = 4
[workers]
count = 4
pace_ns_per_row = 4000
[straggler]
pattern = "persistent"
workers = [2]
factor = 5.0
[policy]
name = "backup-workers"
backups = 1
"#,
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let out = run_in(&p, dir.path());
    assert_eq!(out.iterations.len(), 8);
    let trace = read_trace_dir(dir.path()).expect("trace reads");
    for row in &trace.iterations {
        let dropped: Vec<u32> = row
            .dropped_partitions
            .split(',')
            .map(|p| p.parse().expect("a partition number"))
            .collect();
        // worker 2 owns partitions 2, 6, 10 and is always last
        assert_eq!(dropped, vec![2, 6, 10], "iteration {}", row.iteration);
    }
    let slow: Vec<_> = trace.workers.iter().filter(|w| w.worker == 2).collect();
    assert_eq!(
        slow.len(),
        8,
        "the dropped worker still reports every iteration"
    );
    assert!(
        slow.iter().any(|w| w.units_cancelled > 0),
        "the dropped worker abandons units nobody needs"
    );
    assert!(out.eval.accuracy > 0.8, "accuracy {}", out.eval.accuracy);
    let bsp = run(&plan(
        "[job]\niterations = 8\nseed = 3\n[data]\npartitions = 12\nunits_per_partition = 4\n[workers]\ncount = 4\n",
    ));
    assert_ne!(
        bsp.digest, out.digest,
        "dropping gradients changes the math"
    );
}

/// With no replicas every reassigned unit moves its rows to the helper, and the
/// trace counts the bytes; with every worker straggling at once nobody is ahead,
/// and rapid reassignment still completes with BSP's parameters.
#[test]
fn reassignment_without_replicas_moves_data_and_all_slow_is_bsp() {
    let moved = |replicas: u32| {
        let p = plan(
            &format!("{STRAGGLER}\n[policy]\nname = \"rapid-reassign\"\n").replace(
                "batch_fraction = 0.5",
                &format!("batch_fraction = 0.5\nreplicas = {replicas}"),
            ),
        );
        let dir = tempfile::tempdir().expect("temp dir");
        run_in(&p, dir.path());
        let trace = read_trace_dir(dir.path()).expect("trace reads");
        let reassigned = trace
            .units
            .iter()
            .filter(|u| u.action == UnitAction::Reassigned)
            .count();
        let bytes: u64 = trace.workers.iter().map(|w| w.bytes_moved).sum();
        (reassigned, bytes)
    };
    let (reassigned, bytes) = moved(0);
    assert!(reassigned > 0);
    assert!(bytes > 0, "units left their only holder, so rows moved");
    let (_, bytes_all) = moved(3);
    assert_eq!(bytes_all, 0, "every worker holds every partition");

    let all_slow = plan(&format!(
        "{JOB}\n[workers]\ncount = 4\npace_ns_per_row = 2000\n[policy]\nname = \"rapid-reassign\"\n[straggler]\npattern = \"slow-worker\"\nprobability = 1.0\ndelay_percent = 200\n"
    ));
    let bsp = plan(&format!("{JOB}\n[workers]\ncount = 1\n"));
    assert_eq!(run(&all_slow).digest, run(&bsp).digest);
}

/// Placement is a differential collection: a helper handed units of a
/// partition it does not hold gets their rows with the message once, then holds
/// the partition (its rows arrive as diffs), so later hand-overs ship nothing.
/// Over 30 iterations of a persistent straggler the bytes moved are far below
/// what shipping every reassigned unit's rows would cost, and the parameters
/// are BSP's.
#[test]
fn moved_partitions_stay_with_their_new_holder() {
    let job = STRAGGLER
        .replace("iterations = 12", "iterations = 30")
        .replace("batch_fraction = 0.5", "batch_fraction = 0.5\nreplicas = 0");
    let p = plan(&format!("{job}\n[policy]\nname = \"rapid-reassign\"\n"));
    let dir = tempfile::tempdir().expect("temp dir");
    let out = run_in(&p, dir.path());
    assert_eq!(out.digest, run(&plan(&job)).digest, "BSP's parameters");
    let trace = read_trace_dir(dir.path()).expect("trace reads");
    let workload = crate::common::adult();
    let data = workload.data();
    let nnz = data.rows.indices.len() as f64 / data.rows.rows() as f64;
    let reassigned_rows: u64 = trace
        .units
        .iter()
        .filter(|u| u.action == UnitAction::Reassigned)
        .map(|u| u64::from(u.rows))
        .sum();
    let ship_every_unit = reassigned_rows as f64 * (12.0 + 12.0 * nnz);
    let moved: u64 = trace.workers.iter().map(|w| w.bytes_moved).sum();
    assert!(moved > 0, "rows left their only holder");
    assert!(
        (moved as f64) < 0.5 * ship_every_unit,
        "moved {moved} bytes; shipping every reassigned unit would be {ship_every_unit:.0}"
    );
    let late: u64 = trace
        .workers
        .iter()
        .filter(|w| w.iteration >= 20)
        .map(|w| w.bytes_moved)
        .sum();
    assert!(
        late < moved / 4,
        "the last third moved {late} of {moved} bytes: helpers should hold what they took"
    );
}

/// One heavy unit per worker and worker 1 persistently 8× slower: nothing is
/// left in its list to give, so `forestall` copies its unit in flight to a
/// peer that offered help once it has run 1.5 of that peer's units. The copy
/// finishes first, the original stops (its compute is `wasted_us`), every
/// unit still enters its sum once, and the parameters are `bsp`'s. With
/// `clone_in_flight = false` nothing is copied.
#[test]
fn forestall_copies_a_slowed_unit_in_flight() {
    let job = |clone: bool| {
        plan(&format!(
            "[job]\niterations = 6\nseed = 3\n[data]\npartitions = 4\nunits_per_partition = 1\n\
             batch_fraction = 0.05\n[workers]\ncount = 4\npace_ns_per_row = 60000\n\
             [straggler]\npattern = \"persistent\"\nworkers = [1]\nfactor = 8.0\n\
             [policy]\nname = \"forestall\"\nclone_in_flight = {clone}\n"
        ))
    };
    let p = job(true);
    let dir = tempfile::tempdir().expect("temp dir");
    let out = run_in(&p, dir.path());
    let trace = read_trace_dir(dir.path()).expect("trace reads");
    let ledger = ledger(&trace);
    assert_eq!(ledger.len(), 6 * 4, "every unit of every iteration");
    for (key, actions) in &ledger {
        let mut a = actions.clone();
        a.sort_by_key(|x| x.as_str());
        assert!(
            a == [UnitAction::Assigned]
                || a == [UnitAction::Clone]
                || a == [UnitAction::Assigned, UnitAction::Clone],
            "{key:?}: {a:?}"
        );
    }
    let copied: Vec<u64> = trace
        .units
        .iter()
        .filter(|u| u.action == UnitAction::Clone)
        .map(|u| u.iteration)
        .collect();
    assert!(
        copied.len() >= 3,
        "the straggler's unit was copied: {copied:?}"
    );
    assert!(
        copied.iter().all(|&t| trace
            .units
            .iter()
            .any(|u| u.iteration == t && u.action == UnitAction::Clone && u.worker != 1)),
        "copies run on peers"
    );
    let stopped = trace
        .workers
        .iter()
        .filter(|w| w.worker == 1 && w.wasted_us > 0)
        .count();
    assert!(
        stopped >= 2,
        "the straggler stopped its originals: {stopped}"
    );
    let mut bsp = p.clone();
    bsp.policy = forestall::policy::PolicyPlan::Bsp;
    bsp.pace_ns_per_row = 0;
    assert_eq!(run(&bsp).digest, out.digest);

    let dir = tempfile::tempdir().expect("temp dir");
    let off = run_in(&job(false), dir.path());
    let trace = read_trace_dir(dir.path()).expect("trace reads");
    assert!(trace.units.iter().all(|u| u.action != UnitAction::Clone));
    assert!(trace.workers.iter().all(|w| w.wasted_us == 0));
    assert_eq!(off.digest, out.digest);
}

/// The text of a job of one heavy unit of 8 micro-batches (of 50 rows) a
/// worker on `workers` workers paced at 60 µs a row, under `forestall` and
/// `straggler` (its `[policy]` keys, then a `[straggler]` table).
fn heavy_units_text(workers: u32, straggler: &str) -> String {
    format!(
        "[job]\niterations = 6\nseed = 3\n[data]\npath = \"{}\"\npartitions = 4\n\
         units_per_partition = 1\nbatch_fraction = 0.0489\nmicro_batch = 50\n\
         [workers]\ncount = {workers}\npace_ns_per_row = 60000\n\
         [policy]\nname = \"forestall\"\n{straggler}",
        crate::common::adult_path().display()
    )
}

/// [`heavy_units_text`] with `forestall`'s keys `keys` on 2 processes × 2
/// threads, process 0's two workers 5× slow (the idle peers that take their
/// work are process 1's, whichever asks first): asserts the parameters are
/// one worker's, bit for bit, and returns the run's trace.
fn two_processes_with_one_workers_bits(keys: &str) -> forestall::trace::TraceSet {
    let dir = tempfile::tempdir().expect("temp dir");
    let straggler =
        format!("{keys}[straggler]\npattern = \"persistent\"\nworkers = [0, 1]\nfactor = 5.0\n");
    std::fs::write(dir.path().join("one.toml"), heavy_units_text(1, "")).expect("job");
    std::fs::write(
        dir.path().join("four.toml"),
        heavy_units_text(4, &straggler),
    )
    .expect("job");
    let run = |file: &str, extra: &[&str], out: &str| {
        let mut args = vec!["--json", "-q", "run", file, "--out", out];
        args.extend_from_slice(extra);
        let o = crate::common::forestall_in(dir.path(), &args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        crate::common::summary_digest(&o)
    };
    let one = run("one.toml", &[], "one");
    let two = run("four.toml", &["--processes", "2", "--threads", "2"], "two");
    assert_eq!(two, one, "2 × 2 processes under a straggler vs one worker");
    read_trace_dir(&dir.path().join("two/trace")).expect("trace reads")
}

/// The records of `action` in a trace of [`heavy_units`] (6 iterations of 4
/// units), at least 3 of them, after checking that every unit of every
/// iteration is there and has one record that counts it.
fn parts_of_heavy_units(
    trace: &forestall::trace::TraceSet,
    action: UnitAction,
) -> Vec<&forestall::trace::UnitRecord> {
    let ledger = ledger(trace);
    assert_eq!(ledger.len(), 6 * 4, "every unit of every iteration");
    for (key, actions) in &ledger {
        let originals = actions.iter().filter(|a| a.is_original()).count();
        assert_eq!(originals, 1, "{key:?}: {actions:?}");
    }
    let parts: Vec<_> = trace.units.iter().filter(|u| u.action == action).collect();
    assert!(
        parts.len() >= 3,
        "the straggler handed over {action:?}: {}",
        parts.len()
    );
    parts
}

/// [`heavy_units_text`] under `policy`, as a plan.
fn heavy_units(workers: u32, policy: &str, straggler: &str) -> forestall::spec::JobPlan {
    let text = heavy_units_text(workers, straggler);
    plan(&text.replace("name = \"forestall\"", &format!("name = \"{policy}\"")))
}

/// One heavy unit of 8 micro-batches per worker and worker 1 persistently 5×
/// slower: once its first micro-batch has ended, `forestall` hands the rest
/// of its unit in flight to a peer that offered help, with the running sums.
/// The straggler's part is recorded as `split`, the peer's as `reassigned`
/// (the record that counts the unit, with the rest's rows); the rows add up
/// to the unit's, and the parameters are one worker's, bit for bit.
#[test]
fn forestall_hands_over_the_rest_of_a_slowed_unit_in_flight() {
    let job = heavy_units;
    let straggler = "[straggler]\npattern = \"persistent\"\nworkers = [1]\nfactor = 5.0\n";
    let dir = tempfile::tempdir().expect("temp dir");
    let bsp = run_in(&job(1, "bsp", ""), dir.path());
    let bsp_trace = read_trace_dir(dir.path()).expect("trace reads");
    let dir = tempfile::tempdir().expect("temp dir");
    // (tails off: with them the straggler hands over its tail instead)
    let rests = format!("tail_in_flight = false\n{straggler}");
    let out = run_in(&job(4, "forestall", &rests), dir.path());
    let trace = read_trace_dir(dir.path()).expect("trace reads");
    let split = parts_of_heavy_units(&trace, UnitAction::Split);
    for part in &split {
        assert_eq!(part.worker, 1, "only the straggler splits its unit");
        assert!(
            part.rows > 0 && part.rows % 50 == 0,
            "whole micro-batches: {}",
            part.rows
        );
        let rest: Vec<_> = trace
            .units
            .iter()
            .filter(|u| {
                (u.iteration, u.partition, u.unit) == (part.iteration, part.partition, part.unit)
                    && u.action.is_original()
            })
            .collect();
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].action, UnitAction::Reassigned);
        assert_ne!(rest[0].worker, 1, "the rest ran on a peer");
        let whole = bsp_trace
            .units
            .iter()
            .find(|u| {
                (u.iteration, u.partition, u.unit) == (part.iteration, part.partition, part.unit)
            })
            .expect("the unit in one worker's run")
            .rows;
        assert_eq!(
            part.rows + rest[0].rows,
            whole,
            "the two parts cover the unit"
        );
    }
    let given: u32 = trace
        .workers
        .iter()
        .filter(|w| w.worker == 1)
        .map(|w| w.units_given)
        .sum();
    assert!(given as usize >= split.len());
    assert_eq!(out.digest, bsp.digest, "one worker's parameters");

    // `rest_in_flight = false`: copies only, the same bits.
    let dir = tempfile::tempdir().expect("temp dir");
    let off = job(
        4,
        "forestall",
        &format!("rest_in_flight = false\ntail_in_flight = false\n{straggler}"),
    );
    let out = run_in(&off, dir.path());
    let trace = read_trace_dir(dir.path()).expect("trace reads");
    assert!(trace.units.iter().all(|u| u.action != UnitAction::Split));
    assert!(trace.units.iter().any(|u| u.action == UnitAction::Clone));
    assert_eq!(out.digest, bsp.digest);
}

/// The same across processes: with 2 processes × 2 threads the rests (and
/// their running sums) cross process boundaries, and the parameters are
/// still one worker's.
#[test]
fn a_units_rest_crosses_processes_with_its_sums() {
    let trace = two_processes_with_one_workers_bits("tail_in_flight = false\n");
    let crossed = trace
        .units
        .iter()
        .filter(|u| u.action == UnitAction::Reassigned && u.owner < 2 && u.process != 0)
        .count();
    let split = trace
        .units
        .iter()
        .filter(|u| u.action == UnitAction::Split)
        .count();
    assert!(
        split > 0 && crossed > 0,
        "rests went to the other process: {split} split, {crossed} there"
    );
}

/// One heavy unit of 8 micro-batches per worker and worker 1 persistently 5×
/// slower: `forestall` hands the last micro-batches of its unit in flight
/// to peers that offer help and goes on with the others. Each tail is
/// recorded as `tail` on the peer, the straggler's record counts the unit
/// with the rows it kept; the pieces' rows add up to the unit's, and the
/// parameters are one worker's, bit for bit (the shard owners fold the
/// tails' micro-batches after the straggler's sums).
#[test]
fn forestall_hands_over_the_tail_of_a_slowed_unit_in_flight() {
    let job = heavy_units;
    let straggler = "[straggler]\npattern = \"persistent\"\nworkers = [1]\nfactor = 5.0\n";
    let dir = tempfile::tempdir().expect("temp dir");
    let bsp = run_in(&job(1, "bsp", ""), dir.path());
    let bsp_trace = read_trace_dir(dir.path()).expect("trace reads");
    let dir = tempfile::tempdir().expect("temp dir");
    let out = run_in(&job(4, "forestall", straggler), dir.path());
    let trace = read_trace_dir(dir.path()).expect("trace reads");
    let tails = parts_of_heavy_units(&trace, UnitAction::Tail);
    // Tails of the straggler's units, begun by the straggler. On a loaded
    // machine another worker may be slowed for a while too and hand over a
    // tail of its own, or of a unit it was handed: those are checked for
    // what a tail is, not counted here.
    let mut the_stragglers = 0;
    for tail in &tails {
        assert!(
            tail.rows > 0 && tail.rows % 50 == 0,
            "whole micro-batches: {}",
            tail.rows
        );
        let same = |u: &&forestall::trace::UnitRecord| {
            (u.iteration, u.partition, u.unit) == (tail.iteration, tail.partition, tail.unit)
        };
        let pieces: u32 = trace
            .units
            .iter()
            .filter(same)
            .filter(|u| u.action != UnitAction::Clone)
            .map(|u| u.rows)
            .sum();
        let whole = bsp_trace
            .units
            .iter()
            .find(same)
            .expect("the unit, whole")
            .rows;
        assert_eq!(pieces, whole, "the pieces cover the unit");
        let began = trace
            .units
            .iter()
            .filter(same)
            .find(|u| u.action.is_original())
            .map(|u| u.worker);
        assert!(began.is_some(), "a tail's unit has its first piece");
        assert_ne!(began, Some(tail.worker), "a peer computes the tail");
        if tail.owner == 1 && began == Some(1) {
            the_stragglers += 1;
        }
    }
    assert!(
        the_stragglers * 2 > tails.len(),
        "most tails are of the straggler's units, begun there: {the_stragglers} of {}",
        tails.len()
    );
    assert_eq!(out.digest, bsp.digest, "one worker's parameters");
}

/// The same across processes: with 2 processes × 2 threads the tails cross
/// process boundaries, their micro-batches reach shard owners on the other
/// process, and the parameters are still one worker's.
#[test]
fn a_units_tail_crosses_processes() {
    let trace = two_processes_with_one_workers_bits("");
    let crossed = trace
        .units
        .iter()
        .filter(|u| u.action == UnitAction::Tail && u.owner < 2 && u.process != 0)
        .count();
    assert!(crossed > 0, "tails went to the other process");
}

/// Under a disrupted machine a helper is slowed in turn, often while it holds
/// units peers handed it: `forestall` may copy such a unit in flight and pass
/// on the ones queued unbegun (a unit handed over is not final; the
/// mechanism itself is asserted step by step in the replay's tests, which
/// are deterministic). However units travel, every unit enters its
/// iteration's sum once and the parameters are one worker's, bit for bit.
#[test]
fn forestall_under_a_disrupted_machine_computes_each_unit_once_with_one_workers_bits() {
    let reference = run(&plan(&format!("{JOB}\n[workers]\ncount = 1\n")));
    let p = plan(&format!(
        "{JOB}\n[workers]\ncount = 4\npace_ns_per_row = 4000\n[policy]\nname = \"forestall\"\n\
         [straggler]\npattern = \"disrupted-machine\"\nprobability = 1.0\nperiod_ms = 3\n\
         delay_percent = 400\nworkers_per_machine = 1\n"
    ));
    let dir = tempfile::tempdir().expect("temp dir");
    let out = run_in(&p, dir.path());
    assert_eq!(out.digest, reference.digest, "one worker's parameters");
    let trace = read_trace_dir(dir.path()).expect("trace reads");
    let ledger = ledger(&trace);
    assert_eq!(ledger.len(), 10 * 12 * 4, "every unit of every iteration");
    for (key, actions) in &ledger {
        let originals = actions.iter().filter(|a| a.is_original()).count();
        assert!(originals <= 1, "{key:?} computed twice: {actions:?}");
    }
    assert!(
        trace
            .units
            .iter()
            .any(|u| u.action == UnitAction::Reassigned),
        "work moved off the disrupted workers"
    );
}
