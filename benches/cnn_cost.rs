//! The CNN's per-image cost against micro-batch size: one gradient call
//! (`unit_gradient`, forward and backward through burn on this thread) of `m`
//! consecutive training images of PneumoniaMNIST, for `m` in 4, 8, 16, 32, 64.
//!
//! A unit of work is a left fold of the gradients of consecutive micro-batches
//! of one size, all at the same parameters, so the cost that matters is one
//! call of `m` images at parameters the thread has seen before (the net caches
//! the burn module it built from them). The first call after a parameter change
//! also builds that module: reported apart as the cold call's extra.
//!
//! The sizes are interleaved: every round runs each size once (in an order
//! rotated from round to round) over the same `IMAGES` images at a fresh
//! parameter vector. Prints a Markdown report with the command, git revision
//! and machine: the median per-image cost of the warm calls, its spread, the
//! ratio to 32 and the cold call's extra.
//!
//! Run: `taskset -c 0 cargo bench --bench cnn_cost` (environment: `DATA` the
//! .npz, default `data/pneumoniamnist.npz` as `forestall data fetch pneumonia`
//! writes it; `SIZES` comma-separated micro-batch sizes; `ROUNDS`, default 5;
//! `IMAGES` per size and round, default 128).
//!
//! The PyTorch peer's counterpart, thread CPU per image of the same net on
//! one thread by batch size (forward and backward, and with Adam):
//! `taskset -c 0 python3 pipelines/peers/cnn_torch_cost.py --data
//! data/pneumoniamnist.npz`. Run the two alternately on the same core and
//! compare like with like (the gradient call here is forward and backward).
//!
//! What the call costs is mostly the three convolutions, which the net
//! computes as gathered matrix products (`Net::forward` in
//! `src/workload/cnn/net.rs`); their products run in burn-flex's `gemm`.

#![allow(missing_docs)]

mod cpu;

use cpu::{env_or, load_cnn, median, thread_cpu_ms};
use std::time::Instant;

use forestall::bench::machine::this_machine;
use forestall::cli::run::GIT_REVISION;
use forestall::workload::Workload;

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Timings of one micro-batch size, ms.
#[derive(Default)]
struct Timings {
    /// Thread CPU per image, calls at parameters seen before.
    warm_per_image: Vec<f64>,
    /// Wall time per image of the same calls.
    wall_per_image: Vec<f64>,
    /// The first call's CPU at fresh parameters minus the median warm call of its round.
    cold_extra: Vec<f64>,
}

/// One line of the report.
struct Row {
    m: usize,
    calls: usize,
    /// Median thread CPU per image, ms.
    cpu: f64,
    p10: f64,
    p90: f64,
    /// Median wall time per image, ms.
    wall: f64,
    /// Median extra CPU of the first call at fresh parameters, ms.
    cold: f64,
}

fn main() {
    // as the forestall binary does, before any thread starts
    forestall::malloc::keep_freed_memory();
    let (cnn, data) = load_cnn("cnn_cost");
    let sizes: Vec<usize> = std::env::var("SIZES")
        .ok()
        .map(|s| {
            s.split(',')
                .map(|v| {
                    v.trim()
                        .parse()
                        .expect("SIZES: comma-separated image counts")
                })
                .collect()
        })
        .unwrap_or_else(|| vec![4, 8, 16, 32, 64]);
    assert!(
        sizes.iter().all(|&m| m > 0),
        "SIZES: every micro-batch holds at least one image"
    );
    let rounds = env_or("ROUNDS", 5);
    let images = env_or("IMAGES", 128);
    let train = cnn.data().train.clone();
    let source = cnn.data().source();
    let mut timings: Vec<Timings> = sizes.iter().map(|_| Timings::default()).collect();
    let mut checksum = 0.0;
    for round in 0..rounds {
        for k in 0..sizes.len() {
            let i = (k + round) % sizes.len();
            let m = sizes[i];
            // fresh parameters: the first call builds the module
            let params = cnn.init_params(1000 + (round * sizes.len() + i) as u64);
            let mut calls = Vec::new();
            let mut start = (round * images) % train.len();
            let mut done = 0;
            while done < images.max(m) {
                if start + m > train.len() {
                    start = 0;
                }
                let rows = &train[start..start + m];
                let started = Instant::now();
                let cpu = thread_cpu_ms();
                let g = cnn.unit_gradient(&source, &params, rows);
                calls.push((thread_cpu_ms() - cpu, started.elapsed().as_secs_f64() * 1e3));
                checksum += g.loss_sum;
                start += m;
                done += m;
            }
            let t = &mut timings[i];
            let mut warm: Vec<f64> = calls[1..].iter().map(|c| c.0).collect();
            if warm.is_empty() {
                continue;
            }
            t.warm_per_image.extend(warm.iter().map(|ms| ms / m as f64));
            t.wall_per_image
                .extend(calls[1..].iter().map(|c| c.1 / m as f64));
            t.cold_extra.push(calls[0].0 - median(&mut warm));
        }
    }
    let machine = this_machine();
    println!("# The CNN's per-image cost by micro-batch size\n");
    println!(
        "- command: `DATA={} SIZES={} ROUNDS={rounds} IMAGES={images} cargo bench --bench cnn_cost`",
        data.display(),
        sizes
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    );
    println!("- git revision: {GIT_REVISION}");
    println!(
        "- machine: {} ({}, {} cores, {:.1} GiB), {}, {}",
        machine.host, machine.cpu, machine.cores, machine.memory_gib, machine.rustc, machine.os
    );
    println!(
        "- one thread; each round runs every size over {images} consecutive training images at fresh parameters; {rounds} rounds, sizes interleaved (checksum {checksum:.6})\n"
    );
    let rows: Vec<Row> = sizes
        .iter()
        .zip(&mut timings)
        .map(|(&m, t)| {
            let mut warm = t.warm_per_image.clone();
            let cpu = median(&mut warm);
            Row {
                m,
                calls: warm.len(),
                cpu,
                p10: quantile(&warm, 0.1),
                p90: quantile(&warm, 0.9),
                wall: median(&mut t.wall_per_image),
                cold: median(&mut t.cold_extra),
            }
        })
        .collect();
    let at32 = rows.iter().find(|r| r.m == 32).map_or(f64::NAN, |r| r.cpu);
    println!("CPU time of the calling thread (wall time beside it: higher when other processes share the core).\n");
    println!("| micro-batch | calls | CPU ms per image (median) | p10–p90 | CPU ms per call | × the cost at 32 | wall ms per image | cold call's extra CPU ms |");
    println!("|---|---|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} | {:.3} | {:.3}–{:.3} | {:.1} | {:.2} | {:.3} | {:.1} |",
            r.m,
            r.calls,
            r.cpu,
            r.p10,
            r.p90,
            r.cpu * r.m as f64,
            r.cpu / at32,
            r.wall,
            r.cold
        );
    }
}
