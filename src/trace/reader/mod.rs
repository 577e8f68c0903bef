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
use super::part::{is_part_file_name, TraceStamp};
use super::record::{IterationRecord, UnitAction, UnitRecord, WorkerRecord};
use super::schema::{
    TraceTable, JOB_ID_COLUMN, META_GIT_REVISION, META_JOB_ID, META_PLAN_HASH, META_SCHEMA_VERSION,
    META_SEED, META_TABLE, READABLE_SCHEMA_VERSIONS, TEST_METRICS_COLUMN, WORKLOAD_COLUMN,
};

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

/// Reads one table of the trace directory `dir` part by part, handing each
/// part to `each` and checking that every part carries the first one's stamp
/// (one run per directory). Only one part is in memory at a time. A missing
/// table directory has no parts.
pub fn for_each_part<R>(
    dir: &Path,
    table: TraceTable,
    read: impl Fn(&Path) -> Result<TracePart<R>>,
    mut each: impl FnMut(TracePart<R>) -> Result<()>,
    stamp: &mut Option<TraceStamp>,
) -> Result<()> {
    let table_dir = dir.join(table.name());
    if !table_dir.is_dir() {
        return Ok(());
    }
    for path in list_parts(&table_dir)? {
        let part = read(&path)?;
        match stamp {
            Some(first) => check_same_stamp(&path, first, &part.stamp)?,
            None => *stamp = Some(part.stamp.clone()),
        }
        each(part)?;
    }
    Ok(())
}

/// Every record of the `iterations` table of the trace directory `dir`, in
/// iteration order (the parts checked to carry one stamp, as
/// [`for_each_part`] does).
pub fn read_iterations(dir: &Path, stamp: &mut Option<TraceStamp>) -> Result<Vec<IterationRecord>> {
    let mut records = Vec::new();
    for_each_part(
        dir,
        TraceTable::Iterations,
        read_iterations_file,
        |part| {
            records.extend(part.records);
            Ok(())
        },
        stamp,
    )?;
    sort_iterations(&mut records);
    Ok(records)
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

/// Reads a part, turning a panic of the Parquet decoder on a damaged file
/// (found by fuzzing: parquet panics on some corrupt column metadata) into an
/// error naming the file.
fn read_part<R>(path: &Path, table: TraceTable, decode: Decode<R>) -> Result<TracePart<R>> {
    quietly(|| read_part_unguarded(path, table, decode)).unwrap_or_else(|message| {
        Err(TraceError::Parquet {
            path: path.into(),
            source: ParquetError::General(format!("corrupt file: {message}")),
        })
    })
}

thread_local! {
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread is reading a part under the reader's guard: a
/// panic now is the decoder's on a damaged file and comes back as an error
/// naming the file, so a panic hook need not print it (the `forestall`
/// binary's does not). The library installs no hook of its own.
pub fn reading_guarded() -> bool {
    QUIET.with(std::cell::Cell::get)
}

/// Runs `f`, returning its panic's message (the panic is also shown to the
/// process's panic hook, which [`reading_guarded`] lets stay silent).
fn quietly<T>(f: impl FnOnce() -> T) -> std::result::Result<T, String> {
    QUIET.with(|q| q.set(true));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    QUIET.with(|q| q.set(false));
    result.map_err(|payload| {
        payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "the decoder panicked".to_owned())
    })
}

fn read_part_unguarded<R>(
    path: &Path,
    table: TraceTable,
    decode: Decode<R>,
) -> Result<TracePart<R>> {
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
    let micro_batches = if c.version >= 6 {
        Some(c.u32(crate::trace::schema::MICRO_BATCHES_COLUMN)?)
    } else {
        None
    };
    let link = if c.version >= 7 {
        Some((
            c.u64(crate::trace::schema::SEND_COLUMN)?,
            c.f64(crate::trace::schema::LINK_COLUMN)?,
        ))
    } else {
        None
    };
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
                micro_batches: micro_batches.map_or(1, |m| m.value(i)),
                send_us: link.map_or(0, |(send, _)| send.value(i)),
                gt_link_mbps: link.map_or(0.0, |(_, mbps)| mbps.value(i)),
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
    let control_bytes = if c.version >= 4 {
        Some(c.u64(crate::trace::schema::CONTROL_BYTES_COLUMN)?)
    } else {
        None
    };
    let units_cancelled = c.u32("units_cancelled")?;
    let wasted = if c.version >= 5 {
        Some(c.u64(crate::trace::schema::WASTED_COLUMN)?)
    } else {
        None
    };
    let transit = if c.version >= 7 {
        Some(c.u64(crate::trace::schema::TRANSIT_COLUMN)?)
    } else {
        None
    };
    let params_transit = if c.version >= 8 {
        Some(c.u64(crate::trace::schema::PARAMS_TRANSIT_COLUMN)?)
    } else {
        None
    };
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
            control_bytes: control_bytes.map_or(0, |b| b.value(i)),
            units_cancelled: units_cancelled.value(i),
            wasted_us: wasted.map_or(0, |w| w.value(i)),
            transit_us: transit.map_or(0, |t| t.value(i)),
            params_transit_us: params_transit.map_or(0, |t| t.value(i)),
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
    let v2_workload = super::imported::Format::of_job_id(c.job_id)
        .map_or("logistic", super::imported::Format::as_str);
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
mod tests;
