//! Integration tests: one binary, themed modules.

mod analyze;
mod bench;
mod bench_peers;
mod bound;
mod cli;
mod cluster;
mod common;
mod detect;
mod docs;
mod fetch;
mod fuzz;
mod import;
mod interop;
mod layout;
mod mf;
mod policies;
mod predictor;
mod proactive;
mod report;
mod resume;
mod runs;
mod trace;
mod training;
mod usage;
mod whatif;
mod workloads;
