//! Training: the signature invariant (bit-identical parameters) and the quality
//! of the trained model against linfa's reference solution.

use forestall::inject::Pattern;
use forestall::workload::evaluate;
use linfa::prelude::*;
use linfa_logistic::LogisticRegression;
use ndarray::{Array1, Array2};

use crate::common::{adult, plan, run};

const SMALL: &str = r#"
[job]
iterations = 12
seed = 3
[data]
partitions = 12
units_per_partition = 3
batch_fraction = 0.5
"#;

fn with(extra: &str) -> forestall::spec::JobPlan {
    plan(&format!("{SMALL}\n{extra}"))
}

#[test]
fn parameters_are_bit_identical_for_1_2_3_4_workers_and_every_pattern() {
    let reference = run(&with("[workers]\ncount = 1\n"));
    assert_eq!(reference.iterations.len(), 12);
    let patterns = [
        "pattern = \"none\"",
        "pattern = \"slow-worker\"\nprobability = 0.3\ndelay_percent = 200",
        "pattern = \"disrupted-machine\"\nprobability = 0.5\nperiod_ms = 2\nworkers_per_machine = 1",
        "pattern = \"power-law\"\nalpha = 4.0",
        "pattern = \"persistent\"",
        "pattern = \"persistent\"\nworkers = [0]\nfactor = 3.0",
    ];
    for workers in 1..=4 {
        for pattern in patterns {
            if workers == 1 && pattern.contains("persistent") && !pattern.contains("workers") {
                continue; // a data skew needs a worker outside the slow set
            }
            let p = with(&format!(
                "[workers]\ncount = {workers}\n[straggler]\n{pattern}\n"
            ));
            let out = run(&p);
            assert_eq!(
                out.digest, reference.digest,
                "digest differs for {workers} workers, {pattern}"
            );
            assert_eq!(out.params, reference.params);
        }
    }
}

/// Asserts that 3 workers under `rapid-reassign` with a slow worker (units
/// moving mid-iteration) train 1 worker's parameters, bit for bit, with each
/// of the `[workers]` settings in `knobs`.
fn each_keeps_the_math(knobs: &[&str]) {
    let reference = run(&with("[workers]\ncount = 1\n"));
    for knob in knobs {
        let p = with(&format!(
            "[workers]\ncount = 3\n{knob}\n[straggler]\npattern = \"slow-worker\"\n\
             probability = 0.3\ndelay_percent = 300\n[policy]\nname = \"rapid-reassign\"\n"
        ));
        assert_eq!(run(&p).params, reference.params, "'{knob}'");
    }
}

#[test]
fn gradient_buckets_keep_the_math() {
    // Slices sent unit by unit (0), a bucket that fills every few units (2
    // KiB: a unit's slices here are under 1 KiB), and the default (held
    // until the worker runs out of units).
    each_keeps_the_math(&["grad_bucket_kib = 0", "grad_bucket_kib = 2", ""]);
}

#[test]
fn shard_counts_keep_the_math() {
    // One owner (the default for this small model), two, and one per worker.
    each_keeps_the_math(&["", "shards = 1", "shards = 2", "shards = 3"]);
}

#[test]
fn paced_mode_keeps_the_math_and_stretches_units_to_their_nominal_time() {
    let native = run(&with("[workers]\ncount = 2\n"));
    let dir = tempfile::tempdir().expect("temp dir");
    let p = with(
        "[workers]\ncount = 2\npace_ns_per_row = 20000\n[straggler]\npattern = \"persistent\"\nworkers = [1]\nfactor = 2.0\n",
    );
    let paced = crate::common::run_in(&p, dir.path());
    assert_eq!(paced.digest, native.digest);
    let trace = forestall::trace::read_trace_dir(dir.path()).expect("trace reads");
    // A unit may end early by the previous unit's oversleep, but a worker's units
    // of an iteration take at least their summed nominal time × slowdown.
    let mut spans: std::collections::BTreeMap<(u64, u32), (u64, u64, f64)> = Default::default();
    for u in &trace.units {
        let expected = if u.worker == 1 { 2.0 } else { 1.0 };
        assert_eq!(u.gt_slowdown, expected);
        let e = spans
            .entry((u.iteration, u.worker))
            .or_insert((u64::MAX, 0, 0.0));
        e.0 = e.0.min(u.start_us);
        e.1 = e.1.max(u.end_us);
        e.2 += u.rows as f64 * 20.0 * u.gt_slowdown;
    }
    for ((t, w), (start, end, nominal_us)) in spans {
        let took = (end - start) as f64;
        assert!(
            took + 2.0 >= nominal_us,
            "iteration {t} worker {w}: {took} µs < {nominal_us}"
        );
    }
    assert!(matches!(p.pattern, Pattern::Persistent { .. }));
}

/// The quick start's model must reach 84 % test accuracy, and its test log-loss
/// must be within 2 % of linfa's logistic regression trained to convergence on
/// the same features and the same L2 penalty.
#[test]
fn quickstart_model_matches_linfa_reference() {
    let quickstart =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("pipelines/quickstart.toml");
    let (spec, text) = forestall::spec::read_job_file(&quickstart).expect("quickstart reads");
    let p = forestall::spec::validate(&spec, &text, Some(&quickstart)).expect("quickstart valid");
    let out = run(&p);
    assert!(
        out.eval.accuracy >= 0.84,
        "test accuracy {}",
        out.eval.accuracy
    );

    let workload = adult();
    let data = workload.data();
    let dims = data.dims();
    let dense = |rows: &[u32]| {
        let mut x = Array2::<f64>::zeros((rows.len(), dims - 1));
        for (i, &r) in rows.iter().enumerate() {
            let (idx, val) = data.rows.row(r as usize);
            for (&j, &v) in idx.iter().zip(val) {
                if j > 0 {
                    x[[i, j as usize - 1]] = v; // feature 0 is our bias; linfa fits its own
                }
            }
        }
        x
    };
    let x_train = dense(&data.train);
    let y_train: Array1<usize> = data
        .train
        .iter()
        .map(|&r| data.labels[r as usize] as usize)
        .collect();
    let alpha = p.optimizer.l2 * data.train.len() as f64; // linfa sums the loss, we average it
    let reference = LogisticRegression::default()
        .alpha(alpha)
        .max_iterations(500)
        .gradient_tolerance(1e-7)
        .fit(&Dataset::new(x_train, y_train))
        .expect("linfa fits");
    // linfa's probabilities are for its larger class; ours are for label 1.
    let flip = reference.labels().pos.class == 0;
    let mut w = vec![reference.intercept()];
    w.extend(
        reference
            .params()
            .iter()
            .map(|&x| if flip { -x } else { x }),
    );
    if flip {
        w[0] = -w[0];
    }
    let linfa_eval = evaluate(&data.rows, &data.labels, &w, &data.test);
    let gap = (out.eval.log_loss - linfa_eval.log_loss) / linfa_eval.log_loss;
    assert!(
        gap.abs() <= 0.02,
        "test log-loss {} vs linfa {} ({:+.2} %)",
        out.eval.log_loss,
        linfa_eval.log_loss,
        gap * 100.0
    );
    assert!(
        linfa_eval.accuracy > 0.84,
        "linfa accuracy {}",
        linfa_eval.accuracy
    );
    eprintln!(
        "test log-loss: forestall {:.5}, linfa {:.5} ({:+.2} %)",
        out.eval.log_loss,
        linfa_eval.log_loss,
        gap * 100.0
    );
}

/// Oracle: the timely dataflow and a plain single-threaded loop over the same
/// units produce the same parameters, bit for bit.
#[test]
fn dataflow_matches_the_plain_loop_bit_for_bit() {
    for workers in [1, 3] {
        let p = with(&format!("[workers]\ncount = {workers}\n"));
        let plain = forestall::run::plain::train_plain(&p, adult().as_ref());
        let out = run(&p);
        assert_eq!(out.params, plain.params, "{workers} workers");
        assert_eq!(plain.iteration_us.len(), 12);
    }
}

/// Epoch sampling (every row once an epoch, a fresh shuffle each epoch) is a
/// function of the job and its seed only: 1 worker's parameters at W = 3 under
/// a moving policy, the plain loop's too, and not independent sampling's.
#[test]
fn epoch_sampling_keeps_the_math_and_changes_the_batches() {
    let epoch = "[data]\nsampling = \"epoch\"\n";
    let small = SMALL.replace("[data]\n", epoch);
    let one = run(&plan(&format!("{small}\n[workers]\ncount = 1\n")));
    let moving = plan(&format!(
        "{small}\n[workers]\ncount = 3\n[straggler]\npattern = \"slow-worker\"\n\
         probability = 0.3\ndelay_percent = 300\n[policy]\nname = \"rapid-reassign\"\n"
    ));
    assert_eq!(run(&moving).params, one.params);
    let plain = forestall::run::plain::train_plain(&moving, adult().as_ref());
    assert_eq!(plain.params, one.params);
    let independent = run(&with("[workers]\ncount = 1\n"));
    assert_ne!(independent.params, one.params);
}

/// The observer hears of every iteration as it is trained, then of its row
/// (which waits for its evaluation, scored off the workers' clock), each
/// once, rows in order, and every evaluated row carries its evaluation.
#[test]
fn the_observer_hears_each_iteration_trained_then_its_row() {
    use forestall::run::{run_job, Progress};
    use std::sync::{Arc, Mutex};
    let p = plan(&format!(
        "{SMALL}\n[model]\neval_every = 2\n[workers]\ncount = 3\n"
    ));
    let heard: Arc<Mutex<Vec<(char, u64, bool)>>> = Arc::default();
    let log = Arc::clone(&heard);
    let observer = Box::new(move |progress: Progress<'_>| {
        let entry = match progress {
            Progress::Trained { iteration } => ('t', iteration, false),
            Progress::Row(row) => ('r', row.iteration, row.test_accuracy.is_some()),
        };
        log.lock().expect("log").push(entry);
    });
    let dir = tempfile::tempdir().expect("temp dir");
    let stamp = forestall::trace::TraceStamp {
        job_id: "observer".into(),
        git_revision: "test".into(),
        plan_hash: p.hash(),
        seed: p.seed,
    };
    let out = run_job(&p, adult(), dir.path(), stamp, Some(observer)).expect("run");
    let heard = heard.lock().expect("log").clone();
    let trained: Vec<u64> = heard.iter().filter(|h| h.0 == 't').map(|h| h.1).collect();
    let rows: Vec<u64> = heard.iter().filter(|h| h.0 == 'r').map(|h| h.1).collect();
    assert_eq!(rows, (0..12).collect::<Vec<_>>(), "{heard:?}");
    let mut sorted = trained.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..12).collect::<Vec<_>>(), "{heard:?}");
    for t in 0..12u64 {
        let at = |kind: char| heard.iter().position(|h| h.0 == kind && h.1 == t);
        assert!(
            at('t') < at('r'),
            "iteration {t} trained before its row: {heard:?}"
        );
    }
    for (_, t, evaluated) in heard.iter().filter(|h| h.0 == 'r') {
        assert_eq!(*evaluated, t % 2 == 0 || *t == 11, "row {t}");
    }
    assert_eq!(out.iterations.len(), 12);
}

/// The Adult table re-saved as pandas saves a categorical frame (every text
/// column a dictionary of strings) trains to the same bits as the committed
/// file: a user's re-saved dataset is not refused for its encoding.
#[test]
fn a_dictionary_encoded_copy_of_the_data_trains_to_the_same_bits() {
    use std::sync::Arc;

    use arrow_array::types::Int16Type;
    use arrow_array::{Array, ArrayRef, DictionaryArray, RecordBatch, StringArray};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::arrow::ArrowWriter;

    let dir = tempfile::tempdir().expect("temp dir");
    let copy = dir.path().join("adult-categorical.parquet");
    let file = std::fs::File::open(crate::common::adult_path()).expect("the committed data");
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .expect("parquet")
        .build()
        .expect("a reader");
    let mut writer = None;
    let mut dictionaries = 0;
    for batch in reader {
        let batch = batch.expect("a batch");
        let columns: Vec<(String, ArrayRef)> = batch
            .schema()
            .fields()
            .iter()
            .zip(batch.columns())
            .map(|(field, column)| {
                let column = match column.as_any().downcast_ref::<StringArray>() {
                    Some(text) => {
                        let dictionary: DictionaryArray<Int16Type> = text.iter().collect();
                        Arc::new(dictionary) as ArrayRef
                    }
                    None => Arc::clone(column),
                };
                (field.name().clone(), column)
            })
            .collect();
        let batch = RecordBatch::try_from_iter(columns).expect("the re-encoded batch");
        dictionaries = batch
            .columns()
            .iter()
            .filter(|c| matches!(c.data_type(), arrow_schema::DataType::Dictionary(..)))
            .count();
        let w = writer.get_or_insert_with(|| {
            let out = std::fs::File::create(&copy).expect("created");
            ArrowWriter::try_new(out, batch.schema(), None).expect("a writer")
        });
        w.write(&batch).expect("written");
    }
    writer.expect("at least one batch").close().expect("closed");
    assert!(dictionaries >= 2, "text columns re-encoded: {dictionaries}");

    let job =
        |path: &str| format!("{SMALL}path = \"{path}\"\nlabel = \"income\"\npositive = \">50K\"\n");
    let original = crate::common::adult_path();
    let digest = |path: &std::path::Path| {
        let plan = plan(&job(path.to_str().expect("utf-8")));
        let workload = forestall::spec::load_workload(&plan).expect("the data loads");
        let out = tempfile::tempdir().expect("temp dir");
        crate::common::run_workload_in(&plan, workload, out.path()).digest
    };
    assert_eq!(digest(&copy), digest(&original));
}
