//! Tests of the LSTM predictor: seeded training, the model card, and plain-Rust
//! inference against burn's forward.

use super::*;
use crate::predict::tests::steps;
use crate::predict::Last;

/// Series whose ratio follows a period-3 cycle, which `last` cannot follow.
pub(crate) fn cyclic(workers: u32, len: usize) -> Vec<WorkerSeries> {
    (0..workers)
        .map(|w| {
            let ratios: Vec<f64> = (0..len)
                .map(|t| [1.0, 1.0, 2.0][(t + w as usize) % 3])
                .collect();
            WorkerSeries {
                worker: w,
                steps: steps(&ratios),
            }
        })
        .collect()
}

pub(crate) fn quick() -> LstmSettings {
    LstmSettings {
        window: 4,
        hidden: 8,
        max_epochs: 30,
        batch: 32,
        learning_rate: 1e-2,
        ..LstmSettings::default()
    }
}

fn all(s: &WorkerSeries) -> usize {
    s.steps.len()
}

pub(crate) fn fit(series: &[WorkerSeries], settings: &LstmSettings) -> LstmPredictor {
    LstmPredictor::train(series, &all, settings, Vec::new(), |_, _| {}).expect("trains")
}

#[test]
fn learns_a_cycle_that_last_cannot_follow() {
    let series = cyclic(4, 60);
    let model = fit(&series, &quick());
    let r = model.card().report.clone();
    assert!(r.validation_mae < 0.5 * r.validation_mae_last, "{r:?}");
    // Prediction after …, 1, 1 is 2; after …, 2 is 1.
    let h = &series[0].steps[..20]; // t = 0..19; step 20 has ratio [20 % 3 = 2] = 2
    let p = model.predict(h, 2);
    assert!((p[0] - 2.0).abs() < 0.4, "{p:?}");
    assert_eq!(p[0], p[1]);
    assert!((Last.predict(h, 1)[0] - 1.0).abs() < 1e-12);
}

#[test]
fn plain_inference_matches_burn() {
    let series = cyclic(3, 30);
    let settings = LstmSettings {
        max_epochs: 2,
        ..quick()
    };
    let model = fit(&series, &settings);
    let device = Device::flex();
    let net = model.to_net(&device);
    let card = model.card();
    let x = window_input(&series[1].steps[..9], 4, &card.mean, &card.std).expect("window");
    let burn_out = values(net.forward(Tensor::<3>::from_data(
        TensorData::new(x.clone(), [1, 4, N_FEATURES]),
        &device,
    )))[0];
    let plain = model.cell.forward(&x);
    assert!((burn_out - plain).abs() < 1e-5, "{burn_out} vs {plain}");
}

#[test]
fn training_is_reproducible_and_saves_and_loads() {
    let series = cyclic(3, 40);
    let settings = LstmSettings {
        max_epochs: 3,
        ..quick()
    };
    let a = fit(&series, &settings);
    let b = fit(&series, &settings);
    assert_eq!(a.cell, b.cell);
    let dir = tempfile::tempdir().expect("tempdir");
    a.save(dir.path()).expect("saves");
    let c = LstmPredictor::load(dir.path()).expect("loads");
    assert_eq!(a.cell, c.cell);
    assert_eq!(a.card, c.card);
}

#[test]
fn a_model_of_another_feature_set_is_refused() {
    let series = cyclic(3, 40);
    let settings = LstmSettings {
        max_epochs: 1,
        ..quick()
    };
    let model = fit(&series, &settings);
    let dir = tempfile::tempdir().expect("tempdir");
    model.save(dir.path()).expect("saves");
    let card = dir.path().join(CARD_FILE);
    let text = std::fs::read_to_string(&card).expect("card");
    std::fs::write(&card, text.replace("\"share_x_workers\"", "\"share\"")).expect("write");
    let err = LstmPredictor::load(dir.path()).unwrap_err();
    assert!(matches!(err, LstmError::FeatureSet { .. }), "{err}");
    assert!(err.to_string().contains("retrain"), "{err}");
    std::fs::write(&card, "{\"format\": 3}").expect("write");
    assert!(matches!(
        LstmPredictor::load(dir.path()),
        Err(LstmError::Card { .. })
    ));
    std::fs::remove_file(dir.path().join(WEIGHTS_FILE)).expect("rm");
    std::fs::write(&card, text).expect("write");
    assert!(matches!(
        LstmPredictor::load(dir.path()),
        Err(LstmError::Weights { .. })
    ));
}

#[test]
fn a_window_longer_than_the_traces_is_a_clear_error() {
    let series = cyclic(3, 6);
    let settings = LstmSettings {
        window: 10,
        ..quick()
    };
    let err = LstmPredictor::train(&series, &all, &settings, Vec::new(), |_, _| {}).unwrap_err();
    assert!(err.to_string().contains("window of 10 steps"), "{err}");
    let bad = LstmSettings {
        hidden: 0,
        ..quick()
    };
    assert!(matches!(
        LstmPredictor::train(&series, &all, &bad, Vec::new(), |_, _| {}),
        Err(LstmError::Setting { name: "hidden", .. })
    ));
}

#[test]
fn non_finite_outputs_fall_back_to_the_last_value() {
    let series = cyclic(3, 40);
    let settings = LstmSettings {
        max_epochs: 1,
        ..quick()
    };
    let mut model = fit(&series, &settings);
    model.cell.head_b = f32::NAN;
    let h = &series[0].steps[..10];
    assert_eq!(model.predict(h, 1), vec![h[9].ratio]);
    assert_eq!(model.predict(&[], 1), vec![1.0]);
}

/// Whatever the network says, the prediction stays within the ratios the
/// worker showed in the model's window: a model trained where slow workers
/// recover cannot call a persistently slow worker fast, nor invent a
/// slowdown a worker never had.
#[test]
fn predictions_stay_within_the_window_s_ratios() {
    let series = cyclic(3, 40);
    let settings = LstmSettings {
        max_epochs: 1,
        ..quick()
    };
    let mut model = fit(&series, &settings);
    let h = &series[0].steps[..10]; // ratios cycle through 1, 1, 2
    model.cell.head_b = 1e3;
    assert_eq!(model.predict(h, 1), vec![2.0]);
    model.cell.head_b = -1e3;
    assert_eq!(model.predict(h, 1), vec![1.0]);
    // A worker slow for the whole window stays slow.
    let slow = steps(&[3.0; 10]);
    assert_eq!(model.predict(&slow, 1), vec![3.0]);
}

/// A network that says nothing (its output zeroed) predicts its base: the
/// median ratio of the last 16 steps, reaching before the model's window (4
/// steps here), or the last step's for a model trained on changes from the
/// last step.
#[test]
fn a_silent_model_predicts_its_base() {
    let series = cyclic(3, 40);
    let silent = |base| {
        let mut model = fit(
            &series,
            &LstmSettings {
                max_epochs: 1,
                base,
                ..quick()
            },
        );
        model.cell.head_w.iter_mut().for_each(|w| *w = 0.0);
        model.cell.head_b = 0.0;
        model
    };
    // the window holds 1, 1, 1, 2 (median 1); the six steps' median is 1.5
    let h = steps(&[5.0, 5.0, 1.0, 1.0, 1.0, 2.0]);
    assert_eq!(silent(Base::Median).predict(&h, 1), vec![1.5]);
    assert_eq!(silent(Base::Last).predict(&h, 1), vec![2.0]);
    assert_eq!(Base::Median.of(&h), Some(1.5));
    // no further back than 16 steps
    let long = steps(&[[9.0; 10].as_slice(), &[1.0; 16]].concat());
    assert_eq!(Base::Median.of(&long), Some(1.0));
    assert_eq!(Base::Median.of(&steps(&[f64::NAN, 3.0])), Some(3.0));
    assert_eq!(Base::Median.of(&[]), None);
}

/// A card written before the base was a setting has none: its model was
/// trained on changes from the last step, and loads as such.
#[test]
fn a_card_without_a_base_is_a_model_of_changes_from_the_last_step() {
    let series = cyclic(3, 40);
    let model = fit(
        &series,
        &LstmSettings {
            max_epochs: 1,
            ..quick()
        },
    );
    assert_eq!(model.card().settings.base, Base::Median, "the default");
    let dir = tempfile::tempdir().expect("tempdir");
    model.save(dir.path()).expect("saves");
    let card = dir.path().join(CARD_FILE);
    let text = std::fs::read_to_string(&card).expect("card");
    assert!(text.contains("\"base\": \"median\""), "{text}");
    std::fs::write(&card, text.replace(",\n    \"base\": \"median\"", "")).expect("write");
    let old = LstmPredictor::load(dir.path()).expect("loads");
    assert_eq!(old.card().settings.base, Base::Last);
    // the committed model predates the setting
    let committed = LstmPredictor::load(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("pipelines/models/lstm-policies-bound"),
    )
    .expect("the committed model loads");
    assert_eq!(committed.card().settings.base, Base::Last);
}
