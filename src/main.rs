//! The `forestall` binary: parses the command line and turns the outcome into an
//! exit code (0 success, 1 a requested check failed, 2 error, 3 training
//! diverged — an error a restart would only repeat).

use std::process::ExitCode;

use clap::Parser;
use forestall::cli::output::{error_line, json_requested, parse_error, print_stdout};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    // before any thread exists (forestall::malloc says why)
    let malloc = forestall::malloc::keep_freed_memory();
    let cli = match forestall::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return ExitCode::from(parse_error(&err, json_requested(std::env::args_os()))),
    };
    let json = cli.global.json;
    install_panic_hook(&cli);
    let level = match (cli.global.quiet, cli.global.verbose) {
        (q, _) if q > 0 => "error",
        (_, 0) => "warn",
        (_, 1) => "info",
        (_, 2) => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
    tracing::debug!("allocator: {malloc:?}");
    match forestall::cli::run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {}", forestall::cli::output::error_text(&err));
            let diverged = err.chain().any(|e| {
                matches!(
                    e.downcast_ref::<forestall::run::RunError>(),
                    Some(forestall::run::RunError::Diverged { .. })
                )
            });
            let code = if diverged { 3 } else { 2 };
            if json {
                print_stdout(&error_line(&err, code));
            }
            ExitCode::from(code)
        }
    }
}

/// How a panic shows on stderr. A panic of the Parquet decoder on a damaged
/// trace part is caught by the reader and comes back as an error naming the
/// file: it prints nothing. In a process of a multi-process run, a peer that
/// dies takes timely's connection threads down with a panic: one line says
/// so, naming the peer (timely names those threads after it), not a
/// backtrace, and a process that no launcher supervises exits at once
/// (exit 2) rather than wait for a peer that is gone; in a process the
/// launcher supervises, the panics that follow (its workers on queues the
/// lost connection poisoned) print nothing more. Any other panic prints as
/// Rust's default hook does.
fn install_panic_hook(cli: &forestall::cli::Cli) {
    // A process the launcher supervises waits for the launcher to stop it;
    // one started one a host stops itself when it loses a peer.
    let supervised = matches!(&cli.command, forestall::cli::Command::Run(args) if args.joined);
    let process = match &cli.command {
        forestall::cli::Command::Run(args) => args.process.or_else(|| {
            // a process a scheduler placed
            let var = |name: &str| std::env::var(name).ok();
            forestall::run::scheduler::placed_from(&var, args.base_port)
                .ok()
                .flatten()
                .map(|p| p.process)
        }),
        _ => None,
    };
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if forestall::trace::reader::reading_guarded() {
            return;
        }
        let Some(process) = process else {
            return default(info);
        };
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("panic");
        // timely's threads for a peer are named after its index
        let name = std::thread::current().name().map(str::to_owned);
        let peer = name.as_deref().and_then(|n| {
            n.strip_prefix("timely:recv-")
                .or_else(|| n.strip_prefix("timely:send-"))
        });
        // Once a peer is gone, the panics that follow in this process (its
        // workers and the other connection threads, on queues the first
        // one poisoned) are its consequences: the one line said it all.
        static PEER_LOST: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if PEER_LOST.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        match peer {
            Some(peer) => {
                if PEER_LOST.swap(true, std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                let then = match supervised {
                    true => "the launcher stops the job",
                    false => "the job stops (resume it from its newest checkpoint)",
                };
                eprintln!(
                    "error: process {process}: lost the connection to process {peer} \
                     ({message}); {then}"
                );
                if !supervised {
                    std::process::exit(2);
                }
            }
            None => eprintln!("error: process {process}: {message}"),
        }
    }));
}
