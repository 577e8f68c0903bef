//! NumPy `.npz` files: a zip of `.npy` arrays (stored or deflated), read into
//! named arrays. Little-endian `u1`, `i8` (int64), `f4` and `f8` in C order;
//! anything else (Fortran order, big-endian, other types) is refused by name.
//!
//! ```no_run
//! # fn main() -> Result<(), forestall::data::npz::NpzError> {
//! let npz = forestall::data::npz::read_npz("pneumoniamnist.npz".as_ref())?;
//! let images = npz.array("train_images")?; // shape [3882, 28, 28], u8
//! let pixels: Vec<u8> = images.to_u8()?;
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Errors met while reading an `.npz`; each names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NpzError {
    /// The file could not be opened.
    #[error("failed to open {path}")]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Not a zip archive, or a truncated or corrupt one.
    #[error("{path} is not a readable .npz (zip) file: {problem}")]
    Zip {
        /// The file.
        path: PathBuf,
        /// zip's message.
        problem: String,
    },
    /// An array is not a well-formed `.npy`.
    #[error("{path}: array '{array}' {problem}")]
    Array {
        /// The file.
        path: PathBuf,
        /// The array.
        array: String,
        /// What is wrong.
        problem: String,
    },
    /// An array the caller needs is not in the file.
    #[error("{path} has no array '{array}' (arrays: {present})")]
    Missing {
        /// The file.
        path: PathBuf,
        /// The array asked for.
        array: String,
        /// The arrays the file has.
        present: String,
    },
}

/// Element types this reader understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NpyDtype {
    /// `u1`: unsigned bytes.
    U8,
    /// `<i8`: little-endian int64.
    I64,
    /// `<f4`.
    F32,
    /// `<f8`.
    F64,
}

impl NpyDtype {
    fn parse(descr: &str) -> Option<Self> {
        Some(match descr {
            "|u1" | "<u1" | "u1" => Self::U8,
            "<i8" => Self::I64,
            "<f4" => Self::F32,
            "<f8" => Self::F64,
            _ => return None,
        })
    }

    fn size(self) -> usize {
        match self {
            Self::U8 => 1,
            Self::F32 => 4,
            Self::I64 | Self::F64 => 8,
        }
    }
}

impl std::fmt::Display for NpyDtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::U8 => "|u1",
            Self::I64 => "<i8",
            Self::F32 => "<f4",
            Self::F64 => "<f8",
        })
    }
}

/// One array: its shape, type and raw little-endian bytes (C order).
#[derive(Debug, Clone, PartialEq)]
pub struct NpyArray {
    /// Name in the archive (without `.npy`).
    pub name: String,
    /// Shape, C order.
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: NpyDtype,
    /// The `.npz` it came from, for messages.
    path: PathBuf,
    bytes: Vec<u8>,
}

/// The integers an `f64` holds exactly: ±2^53.
const F64_EXACT: i64 = 1 << 53;
/// The integers an `f32` holds exactly: ±2^24.
const F32_EXACT: i64 = 1 << 24;

impl NpyArray {
    /// Whether the elements are integers (pixels in 0..=255, labels).
    pub fn is_integer(&self) -> bool {
        matches!(self.dtype, NpyDtype::U8 | NpyDtype::I64)
    }

    /// Number of elements (the product of the shape).
    pub fn len(&self) -> usize {
        self.bytes.len() / self.dtype.size()
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    fn value_err(&self, problem: String) -> NpzError {
        NpzError::Array {
            path: self.path.clone(),
            array: self.name.clone(),
            problem,
        }
    }

    fn i64s(&self) -> impl Iterator<Item = i64> + '_ {
        self.bytes
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(le(c)))
    }

    fn f32s(&self) -> impl Iterator<Item = f32> + '_ {
        self.bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(le(c)))
    }

    fn f64s(&self) -> impl Iterator<Item = f64> + '_ {
        self.bytes
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(le(c)))
    }

    /// Integer elements as `i64`, refusing one beyond ±`limit`.
    fn checked_i64s(&self, limit: i64, target: &str) -> Result<Vec<i64>, NpzError> {
        self.i64s()
            .enumerate()
            .map(|(i, v)| {
                if (-limit..=limit).contains(&v) {
                    Ok(v)
                } else {
                    Err(self.value_err(format!(
                        "element {i} is {v}, which {target} cannot hold exactly"
                    )))
                }
            })
            .collect()
    }

    /// Every element as `f64`, in C order: exact for every type (an `<i8`
    /// element beyond ±2^53 is an error).
    pub fn to_f64(&self) -> Result<Vec<f64>, NpzError> {
        Ok(match self.dtype {
            NpyDtype::U8 => self.bytes.iter().map(|&b| f64::from(b)).collect(),
            NpyDtype::I64 => self
                .checked_i64s(F64_EXACT, "f64")?
                .into_iter()
                .map(|v| v as f64)
                .collect(),
            NpyDtype::F32 => self.f32s().map(f64::from).collect(),
            NpyDtype::F64 => self.f64s().collect(),
        })
    }

    /// Every element as `f32`, in C order: exact for `|u1` and `<f4`; `<f8` is
    /// rounded to the nearest `f32` (the usual narrowing of model inputs); an
    /// `<i8` element beyond ±2^24 is an error.
    pub fn to_f32(&self) -> Result<Vec<f32>, NpzError> {
        Ok(match self.dtype {
            NpyDtype::U8 => self.bytes.iter().map(|&b| f32::from(b)).collect(),
            NpyDtype::I64 => self
                .checked_i64s(F32_EXACT, "f32")?
                .into_iter()
                .map(|v| v as f32)
                .collect(),
            NpyDtype::F32 => self.f32s().collect(),
            NpyDtype::F64 => self.f64s().map(|v| v as f32).collect(),
        })
    }

    /// Every element as `u8`, in C order: `|u1`, or `<i8` whose elements are
    /// all in 0..=255; float arrays are refused.
    pub fn to_u8(&self) -> Result<Vec<u8>, NpzError> {
        match self.dtype {
            NpyDtype::U8 => Ok(self.bytes.clone()),
            NpyDtype::I64 => self
                .i64s()
                .enumerate()
                .map(|(i, v)| {
                    u8::try_from(v).map_err(|_| {
                        self.value_err(format!("element {i} is {v}, outside 0..=255 (u8)"))
                    })
                })
                .collect(),
            NpyDtype::F32 | NpyDtype::F64 => Err(self.value_err(format!(
                "has element type {}, not an integer type that fits u8",
                self.dtype
            ))),
        }
    }

    /// Every element as `i64`, in C order: integer arrays only (`|u1`, `<i8`).
    pub fn to_i64(&self) -> Result<Vec<i64>, NpzError> {
        match self.dtype {
            NpyDtype::U8 => Ok(self.bytes.iter().map(|&b| i64::from(b)).collect()),
            NpyDtype::I64 => Ok(self.i64s().collect()),
            NpyDtype::F32 | NpyDtype::F64 => Err(self.value_err(format!(
                "has element type {}, not an integer type",
                self.dtype
            ))),
        }
    }
}

/// A chunk of exactly `N` bytes as an array (`chunks_exact` guarantees the length).
fn le<const N: usize>(chunk: &[u8]) -> [u8; N] {
    let mut out = [0; N];
    out.copy_from_slice(chunk);
    out
}

/// The arrays of one `.npz`.
#[derive(Debug, Clone)]
pub struct Npz {
    path: PathBuf,
    arrays: BTreeMap<String, NpyArray>,
}

impl Npz {
    /// The array `name`, or an error listing the arrays present.
    pub fn array(&self, name: &str) -> Result<&NpyArray, NpzError> {
        self.arrays.get(name).ok_or_else(|| NpzError::Missing {
            path: self.path.clone(),
            array: name.to_owned(),
            present: self.arrays.keys().cloned().collect::<Vec<_>>().join(", "),
        })
    }

    /// Names of the arrays.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.arrays.keys().map(String::as_str)
    }
}

/// Reads every `.npy` array of the `.npz` at `path`.
pub fn read_npz(path: &Path) -> Result<Npz, NpzError> {
    let file = std::fs::File::open(path).map_err(|source| NpzError::Open {
        path: path.to_owned(),
        source,
    })?;
    let zip_err = |e: zip::result::ZipError| NpzError::Zip {
        path: path.to_owned(),
        problem: e.to_string(),
    };
    let mut archive = zip::ZipArchive::new(file).map_err(zip_err)?;
    let mut arrays = BTreeMap::new();
    for i in 0..archive.len() {
        let mut entry = archive.by_index(i).map_err(zip_err)?;
        let Some(name) = entry.name().strip_suffix(".npy").map(str::to_owned) else {
            continue;
        };
        // The size is the archive's claim: trust it for the first 256 MiB only.
        let mut bytes =
            Vec::with_capacity(usize::try_from(entry.size()).map_or(0, |n| n.min(1 << 28)));
        entry.read_to_end(&mut bytes).map_err(|e| NpzError::Zip {
            path: path.to_owned(),
            problem: format!("array '{name}' cannot be read: {e}"),
        })?;
        let array = parse_npy(path, &name, &bytes).map_err(|problem| NpzError::Array {
            path: path.to_owned(),
            array: name.clone(),
            problem,
        })?;
        arrays.insert(name, array);
    }
    Ok(Npz {
        path: path.to_owned(),
        arrays,
    })
}

/// Parses one `.npy` (format 1.0, 2.0 or 3.0).
fn parse_npy(path: &Path, name: &str, bytes: &[u8]) -> Result<NpyArray, String> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err("is not a .npy array (bad magic)".into());
    }
    let (header_len, start) = match bytes[6] {
        1 => (usize::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(format!("has .npy format version {v}, not 1, 2 or 3")),
    };
    let header = bytes
        .get(start..start + header_len)
        .ok_or("has a truncated header")?;
    let header = std::str::from_utf8(header).map_err(|_| "has a header that is not text")?;
    let field = |key: &str| -> Result<&str, String> {
        let at = header
            .find(&format!("'{key}'"))
            .ok_or(format!("header has no '{key}'"))?;
        Ok(header[at + key.len() + 2..].trim_start_matches([':', ' ']))
    };
    let descr = field("descr")?;
    let descr = descr
        .strip_prefix('\'')
        .and_then(|d| d.split('\'').next())
        .ok_or("header has an unreadable 'descr'")?;
    let dtype = NpyDtype::parse(descr).ok_or(format!(
        "has element type '{descr}'; supported: |u1, <i8, <f4, <f8"
    ))?;
    if field("fortran_order")?.starts_with("True") {
        return Err("is in Fortran order; only C order is supported".into());
    }
    let shape_text = field("shape")?;
    let shape_text = shape_text
        .strip_prefix('(')
        .and_then(|s| s.split(')').next())
        .ok_or("header has an unreadable 'shape'")?;
    let shape = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<usize>()
                .map_err(|_| format!("has shape entry '{s}'"))
        })
        .collect::<Result<Vec<usize>, String>>()?;
    let expected = shape
        .iter()
        .try_fold(dtype.size(), |n, &d| n.checked_mul(d))
        .ok_or(format!("has shape {shape:?}, too large to hold"))?;
    let data = &bytes[start + header_len..];
    if data.len() != expected {
        return Err(format!(
            "has {} data bytes; shape {shape:?} of {descr} needs {expected} (truncated or corrupt)",
            data.len()
        ));
    }
    Ok(NpyArray {
        name: name.to_owned(),
        shape,
        dtype,
        path: path.to_owned(),
        bytes: data.to_vec(),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Write;

    /// A `.npy` of `descr` with `shape` and raw `data`.
    pub(crate) fn npy(descr: &str, shape: &[usize], data: &[u8]) -> Vec<u8> {
        let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
        let shape = match dims.len() {
            1 => format!("({},)", dims[0]),
            _ => format!("({})", dims.join(", ")),
        };
        let mut header =
            format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend((header.len() as u16).to_le_bytes());
        out.extend(header.as_bytes());
        out.extend(data);
        out
    }

    /// Writes an `.npz` of (name, npy bytes), deflated.
    pub(crate) fn write_npz(path: &Path, arrays: &[(&str, Vec<u8>)]) {
        write_npz_with(path, arrays, zip::CompressionMethod::Deflated);
    }

    /// Writes an `.npz` of (name, npy bytes) with `method`.
    fn write_npz_with(path: &Path, arrays: &[(&str, Vec<u8>)], method: zip::CompressionMethod) {
        let file = std::fs::File::create(path).expect("create");
        let mut zip = zip::ZipWriter::new(file);
        let options = zip::write::FileOptions::default().compression_method(method);
        for (name, bytes) in arrays {
            zip.start_file(format!("{name}.npy"), options)
                .expect("entry");
            zip.write_all(bytes).expect("write");
        }
        zip.finish().expect("finish");
    }

    #[test]
    fn reads_arrays_of_each_type() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("a.npz");
        let f: Vec<u8> = [1.5f32, -2.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let i: Vec<u8> = [7i64, -1].iter().flat_map(|x| x.to_le_bytes()).collect();
        write_npz(
            &path,
            &[
                ("img", npy("|u1", &[2, 2], &[0, 1, 254, 255])),
                ("f", npy("<f4", &[2], &f)),
                ("i", npy("<i8", &[2, 1], &i)),
            ],
        );
        let npz = read_npz(&path).expect("reads");
        let img = npz.array("img").expect("img");
        assert_eq!(img.shape, vec![2, 2]);
        assert!(img.is_integer());
        assert_eq!(img.to_f64().expect("values"), vec![0.0, 1.0, 254.0, 255.0]);
        assert_eq!(
            npz.array("f").expect("f").to_f64().expect("f"),
            vec![1.5, -2.0]
        );
        assert_eq!(npz.array("i").expect("i").shape, vec![2, 1]);
        assert_eq!(
            npz.array("i").expect("i").to_f64().expect("i"),
            vec![7.0, -1.0]
        );
        assert_eq!(img.to_u8().expect("u8"), vec![0, 1, 254, 255]);
        assert_eq!(img.to_i64().expect("i64"), vec![0, 1, 254, 255]);
        assert_eq!(img.to_f32().expect("f32"), vec![0.0, 1.0, 254.0, 255.0]);
        assert_eq!((img.len(), img.is_empty()), (4, false));
        assert_eq!(npz.names().collect::<Vec<_>>(), ["f", "i", "img"]);
    }

    #[test]
    fn stored_entries_and_f8_read_too() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("s.npz");
        let d: Vec<u8> = [0.25f64, 1e300]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        write_npz_with(
            &path,
            &[("d", npy("<f8", &[2], &d))],
            zip::CompressionMethod::Stored,
        );
        let npz = read_npz(&path).expect("reads");
        let a = npz.array("d").expect("d");
        assert_eq!(a.dtype, NpyDtype::F64);
        assert_eq!(a.to_f64().expect("f64"), vec![0.25, 1e300]);
        assert_eq!(a.to_f32().expect("f32"), vec![0.25, f32::INFINITY]);
    }

    #[test]
    fn conversions_that_lose_values_are_refused_by_element() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("c.npz");
        let i: Vec<u8> = [3i64, 300, 1 << 30]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let f: Vec<u8> = [0.5f32].iter().flat_map(|x| x.to_le_bytes()).collect();
        write_npz(
            &path,
            &[("i", npy("<i8", &[3], &i)), ("f", npy("<f4", &[1], &f))],
        );
        let npz = read_npz(&path).expect("reads");
        let i = npz.array("i").expect("i");
        let err = i.to_u8().expect_err("300");
        assert_eq!(
            err.to_string(),
            format!(
                "{}: array 'i' element 1 is 300, outside 0..=255 (u8)",
                path.display()
            )
        );
        let err = i.to_f32().expect_err("2^30");
        assert!(
            err.to_string()
                .contains("element 2 is 1073741824, which f32"),
            "{err}"
        );
        assert_eq!(i.to_f64().expect("f64"), vec![3.0, 300.0, 1073741824.0]);
        let err = npz.array("f").expect("f").to_i64().expect_err("float");
        assert!(
            err.to_string()
                .contains("array 'f' has element type <f4, not an integer"),
            "{err}"
        );
    }

    #[test]
    fn fortran_order_and_big_endian_are_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("f.npz");
        let mut fortran = npy("|u1", &[2, 2], &[1, 2, 3, 4]);
        let at = fortran
            .windows(5)
            .position(|w| w == b"False")
            .expect("False");
        fortran.splice(at..at + 5, b"True ".iter().copied());
        write_npz(&path, &[("m", fortran)]);
        let err = read_npz(&path).expect_err("fortran");
        assert_eq!(
            err.to_string(),
            format!(
                "{}: array 'm' is in Fortran order; only C order is supported",
                path.display()
            )
        );
        write_npz(&path, &[("b", npy(">f8", &[1], &[0; 8]))]);
        let err = read_npz(&path).expect_err("big-endian");
        assert!(
            err.to_string().contains("array 'b' has element type '>f8'"),
            "{err}"
        );
    }

    #[test]
    fn bad_files_name_the_file_and_the_array() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("b.npz");
        write_npz(&path, &[("x", npy("|u1", &[3], &[1, 2]))]);
        let err = read_npz(&path).expect_err("short array");
        assert!(
            err.to_string()
                .contains("array 'x' has 2 data bytes; shape [3] of |u1 needs 3"),
            "{err}"
        );
        write_npz(&path, &[("x", npy("<c16", &[1], &[0; 16]))]);
        let err = read_npz(&path).expect_err("complex");
        assert!(err.to_string().contains("element type '<c16'"), "{err}");
        write_npz(&path, &[("x", b"not numpy".to_vec())]);
        assert!(read_npz(&path)
            .expect_err("magic")
            .to_string()
            .contains("bad magic"));
        write_npz(&path, &[("x", npy("|u1", &[1], &[1]))]);
        let err = read_npz(&path)
            .expect("reads")
            .array("y")
            .expect_err("missing");
        assert_eq!(
            err.to_string(),
            format!("{} has no array 'y' (arrays: x)", path.display())
        );
        // a truncated archive
        let bytes = std::fs::read(&path).expect("read");
        std::fs::write(&path, &bytes[..bytes.len() / 2]).expect("write");
        let err = read_npz(&path).expect_err("truncated");
        assert!(err.to_string().contains("not a readable .npz"), "{err}");
        let err = read_npz(&dir.path().join("none.npz")).expect_err("absent");
        assert!(err.to_string().starts_with("failed to open"), "{err}");
    }

    #[test]
    #[ignore = "needs ../shared"]
    fn reads_the_shared_pneumonia_file() {
        let path = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../shared/datasets/pneumoniamnist.npz"
        ));
        assert!(
            path.exists(),
            "{} is missing: this test needs ../shared beside the checkout",
            path.display()
        );
        let npz = read_npz(path).expect("reads");
        assert_eq!(
            npz.array("train_images").expect("train").shape,
            vec![3882, 28, 28]
        );
        assert_eq!(
            npz.array("train_labels").expect("labels").shape,
            vec![3882, 1]
        );
        assert_eq!(
            npz.array("val_images").expect("val").shape,
            vec![524, 28, 28]
        );
        assert_eq!(
            npz.array("test_images").expect("test").shape,
            vec![624, 28, 28]
        );
    }
}
