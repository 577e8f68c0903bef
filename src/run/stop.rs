//! Stopping a job from outside (SIGTERM, as Slurm preempts, or Ctrl-C's
//! SIGINT) at an iteration every process agrees on, with a checkpoint there,
//! so that the scheduler's `--requeue` (or `--resume`) continues it.
//!
//! A process that is asked to stop tells worker 0 (its `Ready` progress
//! carries the request). When shard 0's owner, worker 0, next sends out a
//! parameter version `v`, it fixes the end at `E = v + 1 + slack` and every
//! shard of every later version carries it, as does every gradient slice
//! computed with it. That `E` is late enough for everyone:
//!
//! - no worker has begun iteration `E`: before version `v` exists a worker
//!   can begin at most iteration `v − 1 + slack`, and beginning a later one
//!   needs version `v`, which says where to stop;
//! - every shard owner knows `E` before it reduces iteration `E − 1` (and so
//!   checkpoints its shard of version `E`): that iteration's slices were
//!   computed by workers that held version `v` and carry `E`.
//!
//! So every process ends at version `E` and checkpoints it, as a run with
//! `--stop-after E` would.
//!
//! A run hung inside an iteration never reaches `E`: a watchdog ([`watch`])
//! ends a process that was asked to stop and has trained no iteration for
//! its grace, [`GRACE_FLOOR_S`] seconds (`--stop-grace`) or [`GRACE_ITERATIONS`]
//! times the longest iteration so far, whichever is longer, as a second
//! signal would.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

/// Exit code of a process that stopped on SIGTERM or SIGINT after
/// checkpointing (the shell's code for "terminated by SIGTERM").
pub const STOPPED: u8 = 143;

/// Set by the signal handler.
static SIGNALLED: AtomicBool = AtomicBool::new(false);
/// The signal that asked for the stop (SIGTERM or SIGINT).
static SIGNAL: AtomicI32 = AtomicI32::new(0);
/// Set while a stop can still be taken to an iteration boundary; otherwise
/// SIGTERM ends the process at once.
static ARMED: AtomicBool = AtomicBool::new(false);
/// When the first SIGTERM came (monotonic clock, ms).
static FIRST_MS: AtomicU64 = AtomicU64::new(0);
/// A second SIGTERM at least this long after the first ends the process at
/// once; one sooner is the same request delivered twice (Slurm signals a
/// launcher's processes directly as well as through the launcher).
const AGAIN_AFTER_MS: u64 = 2_000;

/// Seconds a process asked to stop may go without training an iteration
/// before it stops at once, unless [`GRACE_ITERATIONS`] of its iterations
/// took longer (Slurm's default `KillWait`, after which it sends SIGKILL).
pub const GRACE_FLOOR_S: u64 = 30;
/// Iterations as long as its longest so far that a process asked to stop
/// may go without training one: a straggler may slow the next one several
/// times (three were too few for iterations of about a second under
/// slow-worker 300 %: the stop took four).
pub const GRACE_ITERATIONS: u64 = 10;
/// The grace's floor this process keeps, s (`--stop-grace`).
static FLOOR_S: AtomicU64 = AtomicU64::new(GRACE_FLOOR_S);
/// When this process last trained an iteration (or began to), ms.
static BOUNDARY_MS: AtomicU64 = AtomicU64::new(0);
/// The longest time between two of its boundaries so far, ms.
static LONGEST_MS: AtomicU64 = AtomicU64::new(0);
/// Set once the watchdog runs.
static WATCHING: AtomicBool = AtomicBool::new(false);

/// Sends SIGTERM to process `pid` (the launcher passes a stop on).
#[cfg(unix)]
pub fn forward(pid: u32) {
    // SAFETY: kill(2) with a child's pid.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGTERM);
    }
}

#[cfg(not(unix))]
pub fn forward(_pid: u32) {}

/// Whether this process received SIGTERM or SIGINT.
pub fn signalled() -> bool {
    SIGNALLED.load(Ordering::Relaxed)
}

/// The name of the signal that asked this process to stop: `SIGINT` for
/// Ctrl-C, else `SIGTERM`.
pub fn signal_name() -> &'static str {
    #[cfg(unix)]
    if SIGNAL.load(Ordering::Relaxed) == libc::SIGINT {
        return "SIGINT";
    }
    "SIGTERM"
}

/// From now on the first SIGTERM asks for a stop at the next iteration
/// boundary; a second one, 2 s or more later, ends the process at once
/// (exit [`STOPPED`]).
/// Before this (connecting, loading data) SIGTERM ends the process at once:
/// nothing trained would be lost.
pub fn arm() {
    ARMED.store(true, Ordering::SeqCst);
}

/// The monotonic clock, ms (async-signal-safe).
#[cfg(unix)]
fn now_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime is async-signal-safe; `ts` is valid.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// Sets the grace's floor of [`watch`], s (`--stop-grace`; by default
/// [`GRACE_FLOOR_S`]).
pub fn set_grace_floor(seconds: u64) {
    FLOOR_S.store(seconds, Ordering::SeqCst);
}

/// An iteration closed: a worker of this process installed the parameters
/// it made (every process's workers do, while only process 0's sink hears
/// of each iteration). The watchdog measures from here.
pub fn boundary() {
    #[cfg(unix)]
    {
        let now = now_ms();
        let last = BOUNDARY_MS.swap(now, Ordering::SeqCst);
        if last > 0 {
            LONGEST_MS.fetch_max(now.saturating_sub(last), Ordering::SeqCst);
        }
    }
}

/// How long a process asked to stop `since_ms` ago, whose last boundary was
/// `boundary_ms` ago, may still wait for its next one, ms (0: no longer):
/// its grace, the floor or [`GRACE_ITERATIONS`] of its longest iterations,
/// from the later of the two.
pub fn grace_left_ms(since_ms: u64, boundary_ms: u64, longest_ms: u64, floor_s: u64) -> u64 {
    let grace = (floor_s * 1000).max(GRACE_ITERATIONS * longest_ms);
    grace.saturating_sub(since_ms.min(boundary_ms))
}

/// Starts the watchdog of a training process (once): once the process is
/// asked to stop, it ends it with [`STOPPED`] when no iteration is trained
/// for its grace (see [`grace_left_ms`]): a run hung inside an iteration
/// would never reach the iteration its stop waits for. What the iteration
/// in flight would have written is lost, as on a second signal; the last
/// checkpoint stands.
pub fn watch() {
    #[cfg(unix)]
    {
        if WATCHING.swap(true, Ordering::SeqCst) {
            return;
        }
        BOUNDARY_MS.store(now_ms(), Ordering::SeqCst);
        let spawned = std::thread::Builder::new()
            .name("forestall-stop-watch".into())
            .spawn(|| loop {
                std::thread::sleep(std::time::Duration::from_millis(200));
                if !signalled() {
                    continue;
                }
                let now = now_ms();
                let since = now.saturating_sub(FIRST_MS.load(Ordering::SeqCst));
                let boundary = now.saturating_sub(BOUNDARY_MS.load(Ordering::SeqCst));
                let longest = LONGEST_MS.load(Ordering::SeqCst);
                let floor = FLOOR_S.load(Ordering::SeqCst);
                if grace_left_ms(since, boundary, longest, floor) == 0 {
                    let text = format!(
                        "forestall: {}: no iteration trained in the last {:.1} s; stopping now \
                         (the iteration in flight is lost; the last checkpoint stands)\n",
                        signal_name(),
                        since.min(boundary) as f64 / 1000.0
                    );
                    // SAFETY: write(2) on stderr, then _exit: other threads
                    // may hold locks this one must not wait for.
                    unsafe {
                        libc::write(2, text.as_ptr().cast(), text.len());
                        libc::_exit(i32::from(STOPPED));
                    }
                }
            });
        if spawned.is_err() {
            WATCHING.store(false, Ordering::SeqCst);
        }
    }
}

/// Installs the handler of SIGTERM and SIGINT (once a process; `forestall
/// run` calls it). Ctrl-C stops as a scheduler's SIGTERM does: at the next
/// iteration boundary, with a checkpoint (in a terminal it reaches a
/// launcher and its processes alike, which then stop together).
#[cfg(unix)]
pub fn install_handler() {
    // SAFETY: the handler only touches atomics and calls `write` and
    // `_exit`, which are async-signal-safe.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal as *const () as usize;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut());
        libc::sigaction(libc::SIGINT, &action, std::ptr::null_mut());
    }
}

#[cfg(not(unix))]
pub fn install_handler() {}

#[cfg(unix)]
extern "C" fn on_signal(signal: libc::c_int) {
    let say = |text: &[u8]| {
        // SAFETY: write(2) on stderr with a valid buffer.
        unsafe {
            libc::write(2, text.as_ptr().cast(), text.len());
        }
    };
    let now_ms = now_ms();
    if SIGNALLED.load(Ordering::SeqCst) {
        if now_ms < FIRST_MS.load(Ordering::SeqCst) + AGAIN_AFTER_MS {
            return;
        }
    } else if ARMED.load(Ordering::SeqCst) {
        FIRST_MS.store(now_ms, Ordering::SeqCst);
        SIGNAL.store(signal, Ordering::SeqCst);
        SIGNALLED.store(true, Ordering::SeqCst);
        say(match signal {
            libc::SIGINT => {
                b"forestall: SIGINT: stopping at the next iteration boundary with a checkpoint \
                  (Ctrl-C again, 2 s or more later, stops at once)\n"
            }
            _ => {
                b"forestall: SIGTERM: stopping at the next iteration boundary with a checkpoint \
                  (SIGTERM again, 2 s or more later, stops at once)\n"
            }
        });
        return;
    }
    say(match signal {
        libc::SIGINT => b"forestall: SIGINT: stopping now\n",
        _ => b"forestall: SIGTERM: stopping now\n",
    });
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(i32::from(STOPPED)) }
}

/// One process's view of its job's stop: whether a stop was asked, and the
/// final version once worker 0 fixed it.
#[derive(Debug, Default)]
pub struct Stop {
    /// A worker of another process asked (worker 0's process).
    asked: AtomicBool,
    /// The agreed final version; 0 while none is.
    at: AtomicU64,
}

impl Stop {
    /// Whether this process was asked to stop: by SIGTERM, or, in worker 0's
    /// process, by another process.
    pub fn asked(&self) -> bool {
        self.asked.load(Ordering::Relaxed) || signalled()
    }

    /// Asks for a stop (the request reached worker 0, or a test asks).
    pub fn ask(&self) {
        self.asked.store(true, Ordering::Relaxed);
    }

    /// The agreed final version, if one is.
    pub fn at(&self) -> Option<u64> {
        match self.at.load(Ordering::Acquire) {
            0 => None,
            e => Some(e),
        }
    }

    /// Takes `end` as the agreed final version; true the first time (the
    /// caller tells the sink). Every process agrees on one `end`, so a later
    /// call with another is a bug.
    pub fn agree(&self, end: u64) -> bool {
        debug_assert!(end > 0);
        match self
            .at
            .compare_exchange(0, end, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(was) => {
                debug_assert_eq!(was, end, "every process agrees on one stop");
                false
            }
        }
    }

    /// Worker 0, sending out version `version` of a job that ends at `end`
    /// under `slack`: the final version to agree on now, if a stop is asked
    /// and none is agreed yet, and it comes before `end`.
    pub fn decide(&self, version: u64, slack: u64, end: u64) -> Option<u64> {
        let at = version + 1 + slack;
        (self.at().is_none() && self.asked() && at < end).then_some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grace_is_the_floor_or_ten_iterations_from_the_later_of_stop_and_boundary() {
        // asked 10 s ago, last boundary 12 s ago, iterations of 1 s: 20 s left
        assert_eq!(grace_left_ms(10_000, 12_000, 1_000, 30), 20_000);
        // a boundary since the stop: measured from it
        assert_eq!(grace_left_ms(10_000, 4_000, 1_000, 30), 26_000);
        // iterations of 20 s: ten of them
        assert_eq!(grace_left_ms(10_000, 12_000, 20_000, 30), 190_000);
        // spent
        assert_eq!(grace_left_ms(31_000, 40_000, 1_000, 30), 0);
        assert_eq!(grace_left_ms(3_000, 3_000, 0, 2), 0);
    }

    #[test]
    fn a_stop_is_decided_once_past_what_anyone_began() {
        let stop = Stop::default();
        assert_eq!(stop.decide(5, 0, 40), None, "nobody asked");
        stop.ask();
        assert_eq!(stop.decide(5, 0, 40), Some(6), "bsp: one iteration on");
        assert_eq!(stop.decide(5, 3, 40), Some(9), "ssp: past the slack");
        assert_eq!(stop.decide(38, 1, 40), None, "the run ends first");
        assert!(stop.agree(6));
        assert!(!stop.agree(6), "told once");
        assert_eq!(stop.at(), Some(6));
        assert_eq!(stop.decide(7, 0, 40), None, "decided already");
    }
}
