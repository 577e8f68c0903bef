//! `forestall compare RUN…`: runs side by side, their curves overlaid.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use super::output::print_stdout;
use super::runs::warn;
use super::GlobalArgs;
use crate::fsutil::write_atomic;
use crate::report::json;
use crate::runs::compare::default_page;
use crate::runs::compare_runs;

/// Arguments of `forestall compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Run directories (as `forestall runs` lists them), one or more.
    #[arg(required = true, num_args = 1..)]
    pub runs: Vec<PathBuf>,
    /// The page with the table and the overlaid loss, accuracy and
    /// iteration-time curves (inline SVG).
    #[arg(long, default_value_os_t = default_page().to_owned())]
    pub out: PathBuf,
}

#[derive(serde::Serialize)]
struct Compared<'a> {
    label: &'a str,
    #[serde(flatten)]
    entry: &'a crate::runs::RunEntry,
    summary: &'a Option<serde_json::Value>,
}

#[derive(serde::Serialize)]
struct Note<'a> {
    message: &'a str,
}

#[derive(serde::Serialize)]
struct Written {
    html: String,
    runs: usize,
    overlaid: Vec<&'static str>,
}

/// Runs `forestall compare`.
pub fn run(args: CompareArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let comparison = compare_runs(&args.runs)?;
    let page = comparison.page()?;
    // a bare file name lies in the current directory
    let path = match args.out.parent() {
        Some(p) if p.as_os_str().is_empty() => std::path::Path::new(".").join(&args.out),
        _ => args.out.clone(),
    };
    write_atomic(&path, page.as_bytes())
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    for w in &comparison.warnings {
        warn(global, w);
    }
    let written = Written {
        html: args.out.display().to_string(),
        runs: comparison.runs.len(),
        overlaid: comparison.overlaid.iter().map(|c| c.id()).collect(),
    };
    if global.json {
        for r in &comparison.runs {
            print_stdout(&json::line(
                "run",
                &Compared {
                    label: &r.label,
                    entry: &r.entry,
                    summary: &r.summary,
                },
            ));
        }
        for n in &comparison.notes {
            print_stdout(&json::line("note", &Note { message: n }));
        }
        print_stdout(&json::line("compare", &written));
        return Ok(ExitCode::SUCCESS);
    }
    print_stdout(comparison.table().trim_end());
    for n in &comparison.notes {
        print_stdout(&format!("\nnote: {n}"));
    }
    print_stdout(&format!(
        "\ncurves ({}) in {}",
        written.overlaid.join(", "),
        written.html
    ));
    Ok(ExitCode::SUCCESS)
}
