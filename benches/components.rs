//! Component throughput: the per-unit gradient (the work a compute operator does
//! per activation), trace encode/decode (the sink's work), on the committed
//! Adult data, and straggler-predictor inference for 64 workers (the work a
//! predictor would add at each iteration boundary; the budget is 1 ms).
//!
//! Run: `cargo bench --bench components` (add `-- --out FILE.md` to keep the
//! table). It prints the command, git revision and machine with the figures.
//! End-to-end numbers (framework overhead, BSP under stragglers) come from
//! `forestall bench pipelines/baseline.toml` instead.

use std::path::Path;
use std::time::Instant;

mod common;

use forestall::bench::machine::this_machine;
use forestall::cli::run::GIT_REVISION;
use forestall::data::Partitioning;
use forestall::predict::{
    Ewma, Last, LinearLags, LstmPredictor, LstmSettings, Median, Predictor, Step, Sustained,
    SvmStraggler, WorkerSeries, DEFAULT_LAGS, DEFAULT_STRAGGLER_THRESHOLD,
};
use forestall::spec::load_workload;
use forestall::spec::{parse_job, validate};
use forestall::trace::{read_trace_dir, TraceStamp, TraceWriter, UnitAction, UnitRecord};
use forestall::workload::unit_gradient;

/// Median of `samples` timings of `f`, in seconds.
fn median_secs(samples: usize, mut f: impl FnMut()) -> f64 {
    let mut times: Vec<f64> = (0..samples)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[samples / 2]
}

fn main() {
    // as the forestall binary does, before any thread starts
    forestall::malloc::keep_freed_memory();
    let out = std::env::args().skip_while(|a| a != "--out").nth(1);
    let plan = validate(&parse_job("", None).expect("empty job"), "", None).expect("defaults");
    let workload = load_workload(&plan).expect("Adult loads");
    let data = workload.data();
    let parts = Partitioning::new(&data.train, 48, 4, 1.0, 1);
    let units: Vec<_> = (0..48).flat_map(|p| parts.units(0, p)).collect();
    let params = vec![0.01; data.dims()];
    let rows: usize = units.iter().map(|u| u.rows.len()).sum();
    let grad_s = median_secs(21, || {
        for u in &units {
            std::hint::black_box(unit_gradient(&data.source(), &params, &u.rows));
        }
    });

    let records: Vec<UnitRecord> = (0..200_000u32)
        .map(|i| UnitRecord {
            iteration: u64::from(i / 192),
            worker: i % 4,
            process: 0,
            partition: i % 48,
            unit: i % 4,
            owner: i % 4,
            executor: i % 4,
            start_us: u64::from(i) * 10,
            end_us: u64::from(i) * 10 + 7,
            compute_us: 5,
            wait_us: 1,
            rows: 170,
            bytes_sent: 1000,
            action: UnitAction::Assigned,
            gt_slowdown: 1.0,
            gt_delay_us: 0,
            micro_batches: 1,
            send_us: 0,
            gt_link_mbps: 0.0,
        })
        .collect();
    let stamp = TraceStamp {
        job_id: "bench".into(),
        git_revision: GIT_REVISION.into(),
        plan_hash: "0".into(),
        seed: 0,
    };
    let mut write_s = Vec::new();
    let mut read_s = Vec::new();
    for _ in 0..5 {
        let dir = tempfile::tempdir().expect("temp dir");
        let t = Instant::now();
        let mut w = TraceWriter::try_new(dir.path(), 0, stamp.clone()).expect("writer");
        w.write_units(&records).expect("write");
        write_s.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let back = read_trace_dir(Path::new(dir.path())).expect("read");
        read_s.push(t.elapsed().as_secs_f64());
        assert_eq!(back.units.len(), records.len());
    }
    write_s.sort_by(f64::total_cmp);
    read_s.sort_by(f64::total_cmp);

    // 64 workers × 50 iterations of history (see `common::ratio`).
    let series: Vec<WorkerSeries> = (0..common::WORKERS)
        .map(|w| WorkerSeries {
            worker: w,
            steps: (0..common::ITERATIONS)
                .map(|t| {
                    let ratio = common::ratio(w, t);
                    Step {
                        iteration: t,
                        unit_us: 100.0 * ratio,
                        ratio,
                        wait_ratio: 0.0,
                        share: 1.0 / 64.0,
                        median_us: 100.0,
                        spread: 0.1,
                        workers: 64,
                    }
                })
                .collect(),
        })
        .collect();
    let threshold = DEFAULT_STRAGGLER_THRESHOLD;
    let linear = LinearLags::fit(&series, DEFAULT_LAGS, |s| s.steps.len()).expect("linear fits");
    let svm =
        SvmStraggler::fit(&series, DEFAULT_LAGS, threshold, |s| s.steps.len()).expect("svm fits");
    let lstm = LstmPredictor::train(
        &series,
        &|s: &WorkerSeries| s.steps.len(),
        &LstmSettings {
            max_epochs: 5,
            ..LstmSettings::default()
        },
        Vec::new(),
        |_, _| {},
    )
    .expect("lstm trains");
    let predictors: Vec<Box<dyn Predictor>> = vec![
        Box::new(Last),
        Box::new(Ewma::default()),
        Box::new(Sustained::default()),
        Box::new(Median::default()),
        Box::new(linear),
        Box::new(svm),
        Box::new(lstm),
    ];
    let predict_rows: Vec<(String, f64)> = predictors
        .iter()
        .map(|p| {
            let secs = median_secs(101, || {
                // What one iteration boundary needs: one prediction per worker
                // (a classifier's call for `svm`).
                for s in &series {
                    if p.predicts_time() {
                        std::hint::black_box(p.predict(&s.steps, 1));
                    } else {
                        std::hint::black_box(p.calls_straggler(&s.steps, threshold));
                    }
                }
            });
            (p.name().to_owned(), secs)
        })
        .collect();

    let m = this_machine();
    let command: Vec<String> = std::env::args().collect();
    let table = format!(
        "# forestall component throughput\n\n\
         command `{}`, git `{GIT_REVISION}`, {} ({} cores), {}\n\n\
         | component | median | throughput |\n|---|---|---|\n\
         | unit gradient, Adult, {} units / {rows} rows | {:.2} ms | {:.1} M rows/s |\n\
         | trace write, 200k unit rows, zstd | {:.1} ms | {:.2} M rows/s |\n\
         | trace read, 200k unit rows | {:.1} ms | {:.2} M rows/s |\n",
        command.join(" "),
        m.cpu,
        m.cores,
        m.rustc,
        units.len(),
        grad_s * 1e3,
        rows as f64 / grad_s / 1e6,
        write_s[2] * 1e3,
        0.2 / write_s[2],
        read_s[2] * 1e3,
        0.2 / read_s[2],
    );
    let mut table = table;
    for (name, secs) in &predict_rows {
        table.push_str(&format!(
            "| predict `{name}`, 64 workers × 50 iterations of history | {:.1} µs | {:.2} % of the 1 ms budget |\n",
            secs * 1e6,
            secs * 1e3 * 100.0
        ));
    }
    print!("{table}");
    if let Some(path) = out {
        std::fs::write(&path, &table).expect("write the table");
    }
}
