//! The arguments of `forestall run`: the job, the overrides of its values,
//! and how the run is laid out over processes.

use std::path::{Path, PathBuf};

use anyhow::bail;
use clap::Args;

use crate::spec::{read_job_file_with, Overrides};

/// Arguments of `forestall run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The job file (TOML), e.g. pipelines/quickstart.toml.
    pub job: PathBuf,
    /// The job file's values given on the command line.
    #[command(flatten)]
    pub overrides: Overrides,
    /// Replace the output directory if it already holds files.
    #[arg(long)]
    pub force: bool,
    /// Run as N local processes connected by timely's cluster mode over TCP
    /// on 127.0.0.1 (a launcher starts and watches them), each with --threads
    /// workers.
    #[arg(long, value_name = "N", conflicts_with_all = ["hostfile", "process"])]
    pub processes: Option<u32>,
    /// Worker threads per process (with --processes or --hostfile).
    #[arg(long, value_name = "T")]
    pub threads: Option<u32>,
    /// Join a multi-process job as process I of the hostfile's (one command
    /// per process, each with the same job and flags).
    #[arg(long, value_name = "FILE", requires = "process")]
    pub hostfile: Option<PathBuf>,
    /// This process's index in the hostfile (0 hosts worker 0 and writes the
    /// summary).
    #[arg(long, value_name = "I", requires = "hostfile")]
    pub process: Option<u32>,
    /// Accept hostfile addresses that are not loopback (connections are
    /// authenticated with the job's token, but the traffic is not encrypted).
    #[arg(long)]
    pub allow_remote: bool,
    /// The port of each node's first process when a scheduler's
    /// environment places the processes (Slurm: task j of a node listens on
    /// this plus j).
    #[arg(long, value_name = "PORT", default_value_t = crate::run::scheduler::DEFAULT_BASE_PORT)]
    pub base_port: u16,
    /// A file holding the job's secret (readable by its owner only), which
    /// every connection between the processes proves; else the file named by
    /// FORESTALL_TOKEN_FILE, else FORESTALL_TOKEN's value. Processes on hosts
    /// that are not loopback need one; `--processes` makes one itself.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Seconds to wait for every peer process to connect (with --hostfile).
    #[arg(long, value_name = "S", default_value_t = crate::run::cluster::DEFAULT_CONNECT_TIMEOUT_S)]
    pub connect_timeout: u64,
    /// Set by the launcher for its processes: the output directory is
    /// prepared; add to it.
    #[arg(long, hide = true)]
    pub joined: bool,
    /// The job clock's origin (µs since the Unix epoch) shared by every
    /// process; the launcher sets it.
    #[arg(long, hide = true, value_name = "US")]
    pub epoch_us: Option<u64>,
    /// Continue the job in DIR (a run's output directory) from its newest
    /// complete checkpoint; the job file and flags must be the same.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["out", "force"])]
    pub resume: Option<PathBuf>,
    /// Processes on hosts without shared storage: at the end, every process
    /// sends its trace parts to process 0 over an authenticated connection,
    /// so process 0's --out holds the whole trace (the senders keep theirs).
    #[arg(long)]
    pub gather: bool,
    /// With --out DIR: continue from DIR's newest complete checkpoint if it
    /// has one (as --resume DIR), else start afresh in DIR. A scheduler
    /// that requeues a job (Slurm's --requeue, after SIGTERM stopped it with
    /// a checkpoint) runs the same command again: it continues.
    #[arg(long, requires = "out", conflicts_with_all = ["resume", "force"])]
    pub resume_if_any: bool,
    /// Stop after iteration N (of the job's iterations) with a checkpoint
    /// there; `--resume` of the same job continues it as if it had not
    /// stopped (`forestall tune` runs its rungs so).
    #[arg(long, value_name = "N")]
    pub stop_after: Option<u64>,
    /// After SIGTERM or Ctrl-C, how long a process may train no iteration
    /// before it stops at once without reaching the boundary (a run hung
    /// inside an iteration), in seconds; ten times its longest iteration
    /// when that is longer.
    #[arg(long, value_name = "SECONDS", default_value_t = crate::run::stop::GRACE_FLOOR_S,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub stop_grace: u64,
    /// With --processes: restart every process from the newest checkpoint
    /// when one exits abnormally, up to this many times.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub max_restarts: u32,
    /// Set by the launcher with --resume: the checkpoint every process
    /// continues from.
    #[arg(long, hide = true, value_name = "ITERATION", requires = "resume")]
    pub resume_at: Option<u64>,
}

impl RunArgs {
    /// Takes the job file's `[cluster]` settings that no flag overrides.
    pub fn apply_cluster_section(&mut self) -> anyhow::Result<()> {
        let args = self;
        if args.joined || args.process.is_some() {
            return Ok(()); // a launched or joining process: its flags say it all
        }
        let (spec, _) = read_job_file_with(&args.job, &args.overrides.set)?;
        let c = spec.cluster;
        if args.hostfile.is_none() && args.processes.is_none() {
            args.processes = c.processes;
        }
        if args.processes.is_none() && args.hostfile.is_none() {
            if let Some(hostfile) = c.hostfile {
                let base = args.job.parent().unwrap_or_else(|| Path::new("."));
                args.hostfile = Some(base.join(hostfile));
            }
        }
        if args.hostfile.is_some() && args.process.is_none() {
            bail!(
                "{}: [cluster] hostfile needs --process I (this host's line in the hostfile)",
                args.job.display()
            );
        }
        args.threads = args.threads.or(c.threads);
        if args.max_restarts == 0 && args.processes.is_some() {
            args.max_restarts = c.max_restarts.unwrap_or(0);
        }
        if args.max_restarts > 0 && args.processes.is_none() {
            bail!(
                "--max-restarts needs --processes N (the launcher restarts the processes it starts); \
                 for one process, use --processes 1 --threads T"
            );
        }
        Ok(())
    }
}
