//! The what-if replay at scale: a synthetic trace of 10,000 workers × 1,000
//! iterations (slow-worker, p = 0.1, 400 %, 4 units of 100 rows at 10 µs a
//! row), read and replayed under every policy the replay supports, each with
//! its default predictor.
//! Prints a Markdown report with the command, git revision and machine: the
//! time to read the trace, each policy's replay time (wall and CPU, all
//! threads: on a machine shared with other work the CPU time is the steadier
//! figure), and the peak memory (VmHWM) after each step.
//!
//! Run: `cargo bench --bench whatif_scale` (WORKERS / ITERATIONS in the
//! environment change the size, POLICIES a comma-separated list the policies,
//! THREADS the threads a replay may use: by default one per core;
//! MICRO_BATCHES the micro-batches of every unit, between which `forestall`
//! may hand the rest of a unit slowed in flight to a peer: by default 1;
//! UNITS the units of every worker: by default 4; ROWS the rows of every
//! unit: by default 100; JITTER the noise of the workers' times, each
//! worker-iteration scaled by a uniform draw in 1 ± JITTER: by default 0).

#![allow(missing_docs)]

use std::time::Instant;

use forestall::bench::machine::this_machine;
use forestall::cli::run::GIT_REVISION;
use forestall::run::context::load_predictor;
use forestall::spec::policy_named;
use forestall::trace::synth::{write_synth, Synth};
use forestall::trace::TraceStamp;
use forestall::whatif::{replay_policy_on, Timings};

fn peak_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// CPU time this process has used so far, all threads, user and system, s
/// (from /proc/self/stat, in clock ticks of 10 ms; 0 where unreadable): a
/// replay's CPU time is its cost whatever else the machine runs.
fn cpu_s() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // The fields after the command name (which may hold spaces):
            // utime is the 14th field of the line, stime the 15th.
            let rest = &s[s.rfind(')')? + 2..];
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let utime: f64 = fields.get(11)?.parse().ok()?;
            let stime: f64 = fields.get(12)?.parse().ok()?;
            Some((utime + stime) / 100.0)
        })
        .unwrap_or(0.0)
}

fn env_or(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // as the forestall binary does, before any thread starts
    forestall::malloc::keep_freed_memory();
    let workers = env_or("WORKERS", 10_000) as u32;
    let iterations = env_or("ITERATIONS", 1_000);
    let units = env_or("UNITS", 4) as u32;
    let rows = env_or("ROWS", 100) as u32;
    let jitter = std::env::var("JITTER")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|j| (0.0..1.0).contains(j))
        .unwrap_or(0.0);
    let dir = tempfile::tempdir().expect("temp dir");
    let synth = Synth::slow_worker(workers, iterations, units, rows, jitter);
    let stamp = TraceStamp {
        job_id: "synth:bench".into(),
        git_revision: GIT_REVISION.into(),
        plan_hash: "bench".into(),
        seed: 1,
    };
    let started = Instant::now();
    write_synth(&synth, dir.path(), stamp).expect("synthesised");
    let synth_s = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let micro_batches = env_or("MICRO_BATCHES", 1) as u32;
    let timings = Timings::load(dir.path())
        .expect("timings")
        .micro_batched(micro_batches);
    let load_s = started.elapsed().as_secs_f64();
    let load_mib = peak_mib();
    let m = this_machine();
    println!("# What-if replay at scale\n");
    let threads_env: String = [
        "THREADS",
        "POLICIES",
        "MICRO_BATCHES",
        "UNITS",
        "ROWS",
        "JITTER",
    ]
    .iter()
    .filter_map(|k| std::env::var(k).ok().map(|v| format!("{k}={v} ")))
    .collect();
    println!(
        "- command: `{threads_env}WORKERS={workers} ITERATIONS={iterations} cargo bench --bench whatif_scale`"
    );
    println!("- git revision: {GIT_REVISION}");
    println!(
        "- machine: {} ({}, {} cores, {:.1} GiB), {}, {}",
        m.host, m.cpu, m.cores, m.memory_gib, m.rustc, m.os
    );
    println!("- trace: {workers} workers × {iterations} iterations, slow-worker p = 0.1, 400 %, {units} units × {rows} rows × 10 µs/row, noise ± {jitter}, {micro_batches} micro-batch(es) a unit; messages take 100 µs\n");
    println!(
        "| step | wall s | CPU s | peak memory MiB | ms/iteration | vs bound | moved/it | messages/it |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    println!("| synthesise (write Parquet) | {synth_s:.2} | | – | | | | |");
    println!("| read the trace | {load_s:.2} | | {load_mib:.0} | | | | |");
    let policies = std::env::var("POLICIES").unwrap_or_else(|_| {
        "bsp,ideal,rapid-reassign,speculate,proactive,proactive-clone,forestall".into()
    });
    let threads = std::env::var("THREADS")
        .ok()
        .and_then(|t| t.parse::<usize>().ok());
    for name in policies.split(',') {
        let (policy, predictor) = policy_named(name, None, workers).expect("a policy");
        let predictor = predictor
            .as_ref()
            .map(|p| load_predictor(p).expect("predictor"));
        let started = Instant::now();
        let cpu = cpu_s();
        let o =
            replay_policy_on(&timings, &policy, predictor.as_ref(), 100, threads).expect("replays");
        println!(
            "| replay `{name}` | {:.2} | {:.2} | {:.0} | {:.3} | {:.3} | {:.1} | {:.1} |",
            started.elapsed().as_secs_f64(),
            cpu_s() - cpu,
            peak_mib(),
            o.mean_iteration_us / 1e3,
            o.vs_bound,
            o.moved_units_per_iteration,
            o.messages_per_iteration
        );
    }
}
