//! ByteDance StragglerAnalysis operation traces (`trace-*.parquet`): one row per
//! traced operation. A worker's time in a step is its *local compute*, the sum
//! of its `forward-compute` and `backward-compute` durations (and of the
//! passes other Megatron schedules trace: `backward-wgrad-compute`, the
//! weight gradients a zero-bubble schedule splits off, and `forward-backward`,
//! both passes as one): wall time is equalised across ranks by the
//! collectives, so it cannot show a straggler.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;

use arrow_array::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::{dense_ids, BadRow, ImportError, Parsed, Sample};
use crate::columns::{floats, integers, strings};

/// The published columns.
const COLUMNS: [&str; 11] = [
    "dp_rank", "stage", "rank", "step", "optype", "start_ts", "duration", "seq_id", "mc", "mb_id",
    "gmc",
];

/// Operations whose durations make up a worker's compute time.
const COMPUTE: [&str; 4] = [
    "forward-compute",
    "backward-compute",
    "backward-wgrad-compute",
    "forward-backward",
];

fn format_error(path: &Path, message: String) -> ImportError {
    ImportError::Format {
        path: path.into(),
        format: "bytedance-ops",
        message,
    }
}

fn open(path: &Path) -> Result<ParquetRecordBatchReaderBuilder<File>, ImportError> {
    let file = File::open(path).map_err(|source| ImportError::Io {
        path: path.into(),
        source,
    })?;
    ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| format_error(path, format!("not a readable Parquet file ({e})")))
}

/// Reads one file: worker names (ranks), samples, bad rows.
pub fn read(path: &Path) -> Result<Parsed, ImportError> {
    let builder = open(path)?;
    let schema = builder.schema().clone();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    let mut bad = Vec::new();
    for name in &names {
        if !COLUMNS.contains(name) {
            bad.push(BadRow {
                place: "schema".into(),
                reason: format!("unknown column {name:?} (not in the published schema)"),
            });
        }
    }
    for needed in ["rank", "step", "optype", "duration"] {
        if !names.contains(&needed) {
            return Err(format_error(path, format!("column {needed:?} is missing")));
        }
    }
    let groups = builder.metadata().num_row_groups();
    // (step, rank) → Σ compute seconds
    let mut compute: BTreeMap<(i64, i64), f64> = BTreeMap::new();
    for group in 0..groups {
        let reader = open(path)?
            .with_row_groups(vec![group])
            .build()
            .map_err(|e| format_error(path, format!("row group {group}: {e}")))?;
        let mut row = 0usize;
        for batch in reader {
            let batch = batch.map_err(|e| format_error(path, format!("row group {group}: {e}")))?;
            add_batch(path, &batch, group, row, &mut compute, &mut bad)?;
            row += batch.num_rows();
        }
    }
    let ids = dense_ids(compute.keys().map(|&(_, rank)| rank));
    let samples = compute
        .iter()
        .filter_map(|(&(step, rank), &seconds)| {
            Some(Sample {
                iteration: u64::try_from(step).ok()?,
                worker: ids[&rank],
                us: (seconds * 1e6).round() as u64,
            })
        })
        .collect();
    let workers = ids.keys().map(|r| format!("rank {r}")).collect();
    Ok(Parsed {
        workers,
        samples,
        bad,
        notes: Vec::new(),
    })
}

/// Adds the compute operations of `batch` (rows from `first_row` of row
/// group `group`) to `compute`; rows that cannot be read go to `bad`. The
/// columns may have any integer width, either float width, and `optype` any
/// string encoding (a file re-saved by pandas or pyarrow).
fn add_batch(
    path: &Path,
    batch: &RecordBatch,
    group: usize,
    first_row: usize,
    compute: &mut BTreeMap<(i64, i64), f64>,
    bad: &mut Vec<BadRow>,
) -> Result<(), ImportError> {
    let column = |name: &str| batch.column_by_name(name).expect("checked in the schema");
    let wrong = |name: &str, expected: &str| {
        format_error(
            path,
            format!(
                "column {name:?} is {}, expected {expected}",
                column(name).data_type()
            ),
        )
    };
    let rank = integers(column("rank")).ok_or_else(|| wrong("rank", "integers"))?;
    let step = integers(column("step")).ok_or_else(|| wrong("step", "integers"))?;
    let duration = floats(column("duration")).ok_or_else(|| wrong("duration", "floats"))?;
    let optype = strings(column("optype").as_ref()).ok_or_else(|| wrong("optype", "strings"))?;
    for i in 0..batch.num_rows() {
        let place = || format!("row group {group}, row {}", first_row + i);
        if !optype[i].as_deref().is_some_and(|o| COMPUTE.contains(&o)) {
            continue;
        }
        let (Some(rank), Some(step), Some(d)) = (rank[i], step[i], duration[i]) else {
            bad.push(BadRow {
                place: place(),
                reason: "rank, step or duration is null".into(),
            });
            continue;
        };
        if !d.is_finite() || d < 0.0 || step < 0 || rank < 0 {
            bad.push(BadRow {
                place: place(),
                reason: format!("duration {d} s, step {step}, rank {rank}: NaN or negative"),
            });
            continue;
        }
        *compute.entry((step, rank)).or_default() += d;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::types::Int8Type;
    use arrow_array::{
        ArrayRef, DictionaryArray, Float32Array, Float64Array, Int16Array, Int32Array, Int64Array,
        LargeStringArray,
    };
    use parquet::arrow::ArrowWriter;

    use super::*;

    /// Operations of two ranks in two steps, one of them not compute, one
    /// the weight gradients of a zero-bubble schedule's split backward pass.
    const RANKS: [i64; 5] = [0, 1, 0, 1, 1];
    const STEPS: [i64; 5] = [5, 5, 6, 6, 6];
    const OPS: [&str; 5] = [
        "forward-compute",
        "backward-compute",
        "grads-reduce-scatter",
        "forward-compute",
        "backward-wgrad-compute",
    ];
    const SECONDS: [f32; 5] = [0.25, 0.5, 9.0, 0.125, 0.0625];

    fn write(dir: &Path, name: &str, columns: Vec<(&str, ArrayRef)>) -> std::path::PathBuf {
        let path = dir.join(name);
        let batch = RecordBatch::try_from_iter(columns).expect("a batch");
        let mut writer =
            ArrowWriter::try_new(File::create(&path).expect("created"), batch.schema(), None)
                .expect("a writer");
        writer.write(&batch).expect("written");
        writer.close().expect("closed");
        path
    }

    /// The published types and a re-saved copy's (wider integers, f64,
    /// large strings instead of a dictionary) read as the same samples.
    #[test]
    fn a_resaved_copy_with_other_column_types_reads_the_same() {
        let dir = tempfile::tempdir().expect("temp dir");
        let published = write(
            dir.path(),
            "published.parquet",
            vec![
                (
                    "rank",
                    Arc::new(Int16Array::from_iter_values(RANKS.map(|r| r as i16))) as ArrayRef,
                ),
                ("step", Arc::new(Int64Array::from_iter_values(STEPS))),
                (
                    "optype",
                    Arc::new(OPS.into_iter().collect::<DictionaryArray<Int8Type>>()),
                ),
                (
                    "duration",
                    Arc::new(Float32Array::from_iter_values(SECONDS)),
                ),
            ],
        );
        let resaved = write(
            dir.path(),
            "resaved.parquet",
            vec![
                (
                    "optype",
                    Arc::new(LargeStringArray::from_iter_values(OPS)) as ArrayRef,
                ),
                ("rank", Arc::new(Int64Array::from_iter_values(RANKS))),
                (
                    "step",
                    Arc::new(Int32Array::from_iter_values(STEPS.map(|s| s as i32))),
                ),
                (
                    "duration",
                    Arc::new(Float64Array::from_iter_values(SECONDS.map(f64::from))),
                ),
            ],
        );
        let a = read(&published).expect("the published types read");
        let b = read(&resaved).expect("the re-saved types read");
        assert_eq!(a.workers, vec!["rank 0", "rank 1"]);
        let us: Vec<(u64, u32, u64)> = a
            .samples
            .iter()
            .map(|s| (s.iteration, s.worker, s.us))
            .collect();
        assert_eq!(us, vec![(5, 0, 250_000), (5, 1, 500_000), (6, 1, 187_500)]);
        assert_eq!((a.samples, a.workers), (b.samples, b.workers));
        assert!(a.bad.is_empty() && b.bad.is_empty());

        // a column of the wrong kind is named
        let wrong = write(
            dir.path(),
            "wrong.parquet",
            vec![
                (
                    "rank",
                    Arc::new(Float64Array::from_iter_values([0.0; 5])) as ArrayRef,
                ),
                ("step", Arc::new(Int64Array::from_iter_values(STEPS))),
                ("optype", Arc::new(LargeStringArray::from_iter_values(OPS))),
                (
                    "duration",
                    Arc::new(Float32Array::from_iter_values(SECONDS)),
                ),
            ],
        );
        let err = read(&wrong).unwrap_err().to_string();
        assert!(err.contains("\"rank\"") && err.contains("Float64"), "{err}");
    }
}
