//! ByteDance StragglerAnalysis operation traces (`trace-*.parquet`): one row per
//! traced operation. A worker's time in a step is its *local compute*, the sum
//! of its `forward-compute` and `backward-compute` durations: wall time is
//! equalised across ranks by the collectives, so it cannot show a straggler.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Int16Type, Int64Type, Int8Type};
use arrow_array::{Array, RecordBatch};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::{dense_ids, BadRow, ImportError, Parsed, Sample};

/// The published columns.
const COLUMNS: [&str; 11] = [
    "dp_rank", "stage", "rank", "step", "optype", "start_ts", "duration", "seq_id", "mc", "mb_id",
    "gmc",
];

/// Operations whose durations make up a worker's compute time.
const COMPUTE: [&str; 2] = ["forward-compute", "backward-compute"];

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
    let mut compute: BTreeMap<(i64, i16), f64> = BTreeMap::new();
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

fn add_batch(
    path: &Path,
    batch: &RecordBatch,
    group: usize,
    first_row: usize,
    compute: &mut BTreeMap<(i64, i16), f64>,
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
    let rank = column("rank")
        .as_primitive_opt::<Int16Type>()
        .ok_or_else(|| wrong("rank", "int16"))?;
    let step = column("step")
        .as_primitive_opt::<Int64Type>()
        .ok_or_else(|| wrong("step", "int64"))?;
    let duration = column("duration")
        .as_primitive_opt::<Float32Type>()
        .ok_or_else(|| wrong("duration", "float"))?;
    let optype = column("optype")
        .as_dictionary_opt::<Int8Type>()
        .ok_or_else(|| wrong("optype", "dictionary<int8, string>"))?;
    let names = optype
        .values()
        .as_string_opt::<i32>()
        .ok_or_else(|| wrong("optype", "dictionary<int8, string>"))?;
    let is_compute: Vec<bool> = (0..names.len())
        .map(|i| names.is_valid(i) && COMPUTE.contains(&names.value(i)))
        .collect();
    for i in 0..batch.num_rows() {
        let place = || format!("row group {group}, row {}", first_row + i);
        if optype.is_null(i) || !is_compute[optype.keys().value(i) as usize] {
            continue;
        }
        if rank.is_null(i) || step.is_null(i) || duration.is_null(i) {
            bad.push(BadRow {
                place: place(),
                reason: "rank, step or duration is null".into(),
            });
            continue;
        }
        let d = f64::from(duration.value(i));
        if !d.is_finite() || d < 0.0 || step.value(i) < 0 || rank.value(i) < 0 {
            bad.push(BadRow {
                place: place(),
                reason: format!(
                    "duration {d} s, step {}, rank {}: NaN or negative",
                    step.value(i),
                    rank.value(i)
                ),
            });
            continue;
        }
        *compute.entry((step.value(i), rank.value(i))).or_default() += d;
    }
    Ok(())
}
