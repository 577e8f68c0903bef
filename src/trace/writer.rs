//! Writes trace records as Parquet part files, one complete file per call.
//!
//! A trace directory holds one subdirectory per table (`units/`, `workers/`,
//! `iterations/`). Each [`TraceWriter`] call with records writes one part file
//! `<table>/part-p{process:03}-{seq:05}.parquet`. The file is first written under
//! a hidden temporary name in the same directory, closed, synced and only then
//! renamed, so a part file is either complete or absent: a crash loses at most
//! the part being written.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::error::{Result, TraceError};
use super::metrics_json;
use super::part::{is_part_file_name, part_file_name, part_prefix, TraceStamp, PART_SUFFIX};
use super::record::{IterationRecord, UnitRecord, WorkerRecord};
use super::schema::{
    self, TraceTable, META_GIT_REVISION, META_JOB_ID, META_PLAN_HASH, META_SCHEMA_VERSION,
    META_SEED, META_TABLE, SCHEMA_VERSION,
};
use crate::fsutil::{Quota, QuotaFile};
use arrow_array::{ArrayRef, Float64Array, RecordBatch, StringArray, UInt32Array, UInt64Array};
use arrow_schema::ArrowError;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;

/// Writes the trace part files of one process into a trace directory.
///
/// Use one writer per process and directory: part names contain the process
/// number and a per-table sequence number, and a writer refuses to overwrite an
/// existing part.
///
/// # Examples
///
/// ```
/// use forestall::trace::{read_trace_dir, IterationRecord, TraceStamp, TraceWriter};
/// # let tmp = tempfile::tempdir()?;
/// # let dir = tmp.path();
/// let stamp = TraceStamp {
///     job_id: "demo".into(),
///     git_revision: "abc123".into(),
///     plan_hash: "f00d".into(),
///     seed: 7,
/// };
/// let mut writer = TraceWriter::try_new(dir, 0, stamp)?;
/// let row = IterationRecord {
///     iteration: 0, start_us: 10, end_us: 60, wall_us: 50, train_loss: 0.69,
///     test_loss: None, test_accuracy: None, laggard: None, lag_us: 0,
///     median_busy_us: 45, barrier_wait_us: 12, units: 8, rows: 512,
///     dropped_partitions: String::new(),
///     workload: "logistic".into(), test_metrics: Default::default(),
/// };
/// let part = writer.write_iterations(&[row.clone()])?;
/// assert!(part.is_some_and(|p| p.ends_with("iterations/part-p000-00000.parquet")));
///
/// let trace = read_trace_dir(dir)?;
/// assert_eq!(trace.iterations, vec![row]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct TraceWriter {
    dir: PathBuf,
    process: u32,
    stamp: TraceStamp,
    /// Next sequence number per table, indexed by [`TraceTable::index`].
    next_seq: [u32; 3],
    /// The bytes the parts may still take (unlimited unless a test says).
    quota: Quota,
}

impl TraceWriter {
    /// Creates `dir` and its `units/`, `workers/` and `iterations/`
    /// subdirectories (if needed) for process `process`.
    ///
    /// Fails with [`TraceError::PartExists`] if `dir` already holds parts of
    /// this process.
    pub fn try_new(dir: &Path, process: u32, stamp: TraceStamp) -> Result<Self> {
        let prefix = part_prefix(process);
        for table in TraceTable::ALL {
            let table_dir = dir.join(table.name());
            fs::create_dir_all(&table_dir).map_err(TraceError::io(&table_dir))?;
            for entry in fs::read_dir(&table_dir).map_err(TraceError::io(&table_dir))? {
                let entry = entry.map_err(TraceError::io(&table_dir))?;
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if name.starts_with(&prefix) && name.ends_with(PART_SUFFIX) {
                    return Err(TraceError::PartExists { path: entry.path() });
                }
            }
        }
        Ok(Self::new_unchecked(dir, process, stamp))
    }

    /// Continues a trace in `dir` for a run resumed at iteration `keep_before`
    /// as process `process` of `processes`: each part of a process `q` with
    /// `q % processes == process` (its own, and those of processes the new
    /// layout no longer has) keeps only the rows of earlier iterations (a part
    /// with none left is removed, a part with some rewritten atomically), the
    /// hidden temporary files of a write that was killed are removed, and new
    /// parts are numbered after the existing ones. Returns the writer and the
    /// iteration and worker rows kept.
    ///
    /// Fails with [`TraceError::StampMismatch`] if a part belongs to another
    /// job (another plan hash), and changes nothing then.
    pub fn resume(
        dir: &Path,
        (process, processes): (u32, u32),
        stamp: TraceStamp,
        keep_before: u64,
    ) -> Result<(Self, Kept)> {
        let mut writer = Self::new_unchecked(dir, process, stamp);
        let ours = |name: &str| {
            let digits: String = name
                .trim_start_matches('.')
                .strip_prefix("part-p")
                .unwrap_or("")
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits
                .parse::<u32>()
                .is_ok_and(|q| q % processes.max(1) == process)
        };
        let mine = |table: TraceTable| -> Result<Vec<PathBuf>> {
            let table_dir = dir.join(table.name());
            fs::create_dir_all(&table_dir).map_err(TraceError::io(&table_dir))?;
            let mut parts = Vec::new();
            for entry in fs::read_dir(&table_dir).map_err(TraceError::io(&table_dir))? {
                let entry = entry.map_err(TraceError::io(&table_dir))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                if !ours(&name) {
                    continue;
                }
                if name.starts_with('.') {
                    fs::remove_file(entry.path()).map_err(TraceError::io(entry.path()))?;
                } else if is_part_file_name(&name) {
                    parts.push(entry.path());
                }
            }
            parts.sort();
            Ok(parts)
        };
        let (units, workers, iterations) = (
            mine(TraceTable::Units)?,
            mine(TraceTable::Workers)?,
            mine(TraceTable::Iterations)?,
        );
        // Read everything first: a part of another job must change nothing.
        let units = read_parts(&units, &writer.stamp, super::reader::read_units_file)?;
        let workers = read_parts(&workers, &writer.stamp, super::reader::read_workers_file)?;
        let iterations = read_parts(
            &iterations,
            &writer.stamp,
            super::reader::read_iterations_file,
        )?;
        writer.keep(
            TraceTable::Units,
            units,
            |r| r.iteration < keep_before,
            units_batch,
        )?;
        let kept_workers = writer.keep(
            TraceTable::Workers,
            workers,
            |r| r.iteration < keep_before,
            workers_batch,
        )?;
        let kept = writer.keep(
            TraceTable::Iterations,
            iterations,
            |r| r.iteration < keep_before,
            iterations_batch,
        )?;
        Ok((
            writer,
            Kept {
                iterations: kept,
                workers: kept_workers,
            },
        ))
    }

    fn new_unchecked(dir: &Path, process: u32, stamp: TraceStamp) -> Self {
        TraceWriter {
            dir: dir.to_path_buf(),
            process,
            stamp,
            next_seq: [0; 3],
            quota: Quota::default(),
        }
    }

    /// The same writer with parts charged to `quota` (a test's full disk).
    pub fn with_quota(mut self, quota: Quota) -> Self {
        self.quota = quota;
        self
    }

    /// Keeps the rows of `parts` that pass `keep` (rewriting or removing the
    /// parts that lose rows) and numbers new parts after the last; returns the
    /// rows kept.
    fn keep<R: Clone>(
        &mut self,
        table: TraceTable,
        parts: Vec<(PathBuf, Vec<R>)>,
        keep: impl Fn(&R) -> bool,
        to_batch: fn(&str, &[R]) -> std::result::Result<RecordBatch, ArrowError>,
    ) -> Result<Vec<R>> {
        let mut kept = Vec::new();
        for (path, records) in parts {
            let seq = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix(&part_prefix(self.process)))
                .and_then(|n| n.strip_suffix(PART_SUFFIX))
                .and_then(|n| n.parse::<u32>().ok());
            if let Some(seq) = seq {
                let next = &mut self.next_seq[table.index()];
                *next = (*next).max(seq + 1);
            }
            let stay: Vec<R> = records.iter().filter(|r| keep(r)).cloned().collect();
            if stay.is_empty() {
                fs::remove_file(&path).map_err(TraceError::io(&path))?;
            } else if stay.len() < records.len() {
                let batch =
                    to_batch(&self.stamp.job_id, &stay).map_err(|source| TraceError::Arrow {
                        path: path.clone(),
                        source,
                    })?;
                let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
                let tmp = path.with_file_name(format!(".{}.tmp", name.unwrap_or_default()));
                if let Err(err) = write_parquet(&tmp, &batch, stamp_metadata(table, &self.stamp)) {
                    let _ = fs::remove_file(&tmp);
                    return Err(err);
                }
                fs::rename(&tmp, &path).map_err(TraceError::io(&path))?;
            }
            kept.extend(stay);
        }
        sync_dir(&self.dir.join(table.name()))?;
        Ok(kept)
    }

    /// The trace directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes `records` as the next part of the `units` table and returns its
    /// path, or `None` (and writes nothing) if `records` is empty.
    pub fn write_units(&mut self, records: &[UnitRecord]) -> Result<Option<PathBuf>> {
        self.write_part(TraceTable::Units, records, units_batch)
    }

    /// Writes `records` as the next part of the `workers` table and returns its
    /// path, or `None` (and writes nothing) if `records` is empty.
    pub fn write_workers(&mut self, records: &[WorkerRecord]) -> Result<Option<PathBuf>> {
        self.write_part(TraceTable::Workers, records, workers_batch)
    }

    /// Writes `records` as the next part of the `iterations` table and returns
    /// its path, or `None` (and writes nothing) if `records` is empty.
    pub fn write_iterations(&mut self, records: &[IterationRecord]) -> Result<Option<PathBuf>> {
        self.write_part(TraceTable::Iterations, records, iterations_batch)
    }

    fn write_part<R>(
        &mut self,
        table: TraceTable,
        records: &[R],
        to_batch: fn(&str, &[R]) -> std::result::Result<RecordBatch, ArrowError>,
    ) -> Result<Option<PathBuf>> {
        if records.is_empty() {
            return Ok(None);
        }
        let table_dir = self.dir.join(table.name());
        let name = part_file_name(self.process, self.next_seq[table.index()]);
        let path = table_dir.join(&name);
        if path.exists() {
            return Err(TraceError::PartExists { path });
        }
        let batch = to_batch(&self.stamp.job_id, records).map_err(|source| TraceError::Arrow {
            path: path.clone(),
            source,
        })?;

        let tmp = table_dir.join(format!(".{name}.tmp"));
        let metadata = stamp_metadata(table, &self.stamp);
        if let Err(err) = write_parquet_within(&tmp, &batch, metadata, &self.quota) {
            // Best effort: the temporary file is hidden from readers anyway.
            let _ = fs::remove_file(&tmp);
            return Err(err);
        }
        fs::rename(&tmp, &path).map_err(TraceError::io(&path))?;
        self.next_seq[table.index()] += 1;
        sync_dir(&table_dir)?;
        Ok(Some(path))
    }
}

/// The rows a resumed trace keeps from before its checkpoint.
#[derive(Debug, Default)]
pub struct Kept {
    /// Iteration rows, in iteration order.
    pub iterations: Vec<IterationRecord>,
    /// Worker rows.
    pub workers: Vec<WorkerRecord>,
}

/// Reads `paths` with `read`, refusing parts of another job than `stamp`'s.
fn read_parts<R>(
    paths: &[PathBuf],
    stamp: &TraceStamp,
    read: fn(&Path) -> Result<super::reader::TracePart<R>>,
) -> Result<Vec<(PathBuf, Vec<R>)>> {
    paths
        .iter()
        .map(|path| {
            let part = read(path)?;
            if part.stamp.plan_hash != stamp.plan_hash {
                return Err(TraceError::StampMismatch {
                    path: path.clone(),
                    key: "plan hash (another job's trace)",
                    found: part.stamp.plan_hash,
                    expected: stamp.plan_hash.clone(),
                });
            }
            Ok((path.clone(), part.records))
        })
        .collect()
}

/// The key-value metadata stamped into every part of `table`.
pub(crate) fn stamp_metadata(table: TraceTable, stamp: &TraceStamp) -> Vec<KeyValue> {
    let kv = |key: &str, value: String| KeyValue::new(key.to_string(), value);
    vec![
        kv(META_SCHEMA_VERSION, SCHEMA_VERSION.to_string()),
        kv(META_TABLE, table.name().to_string()),
        kv(META_JOB_ID, stamp.job_id.clone()),
        kv(META_GIT_REVISION, stamp.git_revision.clone()),
        kv(META_PLAN_HASH, stamp.plan_hash.clone()),
        kv(META_SEED, stamp.seed.to_string()),
    ]
}

/// Writes `batch` to a new file at `path` (zstd, with `metadata`), closes the
/// Parquet writer and syncs the file to disk.
pub(crate) fn write_parquet(
    path: &Path,
    batch: &RecordBatch,
    metadata: Vec<KeyValue>,
) -> Result<()> {
    write_parquet_within(path, batch, metadata, &Quota::default())
}

/// As [`write_parquet`], charging the bytes to `quota`.
fn write_parquet_within(
    path: &Path,
    batch: &RecordBatch,
    metadata: Vec<KeyValue>,
    quota: &Quota,
) -> Result<()> {
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_key_value_metadata(Some(metadata))
        .build();
    let file = File::create(path).map_err(TraceError::io(path))?;
    let mut file = QuotaFile::new(file, quota.clone());
    let mut writer = ArrowWriter::try_new(&mut file, batch.schema(), Some(props))
        .map_err(TraceError::parquet(path))?;
    writer.write(batch).map_err(TraceError::parquet(path))?;
    writer.close().map_err(TraceError::parquet(path))?;
    file.file.sync_all().map_err(TraceError::io(path))
}

/// Makes a rename in `dir` durable.
fn sync_dir(dir: &Path) -> Result<()> {
    crate::fsutil::sync_dir(dir).map_err(TraceError::io(dir))
}

fn job_id_column(job_id: &str, rows: usize) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
        job_id, rows,
    )))
}

fn u64s<R>(records: &[R], field: impl Fn(&R) -> u64) -> ArrayRef {
    Arc::new(UInt64Array::from_iter_values(records.iter().map(field)))
}

fn u32s<R>(records: &[R], field: impl Fn(&R) -> u32) -> ArrayRef {
    Arc::new(UInt32Array::from_iter_values(records.iter().map(field)))
}

fn f64s<R>(records: &[R], field: impl Fn(&R) -> f64) -> ArrayRef {
    Arc::new(Float64Array::from_iter_values(records.iter().map(field)))
}

/// Columns in [`schema::unit_schema`] order.
pub(crate) fn units_batch(
    job_id: &str,
    records: &[UnitRecord],
) -> std::result::Result<RecordBatch, ArrowError> {
    let actions = StringArray::from_iter_values(records.iter().map(|r| r.action.as_str()));
    RecordBatch::try_new(
        schema::unit_schema(),
        vec![
            job_id_column(job_id, records.len()),
            u64s(records, |r| r.iteration),
            u32s(records, |r| r.worker),
            u32s(records, |r| r.process),
            u32s(records, |r| r.partition),
            u32s(records, |r| r.unit),
            u32s(records, |r| r.owner),
            u32s(records, |r| r.executor),
            u64s(records, |r| r.start_us),
            u64s(records, |r| r.end_us),
            u64s(records, |r| r.compute_us),
            u64s(records, |r| r.wait_us),
            u32s(records, |r| r.rows),
            u64s(records, |r| r.bytes_sent),
            Arc::new(actions),
            f64s(records, |r| r.gt_slowdown),
            u64s(records, |r| r.gt_delay_us),
            u32s(records, |r| r.micro_batches),
            u64s(records, |r| r.send_us),
            f64s(records, |r| r.gt_link_mbps),
        ],
    )
}

/// Columns in [`schema::worker_schema`] order.
pub(crate) fn workers_batch(
    job_id: &str,
    records: &[WorkerRecord],
) -> std::result::Result<RecordBatch, ArrowError> {
    RecordBatch::try_new(
        schema::worker_schema(),
        vec![
            job_id_column(job_id, records.len()),
            u64s(records, |r| r.iteration),
            u32s(records, |r| r.worker),
            u32s(records, |r| r.process),
            u32s(records, |r| r.units),
            u64s(records, |r| r.rows),
            u64s(records, |r| r.ready_us),
            u64s(records, |r| r.finish_us),
            u64s(records, |r| r.compute_us),
            u64s(records, |r| r.busy_us),
            u64s(records, |r| r.barrier_wait_us),
            u64s(records, |r| r.operator_us),
            u64s(records, |r| r.bytes_sent),
            u64s(records, |r| r.bytes_moved),
            u32s(records, |r| r.units_given),
            u32s(records, |r| r.control_sent),
            u64s(records, |r| r.control_bytes),
            u32s(records, |r| r.units_cancelled),
            u64s(records, |r| r.wasted_us),
            u64s(records, |r| r.transit_us),
            u64s(records, |r| r.params_transit_us),
            u64s(records, |r| r.params_version),
            Arc::new(Float64Array::from_iter(
                records.iter().map(|r| r.predicted_unit_us),
            )),
            f64s(records, |r| r.gt_slowdown),
            u64s(records, |r| r.gt_delay_us),
        ],
    )
}

/// Columns in [`schema::iteration_schema`] order.
pub(crate) fn iterations_batch(
    job_id: &str,
    records: &[IterationRecord],
) -> std::result::Result<RecordBatch, ArrowError> {
    let test_loss = Float64Array::from_iter(records.iter().map(|r| r.test_loss));
    let test_accuracy = Float64Array::from_iter(records.iter().map(|r| r.test_accuracy));
    let laggard = UInt32Array::from_iter(records.iter().map(|r| r.laggard));
    RecordBatch::try_new(
        schema::iteration_schema(),
        vec![
            job_id_column(job_id, records.len()),
            u64s(records, |r| r.iteration),
            u64s(records, |r| r.start_us),
            u64s(records, |r| r.end_us),
            u64s(records, |r| r.wall_us),
            f64s(records, |r| r.train_loss),
            Arc::new(test_loss),
            Arc::new(test_accuracy),
            Arc::new(laggard),
            u64s(records, |r| r.lag_us),
            u64s(records, |r| r.median_busy_us),
            u64s(records, |r| r.barrier_wait_us),
            u32s(records, |r| r.units),
            u64s(records, |r| r.rows),
            Arc::new(StringArray::from_iter_values(
                records.iter().map(|r| r.dropped_partitions.as_str()),
            )),
            Arc::new(StringArray::from_iter_values(
                records.iter().map(|r| r.workload.as_str()),
            )),
            Arc::new(StringArray::from_iter(
                records
                    .iter()
                    .map(|r| metrics_json::encode(&r.test_metrics)),
            )),
        ],
    )
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use parquet::file::reader::{FileReader, SerializedFileReader};

    use super::*;
    use crate::trace::tests_support::{iteration, stamp, unit, worker};

    fn file_names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .expect("read dir")
            .map(|e| {
                e.expect("dir entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        names.sort();
        names
    }

    #[test]
    fn try_new_creates_the_table_directories() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("run").join("trace");
        let writer = TraceWriter::try_new(&dir, 3, stamp("job")).expect("writer");
        assert_eq!(writer.dir(), dir);
        for table in ["units", "workers", "iterations"] {
            assert!(dir.join(table).is_dir(), "{table}");
            assert!(file_names(&dir.join(table)).is_empty());
        }
    }

    #[test]
    fn empty_slice_writes_nothing() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut writer = TraceWriter::try_new(tmp.path(), 0, stamp("job")).expect("writer");
        assert_eq!(writer.write_units(&[]).expect("units"), None);
        assert_eq!(writer.write_workers(&[]).expect("workers"), None);
        assert_eq!(writer.write_iterations(&[]).expect("iterations"), None);
        for table in ["units", "workers", "iterations"] {
            assert!(file_names(&tmp.path().join(table)).is_empty(), "{table}");
        }
        // An empty write does not use up a sequence number.
        let part = writer.write_units(&[unit(0, 0, 0, 0)]).expect("units");
        assert_eq!(part, Some(tmp.path().join("units/part-p000-00000.parquet")));
    }

    #[test]
    fn each_call_writes_one_numbered_part_per_table() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut writer = TraceWriter::try_new(tmp.path(), 12, stamp("job")).expect("writer");
        for i in 0..3 {
            writer
                .write_units(&[unit(i, 0, 0, 0), unit(i, 1, 0, 1)])
                .expect("units");
        }
        writer.write_workers(&[worker(0, 0)]).expect("workers");
        let last = writer
            .write_iterations(&[iteration(0, None)])
            .expect("iterations");
        assert_eq!(
            last,
            Some(
                tmp.path()
                    .join("iterations")
                    .join("part-p012-00000.parquet")
            )
        );
        assert_eq!(
            file_names(&tmp.path().join("units")),
            [
                "part-p012-00000.parquet",
                "part-p012-00001.parquet",
                "part-p012-00002.parquet"
            ]
        );
        // No temporary file is left behind.
        assert_eq!(
            file_names(&tmp.path().join("workers")),
            ["part-p012-00000.parquet"]
        );
    }

    #[test]
    fn parts_are_zstd_compressed_and_stamped() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut writer = TraceWriter::try_new(tmp.path(), 1, stamp("job-7")).expect("writer");
        let path = writer
            .write_workers(&[worker(4, 2), worker(4, 3)])
            .expect("workers")
            .expect("a part");
        let reader = SerializedFileReader::new(File::open(&path).expect("open")).expect("parquet");
        let meta = reader.metadata();
        assert_eq!(meta.file_metadata().num_rows(), 2);
        for column in meta.row_group(0).columns() {
            assert!(
                matches!(column.compression(), Compression::ZSTD(_)),
                "{:?}",
                column.compression()
            );
        }
        let kv: HashMap<&str, &str> = meta
            .file_metadata()
            .key_value_metadata()
            .expect("key-value metadata")
            .iter()
            .filter_map(|kv| Some((kv.key.as_str(), kv.value.as_deref()?)))
            .collect();
        assert_eq!(kv["forestall.schema_version"], SCHEMA_VERSION.to_string());
        assert_eq!(kv["forestall.table"], "workers");
        assert_eq!(kv["forestall.job_id"], "job-7");
        assert_eq!(kv["forestall.git_revision"], "0123abcd");
        assert_eq!(kv["forestall.plan_hash"], "plan-hash");
        assert_eq!(kv["forestall.seed"], "18446744073709551615");
    }

    #[test]
    fn refuses_to_overwrite_parts_of_the_same_process() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut first = TraceWriter::try_new(tmp.path(), 0, stamp("job")).expect("writer");
        first.write_units(&[unit(0, 0, 0, 0)]).expect("units");

        // Another process may share the directory.
        let mut other = TraceWriter::try_new(tmp.path(), 1, stamp("job")).expect("writer");
        other.write_units(&[unit(0, 1, 0, 0)]).expect("units");

        let err = TraceWriter::try_new(tmp.path(), 0, stamp("job")).expect_err("parts exist");
        assert!(matches!(err, TraceError::PartExists { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            format!(
                "trace part {} already exists (write each run to a fresh directory)",
                tmp.path().join("units/part-p000-00000.parquet").display()
            )
        );
    }

    #[test]
    fn unwritable_directory_is_an_io_error_naming_it() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let file = tmp.path().join("plain-file");
        fs::write(&file, b"x").expect("write");
        let err = TraceWriter::try_new(&file, 0, stamp("job")).expect_err("not a dir");
        assert!(matches!(err, TraceError::Io { .. }), "{err:?}");
        assert!(err.to_string().contains("plain-file"), "{err}");
    }

    #[test]
    fn part_names() {
        assert_eq!(part_file_name(0, 0), "part-p000-00000.parquet");
        assert_eq!(part_file_name(7, 123), "part-p007-00123.parquet");
        assert!(is_part_file_name("part-p007-00123.parquet"));
        assert!(!is_part_file_name(".part-p007-00123.parquet.tmp"));
        assert!(!is_part_file_name(".hidden.parquet"));
        assert!(!is_part_file_name("notes.txt"));
    }

    #[test]
    fn a_full_disk_fails_the_part_and_keeps_the_earlier_ones() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut writer = TraceWriter::try_new(tmp.path(), 0, stamp("job")).expect("writer");
        let first = writer.write_units(&[unit(0, 0, 0, 0)]).expect("fits");
        let mut writer = writer.with_quota(Quota::bytes(1_000));
        let many: Vec<UnitRecord> = (0..2_000).map(|i| unit(1, 0, i, 0)).collect();
        let err = writer
            .write_units(&many)
            .expect_err("disk full")
            .to_string();
        assert!(err.contains("part-p000-00001.parquet"), "{err}");
        // the earlier part reads; nothing half-written is visible or left over
        assert_eq!(
            file_names(&tmp.path().join("units")),
            vec!["part-p000-00000.parquet"]
        );
        let trace = crate::trace::read_trace_dir(tmp.path()).expect("reads");
        assert_eq!(trace.units.len(), 1);
        assert!(first.is_some());
    }

    #[test]
    fn resume_keeps_the_rows_before_the_checkpoint_once() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut writer = TraceWriter::try_new(tmp.path(), 1, stamp("job")).expect("writer");
        writer
            .write_units(&[unit(0, 0, 0, 0), unit(1, 0, 0, 0)])
            .expect("part 0");
        writer
            .write_units(&[unit(2, 0, 0, 0), unit(3, 0, 0, 0)])
            .expect("part 1");
        writer.write_units(&[unit(4, 0, 0, 0)]).expect("part 2");
        // a part being written when the process was killed
        fs::write(
            tmp.path().join("units/.part-p001-00003.parquet.tmp"),
            b"half",
        )
        .expect("tmp");
        let (mut resumed, _) =
            TraceWriter::resume(tmp.path(), (1, 2), stamp("job"), 3).expect("resumes");
        assert_eq!(
            file_names(&tmp.path().join("units")),
            vec!["part-p001-00000.parquet", "part-p001-00001.parquet"]
        );
        let part = resumed.write_units(&[unit(3, 0, 0, 0)]).expect("new part");
        assert_eq!(part, Some(tmp.path().join("units/part-p001-00003.parquet")));
        let trace = crate::trace::read_trace_dir(tmp.path()).expect("reads");
        let iterations: Vec<u64> = trace.units.iter().map(|u| u.iteration).collect();
        assert_eq!(iterations, vec![0, 1, 2, 3]);
        // another job's directory is refused and left alone
        let other = TraceStamp {
            plan_hash: "another-plan".into(),
            ..stamp("job")
        };
        let err = TraceWriter::resume(tmp.path(), (1, 2), other, 1).expect_err("other job");
        assert!(err.to_string().contains("another job"), "{err}");
        assert_eq!(file_names(&tmp.path().join("units")).len(), 3);
        // resumed as one process, process 0 takes over process 1's parts
        let (_, _) = TraceWriter::resume(tmp.path(), (0, 1), stamp("job"), 1).expect("resumes");
        let trace = crate::trace::read_trace_dir(tmp.path()).expect("reads");
        let iterations: Vec<u64> = trace.units.iter().map(|u| u.iteration).collect();
        assert_eq!(iterations, vec![0]);
    }
}
