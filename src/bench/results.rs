//! One row per benchmark run, and the Parquet file that holds them: written
//! by [`write_rows`], read back by [`read_rows`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, BooleanArray, Float64Array, RecordBatch, StringArray, UInt32Array, UInt64Array,
};
use arrow_schema::{Field, Schema};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
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
    /// Seconds from the first iteration's start until the run reached
    /// `target_accuracy`: the first of two consecutive evaluations at or
    /// above it (each timed at the start of the iteration whose starting
    /// parameters it scored; the final model's at the run's end), if it did.
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
    /// Runs on namespaced hosts: the slowest handshake of any process, the
    /// clock exchange included, ms.
    pub start_ms: Option<f64>,
    /// Runs on namespaced hosts: process 0's gather of the others' trace
    /// parts, s.
    pub gather_s: Option<f64>,
    /// Training rows (images) per second over the iterations' span.
    pub rows_per_s: Option<f64>,
    /// A pipeline run's bubble: the mean over its stages of the share of
    /// the iterations' time outside their passes (None: data-parallel).
    pub bubble: Option<f64>,
    /// Bytes the workers sent per iteration, MB: gradient slices, and a
    /// pipeline's activations and their gradients (not the parameter
    /// versions).
    pub mb_sent_per_iteration: Option<f64>,
    /// The CPUs the run was pinned to (`"0"`, `"0,1"`; empty: not pinned).
    pub cpus: String,
    /// The workload's own final metrics on the evaluation rows (e.g. `rmse`),
    /// as a JSON object (empty: none).
    pub test_metrics: String,
    /// The sweep's `vary` values of the run (`KEY=VALUE, …`; empty: none).
    pub settings: String,
}

impl BenchRow {
    /// [`BenchRow::test_metrics`] read back (empty when there are none).
    pub fn metrics(&self) -> std::collections::BTreeMap<String, f64> {
        serde_json::from_str(&self.test_metrics).unwrap_or_default()
    }
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
        ("start_ms", opt_f64s(|r| r.start_ms)),
        ("gather_s", opt_f64s(|r| r.gather_s)),
        ("rows_per_s", opt_f64s(|r| r.rows_per_s)),
        ("bubble", opt_f64s(|r| r.bubble)),
        (
            "mb_sent_per_iteration",
            opt_f64s(|r| r.mb_sent_per_iteration),
        ),
        ("cpus", s(|r| &r.cpus)),
        ("test_metrics", s(|r| &r.test_metrics)),
        ("settings", s(|r| &r.settings)),
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

/// Why a results file could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResultsError {
    /// The file could not be opened.
    #[error("cannot open {path}")]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not readable Parquet.
    #[error("{path} is not readable Parquet")]
    Parquet {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// The file is Parquet but not bench results.
    #[error("{path}: {message}")]
    Column {
        /// The file.
        path: PathBuf,
        /// What is missing or malformed.
        message: String,
    },
}

/// Reads the rows [`write_rows`] wrote. Columns added to [`BenchRow`] after
/// a file was written read as their empty value (0, none, false), so the
/// results of older benches stay readable; the identifying columns (`sweep`,
/// `kind`, `job`, `workers`, `seed`, `time_per_iteration_ms`) must be there.
pub fn read_rows(path: &Path) -> Result<Vec<BenchRow>, ResultsError> {
    let parquet = |source| ResultsError::Parquet {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(|source| ResultsError::Open {
        path: path.to_owned(),
        source,
    })?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(parquet)?
        .build()
        .map_err(parquet)?;
    let mut rows = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| parquet(e.into()))?;
        rows.extend(decode(&batch).map_err(|message| ResultsError::Column {
            path: path.to_owned(),
            message,
        })?);
    }
    Ok(rows)
}

fn column<'a, A: Array + 'static>(
    batch: &'a RecordBatch,
    name: &str,
) -> Result<Option<&'a A>, String> {
    match batch.column_by_name(name) {
        None => Ok(None),
        Some(c) => c
            .as_any()
            .downcast_ref::<A>()
            .map(Some)
            .ok_or_else(|| format!("column {name} has type {}", c.data_type())),
    }
}

fn required<'a, A: Array + 'static>(batch: &'a RecordBatch, name: &str) -> Result<&'a A, String> {
    column(batch, name)?.ok_or_else(|| format!("no column {name}: not bench results"))
}

fn decode(batch: &RecordBatch) -> Result<Vec<BenchRow>, String> {
    let string = |name: &str| required::<StringArray>(batch, name);
    let opt_string = |name: &str| column::<StringArray>(batch, name);
    let f64s = |name: &str| column::<Float64Array>(batch, name);
    let u64s = |name: &str| column::<UInt64Array>(batch, name);
    let u32s = |name: &str| column::<UInt32Array>(batch, name);
    let bools = |name: &str| column::<BooleanArray>(batch, name);
    let (sweep, kind, job) = (string("sweep")?, string("kind")?, string("job")?);
    let (policy, pattern) = (opt_string("policy")?, opt_string("pattern")?);
    let workers = required::<UInt32Array>(batch, "workers")?;
    let seed = required::<UInt64Array>(batch, "seed")?;
    let time = required::<Float64Array>(batch, "time_per_iteration_ms")?;
    let (delay, probability, alpha) =
        (f64s("delay_percent")?, f64s("probability")?, f64s("alpha")?);
    let (pace, iterations) = (u64s("pace_ns_per_row")?, u64s("iterations")?);
    let (load, median, bound, unit_bound) = (
        f64s("load_ms")?,
        f64s("median_iteration_ms")?,
        f64s("bound_iteration_ms")?,
        f64s("unit_bound_iteration_ms")?,
    );
    let (wait, reassigned, cloned) = (
        f64s("barrier_wait_s")?,
        f64s("work_reassigned")?,
        f64s("work_cloned")?,
    );
    let (converged_iteration, converged_s) = (u64s("converged_iteration")?, f64s("converged_s")?);
    let (accuracy, target, to_target) = (
        f64s("test_accuracy")?,
        f64s("target_accuracy")?,
        f64s("time_to_accuracy_s")?,
    );
    let (workload, digest) = (opt_string("workload")?, opt_string("params_sha256")?);
    let (processes, every, recovery) = (
        u32s("processes")?,
        u64s("checkpoint_every")?,
        f64s("recovery_s")?,
    );
    let (start, gather) = (f64s("start_ms")?, f64s("gather_s")?);
    let (bsp, matches) = (bools("bsp_semantics")?, bools("digest_matches")?);
    let (rows_per_s, cpus) = (f64s("rows_per_s")?, opt_string("cpus")?);
    let (bubble, sent) = (f64s("bubble")?, f64s("mb_sent_per_iteration")?);
    let metrics = opt_string("test_metrics")?;
    let settings = opt_string("settings")?;
    fn get<A: Array, T>(a: Option<&A>, i: usize, f: impl Fn(&A, usize) -> T) -> Option<T> {
        a.filter(|a| a.is_valid(i)).map(|a| f(a, i))
    }
    let f = |a: Option<&Float64Array>, i| get(a, i, Float64Array::value);
    let u = |a: Option<&UInt64Array>, i| get(a, i, UInt64Array::value);
    let mut rows = Vec::with_capacity(batch.num_rows());
    for i in 0..batch.num_rows() {
        let label = kind.value(i);
        let kind = super::kind::RunKind::parse(label)
            .ok_or_else(|| format!("row {i}: unknown kind '{label}'"))?;
        rows.push(BenchRow {
            sweep: sweep.value(i).to_owned(),
            kind,
            job: job.value(i).to_owned(),
            workers: workers.value(i),
            policy: get(policy, i, |a, i| a.value(i).to_owned()).unwrap_or_default(),
            pattern: get(pattern, i, |a, i| a.value(i).to_owned()).unwrap_or_default(),
            delay_percent: f(delay, i).unwrap_or(0.0),
            probability: f(probability, i).unwrap_or(0.0),
            alpha: f(alpha, i).unwrap_or(0.0),
            seed: seed.value(i),
            pace_ns_per_row: u(pace, i).unwrap_or(0),
            iterations: u(iterations, i).unwrap_or(0),
            time_per_iteration_ms: time.value(i),
            load_ms: f(load, i).unwrap_or(0.0),
            median_iteration_ms: f(median, i).unwrap_or(0.0),
            bound_iteration_ms: f(bound, i),
            unit_bound_iteration_ms: f(unit_bound, i),
            barrier_wait_s: f(wait, i).unwrap_or(0.0),
            work_reassigned: f(reassigned, i).unwrap_or(0.0),
            work_cloned: f(cloned, i).unwrap_or(0.0),
            converged_iteration: u(converged_iteration, i),
            converged_s: f(converged_s, i),
            test_accuracy: f(accuracy, i).unwrap_or(0.0),
            workload: get(workload, i, |a, i| a.value(i).to_owned()).unwrap_or_default(),
            target_accuracy: f(target, i),
            time_to_accuracy_s: f(to_target, i),
            params_sha256: get(digest, i, |a, i| a.value(i).to_owned()).unwrap_or_default(),
            digest_matches: get(matches, i, BooleanArray::value).unwrap_or(true),
            bsp_semantics: get(bsp, i, BooleanArray::value).unwrap_or(false),
            processes: get(processes, i, UInt32Array::value).unwrap_or(1),
            checkpoint_every: u(every, i).unwrap_or(0),
            recovery_s: f(recovery, i),
            start_ms: f(start, i),
            gather_s: f(gather, i),
            rows_per_s: f(rows_per_s, i),
            bubble: f(bubble, i),
            mb_sent_per_iteration: f(sent, i),
            cpus: get(cpus, i, |a, i| a.value(i).to_owned()).unwrap_or_default(),
            test_metrics: get(metrics, i, |a, i| a.value(i).to_owned()).unwrap_or_default(),
            settings: get(settings, i, |a, i| a.value(i).to_owned()).unwrap_or_default(),
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(seed: u64, kind: RunKind) -> BenchRow {
        BenchRow {
            sweep: "s".into(),
            kind,
            job: "j".into(),
            workers: 4,
            policy: "bsp".into(),
            pattern: "slow-worker".into(),
            delay_percent: 400.0,
            probability: 0.1,
            alpha: 0.0,
            seed,
            pace_ns_per_row: 0,
            iterations: 10,
            time_per_iteration_ms: 1.0 / 3.0 + seed as f64,
            load_ms: 2.5,
            median_iteration_ms: f64::NAN,
            bound_iteration_ms: Some(0.1),
            unit_bound_iteration_ms: None,
            barrier_wait_s: 0.01,
            work_reassigned: 0.0,
            work_cloned: 0.0,
            converged_iteration: Some(7),
            converged_s: None,
            test_accuracy: 0.8,
            workload: "logistic".into(),
            target_accuracy: None,
            time_to_accuracy_s: Some(1e-300),
            test_metrics: r#"{"rmse":0.91}"#.into(),
            settings: "policy.group_size=4".into(),
            params_sha256: "ab".into(),
            digest_matches: true,
            bsp_semantics: true,
            processes: 1,
            checkpoint_every: 0,
            recovery_s: None,
            start_ms: None,
            gather_s: None,
            rows_per_s: Some(1234.5),
            bubble: Some(0.25),
            mb_sent_per_iteration: Some(1.5),
            cpus: "0".into(),
        }
    }

    #[test]
    fn rows_round_trip_bit_for_bit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.parquet");
        let rows = vec![
            row(1, RunKind::Timely),
            row(
                2,
                RunKind::Launched {
                    processes: 2,
                    threads: 2,
                },
            ),
            row(3, RunKind::Plain),
        ];
        write_rows(&path, &rows).unwrap();
        let back = read_rows(&path).unwrap();
        assert_eq!(back.len(), 3);
        for (a, b) in rows.iter().zip(&back) {
            assert_eq!(format!("{a:?}"), format!("{b:?}"));
        }
        assert_eq!(back[0].metrics().get("rmse"), Some(&0.91));
        assert!(BenchRow {
            test_metrics: String::new(),
            ..back[0].clone()
        }
        .metrics()
        .is_empty());
    }

    #[test]
    fn other_parquet_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.parquet");
        std::fs::write(&path, b"not parquet").unwrap();
        let e = read_rows(&path).unwrap_err().to_string();
        assert!(e.contains("x.parquet is not readable Parquet"), "{e}");
    }
}
