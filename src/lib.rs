//! forestall trains models data-parallel on timely dataflow and keeps stragglers
//! from setting the pace.
//!
//! # Architecture
//!
//! The modules follow the data flow of a job:
//!
//! 1. [`spec`]: a job file as written (`JobSpec`, TOML) is validated into a
//!    `JobPlan` with every default applied and every path resolved.
//! 2. [`data`]: the dataset is read, featurised, cut into partitions, and each
//!    iteration's sampled rows of a partition are cut into work units.
//! 3. [`inject`]: the straggler schedule, a pure function of
//!    (seed, pattern, worker, iteration, time).
//! 4. [`run`]: the timely dataflow. One training iteration is one timely epoch;
//!    compute operators process one unit per activation, gradients travel to
//!    parameter-shard owners that reduce them in partition order.
//! 5. [`workload`]: what a model computes (logistic regression, softmax, the CNN) and the per-coordinate
//!    Adam optimiser that shard owners step.
//! 6. [`trace`]: the timing records and their Parquet part files.
//! 7. [`report`]: summaries for people (text) and machines (JSON lines).
//! 8. [`bench`]: benchmark pipelines: sweeps of jobs, raw results in Parquet,
//!    and a report that records the command, git revision and machine.
//! 9. [`import`]: real public traces turned into the trace schema.
//! 10. [`predict`]: straggler predictors over worker histories, and their scores.
//! 11. [`whatif`]: the policies' agents replayed over recorded timings.
//! 12. [`cli`]: the `forestall` command line.
#![warn(missing_docs)]
#![deny(rustdoc::broken_intra_doc_links)]

pub mod analyze;
pub mod bench;
pub mod checkpoint;
pub mod cli;
pub mod data;
pub mod fsutil;
pub mod import;
pub mod inject;
pub mod ops;
pub mod policy;
pub mod predict;
pub mod report;
pub mod rng;
pub mod run;
pub mod spec;
pub mod stats;
pub mod trace;
pub mod whatif;
pub mod workload;

/// The README's code blocks, compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
