//! A description of the machine a benchmark ran on, for its README.

use std::process::Command;

/// Where and with what a benchmark ran.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Machine {
    /// Host name.
    pub host: String,
    /// CPU model.
    pub cpu: String,
    /// Logical cores available to this process.
    pub cores: usize,
    /// Total memory, GiB.
    pub memory_gib: f64,
    /// `rustc --version`.
    pub rustc: String,
    /// Operating system.
    pub os: String,
}

fn first_line(path: &str, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split(':').nth(1))
        .map(|v| v.trim().to_owned())
}

/// `t` as `YYYY-MM-DD HH:MM:SS` (UTC): when a bench or a run started.
pub fn utc_time(t: std::time::SystemTime) -> String {
    let s = crate::fsutil::utc_stamp(t);
    format!(
        "{}-{}-{} {}:{}:{}",
        &s[0..4],
        &s[4..6],
        &s[6..8],
        &s[9..11],
        &s[11..13],
        &s[13..15]
    )
}

/// This machine's CPU model (`model name` of /proc/cpuinfo), or "unknown".
pub fn cpu_model() -> String {
    first_line("/proc/cpuinfo", "model name").unwrap_or_else(|| "unknown".into())
}

/// Describes this machine.
pub fn this_machine() -> Machine {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".into());
    let memory_gib = first_line("/proc/meminfo", "MemTotal")
        .and_then(|v| {
            v.split_whitespace()
                .next()
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0 / 1024.0);
    let rustc = Command::new("rustc")
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".into());
    Machine {
        host,
        cpu: cpu_model(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        memory_gib,
        rustc,
        os: format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
    }
}
