//! The `slow-link` pattern: a worker's gradients, and the parameter
//! versions it owns, held by a slow outgoing link (emulated in one
//! process), the trace's send times apart from compute, and `analyze`
//! naming the link without the ground truth.

use std::collections::BTreeSet;
use std::path::Path;

use forestall::trace::{read_trace_dir, TraceWriter};
use serde_json::Value;

use crate::common::{adult_path, forestall_in};

/// 16 partitions × 2 units, W = 4 paced at 5 µs a row, each worker's link
/// limited to 0.5 Mbit/s in a fifth of its iterations.
fn write_job(dir: &Path, pattern: &str) {
    std::fs::write(
        dir.join(format!("{pattern}.toml")),
        format!(
            "[job]\nname = \"links\"\niterations = 16\nseed = 3\n[data]\npath = \"{}\"\npartitions = 16\nunits_per_partition = 2\nbatch_fraction = 0.25\n[workers]\ncount = 4\npace_ns_per_row = 5000\n[straggler]\npattern = \"{pattern}\"\nprobability = 0.2\n{}",
            adult_path().display(),
            match pattern {
                "slow-link" => "link_mbps = 0.5\n",
                _ => "delay_percent = 900\n",
            }
        ),
    )
    .expect("job");
}

fn run(dir: &Path, job: &str, policy: &str, out: &str) -> String {
    let o = forestall_in(
        dir,
        &["--json", "run", job, "--policy", policy, "--out", out],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    crate::common::summary_digest(&o)
}

/// `forestall --json analyze DIR`: each worker's `slow_in`.
fn slow_in(dir: &Path, run: &str) -> Vec<String> {
    let o = forestall_in(dir, &["--json", "analyze", run]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let line: Value = serde_json::from_slice(&o.stdout).expect("one JSON line");
    let mut per: Vec<(u64, String)> = line["data"]["per_worker"]
        .as_array()
        .expect("per worker")
        .iter()
        .map(|w| {
            (
                w["worker"].as_u64().expect("worker"),
                w["slow_in"].as_str().expect("slow_in").to_owned(),
            )
        })
        .collect();
    per.sort();
    per.into_iter().map(|(_, s)| s).collect()
}

/// A slow link holds a unit's gradient after its compute: the units of a
/// slowed (worker, iteration) record the time in `send_us` and the rate in
/// `gt_link_mbps`, their compute is not stretched, and the others send at
/// once; under BSP the parameters are those of the run without the pattern.
#[test]
fn a_slow_link_delays_sending_not_compute_and_keeps_bsp_bits() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir, "slow-link");
    let linked = run(dir, "slow-link.toml", "bsp", "l");
    let plain = forestall_in(
        dir,
        &[
            "--json",
            "run",
            "slow-link.toml",
            "--pattern",
            "none",
            "--out",
            "n",
        ],
    );
    assert!(
        plain.status.success(),
        "{}",
        String::from_utf8_lossy(&plain.stderr)
    );
    assert_eq!(linked, crate::common::summary_digest(&plain), "BSP bits");
    let trace = read_trace_dir(&dir.join("l/trace")).expect("trace");
    let (slow, fast): (Vec<_>, Vec<_>) = trace.units.iter().partition(|u| u.gt_link_mbps > 0.0);
    assert!(!slow.is_empty() && !fast.is_empty());
    for u in &slow {
        assert_eq!(u.gt_link_mbps, 0.5);
        assert_eq!(u.gt_slowdown, 1.0, "compute is not slowed");
        assert!(u.end_us - u.start_us >= u.send_us, "{u:?}");
        // 109 parameters make one shard, worker 0's: its gradients stay on
        // its host; the others' cross their link, ≥ 109 × 8 bytes at
        // 0.5 Mbit/s
        if u.worker == 0 {
            assert_eq!(u.send_us, 0, "{u:?}");
        } else {
            assert!(u.send_us >= 13_000, "{u:?}");
        }
    }
    assert!(slow.iter().any(|u| u.worker != 0));
    assert!(fast.iter().all(|u| u.send_us == 0));
    // Worker 0's link also holds the versions it sends: after an iteration
    // its link was slow in, its shard's 3 copies for the other hosts take
    // ≥ 3 × 109 × 8 bytes at 0.5 Mbit/s to arrive (≥ 39 ms), as measured by
    // the receivers; the others own no shard.
    let owner_slow: BTreeSet<u64> = (slow.iter())
        .filter(|u| u.worker == 0)
        .map(|u| u.iteration)
        .collect();
    assert!(!owner_slow.is_empty(), "seed 3 slows worker 0's link");
    for r in &trace.workers {
        match (r.worker, owner_slow.contains(&r.iteration)) {
            (0, true) => assert!(r.params_transit_us >= 39_000, "{r:?}"),
            (0, false) => assert!(r.params_transit_us < 39_000, "{r:?}"),
            _ => assert_eq!(r.params_transit_us, 0, "{r:?}"),
        }
    }
}

/// `analyze` says a slow-link run's stragglers are slow in their link and a
/// slow-worker run's in compute; with the ground-truth columns zeroed
/// (nothing of them left to read) its verdicts are the same.
#[test]
fn analyze_tells_a_slow_link_from_slow_compute_without_the_ground_truth() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir, "slow-link");
    write_job(dir, "slow-worker");
    run(dir, "slow-link.toml", "bsp", "l");
    run(dir, "slow-worker.toml", "bsp", "w");
    let linked = slow_in(dir, "l");
    // every worker whose gradients crossed a slowed link (worker 0 owns the
    // one shard: its gradients never leave its host, but its versions do)
    let trace = read_trace_dir(&dir.join("l/trace")).expect("trace");
    let mut crossed: BTreeSet<usize> = trace
        .units
        .iter()
        .filter(|u| u.send_us > 0)
        .map(|u| u.worker as usize)
        .collect();
    // and worker 0, whose shard's versions a slowed link held
    if trace.workers.iter().any(|r| r.params_transit_us >= 39_000) {
        crossed.insert(0);
    }
    assert!(!crossed.is_empty());
    for &w in &crossed {
        assert_eq!(linked[w], "link", "worker {w}: {linked:?}");
    }
    // every worker the pattern slowed is slow in compute (one it never
    // slowed is slow only by the machine's noise, if at all: no verdict)
    let computed = slow_in(dir, "w");
    let paced = read_trace_dir(&dir.join("w/trace")).expect("trace");
    let slowed: BTreeSet<usize> = (paced.workers.iter())
        .filter(|r| r.gt_slowdown > 1.0)
        .map(|r| r.worker as usize)
        .collect();
    assert!(!slowed.is_empty());
    for &w in &slowed {
        assert_eq!(computed[w], "compute", "worker {w}: {computed:?}");
    }
    // the same trace without its ground truth
    let stamp = trace.stamps[0].1.clone();
    let blind = dir.join("blind/trace");
    let mut writer = TraceWriter::try_new(&blind, 0, stamp).expect("writer");
    let units: Vec<_> = trace
        .units
        .iter()
        .cloned()
        .map(|mut u| {
            (u.gt_link_mbps, u.gt_slowdown, u.gt_delay_us) = (0.0, 1.0, 0);
            u
        })
        .collect();
    let workers: Vec<_> = trace
        .workers
        .iter()
        .cloned()
        .map(|mut w| {
            (w.gt_slowdown, w.gt_delay_us) = (1.0, 0);
            w
        })
        .collect();
    writer.write_units(&units).expect("units");
    writer.write_workers(&workers).expect("workers");
    writer
        .write_iterations(&trace.iterations)
        .expect("iterations");
    assert_eq!(slow_in(dir, "blind"), linked);
}

/// `link_mbps` is checked: a rate that is not positive and finite, or the
/// key under another pattern, is refused naming it.
#[test]
fn bad_link_settings_are_refused_by_name() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir, "slow-link");
    for (value, says) in [
        ("0", "must be in (0, 1000000] Mbit/s"),
        ("-3", "must be in (0, 1000000] Mbit/s"),
        ("nan", "must be in (0, 1000000] Mbit/s"),
        ("\"fast\"", "link_mbps"),
    ] {
        let text = std::fs::read_to_string(dir.join("slow-link.toml"))
            .expect("job")
            .replace("link_mbps = 0.5", &format!("link_mbps = {value}"));
        std::fs::write(dir.join("bad.toml"), text).expect("job");
        let o = forestall_in(dir, &["run", "bad.toml", "--out", "x"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{value}: {err}");
        assert!(
            err.contains("link_mbps") && err.contains(says),
            "{value}: {err}"
        );
        assert!(!dir.join("x").exists());
    }
    let text = std::fs::read_to_string(dir.join("slow-link.toml"))
        .expect("job")
        .replace("pattern = \"slow-link\"", "pattern = \"slow-worker\"");
    std::fs::write(dir.join("bad.toml"), text).expect("job");
    let o = forestall_in(dir, &["run", "bad.toml", "--out", "x"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("does not apply to pattern 'slow-worker'"),
        "{err}"
    );
}

/// The what-if replay moves work between workers of different speeds; a
/// trace whose units waited for slow links is refused by name rather than
/// replayed as if that time were work.
#[test]
fn whatif_refuses_a_trace_of_slow_links() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    write_job(dir, "slow-link");
    run(dir, "slow-link.toml", "bsp", "l");
    let o = forestall_in(dir, &["whatif", "l", "--policy", "forestall"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("spent time sending through a slow link") && err.contains("l/trace"),
        "{err}"
    );
    assert_eq!(err.matches("slow link").count(), 1, "said once: {err}");
}
