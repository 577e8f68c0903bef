//! Criterion bench of what online prediction costs at one iteration boundary:
//! every worker's predicted time per unit for 64 workers from the histories a
//! run keeps ([`OnlineHistory`], 50 iterations of timings), for each online
//! predictor. The budget is 1 ms, so the predictor never becomes the straggler.
//!
//! Run: `cargo bench --bench boundary`.

// criterion_group! defines an undocumented function.
#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use forestall::predict::{
    worker_series, Auto, CalibratedLstm, Ewma, LstmPredictor, LstmSettings, Median, OnlineHistory,
    OnlinePredictor, Sustained, Timing, WorkerSeries,
};
use forestall::trace::{TraceSet, WorkerRecord};

mod common;

use common::{ratio, ITERATIONS, WORKERS};

/// Worker `w`'s busy time in iteration `t` for 100 units of 100 µs × ratio.
fn busy_us(w: u32, t: u64) -> u64 {
    (10_000.0 * ratio(w, t)) as u64
}

fn history() -> OnlineHistory {
    let mut h = OnlineHistory::new(WORKERS);
    for t in 0..ITERATIONS {
        for w in 0..WORKERS {
            h.record(
                t,
                w,
                Timing {
                    units: 100,
                    busy_us: busy_us(w, t),
                },
            );
        }
    }
    h
}

/// The same timings as a trace, to train the LSTM on.
fn series() -> Vec<WorkerSeries> {
    let trace = TraceSet {
        units: Vec::new(),
        workers: (0..ITERATIONS)
            .flat_map(|t| {
                (0..WORKERS).map(move |w| WorkerRecord::single_unit(t, w, 0, busy_us(w, t)))
            })
            .collect(),
        iterations: Vec::new(),
        stamps: Vec::new(),
    };
    worker_series(&trace).expect("series")
}

fn boundary(c: &mut Criterion) {
    let h = history();
    let lstm = Arc::new(
        LstmPredictor::train(
            &series(),
            &|s: &WorkerSeries| s.steps.len(),
            &LstmSettings {
                max_epochs: 3,
                ..LstmSettings::default()
            },
            Vec::new(),
            |_, _| {},
        )
        .expect("lstm trains"),
    );
    let predictors = [
        ("last", OnlinePredictor::Last),
        ("ewma", OnlinePredictor::Ewma(Ewma::default())),
        (
            "sustained",
            OnlinePredictor::Sustained(Sustained::default()),
        ),
        ("median", OnlinePredictor::Median(Median::default())),
    ];
    let mut group = c.benchmark_group("boundary_64_workers");
    for (name, p) in &predictors {
        group.bench_function(*name, |b| b.iter(|| black_box(h.predict(p))));
    }
    // The LSTM with its online gain, as a run has it: the gain's evidence
    // kept as steps join (see `judged_for`), the prediction reading it.
    let calibrated = OnlinePredictor::Lstm(CalibratedLstm::new(Arc::clone(&lstm)));
    let judged_lstm = history().judged_for(&calibrated);
    group.bench_function("lstm", |b| {
        b.iter(|| black_box(judged_lstm.predict(&calibrated)))
    });
    // `auto` with the LSTM among its candidates: replaying them over the
    // window at the boundary, against scoring the iteration that joins and
    // reading the scores (what a run does).
    let auto = OnlinePredictor::Auto(Auto::new(Some(lstm)));
    group.bench_function("auto_replayed", |b| b.iter(|| black_box(h.predict(&auto))));
    let judged = history().judged_for(&auto);
    let next: Vec<Timing> = (0..WORKERS)
        .map(|w| Timing {
            units: 100,
            busy_us: busy_us(w, ITERATIONS),
        })
        .collect();
    for (name, judged, predictor) in [
        ("lstm_scored_join_and_predict", &judged_lstm, &calibrated),
        ("auto_scored_join_and_predict", &judged, &auto),
    ] {
        group.bench_function(name, |b| {
            b.iter_batched(
                || judged.clone(),
                |mut j| {
                    j.record_next(&next);
                    black_box(j.predict(predictor))
                },
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, boundary);
criterion_main!(benches);
