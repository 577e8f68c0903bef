//! `forestall bench` with PyTorch peers: bad peers, what the peers mirror,
//! a bench without torch, and the real scripts' commands.

use std::path::Path;

use crate::bench::{rows_of, write_job};
use crate::common::forestall_in as forestall;

/// A MedMNIST-layout `.npz` of 28 × 28 images: `train` and `test` labels,
/// pixels that differ between images.
fn images_npz(path: &Path, train: &[u8], test: &[u8]) {
    use std::io::Write;
    let file = std::fs::File::create(path).expect("create");
    let mut zip = zip::ZipWriter::new(file);
    let options = zip::write::FileOptions::default();
    for (split, labels) in [("train", train), ("test", test)] {
        let n = labels.len();
        let pixels: Vec<u8> = (0..n * 28 * 28)
            .map(|i| ((i * 7 + i / 784 * 13) % 256) as u8)
            .collect();
        zip.start_file(format!("{split}_images.npy"), options)
            .expect("entry");
        zip.write_all(&crate::common::npy("|u1", &[n, 28, 28], &pixels))
            .expect("write");
        zip.start_file(format!("{split}_labels.npy"), options)
            .expect("entry");
        zip.write_all(&crate::common::npy("|u1", &[n, 1], labels))
            .expect("write");
    }
    zip.finish().expect("finish");
}

/// The peer scripts the project ships.
fn peer_script(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("pipelines/peers")
        .join(name)
        .display()
        .to_string()
}

/// A CNN job over a small image file, the Adult job, and a pipeline of
/// three sweeps (a native CNN one, a paced CNN one under slow-worker, an
/// Adult one) followed by `peers`.
fn write_peer_pipeline(dir: &Path, peers: &str) {
    write_job(dir);
    // 12 training images, 3 of class 0: balanced weights 12 / 6 = 2 and 12 / 18
    images_npz(
        &dir.join("images.npz"),
        &[1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0, 1],
        &[0, 1, 1, 0],
    );
    std::fs::write(
        dir.join("cnn.toml"),
        "[job]\nname = \"cnn\"\niterations = 2\n[data]\npath = \"images.npz\"\npartitions = 2\nunits_per_partition = 1\nbatch_fraction = 0.5\n[model]\nkind = \"cnn\"\nclass_weighting = \"balanced\"\neval_every = 1\n[workers]\ncount = 1\n",
    )
    .expect("write job");
    std::fs::write(
        dir.join("p.toml"),
        format!(
            r#"[bench]
name = "peers"

[[sweep]]
name = "native"
job = "cnn.toml"
workers = [1]
seeds = [1, 2]
iterations = 2
target_accuracy = 0.6

[[sweep]]
name = "slow"
job = "cnn.toml"
workers = [2]
pattern = "slow-worker"
probability = [0.5]
delay_percent = [0, 400]
policies = ["bsp", "ideal"]
seeds = [3]
iterations = 5
pace_ns_per_row = 1000000

[[sweep]]
name = "adult"
job = "job.toml"
seeds = [1]
{peers}"#
        ),
    )
    .expect("write pipeline");
}

fn single_peer(extra: &str) -> String {
    format!(
        "[[peer]]\nname = \"p\"\nscript = \"{}\"\nkind = \"single\"\nsweep = \"native\"\n{extra}",
        peer_script("cnn_torch.py")
    )
}

fn ddp_peer(extra: &str) -> String {
    format!(
        "[[peer]]\nname = \"d\"\nscript = \"{}\"\nkind = \"ddp\"\nsweep = \"slow\"\n{extra}",
        peer_script("cnn_ddp.py")
    )
}

#[test]
fn bad_peers_are_named_and_run_nothing() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let missing = "[[peer]]\nname = \"p\"\nscript = \"peers/missing.py\"\nkind = \"single\"\nsweep = \"native\"\n";
    let cases = [
        (
            missing.to_owned(),
            "peer 'p': script peers/missing.py not found",
        ),
        (
            single_peer("").replace("\"single\"", "\"mpi\""),
            "peer 'p': unknown kind 'mpi'; accepted: single, ddp",
        ),
        (
            single_peer("").replace("\"native\"", "\"nope\""),
            "peer 'p': sweep 'nope' is not a sweep of this pipeline (native, slow, adult)",
        ),
        (
            single_peer("").replace("\"native\"", "\"adult\""),
            "peer 'p': sweep 'adult' trains logistic; the peers are scripts of the CNN",
        ),
        (
            single_peer("units = 2\n"),
            "peer 'p': units is a setting of ddp peers, not of single",
        ),
        (
            ddp_peer("threads = 2\n"),
            "peer 'd': threads is a setting of single peers, not of ddp",
        ),
        (
            single_peer("threads = 0\n"),
            "peer 'p': threads must be at least 1 (got 0)",
        ),
        (
            ddp_peer("batch = 0\n"),
            "peer 'd': batch must be at least 1 (got 0)",
        ),
        (
            ddp_peer("").replace("\"slow\"", "\"native\""),
            "peer 'd': sweep 'native' runs at native speed",
        ),
        (single_peer("thread = 2\n"), "unknown field `thread`"),
        (
            single_peer("cpus = \"2-1\"\n"),
            "peer 'p': cpus: '2-1': the range 2-1 is empty",
        ),
        (
            format!("{}{}", single_peer(""), single_peer("")),
            "peer 'p': two peers have this name",
        ),
    ];
    for (peers, needle) in cases {
        write_peer_pipeline(dir, &peers);
        let o = forestall(dir, &["bench", "p.toml", "--out", "res"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{needle}: {err}");
        assert!(err.contains(needle), "expected {needle:?} in {err}");
        assert!(!dir.join("res").exists(), "nothing written for {needle}");
    }
}

/// A ddp peer replays, per seed, the slowdowns forestall's injector gives
/// its sweep's runs; a single peer runs once per seed with the sweep's data
/// and learning rate.
#[test]
fn peers_mirror_their_sweeps_seeds_and_straggler_schedule() {
    use forestall::bench::peers::{plan_peers, PeerKind};
    use forestall::inject::{Pattern, StragglerSchedule};
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    write_peer_pipeline(
        dir,
        &format!("{}{}", single_peer("threads = 2\n"), ddp_peer("")),
    );
    let path = dir.join("p.toml");
    let (spec, runs) = forestall::bench::plan_pipeline(&path).expect("plans");
    let jobs = plan_peers(&path, &spec, &runs).expect("peers plan");
    let single: Vec<_> = jobs.iter().filter(|j| j.kind == PeerKind::Single).collect();
    assert_eq!(single.iter().map(|j| j.seed).collect::<Vec<_>>(), [1, 2]);
    // steps: 2 iterations × 2 units, as many images as the sweep's runs
    assert_eq!(single[0].iterations, 4);
    assert_eq!(single[0].target_accuracy, Some(0.6));
    let args = single[0].args.join(" ");
    assert!(
        args.contains("--threads 2")
            && args.contains("--lr 0.001")
            && args.contains("--class-weighting balanced"),
        "{args}"
    );
    assert!(
        args.contains(&dir.join("images.npz").display().to_string()),
        "{args}"
    );
    // ddp: 0 % (no rank slowed: its own no-straggler run) and 400 %, seed 3,
    // once for bsp and ideal alike
    let ddp: Vec<_> = jobs.iter().filter(|j| j.kind == PeerKind::Ddp).collect();
    assert_eq!(ddp.len(), 2, "{ddp:?}");
    assert!(ddp[0].without_stragglers() && ddp[0].delay_percent == 0.0);
    let slowed = ddp[1];
    assert_eq!((slowed.workers, slowed.seed, slowed.iterations), (2, 3, 5));
    let schedule = StragglerSchedule::new(
        3,
        Pattern::SlowWorker {
            probability: 0.5,
            delay_percent: 400.0,
        },
        2,
    );
    let expected: Vec<Vec<f64>> = (0..5)
        .map(|t| (0..2).map(|w| schedule.slowdown(w, t, 0)).collect())
        .collect();
    assert_eq!(slowed.schedule.as_ref(), Some(&expected));
    assert!(expected.iter().flatten().any(|&f| f == 5.0), "{expected:?}");
    let args = slowed.args.join(" ");
    assert!(
        args.contains("--ranks 2")
            && args.contains("--units 2")
            && args.contains("--pace-ns-per-row 1000000"),
        "{args}"
    );
}

#[test]
fn a_bench_without_torch_says_so_once_and_runs_its_sweeps() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    write_peer_pipeline(dir, &single_peer(""));
    // only the native sweep: the others are not needed here
    let text = std::fs::read_to_string(dir.join("p.toml")).expect("pipeline");
    let start = text.find("[[sweep]]\nname = \"slow\"").expect("slow sweep");
    let end = text.find("[[peer]]").expect("peer");
    std::fs::write(
        dir.join("p.toml"),
        format!("{}{}", &text[..start], &text[end..]),
    )
    .expect("write");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_forestall"))
        .args(["-q", "bench", "p.toml", "--out", "res"])
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .env("FORESTALL_PYTHON", "/nonexistent/python3")
        .output()
        .expect("forestall runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let skipped: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("peers skipped"))
        .collect();
    assert_eq!(skipped.len(), 1, "{err}");
    assert!(
        skipped[0].starts_with("peers skipped: cannot run /nonexistent/python3")
            && skipped[0].contains("FORESTALL_PYTHON"),
        "{err}"
    );
    let summary = std::fs::read_to_string(dir.join("res/summary.md")).expect("summary");
    assert!(summary.contains("## native"), "{summary}");
    assert!(
        summary.contains("## peers\n\nskipped: cannot run /nonexistent/python3"),
        "{summary}"
    );
    assert!(!dir.join("res/peers.json").exists());
    // the README's command names the Python the peers were to run with
    let readme = std::fs::read_to_string(dir.join("res/README.md")).expect("README");
    assert!(
        readme.contains("| command | `FORESTALL_PYTHON=/nonexistent/python3 "),
        "{readme}"
    );
    assert_eq!(
        rows_of(&dir.join("res/raw.parquet")).len(),
        2,
        "both seeds ran"
    );
}

/// The commands the bench builds for its peers are accepted by the real
/// scripts, which read the same split and weigh the classes as forestall
/// does (`--dry-run` checks the data and the schedule without torch).
#[test]
#[ignore = "needs python3"]
fn the_peer_scripts_accept_the_benchs_commands_and_agree_on_the_data() {
    use forestall::bench::peers::{command, plan_peers, write_schedule, PeerKind};
    use forestall::workload::cnn::CnnClassifier;
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    // units of 2 images: a rank's shard of the 12 training images is 6
    write_peer_pipeline(
        dir,
        &format!("{}{}", single_peer(""), ddp_peer("batch = 2\n")),
    );
    let path = dir.join("p.toml");
    let (spec, runs) = forestall::bench::plan_pipeline(&path).expect("plans");
    let jobs = plan_peers(&path, &spec, &runs).expect("peers plan");
    let ours = CnnClassifier::load(
        &dir.join("images.npz"),
        forestall::workload::ClassWeighting::Balanced,
    )
    .expect("loads");
    for (i, job) in jobs.iter().enumerate() {
        let schedule = dir.join(format!("schedule-{i}.json"));
        write_schedule(job, &schedule).expect("schedule");
        let o = command("python3", job, Some(&schedule))
            .arg("--dry-run")
            .output()
            .expect("python3 runs");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{job:?}: {stderr}");
        let plan: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON line");
        assert_eq!(plan["event"], "plan");
        assert_eq!(plan["train"], 12);
        assert_eq!(plan["seed"], job.seed);
        let weights: Vec<f64> =
            serde_json::from_value(plan["class_weights"].clone()).expect("weights");
        let expected = ours.class_weights().map(f64::from);
        assert_eq!(weights, expected, "{job:?}");
        match job.kind {
            PeerKind::Single => {
                assert_eq!(plan["test"], 4);
                assert_eq!(plan["steps"], 4);
            }
            PeerKind::Ddp => {
                assert_eq!(plan["ranks"], 2);
                let slowed = job
                    .schedule
                    .iter()
                    .flatten()
                    .flatten()
                    .filter(|&&f| f > 1.0)
                    .count();
                assert_eq!(plan["slowed"], slowed, "{job:?}");
            }
        }
    }
    // a schedule of other ranks is refused, naming the flag
    let ddp = jobs
        .iter()
        .find(|j| j.kind == PeerKind::Ddp)
        .expect("a ddp job");
    let mut other = ddp.clone();
    other.workers = 3;
    other.schedule = Some(vec![vec![1.0; 3]; 5]);
    let schedule = dir.join("three.json");
    write_schedule(&other, &schedule).expect("schedule");
    let o = command("python3", ddp, None)
        .arg("--schedule")
        .arg(&schedule)
        .arg("--dry-run")
        .output()
        .expect("python3 runs");
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--schedule") && err.contains("--ranks is 2"),
        "{err}"
    );
}
