//! Runs you can find and compare: the catalogue of run and bench directories
//! under a folder ([`catalogue`]), where each run came from ([`origin`]), and
//! runs side by side with their curves overlaid ([`compare`]).

pub mod catalogue;
pub mod compare;
pub mod origin;

pub use catalogue::{list_runs, RunEntry, RunState};
pub use compare::{compare_runs, Comparison};
pub use origin::{RunOrigin, ORIGIN_FILE};

/// Errors of the run catalogue and of comparisons.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunsError {
    /// A directory to list does not exist or is not a directory.
    #[error("{path} is not a directory")]
    NotADirectory {
        /// The path.
        path: std::path::PathBuf,
    },
    /// A directory given as a run is not one.
    #[error(
        "{path} is not a run directory (it has no plan.json or summary.json; \
         `forestall runs` lists the runs)"
    )]
    NotARun {
        /// The path.
        path: std::path::PathBuf,
    },
    /// A directory could not be read.
    #[error("cannot read {path}")]
    Io {
        /// The path.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A run's trace could not be read.
    #[error("cannot read the trace of {path}")]
    Trace {
        /// The run.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: crate::trace::TraceError,
    },
    /// A plot could not be drawn.
    #[error("cannot draw the {what} plot: {message}")]
    Plot {
        /// Which plot.
        what: String,
        /// Why.
        message: String,
    },
}
