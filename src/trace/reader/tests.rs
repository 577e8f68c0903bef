//! Tests of the trace reader: round trips, stamps, schema versions and
//! every malformed part it must refuse by name.

use std::sync::Arc;

use arrow_array::ArrayRef;
use arrow_schema::Field;

use super::*;
use crate::trace::schema::ADDED_IN_V3;
use crate::trace::tests_support::{iteration, stamp, unit, worker};
use crate::trace::writer::{
    iterations_batch, stamp_metadata, units_batch, workers_batch, write_parquet, TraceWriter,
};

fn writer(dir: &Path, process: u32) -> TraceWriter {
    TraceWriter::try_new(dir, process, stamp("job")).expect("writer")
}

/// Writes `batch` as a units part with `metadata`, bypassing the writer.
fn write_units_part(dir: &Path, name: &str, batch: &RecordBatch, metadata: Vec<KeyValue>) {
    let table_dir = dir.join("units");
    fs::create_dir_all(&table_dir).expect("mkdir");
    write_parquet(&table_dir.join(name), batch, metadata).expect("write part");
}

fn sample_units_batch() -> RecordBatch {
    units_batch("job", &[unit(0, 0, 0, 0), unit(0, 1, 1, 0)]).expect("batch")
}

/// `batch` with column `name` replaced by `array` under `field`.
fn replace_column(batch: &RecordBatch, name: &str, field: Field, array: ArrayRef) -> RecordBatch {
    let schema = batch.schema();
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    let mut columns = batch.columns().to_vec();
    let (index, _) = schema.column_with_name(name).expect("column exists");
    fields[index] = field;
    columns[index] = array;
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).expect("batch")
}

#[test]
fn units_round_trip_over_several_parts_and_processes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut p0 = writer(tmp.path(), 0);
    let mut p1 = writer(tmp.path(), 1);
    // Out of order within and across parts.
    let parts = [
        vec![unit(1, 0, 0, 1), unit(1, 0, 0, 0), unit(0, 0, 1, 0)],
        vec![unit(0, 0, 0, 1), unit(0, 0, 0, 0)],
    ];
    p0.write_units(&parts[0]).expect("write");
    p0.write_units(&parts[1]).expect("write");
    let other = vec![unit(1, 3, 2, 0), unit(0, 2, 2, 0)];
    p1.write_units(&other).expect("write");

    let set = read_trace_dir(tmp.path()).expect("read");
    let expected = vec![
        unit(0, 0, 0, 0),
        unit(0, 0, 0, 1),
        unit(0, 0, 1, 0),
        unit(0, 2, 2, 0),
        unit(1, 0, 0, 0),
        unit(1, 0, 0, 1),
        unit(1, 3, 2, 0),
    ];
    assert_eq!(set.units, expected);
    assert!(set.workers.is_empty());
    assert!(set.iterations.is_empty());
    let names: Vec<_> = set
        .stamps
        .iter()
        .map(|(path, _)| path.strip_prefix(tmp.path()).expect("inside").to_path_buf())
        .collect();
    assert_eq!(
        names,
        [
            Path::new("units/part-p000-00000.parquet"),
            Path::new("units/part-p000-00001.parquet"),
            Path::new("units/part-p001-00000.parquet"),
        ]
    );
}

#[test]
fn workers_round_trip() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut w = writer(tmp.path(), 0);
    w.write_workers(&[worker(1, 1), worker(1, 0)])
        .expect("write");
    w.write_workers(&[worker(0, 1), worker(0, 0)])
        .expect("write");
    let set = read_trace_dir(tmp.path()).expect("read");
    assert_eq!(
        set.workers,
        [worker(0, 0), worker(0, 1), worker(1, 0), worker(1, 1)]
    );
}

#[test]
fn iterations_round_trip_with_optional_values() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut w = writer(tmp.path(), 0);
    let all_none = iteration(2, None);
    let all_some = iteration(0, Some(3));
    let mut mixed = iteration(1, Some(0));
    mixed.test_accuracy = None;
    assert!(all_none.test_loss.is_none() && all_none.test_accuracy.is_none());
    w.write_iterations(std::slice::from_ref(&all_none))
        .expect("write");
    w.write_iterations(&[mixed.clone(), all_some.clone()])
        .expect("write");

    let set = read_trace_dir(tmp.path()).expect("read");
    assert_eq!(set.iterations, [all_some, mixed, all_none]);
}

#[test]
fn all_tables_and_stamps_read_back() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut w = writer(tmp.path(), 4);
    w.write_iterations(&[iteration(0, None)]).expect("write");
    w.write_workers(&[worker(0, 0)]).expect("write");
    w.write_units(&[unit(0, 0, 0, 0)]).expect("write");

    let set = read_trace_dir(tmp.path()).expect("read");
    assert_eq!(set.units, [unit(0, 0, 0, 0)]);
    assert_eq!(set.workers, [worker(0, 0)]);
    assert_eq!(set.iterations, [iteration(0, None)]);
    assert_eq!(set.stamp(), Some(&stamp("job")));
    let tables: Vec<_> = set
        .stamps
        .iter()
        .map(|(path, stamp)| {
            assert_eq!(stamp, &crate::trace::tests_support::stamp("job"));
            path.parent()
                .and_then(|p| p.file_name())
                .expect("table dir")
                .to_owned()
        })
        .collect();
    assert_eq!(tables, ["units", "workers", "iterations"]);
}

#[test]
fn single_file_functions_return_stamp_and_sorted_rows() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut w = writer(tmp.path(), 0);
    let units = w
        .write_units(&[unit(3, 1, 0, 0), unit(3, 0, 0, 0)])
        .expect("write")
        .expect("part");
    let workers = w
        .write_workers(&[worker(3, 1)])
        .expect("write")
        .expect("part");
    let iterations = w
        .write_iterations(&[iteration(3, Some(1))])
        .expect("write")
        .expect("part");

    let part = read_units_file(&units).expect("read");
    assert_eq!(part.path, units);
    assert_eq!(part.stamp, stamp("job"));
    assert_eq!(part.records, [unit(3, 0, 0, 0), unit(3, 1, 0, 0)]);
    assert_eq!(
        read_workers_file(&workers).expect("read").records,
        [worker(3, 1)]
    );
    assert_eq!(
        read_iterations_file(&iterations).expect("read").records,
        [iteration(3, Some(1))]
    );

    // A part read as another table is rejected.
    let err = read_workers_file(&units).expect_err("wrong table");
    assert!(matches!(err, TraceError::WrongTable { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "{} holds table units, expected table workers",
            units.display()
        )
    );
}

#[test]
fn truncated_file_is_a_parquet_error_naming_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut w = writer(tmp.path(), 0);
    let path = w
        .write_units(&[unit(0, 0, 0, 0), unit(0, 0, 0, 1)])
        .expect("write")
        .expect("part");
    let bytes = fs::read(&path).expect("read bytes");
    fs::write(&path, &bytes[..bytes.len() / 2]).expect("truncate");

    let err = read_trace_dir(tmp.path()).expect_err("truncated");
    assert!(
        matches!(&err, TraceError::Parquet { path: p, .. } if *p == path),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!("parquet error in {}", path.display())
    );
    assert!(std::error::Error::source(&err).is_some());
}

#[test]
fn corrupt_file_is_a_parquet_error_naming_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let table_dir = tmp.path().join("workers");
    fs::create_dir_all(&table_dir).expect("mkdir");
    let path = table_dir.join("part-p000-00000.parquet");
    fs::write(&path, b"this is not a parquet file at all").expect("write");
    let err = read_workers_file(&path).expect_err("corrupt");
    assert!(
        matches!(&err, TraceError::Parquet { path: p, .. } if *p == path),
        "{err:?}"
    );

    // Garbage in the middle of an otherwise valid file.
    let mut w = writer(tmp.path(), 1);
    let rows: Vec<_> = (0..200).map(|i| worker(i, 0)).collect();
    let path = w.write_workers(&rows).expect("write").expect("part");
    let mut bytes = fs::read(&path).expect("read bytes");
    for byte in &mut bytes[8..200] {
        *byte = 0xAB;
    }
    fs::write(&path, &bytes).expect("write");
    let err = read_workers_file(&path).expect_err("corrupt");
    assert!(
        matches!(&err, TraceError::Parquet { path: p, .. } if *p == path),
        "{err:?}"
    );
}

/// `metadata` of `table` for the `job` stamp, claiming schema `version`.
fn metadata_of_version(table: TraceTable, job_id: &str, version: u32) -> Vec<KeyValue> {
    let mut metadata = stamp_metadata(table, &stamp(job_id));
    for kv in &mut metadata {
        if kv.key == META_SCHEMA_VERSION {
            kv.value = Some(version.to_string());
        }
    }
    metadata
}

/// Writes `batch` as the iterations part `part-p000-00000.parquet` of
/// `dir`, stamped with `job_id` and schema `version`; returns its path.
fn write_iterations_part(dir: &Path, batch: &RecordBatch, job_id: &str, version: u32) -> PathBuf {
    let table_dir = dir.join("iterations");
    fs::create_dir_all(&table_dir).expect("mkdir");
    let path = table_dir.join("part-p000-00000.parquet");
    let metadata = metadata_of_version(TraceTable::Iterations, job_id, version);
    write_parquet(&path, batch, metadata).expect("write part");
    path
}

/// `batch` without the columns version 3 added: what version 2 wrote.
fn as_version_2(batch: &RecordBatch) -> RecordBatch {
    let schema = batch.schema();
    let keep: Vec<usize> = (0..batch.num_columns())
        .filter(|&i| !ADDED_IN_V3.contains(&schema.field(i).name().as_str()))
        .collect();
    assert_eq!(keep.len(), batch.num_columns() - 2);
    batch.project(&keep).expect("project")
}

#[test]
fn other_schema_versions_are_rejected_naming_file_and_versions() {
    for table in [TraceTable::Units, TraceTable::Iterations] {
        for version in [0_u32, 1, 10, 30] {
            let tmp = tempfile::tempdir().expect("tempdir");
            let path = match table {
                TraceTable::Iterations => write_iterations_part(
                    tmp.path(),
                    &iterations_batch("job", &[iteration(0, None)]).expect("batch"),
                    "job",
                    version,
                ),
                _ => {
                    let metadata = metadata_of_version(table, "job", version);
                    let name = "part-p000-00000.parquet";
                    write_units_part(tmp.path(), name, &sample_units_batch(), metadata);
                    tmp.path().join("units").join(name)
                }
            };

            let err = read_trace_dir(tmp.path()).expect_err("unsupported version");
            assert!(
                matches!(
                    &err,
                    TraceError::SchemaVersion { found, supported: &[2, 3, 4, 5, 6, 7, 8, 9], path: p }
                        if *found == version && *p == path
                ),
                "{err:?}"
            );
            assert_eq!(
                err.to_string(),
                format!(
                    "trace schema version {version} of {} is not supported \
                     (this build reads versions 2, 3, 4, 5, 6, 7, 8 and 9)",
                    path.display()
                )
            );
        }
    }
}

#[test]
fn workload_and_metrics_round_trip() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut w = writer(tmp.path(), 0);
    let evaluated = iteration(0, Some(1));
    assert_eq!(evaluated.test_metrics.len(), 2);
    let not_evaluated = iteration(1, None);
    assert!(not_evaluated.test_metrics.is_empty());
    let mut no_own_metrics = iteration(2, Some(0));
    no_own_metrics.workload = "logistic".into();
    no_own_metrics.test_metrics.clear();
    let mut odd = iteration(3, Some(0));
    odd.workload = "soft\"max\u{e9}".into();
    odd.test_metrics = [
        ("tiny".to_string(), 5e-324),
        ("big".to_string(), -1.797_693_134_862_315_7e308),
        ("na\"me\n".to_string(), 0.1 + 0.2),
    ]
    .into();
    let rows = vec![
        odd.clone(),
        not_evaluated.clone(),
        evaluated.clone(),
        no_own_metrics.clone(),
    ];
    let path = w.write_iterations(&rows).expect("write").expect("part");

    let set = read_trace_dir(tmp.path()).expect("read");
    assert_eq!(
        set.iterations,
        [evaluated, not_evaluated, no_own_metrics, odd]
    );

    // On disk: the workload as is, the metrics as a JSON object or null.
    let file = File::open(&path).expect("open");
    let batch = ParquetRecordBatchReaderBuilder::try_new(file)
        .expect("parquet")
        .build()
        .expect("reader")
        .next()
        .expect("a batch")
        .expect("decodes");
    let workloads = batch
        .column_by_name(WORKLOAD_COLUMN)
        .and_then(|c| c.as_any().downcast_ref::<StringArray>())
        .expect("workload column");
    assert_eq!(workloads.value(0), "soft\"max\u{e9}");
    assert_eq!(workloads.value(2), "cnn");
    let metrics = batch
        .column_by_name(TEST_METRICS_COLUMN)
        .and_then(|c| c.as_any().downcast_ref::<StringArray>())
        .expect("test_metrics column");
    assert_eq!(
        metrics.iter().collect::<Vec<_>>(),
        [
            Some(r#"{"big":-1.7976931348623157e308,"na\"me\n":0.30000000000000004,"tiny":5e-324}"#),
            None,
            Some(r#"{"auc":0.875,"third":0.3333333333333333}"#),
            None,
        ]
    );
    // Any JSON reader takes it.
    let parsed: serde_json::Value = serde_json::from_str(metrics.value(2)).expect("valid JSON");
    assert_eq!(parsed["auc"], 0.875);
}

#[test]
fn non_finite_metrics_read_back_as_nan() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut record = iteration(0, Some(1));
    record.test_metrics = [
        ("auc".to_string(), f64::NAN),
        ("inf".to_string(), f64::INFINITY),
    ]
    .into();
    writer(tmp.path(), 0)
        .write_iterations(&[record])
        .expect("write");
    let set = read_trace_dir(tmp.path()).expect("read");
    let metrics = &set.iterations[0].test_metrics;
    assert_eq!(metrics.len(), 2);
    assert!(metrics.values().all(|v| v.is_nan()), "{metrics:?}");
}

#[test]
fn version_2_iterations_read_as_logistic_without_metrics() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let rows = [iteration(0, Some(1)), iteration(1, None)];
    let batch = as_version_2(&iterations_batch("job", &rows).expect("batch"));
    write_iterations_part(tmp.path(), &batch, "job", 2);
    // Units and workers of version 2 are those of version 3.
    let metadata = metadata_of_version(TraceTable::Units, "job", 2);
    write_units_part(
        tmp.path(),
        "part-p000-00000.parquet",
        &sample_units_batch(),
        metadata,
    );

    let set = read_trace_dir(tmp.path()).expect("version 2 reads");
    let expected: Vec<IterationRecord> = rows
        .iter()
        .map(|r| IterationRecord {
            workload: "logistic".into(),
            test_metrics: Default::default(),
            ..r.clone()
        })
        .collect();
    assert_eq!(set.iterations, expected);
    assert_eq!(set.units, [unit(0, 0, 0, 0), unit(0, 1, 1, 0)]);

    // The same columns stamped version 3 are incomplete.
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = write_iterations_part(tmp.path(), &batch, "job", 3);
    let err = read_trace_dir(tmp.path()).expect_err("version 3 needs workload");
    assert_eq!(
        err.to_string(),
        format!("{} has no column workload", path.display())
    );
}

#[test]
fn version_2_imports_read_with_their_format_as_the_workload() {
    let rows = [iteration(0, None)];
    let batch = as_version_2(&iterations_batch("x", &rows).expect("batch"));
    for (job_id, workload) in [
        ("alibaba-minibatch:job_1_norm", "alibaba-minibatch"),
        ("bytedance-ops:trace-AR", "bytedance-ops"),
        // Not what `forestall import` stamps: a run.
        ("bytedance-opsx:trace-AR", "logistic"),
        ("job-0123456789ab", "logistic"),
    ] {
        let batch = replace_column(
            &batch,
            JOB_ID_COLUMN,
            Field::new(JOB_ID_COLUMN, DataType::Utf8, false),
            Arc::new(StringArray::from(vec![job_id])),
        );
        let tmp = tempfile::tempdir().expect("tempdir");
        write_iterations_part(tmp.path(), &batch, job_id, 2);
        let set = read_trace_dir(tmp.path()).expect("version 2 reads");
        assert_eq!(set.iterations[0].workload, workload, "{job_id}");
        assert!(set.iterations[0].test_metrics.is_empty());
    }
}

#[test]
fn malformed_metrics_are_rejected_naming_file_row_and_iteration() {
    // More rows than one decoded batch (1024), so the row count carries
    // over from batch to batch.
    let rows: Vec<IterationRecord> = (0..1500).map(|i| iteration(i, Some(0))).collect();
    let batch = iterations_batch("job", &rows).expect("batch");
    let cases = [
        (
            "{auc: 0.9}",
            "expected a metric name (a JSON string) at byte 1, found 'a'",
        ),
        ("[0.9]", "expected a JSON object at byte 0, found '['"),
        (
            r#"{"auc":"high"}"#,
            "expected a number or null at byte 7, found '\"'",
        ),
        (
            r#"{"auc":0.9"#,
            "expected ',' or '}' at byte 10, found the end",
        ),
        ("", "expected a JSON object at byte 0, found the end"),
    ];
    for (bad, reason) in cases {
        let bad_row = 1200;
        let values: Vec<Option<String>> = (0..rows.len())
            .map(|i| match i {
                _ if i == bad_row => Some(bad.to_string()),
                _ if i % 2 == 0 => None,
                _ => Some(r#"{"auc": 0.5}"#.to_string()),
            })
            .collect();
        let batch = replace_column(
            &batch,
            TEST_METRICS_COLUMN,
            Field::new(TEST_METRICS_COLUMN, DataType::Utf8, true),
            Arc::new(StringArray::from(values)),
        );
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = write_iterations_part(tmp.path(), &batch, "job", 3);

        let err = read_iterations_file(&path).expect_err("malformed metrics");
        assert!(
            matches!(
                &err,
                TraceError::BadMetrics { row: 1200, iteration: 1200, value, .. }
                    if value == bad
            ),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!(
                "column test_metrics of {}, row 1200 (iteration 1200): {bad:?} is not a \
                 JSON object of numbers: {reason}",
                path.display()
            )
        );
    }
}

#[test]
fn missing_or_bad_metadata_is_rejected() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("units/part-p000-00000.parquet");
    write_units_part(
        tmp.path(),
        "part-p000-00000.parquet",
        &sample_units_batch(),
        vec![],
    );
    let err = read_units_file(&path).expect_err("no metadata");
    assert!(
        matches!(
            err,
            TraceError::MissingMetadata {
                key: "forestall.schema_version",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "{} has no metadata key forestall.schema_version (not a forestall trace file?)",
            path.display()
        )
    );

    let mut metadata = stamp_metadata(TraceTable::Units, &stamp("job"));
    for kv in &mut metadata {
        if kv.key == META_SEED {
            kv.value = Some("-1".to_string());
        }
    }
    fs::remove_file(&path).expect("rm");
    write_units_part(
        tmp.path(),
        "part-p000-00000.parquet",
        &sample_units_batch(),
        metadata,
    );
    let err = read_units_file(&path).expect_err("bad seed");
    assert!(
        matches!(&err, TraceError::BadMetadata { key: "forestall.seed", value, .. } if value == "-1"),
        "{err:?}"
    );
}

#[test]
fn missing_column_is_rejected_naming_file_and_column() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let batch = sample_units_batch();
    let (dropped, _) = batch.schema().column_with_name("wait_us").expect("wait_us");
    let keep: Vec<usize> = (0..batch.num_columns()).filter(|i| *i != dropped).collect();
    let batch = batch.project(&keep).expect("project");
    let metadata = stamp_metadata(TraceTable::Units, &stamp("job"));
    write_units_part(tmp.path(), "part-p000-00000.parquet", &batch, metadata);
    let path = tmp.path().join("units/part-p000-00000.parquet");

    let err = read_trace_dir(tmp.path()).expect_err("missing column");
    assert!(
        matches!(&err, TraceError::MissingColumn { column, .. } if column == "wait_us"),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!("{} has no column wait_us", path.display())
    );
}

#[test]
fn wrong_column_type_is_rejected() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let batch = replace_column(
        &sample_units_batch(),
        "rows",
        Field::new("rows", DataType::UInt64, false),
        Arc::new(UInt64Array::from(vec![1_u64, 2])),
    );
    let metadata = stamp_metadata(TraceTable::Units, &stamp("job"));
    write_units_part(tmp.path(), "part-p000-00000.parquet", &batch, metadata);
    let path = tmp.path().join("units/part-p000-00000.parquet");

    let err = read_units_file(&path).expect_err("wrong type");
    assert!(matches!(err, TraceError::WrongType { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "column rows of {} has type UInt64, expected UInt32",
            path.display()
        )
    );
}

#[test]
fn nulls_in_a_required_column_are_rejected() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let batch = replace_column(
        &sample_units_batch(),
        "start_us",
        Field::new("start_us", DataType::UInt64, true),
        Arc::new(UInt64Array::from(vec![Some(1_u64), None])),
    );
    let metadata = stamp_metadata(TraceTable::Units, &stamp("job"));
    write_units_part(tmp.path(), "part-p000-00000.parquet", &batch, metadata);
    let path = tmp.path().join("units/part-p000-00000.parquet");

    let err = read_units_file(&path).expect_err("null");
    assert_eq!(
        err.to_string(),
        format!("column start_us of {} contains nulls", path.display())
    );
}

#[test]
fn unknown_action_is_rejected() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let batch = replace_column(
        &sample_units_batch(),
        "action",
        Field::new("action", DataType::Utf8, false),
        Arc::new(StringArray::from(vec!["assigned", "teleported"])),
    );
    let metadata = stamp_metadata(TraceTable::Units, &stamp("job"));
    write_units_part(tmp.path(), "part-p000-00000.parquet", &batch, metadata);
    let path = tmp.path().join("units/part-p000-00000.parquet");

    let err = read_units_file(&path).expect_err("bad action");
    assert_eq!(
        err.to_string(),
        format!(
            "column action of {} has invalid value \"teleported\"",
            path.display()
        )
    );
}

#[test]
fn extra_columns_are_ignored() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let batch = sample_units_batch();
    let mut fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.insert(3, Field::new("note", DataType::Utf8, true));
    let mut columns = batch.columns().to_vec();
    columns.insert(3, Arc::new(StringArray::from(vec![Some("x"), None])));
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).expect("batch");
    let metadata = stamp_metadata(TraceTable::Units, &stamp("job"));
    write_units_part(tmp.path(), "part-p000-00000.parquet", &batch, metadata);

    let set = read_trace_dir(tmp.path()).expect("read");
    assert_eq!(set.units, [unit(0, 0, 0, 0), unit(0, 1, 1, 0)]);
}

#[test]
fn parts_of_another_run_are_rejected() {
    let tmp = tempfile::tempdir().expect("tempdir");
    writer(tmp.path(), 0)
        .write_workers(&[worker(0, 0)])
        .expect("write");
    let mut other_stamp = stamp("job");
    other_stamp.seed = 42;
    TraceWriter::try_new(tmp.path(), 1, other_stamp)
        .expect("writer")
        .write_workers(&[worker(0, 1)])
        .expect("write");

    let err = read_trace_dir(tmp.path()).expect_err("mixed runs");
    let path = tmp.path().join("workers/part-p001-00000.parquet");
    assert_eq!(
        err.to_string(),
        format!(
            "{} has forestall.seed \"42\", expected \"18446744073709551615\" (one trace directory holds the parts of one run)",
            path.display()
        )
    );
}

#[test]
fn job_id_column_must_match_metadata() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let batch = units_batch("other-job", &[unit(0, 0, 0, 0)]).expect("batch");
    let metadata = stamp_metadata(TraceTable::Units, &stamp("job"));
    write_units_part(tmp.path(), "part-p000-00000.parquet", &batch, metadata);
    let err = read_trace_dir(tmp.path()).expect_err("job id");
    assert!(
        matches!(&err, TraceError::StampMismatch { key: "job_id", found, .. } if found == "other-job"),
        "{err:?}"
    );
}

#[test]
fn hidden_and_foreign_files_are_ignored() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut w = writer(tmp.path(), 0);
    w.write_iterations(&[iteration(0, None)]).expect("write");
    let dir = tmp.path().join("iterations");
    // A crashed writer's unfinished part, and unrelated files.
    fs::write(dir.join(".part-p000-00001.parquet.tmp"), b"half a part").expect("write");
    fs::write(dir.join(".hidden.parquet"), b"junk").expect("write");
    fs::write(dir.join("README.txt"), b"notes").expect("write");
    fs::create_dir(dir.join("nested.parquet")).expect("mkdir");

    let set = read_trace_dir(tmp.path()).expect("read");
    assert_eq!(set.iterations, [iteration(0, None)]);
    assert_eq!(set.stamps.len(), 1);
}

#[test]
fn missing_directory_gives_a_clear_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("no-such-run");
    let err = read_trace_dir(&dir).expect_err("missing dir");
    assert!(matches!(err, TraceError::DirNotFound { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!("trace directory {} does not exist", dir.display())
    );
}

#[test]
fn directory_without_tables_is_not_a_trace_dir() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let err = read_trace_dir(tmp.path()).expect_err("empty dir");
    assert!(matches!(err, TraceError::NotATraceDir { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "{} is not a trace directory (it has no units/, workers/ or iterations/)",
            tmp.path().display()
        )
    );
    let file = tmp.path().join("file");
    fs::write(&file, b"x").expect("write");
    let err = read_trace_dir(&file).expect_err("a file");
    assert!(matches!(err, TraceError::NotATraceDir { .. }), "{err:?}");
}

#[test]
fn fresh_writer_directory_reads_as_empty() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let _ = writer(tmp.path(), 0);
    let set = read_trace_dir(tmp.path()).expect("read");
    assert_eq!(set, TraceSet::default());
    assert_eq!(set.stamp(), None);
}

#[test]
fn writer_batches_match_the_schemas() {
    // The reader decodes by name and the writer builds by position: a
    // swapped pair of same-typed columns would break the round trips above,
    // and a type or nullability mismatch fails here.
    let (u, w, i) = crate::trace::tests_support::one_of_each();
    assert_eq!(
        units_batch("j", &[u]).expect("units").schema(),
        TraceTable::Units.schema()
    );
    assert_eq!(
        workers_batch("j", &[w]).expect("workers").schema(),
        TraceTable::Workers.schema()
    );
    assert_eq!(
        iterations_batch("j", &[i]).expect("iterations").schema(),
        TraceTable::Iterations.schema()
    );
}
