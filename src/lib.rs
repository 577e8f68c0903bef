//! forestall trains models data-parallel on timely dataflow and keeps stragglers
//! from setting the pace.
//!
//! # Architecture
//!
//! A job file becomes a plan, the plan a timely run, the run timing traces,
//! and the traces analyses, replays and reports. The modules are listed in
//! that data-flow order; each uses only modules listed before it (a test
//! checks that the module graph has no cycles and that this list follows it).
//!
//! 1. [`rng`]: counter-based randomness, every draw a pure function of its key.
//! 2. [`malloc`]: glibc's allocator told to keep what gradient calls free.
//! 3. [`fsutil`]: atomic writes, run-directory names and the hex of digests.
//! 4. [`columns`]: Arrow columns read whatever their width or string encoding.
//! 5. [`stats`]: median, mean and nearest-rank quantiles.
//! 6. [`detect`]: the laggard rule, which worker held an iteration up.
//! 7. [`inject`]: the straggler schedule, a pure function of
//!    (seed, pattern, worker, iteration, time).
//! 8. [`trace`]: the timing records and their Parquet part files.
//! 9. [`data`]: datasets read, featurised, cut into partitions and work units.
//! 10. [`workload`]: what a model computes (logistic regression, softmax, the
//!     CNN, matrix factorisation, LDA) and the optimisers that shard owners
//!     step.
//! 11. [`predict`]: straggler predictors over worker histories, and their scores.
//! 12. [`policy`]: mitigation policies as pure decisions over what is known.
//! 13. [`pipeline`]: model-parallel training's pure parts: schedules (GPipe,
//!     1F1B), their bubble, the stage layout, the best cut of the layers
//!     into stages and `rebalance-stages`' placements.
//! 14. [`spec`]: a job file as written (`JobSpec`, TOML) validated into a
//!     `JobPlan` with every default applied and every path resolved.
//! 15. [`checkpoint`]: what a job needs to continue from an iteration.
//! 16. [`ops`]: operation-level traces and their what-if replay (also a
//!     pipeline run's, with its layers cut elsewhere).
//! 17. [`run`]: the timely dataflow. One training iteration is one timely
//!     epoch; compute operators process one unit per activation (pipeline
//!     stage operators one pass), gradients travel to parameter-shard
//!     owners that reduce them in partition order.
//! 18. [`import`]: real public traces turned into the trace schema.
//! 19. [`analyze`]: offline trace analysis, which worker is slow, when and why.
//! 20. [`whatif`]: the policies' agents replayed over recorded timings.
//! 21. [`report`]: summaries for people (text, HTML) and machines (JSON lines).
//! 22. [`bench`](mod@bench): benchmark pipelines: sweeps of jobs, raw results in Parquet,
//!     and a report that records the command, git revision and machine.
//! 23. [`runs`]: the runs and benches under a directory, listed and compared.
//! 24. [`tune`]: configurations of a job raced as ordinary runs (successive
//!     halving on a validation slice), ranked and reported.
//! 25. [`cli`]: the `forestall` command line.
#![warn(missing_docs)]
#![deny(rustdoc::broken_intra_doc_links)]

pub mod analyze;
pub mod bench;
pub mod checkpoint;
pub mod cli;
pub mod columns;
pub mod data;
pub mod detect;
pub mod fsutil;
pub mod import;
pub mod inject;
pub mod malloc;
pub mod ops;
pub mod pipeline;
pub mod policy;
pub mod predict;
pub mod report;
pub mod rng;
pub mod run;
pub mod runs;
pub mod spec;
pub mod stats;
pub mod trace;
pub mod tune;
pub mod whatif;
pub mod workload;

/// The README's code blocks, compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
