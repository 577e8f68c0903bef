//! `--gather`: a job whose processes run on hosts without shared storage
//! ends with every process's trace parts in process 0's output directory,
//! so its trace reads as a one-host run's does.
//!
//! After training, each process above 0 connects to process 0 once more,
//! authenticated as the training's connections are and bound to the plan
//! and to the gather ([`handshake::connect_star`]), and sends its parts;
//! process 0 checks each one's name, size and SHA-256 and writes it
//! atomically beside its own. A part it already holds with the same bytes
//! (the storage was shared after all) is left as it is. The senders keep
//! their copies.
//!
//! On the wire, from a process to process 0: the number of files (u32);
//! for each, its path under the trace directory (u16 length, then
//! `TABLE/part-pIII-SSSSS.parquet` with III the sender's index), its size
//! (u64), its SHA-256 and its bytes. Process 0 answers one byte, 1, once
//! every file is written.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::cluster::ClusterSpec;
use super::handshake;

/// How long one read or write of a gather may wait.
const IO_TIMEOUT: Duration = Duration::from_secs(60);
/// The most files one process may send.
const MOST_FILES: u32 = 1_000_000;
/// The largest part accepted, bytes.
const MOST_BYTES: u64 = 1 << 34;

/// What a gather moved (process 0), or sent (the others).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Gathered {
    /// Parts sent or received.
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Parts process 0 held already with the same bytes.
    pub same: usize,
    /// From connecting to the last acknowledgement, s.
    pub seconds: f64,
}

/// Gathers every process's trace parts under `trace_dir` into process 0's:
/// process 0 receives, the others send. Waits for every process at most the
/// cluster's connect timeout; an error names the process and the file.
pub fn gather(c: &ClusterSpec, plan_hash: &str, trace_dir: &Path) -> Result<Gathered, String> {
    let started = Instant::now();
    let context = format!(
        "gather|{plan_hash}|{}|{}",
        env!("FORESTALL_GIT_REVISION"),
        c.addresses.len()
    );
    let connected = handshake::connect_star(&handshake::Connect {
        addresses: &c.addresses,
        process: c.process as usize,
        key: &c.key,
        context,
        timeout: c.connect_timeout,
        origin_us: 0,
    })
    .map_err(|e| format!("gathering the trace: {e}"))?;
    let mut total = Gathered::default();
    let results: Vec<Result<Gathered, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = connected
            .streams
            .into_iter()
            .enumerate()
            .filter_map(|(i, s)| s.map(|s| (i, s)))
            .map(|(i, s)| {
                scope.spawn(move || {
                    timed(&s)?;
                    if c.process == 0 {
                        receive(s, i, trace_dir)
                            .map_err(|e| format!("gathering from process {i}: {e}"))
                    } else {
                        send(s, c.process as usize, trace_dir)
                            .map_err(|e| format!("sending the trace to process 0: {e}"))
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a gather thread panicked".into()))
            })
            .collect()
    });
    for r in results {
        let g = r?;
        total.files += g.files;
        total.bytes += g.bytes;
        total.same += g.same;
    }
    total.seconds = started.elapsed().as_secs_f64();
    Ok(total)
}

fn timed(s: &TcpStream) -> Result<(), String> {
    s.set_read_timeout(Some(IO_TIMEOUT))
        .and_then(|()| s.set_write_timeout(Some(IO_TIMEOUT)))
        .map_err(|e| e.to_string())
}

/// Process `process`'s parts under `trace_dir`: (path under it, file).
pub fn own_parts(trace_dir: &Path, process: usize) -> Result<Vec<(String, PathBuf)>, String> {
    let prefix = crate::trace::part::part_prefix(process as u32);
    let mut found = Vec::new();
    let tables =
        std::fs::read_dir(trace_dir).map_err(|e| format!("{}: {e}", trace_dir.display()))?;
    for table in tables.flatten().filter(|e| e.path().is_dir()) {
        let name = table.file_name().to_string_lossy().into_owned();
        let files = std::fs::read_dir(table.path())
            .map_err(|e| format!("{}: {e}", table.path().display()))?;
        for f in files.flatten() {
            let file = f.file_name().to_string_lossy().into_owned();
            if file.starts_with(&prefix) && file.ends_with(".parquet") {
                found.push((format!("{name}/{file}"), f.path()));
            }
        }
    }
    found.sort();
    Ok(found)
}

/// Whether `name` is a part of process `process`: `TABLE/part-pIII-SSSSS.parquet`
/// with a table name of lowercase letters and underscores.
fn is_part_of(name: &str, process: usize) -> bool {
    let Some((table, file)) = name.split_once('/') else {
        return false;
    };
    let prefix = crate::trace::part::part_prefix(process as u32);
    let seq = file
        .strip_prefix(&prefix)
        .and_then(|rest| rest.strip_suffix(".parquet"));
    !table.is_empty()
        && table.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
        && seq.is_some_and(|s| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit()))
}

fn send(mut s: TcpStream, process: usize, trace_dir: &Path) -> Result<Gathered, String> {
    let parts = own_parts(trace_dir, process)?;
    let io = |e: std::io::Error| e.to_string();
    s.write_all(&(parts.len() as u32).to_le_bytes())
        .map_err(io)?;
    let mut sent = Gathered::default();
    for (name, path) in &parts {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        s.write_all(&(name.len() as u16).to_le_bytes())
            .map_err(io)?;
        s.write_all(name.as_bytes()).map_err(io)?;
        s.write_all(&(bytes.len() as u64).to_le_bytes())
            .map_err(io)?;
        s.write_all(&Sha256::digest(&bytes)).map_err(io)?;
        s.write_all(&bytes).map_err(io)?;
        sent.files += 1;
        sent.bytes += bytes.len() as u64;
    }
    let mut ok = [0u8; 1];
    s.read_exact(&mut ok)
        .map_err(|e| format!("process 0 did not confirm the {} parts ({e})", parts.len()))?;
    Ok(sent)
}

fn receive(mut s: TcpStream, process: usize, trace_dir: &Path) -> Result<Gathered, String> {
    let mut got = Gathered::default();
    let count = read_u32(&mut s)?;
    if count > MOST_FILES {
        return Err(format!("announces {count} files"));
    }
    for _ in 0..count {
        let mut len = [0u8; 2];
        s.read_exact(&mut len).map_err(|e| e.to_string())?;
        let mut name = vec![0u8; u16::from_le_bytes(len) as usize];
        s.read_exact(&mut name).map_err(|e| e.to_string())?;
        let name = String::from_utf8(name).map_err(|_| "a file name that is not text")?;
        if !is_part_of(&name, process) {
            return Err(format!("{name:?} is not one of its trace parts"));
        }
        let mut size = [0u8; 8];
        s.read_exact(&mut size).map_err(|e| e.to_string())?;
        let size = u64::from_le_bytes(size);
        if size > MOST_BYTES {
            return Err(format!("{name}: {size} bytes"));
        }
        let mut sha = [0u8; 32];
        s.read_exact(&mut sha).map_err(|e| e.to_string())?;
        let mut bytes = vec![0u8; size as usize];
        s.read_exact(&mut bytes)
            .map_err(|e| format!("{name}: {e}"))?;
        if Sha256::digest(&bytes).as_slice() != sha {
            return Err(format!("{name}: its bytes do not match its SHA-256"));
        }
        let path = trace_dir.join(&name);
        got.files += 1;
        got.bytes += size;
        if std::fs::read(&path).is_ok_and(|held| held == bytes) {
            got.same += 1;
            continue;
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        crate::fsutil::write_atomic(&path, &bytes)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    s.write_all(&[1]).map_err(|e| e.to_string())?;
    Ok(got)
}

fn read_u32(s: &mut TcpStream) -> Result<u32, String> {
    let mut b = [0u8; 4];
    s.read_exact(&mut b).map_err(|e| e.to_string())?;
    Ok(u32::from_le_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_senders_own_parts_are_taken() {
        assert!(is_part_of("units/part-p001-00003.parquet", 1));
        assert!(is_part_of("worker_ops/part-p001-00000.parquet", 1));
        for bad in [
            "units/part-p000-00003.parquet",
            "../units/part-p001-00003.parquet",
            "units/../../x/part-p001-00003.parquet",
            "/etc/part-p001-00003.parquet",
            "units/part-p001-0003.parquet",
            "units/part-p001-00003.parquet.tmp",
            "part-p001-00003.parquet",
            "Units/part-p001-00003.parquet",
        ] {
            assert!(!is_part_of(bad, 1), "{bad}");
        }
    }

    /// Two processes on loopback, each with its own trace directory:
    /// process 0 ends with both processes' parts, byte for byte; a part it
    /// holds already is counted as the same.
    #[test]
    fn process_0_receives_every_part_of_the_others() {
        let held: Vec<std::net::TcpListener> = (0..2)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("port"))
            .collect();
        let addresses: Vec<String> = held
            .iter()
            .map(|l| l.local_addr().expect("bound").to_string())
            .collect();
        drop(held);
        let (zero, one) = (
            tempfile::tempdir().expect("dir"),
            tempfile::tempdir().expect("dir"),
        );
        let write = |dir: &Path, name: &str, bytes: &[u8]| {
            let p = dir.join(name);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(p, bytes).expect("write");
        };
        write(zero.path(), "units/part-p000-00000.parquet", b"zero");
        write(zero.path(), "units/part-p001-00000.parquet", b"one-a");
        write(one.path(), "units/part-p001-00000.parquet", b"one-a");
        write(
            one.path(),
            "workers/part-p001-00001.parquet",
            &[7u8; 100_000],
        );
        write(one.path(), "units/part-p000-00009.parquet", b"not its own");
        let spec = |process: u32| ClusterSpec {
            process,
            threads: 1,
            addresses: addresses.clone(),
            epoch_us: None,
            connect_timeout: Duration::from_secs(10),
            key: b"k".to_vec(),
        };
        let (s0, s1) = (spec(0), spec(1));
        let dir0 = zero.path().to_owned();
        let dir1 = one.path().to_owned();
        let receiving = std::thread::spawn(move || gather(&s0, "plan", &dir0));
        let sent = gather(&s1, "plan", &dir1).expect("sends");
        let got = receiving.join().expect("joins").expect("receives");
        assert_eq!((sent.files, got.files, got.same), (2, 2, 1));
        assert_eq!(got.bytes, 100_005);
        assert_eq!(
            std::fs::read(zero.path().join("workers/part-p001-00001.parquet")).expect("there"),
            vec![7u8; 100_000]
        );
        assert!(!zero.path().join("units/part-p000-00009.parquet").exists());
    }
}
