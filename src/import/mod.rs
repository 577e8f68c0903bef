//! Importers: real public straggler traces, read exactly as their publishers
//! ship them, turned into forestall's trace schema (one unit per iteration ×
//! worker), so that the analysis and the predictors read them like our own runs.
//!
//! | format | files | a worker's time in an iteration |
//! |---|---|---|
//! | `alibaba-minibatch` | Alibaba PAI `job_*_norm.csv` (`,worker,gpu,time,batch_time_norm`) | `batch_time_norm` (0–1000 within the job, stored × 1000 as µs: only ratios mean anything) |
//! | `bytedance-ops` | ByteDance StragglerAnalysis `trace-*.parquet` (one row per operation) | Σ forward-compute + backward-compute durations per (step, rank), µs |
//!
//! Only durations are in these traces. The importer lays iteration t out after
//! the slowest worker of t − 1 (a BSP reading) so the `*_us` columns are
//! consistent; `ready_us`, `barrier_wait_us` and the iteration rows follow from
//! that, `train_loss` and `gt_slowdown` are NaN (unknown), `rows` is 0. The
//! model is unknown too: an iteration row's `workload` is the format's name
//! (`alibaba-minibatch`, `bytedance-ops`, as in the job id) and its
//! `test_metrics` are empty.
//!
//! Bad rows (unparsable, NaN, negative) are reported with their line (CSV) or
//! row group and row (Parquet); [`OnBad`] says whether they reject the file or
//! are skipped — listed either way, never silently dropped.

pub mod alibaba;
pub mod bytedance;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

pub use crate::trace::imported::Format;
use crate::trace::{IterationRecord, UnitAction, UnitRecord, WorkerRecord};

/// What to do with a bad row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnBad {
    /// The file is rejected, naming the first bad rows.
    #[default]
    Reject,
    /// Bad rows are left out and listed.
    Skip,
}

/// A row that could not be imported.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BadRow {
    /// Where: "line 17", "row group 0, row 5", or "header".
    pub place: String,
    /// Why.
    pub reason: String,
}

impl fmt::Display for BadRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.place, self.reason)
    }
}

/// One worker's time in one iteration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Iteration (the trace's own step number).
    pub iteration: u64,
    /// Dense worker index (see [`Imported::workers`]).
    pub worker: u32,
    /// Time, µs.
    pub us: u64,
}

/// What a reader found in one file.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Parsed {
    /// What the trace calls each worker (index = dense worker id).
    pub workers: Vec<String>,
    /// Samples, sorted by (iteration, worker).
    pub samples: Vec<Sample>,
    /// Rows that cannot be imported.
    pub bad: Vec<BadRow>,
    /// Harmless oddities, reported but not bad (an exact duplicate row).
    pub notes: Vec<BadRow>,
}

/// A file read into samples.
#[derive(Debug, Clone, PartialEq)]
pub struct Imported {
    /// The file.
    pub source: PathBuf,
    /// The format.
    pub format: Format,
    /// What the trace calls each worker (index = dense worker id).
    pub workers: Vec<String>,
    /// Samples, sorted by (iteration, worker); iterations are numbered 0.. in
    /// the order of the trace's own steps.
    pub samples: Vec<Sample>,
    /// The trace's own step number of each iteration (sampled traces skip some).
    pub steps: Vec<u64>,
    /// Rows left out (with [`OnBad::Skip`]).
    pub skipped: Vec<BadRow>,
    /// Harmless oddities left out (exact duplicates).
    pub notes: Vec<BadRow>,
    /// The operation records of an operation trace (`bytedance-ops`), when
    /// every row is valid: the what-if replay needs them whole.
    pub ops: Option<Vec<crate::ops::OpRecord>>,
}

/// Why a file could not be imported.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not in the format (header, columns, types, Parquet footer).
    #[error("{path}: not in the {format} format: {message}")]
    Format {
        /// The file.
        path: PathBuf,
        /// The format asked for.
        format: &'static str,
        /// What is wrong.
        message: String,
    },
    /// Bad rows, and the user asked to reject them.
    #[error("{path}: {count} bad row(s), first: {first}; pass --on-bad skip to leave them out")]
    BadRows {
        /// The file.
        path: PathBuf,
        /// How many.
        count: usize,
        /// The first few, joined.
        first: String,
    },
    /// Nothing usable in the file.
    #[error("{path}: no usable rows")]
    Empty {
        /// The file.
        path: PathBuf,
    },
}

/// Reads `path` as `format`.
pub fn read(format: Format, path: &Path, on_bad: OnBad) -> Result<Imported, ImportError> {
    let Parsed {
        workers,
        samples,
        bad,
        notes,
    } = match format {
        Format::AlibabaMinibatch => alibaba::read(path)?,
        Format::BytedanceOps => bytedance::read(path)?,
    };
    if !bad.is_empty() && on_bad == OnBad::Reject {
        return Err(ImportError::BadRows {
            path: path.into(),
            count: bad.len(),
            first: bad
                .iter()
                .take(3)
                .map(BadRow::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        });
    }
    if samples.is_empty() {
        return Err(ImportError::Empty { path: path.into() });
    }
    let steps: Vec<u64> = dense_ids(samples.iter().map(|s| s.iteration))
        .into_keys()
        .collect();
    let mut samples = samples;
    for s in &mut samples {
        s.iteration = steps.partition_point(|&step| step < s.iteration) as u64;
    }
    samples.sort_by_key(|s| (s.iteration, s.worker));
    let ops = match format {
        Format::BytedanceOps => match crate::ops::read_ops(path) {
            Ok(ops) => Some(ops),
            Err(e) => {
                tracing::warn!("operation records not kept, so no operation replay: {e}");
                None
            }
        },
        Format::AlibabaMinibatch => None,
    };
    Ok(Imported {
        ops,
        source: path.into(),
        format,
        workers,
        samples,
        steps,
        skipped: bad,
        notes,
    })
}

/// Dense worker ids 0.. for the distinct `keys`, in ascending key order.
pub(crate) fn dense_ids<K: Ord>(keys: impl Iterator<Item = K>) -> BTreeMap<K, u32> {
    let mut ids: BTreeMap<K, u32> = keys.map(|k| (k, 0)).collect();
    for (i, id) in ids.values_mut().enumerate() {
        *id = i as u32;
    }
    ids
}

/// The trace rows of `imported`: iterations back to back, each one starting
/// when the slowest worker of the one before finished.
pub fn records(imported: &Imported) -> (Vec<UnitRecord>, Vec<WorkerRecord>, Vec<IterationRecord>) {
    let mut by_iteration: BTreeMap<u64, Vec<Sample>> = BTreeMap::new();
    for s in &imported.samples {
        by_iteration.entry(s.iteration).or_default().push(*s);
    }
    let (mut units, mut workers, mut iterations) = (Vec::new(), Vec::new(), Vec::new());
    let mut start = 0u64;
    for (iteration, samples) in by_iteration {
        let longest = samples.iter().map(|s| s.us).max().unwrap_or(0);
        let rows: Vec<WorkerRecord> = samples
            .iter()
            .map(|s| WorkerRecord {
                barrier_wait_us: longest - s.us,
                gt_slowdown: f64::NAN,
                ..WorkerRecord::single_unit(iteration, s.worker, start, start + s.us)
            })
            .collect();
        units.extend(samples.iter().map(|s| UnitRecord {
            iteration,
            worker: s.worker,
            process: 0,
            partition: s.worker,
            unit: 0,
            owner: s.worker,
            executor: s.worker,
            start_us: start,
            end_us: start + s.us,
            compute_us: s.us,
            wait_us: 0,
            rows: 0,
            bytes_sent: 0,
            action: UnitAction::Assigned,
            gt_slowdown: f64::NAN,
            gt_delay_us: 0,
            micro_batches: 1,
            send_us: 0,
            gt_link_mbps: 0.0,
        }));
        // What is known of the workload: which trace it came from.
        iterations.push(IterationRecord::timing_only(
            iteration,
            start,
            &rows,
            rows.len() as u32,
            imported.format.as_str(),
        ));
        workers.extend(rows);
        start += longest;
    }
    (units, workers, iterations)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_lay_iterations_back_to_back_and_name_the_laggard() {
        let sample = |iteration, worker, us| Sample {
            iteration,
            worker,
            us,
        };
        let imported = Imported {
            source: "t.csv".into(),
            format: Format::AlibabaMinibatch,
            workers: vec!["0".into(), "1".into(), "2".into()],
            samples: vec![
                sample(5, 0, 100),
                sample(5, 1, 110),
                sample(5, 2, 400),
                sample(9, 0, 100),
                sample(9, 1, 100),
                sample(9, 2, 100),
            ],
            steps: vec![5, 9],
            skipped: Vec::new(),
            notes: Vec::new(),
            ops: None,
        };
        let (units, workers, iterations) = records(&imported);
        assert_eq!(units.len(), 6);
        assert_eq!(workers.len(), 6);
        assert_eq!(iterations.len(), 2);
        assert_eq!((iterations[0].start_us, iterations[0].end_us), (0, 400));
        assert_eq!(iterations[0].laggard, Some(2));
        assert_eq!((iterations[1].start_us, iterations[1].end_us), (400, 500));
        assert_eq!(iterations[1].laggard, None);
        assert_eq!(workers[0].barrier_wait_us, 300);
        assert_eq!(workers[3].ready_us, 400);
        assert!(
            workers[0].gt_slowdown.is_nan(),
            "no ground truth in a real trace"
        );
    }

    #[test]
    fn the_workload_is_the_format_which_starts_the_job_id() {
        let imported = Imported {
            source: "trace-AR.parquet".into(),
            format: Format::BytedanceOps,
            workers: vec!["0".into()],
            samples: vec![Sample {
                iteration: 0,
                worker: 0,
                us: 10,
            }],
            steps: vec![0],
            skipped: Vec::new(),
            notes: Vec::new(),
            ops: None,
        };
        let (_, _, iterations) = records(&imported);
        assert_eq!(iterations[0].workload, "bytedance-ops");
        assert!(iterations[0].test_metrics.is_empty());

        for format in Format::ALL {
            let job_id = format!("{}:job_1_norm", format.as_str());
            assert_eq!(Format::of_job_id(&job_id), Some(format));
        }
        for job_id in [
            "job-0123456789ab",
            "alibaba-minibatch",
            "bytedance:x",
            ":x",
            "",
        ] {
            assert_eq!(Format::of_job_id(job_id), None, "{job_id}");
        }
        // Every format is in ALL.
        use clap::ValueEnum;
        assert_eq!(Format::value_variants(), Format::ALL);
    }
}
