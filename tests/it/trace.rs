//! Traces read back: one row per unit exactly once, complete worker and
//! iteration tables, and the stamps.

use std::collections::BTreeMap;

use forestall::trace::read_trace_dir;

use crate::common::{plan, run_in};

#[test]
fn every_unit_appears_exactly_once_per_iteration() {
    let p = plan(
        "[job]\niterations = 9\n[data]\npartitions = 10\nunits_per_partition = 3\n[workers]\ncount = 3\n[trace]\npart_iterations = 4\n[straggler]\npattern = \"slow-worker\"\nprobability = 0.5\ndelay_percent = 100\n",
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let out = run_in(&p, dir.path());
    let trace = read_trace_dir(dir.path()).expect("trace reads back");

    let mut ledger: BTreeMap<(u64, u32, u32), u32> = BTreeMap::new();
    for u in &trace.units {
        *ledger
            .entry((u.iteration, u.partition, u.unit))
            .or_default() += 1;
        assert_eq!(u.executor, u.worker);
        assert_eq!(
            u.owner,
            u.partition % 3,
            "bsp computes units where their data lives"
        );
        assert!(u.end_us >= u.start_us + u.compute_us);
    }
    assert_eq!(ledger.len(), 9 * 10 * 3);
    assert!(ledger.values().all(|&n| n == 1));

    assert_eq!(trace.workers.len(), 9 * 3);
    assert_eq!(trace.iterations.len(), 9);
    assert_eq!(trace.iterations, out.iterations);
    for w in &trace.workers {
        assert!(w.finish_us >= w.ready_us);
        assert_eq!(w.busy_us, w.finish_us - w.ready_us);
    }
    // 9 iterations in parts of 4 → 3 parts per table
    for table in ["units", "workers", "iterations"] {
        let parts = std::fs::read_dir(dir.path().join(table))
            .expect("table dir")
            .count();
        assert_eq!(parts, 3, "{table}");
    }
    let stamp = trace.stamp().expect("stamped");
    assert_eq!(stamp.plan_hash, p.hash());
    assert_eq!(stamp.seed, p.seed);
    // test metrics on every iteration (eval_every = 1)
    assert!(trace.iterations.iter().all(|r| r.test_accuracy.is_some()));
}
