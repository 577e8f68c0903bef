//! Errors of reading and writing trace files.

use std::path::PathBuf;

use arrow_schema::{ArrowError, DataType};
use parquet::errors::ParquetError;

/// Result of the trace functions.
pub type Result<T, E = TraceError> = std::result::Result<T, E>;

/// Why a trace file or directory could not be written or read.
///
/// Every variant names the file or directory involved. The underlying I/O,
/// Parquet or Arrow error is the [`source`](std::error::Error::source); print
/// with `{:#}` (anyhow) to see the whole chain.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// A file system operation on `path` failed.
    #[error("i/o error on {path}")]
    Io {
        /// File or directory the operation was on.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The Parquet library could not write or decode `path` (truncated or
    /// corrupt file, not Parquet at all, ...).
    #[error("parquet error in {path}")]
    Parquet {
        /// The part file.
        path: PathBuf,
        /// The Parquet error.
        #[source]
        source: ParquetError,
    },
    /// Records could not be turned into an Arrow batch for `path`.
    #[error("arrow error in {path}")]
    Arrow {
        /// The part file being written.
        path: PathBuf,
        /// The Arrow error.
        #[source]
        source: ArrowError,
    },
    /// The file's `forestall.schema_version` is not one this build reads.
    #[error(
        "trace schema version {found} of {path} is not supported (this build reads versions {})",
        list_versions(supported)
    )]
    SchemaVersion {
        /// The part file.
        path: PathBuf,
        /// Version stamped in the file.
        found: u32,
        /// [`READABLE_SCHEMA_VERSIONS`](super::schema::READABLE_SCHEMA_VERSIONS).
        supported: &'static [u32],
    },
    /// A required key-value metadata entry is absent (not a forestall trace file).
    #[error("{path} has no metadata key {key} (not a forestall trace file?)")]
    MissingMetadata {
        /// The part file.
        path: PathBuf,
        /// The missing key.
        key: &'static str,
    },
    /// A key-value metadata entry has a value that does not parse.
    #[error("{path} has invalid metadata {key}={value:?}")]
    BadMetadata {
        /// The part file.
        path: PathBuf,
        /// The metadata key.
        key: &'static str,
        /// The value found.
        value: String,
    },
    /// The file's `forestall.table` is not the table it was read as.
    #[error("{path} holds table {found}, expected table {expected}")]
    WrongTable {
        /// The part file.
        path: PathBuf,
        /// Table named in the file.
        found: String,
        /// Table it was read as.
        expected: &'static str,
    },
    /// A required column is absent.
    #[error("{path} has no column {column}")]
    MissingColumn {
        /// The part file.
        path: PathBuf,
        /// The missing column.
        column: String,
    },
    /// A column has a different Arrow type than the schema says.
    #[error("column {column} of {path} has type {found}, expected {expected}")]
    WrongType {
        /// The part file.
        path: PathBuf,
        /// The column.
        column: String,
        /// Type from [`schema`](super::schema).
        expected: DataType,
        /// Type in the file.
        found: DataType,
    },
    /// A column that must not contain nulls does.
    #[error("column {column} of {path} contains nulls")]
    UnexpectedNull {
        /// The part file.
        path: PathBuf,
        /// The column.
        column: String,
    },
    /// A value cannot be decoded (e.g. an unknown `action` name).
    #[error("column {column} of {path} has invalid value {value:?}")]
    BadValue {
        /// The part file.
        path: PathBuf,
        /// The column.
        column: String,
        /// The offending value.
        value: String,
    },
    /// A row's `iterations.test_metrics` is not a JSON object of numbers.
    #[error("column test_metrics of {path}, row {row} (iteration {iteration}): {value:?} is not a JSON object of numbers: {reason}")]
    BadMetrics {
        /// The part file.
        path: PathBuf,
        /// The row, counted from 0 in file order.
        row: usize,
        /// The row's iteration.
        iteration: u64,
        /// The offending value.
        value: String,
        /// What is wrong with it, and where in it.
        reason: String,
    },
    /// The file's stamp disagrees with the other parts of the trace directory,
    /// or its `job_id` column disagrees with its `forestall.job_id` metadata.
    #[error("{path} has {key} {found:?}, expected {expected:?} (one trace directory holds the parts of one run)")]
    StampMismatch {
        /// The part file.
        path: PathBuf,
        /// What disagrees: a metadata key or the `job_id` column.
        key: &'static str,
        /// Value in this file.
        found: String,
        /// Value expected.
        expected: String,
    },
    /// The trace directory does not exist.
    #[error("trace directory {path} does not exist")]
    DirNotFound {
        /// The directory.
        path: PathBuf,
    },
    /// The directory has none of the table subdirectories.
    #[error("{path} is not a trace directory (it has no units/, workers/ or iterations/)")]
    NotATraceDir {
        /// The directory.
        path: PathBuf,
    },
    /// A part file the writer would create already exists: each writer needs a
    /// fresh directory or its own process number.
    #[error("trace part {path} already exists (write each run to a fresh directory)")]
    PartExists {
        /// The existing part file.
        path: PathBuf,
    },
}

/// "2 and 3", "2, 3 and 4".
fn list_versions(versions: &[u32]) -> String {
    match versions.split_last() {
        None => "none".to_owned(),
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => {
            let rest: Vec<String> = rest.iter().map(u32::to_string).collect();
            format!("{} and {last}", rest.join(", "))
        }
    }
}

impl TraceError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> TraceError {
        let path = path.into();
        move |source| TraceError::Io { path, source }
    }

    pub(crate) fn parquet(path: impl Into<PathBuf>) -> impl FnOnce(ParquetError) -> TraceError {
        let path = path.into();
        move |source| TraceError::Parquet { path, source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_listed_in_words() {
        assert_eq!(list_versions(&[]), "none");
        assert_eq!(list_versions(&[3]), "3");
        assert_eq!(list_versions(&[2, 3]), "2 and 3");
        assert_eq!(list_versions(&[2, 3, 4]), "2, 3 and 4");
    }

    #[test]
    fn the_error_stays_small() {
        // Errors that wrap it (run, bench) must stay under clippy's
        // `result_large_err` limit of 128 bytes.
        assert!(
            std::mem::size_of::<TraceError>() <= 96,
            "{}",
            std::mem::size_of::<TraceError>()
        );
    }
}
