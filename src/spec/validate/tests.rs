//! The validator's tests: every bad input's exact message, and the defaults.
use super::*;
use crate::policy::PolicyPlan;
use crate::spec::parse_job;

fn check(text: &str) -> Result<JobPlan> {
    let spec = parse_job(text, Some(Path::new("job.toml")))?;
    validate(&spec, text, Some(Path::new("job.toml")))
}

fn message(text: &str) -> String {
    match check(text) {
        Ok(plan) => panic!("accepted: {plan:?}"),
        Err(e) => e.to_string(),
    }
}

macro_rules! rejects {
    ($($name:ident: $text:expr => $expected:expr;)*) => {$(
        #[test]
        fn $name() {
            let m = message($text);
            assert_eq!(m, $expected);
        }
    )*};
}

rejects! {
    pipeline_of_a_model_without_layers: "[parallel]\nstages = 2\n" =>
        "job.toml:2: [parallel] stages: pipeline stages cut the CNN's layers, and [model] kind = \"logistic\" has none to cut; use kind = \"cnn\" or drop [parallel]";
    more_stages_than_layers: "[model]\nkind = \"cnn\"\n[workers]\ncount = 6\n[parallel]\nstages = 6\n" =>
        "job.toml:6: [parallel] stages: must be in 1..=5, one layer at least a stage (the net's layers: conv1, conv2, conv3, lstm, head; got 6)";
    more_stages_than_workers: "[model]\nkind = \"cnn\"\n[workers]\ncount = 2\n[parallel]\nstages = 3\n" =>
        "job.toml:6: [parallel] stages: 3 stages need at least 3 workers, one a stage ([workers] count is 2)";
    workers_not_divisible_by_stages: "[model]\nkind = \"cnn\"\n[workers]\ncount = 5\n[parallel]\nstages = 2\n" =>
        "job.toml:6: [parallel] stages: [workers] count 5 is not divisible by 2 stages: the workers are stages × replicas";
    replicas_that_do_not_multiply: "[model]\nkind = \"cnn\"\n[workers]\ncount = 4\n[parallel]\nstages = 2\nreplicas = 3\n" =>
        "job.toml:7: [parallel] replicas: 4 workers in 2 stages make 2 replicas, not 3";
    cut_naming_no_layer: "[model]\nkind = \"cnn\"\n[workers]\ncount = 2\n[parallel]\ncut = [\"pool2\"]\n" =>
        "job.toml:6: [parallel] cut: 'pool2' names no layer; the net's layers are conv1, conv2, conv3, lstm, head";
    unknown_schedule: "[model]\nkind = \"cnn\"\n[workers]\ncount = 2\n[parallel]\nschedule = \"zigzag\"\n" =>
        "job.toml:6: [parallel] schedule: unknown pipeline schedule 'zigzag'; accepted: gpipe, 1f1b";
    pipeline_under_a_moving_policy: "[model]\nkind = \"cnn\"\n[workers]\ncount = 2\n[policy]\nname = \"forestall\"\n[parallel]\nstages = 2\n" =>
        "job.toml:6: [policy] name: 'forestall' moves data-parallel units between workers; a pipeline runs under bsp, rebalance-stages, rapid-reassign (units between replicas) or ideal";
    rebalance_stages_without_a_pipeline: "[policy]\nname = \"rebalance-stages\"\n" =>
        "job.toml:2: [policy] name: 'rebalance-stages' moves layers between pipeline stages; add a [parallel] section (the CNN cut into stages) or choose a data-parallel policy";
    zero_workers: "[workers]\ncount = 0\n" => "job.toml:2: [workers] count: must be at least 1 (got 0)";
    more_workers_than_partitions: "[data]\npartitions = 2\n[workers]\ncount = 3\n" =>
        "job.toml:4: [workers] count: 3 workers but only 2 partitions: every worker needs at least one partition; lower the count or raise [data] partitions";
    negative_learning_rate: "[model]\nlearning_rate = -0.1\n" =>
        "job.toml:2: [model] learning_rate: must be a positive number (got -0.1)";
    unknown_pattern: "[straggler]\npattern = \"slow\"\n" =>
        "job.toml:2: [straggler] pattern: unknown pattern 'slow'; accepted: none, slow-worker, disrupted-machine, power-law, persistent, slow-link";
    unknown_policy: "[policy]\nname = \"fastest\"\n" =>
        "job.toml:2: [policy] name: unknown policy 'fastest'; accepted: bsp, ssp, rapid-reassign, flexrr, speculate, backup-workers, proactive, proactive-clone, dpro-substitute, forestall, forestall-ssp, rebalance-stages, ideal";
    substitute_threshold: "[policy]\nname = \"dpro-substitute\"\nthreshold = 0.5\n" =>
        "job.toml:3: [policy] threshold: must be a number above 1 (got 0.5)";
    backups_all_workers: "[workers]\ncount = 2\n[policy]\nname = \"backup-workers\"\nbackups = 2\n" =>
        "job.toml:5: [policy] backups: must be between 1 and the worker count minus one (1) (got 2)";
    slack_on_bsp: "[policy]\nslack = 2\n" =>
        "job.toml:2: [policy] slack: does not apply to policy 'bsp' (it is a ssp or flexrr or forestall-ssp knob)";
    broker_off_forestall: "[policy]\nname = \"rapid-reassign\"\nbroker = false\n" =>
        "job.toml:3: [policy] broker: does not apply to policy 'rapid-reassign' (it is a forestall knob)";
    broker_on_forestall_ssp: "[policy]\nname = \"forestall-ssp\"\nbroker = true\n" =>
        "job.toml:3: [policy] broker: does not apply to policy 'forestall-ssp' (it is a forestall knob)";
    group_larger_than_peers: "[workers]\ncount = 3\n[policy]\nname = \"rapid-reassign\"\ngroup_size = 3\n" =>
        "job.toml:5: [policy] group_size: must be between 1 and the worker count minus one (2) (got 3)";
    reassign_knob_on_bsp: "[policy]\ncheckpoint = 0.5\n" =>
        "job.toml:2: [policy] checkpoint: does not apply to policy 'bsp' (it is a rapid-reassign or flexrr knob)";
    speculate_knob_on_reassign: "[policy]\nname = \"rapid-reassign\"\nmultiplier = 2.0\n" =>
        "job.toml:3: [policy] multiplier: does not apply to policy 'rapid-reassign' (it is a speculate knob)";
    multiplier_below_one: "[policy]\nname = \"speculate\"\nmultiplier = 0.5\n" =>
        "job.toml:3: [policy] multiplier: must be ≥ 1 (got 0.5)";
    delay_too_large: "[straggler]\npattern = \"slow-worker\"\ndelay_percent = 1e300\n" =>
        "job.toml:3: [straggler] delay_percent: must be in [0, 9900] (at most 100× slower; got 1000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000)";
    factor_too_large: "[straggler]\npattern = \"persistent\"\nfactor = 1000.0\n" =>
        "job.toml:3: [straggler] factor: must be in [1, 100] (got 1000)";
    pace_too_slow: "[workers]\npace_ns_per_row = 20000000000\n" =>
        "job.toml:2: [workers] pace_ns_per_row: must be in 0..=1000000000 (1 s per row; got 20000000000)";
    iterations_too_many: "[job]\niterations = 100000000000\n" =>
        "job.toml:2: [job] iterations: must be in 1..=10000000 (got 100000000000)";
    checkpoint_every_too_large: "[job]\niterations = 10\n[checkpoint]\nevery = 11\n" =>
        "job.toml:4: [checkpoint] every: must be in 0..=10 (0 = no checkpoints; the job has 10 iterations, got 11)";
    checkpoint_zero: "[policy]\nname = \"rapid-reassign\"\ncheckpoint = 0.0\n" =>
        "job.toml:3: [policy] checkpoint: must be in (0, 1] (got 0)";
    probability_above_one: "[straggler]\npattern = \"slow-worker\"\nprobability = 1.5\n" =>
        "job.toml:3: [straggler] probability: must be in [0, 1] (got 1.5)";
    knob_of_another_pattern: "[straggler]\npattern = \"slow-worker\"\nalpha = 4.0\n" =>
        "job.toml:3: [straggler] alpha: does not apply to pattern 'slow-worker' (its keys: probability, delay_percent)";
    alpha_one: "[straggler]\npattern = \"power-law\"\nalpha = 1.0\n" =>
        "job.toml:3: [straggler] alpha: must be in (1, 100] (> 1 for p(x) ∝ x^-α to be a distribution; got 1)";
    missing_dataset: "[data]\npath = \"nowhere.parquet\"\n" =>
        "job.toml:2: [data] path: dataset file nowhere.parquet does not exist";
    persistent_unknown_worker: "[workers]\ncount = 2\n[straggler]\npattern = \"persistent\"\nworkers = [5]\n" =>
        "job.toml:5: [straggler] workers: worker 5 does not exist (workers are 0..2)";
    too_many_replicas: "[workers]\ncount = 3\n[data]\nreplicas = 3\n" =>
        "job.toml:4: [data] replicas: at most the worker count minus one (2) extra holders exist (got 3)";
    zero_iterations: "[job]\niterations = 0\n" => "job.toml:2: [job] iterations: must be at least 1 (got 0)";
    batch_fraction_zero: "[data]\nbatch_fraction = 0.0\n" => "job.toml:2: [data] batch_fraction: must be in (0, 1] (got 0)";
    sampling_unknown: "[data]\nsampling = \"epochs\"\n" =>
        "job.toml:2: [data] sampling: unknown sampling \"epochs\"; expected one of: independent, epoch";
    bucket_too_large: "[workers]\ngrad_bucket_kib = 2000000\n" =>
        "job.toml:2: [workers] grad_bucket_kib: must be in 0..=1048576 (1 GiB; got 2000000)";
    zero_shards: "[workers]\ncount = 4\nshards = 0\n" =>
        "job.toml:3: [workers] shards: must be in 1..=4 (one owner per shard, among the workers; got 0)";
    more_shards_than_workers: "[workers]\ncount = 4\nshards = 5\n" =>
        "job.toml:3: [workers] shards: must be in 1..=4 (one owner per shard, among the workers; got 5)";
    unknown_respond: "[policy]\nrespond = \"later\"\n" =>
        "job.toml:2: [policy] respond: unknown value 'later'; accepted: at-once, between-units";
}

#[test]
fn unknown_key_names_key_and_line() {
    let m = message("[workers]\ncount = 2\ncoutn = 3\n");
    assert!(m.starts_with("job.toml: TOML parse error at line 3"), "{m}");
    assert!(m.contains("unknown field `coutn`"), "{m}");
    assert!(
        m.contains("expected one of `count`, `pace_ns_per_row`"),
        "{m}"
    );
}

#[test]
fn wrong_type_names_the_key() {
    let m = message("[workers]\ncount = \"four\"\n");
    assert!(m.contains("line 2"), "{m}");
    assert!(m.contains("count"), "{m}");
}

#[test]
fn malformed_toml_is_a_parse_error() {
    let m = message("[workers\ncount = 2\n");
    assert!(m.starts_with("job.toml: TOML parse error at line 1"), "{m}");
}

#[test]
fn defaults_make_a_valid_plan() {
    let plan = check("").expect("empty job is valid");
    assert_eq!(plan.workers, DEFAULT_WORKERS);
    assert_eq!(plan.pattern, Pattern::None);
    assert_eq!(plan.policy, PolicyPlan::Bsp);
    assert_eq!(plan.name, "job");
}

#[test]
fn workers_answer_at_once_unless_told_otherwise() {
    assert_eq!(check("").expect("valid").respond, Respond::AtOnce);
    let plan = check("[policy]\nrespond = \"between-units\"\n").expect("valid");
    assert_eq!(plan.respond, Respond::BetweenUnits);
    // how a worker answers does not change what it computes
    assert_eq!(plan.math_hash(), check("").expect("valid").math_hash());
}

#[test]
fn gradient_buckets_and_shards_default_and_keep_the_math() {
    // The gradient bucket: 256 KiB unless the job says, 0 sends every
    // unit at its end; the default stays out of the plan's hash (so
    // plans and checkpoints of earlier versions still match), and no
    // bucket changes the math.
    let default = check("").expect("valid");
    assert_eq!(default.grad_bucket_bytes, 256 * 1024);
    assert!(!default.to_json().contains("grad_bucket"));
    let per_unit = check("[workers]\ngrad_bucket_kib = 0\n").expect("valid");
    assert_eq!(per_unit.grad_bucket_bytes, 0);
    assert_ne!(per_unit.hash(), default.hash());
    assert_eq!(per_unit.math_hash(), default.math_hash());
    // Shards: by the model's size unless the job says, never more than
    // the workers; the default stays out of the hash, and no shard
    // count changes the math.
    assert_eq!(default.shards, None);
    assert!(!default.to_json().contains("shards"));
    assert_eq!(default.shards_for(100), 1);
    assert_eq!(default.shards_for(4096), 1);
    assert_eq!(default.shards_for(4097), 2);
    assert_eq!(default.shards_for(306_000), default.workers);
    let three = check("[workers]\ncount = 4\nshards = 3\n").expect("valid");
    assert_eq!(three.shards_for(100), 3);
    assert_eq!(three.math_hash(), default.math_hash());
}

#[test]
fn persistent_defaults_to_flexrr_skew() {
    let plan = check("[straggler]\npattern = \"persistent\"\n").expect("valid");
    assert_eq!(
        plan.pattern,
        Pattern::Persistent {
            workers: vec![0, 1],
            factor: 1.0,
            work_share: Some(0.75)
        }
    );
}

#[test]
fn flag_errors_point_at_the_command_line() {
    let text = "[workers]\ncount = 2\n";
    let mut spec = parse_job(text, Some(Path::new("job.toml"))).expect("parses");
    let o = Overrides {
        workers: Some(0),
        ..Default::default()
    };
    o.apply(&mut spec);
    let e = validate_with(&spec, text, Some(Path::new("job.toml")), &o).unwrap_err();
    assert_eq!(
        e.to_string(),
        "command line: [workers] count: must be at least 1 (got 0)"
    );
}

#[test]
fn changing_the_pattern_on_the_command_line_drops_old_knobs() {
    let text = "[straggler]\npattern = \"slow-worker\"\nprobability = 0.5\n";
    let mut spec = parse_job(text, None).expect("parses");
    Overrides {
        pattern: Some("power-law".into()),
        ..Default::default()
    }
    .apply(&mut spec);
    let plan = validate(&spec, text, None).expect("valid");
    assert!(matches!(plan.pattern, Pattern::PowerLaw { .. }));
}

#[test]
fn plan_hash_ignores_output_directory() {
    let a = check("[job]\nout = \"a\"\n").expect("valid");
    let b = check("[job]\nout = \"b\"\n").expect("valid");
    let c = check("[job]\nseed = 1\n").expect("valid");
    assert_eq!(a.hash(), b.hash());
    assert_ne!(a.hash(), c.hash());
}
