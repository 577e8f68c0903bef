//! `forestall`'s broker balancing micro-batches: a straggler's units not
//! begun cut among its peers (whole units, then the tails of the next), with
//! one worker's bits in threads and across processes.

use forestall::trace::{read_trace_dir, UnitAction};

use crate::common::{adult_path, forestall_in, ledger, summary_digest};

/// A job of 8 partitions, one a worker, of 2 units of 8 micro-batches (of
/// 50 rows) on `workers` workers paced at 60 µs a row, under `policy`
/// with worker 1 persistently 5× slower (`straggler`).
fn job_text(workers: u32, policy: &str, straggler: bool) -> String {
    let straggler = match straggler {
        true => "[straggler]\npattern = \"persistent\"\nworkers = [1]\nfactor = 5.0\n",
        false => "",
    };
    format!(
        "[job]\niterations = 6\nseed = 3\n[data]\npath = \"{}\"\npartitions = 8\n\
         units_per_partition = 2\nbatch_fraction = 0.1957\nmicro_batch = 50\n\
         [workers]\ncount = {workers}\npace_ns_per_row = 60000\n\
         [policy]\nname = \"{policy}\"\n{straggler}",
        adult_path().display()
    )
}

/// Worker 1, 5× slower, is taken for a straggler by the broker, which
/// balances micro-batches: its units go whole, as the tail of its unit in
/// flight, or cut into pieces for several peers at once (once the plan has
/// moved one of its units to worker 0, worker 0's is cut: the replay's
/// tests follow the cuts step by step, deterministically). Every unit has
/// one record that counts it, the pieces' rows add up to the unit's, every
/// piece is whole micro-batches, and the parameters are one worker's, bit
/// for bit, on 8 threads and on 2 processes × 4 threads.
#[test]
fn the_broker_cuts_a_stragglers_units_among_peers_with_one_workers_bits() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("one.toml"), job_text(1, "bsp", false)).expect("job");
    std::fs::write(
        dir.path().join("eight.toml"),
        job_text(8, "forestall", true),
    )
    .expect("job");
    let run = |file: &str, extra: &[&str], out: &str| {
        let mut args = vec!["--json", "-q", "run", file, "--out", out];
        args.extend_from_slice(extra);
        let o = forestall_in(dir.path(), &args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        summary_digest(&o)
    };
    let one = run("one.toml", &[], "one");
    let threads = run("eight.toml", &[], "threads");
    assert_eq!(threads, one, "8 threads under a straggler vs one worker");
    let processes = run("eight.toml", &["--processes", "2", "--threads", "4"], "two");
    assert_eq!(processes, one, "2 × 4 processes vs one worker");

    let mut most_pieces = 0;
    let whole = read_trace_dir(&dir.path().join("one/trace")).expect("trace reads");
    for out in ["threads", "two"] {
        let trace = read_trace_dir(&dir.path().join(out).join("trace")).expect("trace reads");
        let ledger = ledger(&trace);
        assert_eq!(ledger.len(), 6 * 16, "every unit of every iteration");
        for (key, actions) in &ledger {
            let originals = actions.iter().filter(|a| a.is_original()).count();
            assert_eq!(originals, 1, "{key:?}: {actions:?}");
            let same =
                |u: &&forestall::trace::UnitRecord| (u.iteration, u.partition, u.unit) == *key;
            let pieces: Vec<u32> = trace.units.iter().filter(same).map(|u| u.rows).collect();
            let rows = whole.units.iter().find(same).expect("the unit, whole").rows;
            assert_eq!(
                pieces.iter().sum::<u32>(),
                rows,
                "{key:?}: the pieces cover the unit"
            );
            assert!(pieces.iter().all(|r| r % 50 == 0), "{key:?}: {pieces:?}");
            most_pieces = most_pieces.max(pieces.len());
        }
        assert!(trace.units.iter().any(|u| u.action == UnitAction::Tail));
    }
    assert!(most_pieces >= 3, "a unit in pieces for several peers");
}
