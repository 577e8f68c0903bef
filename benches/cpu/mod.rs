//! What the CNN cost benches share: the images, a thread's CPU clock,
//! settings from the environment, and the median.

use std::path::PathBuf;

use forestall::workload::cnn::CnnClassifier;
use forestall::workload::ClassWeighting;

/// PneumoniaMNIST from `DATA` (default `data/pneumoniamnist.npz`, as
/// `forestall data fetch pneumonia` writes it) and its path; exits 2 naming
/// `bench` when it cannot be read.
pub fn load_cnn(bench: &str) -> (CnnClassifier, PathBuf) {
    let data = std::env::var("DATA").map_or_else(
        |_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/pneumoniamnist.npz"),
        PathBuf::from,
    );
    match CnnClassifier::load(&data, ClassWeighting::Balanced) {
        Ok(cnn) => (cnn, data),
        Err(e) => {
            eprintln!(
                "{bench}: {e}\n(import the images first: `forestall data fetch pneumonia`, or set DATA)"
            );
            std::process::exit(2);
        }
    }
}

/// This thread's CPU time, ms: what a call cost, whatever else the cores
/// ran meanwhile.
pub fn thread_cpu_ms() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as f64 * 1e3 + ts.tv_nsec as f64 / 1e6
}

/// The environment's `key` as a number, else `default`.
pub fn env_or(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The median of `values` (sorted in place; NaN when empty).
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}
