//! The Arrow schemas of the three trace tables: the one place they are defined.
//!
//! Every table starts with a `job_id` column (`Utf8`, the same value in every row
//! of a file), followed by the fields of its record type in declaration order,
//! named after the fields. `u64` becomes `UInt64`, `u32` `UInt32`, `f64`
//! `Float64`, `String` and [`UnitAction`](super::UnitAction) `Utf8` (the
//! action's [`as_str`](super::UnitAction::as_str) name). Only `Option` fields
//! are nullable, and `IterationRecord::test_metrics`, a `Utf8` JSON object
//! that is null when the map is empty.
//!
//! Bump [`SCHEMA_VERSION`] whenever a column is added, removed, renamed or
//! changes type or meaning, and update `docs/trace-schema.md`. The older
//! versions the reader still takes are in [`READABLE_SCHEMA_VERSIONS`];
//! [`TraceTable::schema_of_version`] gives their columns.

use std::fmt;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef};

/// Version of the trace layout, written to every part file under
/// [`META_SCHEMA_VERSION`].
///
/// Version 9 added the `tail` action (no column); version 8
/// `workers.params_transit_us`; version 7
/// `units.send_us`, `units.gt_link_mbps` and `workers.transit_us`; version 6
/// `units.micro_batches` and the `split` action; version 5
/// `workers.wasted_us`; version 4 `workers.control_bytes`; version 3
/// `iterations.workload` and `iterations.test_metrics`; version 2
/// `workers.predicted_unit_us`.
pub const SCHEMA_VERSION: u32 = 9;

/// The versions readers take, oldest first; files of any other version are
/// rejected. Version 2 files lack the [`ADDED_IN_V3`] columns; they only ever
/// held logistic regression runs and imports, and the reader fills the
/// columns in (see `docs/trace-schema.md`). Version 2 and 3 files lack
/// [`ADDED_IN_V4`], and version 2 to 4 files [`ADDED_IN_V5`]; they read as 0
/// (not recorded). Version 2 to 5 files lack the `units` table's
/// [`ADDED_IN_V6`]; it reads as 1 (every unit was computed at once before
/// a unit's rest could move, and the replay needs no more). Version 2 to 6
/// files lack [`ADDED_IN_V7`]; they read as 0 (no link was limited), and
/// version 2 to 7 files [`WORKERS_ADDED_IN_V8`], read as 0 too. Version 8
/// files have version 9's columns (version 9 added an action, `tail`).
pub const READABLE_SCHEMA_VERSIONS: &[u32] = &[2, 3, 4, 5, 6, 7, 8, SCHEMA_VERSION];

/// The `units` columns version 7 added: the time a unit's gradient took
/// through its worker's link, and the link's injected rate.
pub const ADDED_IN_V7: [&str; 2] = [SEND_COLUMN, LINK_COLUMN];

/// The `workers` column version 7 added: how long a worker's gradients
/// took to reach shard 0's owner.
pub const WORKERS_ADDED_IN_V7: &str = TRANSIT_COLUMN;

/// `workers` column: µs a worker's gradient slices took to reach shard 0.
pub const TRANSIT_COLUMN: &str = "transit_us";

/// The `workers` column version 8 added: how long the parameter shard a
/// worker owns took to reach the workers on other hosts.
pub const WORKERS_ADDED_IN_V8: &str = PARAMS_TRANSIT_COLUMN;

/// `workers` column: µs a worker's parameter shard took to reach the
/// workers on other hosts.
pub const PARAMS_TRANSIT_COLUMN: &str = "params_transit_us";

/// `units` column: µs the gradient took through the worker's link.
pub const SEND_COLUMN: &str = "send_us";
/// `units` column: ground truth, the worker's link rate, Mbit/s (0: not
/// limited).
pub const LINK_COLUMN: &str = "gt_link_mbps";

/// The `workers` column version 5 added: compute spent on copies of units
/// that another copy beat.
pub const ADDED_IN_V5: &str = WASTED_COLUMN;

/// The `units` column version 6 added: the micro-batches of a record's rows.
pub const ADDED_IN_V6: &str = MICRO_BATCHES_COLUMN;

/// Name of the `units` column of a record's micro-batches.
pub const MICRO_BATCHES_COLUMN: &str = "micro_batches";

/// `workers` column: µs of compute spent on copies that lost the race.
pub const WASTED_COLUMN: &str = "wasted_us";

/// The `workers` column version 4 added: the bytes of the control messages
/// a worker sent.
pub const ADDED_IN_V4: &str = CONTROL_BYTES_COLUMN;

/// `workers` column: bytes of the control messages a worker sent.
pub const CONTROL_BYTES_COLUMN: &str = "control_bytes";

/// The `iterations` columns version 3 added: the run's workload and its own
/// test metrics.
pub const ADDED_IN_V3: [&str; 2] = [WORKLOAD_COLUMN, TEST_METRICS_COLUMN];

/// `iterations` column: the `[model] kind` of the run (import: the format).
pub const WORKLOAD_COLUMN: &str = "workload";
/// `iterations` column: the workload's own test metrics, a JSON object or null.
pub const TEST_METRICS_COLUMN: &str = "test_metrics";

/// Name of the per-unit table and of its subdirectory.
pub const UNITS_TABLE: &str = "units";
/// Name of the per-(iteration, worker) table and of its subdirectory.
pub const WORKERS_TABLE: &str = "workers";
/// Name of the per-iteration table and of its subdirectory.
pub const ITERATIONS_TABLE: &str = "iterations";

/// Name of the leading column every table has: the job the rows belong to.
pub const JOB_ID_COLUMN: &str = "job_id";

/// Parquet key-value metadata key: [`SCHEMA_VERSION`] as a decimal string.
pub const META_SCHEMA_VERSION: &str = "forestall.schema_version";
/// Parquet key-value metadata key: the table name ([`TraceTable::name`]).
pub const META_TABLE: &str = "forestall.table";
/// Parquet key-value metadata key: the job id (same as the `job_id` column).
pub const META_JOB_ID: &str = "forestall.job_id";
/// Parquet key-value metadata key: git revision of the code that wrote the file.
pub const META_GIT_REVISION: &str = "forestall.git_revision";
/// Parquet key-value metadata key: hash of the resolved job plan.
pub const META_PLAN_HASH: &str = "forestall.plan_hash";
/// Parquet key-value metadata key: the job's seed as a decimal string.
pub const META_SEED: &str = "forestall.seed";

/// One of the three trace tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TraceTable {
    /// One row per unit: [`UnitRecord`](super::UnitRecord).
    Units,
    /// One row per (iteration, worker): [`WorkerRecord`](super::WorkerRecord).
    Workers,
    /// One row per iteration: [`IterationRecord`](super::IterationRecord).
    Iterations,
}

impl TraceTable {
    /// All tables, in the order they are read.
    pub const ALL: [TraceTable; 3] = [
        TraceTable::Units,
        TraceTable::Workers,
        TraceTable::Iterations,
    ];

    /// The table's name: its subdirectory and its [`META_TABLE`] value.
    pub fn name(self) -> &'static str {
        match self {
            TraceTable::Units => UNITS_TABLE,
            TraceTable::Workers => WORKERS_TABLE,
            TraceTable::Iterations => ITERATIONS_TABLE,
        }
    }

    /// The table's Arrow schema (of [`SCHEMA_VERSION`]).
    pub fn schema(self) -> SchemaRef {
        match self {
            TraceTable::Units => unit_schema(),
            TraceTable::Workers => worker_schema(),
            TraceTable::Iterations => iteration_schema(),
        }
    }

    /// The columns a file of schema `version` has, or `None` for a version
    /// not in [`READABLE_SCHEMA_VERSIONS`]. Version 5 is version 6 without the
    /// `units` table's [`ADDED_IN_V6`] column, version 4 version 5 without
    /// the `workers` table's [`ADDED_IN_V5`] column, version 3 version 4 without
    /// the `workers` table's [`ADDED_IN_V4`] column, version 2 version 3
    /// without the `iterations` table's [`ADDED_IN_V3`] columns.
    pub fn schema_of_version(self, version: u32) -> Option<SchemaRef> {
        if !READABLE_SCHEMA_VERSIONS.contains(&version) {
            return None;
        }
        let added = |f: &Field| match self {
            TraceTable::Workers => {
                (f.name() == ADDED_IN_V4 && version < 4)
                    || (f.name() == ADDED_IN_V5 && version < 5)
                    || (f.name() == WORKERS_ADDED_IN_V7 && version < 7)
                    || (f.name() == WORKERS_ADDED_IN_V8 && version < 8)
            }
            TraceTable::Iterations => ADDED_IN_V3.contains(&f.name().as_str()) && version < 3,
            TraceTable::Units => {
                (f.name() == ADDED_IN_V6 && version < 6)
                    || (ADDED_IN_V7.contains(&f.name().as_str()) && version < 7)
            }
        };
        let fields: Vec<Field> = self
            .schema()
            .fields()
            .iter()
            .filter(|f| !added(f))
            .map(|f| f.as_ref().clone())
            .collect();
        Some(Arc::new(Schema::new(fields)))
    }

    pub(crate) fn index(self) -> usize {
        match self {
            TraceTable::Units => 0,
            TraceTable::Workers => 1,
            TraceTable::Iterations => 2,
        }
    }
}

impl fmt::Display for TraceTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

fn required(name: &str, data_type: DataType) -> Field {
    Field::new(name, data_type, false)
}

fn optional(name: &str, data_type: DataType) -> Field {
    Field::new(name, data_type, true)
}

/// Schema of the `units` table ([`UnitRecord`](super::UnitRecord)).
pub fn unit_schema() -> SchemaRef {
    use DataType::{Float64, UInt32, UInt64, Utf8};
    Arc::new(Schema::new(vec![
        required(JOB_ID_COLUMN, Utf8),
        required("iteration", UInt64),
        required("worker", UInt32),
        required("process", UInt32),
        required("partition", UInt32),
        required("unit", UInt32),
        required("owner", UInt32),
        required("executor", UInt32),
        required("start_us", UInt64),
        required("end_us", UInt64),
        required("compute_us", UInt64),
        required("wait_us", UInt64),
        required("rows", UInt32),
        required("bytes_sent", UInt64),
        required("action", Utf8),
        required("gt_slowdown", Float64),
        required("gt_delay_us", UInt64),
        required(MICRO_BATCHES_COLUMN, UInt32),
        required(SEND_COLUMN, UInt64),
        required(LINK_COLUMN, Float64),
    ]))
}

/// Schema of the `workers` table ([`WorkerRecord`](super::WorkerRecord)).
pub fn worker_schema() -> SchemaRef {
    use DataType::{Float64, UInt32, UInt64, Utf8};
    Arc::new(Schema::new(vec![
        required(JOB_ID_COLUMN, Utf8),
        required("iteration", UInt64),
        required("worker", UInt32),
        required("process", UInt32),
        required("units", UInt32),
        required("rows", UInt64),
        required("ready_us", UInt64),
        required("finish_us", UInt64),
        required("compute_us", UInt64),
        required("busy_us", UInt64),
        required("barrier_wait_us", UInt64),
        required("operator_us", UInt64),
        required("bytes_sent", UInt64),
        required("bytes_moved", UInt64),
        required("units_given", UInt32),
        required("control_sent", UInt32),
        required(CONTROL_BYTES_COLUMN, UInt64),
        required("units_cancelled", UInt32),
        required(WASTED_COLUMN, UInt64),
        required(TRANSIT_COLUMN, UInt64),
        required(PARAMS_TRANSIT_COLUMN, UInt64),
        required("params_version", UInt64),
        optional("predicted_unit_us", Float64),
        required("gt_slowdown", Float64),
        required("gt_delay_us", UInt64),
    ]))
}

/// Schema of the `iterations` table ([`IterationRecord`](super::IterationRecord)).
pub fn iteration_schema() -> SchemaRef {
    use DataType::{Float64, UInt32, UInt64, Utf8};
    Arc::new(Schema::new(vec![
        required(JOB_ID_COLUMN, Utf8),
        required("iteration", UInt64),
        required("start_us", UInt64),
        required("end_us", UInt64),
        required("wall_us", UInt64),
        required("train_loss", Float64),
        optional("test_loss", Float64),
        optional("test_accuracy", Float64),
        optional("laggard", UInt32),
        required("lag_us", UInt64),
        required("median_busy_us", UInt64),
        required("barrier_wait_us", UInt64),
        required("units", UInt32),
        required("rows", UInt64),
        required("dropped_partitions", Utf8),
        required(WORKLOAD_COLUMN, Utf8),
        optional(TEST_METRICS_COLUMN, Utf8),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(schema: &Schema) -> Vec<&str> {
        schema.fields().iter().map(|f| f.name().as_str()).collect()
    }

    fn nullable(schema: &Schema) -> Vec<&str> {
        schema
            .fields()
            .iter()
            .filter(|f| f.is_nullable())
            .map(|f| f.name().as_str())
            .collect()
    }

    #[test]
    fn every_table_starts_with_job_id() {
        for table in TraceTable::ALL {
            let schema = table.schema();
            let first = &schema.fields()[0];
            assert_eq!(first.name(), JOB_ID_COLUMN, "{table}");
            assert_eq!(first.data_type(), &DataType::Utf8, "{table}");
            assert!(!first.is_nullable(), "{table}");
        }
    }

    #[test]
    fn column_names_are_the_record_fields() {
        // Serializing a record gives its field names in declaration order.
        let (units, workers, iterations) = crate::trace::tests_support::one_of_each();
        let fields = |value: serde_json::Value| -> Vec<String> {
            let mut out = vec![JOB_ID_COLUMN.to_string()];
            if let serde_json::Value::Object(map) = value {
                out.extend(map.keys().cloned());
            }
            out
        };
        let same = |record: serde_json::Value, schema: &Schema| {
            let mut expected = fields(record);
            let mut found: Vec<String> = names(schema).iter().map(|s| s.to_string()).collect();
            expected.sort();
            found.sort();
            assert_eq!(found, expected);
        };
        let json = |v: Result<serde_json::Value, _>| v.expect("records serialize to json");
        same(json(serde_json::to_value(&units)), &unit_schema());
        same(json(serde_json::to_value(&workers)), &worker_schema());
        same(json(serde_json::to_value(&iterations)), &iteration_schema());
    }

    #[test]
    fn only_option_fields_are_nullable() {
        assert!(nullable(&unit_schema()).is_empty());
        assert_eq!(nullable(&worker_schema()), ["predicted_unit_us"]);
        assert_eq!(
            nullable(&iteration_schema()),
            ["test_loss", "test_accuracy", "laggard", "test_metrics"]
        );
    }

    #[test]
    fn older_versions_are_the_current_one_without_the_columns_added_since() {
        assert_eq!(SCHEMA_VERSION, 9);
        assert_eq!(READABLE_SCHEMA_VERSIONS, [2, 3, 4, 5, 6, 7, 8, 9]);
        for table in TraceTable::ALL {
            assert_eq!(table.schema_of_version(9), Some(table.schema()), "{table}");
            assert_eq!(table.schema_of_version(8), Some(table.schema()), "{table}");
            for version in [0, 1, 10, u32::MAX] {
                assert_eq!(table.schema_of_version(version), None, "{table} v{version}");
            }
        }
        // units gained micro_batches in 6, send_us and gt_link_mbps in 7;
        // workers control_bytes in 4, wasted_us in 5, transit_us in 7,
        // params_transit_us in 8
        for version in [2, 3, 4, 5, 6, 7] {
            let units = TraceTable::Units
                .schema_of_version(version)
                .expect("readable");
            let current = unit_schema();
            let mut expected = names(&current);
            expected.retain(|n| {
                (version >= 6 || *n != ADDED_IN_V6) && (version >= 7 || !ADDED_IN_V7.contains(n))
            });
            assert_eq!(names(&units), expected, "units v{version}");
            let workers = TraceTable::Workers
                .schema_of_version(version)
                .expect("readable");
            let current = worker_schema();
            let mut expected = names(&current);
            expected.retain(|n| {
                (version >= 5 || *n != ADDED_IN_V5)
                    && (version >= 4 || *n != ADDED_IN_V4)
                    && (version >= 7 || *n != WORKERS_ADDED_IN_V7)
                    && *n != WORKERS_ADDED_IN_V8
            });
            assert_eq!(names(&workers), expected, "workers v{version}");
        }
        // iterations gained workload and test_metrics in 3
        for version in [3, 4, 5] {
            assert_eq!(
                TraceTable::Iterations.schema_of_version(version),
                Some(iteration_schema())
            );
        }
        let v2 = TraceTable::Iterations
            .schema_of_version(2)
            .expect("version 2 is readable");
        let v3 = iteration_schema();
        let mut expected = names(&v3);
        assert_eq!(expected[expected.len() - 2..], ADDED_IN_V3);
        expected.truncate(expected.len() - 2);
        assert_eq!(names(&v2), expected);
        assert_eq!(nullable(&v2), ["test_loss", "test_accuracy", "laggard"]);
    }

    #[test]
    fn table_names_and_indices() {
        let names: Vec<_> = TraceTable::ALL.iter().map(|t| t.name()).collect();
        assert_eq!(names, ["units", "workers", "iterations"]);
        let indices: Vec<_> = TraceTable::ALL.iter().map(|t| t.index()).collect();
        assert_eq!(indices, [0, 1, 2]);
        assert_eq!(TraceTable::Workers.to_string(), "workers");
    }
}
