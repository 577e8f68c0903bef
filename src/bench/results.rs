//! One row per benchmark run, and the Parquet file that holds them.

use std::path::Path;
use std::sync::Arc;

use arrow_array::{
    ArrayRef, BooleanArray, Float64Array, RecordBatch, StringArray, UInt32Array, UInt64Array,
};
use arrow_schema::{Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use serde::Serialize;

use super::kind::RunKind;

/// What one run measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchRow {
    /// Sweep.
    pub sweep: String,
    /// The dataflow (threads or processes) or a reference loop.
    pub kind: RunKind,
    /// Job name.
    pub job: String,
    /// Workers.
    pub workers: u32,
    /// Policy.
    pub policy: String,
    /// Pattern.
    pub pattern: String,
    /// Injected delay, percent (0 when the pattern has none).
    pub delay_percent: f64,
    /// Slowdown probability (0 when the pattern has none).
    pub probability: f64,
    /// Power-law exponent (0 when the pattern has none).
    pub alpha: f64,
    /// Seed.
    pub seed: u64,
    /// Paced mode, ns per row (0 = native).
    pub pace_ns_per_row: u64,
    /// Iterations.
    pub iterations: u64,
    /// Wall time of the iterations / iterations, ms (the data load before the
    /// first iteration excluded: see `load_ms`).
    pub time_per_iteration_ms: f64,
    /// Time from the job's start to its first iteration: placing the data
    /// (timely: through the placement collection; plain: building the same
    /// row store), ms.
    pub load_ms: f64,
    /// Median iteration wall time (first ready to last finish), ms.
    pub median_iteration_ms: f64,
    /// The load-balancing bound per iteration, ms: `time_per_iteration_ms`
    /// with each iteration's part from its start to its last worker's finish
    /// replaced by that iteration's bound ([`crate::run::bound`]); None for
    /// the reference loops and for policies without BSP semantics (under
    /// SSP iterations overlap).
    pub bound_iteration_ms: Option<f64>,
    /// The same with each iteration's bound with whole units
    /// ([`crate::run::bound::IterationBound::units_us`]).
    pub unit_bound_iteration_ms: Option<f64>,
    /// Σ barrier wait, worker-seconds.
    pub barrier_wait_s: f64,
    /// Share of the units computed by a peer instead of their owner.
    pub work_reassigned: f64,
    /// Speculative copies computed, as a share of the units.
    pub work_cloned: f64,
    /// FlexRR's stopping rule: first iteration whose training loss changed < 2 %
    /// over the 10 before, if any.
    pub converged_iteration: Option<u64>,
    /// Seconds from the job's start to that iteration's end.
    pub converged_s: Option<f64>,
    /// Final test accuracy.
    pub test_accuracy: f64,
    /// The model kind trained.
    pub workload: String,
    /// The sweep's target test accuracy, if it has one.
    pub target_accuracy: Option<f64>,
    /// Seconds from the first iteration's start until parameters that reach
    /// `target_accuracy` existed (the start of the first evaluated iteration at
    /// or above it, or the run's end for the final model), if they did.
    pub time_to_accuracy_s: Option<f64>,
    /// SHA-256 of the final parameters.
    pub params_sha256: String,
    /// Whether the parameters equal those of the first run with the same math
    /// (`JobPlan::math_hash`): under BSP semantics they must. Always true for
    /// policies that change the math (SSP), whose parameters depend on timing.
    pub digest_matches: bool,
    /// Whether the policy keeps BSP semantics (so the digest check applies).
    pub bsp_semantics: bool,
    /// Processes the run used (1: threads in the bench's own process).
    pub processes: u32,
    /// `[checkpoint] every` of the run (0: no checkpoints).
    pub checkpoint_every: u64,
    /// Seconds from killing a process to the restarted job's first completed
    /// iteration (runs with a kill).
    pub recovery_s: Option<f64>,
}

/// Writes `rows` to `path` as one Parquet file (atomically).
pub fn write_rows(path: &Path, rows: &[BenchRow]) -> Result<(), parquet::errors::ParquetError> {
    let s = |f: fn(&BenchRow) -> &str| -> ArrayRef {
        Arc::new(StringArray::from_iter_values(rows.iter().map(f)))
    };
    let f64s = |f: fn(&BenchRow) -> f64| -> ArrayRef {
        Arc::new(Float64Array::from_iter_values(rows.iter().map(f)))
    };
    let opt_f64s = |f: fn(&BenchRow) -> Option<f64>| -> ArrayRef {
        Arc::new(Float64Array::from(rows.iter().map(f).collect::<Vec<_>>()))
    };
    let u64s = |f: fn(&BenchRow) -> u64| -> ArrayRef {
        Arc::new(UInt64Array::from_iter_values(rows.iter().map(f)))
    };
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("sweep", s(|r| &r.sweep)),
        (
            "kind",
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r.kind.label()),
            )),
        ),
        ("job", s(|r| &r.job)),
        (
            "workers",
            Arc::new(UInt32Array::from_iter_values(
                rows.iter().map(|r| r.workers),
            )),
        ),
        ("policy", s(|r| &r.policy)),
        ("pattern", s(|r| &r.pattern)),
        ("delay_percent", f64s(|r| r.delay_percent)),
        ("probability", f64s(|r| r.probability)),
        ("alpha", f64s(|r| r.alpha)),
        ("seed", u64s(|r| r.seed)),
        ("pace_ns_per_row", u64s(|r| r.pace_ns_per_row)),
        ("iterations", u64s(|r| r.iterations)),
        ("time_per_iteration_ms", f64s(|r| r.time_per_iteration_ms)),
        ("load_ms", f64s(|r| r.load_ms)),
        ("median_iteration_ms", f64s(|r| r.median_iteration_ms)),
        ("bound_iteration_ms", opt_f64s(|r| r.bound_iteration_ms)),
        (
            "unit_bound_iteration_ms",
            opt_f64s(|r| r.unit_bound_iteration_ms),
        ),
        ("barrier_wait_s", f64s(|r| r.barrier_wait_s)),
        ("work_reassigned", f64s(|r| r.work_reassigned)),
        ("work_cloned", f64s(|r| r.work_cloned)),
        (
            "converged_iteration",
            Arc::new(UInt64Array::from(
                rows.iter()
                    .map(|r| r.converged_iteration)
                    .collect::<Vec<_>>(),
            )),
        ),
        ("converged_s", opt_f64s(|r| r.converged_s)),
        ("test_accuracy", f64s(|r| r.test_accuracy)),
        ("workload", s(|r| &r.workload)),
        ("target_accuracy", opt_f64s(|r| r.target_accuracy)),
        ("time_to_accuracy_s", opt_f64s(|r| r.time_to_accuracy_s)),
        ("params_sha256", s(|r| &r.params_sha256)),
        (
            "processes",
            Arc::new(UInt32Array::from_iter_values(
                rows.iter().map(|r| r.processes),
            )),
        ),
        ("checkpoint_every", u64s(|r| r.checkpoint_every)),
        ("recovery_s", opt_f64s(|r| r.recovery_s)),
        (
            "bsp_semantics",
            Arc::new(BooleanArray::from(
                rows.iter().map(|r| r.bsp_semantics).collect::<Vec<_>>(),
            )),
        ),
        (
            "digest_matches",
            Arc::new(BooleanArray::from(
                rows.iter().map(|r| r.digest_matches).collect::<Vec<_>>(),
            )),
        ),
    ];
    let schema = Arc::new(Schema::new(
        columns
            .iter()
            .map(|(name, a)| Field::new(*name, a.data_type().clone(), a.null_count() > 0))
            .collect::<Vec<_>>(),
    ));
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        columns.into_iter().map(|(_, a)| a).collect(),
    )?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .build();
    let tmp = path.with_extension("parquet.tmp");
    let file = std::fs::File::create(&tmp)?;
    let mut writer = ArrowWriter::try_new(file, schema, Some(props))?;
    writer.write(&batch)?;
    writer.close()?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}
