//! Integration tests: one binary, themed modules.

mod cli;
mod common;
mod detect;
mod trace;
mod training;
