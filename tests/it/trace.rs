//! Traces read back: one row per unit exactly once, complete worker and
//! iteration tables, and the stamps; a version-2 trace still reads.

use std::collections::BTreeMap;
use std::fs::File;

use arrow_array::RecordBatch;
use forestall::trace::read_trace_dir;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;

use crate::common::{plan, run_in, STRAGGLER};

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
    // test metrics on every iteration (eval_every = 1); logistic regression
    // has none of its own
    assert!(trace.iterations.iter().all(|r| r.test_accuracy.is_some()));
    assert!(trace
        .iterations
        .iter()
        .all(|r| r.workload == "logistic" && r.test_metrics.is_empty()));
}

/// Rewrites the iterations parts of `dir`, stamped schema version `from`, as
/// version `to`, without the columns version 3 added (`workload`,
/// `test_metrics`).
fn restamp_iterations(dir: &std::path::Path, from: &str, to: &str) {
    restamp(dir, "iterations", from, to, &["workload", "test_metrics"]);
}

/// Rewrites the `table` parts of `dir`, stamped schema version `from`, as
/// version `to`, without the columns `drop`.
fn restamp(dir: &std::path::Path, table: &str, from: &str, to: &str, drop: &[&str]) {
    for entry in std::fs::read_dir(dir.join(table)).expect("table dir") {
        let path = entry.expect("entry").path();
        let builder = ParquetRecordBatchReaderBuilder::try_new(File::open(&path).expect("open"))
            .expect("parquet");
        let mut metadata: Vec<KeyValue> = builder
            .metadata()
            .file_metadata()
            .key_value_metadata()
            .cloned()
            .unwrap_or_default();
        metadata.retain(|kv| kv.key != "ARROW:schema");
        for kv in &mut metadata {
            if kv.key == "forestall.schema_version" {
                assert_eq!(kv.value.as_deref(), Some(from));
                kv.value = Some(to.into());
            }
        }
        let batches: Vec<RecordBatch> = builder
            .build()
            .expect("reader")
            .map(|b| {
                let b = b.expect("batch");
                let keep: Vec<usize> = (0..b.num_columns())
                    .filter(|&i| !drop.contains(&b.schema().field(i).name().as_str()))
                    .collect();
                b.project(&keep).expect("project")
            })
            .collect();
        let schema = batches[0].schema();
        let props = WriterProperties::builder()
            .set_key_value_metadata(Some(metadata))
            .build();
        let mut writer =
            ArrowWriter::try_new(File::create(&path).expect("create"), schema, Some(props))
                .expect("writer");
        for b in &batches {
            writer.write(b).expect("write");
        }
        writer.close().expect("close");
    }
}

/// Control traffic is recorded in messages and bytes; a version-5 units
/// part, which has no `micro_batches`, reads with 1 there; a version-3
/// workers part, which has no `control_bytes`, reads with 0 there and the
/// rest unchanged.
#[test]
fn control_bytes_are_recorded_and_a_version_3_part_reads_without_them() {
    let p = plan(&format!(
        "{STRAGGLER}\n[policy]\nname = \"forestall\"\n[trace]\npart_iterations = 4\n"
    ));
    let dir = tempfile::tempdir().expect("temp dir");
    run_in(&p, dir.path());
    let current = read_trace_dir(dir.path()).expect("version 9 reads");
    assert!(current.workers.iter().any(|w| w.control_sent > 0));
    for w in &current.workers {
        // every message has at least its header, and none is large
        let (n, bytes) = (u64::from(w.control_sent), w.control_bytes);
        assert!(bytes >= 36 * n && bytes <= 4096 * n.max(1), "{w:?}");
    }
    // no link was limited: version 6 (without the link columns) reads the same
    restamp(dir.path(), "units", "9", "6", &["send_us", "gt_link_mbps"]);
    assert_eq!(
        read_trace_dir(dir.path()).expect("version 6 reads"),
        current
    );
    restamp(dir.path(), "units", "6", "5", &["micro_batches"]);
    let v5 = read_trace_dir(dir.path()).expect("version 5 reads");
    let mut expected = current.clone();
    expected.units.iter_mut().for_each(|u| u.micro_batches = 1);
    assert_eq!(v5.units, expected.units);
    assert_eq!(v5.workers, current.workers);
    restamp(
        dir.path(),
        "workers",
        "9",
        "4",
        &["wasted_us", "transit_us", "params_transit_us"],
    );
    let v4 = read_trace_dir(dir.path()).expect("version 4 reads");
    expected.workers.iter_mut().for_each(|w| {
        (w.wasted_us, w.transit_us, w.params_transit_us) = (0, 0, 0);
    });
    assert_eq!(v4.workers, expected.workers);
    restamp(dir.path(), "workers", "4", "3", &["control_bytes"]);
    let old = read_trace_dir(dir.path()).expect("version 3 reads");
    assert!(old.workers.iter().all(|w| w.control_bytes == 0));
    expected
        .workers
        .iter_mut()
        .for_each(|w| w.control_bytes = 0);
    assert_eq!(old.workers, expected.workers);
    assert_eq!(old.units, expected.units);
}

#[test]
fn a_version_2_trace_reads_as_logistic_regression_without_metrics() {
    let p = plan("[job]\niterations = 4\n[data]\npartitions = 4\n[workers]\ncount = 2\n[trace]\npart_iterations = 2\n[model]\neval_every = 2\n");
    let dir = tempfile::tempdir().expect("temp dir");
    let out = run_in(&p, dir.path());
    let current = read_trace_dir(dir.path()).expect("version 9 reads");
    assert_eq!(current.iterations, out.iterations);

    restamp_iterations(dir.path(), "9", "2");
    let old = read_trace_dir(dir.path()).expect("version 2 reads");
    // Logistic regression has no metrics of its own: nothing is lost.
    assert_eq!(old, current);
    assert_eq!(old.iterations.len(), 4);
    assert!(old.iterations[0].test_loss.is_some() && old.iterations[1].test_loss.is_none());

    // Another version is refused, naming the file and the versions read.
    restamp_iterations(dir.path(), "2", "10");
    let part = dir.path().join("iterations/part-p000-00000.parquet");
    let err = read_trace_dir(dir.path()).expect_err("version 10");
    assert_eq!(
        err.to_string(),
        format!(
            "trace schema version 10 of {} is not supported (this build reads versions 2, 3, 4, 5, 6, 7, 8 and 9)",
            part.display()
        )
    );
}
