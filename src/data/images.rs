//! Square grey images with class labels from a NumPy `.npz` (the MedMNIST
//! layout: `train_images` of shape `[n, side, side]`, `train_labels` of `[n, 1]` or `[n]`, and the
//! same for `val` and `test`), as labelled sparse rows: pixel `y · side + x`
//! is feature `y · side + x`, scaled to [0, 1]; black pixels are not stored.

use std::path::Path;

use super::npz::{read_npz, Npz};
use super::{DataError, Dataset, SparseRows};

/// The splits of an image file that a job trains and tests on.
const TRAIN: &str = "train";
const TEST: &str = "test";

/// Reads the `train` and `test` splits of the `.npz` at `path`, checking that
/// every image is `side` × `side`, every label is in `0..classes`, and every
/// pixel is a finite value in [0, 255] (integers) or [0, 1] (floats).
///
/// Rows are the training images, then the test images; the `val` split is
/// not read (nothing in a run selects on it).
pub fn load_images(path: &Path, side: usize, classes: usize) -> Result<Dataset, DataError> {
    let npz = read_npz(path).map_err(|e| bad(path, e.to_string()))?;
    let (train_pixels, train_labels) = split(path, &npz, TRAIN, side, classes)?;
    let (test_pixels, test_labels) = split(path, &npz, TEST, side, classes)?;
    let n_train = train_labels.len();
    let mut rows = SparseRows {
        offsets: vec![0],
        indices: Vec::new(),
        values: Vec::new(),
    };
    let pixels_per_image = side * side;
    for image in train_pixels
        .chunks_exact(pixels_per_image)
        .chain(test_pixels.chunks_exact(pixels_per_image))
    {
        for (j, &v) in image.iter().enumerate() {
            if v != 0.0 {
                rows.indices.push(j as u32);
                rows.values.push(v);
            }
        }
        rows.offsets.push(rows.indices.len());
    }
    let n = n_train + test_labels.len();
    let mut labels = train_labels;
    labels.extend(test_labels);
    let present: std::collections::BTreeSet<u64> =
        labels[..n_train].iter().map(|y| y.to_bits()).collect();
    if present.len() < 2 {
        return Err(DataError::Label {
            path: path.to_owned(),
            label: "train_labels".into(),
            problem: format!("all {n_train} training images are in one class"),
        });
    }
    Ok(Dataset {
        rows,
        labels,
        train: (0..n_train as u32).collect(),
        test: (n_train as u32..n as u32).collect(),
        feature_names: (0..pixels_per_image)
            .map(|j| format!("pixel[{},{}]", j / side, j % side))
            .collect(),
    })
}

fn bad(path: &Path, problem: String) -> DataError {
    DataError::Unfit {
        path: path.to_owned(),
        kind: "cnn",
        problem,
    }
}

/// One split's pixels (scaled to [0, 1], image after image) and labels.
fn split(
    path: &Path,
    npz: &Npz,
    name: &str,
    side: usize,
    classes: usize,
) -> Result<(Vec<f64>, Vec<f64>), DataError> {
    let images_name = format!("{name}_images");
    let labels_name = format!("{name}_labels");
    let images = npz
        .array(&images_name)
        .map_err(|e| bad(path, e.to_string()))?;
    let labels = npz
        .array(&labels_name)
        .map_err(|e| bad(path, e.to_string()))?;
    // One channel may be an axis of its own, after the images' sides or
    // before them: in C order the pixels lie the same.
    let shape: Vec<usize> = match images.shape.as_slice() {
        &[n, 1, h, w] | &[n, h, w, 1] => vec![n, h, w],
        other => other.to_vec(),
    };
    if shape.len() != 3 || shape[1] != side || shape[2] != side {
        return Err(bad(
            path,
            format!(
                "{images_name} has shape {:?}; the model expects [n, {side}, {side}] \
                 (or one channel: [n, {side}, {side}, 1], [n, 1, {side}, {side}])",
                images.shape
            ),
        ));
    }
    let n = shape[0];
    let label_shape = labels.shape.clone();
    let label_count: usize = label_shape.iter().product();
    if label_shape.first() != Some(&n) || label_count != n {
        return Err(bad(
            path,
            format!("{labels_name} has shape {label_shape:?}; expected [{n}] or [{n}, 1], one label per image of {images_name}"),
        ));
    }
    let raw = images.to_f64().map_err(|e| bad(path, e.to_string()))?;
    let scale = if images.is_integer() { 255.0 } else { 1.0 };
    let mut pixels = Vec::with_capacity(raw.len());
    for (i, &v) in raw.iter().enumerate() {
        if !(v.is_finite() && v >= 0.0 && v <= scale) {
            return Err(DataError::BadValue {
                path: path.to_owned(),
                column: images_name.clone(),
                row: i / (side * side),
                what: if v.is_nan() {
                    "NaN"
                } else if v.is_infinite() {
                    "infinite"
                } else if images.is_integer() {
                    "outside 0–255, the pixel range of integer images"
                } else {
                    "outside [0, 1], the pixel range of float images (integer images are read as 0–255)"
                },
            });
        }
        pixels.push(v / scale);
    }
    let mut out = Vec::with_capacity(n);
    for (row, &y) in labels
        .to_f64()
        .map_err(|e| bad(path, e.to_string()))?
        .iter()
        .enumerate()
    {
        if !(y >= 0.0 && y.fract() == 0.0 && (y as usize) < classes) {
            return Err(DataError::Label {
                path: path.to_owned(),
                label: labels_name.clone(),
                problem: format!("row {row} is {y}, not a class in 0..{classes}"),
            });
        }
        out.push(y);
    }
    Ok((pixels, out))
}
