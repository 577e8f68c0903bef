//! Several processes: timely's own cluster mode over TCP. A hostfile lists one
//! `host:port` per process; process `i` of N runs T workers, global worker
//! indices `i·T .. (i+1)·T`, and connects to every other process.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};

use timely::communication::AllocatorBuilder;

pub use super::wallclock::{instant_of_epoch, unix_now_us, CLOCK_SHIFT_VAR};

/// Where this process stands in a multi-process job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSpec {
    /// This process's index, `0..addresses.len()`.
    pub process: u32,
    /// Worker threads per process.
    pub threads: u32,
    /// `host:port` of every process, in process order.
    pub addresses: Vec<String>,
    /// The job clock's origin as µs since the Unix epoch, shared by every
    /// process (the launcher picks it), so trace times of all processes lie
    /// on one clock; `None`: each process counts from its own start.
    pub epoch_us: Option<u64>,
    /// How long to wait for every peer to connect before giving up.
    pub connect_timeout: std::time::Duration,
    /// The job's secret that every connection proves
    /// ([`crate::run::handshake`]); empty when no token was given, which
    /// only a job on loopback may do.
    pub key: Vec<u8>,
}

/// Default of `--connect-timeout`, seconds.
pub const DEFAULT_CONNECT_TIMEOUT_S: u64 = 60;

impl ClusterSpec {
    /// Checks that this process can listen on its hostfile address (timely
    /// binds it when the job starts and says only "address in use").
    pub fn check_own_port(&self) -> Result<(), String> {
        let address = &self.addresses[self.process as usize];
        match TcpListener::bind(address) {
            Ok(_) => Ok(()),
            Err(e) => Err(format!(
                "process {} cannot listen on {address} (its line in the hostfile): {e}; another program holds that port — choose a free one",
                self.process
            )),
        }
    }

    /// Processes in the job.
    pub fn processes(&self) -> u32 {
        self.addresses.len() as u32
    }

    /// Workers in the job (processes × threads).
    pub fn workers(&self) -> u32 {
        self.processes() * self.threads
    }

    /// Connects to every other process, each connection authenticated
    /// ([`crate::run::handshake`]), and builds timely's allocators over
    /// those connections; `plan_hash` and the revision are bound into the
    /// handshake, and `origin_us` is this process's job clock origin on its
    /// wall clock (process 0 sends its own to the others). An error names
    /// the peers missing at the deadline.
    pub fn connect(&self, plan_hash: &str, origin_us: u64) -> Result<Network, String> {
        use timely::communication::allocator::zero_copy::initialize::initialize_networking_from_sockets;
        use timely::communication::allocator::ProcessBuilder;
        let context = format!(
            "{plan_hash}|{}|{}",
            env!("FORESTALL_GIT_REVISION"),
            self.addresses.len()
        );
        let started = std::time::Instant::now();
        let sockets = crate::run::handshake::connect(&crate::run::handshake::Connect {
            addresses: &self.addresses,
            process: self.process as usize,
            key: &self.key,
            context,
            timeout: self.connect_timeout,
            origin_us,
        })?;
        tracing::info!(
            "process {}: connected to {} peers in {} ms; the slowest handshake took {} µs \
             (handshake_us={}, the clock exchange included)",
            self.process,
            self.addresses.len() - 1,
            started.elapsed().as_millis(),
            sockets.handshake_us,
            sockets.handshake_us
        );
        if let Some(sync) = sockets.clock {
            // Hosts whose clocks disagree by more than the time a job allows
            // for connecting are not a cluster to time: say so before
            // training (and before timely takes the connections).
            if u128::from(sync.offset_us.unsigned_abs()) > self.connect_timeout.as_micros() {
                return Err(format!(
                    "process {}: its wall clock is {:.1} s off process 0's (measured within {} \
                     µs), more than --connect-timeout ({} s): synchronise the hosts' clocks \
                     (NTP, chrony) and start the job again",
                    self.process,
                    sync.offset_us.unsigned_abs() as f64 / 1e6,
                    sync.round_trip_us,
                    self.connect_timeout.as_secs()
                ));
            }
        }
        let hooks = timely::communication::Hooks::default();
        let threads = self.threads as usize;
        let local =
            ProcessBuilder::new_typed_vector(threads, hooks.refill.clone(), hooks.spill.clone());
        let process = self.process as usize;
        let (tcp, guard) =
            initialize_networking_from_sockets(local, sockets.streams, process, threads, hooks)
                .map_err(|e| format!("cannot start timely's networking: {e}"))?;
        Ok(Network {
            builders: tcp.into_iter().map(AllocatorBuilder::Tcp).collect(),
            guard: Box::new(guard),
            clock: sockets.clock,
        })
    }
}

/// timely's allocators over a job's authenticated connections.
pub struct Network {
    /// One a worker thread of this process.
    pub builders: Vec<AllocatorBuilder>,
    /// Keeps the connections' threads; dropped when the workers end.
    pub guard: Box<dyn std::any::Any + Send>,
    /// Process 0's clock as measured (processes above 0).
    pub clock: Option<crate::run::handshake::ClockSync>,
}

impl std::fmt::Debug for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Network")
            .field("builders", &self.builders.len())
            .field("clock", &self.clock)
            .finish()
    }
}

/// A hostfile or cluster setting that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// The hostfile could not be read.
    #[error("cannot read hostfile {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A line is not `host:port`, or repeats another.
    #[error("hostfile {path}:{line}: {problem}")]
    Entry {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        problem: String,
    },
    /// The hostfile lists no process.
    #[error("hostfile {path} lists no process (one host:port per line)")]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// The process index is not one of the hostfile's.
    #[error("--process {process} is not in hostfile {path}, which lists processes 0..{processes}")]
    Process {
        /// The file.
        path: PathBuf,
        /// Asked for.
        process: u32,
        /// Listed.
        processes: u32,
    },
    /// A non-loopback address without `--allow-remote`.
    #[error("hostfile {path}:{line}: {address} is not a loopback address; the processes' connections are authenticated but not encrypted, so pass --allow-remote (and a token) to use it on a network you trust")]
    Remote {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// The address.
        address: String,
    },
    /// No free port could be had on loopback.
    #[error("cannot find a free port on 127.0.0.1")]
    Port(#[source] std::io::Error),
}

/// Reads a hostfile: one `host:port` per line; blank lines and `#` comments
/// are skipped. Duplicates are refused, and so are non-loopback hosts unless
/// `allow_remote`.
pub fn read_hostfile(path: &Path, allow_remote: bool) -> Result<Vec<String>, ClusterError> {
    let text = std::fs::read_to_string(path).map_err(|source| ClusterError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse_hostfile(path, &text, allow_remote)
}

/// Parses hostfile text (`path` is only for messages).
pub fn parse_hostfile(
    path: &Path,
    text: &str,
    allow_remote: bool,
) -> Result<Vec<String>, ClusterError> {
    let mut addresses: Vec<String> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let entry = raw.split('#').next().unwrap_or("").trim();
        if entry.is_empty() {
            continue;
        }
        let bad = |problem: String| ClusterError::Entry {
            path: path.to_owned(),
            line,
            problem,
        };
        let Some((host, port)) = entry.rsplit_once(':') else {
            return Err(bad(format!("'{entry}' is not host:port")));
        };
        if host.is_empty() {
            return Err(bad(format!("'{entry}' has no host")));
        }
        match port.parse::<u16>() {
            Ok(p) if p > 0 => {}
            _ => return Err(bad(format!("'{entry}' has port '{port}', not 1..65535"))),
        }
        if addresses.iter().any(|a| a == entry) {
            return Err(bad(format!("'{entry}' is listed twice")));
        }
        if !is_loopback(entry) && !allow_remote {
            return Err(ClusterError::Remote {
                path: path.to_owned(),
                line,
                address: entry.to_owned(),
            });
        }
        addresses.push(entry.to_owned());
    }
    if addresses.is_empty() {
        return Err(ClusterError::Empty {
            path: path.to_owned(),
        });
    }
    Ok(addresses)
}

/// Whether `host:port` names this host's loopback (`localhost`, 127.0.0.0/8
/// or ::1).
pub fn is_loopback(address: &str) -> bool {
    let host = address.rsplit_once(':').map_or(address, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Every worker tells every other worker the plan hash it runs; returns the
/// first disagreement as (worker, its hash). A process started with another
/// job file, other flags or another worker count computes another hash, and
/// the job must not start: BSP's exactly-once reduction assumes one plan.
pub fn first_other_plan(
    worker: &mut timely::worker::Worker,
    plan_hash: &str,
) -> Option<(usize, String)> {
    use std::cell::RefCell;
    use std::rc::Rc;
    use timely::dataflow::operators::vec::Broadcast;
    use timely::dataflow::operators::{Input, Inspect, Probe};

    let seen: Rc<RefCell<Vec<(usize, String)>>> = Rc::default();
    let sink = Rc::clone(&seen);
    let index = worker.index();
    let (mut input, probe) = worker.dataflow::<u64, _, _>(|scope| {
        let (handle, hashes) = scope.new_input::<Vec<(usize, String)>>();
        let probe = hashes
            .broadcast()
            .inspect(move |h: &(usize, String)| sink.borrow_mut().push(h.clone()))
            .probe()
            .0;
        (handle, probe)
    });
    input.send((index, plan_hash.to_owned()));
    input.advance_to(1);
    drop(input);
    while !probe.done() {
        worker.step();
    }
    let other = seen.borrow().iter().find(|(_, h)| h != plan_hash).cloned();
    other
}

/// `n` ports on 127.0.0.1 that were free a moment ago (each bound once and
/// released; another program may still take one before timely binds it, and
/// timely then fails with the address in its message).
pub fn free_loopback_addresses(n: u32) -> Result<Vec<String>, ClusterError> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(ClusterError::Port)?;
    listeners
        .iter()
        .map(|l| {
            l.local_addr()
                .map(|a: SocketAddr| a.to_string())
                .map_err(ClusterError::Port)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<String>, String> {
        parse_hostfile(Path::new("hosts"), text, false).map_err(|e| e.to_string())
    }

    #[test]
    fn hostfiles_are_checked_line_by_line() {
        assert_eq!(
            parse("# two processes\n127.0.0.1:4000\n\nlocalhost:4001 # second\n"),
            Ok(vec![
                "127.0.0.1:4000".to_owned(),
                "localhost:4001".to_owned()
            ])
        );
        assert_eq!(
            parse("127.0.0.1:4000\n127.0.0.1:4000\n").unwrap_err(),
            "hostfile hosts:2: '127.0.0.1:4000' is listed twice"
        );
        assert_eq!(
            parse("127.0.0.1\n").unwrap_err(),
            "hostfile hosts:1: '127.0.0.1' is not host:port"
        );
        assert_eq!(
            parse("127.0.0.1:http\n").unwrap_err(),
            "hostfile hosts:1: '127.0.0.1:http' has port 'http', not 1..65535"
        );
        assert_eq!(
            parse("\n# nothing\n").unwrap_err(),
            "hostfile hosts lists no process (one host:port per line)"
        );
        assert!(parse("10.0.0.7:4000\n")
            .unwrap_err()
            .contains("not a loopback address"));
        assert!(parse_hostfile(Path::new("h"), "10.0.0.7:4000\n", true).is_ok());
        assert!(parse("[::1]:4000\n").is_ok());
    }

    #[test]
    fn free_addresses_are_distinct_loopback_ports() {
        let a = free_loopback_addresses(3).expect("ports");
        assert_eq!(a.len(), 3);
        assert!(a.iter().all(|s| s.starts_with("127.0.0.1:")));
        let mut d = a.clone();
        d.dedup();
        assert_eq!(d.len(), 3);
        let spec = ClusterSpec {
            process: 1,
            threads: 2,
            addresses: a,
            epoch_us: None,
            connect_timeout: std::time::Duration::from_secs(1),
            key: Vec::new(),
        };
        assert_eq!((spec.processes(), spec.workers()), (3, 6));
    }
}
