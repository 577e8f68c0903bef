//! `forestall data fetch pneumonia`: PneumoniaMNIST from a URL (served here by
//! a local HTTP server, since the publisher's host is a setting), checked by
//! MD5 and shape; `--from` imports a local copy, recorded by checksum in the
//! plan and the summary; bad input is refused with nothing written.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Output;

use md5::{Digest, Md5};

use crate::common::{forestall, npy};

/// MedMNIST's pinned MD5 of `pneumoniamnist.npz` (28 × 28).
const PINNED_MD5: &str = "28209eda62fecd6e6a2d98b1501bb15f";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn md5_hex(bytes: &[u8]) -> String {
    Md5::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A small PneumoniaMNIST-like `.npz`: `side` × `side` grey images, 6 / 2 / 2
/// per train / val / test split, labels [n, 1] in 0/1 (`bad_label` puts a 2
/// in the training labels).
fn fixture(side: usize, bad_label: bool) -> Vec<u8> {
    fixture_with(side, bad_label, 7)
}

/// [`fixture`] with pixels `i * step % 256`: another copy for another step.
fn fixture_with(side: usize, bad_label: bool, step: usize) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::FileOptions::default();
    for (split, n) in [("train", 6usize), ("val", 2), ("test", 2)] {
        let pixels: Vec<u8> = (0..n * side * side)
            .map(|i| (i * step % 256) as u8)
            .collect();
        let mut labels: Vec<u8> = (0..n).map(|i| (i % 2) as u8).collect();
        if bad_label && split == "train" {
            labels[3] = 2;
        }
        zip.start_file(format!("{split}_images.npy"), options)
            .expect("entry");
        zip.write_all(&npy("|u1", &[n, side, side], &pixels))
            .expect("write");
        zip.start_file(format!("{split}_labels.npy"), options)
            .expect("entry");
        zip.write_all(&npy("|u1", &[n, 1], &labels)).expect("write");
    }
    zip.finish().expect("finish").into_inner()
}

/// Serves `body` at `/pneumoniamnist.npz` (404 elsewhere) on a local port,
/// from a thread that lives as long as the test binary; returns the URL.
fn serve(body: Vec<u8>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a local port");
    let port = listener.local_addr().expect("address").port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let first = text(&request);
            let path = first.split_whitespace().nth(1).unwrap_or("");
            let (status, content): (&str, &[u8]) = if path == "/pneumoniamnist.npz" {
                ("200 OK", &body)
            } else {
                ("404 Not Found", b"not found")
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n",
                content.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(content);
        }
    });
    format!("http://127.0.0.1:{port}/pneumoniamnist.npz")
}

fn fetch(args: &[&str]) -> Output {
    let mut all = vec!["data", "fetch", "pneumonia"];
    all.extend_from_slice(args);
    forestall(&all)
}

fn refused(o: &Output, expected: &[&str]) {
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    for e in expected {
        assert!(err.contains(e), "expected '{e}' in: {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
}

fn dir_str(p: &Path) -> &str {
    p.to_str().expect("utf-8")
}

#[test]
fn a_download_is_checked_against_the_md5_and_nothing_is_left_on_a_mismatch() {
    let body = fixture(28, false);
    let md5 = md5_hex(&body);
    let url = serve(body.clone());
    let tmp = tempfile::tempdir().expect("dir");
    let out = tmp.path().join("data");
    let o = dir_str(&out);

    // The fixture is not MedMNIST's file: the pinned MD5 refuses it.
    let r = fetch(&["--url", &url, "--out", o]);
    refused(
        &r,
        &[
            &format!("has MD5 {md5}, expected MD5 {PINNED_MD5}"),
            "refusing",
        ],
    );
    assert!(!out.exists(), "nothing is written on a checksum mismatch");
    // So does another MD5 given for the mirror.
    let r = fetch(&["--url", &url, "--md5", &"0".repeat(32), "--out", o]);
    refused(&r, &["expected MD5 00000000"]);
    assert!(!out.exists());
    // Under --json the error is a JSON line naming both checksums.
    let r = forestall(&[
        "--json",
        "data",
        "fetch",
        "pneumonia",
        "--url",
        &url,
        "--out",
        o,
    ]);
    assert_eq!(r.status.code(), Some(2));
    let line: serde_json::Value =
        serde_json::from_str(text(&r.stdout).lines().last().expect("a line")).expect("JSON");
    assert_eq!(line["type"], "error");
    assert!(line.to_string().contains(&md5), "{line}");

    // With the mirror's MD5 it is fetched, and said not to be MedMNIST's file.
    let r = fetch(&["--url", &url, "--md5", &md5, "--out", o]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    let written = out.join("pneumoniamnist.npz");
    assert_eq!(std::fs::read(&written).expect("written"), body);
    let stdout = text(&r.stdout);
    assert!(
        stdout.contains("6/2/2 train/val/test images of 28 x 28"),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("MD5 {md5}")), "{stdout}");
    assert!(stdout.contains("not the publisher's file"), "{stdout}");
    assert_eq!(
        std::fs::read_dir(&out).expect("dir").count(),
        1,
        "no temporary file is left"
    );
    // Fetching again keeps it.
    let r = forestall(&[
        "--json",
        "data",
        "fetch",
        "pneumonia",
        "--url",
        &url,
        "--md5",
        &md5,
        "--out",
        o,
    ]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    let line: serde_json::Value =
        serde_json::from_str(text(&r.stdout).trim()).expect("one JSON line");
    assert_eq!(line["type"], "data-fetched");
    assert_eq!(line["data"]["status"], "already-there");
    assert_eq!(line["data"]["checksums"]["md5"], md5.as_str());
    assert_eq!(line["data"]["images"]["train"], 6);
    assert_eq!(line["data"]["publishers_copy"], false);
    // Without --md5 the copy in place is not MedMNIST's: refused, and kept.
    let r = fetch(&["--url", &url, "--out", o]);
    refused(&r, &["is not the pneumonia dataset", "--force"]);
    assert_eq!(std::fs::read(&written).expect("kept"), body);
}

#[test]
fn an_unreachable_host_or_a_missing_file_is_a_clear_error_and_writes_nothing() {
    let tmp = tempfile::tempdir().expect("dir");
    let out = tmp.path().join("data");
    let o = dir_str(&out);
    // A port nobody listens on.
    let port = TcpListener::bind("127.0.0.1:0")
        .expect("port")
        .local_addr()
        .expect("address")
        .port();
    let url = format!("http://127.0.0.1:{port}/pneumoniamnist.npz");
    let r = fetch(&["--url", &url, "--out", o]);
    refused(&r, &[&format!("cannot download {url}")]);
    assert!(!out.exists());
    // A server without the file.
    let served = serve(fixture(28, false));
    let missing = served.replace("pneumoniamnist.npz", "elsewhere.npz");
    let r = fetch(&["--url", &missing, "--out", o]);
    refused(&r, &[&format!("cannot download {missing}"), "404"]);
    assert!(!out.exists());
}

#[test]
fn a_download_of_the_wrong_shape_is_refused_even_with_its_md5() {
    let tmp = tempfile::tempdir().expect("dir");
    let out = tmp.path().join("data");
    let o = dir_str(&out);
    // Not an .npz at all.
    let garbage = b"<html>rate limited</html>".to_vec();
    let md5 = md5_hex(&garbage);
    let url = serve(garbage);
    let r = fetch(&["--url", &url, "--md5", &md5, "--out", o]);
    refused(&r, &["is not a pneumonia file", "not a readable .npz"]);
    assert!(!out.exists());
    // 28 × 28 images fetched as --size 64.
    let small = fixture(28, false);
    let md5 = md5_hex(&small);
    let url = serve(small);
    let r = fetch(&["--size", "64", "--url", &url, "--md5", &md5, "--out", o]);
    refused(
        &r,
        &["train_images has shape [6, 28, 28]; size 64 needs [n, 64, 64]"],
    );
    assert!(!out.exists());
}

#[test]
fn bad_options_are_refused_by_name() {
    let tmp = tempfile::tempdir().expect("dir");
    let out = tmp.path().join("data");
    let o = dir_str(&out);
    refused(
        &fetch(&["--size", "32", "--out", o]),
        &["pneumonia has no size 32; sizes: 28, 64"],
    );
    refused(
        &forestall(&["data", "fetch", "mnist", "--size", "28", "--out", o]),
        &["--size does not apply to mnist"],
    );
    refused(
        &forestall(&[
            "data",
            "fetch",
            "mnist",
            "--url",
            "http://127.0.0.1:9/x",
            "--out",
            o,
        ]),
        &["--url does not apply to mnist"],
    );
    refused(
        &fetch(&["--md5", "abc", "--out", o]),
        &["'abc' is not 32 hex digits"],
    );
    assert!(!out.exists());
}

#[test]
fn from_imports_a_local_copy_checked_by_shape_and_recorded_by_checksum() {
    let tmp = tempfile::tempdir().expect("dir");
    let d = tmp.path();
    let out = d.join("data");
    let o = dir_str(&out);
    let write = |name: &str, bytes: &[u8]| {
        let p = d.join(name);
        std::fs::write(&p, bytes).expect("write");
        p
    };

    // Bad copies: nothing is written for any of them.
    let missing = d.join("missing.npz");
    refused(
        &fetch(&["--from", dir_str(&missing), "--out", o]),
        &["missing.npz"],
    );
    let small = write("small.npz", &fixture(14, false));
    refused(
        &fetch(&["--from", dir_str(&small), "--out", o]),
        &[
            "small.npz is not a pneumonia file",
            "train_images has shape [6, 14, 14]; size 28 needs [n, 28, 28]",
        ],
    );
    let labels = write("labels.npz", &fixture(28, true));
    refused(
        &fetch(&["--from", dir_str(&labels), "--out", o]),
        &["train_labels row 3 is 2, not 0 or 1"],
    );
    let good = fixture(28, false);
    let corrupt = write("corrupt.npz", &good[..good.len() / 2]);
    refused(
        &fetch(&["--from", dir_str(&corrupt), "--out", o]),
        &["corrupt.npz", "not a readable .npz"],
    );
    refused(
        &fetch(&[
            "--from",
            dir_str(&small),
            "--url",
            "http://127.0.0.1:9/",
            "--out",
            o,
        ]),
        &["--url"],
    );
    assert!(!out.exists(), "nothing is written for a bad copy");

    // A good copy is imported and reported by checksum.
    let copy = write("copy.npz", &good);
    let md5 = md5_hex(&good);
    let r = fetch(&["--from", dir_str(&copy), "--out", o]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    assert!(
        text(&r.stdout).contains(&format!("MD5 {md5}")),
        "{}",
        text(&r.stdout)
    );
    let data = out.join("pneumoniamnist.npz");
    assert_eq!(std::fs::read(&data).expect("imported"), good);
    let r = fetch(&["--from", dir_str(&copy), "--out", o]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    assert!(
        text(&r.stdout).contains("already there"),
        "{}",
        text(&r.stdout)
    );
    // Another copy in its place is refused without --force, replaces it with.
    let other = write("other.npz", &fixture_with(28, false, 11));
    refused(
        &fetch(&["--from", dir_str(&other), "--out", o]),
        &["is not the pneumonia dataset (another copy", "--force"],
    );
    assert_eq!(std::fs::read(&data).expect("kept"), good);
    let r = fetch(&["--from", dir_str(&other), "--out", o, "--force"]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    assert_eq!(
        std::fs::read(&data).expect("replaced"),
        fixture_with(28, false, 11)
    );
    let r = fetch(&["--from", dir_str(&copy), "--out", o, "--force"]);
    assert!(r.status.success(), "{}", text(&r.stderr));

    // A job on it records the file's checksums in its plan and summary.
    let job = d.join("job.toml");
    std::fs::write(
        &job,
        format!(
            "[job]\niterations = 1\n[data]\npath = \"{}\"\npartitions = 2\nunits_per_partition = 1\n[model]\nkind = \"cnn\"\n[workers]\ncount = 1\n",
            data.display()
        ),
    )
    .expect("job");
    let run = d.join("run");
    let r = forestall(&["run", dir_str(&job), "--out", dir_str(&run), "-q"]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    assert!(
        text(&r.stdout).contains(&format!("dataset      md5 {md5}")),
        "{}",
        text(&r.stdout)
    );
    let plan: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("plan.json")).expect("plan")).expect("JSON");
    assert_eq!(plan["data"]["checksums"]["md5"], md5.as_str());
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("summary.json")).expect("summary"))
            .expect("JSON");
    assert_eq!(summary["dataset"]["md5"], md5.as_str());
    assert_eq!(
        summary["dataset"]["sha256"].as_str().map(str::len),
        Some(64)
    );
}

#[test]
fn a_job_whose_images_are_missing_names_the_fetch_command() {
    let tmp = tempfile::tempdir().expect("dir");
    for (file, command) in [
        (
            "pneumoniamnist.npz",
            "`forestall data fetch pneumonia` fetches it",
        ),
        (
            "pneumoniamnist_64.npz",
            "`forestall data fetch pneumonia --size 64` fetches it",
        ),
    ] {
        let job = tmp.path().join("job.toml");
        std::fs::write(
            &job,
            format!(
                "[data]\npath = \"{}\"\n[model]\nkind = \"cnn\"\n",
                tmp.path().join("data").join(file).display()
            ),
        )
        .expect("job");
        let out = tmp.path().join("out");
        refused(
            &forestall(&["run", dir_str(&job), "--out", dir_str(&out)]),
            &[command],
        );
        assert!(!out.exists());
    }
}

/// The derived copy every CNN figure used, imported with `--from` beside a
/// copy of the shipped pipelines, which then plan and run on it.
#[test]
#[ignore = "needs ../shared"]
fn the_shared_derived_copy_imports_and_the_cnn_pipelines_run_on_it() {
    let shared = crate::common::shared("datasets/pneumoniamnist.npz");
    let tmp = tempfile::tempdir().expect("dir");
    let root = tmp.path();
    let pipelines = root.join("pipelines");
    std::fs::create_dir_all(&pipelines).expect("dir");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    // the CNN's job files and pipelines, whichever the stragglers pipeline names
    for entry in std::fs::read_dir(repo.join("pipelines")).expect("pipelines") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        if (name.starts_with("cnn-") || name == "pneumonia-cnn.toml") && name.ends_with(".toml") {
            std::fs::copy(&path, pipelines.join(&name)).expect("copy");
        }
    }
    // the PyTorch peer the stragglers pipeline names
    std::fs::create_dir_all(pipelines.join("peers")).expect("dir");
    for entry in std::fs::read_dir(repo.join("pipelines/peers")).expect("peers") {
        let path = entry.expect("entry").path();
        if path.is_file() {
            std::fs::copy(
                &path,
                pipelines
                    .join("peers")
                    .join(path.file_name().expect("name")),
            )
            .expect("copy");
        }
    }
    let r = fetch(&[
        "--from",
        dir_str(&shared),
        "--out",
        dir_str(&root.join("data")),
    ]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    let stdout = text(&r.stdout);
    assert!(
        stdout.contains("3882/524/624 train/val/test images of 28 x 28"),
        "{stdout}"
    );
    assert!(
        stdout.contains("MD5 f5b994ec7c2fe8bc81ae15cbab7c3df8"),
        "{stdout}"
    );
    assert!(stdout.contains("not the publisher's file"), "{stdout}");
    forestall::bench::plan_pipeline(&pipelines.join("cnn-stragglers.toml"))
        .expect("the bench pipeline plans on the imported copy");
    let run = root.join("run");
    let r = forestall(&[
        "run",
        dir_str(&pipelines.join("pneumonia-cnn.toml")),
        "--iterations",
        "1",
        "--out",
        dir_str(&run),
        "-q",
    ]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    assert!(
        text(&r.stdout).contains("dataset      md5 f5b994ec7c2fe8bc81ae15cbab7c3df8"),
        "{}",
        text(&r.stdout)
    );
}
