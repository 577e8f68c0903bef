//! Progress tracking: the laggard detector on real runs.

use crate::common::{plan, run};

/// Paced so that a worker's share of an iteration takes ~40 ms nominal: timing
/// noise from other tests running at the same time stays well below the
/// laggard threshold (25 % of the others' median).
const PACED: &str = r#"
[job]
iterations = 30
[data]
partitions = 16
units_per_partition = 2
batch_fraction = 0.25
[workers]
count = 4
pace_ns_per_row = 20000
"#;

#[test]
fn a_persistent_straggler_is_named_in_95_percent_of_iterations() {
    let p = plan(&format!(
        "{PACED}\n[straggler]\npattern = \"persistent\"\nworkers = [2]\nfactor = 3.0\n"
    ));
    let out = run(&p);
    let named = out
        .iterations
        .iter()
        .filter(|r| r.laggard == Some(2))
        .count();
    assert!(
        named * 100 >= 95 * out.iterations.len(),
        "worker 2 named in {named} of {} iterations: {:?}",
        out.iterations.len(),
        out.iterations.iter().map(|r| r.laggard).collect::<Vec<_>>()
    );
    // the others wait for it at the barrier
    assert!(out.iterations.iter().all(|r| r.barrier_wait_us > 0));
}

#[test]
fn nobody_is_named_without_stragglers() {
    let out = run(&plan(PACED));
    let named = out
        .iterations
        .iter()
        .filter(|r| r.laggard.is_some())
        .count();
    assert!(
        named * 10 <= out.iterations.len(),
        "a laggard was named in {named} of {} iterations without stragglers",
        out.iterations.len()
    );
}
