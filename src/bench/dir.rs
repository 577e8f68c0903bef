//! A bench results directory as a whole: whether a directory is one, what
//! it says about itself, and its rows, finished or not.

use std::path::{Path, PathBuf};

use super::results::{read_rows, BenchRow};
use super::resume::{read_manifest, MANIFEST, PARTS};

/// Whether `dir` is a bench results directory.
pub fn is_bench_dir(dir: &Path) -> bool {
    dir.join(MANIFEST).is_file()
        || (dir.join("raw.parquet").is_file() && dir.join("README.md").is_file())
}

/// What a bench results directory says about itself: name, date, revision
/// and CPU, from `bench.json` or, for older benches, the README's table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BenchOrigin {
    /// `[bench] name`.
    pub name: Option<String>,
    /// Start (date only for older benches).
    pub date: Option<String>,
    /// Git revision.
    pub git_revision: Option<String>,
    /// CPU model.
    pub cpu: Option<String>,
    /// Planned jobs (benches that write `bench.json`).
    pub jobs: Option<usize>,
}

/// Reads a bench directory's origin.
pub fn bench_origin(dir: &Path) -> BenchOrigin {
    if let Ok(m) = read_manifest(dir) {
        return BenchOrigin {
            name: Some(m.pipeline),
            date: Some(m.date),
            git_revision: Some(m.git_revision),
            cpu: Some(m.machine.cpu),
            jobs: Some(m.runs),
        };
    }
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap_or_default();
    let cell = |key: &str| {
        readme.lines().find_map(|l| {
            let cells: Vec<&str> = l
                .trim()
                .trim_matches('|')
                .split('|')
                .map(str::trim)
                .collect();
            (cells.len() == 2 && cells[0] == key).then(|| cells[1].to_owned())
        })
    };
    BenchOrigin {
        name: readme
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# Benchmark `"))
            .and_then(|l| l.split('`').next())
            .map(str::to_owned),
        date: cell("date (UTC)"),
        git_revision: cell("git revision").map(|r| r.trim_matches('`').to_owned()),
        cpu: cell("CPU").map(|c| match c.rfind(" (") {
            Some(i) if c.ends_with("cores available)") => c[..i].to_owned(),
            _ => c,
        }),
        jobs: None,
    }
}

/// The rows of a bench directory: `raw.parquet` when it is finished, else
/// the parts of the jobs that finished. `Err` names what is unreadable.
pub fn bench_rows(dir: &Path) -> Result<(Vec<BenchRow>, bool), String> {
    let raw = dir.join("raw.parquet");
    if raw.is_file() {
        return read_rows(&raw)
            .map(|rows| (rows, true))
            .map_err(|e| format!("{e:#}"));
    }
    let mut parts: Vec<PathBuf> = std::fs::read_dir(dir.join(PARTS))
        .map(|r| r.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    parts.retain(|p| p.extension().is_some_and(|x| x == "parquet") && !hidden(p));
    parts.sort();
    let mut rows = Vec::new();
    for p in parts {
        rows.extend(read_rows(&p).map_err(|e| format!("{e:#}"))?);
    }
    Ok((rows, false))
}

fn hidden(p: &Path) -> bool {
    p.file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
}
