//! glibc's allocator, told to keep the memory a gradient call frees.
//!
//! A CNN gradient call allocates and frees buffers of megabytes (the
//! gathered convolution inputs are about 10 MB at 16 images). With glibc's
//! defaults, a worker thread's arena hands such blocks back to the kernel as
//! they are freed (`mmap`/`munmap` above the threshold, and trimming of the
//! arena's top), so the next call touches fresh pages and the kernel zeroes
//! every one of them: at W = 2 native on the CNN each worker took about
//! 640,000 page faults in 96 iterations, and an iteration took 36 ms where
//! the same calls take 21 ms once the memory is kept (`docs/workloads.md`,
//! "Memory the calls reuse").
//!
//! [`keep_freed_memory`] raises the thresholds once, before any thread
//! starts: blocks under 32 MiB come from the arenas, an arena keeps up to
//! 1 GiB free at its top, and grows 64 MiB at a time. A process then holds
//! the peak of what its calls used, as PyTorch's caching allocators do. A
//! user who sets `GLIBC_TUNABLES` with `glibc.malloc` settings keeps them:
//! nothing is changed then. On other C libraries this does nothing. The
//! benches in `benches/` call it too, so they measure what the binary runs.

/// Blocks at least this large are mapped on their own (glibc's maximum for
/// this setting on 64-bit machines).
pub const MMAP_THRESHOLD: usize = 32 << 20;
/// Free memory an arena keeps at its top before returning it.
pub const TRIM_THRESHOLD: usize = 1 << 30;
/// What an arena asks for beyond a request when it grows.
pub const TOP_PAD: usize = 64 << 20;

/// What [`keep_freed_memory`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    /// The three thresholds are set.
    Set,
    /// `GLIBC_TUNABLES` names malloc settings: the user's stand.
    UserTunables,
    /// glibc refused one of them (its value is out of its range here).
    Refused,
    /// Not glibc: nothing to set.
    Unsupported,
}

/// Whether `tunables` (the value of `GLIBC_TUNABLES`) sets any of glibc's
/// malloc tunables.
pub fn names_malloc(tunables: &str) -> bool {
    tunables
        .split(':')
        .any(|t| t.trim_start().starts_with("glibc.malloc."))
}

/// Sets glibc's allocator to keep freed memory (see the module's page).
/// Call it first thing in `main`, before any thread is spawned.
pub fn keep_freed_memory() -> Setting {
    if std::env::var("GLIBC_TUNABLES").is_ok_and(|t| names_malloc(&t)) {
        return Setting::UserTunables;
    }
    set_thresholds()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set_thresholds() -> Setting {
    let to_int = |v: usize| libc::c_int::try_from(v).expect("the thresholds fit a C int");
    // SAFETY: mallopt only changes the allocator's parameters; called
    // before other threads exist, it races with no allocation.
    let ok = unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, to_int(MMAP_THRESHOLD)) == 1
            && libc::mallopt(libc::M_TRIM_THRESHOLD, to_int(TRIM_THRESHOLD)) == 1
            && libc::mallopt(libc::M_TOP_PAD, to_int(TOP_PAD)) == 1
    };
    if ok {
        Setting::Set
    } else {
        Setting::Refused
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_thresholds() -> Setting {
    Setting::Unsupported
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_malloc_tunables_are_recognised() {
        assert!(names_malloc("glibc.malloc.trim_threshold=1"));
        assert!(names_malloc(
            "glibc.cpu.hwcaps=-AVX2:glibc.malloc.mmap_threshold=4096"
        ));
        assert!(!names_malloc("glibc.cpu.hwcaps=-AVX2"));
        assert!(!names_malloc(""));
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn glibc_accepts_the_thresholds() {
        // Setting them again in a test process is harmless: the values are
        // the same whichever test sets them first.
        assert_eq!(set_thresholds(), Setting::Set);
    }
}
