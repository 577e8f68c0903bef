//! This host's wall clock, as the processes of a job read it to share one
//! job clock: µs since the Unix epoch, and the `Instant` of such a time.

/// µs since the Unix epoch now, on this host's wall clock (shifted by
/// [`CLOCK_SHIFT_VAR`] when a test sets it).
pub fn unix_now_us() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64);
    (now + clock_shift_us()).max(0) as u64
}

/// A test's hook: µs (negative too) added to every reading of this
/// process's wall clock, as on a host whose clock is that far off. The
/// clock synchronisation is not told.
pub const CLOCK_SHIFT_VAR: &str = "FORESTALL_TEST_CLOCK_SHIFT_US";

fn clock_shift_us() -> i64 {
    static SHIFT: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *SHIFT.get_or_init(|| {
        std::env::var(CLOCK_SHIFT_VAR)
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    })
}

/// The `Instant` that corresponds to `epoch_us` on this host's wall clock
/// (clamped to now if the epoch lies in the future).
pub fn instant_of_epoch(epoch_us: u64) -> std::time::Instant {
    let now = std::time::Instant::now();
    let behind = unix_now_us().saturating_sub(epoch_us);
    now.checked_sub(std::time::Duration::from_micros(behind))
        .unwrap_or(now)
}
