//! Pinning a run to CPUs, as `taskset -c` does: a sweep's runs and a peer's
//! script with `cpus = "0"` compute on CPU 0 only, so a throughput comparison
//! is on equal cores.
//!
//! The calling thread's affinity is set for the span of one run and put back
//! after it: the threads a run starts (timely's workers, the sink, the
//! evaluator) and the processes it spawns (a peer's Python, a launched job's
//! processes) inherit it.

/// CPU indices from a list as `taskset -c` takes it: `"0"`, `"0,2"`, `"0-3"`,
/// `"0-1,4"`; sorted, without repeats.
pub fn parse_cpus(list: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in list.split(',').map(str::trim) {
        let index = |s: &str| {
            let c = s.trim().parse::<usize>().map_err(|_| {
                format!("'{list}' is not a CPU list (e.g. \"0\", \"0,1\", \"0-3\")")
            })?;
            if c >= MAX_CPU {
                return Err(format!(
                    "'{list}': CPU {c} is beyond the {MAX_CPU} a CPU set holds"
                ));
            }
            Ok(c)
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (index(a)?, index(b)?);
                if a > b {
                    return Err(format!("'{list}': the range {a}-{b} is empty"));
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(index(part)?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// `[0, 1]` as `"0,1"`.
pub fn cpu_list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Checks that this process may run on every CPU of `cpus`.
pub fn check_available(cpus: &[usize]) -> Result<(), String> {
    let available = available_cpus();
    let missing: Vec<usize> = cpus
        .iter()
        .copied()
        .filter(|c| !available.contains(c))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "CPU {} not available to this process (it may run on {})",
            cpu_list(&missing),
            cpu_list(&available)
        ))
    }
}

/// Highest CPU count a list may name (the size of the kernel's `cpu_set_t`).
const MAX_CPU: usize = 1024;

/// The CPUs this process may run on.
pub fn available_cpus() -> Vec<usize> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: a zeroed cpu_set_t is a valid empty set; the call fills it.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: pid 0 is the calling thread; `set` is valid for its size.
        let rc =
            unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
        if rc == 0 {
            // SAFETY: CPU_ISSET reads the set within its size.
            return (0..MAX_CPU)
                .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
                .collect();
        }
    }
    (0..std::thread::available_parallelism().map_or(1, usize::from)).collect()
}

/// The calling thread pinned to some CPUs until dropped, when its former
/// affinity is put back.
pub struct Pinned {
    #[cfg(target_os = "linux")]
    previous: libc::cpu_set_t,
}

impl Pinned {
    /// Pins the calling thread to `cpus`.
    #[cfg(target_os = "linux")]
    pub fn to(cpus: &[usize]) -> std::io::Result<Self> {
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: zeroed cpu_set_t values are valid empty sets; the calls read
        // and fill them within their size, for the calling thread (pid 0).
        unsafe {
            let mut previous: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, size, &mut previous) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &c in cpus {
                libc::CPU_SET(c, &mut set);
            }
            if libc::sched_setaffinity(0, size, &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(Self { previous })
        }
    }

    /// Pinning needs Linux here.
    #[cfg(not(target_os = "linux"))]
    pub fn to(_cpus: &[usize]) -> std::io::Result<Self> {
        Err(std::io::Error::other("pinning to CPUs needs Linux"))
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        // SAFETY: `previous` is the set read when pinning, for this thread.
        unsafe {
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &self.previous);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_as_taskset_reads_them() {
        assert_eq!(parse_cpus("0"), Ok(vec![0]));
        assert_eq!(parse_cpus("1,0,1"), Ok(vec![0, 1]));
        assert_eq!(parse_cpus("0-2, 5"), Ok(vec![0, 1, 2, 5]));
        for bad in ["", "a", "1-", "-1", "3-1", "0,,1", "5000"] {
            assert!(parse_cpus(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_pinned_thread_runs_where_it_was_pinned_and_gets_its_cpus_back() {
        std::thread::spawn(|| {
            let before = available_cpus();
            let first = before[0];
            {
                let _pin = Pinned::to(&[first]).expect("pin");
                assert_eq!(available_cpus(), vec![first]);
                // a thread started meanwhile inherits the pinning
                let inner = std::thread::spawn(available_cpus).join().expect("thread");
                assert_eq!(inner, vec![first]);
            }
            assert_eq!(available_cpus(), before);
        })
        .join()
        .expect("thread");
    }

    #[test]
    fn unavailable_cpus_are_named() {
        let err = check_available(&[MAX_CPU - 1]).expect_err("no such CPU here");
        assert!(err.contains(&format!("CPU {}", MAX_CPU - 1)), "{err}");
    }
}
