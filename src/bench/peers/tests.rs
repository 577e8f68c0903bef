//! The peers' planning and their scripts' output, read.

use super::*;

#[test]
fn reaching_takes_two_consecutive_evaluations() {
    let acc = [0.6, 0.86, 0.84, 0.85, 0.9, 0.7];
    assert_eq!(first_of_two_at_or_above(&acc, 0.85), Some(3));
    assert_eq!(first_of_two_at_or_above(&acc, 0.95), None);
    // the last evaluation alone does not count
    assert_eq!(first_of_two_at_or_above(&[0.5, 0.9], 0.85), None);
    assert_eq!(first_of_two_at_or_above(&[0.9, 0.9], 0.85), Some(0));
    assert_eq!(first_of_two_at_or_above(&[], 0.85), None);
}

#[test]
fn output_of_each_kind_parses_and_bad_output_is_named() {
    let single = concat!(
        "{\"event\": \"eval\", \"elapsed_s\": 0.0, \"step\": 0, \"images\": 0, \"test_accuracy\": 0.375, \"test_loss\": 0.7}\n",
        "{\"event\": \"eval\", \"elapsed_s\": 0.5, \"step\": 16, \"images\": 512, \"test_accuracy\": 0.8, \"test_loss\": 0.5}\n",
        "{\"event\": \"done\", \"peer\": \"single\", \"seconds_per_step\": 0.033, \"images_per_s\": 970.0, \"torch\": \"2.5.0\"}\n"
    );
    let out = parse_output(PeerKind::Single, single).expect("parses");
    assert_eq!(out.curve.len(), 2);
    assert_eq!(out.curve[1].images, 512);
    assert!((out.time_per_iteration_ms - 33.0).abs() < 1e-9);
    assert_eq!(out.images_per_s, Some(970.0));
    let ddp = concat!(
        "{\"event\": \"run\", \"stragglers\": true, \"time_per_iteration_ms\": 1500.0, \"median_iteration_ms\": 1400.0, \"iteration_ms\": [1400.0]}\n",
        "{\"event\": \"done\", \"peer\": \"ddp\", \"time_per_iteration_ms\": 1500.0, \"torch\": \"2.5.0\"}\n"
    );
    let out = parse_output(PeerKind::Ddp, ddp).expect("parses");
    assert_eq!(out.time_per_iteration_ms, 1500.0);
    assert_eq!(out.median_iteration_ms, Some(1400.0));
    let err = parse_output(PeerKind::Ddp, "{\"event\": \"run\"}\n").expect_err("no done");
    assert!(err.contains("no \"done\" line"), "{err}");
    let err = parse_output(PeerKind::Single, "Traceback (most recent call last):\n")
        .expect_err("not JSON");
    assert!(err.contains("line 1 of its output is not JSON"), "{err}");
    let err = parse_output(
        PeerKind::Single,
        "{\"event\": \"done\", \"images_per_s\": 1.0}\n",
    )
    .expect_err("no seconds_per_step");
    assert!(err.contains("seconds_per_step"), "{err}");
}

#[test]
fn a_skipped_peer_section_says_why() {
    let s = summary_section(
        &PeersOutcome::Skipped("python3 cannot import torch (x)".into()),
        &[],
    );
    assert!(
        s.contains("## peers") && s.contains("skipped: python3 cannot import torch"),
        "{s}"
    );
    assert!(summary_section(&PeersOutcome::None, &[]).is_empty());
}

#[test]
fn a_python_that_does_not_exist_is_named() {
    let err = torch_version("/nonexistent/python3").expect_err("no such python");
    assert!(err.contains("cannot run /nonexistent/python3"), "{err}");
}
