//! A slow link made real: `slow-link` with `disruptor = "tc"` limits the
//! outgoing rate of a host's network interface with `tc`'s token bucket
//! filter (`tbf`) while the schedule says the host's link is slow, and
//! removes the limit otherwise. Each process of a job on hosts shapes its
//! own host's interface (the one holding its hostfile address), following
//! the iteration its first worker is in; the host's link is slow when the
//! schedule draws a slow link for that worker. Needs root (or
//! `CAP_NET_ADMIN`) on the host or in its network namespace.

use std::net::{IpAddr, ToSocketAddrs};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::StragglerSchedule;

/// How often the shaper looks at the iteration.
const POLL: Duration = Duration::from_millis(1);

/// Limits an interface's rate on a schedule until stopped; the limit is
/// removed on [`LinkShaper::stop`].
#[derive(Debug)]
pub struct LinkShaper {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<(), String>>>,
    device: String,
}

impl LinkShaper {
    /// Shapes the interface holding `address` (`host:port`, this process's
    /// hostfile line) as `schedule` draws for `worker`, in the iteration
    /// `iteration` holds. Fails naming the address when no interface holds
    /// it, and naming the command when `tc` cannot shape it.
    pub fn start(
        address: &str,
        schedule: StragglerSchedule,
        worker: u32,
        iteration: Arc<AtomicU64>,
    ) -> Result<Self, String> {
        let device = interface_of(address)?;
        // a stale limit of an earlier run goes, and `tc` is tried once here
        // so that a missing tool or permission is an error before training
        shape(&device, None)?;
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, dev) = (Arc::clone(&stop), device.clone());
        let thread = std::thread::Builder::new()
            .name("forestall-link-shaper".into())
            .spawn(move || {
                let (mut seen, mut limit) = (u64::MAX, None);
                while !flag.load(Ordering::Relaxed) {
                    let t = iteration.load(Ordering::Relaxed);
                    if t != seen {
                        seen = t;
                        let want = schedule.link_mbps(worker, t);
                        if want != limit {
                            shape(&dev, want)?;
                            limit = want;
                        }
                    }
                    std::thread::sleep(POLL);
                }
                Ok(())
            })
            .map_err(|e| format!("cannot start the link shaper: {e}"))?;
        Ok(Self {
            stop,
            thread: Some(thread),
            device,
        })
    }

    /// The interface it shapes.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// Stops shaping and removes the limit; an error of the shaper's (a
    /// `tc` that failed mid-run) is returned.
    pub fn stop(mut self) -> Result<(), String> {
        self.stop.store(true, Ordering::Relaxed);
        let ran = match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err("the link shaper panicked".into()),
            None => Ok(()),
        };
        let removed = shape(&self.device, None);
        ran.and(removed)
    }
}

impl Drop for LinkShaper {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.stop.store(true, Ordering::Relaxed);
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
            let _ = shape(&self.device, None);
        }
    }
}

/// Limits `device`'s outgoing rate to `mbps` Mbit/s, or removes the limit.
fn shape(device: &str, mbps: Option<f64>) -> Result<(), String> {
    let mut tc = Command::new("tc");
    match mbps {
        Some(mbps) => {
            let kbit = ((mbps * 1000.0).round() as u64).max(8);
            tc.args(["qdisc", "replace", "dev", device, "root", "tbf", "rate"])
                .arg(format!("{kbit}kbit"))
                .args(["burst", "32kbit", "latency", "1s"]);
        }
        None => {
            tc.args(["qdisc", "del", "dev", device, "root"]);
        }
    }
    let out = tc
        .output()
        .map_err(|e| format!("cannot run tc to shape {device}: {e} (install iproute2)"))?;
    let err = String::from_utf8_lossy(&out.stderr);
    // deleting a limit that is not there is fine
    let absent = mbps.is_none()
        && ["No such file", "Cannot find", "handle of zero"]
            .iter()
            .any(|m| err.contains(m));
    if out.status.success() || absent {
        Ok(())
    } else {
        Err(format!(
            "tc could not shape {device} ({}): {} (slow-link with disruptor = \"tc\" needs root \
             or CAP_NET_ADMIN)",
            mbps.map_or("remove the limit".to_owned(), |m| format!("{m} Mbit/s")),
            err.trim()
        ))
    }
}

/// The interface holding `address`'s host (`host:port` or `host`).
fn interface_of(address: &str) -> Result<String, String> {
    let host = address.rsplit_once(':').map_or(address, |(h, _)| h);
    let ip: IpAddr = match host.parse() {
        Ok(ip) => ip,
        Err(_) => (host, 0)
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .map(|a| a.ip())
            .ok_or_else(|| format!("cannot resolve {host} to find its interface"))?,
    };
    let out = Command::new("ip")
        .args(["-o", "addr", "show"])
        .output()
        .map_err(|e| format!("cannot run ip to find the interface of {host}: {e}"))?;
    device_holding(&String::from_utf8_lossy(&out.stdout), ip).ok_or_else(|| {
        format!("no interface of this host holds {ip} (its hostfile line): nothing to shape")
    })
}

/// The device of the `ip -o addr show` line holding `ip`.
fn device_holding(listing: &str, ip: IpAddr) -> Option<String> {
    listing.lines().find_map(|line| {
        let words: Vec<&str> = line.split_whitespace().collect();
        let at = words.iter().position(|w| *w == "inet" || *w == "inet6")?;
        let held: IpAddr = words.get(at + 1)?.split('/').next()?.parse().ok()?;
        // `ip` writes a veth as `name@peer`
        (held == ip).then(|| words[1].split('@').next().unwrap_or(words[1]).to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interface_is_the_one_holding_the_address() {
        let listing = "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever\n\
                       3: fsh1x0a1@if4    inet 10.77.0.2/24 scope global fsh1x0a1\\       valid_lft forever\n\
                       3: fsh1x0a1    inet6 fe80::1/64 scope link \\       valid_lft forever\n";
        let at = |ip: &str| device_holding(listing, ip.parse().expect("ip"));
        assert_eq!(at("10.77.0.2").as_deref(), Some("fsh1x0a1"));
        assert_eq!(at("127.0.0.1").as_deref(), Some("lo"));
        assert_eq!(at("10.77.0.9"), None);
        assert!(interface_of("10.255.255.254:1")
            .expect_err("no host holds it")
            .contains("no interface of this host holds 10.255.255.254"));
    }
}
