//! Reads trace part files back into records.
//!
//! Every file is checked before its rows are decoded: its
//! `forestall.schema_version` must be one of [`READABLE_SCHEMA_VERSIONS`], its
//! `forestall.table` the table it is read as, and every column of the table's
//! [schema](super::schema) of that version must exist with its type. Extra
//! columns are ignored.
//!
//! A version-2 `iterations` part has no `workload` and no `test_metrics`. Its
//! rows read with no metrics and with workload `logistic` (the only workload
//! before version 3), except in a trace `forestall import` wrote, whose job id
//! `<format>:<file stem>` names the import format: the rows then read with that
//! format as the workload, as version 3 writes them.

use std::fs::{self, File};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use arrow_array::{Array, Float64Array, RecordBatch, StringArray, UInt32Array, UInt64Array};
use arrow_schema::{DataType, Schema, SchemaRef};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;
use parquet::errors::ParquetError;
use parquet::file::metadata::KeyValue;
use serde::de::IntoDeserializer;
use serde::Deserialize;

use super::error::{Result, TraceError};
use super::metrics_json;
use super::record::{IterationRecord, UnitAction, UnitRecord, WorkerRecord};
use super::schema::{
    TraceTable, JOB_ID_COLUMN, META_GIT_REVISION, META_JOB_ID, META_PLAN_HASH, META_SCHEMA_VERSION,
    META_SEED, META_TABLE, READABLE_SCHEMA_VERSIONS, TEST_METRICS_COLUMN, WORKLOAD_COLUMN,
};
use super::writer::{is_part_file_name, TraceStamp};

/// Everything in a trace directory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TraceSet {
    /// All unit rows, sorted by (iteration, worker, partition, unit).
    pub units: Vec<UnitRecord>,
    /// All worker rows, sorted by (iteration, worker).
    pub workers: Vec<WorkerRecord>,
    /// All iteration rows, sorted by iteration.
    pub iterations: Vec<IterationRecord>,
    /// Every part file read with its stamp: the `units` parts, then `workers`,
    /// then `iterations`, each sorted by file name. All stamps are equal.
    pub stamps: Vec<(PathBuf, TraceStamp)>,
}

impl TraceSet {
    /// The stamp shared by all parts, or `None` if the directory had no parts.
    pub fn stamp(&self) -> Option<&TraceStamp> {
        self.stamps.first().map(|(_, stamp)| stamp)
    }
}

/// The rows of one part file and its stamp.
#[derive(Debug, Clone, PartialEq)]
pub struct TracePart<R> {
    /// The file.
    pub path: PathBuf,
    /// Its key-value metadata.
    pub stamp: TraceStamp,
    /// Its rows, sorted like the corresponding [`TraceSet`] field.
    pub records: Vec<R>,
}

/// Reads every part of every table in the trace directory `dir`.
///
/// Parts are `<table>/*.parquet` files, read in file-name order; hidden files
/// (such as a writer's unfinished temporary part) and other files are ignored.
/// A missing table subdirectory reads as an empty table, but at least one must
/// exist. All parts must carry the same [`TraceStamp`], so one directory holds
/// exactly one run.
pub fn read_trace_dir(dir: &Path) -> Result<TraceSet> {
    match fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Err(TraceError::NotATraceDir { path: dir.into() }),
        Err(err) if err.kind() == ErrorKind::NotFound => {
            return Err(TraceError::DirNotFound { path: dir.into() })
        }
        Err(source) => {
            return Err(TraceError::Io {
                path: dir.into(),
                source,
            })
        }
    }
    let tables: Vec<TraceTable> = TraceTable::ALL
        .into_iter()
        .filter(|table| dir.join(table.name()).is_dir())
        .collect();
    if tables.is_empty() {
        return Err(TraceError::NotATraceDir { path: dir.into() });
    }

    let mut set = TraceSet::default();
    for table in tables {
        for path in list_parts(&dir.join(table.name()))? {
            let stamp = match table {
                TraceTable::Units => {
                    let part = read_units_file(&path)?;
                    set.units.extend(part.records);
                    part.stamp
                }
                TraceTable::Workers => {
                    let part = read_workers_file(&path)?;
                    set.workers.extend(part.records);
                    part.stamp
                }
                TraceTable::Iterations => {
                    let part = read_iterations_file(&path)?;
                    set.iterations.extend(part.records);
                    part.stamp
                }
            };
            if let Some(first) = set.stamp() {
                check_same_stamp(&path, first, &stamp)?;
            }
            set.stamps.push((path, stamp));
        }
    }
    sort_units(&mut set.units);
    sort_workers(&mut set.workers);
    sort_iterations(&mut set.iterations);
    Ok(set)
}

/// Reads one part file of the `units` table.
pub fn read_units_file(path: &Path) -> Result<TracePart<UnitRecord>> {
    let mut part = read_part(path, TraceTable::Units, decode_units)?;
    sort_units(&mut part.records);
    Ok(part)
}

/// Reads one part file of the `workers` table.
pub fn read_workers_file(path: &Path) -> Result<TracePart<WorkerRecord>> {
    let mut part = read_part(path, TraceTable::Workers, decode_workers)?;
    sort_workers(&mut part.records);
    Ok(part)
}

/// Reads one part file of the `iterations` table.
pub fn read_iterations_file(path: &Path) -> Result<TracePart<IterationRecord>> {
    let mut part = read_part(path, TraceTable::Iterations, decode_iterations)?;
    sort_iterations(&mut part.records);
    Ok(part)
}

fn sort_units(records: &mut [UnitRecord]) {
    records.sort_by_key(|r| (r.iteration, r.worker, r.partition, r.unit));
}

fn sort_workers(records: &mut [WorkerRecord]) {
    records.sort_by_key(|r| (r.iteration, r.worker));
}

fn sort_iterations(records: &mut [IterationRecord]) {
    records.sort_by_key(|r| r.iteration);
}

/// The part files in a table directory, sorted by file name.
fn list_parts(table_dir: &Path) -> Result<Vec<PathBuf>> {
    let mut parts = Vec::new();
    for entry in fs::read_dir(table_dir).map_err(TraceError::io(table_dir))? {
        let entry = entry.map_err(TraceError::io(table_dir))?;
        let path = entry.path();
        let is_part = entry.file_name().to_str().is_some_and(is_part_file_name);
        if is_part && path.is_file() {
            parts.push(path);
        }
    }
    parts.sort();
    Ok(parts)
}

fn check_same_stamp(path: &Path, expected: &TraceStamp, found: &TraceStamp) -> Result<()> {
    let fields: [(&'static str, String, String); 4] = [
        (META_JOB_ID, found.job_id.clone(), expected.job_id.clone()),
        (
            META_GIT_REVISION,
            found.git_revision.clone(),
            expected.git_revision.clone(),
        ),
        (
            META_PLAN_HASH,
            found.plan_hash.clone(),
            expected.plan_hash.clone(),
        ),
        (META_SEED, found.seed.to_string(), expected.seed.to_string()),
    ];
    for (key, found, expected) in fields {
        if found != expected {
            return Err(TraceError::StampMismatch {
                path: path.into(),
                key,
                found,
                expected,
            });
        }
    }
    Ok(())
}

type Decode<R> = fn(&Columns<'_>) -> Result<Vec<R>>;

fn read_part<R>(path: &Path, table: TraceTable, decode: Decode<R>) -> Result<TracePart<R>> {
    let file = File::open(path).map_err(TraceError::io(path))?;
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(file).map_err(TraceError::parquet(path))?;
    let (stamp, version, expected) = read_stamp(
        path,
        table,
        builder.metadata().file_metadata().key_value_metadata(),
    )?;
    let roots = check_columns(path, &expected, builder.schema())?;
    let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
    let reader = builder
        .with_projection(mask)
        .build()
        .map_err(TraceError::parquet(path))?;

    let mut records = Vec::new();
    let mut first_row = 0;
    for batch in reader {
        let batch = batch.map_err(|err| TraceError::Parquet {
            path: path.into(),
            source: ParquetError::from(err),
        })?;
        let columns = Columns {
            path,
            batch: &batch,
            first_row,
            version,
            job_id: &stamp.job_id,
        };
        first_row += batch.num_rows();
        let job_ids = columns.utf8(JOB_ID_COLUMN)?;
        if let Some(other) = job_ids.iter().flatten().find(|id| *id != stamp.job_id) {
            return Err(TraceError::StampMismatch {
                path: path.into(),
                key: JOB_ID_COLUMN,
                found: other.to_string(),
                expected: stamp.job_id.clone(),
            });
        }
        records.extend(decode(&columns)?);
    }
    Ok(TracePart {
        path: path.into(),
        stamp,
        records,
    })
}

/// Checks the metadata of a file read as `table` and returns its stamp, its
/// schema version and the columns of that version.
fn read_stamp(
    path: &Path,
    table: TraceTable,
    kv: Option<&Vec<KeyValue>>,
) -> Result<(TraceStamp, u32, SchemaRef)> {
    let get = |key: &'static str| -> Result<&str> {
        kv.into_iter()
            .flatten()
            .find(|entry| entry.key == key)
            .and_then(|entry| entry.value.as_deref())
            .ok_or_else(|| TraceError::MissingMetadata {
                path: path.into(),
                key,
            })
    };
    let bad = |key: &'static str, value: &str| TraceError::BadMetadata {
        path: path.into(),
        key,
        value: value.to_string(),
    };

    let version = get(META_SCHEMA_VERSION)?;
    let found: u32 = version
        .trim()
        .parse()
        .map_err(|_| bad(META_SCHEMA_VERSION, version))?;
    let schema = table
        .schema_of_version(found)
        .ok_or_else(|| TraceError::SchemaVersion {
            path: path.into(),
            found,
            supported: READABLE_SCHEMA_VERSIONS,
        })?;
    let found_table = get(META_TABLE)?;
    if found_table != table.name() {
        return Err(TraceError::WrongTable {
            path: path.into(),
            found: found_table.to_string(),
            expected: table.name(),
        });
    }
    let seed = get(META_SEED)?;
    let stamp = TraceStamp {
        job_id: get(META_JOB_ID)?.to_string(),
        git_revision: get(META_GIT_REVISION)?.to_string(),
        plan_hash: get(META_PLAN_HASH)?.to_string(),
        seed: seed.trim().parse().map_err(|_| bad(META_SEED, seed))?,
    };
    Ok((stamp, found, schema))
}

/// Checks that every column of `expected` is in `found` with the same type and
/// returns their indices in `found`.
fn check_columns(path: &Path, expected: &Schema, found: &Schema) -> Result<Vec<usize>> {
    expected
        .fields()
        .iter()
        .map(|field| {
            let Some((index, found_field)) = found.column_with_name(field.name()) else {
                return Err(TraceError::MissingColumn {
                    path: path.into(),
                    column: field.name().clone(),
                });
            };
            if found_field.data_type() != field.data_type() {
                return Err(TraceError::WrongType {
                    path: path.into(),
                    column: field.name().clone(),
                    expected: field.data_type().clone(),
                    found: found_field.data_type().clone(),
                });
            }
            Ok(index)
        })
        .collect()
}

/// Typed access to the columns of a batch, with errors naming the file.
struct Columns<'a> {
    path: &'a Path,
    batch: &'a RecordBatch,
    /// Rows of the file before this batch.
    first_row: usize,
    /// The file's schema version.
    version: u32,
    /// The file's job id.
    job_id: &'a str,
}

impl<'a> Columns<'a> {
    fn len(&self) -> usize {
        self.batch.num_rows()
    }

    fn column<A: Array + 'static>(&self, name: &str, data_type: DataType) -> Result<&'a A> {
        let column = self
            .batch
            .column_by_name(name)
            .ok_or_else(|| TraceError::MissingColumn {
                path: self.path.into(),
                column: name.to_string(),
            })?;
        column
            .as_any()
            .downcast_ref::<A>()
            .ok_or_else(|| TraceError::WrongType {
                path: self.path.into(),
                column: name.to_string(),
                expected: data_type,
                found: column.data_type().clone(),
            })
    }

    /// A column that must not contain nulls.
    fn required<A: Array + 'static>(&self, name: &str, data_type: DataType) -> Result<&'a A> {
        let array = self.column::<A>(name, data_type)?;
        if array.null_count() > 0 {
            return Err(TraceError::UnexpectedNull {
                path: self.path.into(),
                column: name.to_string(),
            });
        }
        Ok(array)
    }

    fn u64(&self, name: &str) -> Result<&'a UInt64Array> {
        self.required(name, DataType::UInt64)
    }

    fn u32(&self, name: &str) -> Result<&'a UInt32Array> {
        self.required(name, DataType::UInt32)
    }

    fn f64(&self, name: &str) -> Result<&'a Float64Array> {
        self.required(name, DataType::Float64)
    }

    fn utf8(&self, name: &str) -> Result<&'a StringArray> {
        self.required(name, DataType::Utf8)
    }

    fn opt_f64(&self, name: &str) -> Result<&'a Float64Array> {
        self.column(name, DataType::Float64)
    }

    fn opt_u32(&self, name: &str) -> Result<&'a UInt32Array> {
        self.column(name, DataType::UInt32)
    }

    fn opt_utf8(&self, name: &str) -> Result<&'a StringArray> {
        self.column(name, DataType::Utf8)
    }

    fn action(&self, name: &str, value: &str) -> Result<UnitAction> {
        let parsed: std::result::Result<UnitAction, serde::de::value::Error> =
            UnitAction::deserialize(value.into_deserializer());
        match parsed {
            // Written with `as_str`; insist that it reads back to the same name.
            Ok(action) if action.as_str() == value => Ok(action),
            _ => Err(TraceError::BadValue {
                path: self.path.into(),
                column: name.to_string(),
                value: value.to_string(),
            }),
        }
    }
}

fn decode_units(c: &Columns<'_>) -> Result<Vec<UnitRecord>> {
    let iteration = c.u64("iteration")?;
    let worker = c.u32("worker")?;
    let process = c.u32("process")?;
    let partition = c.u32("partition")?;
    let unit = c.u32("unit")?;
    let owner = c.u32("owner")?;
    let executor = c.u32("executor")?;
    let start_us = c.u64("start_us")?;
    let end_us = c.u64("end_us")?;
    let compute_us = c.u64("compute_us")?;
    let wait_us = c.u64("wait_us")?;
    let rows = c.u32("rows")?;
    let bytes_sent = c.u64("bytes_sent")?;
    let action = c.utf8("action")?;
    let gt_slowdown = c.f64("gt_slowdown")?;
    let gt_delay_us = c.u64("gt_delay_us")?;
    (0..c.len())
        .map(|i| {
            Ok(UnitRecord {
                iteration: iteration.value(i),
                worker: worker.value(i),
                process: process.value(i),
                partition: partition.value(i),
                unit: unit.value(i),
                owner: owner.value(i),
                executor: executor.value(i),
                start_us: start_us.value(i),
                end_us: end_us.value(i),
                compute_us: compute_us.value(i),
                wait_us: wait_us.value(i),
                rows: rows.value(i),
                bytes_sent: bytes_sent.value(i),
                action: c.action("action", action.value(i))?,
                gt_slowdown: gt_slowdown.value(i),
                gt_delay_us: gt_delay_us.value(i),
            })
        })
        .collect()
}

fn decode_workers(c: &Columns<'_>) -> Result<Vec<WorkerRecord>> {
    let iteration = c.u64("iteration")?;
    let worker = c.u32("worker")?;
    let process = c.u32("process")?;
    let units = c.u32("units")?;
    let rows = c.u64("rows")?;
    let ready_us = c.u64("ready_us")?;
    let finish_us = c.u64("finish_us")?;
    let compute_us = c.u64("compute_us")?;
    let busy_us = c.u64("busy_us")?;
    let barrier_wait_us = c.u64("barrier_wait_us")?;
    let operator_us = c.u64("operator_us")?;
    let bytes_sent = c.u64("bytes_sent")?;
    let bytes_moved = c.u64("bytes_moved")?;
    let units_given = c.u32("units_given")?;
    let control_sent = c.u32("control_sent")?;
    let units_cancelled = c.u32("units_cancelled")?;
    let params_version = c.u64("params_version")?;
    let predicted = c.opt_f64("predicted_unit_us")?;
    let gt_slowdown = c.f64("gt_slowdown")?;
    let gt_delay_us = c.u64("gt_delay_us")?;
    Ok((0..c.len())
        .map(|i| WorkerRecord {
            iteration: iteration.value(i),
            worker: worker.value(i),
            process: process.value(i),
            units: units.value(i),
            rows: rows.value(i),
            ready_us: ready_us.value(i),
            finish_us: finish_us.value(i),
            compute_us: compute_us.value(i),
            busy_us: busy_us.value(i),
            barrier_wait_us: barrier_wait_us.value(i),
            operator_us: operator_us.value(i),
            bytes_sent: bytes_sent.value(i),
            bytes_moved: bytes_moved.value(i),
            units_given: units_given.value(i),
            control_sent: control_sent.value(i),
            units_cancelled: units_cancelled.value(i),
            params_version: params_version.value(i),
            predicted_unit_us: predicted.is_valid(i).then(|| predicted.value(i)),
            gt_slowdown: gt_slowdown.value(i),
            gt_delay_us: gt_delay_us.value(i),
        })
        .collect())
}

fn decode_iterations(c: &Columns<'_>) -> Result<Vec<IterationRecord>> {
    let iteration = c.u64("iteration")?;
    let start_us = c.u64("start_us")?;
    let end_us = c.u64("end_us")?;
    let wall_us = c.u64("wall_us")?;
    let train_loss = c.f64("train_loss")?;
    let test_loss = c.opt_f64("test_loss")?;
    let test_accuracy = c.opt_f64("test_accuracy")?;
    let laggard = c.opt_u32("laggard")?;
    let lag_us = c.u64("lag_us")?;
    let median_busy_us = c.u64("median_busy_us")?;
    let barrier_wait_us = c.u64("barrier_wait_us")?;
    let units = c.u32("units")?;
    let rows = c.u64("rows")?;
    let dropped = c.utf8("dropped_partitions")?;
    // Version 2 has neither column (see the module documentation).
    let (workload, metrics) = if c.version >= 3 {
        (
            Some(c.utf8(WORKLOAD_COLUMN)?),
            Some(c.opt_utf8(TEST_METRICS_COLUMN)?),
        )
    } else {
        (None, None)
    };
    let v2_workload = crate::import::Format::of_job_id(c.job_id)
        .map_or("logistic", crate::import::Format::as_str);
    (0..c.len())
        .map(|i| {
            let test_metrics = match metrics {
                Some(m) if m.is_valid(i) => {
                    metrics_json::decode(m.value(i)).map_err(|reason| TraceError::BadMetrics {
                        path: c.path.into(),
                        row: c.first_row + i,
                        iteration: iteration.value(i),
                        value: m.value(i).to_owned(),
                        reason,
                    })?
                }
                _ => Default::default(),
            };
            Ok(IterationRecord {
                iteration: iteration.value(i),
                start_us: start_us.value(i),
                end_us: end_us.value(i),
                wall_us: wall_us.value(i),
                train_loss: train_loss.value(i),
                test_loss: test_loss.is_valid(i).then(|| test_loss.value(i)),
                test_accuracy: test_accuracy.is_valid(i).then(|| test_accuracy.value(i)),
                laggard: laggard.is_valid(i).then(|| laggard.value(i)),
                lag_us: lag_us.value(i),
                median_busy_us: median_busy_us.value(i),
                barrier_wait_us: barrier_wait_us.value(i),
                units: units.value(i),
                rows: rows.value(i),
                dropped_partitions: dropped.value(i).to_owned(),
                workload: workload.map_or(v2_workload, |w| w.value(i)).to_owned(),
                test_metrics,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
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
    fn replace_column(
        batch: &RecordBatch,
        name: &str,
        field: Field,
        array: ArrayRef,
    ) -> RecordBatch {
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
    fn write_iterations_part(
        dir: &Path,
        batch: &RecordBatch,
        job_id: &str,
        version: u32,
    ) -> PathBuf {
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
            for version in [0_u32, 1, 4, 30] {
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
                        TraceError::SchemaVersion { found, supported: &[2, 3], path: p }
                            if *found == version && *p == path
                    ),
                    "{err:?}"
                );
                assert_eq!(
                    err.to_string(),
                    format!(
                        "trace schema version {version} of {} is not supported \
                         (this build reads versions 2 and 3)",
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
                Some(
                    r#"{"big":-1.7976931348623157e308,"na\"me\n":0.30000000000000004,"tiny":5e-324}"#
                ),
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
                "{} has forestall.seed \"42\", expected \"18446744073709551615\"",
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
}
