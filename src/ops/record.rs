//! Operation records and their Parquet file: the published ByteDance columns
//! (any integer width, either float width, `optype` in any string encoding:
//! [`crate::columns`]), read and written by the same code.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;

/// What an operation does, in Megatron-LM's pipeline × data-parallel training
/// as the ByteDance traces record it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum OpKind {
    /// A micro-batch's forward pass on one stage.
    ForwardCompute,
    /// A micro-batch's backward pass on one stage.
    BackwardCompute,
    /// Activations to the next stage.
    ForwardSend,
    /// Activations from the previous stage.
    ForwardRecv,
    /// Gradients to the previous stage.
    BackwardSend,
    /// Gradients from the next stage.
    BackwardRecv,
    /// Parameters gathered across the data-parallel group.
    ParamsAllGather,
    /// Gradients reduce-scattered across the data-parallel group.
    GradsReduceScatter,
    /// A gradient all-reduce that overlaps the backward passes.
    SeparateGradsAllReduce,
    /// Layer-norm gradients all-reduced across tensor-parallel ranks.
    LayernormGradsAllReduce,
    /// Embedding gradients all-reduced between the first and last stage.
    EmbeddingGradsAllReduce,
    /// Gradient-norm clipping: every rank of the job takes part.
    OptimizerClipMainGrad,
    /// The optimiser step.
    Optimizer,
    /// Garbage collection after the last backward pass.
    Gc,
}

impl OpKind {
    /// Every kind.
    pub const ALL: [OpKind; 14] = [
        OpKind::ForwardCompute,
        OpKind::BackwardCompute,
        OpKind::ForwardSend,
        OpKind::ForwardRecv,
        OpKind::BackwardSend,
        OpKind::BackwardRecv,
        OpKind::ParamsAllGather,
        OpKind::GradsReduceScatter,
        OpKind::SeparateGradsAllReduce,
        OpKind::LayernormGradsAllReduce,
        OpKind::EmbeddingGradsAllReduce,
        OpKind::OptimizerClipMainGrad,
        OpKind::Optimizer,
        OpKind::Gc,
    ];

    /// The trace's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            OpKind::ForwardCompute => "forward-compute",
            OpKind::BackwardCompute => "backward-compute",
            OpKind::ForwardSend => "forward-send",
            OpKind::ForwardRecv => "forward-recv",
            OpKind::BackwardSend => "backward-send",
            OpKind::BackwardRecv => "backward-recv",
            OpKind::ParamsAllGather => "params-all-gather",
            OpKind::GradsReduceScatter => "grads-reduce-scatter",
            OpKind::SeparateGradsAllReduce => "separate-grads-all-reduce",
            OpKind::LayernormGradsAllReduce => "layernorm-grads-all-reduce",
            OpKind::EmbeddingGradsAllReduce => "embedding-grads-all-reduce",
            OpKind::OptimizerClipMainGrad => "optimizer-clip-main-grad",
            OpKind::Optimizer => "optimizer",
            OpKind::Gc => "gc",
        }
    }

    /// The kind named `name`.
    pub fn parse(name: &str) -> Option<OpKind> {
        OpKind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// A forward or backward pass.
    pub fn is_compute(self) -> bool {
        matches!(self, OpKind::ForwardCompute | OpKind::BackwardCompute)
    }

    /// Communication: its ideal duration is its kind's median (computation
    /// takes its kind's mean), as in the ByteDance study.
    pub fn is_communication(self) -> bool {
        !matches!(
            self,
            OpKind::ForwardCompute | OpKind::BackwardCompute | OpKind::Optimizer | OpKind::Gc
        )
    }

    /// Pipeline point-to-point traffic.
    pub fn is_p2p(self) -> bool {
        matches!(
            self,
            OpKind::ForwardSend | OpKind::ForwardRecv | OpKind::BackwardSend | OpKind::BackwardRecv
        )
    }

    /// The group the ByteDance results attribute it to: sends and receives
    /// become `forward-pp-comm` / `backward-pp-comm`.
    pub fn attribution_name(self) -> &'static str {
        match self {
            OpKind::ForwardSend | OpKind::ForwardRecv => "forward-pp-comm",
            OpKind::BackwardSend | OpKind::BackwardRecv => "backward-pp-comm",
            other => other.as_str(),
        }
    }
}

/// One traced operation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OpRecord {
    /// Training step.
    pub step: i64,
    /// Data-parallel rank of the worker.
    pub dp_rank: u32,
    /// Pipeline stage of the worker.
    pub stage: u32,
    /// Global rank of the worker.
    pub rank: u32,
    /// What it does.
    pub kind: OpKind,
    /// Its index among the ops of its kind on its worker in its step.
    pub seq_id: u32,
    /// Model chunk within the stage (-1: none).
    pub mc: i32,
    /// Micro-batch (-1: none).
    pub mb_id: i32,
    /// Global model chunk (-1: none).
    pub gmc: i32,
    /// Start, seconds after the step began.
    pub start_s: f64,
    /// Duration, seconds.
    pub duration_s: f64,
}

impl OpRecord {
    /// End, seconds after the step began.
    pub fn end_s(&self) -> f64 {
        self.start_s + self.duration_s
    }
}

/// Why an operation file cannot be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpsError {
    /// The file could not be opened, read or written.
    #[error("{path}: {what}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        what: &'static str,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A column is missing or of the wrong type.
    #[error("{path}: column {column:?} {problem}")]
    Column {
        /// The file.
        path: PathBuf,
        /// The column.
        column: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// A row holds a value no trace can mean.
    #[error("{path}: row {row}: {problem}")]
    Row {
        /// The file.
        path: PathBuf,
        /// 0-based row in the file.
        row: usize,
        /// What is wrong.
        problem: String,
    },
    /// No operations at all.
    #[error("{path}: the file holds no operations")]
    Empty {
        /// The file.
        path: PathBuf,
    },
}

/// The columns, in file order.
pub const COLUMNS: [&str; 11] = [
    "dp_rank", "stage", "rank", "step", "optype", "start_ts", "duration", "seq_id", "mc", "mb_id",
    "gmc",
];

fn column_error(path: &Path, column: &'static str, problem: impl Into<String>) -> OpsError {
    OpsError::Column {
        path: path.into(),
        column,
        problem: problem.into(),
    }
}

/// `column` of `batch`, present and without nulls.
fn present<'a>(
    path: &Path,
    batch: &'a RecordBatch,
    column: &'static str,
) -> Result<&'a ArrayRef, OpsError> {
    let array = batch
        .column_by_name(column)
        .ok_or_else(|| column_error(path, column, "is missing"))?;
    if array.null_count() > 0 {
        return Err(column_error(path, column, "holds nulls"));
    }
    Ok(array)
}

/// `column` of `batch` as `read` reads it ([`crate::columns`]), nulls
/// refused; `expected` names what it should hold.
fn values<T>(
    path: &Path,
    batch: &RecordBatch,
    column: &'static str,
    read: impl Fn(&ArrayRef) -> Option<Vec<Option<T>>>,
    expected: &str,
) -> Result<Vec<T>, OpsError> {
    let array = present(path, batch, column)?;
    let values = read(array).ok_or_else(|| {
        let found = array.data_type();
        column_error(path, column, format!("is {found}, expected {expected}"))
    })?;
    // (nulls were refused: a value read as none is out of range)
    values
        .into_iter()
        .collect::<Option<Vec<T>>>()
        .ok_or_else(|| column_error(path, column, "holds a value out of range"))
}

/// Any integer column as i64 values (nulls refused).
fn integers(path: &Path, batch: &RecordBatch, column: &'static str) -> Result<Vec<i64>, OpsError> {
    values(path, batch, column, crate::columns::integers, "an integer")
}

/// A float column (f32 or f64) as f64 values (nulls refused).
fn floats(path: &Path, batch: &RecordBatch, column: &'static str) -> Result<Vec<f64>, OpsError> {
    values(path, batch, column, crate::columns::floats, "a float")
}

/// The `optype` column as strings, in any string encoding.
fn names(path: &Path, batch: &RecordBatch) -> Result<Vec<Option<String>>, OpsError> {
    let array: &ArrayRef = batch
        .column_by_name("optype")
        .ok_or_else(|| column_error(path, "optype", "is missing"))?;
    crate::columns::strings(array.as_ref()).ok_or_else(|| {
        column_error(
            path,
            "optype",
            format!("is {}, expected strings", array.data_type()),
        )
    })
}

fn to_u32(path: &Path, row: usize, what: &str, v: i64) -> Result<u32, OpsError> {
    u32::try_from(v).map_err(|_| OpsError::Row {
        path: path.into(),
        row,
        problem: format!("{what} is {v}, expected 0 or more"),
    })
}

fn to_i32(path: &Path, row: usize, what: &str, v: i64) -> Result<i32, OpsError> {
    i32::try_from(v).map_err(|_| OpsError::Row {
        path: path.into(),
        row,
        problem: format!("{what} is {v}, out of range"),
    })
}

fn add_batch(
    path: &Path,
    batch: &RecordBatch,
    first_row: usize,
    out: &mut Vec<OpRecord>,
) -> Result<(), OpsError> {
    let dp_rank = integers(path, batch, "dp_rank")?;
    let stage = integers(path, batch, "stage")?;
    let rank = integers(path, batch, "rank")?;
    let step = integers(path, batch, "step")?;
    let seq_id = integers(path, batch, "seq_id")?;
    let mc = integers(path, batch, "mc")?;
    let mb_id = integers(path, batch, "mb_id")?;
    let gmc = integers(path, batch, "gmc")?;
    let start = floats(path, batch, "start_ts")?;
    let duration = floats(path, batch, "duration")?;
    let optype = names(path, batch)?;
    for i in 0..batch.num_rows() {
        let row = first_row + i;
        let bad = |problem: String| OpsError::Row {
            path: path.into(),
            row,
            problem,
        };
        let name = optype[i]
            .as_deref()
            .ok_or_else(|| bad("optype is null".into()))?;
        let kind = OpKind::parse(name).ok_or_else(|| {
            bad(format!(
                "unknown optype {name:?} (known: {})",
                OpKind::ALL.map(OpKind::as_str).join(", ")
            ))
        })?;
        if !start[i].is_finite() || !duration[i].is_finite() || duration[i] < 0.0 {
            return Err(bad(format!(
                "start_ts {} s, duration {} s: NaN, infinite or negative",
                start[i], duration[i]
            )));
        }
        out.push(OpRecord {
            step: step[i],
            dp_rank: to_u32(path, row, "dp_rank", dp_rank[i])?,
            stage: to_u32(path, row, "stage", stage[i])?,
            rank: to_u32(path, row, "rank", rank[i])?,
            kind,
            seq_id: to_u32(path, row, "seq_id", seq_id[i])?,
            mc: to_i32(path, row, "mc", mc[i])?,
            mb_id: to_i32(path, row, "mb_id", mb_id[i])?,
            gmc: to_i32(path, row, "gmc", gmc[i])?,
            start_s: start[i],
            duration_s: duration[i],
        });
    }
    Ok(())
}

/// Reads every operation of `path` (a published `trace-*.parquet` or the
/// `ops.parquet` an import writes).
pub fn read_ops(path: &Path) -> Result<Vec<OpRecord>, OpsError> {
    let io = |what: &'static str| {
        move |e: Box<dyn std::error::Error + Send + Sync>| OpsError::Io {
            path: path.into(),
            what,
            source: e,
        }
    };
    let file = File::open(path).map_err(|e| io("cannot open")(e.into()))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| io("not a readable Parquet file")(e.into()))?
        .build()
        .map_err(|e| io("not a readable Parquet file")(e.into()))?;
    let mut out = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| io("cannot decode")(e.into()))?;
        let first = out.len();
        add_batch(path, &batch, first, &mut out)?;
    }
    if out.is_empty() {
        return Err(OpsError::Empty { path: path.into() });
    }
    Ok(out)
}

/// Writes `ops` to `path` with the published column names (wider integer
/// types, `f64` times), atomically.
pub fn write_ops(path: &Path, ops: &[OpRecord]) -> Result<(), OpsError> {
    let int = |name: &str| Field::new(name, DataType::Int32, false);
    let schema = Arc::new(Schema::new(vec![
        int("dp_rank"),
        int("stage"),
        int("rank"),
        Field::new("step", DataType::Int64, false),
        Field::new("optype", DataType::Utf8, false),
        Field::new("start_ts", DataType::Float64, false),
        Field::new("duration", DataType::Float64, false),
        int("seq_id"),
        int("mc"),
        int("mb_id"),
        int("gmc"),
    ]));
    let i32s = |f: &dyn Fn(&OpRecord) -> i32| -> ArrayRef {
        Arc::new(Int32Array::from_iter_values(ops.iter().map(f)))
    };
    let columns: Vec<ArrayRef> = vec![
        i32s(&|o| o.dp_rank as i32),
        i32s(&|o| o.stage as i32),
        i32s(&|o| o.rank as i32),
        Arc::new(Int64Array::from_iter_values(ops.iter().map(|o| o.step))),
        Arc::new(StringArray::from_iter_values(
            ops.iter().map(|o| o.kind.as_str()),
        )),
        Arc::new(Float64Array::from_iter_values(
            ops.iter().map(|o| o.start_s),
        )),
        Arc::new(Float64Array::from_iter_values(
            ops.iter().map(|o| o.duration_s),
        )),
        i32s(&|o| o.seq_id as i32),
        i32s(&|o| o.mc),
        i32s(&|o| o.mb_id),
        i32s(&|o| o.gmc),
    ];
    let io = |what: &'static str| {
        move |e: Box<dyn std::error::Error + Send + Sync>| OpsError::Io {
            path: path.into(),
            what,
            source: e,
        }
    };
    let encode = |e: parquet::errors::ParquetError| io("cannot encode")(e.into());
    let batch =
        RecordBatch::try_new(schema.clone(), columns).map_err(|e| io("cannot encode")(e.into()))?;
    let mut bytes = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut bytes, schema, None).map_err(encode)?;
    writer.write(&batch).map_err(encode)?;
    writer.close().map_err(encode)?;
    crate::fsutil::write_atomic(path, &bytes).map_err(|e| io("cannot write")(e.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(kind: OpKind, start_s: f64, duration_s: f64) -> OpRecord {
        OpRecord {
            step: 3,
            dp_rank: 1,
            stage: 2,
            rank: 9,
            kind,
            seq_id: 0,
            mc: -1,
            mb_id: -1,
            gmc: -1,
            start_s,
            duration_s,
        }
    }

    #[test]
    fn ops_survive_a_write_and_a_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ops.parquet");
        let ops: Vec<OpRecord> = OpKind::ALL
            .iter()
            .enumerate()
            .map(|(i, &k)| op(k, i as f64 * 0.5, 0.25))
            .collect();
        write_ops(&path, &ops).unwrap();
        assert_eq!(read_ops(&path).unwrap(), ops);
    }

    #[test]
    fn bad_files_and_rows_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ops.parquet");
        std::fs::write(&path, b"not parquet").unwrap();
        let e = read_ops(&path).unwrap_err().to_string();
        assert!(e.contains("not a readable Parquet file"), "{e}");

        write_ops(&path, &[op(OpKind::Gc, 0.0, f64::NAN)]).unwrap();
        let e = read_ops(&path).unwrap_err().to_string();
        assert!(e.contains("row 0") && e.contains("NaN"), "{e}");

        write_ops(&path, &[]).unwrap();
        assert!(matches!(read_ops(&path), Err(OpsError::Empty { .. })));

        let missing = read_ops(&dir.path().join("absent.parquet")).unwrap_err();
        assert!(missing.to_string().contains("absent.parquet"));
    }

    #[test]
    fn kinds_round_trip_their_names() {
        for k in OpKind::ALL {
            assert_eq!(OpKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(OpKind::parse("first-op"), None);
        assert_eq!(OpKind::ForwardRecv.attribution_name(), "forward-pp-comm");
        assert!(OpKind::LayernormGradsAllReduce.is_communication());
        assert!(!OpKind::Gc.is_communication());
    }
}
