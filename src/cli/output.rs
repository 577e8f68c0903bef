//! Where output goes: results on stdout, progress and logs on stderr.
//!
//! Under `--json` stdout holds only JSON lines `{"type": …, "data": …}`; a
//! command that fails ends them with one `{"type": "error", "data":
//! {"message", "causes", "exit_code"}}` line (see [`error_line`]), so a reader
//! of stdout alone learns why it stopped. The error is written to stderr as
//! text as well, and the exit code is the same with or without `--json`.

use std::io::{IsTerminal, Write};

use indicatif::{ProgressBar, ProgressStyle};

use super::GlobalArgs;
use crate::report::json;

/// The `data` of an error line under `--json`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ErrorData {
    /// What failed, naming the culprit.
    pub message: String,
    /// The errors that caused it, outermost first.
    pub causes: Vec<String>,
    /// The process's exit code.
    pub exit_code: u8,
}

/// One `{"type": "error", "data": …}` line for `err` and its chain of causes.
pub fn error_line(err: &anyhow::Error, exit_code: u8) -> String {
    json::line(
        "error",
        &ErrorData {
            message: err.to_string(),
            causes: causes(err).into_iter().skip(1).collect(),
            exit_code,
        },
    )
}

/// `err` and its causes as one line, `outer: inner: …` (what `{:#}` prints),
/// without a cause that only repeats the end of the one before it: a
/// wrapper such as Parquet's `External: No space left on device` has the
/// I/O error it wraps as its source, which would print twice.
pub fn error_text(err: &anyhow::Error) -> String {
    causes(err).join(": ")
}

/// The messages of `err`'s chain, outermost first, without repeats.
fn causes(err: &anyhow::Error) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if out.last().is_some_and(|before| before.ends_with(&text)) {
            continue;
        }
        out.push(text);
    }
    out
}

/// Whether the command line asks for `--json` (before any `--`): for errors
/// met before the arguments are parsed.
pub fn json_requested<I: IntoIterator<Item = std::ffi::OsString>>(args: I) -> bool {
    args.into_iter()
        .take_while(|a| a != "--")
        .any(|a| a == "--json")
}

/// Reports a command-line parse error as clap does (help and `--version` on
/// stdout, errors on stderr) and, under `--json`, also as an error line on
/// stdout; returns the exit code (clap's: 0 for help and version, 2 for a
/// usage error).
pub fn parse_error(err: &clap::Error, json: bool) -> u8 {
    let _ = err.print();
    let code = u8::try_from(err.exit_code()).unwrap_or(2);
    if json && err.use_stderr() {
        let rendered = err.render().to_string();
        // clap's text without its "Usage: … / For more information" tail.
        let message = rendered
            .split("\n\nUsage:")
            .next()
            .unwrap_or_default()
            .split("\n\nFor more information")
            .next()
            .unwrap_or_default()
            .trim()
            .trim_start_matches("error: ")
            .to_owned();
        print_stdout(&json::line(
            "error",
            &ErrorData {
                message,
                causes: Vec::new(),
                exit_code: code,
            },
        ));
    }
    code
}

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

#[cfg(test)]
mod tests {
    use super::*;

    /// A wrapped error whose text ends with its source's prints it once.
    #[test]
    fn a_cause_that_repeats_its_wrapper_prints_once() {
        let io = std::io::Error::new(std::io::ErrorKind::StorageFull, "No space left on device");
        let parquet = parquet::errors::ParquetError::External(Box::new(io));
        let err = anyhow::Error::new(parquet).context("parquet error in out/a.parquet");
        assert_eq!(
            error_text(&err),
            "parquet error in out/a.parquet: External: No space left on device"
        );
        let line: serde_json::Value =
            serde_json::from_str(&error_line(&err, 2)).expect("a JSON line");
        assert_eq!(
            line["data"]["causes"],
            serde_json::json!(["External: No space left on device"])
        );
        // different texts all print
        let err = anyhow::anyhow!("disk full").context("cannot write");
        assert_eq!(error_text(&err), "cannot write: disk full");
    }

    #[test]
    fn an_error_line_holds_the_message_its_causes_and_the_code() {
        let err = anyhow::anyhow!("disk full").context("cannot write out/a.parquet");
        let line: serde_json::Value =
            serde_json::from_str(&error_line(&err, 2)).expect("a JSON line");
        assert_eq!(line["type"], "error");
        assert_eq!(line["data"]["message"], "cannot write out/a.parquet");
        assert_eq!(line["data"]["causes"], serde_json::json!(["disk full"]));
        assert_eq!(line["data"]["exit_code"], 2);
    }

    #[test]
    fn json_is_seen_before_a_double_dash_only() {
        let args = |a: &[&str]| a.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        assert!(json_requested(args(&["forestall", "run", "--json"])));
        assert!(!json_requested(args(&["forestall", "run", "--", "--json"])));
        assert!(!json_requested(args(&["forestall", "--jsonx"])));
    }
}
