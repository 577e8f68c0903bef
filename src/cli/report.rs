//! `forestall report DIR`: one self-contained `report.html` and its twin
//! `report.md` for a run, a bench or an analysed trace, with each trace's
//! loss, accuracy and iteration-time curves.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context};
use clap::Args;

use super::analyze::analyze_dir_observed;
use super::output::print_stdout;
use super::GlobalArgs;
use crate::analyze::find_traces;
use crate::fsutil::write_atomic;
use crate::report::curves::RunCurves;
use crate::report::html::{heatmap, render, TraceSection};
use crate::report::json;

/// Arguments of `forestall report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A run's, a bench's or an import's output directory.
    pub dir: PathBuf,
    /// Where to write report.html and report.md (default: DIR).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Most traces to include (a bench may hold hundreds; the first are kept).
    #[arg(long, default_value_t = 8)]
    pub max_traces: usize,
}

#[derive(serde::Serialize)]
struct Written {
    html: String,
    markdown: String,
    traces: usize,
}

/// Runs `forestall report`.
pub fn run(args: ReportArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    if !args.dir.is_dir() {
        bail!("{} is not a directory", args.dir.display());
    }
    let bench_md = std::fs::read_to_string(args.dir.join("summary.md"))
        .ok()
        .filter(|_| args.dir.join("raw.parquet").is_file());
    let traces = find_traces(&args.dir);
    if traces.is_empty() && bench_md.is_none() {
        bail!("{} holds no trace and no bench results", args.dir.display());
    }
    let mut sections = Vec::new();
    for dir in traces.iter().take(args.max_traces) {
        let (analysis, observed) =
            analyze_dir_observed(dir, crate::spec::DEFAULT_LAGGARD_THRESHOLD)?;
        let (grid, bin) = heatmap(&observed);
        // By position, as the heatmap's columns (sampled traces skip steps).
        let laggards = observed
            .laggard
            .iter()
            .enumerate()
            .filter_map(|(i, l)| l.map(|w| (i as u64, w)))
            .collect();
        let curves = RunCurves::read(dir)
            .with_context(|| format!("cannot read the iterations of {}", dir.display()))?;
        sections.push(TraceSection {
            analysis,
            heatmap: grid,
            bin,
            laggards,
            curves,
        });
    }
    // A run's summary may say what the model learnt (LDA: each topic's words).
    let model: Vec<String> = std::fs::read(args.dir.join("summary.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| serde_json::from_value(v["details"].clone()).ok())
        .unwrap_or_default();
    let title = format!("forestall report: {}", args.dir.display());
    let (html, md) = render(&title, &sections, bench_md.as_deref(), &model)
        .map_err(|e| anyhow!("drawing: {e}"))?;
    let out = args.out.clone().unwrap_or_else(|| args.dir.clone());
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let (html_path, md_path) = (out.join("report.html"), out.join("report.md"));
    write_atomic(&html_path, html.as_bytes())?;
    write_atomic(&md_path, md.as_bytes())?;
    let written = Written {
        html: html_path.display().to_string(),
        markdown: md_path.display().to_string(),
        traces: sections.len(),
    };
    if global.json {
        print_stdout(&json::line("report", &written));
    } else if global.quiet == 0 {
        let more = traces.len().saturating_sub(args.max_traces);
        print_stdout(&format!(
            "{} and {} ({} trace(s){})",
            written.html,
            written.markdown,
            written.traces,
            if more > 0 {
                format!("; {more} more left out, see --max-traces")
            } else {
                String::new()
            }
        ));
    }
    Ok(ExitCode::SUCCESS)
}
