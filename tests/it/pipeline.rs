//! Model-parallel training (`[parallel]`): the CNN cut into pipeline
//! stages over W = S × R workers trains the parameters of data-parallel
//! training over the same micro-batches, bit for bit, under both
//! schedules, any cut, a straggling stage, dropout and across processes;
//! its trace reads like any other; bad layouts are refused by name.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use forestall::ops::{read_ops, OpKind};
use forestall::spec::{check_against_data, load_workload};
use forestall::trace::{read_trace_dir, TraceSet, UnitAction, UnitRecord};
use forestall::workload::Workload;

use crate::common::{forestall_in, plan, refused_in, run_workload_in, summary_digest};

/// The derived PneumoniaMNIST copy every CNN figure used (`data/` holds
/// none until it is fetched).
fn npz() -> PathBuf {
    crate::common::shared("datasets/pneumoniamnist.npz")
}

/// 8 partitions of one unit of 8 images in micro-batches of 4, 3
/// iterations, on `workers` workers, then `tail` (more sections).
fn job(workers: u32, tail: &str) -> String {
    format!(
        r#"
[job]
name = "pipe"
iterations = 3
seed = 5
[data]
path = "{}"
partitions = 8
units_per_partition = 1
micro_batch = 4
batch_fraction = 0.0165
[model]
kind = "cnn"
eval_every = 100
[workers]
count = {workers}
{tail}
"#,
        npz().display()
    )
}

/// `forestall run job.toml` in `dir` as 2 processes of 2 threads, into
/// `procs`, with JSON lines.
fn in_two_processes(dir: &Path) -> std::process::Output {
    let args = ["run", "job.toml", "--out", "procs", "--json"];
    let cluster = ["--processes", "2", "--threads", "2"];
    forestall_in(dir, &[&args[..], &cluster[..]].concat())
}

/// The unit rows of iteration `t` with `action`.
fn rows_of(trace: &TraceSet, t: u64, action: UnitAction) -> Vec<&UnitRecord> {
    (trace.units.iter())
        .filter(|u| u.iteration == t && u.action == action)
        .collect()
}

/// The CNN on the committed images, loaded once.
fn cnn() -> Arc<dyn Workload> {
    static CNN: OnceLock<Arc<dyn Workload>> = OnceLock::new();
    Arc::clone(CNN.get_or_init(|| load_workload(&plan(&job(1, ""))).expect("the images load")))
}

/// Trains `text`; its digest, and the trace directory.
fn train(text: &str) -> (String, tempfile::TempDir) {
    train_on(text, cnn())
}

/// Trains `text` on `workload`.
fn train_on(text: &str, workload: Arc<dyn Workload>) -> (String, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("dir");
    let p = plan(text);
    check_against_data(&p, workload.data()).expect("the layout fits the data");
    let out = run_workload_in(&p, workload, dir.path());
    (out.digest, dir)
}

#[test]
#[ignore = "needs ../shared"]
fn stages_train_the_parameters_of_data_parallel_training() {
    let (reference, _) = train(&job(1, ""));
    let slow = "[straggler]\npattern = \"persistent\"\nworkers = [1]\nfactor = 3.0";
    for (workers, parallel) in [
        (1, "stages = 1"),
        (2, "stages = 2"),
        (2, "stages = 2\nschedule = \"gpipe\""),
        (2, "stages = 2\ncut = [\"lstm\"]"),
        (3, "stages = 3\ncut = [\"conv2\", \"lstm\"]"),
        (4, "stages = 2\nschedule = \"gpipe\""),
        (5, "stages = 5"),
        (6, "stages = 3\nreplicas = 2"),
    ] {
        let slow = if workers > 1 { slow } else { "" };
        let (digest, _) = train(&job(workers, &format!("[parallel]\n{parallel}\n{slow}")));
        assert_eq!(digest, reference, "W = {workers}, {parallel}");
    }
    // the micro-batch is part of the math, as in data-parallel training
    let whole = job(1, "").replace("micro_batch = 4\n", "");
    let (whole_dp, _) = train(&whole);
    assert_ne!(whole_dp, reference);
    let (whole_pipe, _) =
        train(&whole.replace("count = 1", "count = 2\n[parallel]\nschedule = \"gpipe\""));
    assert_eq!(whole_pipe, whole_dp, "units whole, one micro-batch each");
}

/// The test set's evaluation runs through the stages (each replica scores
/// its share of the test batches, each stage its layers) and gives the
/// whole model's evaluation bit for bit, at every version evaluated and the
/// final one, whatever the cut, also while `rebalance-stages` moves layers.
#[test]
#[ignore = "needs ../shared"]
fn evaluation_through_the_stages_has_the_whole_models_bits() {
    let every = |text: String| text.replace("eval_every = 100", "eval_every = 1");
    let run = |text: String| {
        let dir = tempfile::tempdir().expect("dir");
        run_workload_in(&plan(&every(text)), cnn(), dir.path())
    };
    let reference = run(job(1, ""));
    assert_eq!(reference.stage_evaluations, (0, 0), "data-parallel");
    let bits = |e: &forestall::workload::Evaluation| {
        let mut b = vec![e.log_loss.to_bits(), e.accuracy.to_bits()];
        b.extend(e.metrics.values().map(|v| v.to_bits()));
        b
    };
    let rows = |o: &forestall::run::RunOutput| -> Vec<(Option<u64>, Option<u64>)> {
        o.iterations
            .iter()
            .map(|r| {
                (
                    r.test_loss.map(f64::to_bits),
                    r.test_accuracy.map(f64::to_bits),
                )
            })
            .collect()
    };
    assert!(
        rows(&reference).iter().all(|r| r.0.is_some()),
        "every row evaluated"
    );
    let moving = "pace_ns_per_row = 5000000\n[parallel]\nstages = 2\n\
                  [straggler]\npattern = \"persistent\"\nworkers = [1]\nfactor = 3.0\n\
                  [policy]\nname = \"rebalance-stages\"";
    for (workers, tail) in [
        (4, "[parallel]\nstages = 2"),
        (3, "[parallel]\nstages = 3\ncut = [\"conv2\", \"lstm\"]"),
        (2, "[parallel]\nstages = 2\ncut = [\"head\"]"),
        (4, moving),
    ] {
        let text = job(workers, tail);
        let parallel = tail;
        let out = run(text);
        assert_eq!(out.digest, reference.digest, "{parallel}");
        assert_eq!(
            out.stage_evaluations,
            (4, 0),
            "versions 0-2 and the final one, {parallel}"
        );
        assert_eq!(bits(&out.eval), bits(&reference.eval), "{parallel}");
        assert_eq!(rows(&out), rows(&reference), "{parallel}");
        assert_eq!(!out.recuts.is_empty(), tail == moving, "{parallel}");
    }
}

#[test]
#[ignore = "needs ../shared"]
fn dropout_through_the_stages_keeps_the_bits() {
    let with = |text: String| text.replace("eval_every", "dropout = 0.3\neval_every");
    let dropping = load_workload(&plan(&with(job(1, "")))).expect("the images load");
    let (reference, _) = train_on(&with(job(1, "")), Arc::clone(&dropping));
    let (plain, _) = train(&job(1, ""));
    assert_ne!(reference, plain, "dropout changes the training");
    let (digest, _) = train_on(&with(job(4, "[parallel]\nstages = 2")), dropping);
    assert_eq!(digest, reference);
}

#[test]
#[ignore = "needs ../shared"]
fn a_pipeline_trace_has_every_stage_and_counts_each_unit_once() {
    // stage 1 of replica 0 (worker 1) 3× slower throughout
    let slow = "[straggler]\npattern = \"persistent\"\nworkers = [1]\nfactor = 3.0";
    let (_, dir) = train(&job(4, &format!("[parallel]\nstages = 2\n{slow}")));
    let trace = read_trace_dir(dir.path()).expect("the trace reads");
    assert_eq!(trace.iterations.len(), 3);
    assert_eq!(
        trace.workers.len(),
        3 * 4,
        "a row per iteration and stage worker"
    );
    for t in 0..3 {
        let of = |action| rows_of(&trace, t, action);
        // the first stage's rows count the units, the second's hold their part
        let assigned = of(UnitAction::Assigned);
        let split = of(UnitAction::Split);
        assert_eq!(assigned.len(), 8, "iteration {t}");
        assert_eq!(split.len(), 8, "iteration {t}");
        assert!(assigned
            .iter()
            .all(|u| u.executor % 2 == 0 && u.micro_batches == 2));
        assert!(split.iter().all(|u| u.executor % 2 == 1 && u.rows == 8));
        // replica r holds the partitions p ≡ r (mod 2), on its first stage
        assert!(assigned.iter().all(|u| u.owner == 2 * (u.partition % 2)));
        assert!(assigned.iter().all(|u| u.executor == u.owner));
    }
    // the operation trace: every pass, send and receive of every stage worker
    let ops = read_ops(&dir.path().join("ops.parquet")).expect("ops.parquet reads");
    let count = |worker: u32, kind: OpKind| {
        ops.iter()
            .filter(|o| o.rank == worker && o.kind == kind)
            .count()
    };
    // each replica: 4 partitions × 2 micro-batches, 3 iterations
    for worker in 0..4 {
        assert_eq!(count(worker, OpKind::ForwardCompute), 24, "worker {worker}");
        assert_eq!(
            count(worker, OpKind::BackwardCompute),
            24,
            "worker {worker}"
        );
        let first = worker % 2 == 0;
        assert_eq!(
            count(worker, OpKind::ForwardSend),
            if first { 24 } else { 0 }
        );
        assert_eq!(
            count(worker, OpKind::BackwardRecv),
            if first { 24 } else { 0 }
        );
        assert_eq!(
            count(worker, OpKind::ForwardRecv),
            if first { 0 } else { 24 }
        );
        assert_eq!(
            count(worker, OpKind::BackwardSend),
            if first { 0 } else { 24 }
        );
    }
    assert!(ops
        .iter()
        .all(|o| o.dp_rank == o.rank / 2 && o.stage == o.rank % 2));
    // analyze replays its dependencies and finds the slow stage worker
    let o = forestall_in(dir.path(), &["analyze", ".", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let analysis = &crate::common::json_data(&o.stdout)[0];
    assert_eq!(analysis["method"], "operations");
    assert_eq!(analysis["workers"], 4);
    let replay_error = analysis["operations"]["replay_error"]
        .as_f64()
        .expect("error");
    // (the run's own timings, 4 stage workers on this machine's cores:
    // alone it replayed within 4–10 % in three runs, beside the suite's
    // other tests 11 % was seen, so the bound is loose; the operation
    // replay's accuracy is held to 5 % of the authors' figures on the
    // public traces, whose timings do not depend on this machine:
    // `analyze::bytedance_slowdowns_and_attributions_agree_with_the_authors`)
    assert!(
        replay_error < 0.2,
        "the replay follows the run: {replay_error}"
    );
    let worst = &analysis["operations"]["worst_workers"][0];
    assert_eq!(
        (worst["rank"].as_u64(), worst["stage"].as_u64()),
        (Some(1), Some(1))
    );
}

#[test]
#[ignore = "needs ../shared"]
fn a_pipeline_across_processes_trains_the_same_parameters() {
    let dir = tempfile::tempdir().expect("dir");
    let text = job(4, "[parallel]\nstages = 2");
    std::fs::write(dir.path().join("job.toml"), &text).expect("job");
    let threads = forestall_in(
        dir.path(),
        &["run", "job.toml", "--out", "threads", "--json"],
    );
    assert!(
        threads.status.success(),
        "{}",
        String::from_utf8_lossy(&threads.stderr)
    );
    let processes = in_two_processes(dir.path());
    assert!(
        processes.status.success(),
        "{}",
        String::from_utf8_lossy(&processes.stderr)
    );
    assert_eq!(summary_digest(&processes), summary_digest(&threads));
    let (reference, _) = train(&job(1, ""));
    assert_eq!(summary_digest(&threads), reference);
    // the summary reports each stage's activation memory
    let stdout = String::from_utf8_lossy(&threads.stdout);
    let summary: serde_json::Value = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["type"] == "summary")
        .expect("a summary");
    let pipeline = &summary["data"]["pipeline"];
    assert_eq!(
        pipeline["layers"],
        serde_json::json!(["conv1+conv2", "conv3+lstm+head"])
    );
    assert_eq!(pipeline["schedule"], "1f1b");
    // 1f1b: stage s of S keeps at most S − s micro-batches' activations
    assert_eq!(pipeline["activations_kept"], serde_json::json!([2, 1]));
    assert!(pipeline["activation_mb"][0].as_f64().expect("MB") > 0.0);
    let bubble = pipeline["bubble"].as_array().expect("a bubble per stage");
    assert_eq!(bubble.len(), 2);
    assert!(bubble
        .iter()
        .all(|b| (0.0..1.0).contains(&b.as_f64().expect("share"))));
    // versions 0, 2 and the final one evaluated through the stages, also
    // when the stages are in two processes, with the same figures
    let across = String::from_utf8_lossy(&processes.stdout);
    let across: serde_json::Value = across
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["type"] == "summary")
        .expect("a summary");
    for s in [&summary, &across] {
        let p = &s["data"]["pipeline"];
        assert_eq!(
            (
                p["evaluated_in_stages"].as_u64(),
                p["evaluated_whole"].as_u64()
            ),
            (Some(3), Some(0))
        );
    }
    let eval = |s: &serde_json::Value| {
        let d = &s["data"];
        (
            d["test_accuracy"].as_f64(),
            d["test_log_loss"].as_f64(),
            d["test_auc"].as_f64(),
        )
    };
    assert!(eval(&summary).1.is_some(), "{summary}");
    assert_eq!(eval(&across), eval(&summary));
}

#[test]
#[ignore = "needs ../shared"]
fn a_stopped_pipeline_resumes_to_the_same_parameters() {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(
        dir.path().join("job.toml"),
        job(2, "[parallel]\nstages = 2"),
    )
    .expect("job");
    let whole = forestall_in(dir.path(), &["run", "job.toml", "--out", "whole", "--json"]);
    assert!(
        whole.status.success(),
        "{}",
        String::from_utf8_lossy(&whole.stderr)
    );
    let first = forestall_in(
        dir.path(),
        &["run", "job.toml", "--out", "cut", "--stop-after", "2"],
    );
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let rest = forestall_in(
        dir.path(),
        &["run", "job.toml", "--resume", "cut", "--json"],
    );
    assert!(
        rest.status.success(),
        "{}",
        String::from_utf8_lossy(&rest.stderr)
    );
    assert_eq!(summary_digest(&rest), summary_digest(&whole));
    // the resumed run's operation trace keeps the first run's iterations
    let ops = read_ops(&dir.path().join("cut/trace/ops.parquet")).expect("ops");
    let steps: std::collections::BTreeSet<i64> = ops.iter().map(|o| o.step).collect();
    assert_eq!(steps.into_iter().collect::<Vec<_>>(), [0, 1, 2]);
    let analyzed = forestall_in(dir.path(), &["analyze", "cut"]);
    assert!(
        analyzed.status.success(),
        "{}",
        String::from_utf8_lossy(&analyzed.stderr)
    );
    // the layout is part of the plan: another cut does not resume it
    let other = job(2, "[parallel]\nstages = 2\ncut = [\"lstm\"]");
    std::fs::write(dir.path().join("job.toml"), other).expect("job");
    let refused = forestall_in(dir.path(), &["run", "job.toml", "--resume", "cut"]);
    assert!(!refused.status.success());
}

#[test]
#[ignore = "needs ../shared"]
fn a_schedule_without_enough_micro_batches_is_refused_by_name() {
    let dir = tempfile::tempdir().expect("dir");
    // 2 replicas of 4 partitions × 1 unit, whole: 4 micro-batches for 5 stages
    let text = job(10, "[parallel]\nstages = 5").replace("micro_batch = 4\n", "");
    refused_in(
        dir.path(),
        &text,
        &[],
        "[parallel] schedule: the 1f1b schedule needs at least as many micro-batches as stages: 4 micro-batches for 5 stages",
    );
    refused_in(
        dir.path(),
        &job(4, "[parallel]\nstages = 2\ncut = [\"conv1\"]"),
        &[],
        "[parallel] cut: 'conv1' does not begin a stage after the one before",
    );
    refused_in(
        dir.path(),
        &job(4, "[parallel]\nstages = 2\nlayers = 3"),
        &[],
        "layers",
    );
}

/// `rebalance-stages` with stage 1 of replica 0 (worker 1) 3× slow, paced:
/// the work moves off it from the third iteration, once the first two
/// have both shown the slowdown (layers off its stage,
/// or partitions off its replica), and the parameters keep their bits, in
/// one process and across two.
#[test]
#[ignore = "needs ../shared"]
fn rebalance_stages_moves_work_off_a_slow_stage_and_keeps_the_bits() {
    // 5 iterations: a loaded machine may blur one iteration's measurement,
    // and the work must still move once two in a row show the slowdown
    let longer = |t: String| t.replace("iterations = 3", "iterations = 5");
    let (reference, _) = train(&longer(job(1, "")));
    let text = longer(job(
        4,
        "pace_ns_per_row = 5000000\n[parallel]\nstages = 2\n\
         [straggler]\npattern = \"persistent\"\nworkers = [1]\nfactor = 3.0\n\
         [policy]\nname = \"rebalance-stages\"",
    ));
    let dir = tempfile::tempdir().expect("dir");
    let out = run_workload_in(&plan(&text), cnn(), dir.path());
    assert_eq!(out.digest, reference);
    let (first, placement) = out.recuts.first().expect("the work moved");
    assert!(*first >= 2, "not before two iterations showed the slowdown");
    let slow_layers = placement.layers(0, 1).len();
    let slow_share = placement.units[0].len();
    assert!(
        slow_layers < 3 || slow_share < 4,
        "layers or data off the slow stage worker: {placement:?}"
    );
    let mut all: Vec<(u32, u32)> = placement.units.concat();
    all.sort_unstable();
    assert_eq!(
        all,
        (0..8).map(|p| (p, 0)).collect::<Vec<_>>(),
        "every unit once"
    );
    // with 2 units a partition, the shares move unit by unit: a partition
    // may be split between replicas, and the bits stay
    let halves = |t: String| t.replace("units_per_partition = 1", "units_per_partition = 2");
    let (reference, _) = train(&longer(halves(job(1, ""))));
    let split_dir = tempfile::tempdir().expect("dir");
    let out = run_workload_in(&plan(&halves(text.clone())), cnn(), split_dir.path());
    assert_eq!(out.digest, reference);
    let (_, placement) = out.recuts.first().expect("the work moved");
    let mut all: Vec<(u32, u32)> = placement.units.concat();
    all.sort_unstable();
    let every: Vec<(u32, u32)> = (0..8).flat_map(|p| [(p, 0), (p, 1)]).collect();
    assert_eq!(all, every, "every unit once");
    assert!(
        placement.layers(0, 1).len() < 3 || placement.units[0].len() < 8,
        "layers or data off the slow stage worker: {placement:?}"
    );
    // the same across 2 processes of 2 threads (at native speed: `run`
    // refuses a pace shorter than the machine's compute)
    let native = text.replace("pace_ns_per_row = 5000000\n", "");
    std::fs::write(dir.path().join("job.toml"), native).expect("job");
    let o = in_two_processes(dir.path());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(summary_digest(&o), reference);
}

/// A `rebalance-stages` run stopped after the work moved resumes with the
/// placement its checkpoint recorded (not the job's own), and ends with
/// the uninterrupted run's parameters.
#[test]
#[ignore = "needs ../shared"]
fn a_rebalanced_pipeline_resumes_where_the_work_was() {
    let dir = tempfile::tempdir().expect("dir");
    let text = job(
        4,
        "pace_ns_per_row = 20000000\n[parallel]\nstages = 2\n\
         [straggler]\npattern = \"persistent\"\nworkers = [1]\nfactor = 3.0\n\
         [policy]\nname = \"rebalance-stages\"",
    )
    .replace("iterations = 3", "iterations = 6");
    std::fs::write(dir.path().join("job.toml"), text).expect("job");
    let run = |args: &[&str]| {
        let o = forestall_in(dir.path(), args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        o
    };
    let summary = |o: &std::process::Output| {
        crate::common::json_data(&o.stdout)
            .into_iter()
            .find(|d| d.get("params_sha256").is_some())
            .expect("a summary")
    };
    let whole = run(&["--json", "run", "job.toml", "--out", "whole"]);
    let stopped = run(&[
        "--json",
        "run",
        "job.toml",
        "--out",
        "cut",
        "--stop-after",
        "4",
    ]);
    let recuts = summary(&stopped)["pipeline"]["recuts"].clone();
    let last = recuts
        .as_array()
        .and_then(|r| r.last())
        .expect("the work moved before the stop")
        .clone();
    let rest = run(&["--json", "run", "job.toml", "--resume", "cut"]);
    let first = summary(&rest)["pipeline"]["recuts"][0].clone();
    assert_eq!(
        first["iteration"], 4,
        "the restored placement, from the first iteration"
    );
    assert_eq!(first["layers"], last["layers"]);
    assert_eq!(first["units"], last["units"]);
    assert_eq!(summary_digest(&rest), summary_digest(&whole));
}

/// `rapid-reassign` in a pipeline: with stage 1 of replica 0 (worker 1) 4×
/// slow, replica 1's first stage (worker 2) takes whole units from the end
/// of replica 0's list within each iteration; every unit is computed once,
/// by one replica, and the parameters are one worker's, bit for bit, in
/// one process and across two.
#[test]
#[ignore = "needs ../shared"]
fn replicas_take_units_from_a_slow_replica_and_keep_the_bits() {
    let (reference, _) = train(&job(1, ""));
    let text = job(
        4,
        "pace_ns_per_row = 5000000\n[parallel]\nstages = 2\n\
         [straggler]\npattern = \"persistent\"\nworkers = [1]\nfactor = 4.0\n\
         [policy]\nname = \"rapid-reassign\"",
    );
    let (digest, dir) = train(&text);
    assert_eq!(digest, reference);
    let trace = read_trace_dir(dir.path()).expect("the trace reads");
    let mut taken = 0;
    for t in 0..3 {
        let of = |action| rows_of(&trace, t, action);
        let first: Vec<_> = [of(UnitAction::Assigned), of(UnitAction::Reassigned)].concat();
        let mut keys: Vec<_> = first.iter().map(|u| (u.partition, u.unit)).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            (0..8).map(|p| (p, 0)).collect::<Vec<_>>(),
            "iteration {t}: every unit once, on a first stage"
        );
        assert_eq!(of(UnitAction::Split).len(), 8, "iteration {t}");
        let reassigned = of(UnitAction::Reassigned);
        assert!(
            reassigned.iter().all(|u| u.executor == 2 && u.owner == 0),
            "only the fast replica takes, from the slow one: {reassigned:?}"
        );
        taken += reassigned.len();
    }
    assert!(taken > 0, "units moved to the fast replica");
    // the same across 2 processes of 2 threads (native speed)
    let native = text.replace("pace_ns_per_row = 5000000\n", "");
    std::fs::write(dir.path().join("job.toml"), native).expect("job");
    let o = in_two_processes(dir.path());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(summary_digest(&o), reference);
}

/// `whatif --cut` replays a pipeline run's iterations with its layers cut
/// elsewhere: moving work off a 3× slow stage worker shortens them, its
/// own cut predicts what was recorded, and bad cuts or a data-parallel
/// run are refused by name.
#[test]
#[ignore = "needs ../shared"]
fn whatif_replays_a_pipeline_run_with_another_cut() {
    let slow = "[parallel]\nstages = 2\n\
                [straggler]\npattern = \"persistent\"\nworkers = [1]\nfactor = 3.0";
    let dir = tempfile::tempdir().expect("dir");
    let run = |text: &str, out: &str| {
        std::fs::write(dir.path().join("job.toml"), text).expect("job");
        let o = forestall_in(dir.path(), &["run", "job.toml", "--out", out]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    run(&job(2, slow), "pipe");
    let whatif = |cut: &str| forestall_in(dir.path(), &["whatif", "pipe", "--cut", cut, "--json"]);
    let line = |o: &std::process::Output| {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        crate::common::json_data(&o.stdout)[0].clone()
    };
    let own = line(&whatif("conv3"));
    let ratio = |v: &serde_json::Value| {
        v["predicted_ms"].as_f64().expect("ms") / v["recorded_ms"].as_f64().expect("ms")
    };
    assert!((ratio(&own) - 1.0).abs() < 1e-9, "its own cut: {own}");
    let best = line(&whatif("best"));
    assert!(ratio(&best) < 0.9, "layers off the slow stage: {best}");
    let moved = line(&whatif("lstm"));
    assert!(ratio(&moved) < 1.0, "conv3 to the fast stage: {moved}");
    for (cut, expected) in [
        ("conv1", "'conv1' does not begin a stage"),
        ("pool", "'pool' names no layer"),
        ("conv2,lstm", "the run has 2 stages"),
    ] {
        let o = whatif(cut);
        assert!(!o.status.success());
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(stderr.contains(expected), "{cut}: {stderr}");
    }
    run(&job(1, ""), "dp");
    let o = forestall_in(dir.path(), &["whatif", "dp", "--cut", "best"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("trained data-parallel"));
    // a run whose placement moved: its placements are written, and each
    // iteration is measured against the cut it ran
    assert!(
        !dir.path().join("pipe/trace/placements.json").exists(),
        "bsp kept its cut"
    );
    let moving = format!("{slow}\n[policy]\nname = \"rebalance-stages\"");
    run(&job(2, &moving), "moving");
    let placements = dir.path().join("moving/trace/placements.json");
    let text = std::fs::read_to_string(&placements).expect("placements.json");
    let entries: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(entries[0]["iteration"], 2, "{text}");
    let o = forestall_in(
        dir.path(),
        &["whatif", "moving", "--cut", "conv3", "--json"],
    );
    let steps = line(&o)["steps"].as_array().expect("steps").clone();
    assert_eq!(steps.len(), 3);
    for s in &steps[..2] {
        let (p, r) = (s["predicted_us"].as_f64(), s["recorded_us"].as_f64());
        assert!(
            (p.expect("us") / r.expect("us") - 1.0).abs() < 1e-9,
            "ran at conv3: {s}"
        );
    }
    // a placements file that does not fit the run is refused by name
    std::fs::write(&placements, r#"[{"iteration": 1, "cuts": [[0, 5]]}]"#).expect("writes");
    let o = forestall_in(dir.path(), &["whatif", "moving", "--cut", "best"]);
    assert!(!o.status.success());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("placements.json") && stderr.contains("does not fit"),
        "{stderr}"
    );
}
