//! The synthetic worker history both benches predict from.

/// Workers in the synthetic history.
pub const WORKERS: u32 = 64;

/// Iterations of history.
pub const ITERATIONS: u64 = 50;

/// Worker `w`'s time per unit in iteration `t`, relative to the median: every
/// 8th worker straggles (3×) on every other iteration, the rest wobble by a
/// few percent.
pub fn ratio(w: u32, t: u64) -> f64 {
    let wobble = 1.0 + 0.02 * (((u64::from(w) * 31 + t * 17) % 7) as f64 - 3.0);
    if w.is_multiple_of(8) && t % 2 == 1 {
        3.0
    } else {
        wobble
    }
}
