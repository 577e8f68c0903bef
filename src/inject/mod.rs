//! Straggler injection: which worker is how much slower, when.
//!
//! forestall reproduces the straggler patterns of FlexRR (Harlap et al., "Addressing
//! the straggler problem for iterative convergent parallel ML", SoCC 2016), so that
//! mitigation policies can be compared on the same, controlled adversity. A
//! [`Pattern`] says what kind of adversity; a [`StragglerSchedule`] turns a pattern,
//! a seed and a worker count into a slowdown factor for every
//! (worker, iteration, time).
//!
//! # Patterns
//!
//! | name | variant | what slows down |
//! |---|---|---|
//! | `none` | [`Pattern::None`] | nothing: the Ideal reference |
//! | `slow-worker` | [`Pattern::SlowWorker`] | each worker, each iteration, independently with probability p, runs (1 + delay%) slower |
//! | `disrupted-machine` | [`Pattern::DisruptedMachine`] | time is cut into windows; in each window, with probability p, every worker of one machine runs (1 + delay%) slower for the whole window: work inside the window goes at 1 / (1 + delay%) of its speed, work outside it at full speed ([`Stretch`]) |
//! | `power-law` | [`Pattern::PowerLaw`] | each (worker, iteration) draws a slowdown x ≥ 1 from p(x) ∝ x^−α (FlexRR used α = 4, 7, 11), capped |
//! | `persistent` | [`Pattern::Persistent`] | a fixed set of workers is slower in every iteration, and/or carries a larger share of the data (FlexRR's "50 % of the workers carry 75 % of the work") |
//! | `slow-link` | [`Pattern::SlowLink`] | not a compute slowdown: each worker, each iteration, with probability p, sends what leaves its host (its gradients, and the next version of a shard it owns) through a link of `link_mbps` ([`StragglerSchedule::link_mbps`]) |
//!
//! A slowdown applies to the work a worker does: with factor f, each of its work
//! units takes f times as long. Moving work away from a slow worker therefore helps
//! exactly as it would on a genuinely slow machine. Only `disrupted-machine` depends
//! on wall-clock time (microseconds since the job started); the others depend on the
//! iteration only. [`StragglerSchedule::stretch`] says how long a unit takes: f times
//! its undelayed duration for a slowdown keyed on the iteration, and for
//! `disrupted-machine` only the part of it that falls inside a disrupted window
//! runs slow. For `disrupted-machine`, [`CpuDisruptor`] can also produce the
//! slowdown for real by burning CPU, as FlexRR's disruptor process did.
//!
//! # The "pure function" contract
//!
//! [`StragglerSchedule::slowdown`] is a pure function of
//! (seed, pattern, worker count, worker, iteration, time). It keeps no state and
//! draws every random number from [`crate::rng`] with a key built from those
//! arguments and a per-pattern stream tag, so:
//!
//! - every policy sees the same adversity for the same seed, whatever it does with
//!   the work, and in whatever order it asks;
//! - a what-if replay of a trace, a unit test, and a live timely run agree;
//! - the answer is always finite and at least 1.0, even for extreme-but-valid knobs
//!   (factors are capped at [`MAX_SLOWDOWN`]).
//!
//! Knob ranges (probabilities in [0, 1], α > 1, …) are validated by the job-spec
//! module; this module only guarantees a sane answer for whatever it is given.
//!
//! # Examples
//!
//! ```
//! use forestall::inject::{Pattern, StragglerSchedule};
//!
//! let pattern = Pattern::SlowWorker { probability: 1.0, delay_percent: 50.0 };
//! let schedule = StragglerSchedule::new(7, pattern, 4);
//! assert_eq!(schedule.slowdown(2, 10, 0), 1.5);
//! assert_eq!(schedule.pattern().name(), "slow-worker");
//! ```

pub mod disruptor;
mod pattern;
mod schedule;
pub mod shaper;
pub mod stretch;

pub use disruptor::CpuDisruptor;
pub use pattern::Pattern;
pub use schedule::{StragglerSchedule, MAX_SLOWDOWN};
pub use stretch::Stretch;
