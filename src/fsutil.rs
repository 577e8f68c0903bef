//! File-system helpers shared by every writer: atomic writes, run-directory
//! names, and the hex form in which file and plan digests are written.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// Lower-case hex of `bytes` (how SHA-256 digests of files, plans and
/// parameters are written).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `bytes` to `path` atomically: a hidden temporary file in the same
/// directory is written, synced and renamed over `path`, and the directory is
/// synced, so readers see the old file or the new one, never half of one, and
/// the new one survives a power cut once this returns.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic_within(path, bytes, &Quota::default())
}

/// As [`write_atomic`], charging the bytes to `quota` (a full quota fails the
/// write as a full disk would: with `StorageFull`, leaving no file behind).
pub fn write_atomic_within(path: &Path, bytes: &[u8], quota: &Quota) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut file = QuotaFile::new(std::fs::File::create(&tmp)?, quota.clone());
        file.write_all(bytes)?;
        file.file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Makes a rename in `dir` durable (a no-op off Unix).
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    std::fs::File::open(dir)?.sync_all()?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// A budget of bytes that writers may still write, shared by clones. The
/// default is unlimited; tests give a writer a small one to see what a full
/// disk does to it.
#[derive(Debug, Clone, Default)]
pub struct Quota(Option<std::sync::Arc<std::sync::atomic::AtomicU64>>);

impl Quota {
    /// At most `bytes` more bytes.
    pub fn bytes(bytes: u64) -> Self {
        Self(Some(std::sync::Arc::new(bytes.into())))
    }

    /// Takes `n` bytes from the budget, or fails as a full disk does.
    pub fn take(&self, n: usize) -> std::io::Result<()> {
        use std::sync::atomic::Ordering;
        let Some(left) = &self.0 else {
            return Ok(());
        };
        left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| {
            l.checked_sub(n as u64)
        })
        .map(drop)
        .map_err(|_| {
            left.store(0, Ordering::Relaxed);
            std::io::Error::new(
                std::io::ErrorKind::StorageFull,
                "No space left on device (the write quota is used up)",
            )
        })
    }
}

/// A file whose writes are charged to a [`Quota`].
#[derive(Debug)]
pub struct QuotaFile {
    /// The file.
    pub file: std::fs::File,
    quota: Quota,
}

impl QuotaFile {
    /// `file`, charged to `quota`.
    pub fn new(file: std::fs::File, quota: Quota) -> Self {
        Self { file, quota }
    }
}

impl Write for QuotaFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.quota.take(buf.len())?;
        self.file.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// `YYYYMMDD-HHMMSS` in UTC for `time` (civil-from-days, proleptic Gregorian).
pub fn utc_stamp(time: SystemTime) -> String {
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}{m:02}{d:02}-{:02}{:02}{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// `YYYY-MM-DD` in UTC for `time`.
pub fn utc_date(time: SystemTime) -> String {
    let s = utc_stamp(time);
    format!("{}-{}-{}", &s[0..4], &s[4..6], &s[6..8])
}

fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// True when `dir` exists and holds at least one entry.
pub fn is_non_empty_dir(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some())
}

/// `base`, or `base-2`, `base-3`, … : the first that does not exist yet.
pub fn fresh_dir(base: &Path) -> PathBuf {
    if !base.exists() {
        return base.to_owned();
    }
    (2..)
        .map(|i| PathBuf::from(format!("{}-{i}", base.display())))
        .find(|p| !p.exists())
        .expect("some suffix is free")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn known_dates() {
        let t = UNIX_EPOCH + Duration::from_secs(1_795_833_296); // 2026-11-28 02:34:56
        assert_eq!(utc_stamp(t), "20261128-023456");
        assert_eq!(utc_date(UNIX_EPOCH), "1970-01-01");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(utc_date(leap), "2000-02-29");
    }

    #[test]
    fn atomic_write_replaces_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_full_disk_fails_the_write_and_keeps_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.json");
        write_atomic(&p, b"old contents").unwrap();
        let err = write_atomic_within(&p, &[7u8; 100], &Quota::bytes(40)).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::StorageFull);
        assert_eq!(std::fs::read(&p).unwrap(), b"old contents");
        // no temporary file left behind
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        write_atomic_within(&p, b"fits", &Quota::bytes(40)).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"fits");
    }
}
