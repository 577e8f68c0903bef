//! Hosts as network namespaces, for the tests and the bench: each "host" is
//! a namespace with its own non-loopback address (10.77.0.x) on a bridge
//! that lives in a namespace of its own, so the root namespace's filters
//! never see the traffic. Needs root (`ip netns add`).
//!
//! Only addresses of namespaces made here are ever connected to. Names
//! carry the process id and a counter (within the 15 characters an
//! interface name allows); the namespaces (and their veths with them) are
//! removed on drop, also when a test fails, and leftovers of a killed run
//! are removed at the next start by their prefix.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Every namespace and interface made here starts with it.
pub const PREFIX: &str = "fsh";
static NEXT: AtomicU32 = AtomicU32::new(0);

fn ip(args: &[&str]) -> Result<(), String> {
    let o = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        ))
    }
}

/// `n` hosts 10.77.0.1 … on one bridge.
#[derive(Debug)]
pub struct Hosts {
    /// The hosts' namespaces, then the bridge's.
    namespaces: Vec<String>,
    /// The hosts' addresses.
    pub addresses: Vec<String>,
}

impl Hosts {
    /// Makes `n` hosts (and removes what a killed run left).
    pub fn new(n: usize) -> Result<Self, String> {
        remove_leftovers();
        // fsh<pid>x<k>: within the 15 characters an interface name allows
        let tag = format!(
            "{PREFIX}{}x{}",
            std::process::id() % 100_000,
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let bridge = format!("{tag}b");
        let mut hosts = Self {
            namespaces: Vec::new(),
            addresses: Vec::new(),
        };
        ip(&["netns", "add", &bridge])?;
        hosts.namespaces.push(bridge.clone());
        ip(&["-n", &bridge, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &bridge, "link", "set", "br0", "up"])?;
        for i in 0..n {
            let ns = format!("{tag}h{i}");
            ip(&["netns", "add", &ns])?;
            hosts.namespaces.insert(i, ns.clone());
            let (here, there) = (format!("{tag}a{i}"), format!("{tag}c{i}"));
            ip(&["link", "add", &here, "type", "veth", "peer", "name", &there])?;
            ip(&["link", "set", &here, "netns", &ns])?;
            ip(&["link", "set", &there, "netns", &bridge])?;
            ip(&["-n", &bridge, "link", "set", &there, "master", "br0", "up"])?;
            let address = format!("10.77.0.{}", i + 1);
            let cidr = format!("{address}/24");
            ip(&["-n", &ns, "addr", "add", &cidr, "dev", &here])?;
            ip(&["-n", &ns, "link", "set", &here, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            hosts.addresses.push(address);
        }
        Ok(hosts)
    }

    /// Host `i`'s namespace.
    pub fn namespace(&self, i: usize) -> String {
        self.namespaces[i].clone()
    }

    /// The command `program ARGS` run in host `i`'s namespace (`ip netns
    /// exec` execs it: the child's pid is the program's).
    pub fn command(&self, i: usize, program: &Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.namespaces[i]]).arg(program);
        c
    }

    /// `forestall ARGS` in host `i`'s namespace, in `dir`, with `env` added
    /// and its output piped.
    pub fn forestall(
        &self,
        i: usize,
        exe: &Path,
        dir: &Path,
        args: &[&str],
        env: &[(&str, String)],
    ) -> std::io::Result<Child> {
        self.command(i, exe)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .current_dir(dir)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
    }

    /// Writes `dir/hosts`: the first `n` hosts at `port`.
    pub fn write_hostfile(&self, dir: &Path, n: usize, port: u16) -> std::io::Result<()> {
        let lines: Vec<String> = self.addresses[..n]
            .iter()
            .map(|a| format!("{a}:{port}"))
            .collect();
        std::fs::write(dir.join("hosts"), lines.join("\n"))
    }

    /// A shell command in host `i`'s namespace, its output discarded.
    pub fn shell(&self, i: usize, script: &str) -> std::io::Result<Child> {
        Command::new("ip")
            .args(["netns", "exec", &self.namespaces[i], "bash", "-c", script])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

/// Namespaces of a killed run: removed when their process is gone.
fn remove_leftovers() {
    let Ok(o) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let pid: Option<u32> = rest.split('x').next().and_then(|p| p.parse().ok());
        let alive = pid.is_some_and(|p| {
            p == std::process::id() % 100_000 || Path::new(&format!("/proc/{p}")).exists()
        });
        if !alive {
            let _ = Command::new("ip").args(["netns", "del", name]).output();
        }
    }
}
