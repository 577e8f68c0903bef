//! Where output goes: results on stdout, progress and logs on stderr.

use std::io::{IsTerminal, Write};

use indicatif::{ProgressBar, ProgressStyle};

use super::GlobalArgs;

/// Prints one result line on stdout; a closed pipe is not an error.
pub fn print_stdout(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
}

/// A progress bar over `len` `unit` on stderr with the time left (ETA, from
/// the rate so far), or a hidden one when the user
/// asked for JSON, quiet or no progress, or when stderr is not a terminal.
pub fn progress_bar(global: &GlobalArgs, len: u64, unit: &str) -> ProgressBar {
    if global.json || global.quiet > 0 || global.no_progress || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{{spinner}} [{{elapsed_precise}}] {{bar:30}} {{pos}}/{{len}} {unit}, ETA {{eta}}  {{msg}}"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}
