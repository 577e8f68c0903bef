//! Integration tests: one binary, themed modules.

mod cli;
mod common;
mod detect;
mod interop;
mod trace;
mod training;
