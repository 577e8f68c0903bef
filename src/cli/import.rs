//! `forestall import FORMAT FILE… --out DIR`: real traces into our trace schema.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Args;
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::output::print_stdout;
use super::run::GIT_REVISION;
use super::GlobalArgs;
use crate::fsutil::hex;
use crate::fsutil::{is_non_empty_dir, write_atomic};
use crate::import::{read, records, BadRow, Format, Imported, OnBad};
use crate::ops::write_ops;
use crate::report::json;
use crate::trace::{TraceStamp, TraceWriter};

/// Arguments of `forestall import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The files' format.
    #[arg(value_enum)]
    pub format: Format,
    /// Trace files, as their publishers ship them; each becomes one trace.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Directory to write into: one directory per file, named after it, holding
    /// `trace/` (the tables, as a run writes them) and `import.json`.
    #[arg(long)]
    pub out: PathBuf,
    /// Bad rows (NaN, negative, unparsable, unknown columns): reject the file,
    /// or leave them out (they are listed either way).
    #[arg(long, value_enum, default_value_t = OnBad::Reject)]
    pub on_bad: OnBad,
    /// Replace trace directories that already hold files.
    #[arg(long)]
    pub force: bool,
}

#[derive(Serialize)]
struct Summary<'a> {
    source: String,
    format: &'static str,
    trace: String,
    workers: &'a [String],
    iterations: usize,
    /// The trace's own step number of each iteration.
    steps: &'a [u64],
    samples: usize,
    skipped: &'a [BadRow],
    notes: &'a [BadRow],
    /// Operation records kept in `ops.parquet` (0: none, or not an operation trace).
    operations: usize,
}

/// The trace directory for `file` under `out`.
fn trace_dir(out: &Path, file: &Path) -> PathBuf {
    let stem = file
        .file_stem()
        .map_or_else(|| "trace".into(), |s| s.to_string_lossy().into_owned());
    out.join(stem)
}

/// Runs `forestall import`: every file is read and checked before anything is
/// written.
pub fn run(args: ImportArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let mut imported = Vec::new();
    for file in &args.files {
        imported.push(read(args.format, file, args.on_bad)?);
    }
    let mut seen = std::collections::BTreeSet::new();
    for file in &args.files {
        let dir = trace_dir(&args.out, file);
        if !seen.insert(dir.clone()) {
            bail!("two input files would both be written to {}", dir.display());
        }
        if is_non_empty_dir(&dir) && !args.force {
            bail!(
                "{} already holds files; pass --force to replace it or choose another --out",
                dir.display()
            );
        }
    }
    for trace in &imported {
        let dir = trace_dir(&args.out, &trace.source);
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .with_context(|| format!("cannot replace {}", dir.display()))?;
        }
        write_trace(trace, &dir)?;
        let iterations = trace.steps.len();
        let summary = Summary {
            source: trace.source.display().to_string(),
            format: trace.format.as_str(),
            trace: dir.display().to_string(),
            workers: &trace.workers,
            iterations,
            steps: &trace.steps,
            samples: trace.samples.len(),
            skipped: &trace.skipped,
            notes: &trace.notes,
            operations: trace.ops.as_ref().map_or(0, Vec::len),
        };
        write_atomic(
            &dir.join("import.json"),
            serde_json::to_string_pretty(&summary)?.as_bytes(),
        )?;
        if global.json {
            print_stdout(&json::line("import", &summary));
        } else if global.quiet == 0 {
            print_stdout(&format!(
                "{} → {}: {} workers, {} iterations, {} samples{}",
                summary.source,
                summary.trace,
                trace.workers.len(),
                iterations,
                summary.samples,
                match (trace.skipped.len(), trace.notes.len()) {
                    (0, 0) => String::new(),
                    (bad, notes) => format!(
                        "; {bad} bad rows skipped, {notes} exact repeats dropped (listed in import.json)"
                    ),
                }
            ));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn write_trace(trace: &Imported, dir: &Path) -> anyhow::Result<()> {
    let bytes = std::fs::read(&trace.source)
        .with_context(|| format!("cannot read {}", trace.source.display()))?;
    let stem = dir
        .file_name()
        .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
    let stamp = TraceStamp {
        job_id: format!("{}:{stem}", trace.format.as_str()),
        git_revision: GIT_REVISION.to_owned(),
        // The source file's hash: the import is a function of it.
        plan_hash: hex(&Sha256::digest(&bytes)),
        seed: 0,
    };
    let (units, workers, iterations) = records(trace);
    let mut writer = TraceWriter::try_new(&dir.join("trace"), 0, stamp)?;
    writer.write_units(&units)?;
    writer.write_workers(&workers)?;
    writer.write_iterations(&iterations)?;
    if let Some(ops) = &trace.ops {
        // The operations themselves, for `forestall analyze` to replay.
        write_ops(&dir.join("ops.parquet"), ops)?;
    }
    Ok(())
}
