//! Bounded mutation fuzzing (seeded, so a failure reproduces): the job-file
//! parser and validator, and the trace reader, never panic on damaged input;
//! they either accept it or return an error that says what is wrong.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use forestall::spec::{parse_job, validate};
use forestall::trace::read_trace_dir;

/// xorshift64*: a small seeded generator for mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const ODD_VALUES: &[&str] = &[
    "nan",
    "inf",
    "-inf",
    "-1",
    "0",
    "1e300",
    "-1e300",
    "18446744073709551616",
    "\"x\"",
    "[]",
    "{}",
    "true",
    "1.5",
    "4294967296",
    "",
];

/// One random damage to a job file's text.
fn mutate(text: &str, rng: &mut Rng) -> String {
    let mut bytes = text.as_bytes().to_vec();
    match rng.below(5) {
        0 => {
            let i = rng.below(bytes.len());
            bytes[i] = (rng.next() & 0x7f) as u8;
        }
        1 => bytes.truncate(rng.below(bytes.len())),
        2 => {
            // a value replaced by an odd one
            let lines: Vec<&str> = text.lines().collect();
            let i = rng.below(lines.len());
            let odd = ODD_VALUES[rng.below(ODD_VALUES.len())];
            let mut out: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
            if let Some((key, _)) = lines[i].split_once('=') {
                out[i] = format!("{key}= {odd}");
            }
            return out.join("\n");
        }
        3 => {
            // a line repeated (duplicate keys or sections)
            let lines: Vec<&str> = text.lines().collect();
            let i = rng.below(lines.len());
            let mut out: Vec<&str> = lines.clone();
            out.insert(i, lines[i]);
            return out.join("\n");
        }
        _ => {
            let i = rng.below(bytes.len());
            let inserts = b"[]=\"\\\n#0";
            bytes.insert(i, inserts[rng.below(inserts.len())]);
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

#[test]
fn damaged_job_files_never_panic() {
    let base = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("pipelines/quickstart.toml"),
    )
    .expect("quick start");
    let mut rng = Rng(0x5eed_f00d);
    for case in 0..2000 {
        let mut text = base.clone();
        for _ in 0..=rng.below(3) {
            text = mutate(&text, &mut rng);
        }
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            parse_job(&text, None).and_then(|spec| validate(&spec, &text, None).map(|_| ()))
        }));
        match outcome {
            Err(_) => panic!("case {case}: the parser panicked on:\n{text}"),
            Ok(Err(e)) => assert!(!e.to_string().trim().is_empty(), "case {case}: empty error"),
            Ok(Ok(())) => {}
        }
    }
}

#[test]
fn damaged_trace_parts_never_panic_and_are_named() {
    let tmp = tempfile::tempdir().expect("dir");
    let plan = crate::common::plan("[job]\niterations = 3\n[workers]\ncount = 2\n");
    crate::common::run_in(&plan, tmp.path());
    let part = tmp.path().join("units/part-p000-00000.parquet");
    let good = std::fs::read(&part).expect("part");
    let mut rng = Rng(0xdead_beef);
    for case in 0..300 {
        let mut bad = good.clone();
        match rng.below(3) {
            0 => bad.truncate(rng.below(bad.len())),
            1 => {
                for _ in 0..=rng.below(8) {
                    let i = rng.below(bad.len());
                    bad[i] ^= 1 << rng.below(8);
                }
            }
            _ => {
                let i = rng.below(bad.len());
                let n = rng.below(64).min(bad.len() - i);
                bad.drain(i..i + n);
            }
        }
        std::fs::write(&part, &bad).expect("write");
        match catch_unwind(AssertUnwindSafe(|| read_trace_dir(tmp.path()))) {
            Err(_) => panic!("case {case}: the reader panicked on a damaged part"),
            Ok(Err(e)) => {
                let message = e.to_string();
                assert!(
                    message.contains("part-p000-00000.parquet"),
                    "case {case}: the error does not name the file: {message}"
                );
            }
            // a flip in padding or statistics may leave the data readable
            Ok(Ok(_)) => {}
        }
    }
}
