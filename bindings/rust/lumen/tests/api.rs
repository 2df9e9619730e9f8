//! The Rust binding against lumen.h's contract: a float64 reference, batches, snapshots,
//! errors, bf16 inputs and that native memory is released.
use lumen::{
    Backend, Bf16, DType, Engine, EngineOptions, Family, Inputs, LayerOptions, Model, ModelBuilder,
    Param, Reservation, Session, SnapshotOptions, StateLayout, StatePart, Status, Store,
    StoreSaveOptions,
};

const H: usize = 2;
const HV: usize = 4;
const K: usize = 8;
const V: usize = 6;

/// A small deterministic generator (xorshift64*), so the test needs no crate.
struct Random(u64);

impl Random {
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }

    fn gaussian(&mut self) -> f64 {
        (-2.0 * (1.0 - self.uniform()).ln()).sqrt() * (std::f64::consts::TAU * self.uniform()).cos()
    }
}

/// q, k (unit rows), v, g, beta for `tokens` tokens.
fn inputs(random: &mut Random, tokens: usize) -> [Vec<f32>; 5] {
    let q = (0..tokens * H * K).map(|_| random.gaussian() as f32).collect();
    let mut k: Vec<f32> = (0..tokens * H * K).map(|_| random.gaussian() as f32).collect();
    for row in k.chunks_mut(K) {
        let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        row.iter_mut().for_each(|x| *x /= norm);
    }
    let v = (0..tokens * HV * V).map(|_| random.gaussian() as f32).collect();
    let g = (0..tokens * HV).map(|_| -(0.01 + 0.5 * random.uniform()) as f32).collect();
    let beta = (0..tokens * HV).map(|_| (0.1 + 0.8 * random.uniform()) as f32).collect();
    [q, k, v, g, beta]
}

/// Gated DeltaNet in float64, the recurrence of docs/spec.md §2: o [T, HV, V].
fn reference(x: &[Vec<f32>; 5], tokens: usize) -> Vec<f64> {
    let mut state = vec![0f64; HV * K * V];
    let mut out = vec![0f64; tokens * HV * V];
    let scale = 1.0 / (K as f64).sqrt();
    for t in 0..tokens {
        for hv in 0..HV {
            let h = hv / (HV / H);
            let s = &mut state[hv * K * V..(hv + 1) * K * V];
            let decay = f64::from(x[3][t * HV + hv]).exp();
            let beta = f64::from(x[4][t * HV + hv]);
            s.iter_mut().for_each(|e| *e *= decay);
            let key = |i: usize| f64::from(x[1][(t * H + h) * K + i]);
            for j in 0..V {
                let sk: f64 = (0..K).map(|i| s[i * V + j] * key(i)).sum();
                let u = beta * (f64::from(x[2][(t * HV + hv) * V + j]) - sk);
                (0..K).for_each(|i| s[i * V + j] += key(i) * u);
            }
            for j in 0..V {
                out[(t * HV + hv) * V + j] = (0..K)
                    .map(|i| s[i * V + j] * scale * f64::from(x[0][(t * H + h) * K + i]))
                    .sum();
            }
        }
    }
    out
}

fn relative_rms(actual: &[f32], expected: &[f64]) -> f64 {
    let error: f64 = actual.iter().zip(expected).map(|(a, e)| (f64::from(*a) - e).powi(2)).sum();
    let norm: f64 = expected.iter().map(|e| e * e).sum();
    (error / norm).sqrt()
}

fn layer(family: Family, heads: usize, value_heads: usize, k: usize, v: usize) -> LayerOptions {
    LayerOptions::new(family).heads(heads as i32).value_heads(value_heads as i32)
        .key_dim(k as i32).value_dim(v as i32)
}

fn engine() -> Engine {
    let mut builder = ModelBuilder::new().unwrap();
    assert_eq!(builder.add_layer(&layer(Family::GATED_DELTA_NET, H, HV, K, V)).unwrap(), 0);
    assert_eq!(builder.add_layer(&layer(Family::RETENTION, H, H, K, V)).unwrap(), 1);
    let model = builder.build().unwrap();
    Engine::new(&model, Some(&EngineOptions::default().threads(2))).unwrap()
    // model and builder drop here: the engine keeps what it needs
}

fn token<T: Copy>(x: &[T], t: usize, width: usize) -> &[T] {
    &x[t * width..(t + 1) * width]
}

fn step_inputs(x: &[Vec<f32>; 5], t: usize) -> Inputs<'_, f32> {
    Inputs::new(token(&x[0], t, H * K), token(&x[1], t, H * K), token(&x[2], t, HV * V))
        .g(token(&x[3], t, HV))
        .beta(token(&x[4], t, HV))
}

fn all_inputs(x: &[Vec<f32>; 5]) -> Inputs<'_, f32> {
    Inputs::new(&x[0], &x[1], &x[2]).g(&x[3]).beta(&x[4])
}

#[test]
fn step_and_prefill_match_the_reference() {
    let tokens = 19;
    let x = inputs(&mut Random(1), tokens);
    let expected = reference(&x, tokens);
    let engine = engine();
    let mut stepped = engine.session().unwrap();
    let mut out = vec![f32::NAN; tokens * HV * V];
    for (t, o) in out.chunks_mut(HV * V).enumerate() {
        stepped.step(0, &step_inputs(&x, t), o).unwrap();
    }
    assert!(relative_rms(&out, &expected) <= 1e-5, "{}", relative_rms(&out, &expected));
    assert_eq!(stepped.tokens(0).unwrap(), tokens as i64);
    let mut prefilled = engine.session().unwrap();
    let mut out = vec![f32::NAN; tokens * HV * V];
    prefilled.prefill(0, &all_inputs(&x), &mut out).unwrap();
    assert!(relative_rms(&out, &expected) <= 1e-4, "{}", relative_rms(&out, &expected));
}

#[test]
fn bf16_inputs_equal_their_fp32_values() {
    let x = inputs(&mut Random(2), 5);
    let bits: Vec<Vec<Bf16>> = x.iter().map(|a| a.iter().map(|&f| Bf16::from_f32(f)).collect())
        .collect();
    let widened: Vec<Vec<f32>> = bits.iter().map(|a| a.iter().map(|b| b.to_f32()).collect())
        .collect();
    let engine = engine();
    let (mut narrow, mut wide) = (engine.session().unwrap(), engine.session().unwrap());
    let mut from_bf16 = vec![0f32; 5 * HV * V];
    narrow.prefill(0, &Inputs::new(&bits[0], &bits[1], &bits[2]).g(&bits[3]).beta(&bits[4]),
                   &mut from_bf16).unwrap();
    let mut from_fp32 = vec![0f32; 5 * HV * V];
    wide.prefill(0, &Inputs::new(&widened[0], &widened[1], &widened[2]).g(&widened[3])
                     .beta(&widened[4]), &mut from_fp32).unwrap();
    for (a, b) in from_bf16.iter().zip(&from_fp32) {
        assert!((a - b).abs() <= 1e-6 * b.abs().max(1.0), "{} vs {}", a, b);
    }
    // bf16 outputs too: the fp32 output rounded to nearest even.
    let (mut narrow, mut wide) = (engine.session().unwrap(), engine.session().unwrap());
    let step = Inputs::new(token(&bits[0], 0, H * K), token(&bits[1], 0, H * K),
                           token(&bits[2], 0, HV * V))
        .g(token(&bits[3], 0, HV))
        .beta(token(&bits[4], 0, HV));
    let mut out_bf16 = vec![Bf16::default(); HV * V];
    narrow.step(0, &step, &mut out_bf16).unwrap();
    let mut out_fp32 = vec![0f32; HV * V];
    wide.step(0, &step, &mut out_fp32).unwrap();
    let rounded: Vec<Bf16> = out_fp32.iter().map(|&f| Bf16::from_f32(f)).collect();
    assert_eq!(out_bf16, rounded);
}

#[test]
fn batched_step_and_varlen_prefill_match_single_sessions() {
    let mut random = Random(3);
    let x = inputs(&mut random, 3);
    let engine = engine();
    let mut batch: Vec<Session> = (0..3).map(|_| engine.session().unwrap()).collect();
    let mut out = vec![0f32; 3 * HV * V];
    {
        let mut refs: Vec<&mut Session> = batch.iter_mut().collect();
        engine.step_batch(0, &mut refs, &all_inputs(&x), &mut out).unwrap();
    }
    for (i, o) in out.chunks(HV * V).enumerate() {
        let mut single = engine.session().unwrap();
        let mut expected = vec![0f32; HV * V];
        single.step(0, &step_inputs(&x, i), &mut expected).unwrap();
        assert_eq!(o, &expected[..]);
    }
    let more = inputs(&mut random, 9);
    let mut out = vec![0f32; 9 * HV * V];
    let mut refs: Vec<&mut Session> = batch.iter_mut().collect();
    engine.prefill_varlen(0, &mut refs, &[0, 4, 4, 9], &all_inputs(&more), &mut out).unwrap();
    let error = engine.prefill_varlen(0, &mut refs, &[0, 1], &all_inputs(&more), &mut out)
        .unwrap_err();
    assert_eq!(error.status(), Status::InvalidArgument);
    let counts: Vec<i64> = batch.iter().map(|s| s.tokens(0).unwrap()).collect();
    assert_eq!(counts, [5, 1, 6]);
}

#[test]
fn snapshot_round_trips_through_bytes_and_a_file() {
    let mut random = Random(4);
    let x = inputs(&mut random, 6);
    let engine = engine();
    let mut session = engine.session().unwrap();
    let mut out = vec![0f32; 6 * HV * V];
    session.prefill(0, &all_inputs(&x), &mut out).unwrap();
    let data = session.snapshot(None).unwrap();
    let mut from_bytes = engine.session().unwrap();
    from_bytes.restore(&data).unwrap();
    let path = std::env::temp_dir().join(format!("lumen_rust_test_{}.lumen", std::process::id()));
    session.save(&path, None).unwrap();
    let mut from_file = engine.session().unwrap();
    from_file.load(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let next = inputs(&mut random, 1);
    let mut expected = vec![0f32; HV * V];
    session.step(0, &step_inputs(&next, 0), &mut expected).unwrap();
    for restored in [&mut from_bytes, &mut from_file] {
        assert_eq!(restored.tokens(0).unwrap(), 6);
        let mut o = vec![0f32; HV * V];
        restored.step(0, &step_inputs(&next, 0), &mut o).unwrap();
        assert_eq!(o, expected);
        assert_eq!(restored.read_state(0, StatePart::MATRIX).unwrap(),
                   session.read_state(0, StatePart::MATRIX).unwrap());
    }
    let half = session.snapshot(Some(&SnapshotOptions::default().state_dtype(DType::BFLOAT16)))
        .unwrap();
    assert!(half.len() < data.len());
}

#[test]
fn bad_calls_return_the_library_message() {
    let engine = engine();
    let mut session = engine.session().unwrap();
    let (q, v) = (vec![0f32; H * K], vec![0f32; HV * V]);
    let mut o = vec![0f32; HV * V];
    let error = session.step(0, &Inputs::new(&q, &q, &v), &mut o).unwrap_err();
    assert_eq!(error.status(), Status::InvalidArgument);
    assert!(error.message().contains('g'), "{}", error);
    assert!(error.to_string().contains(error.message()));
    assert_eq!(session.tokens(0).unwrap(), 0);
    let error = session.tokens(7).unwrap_err();
    assert_eq!(error.status(), Status::OutOfRange);
    assert!(error.message().contains('7'));
    assert_eq!(session.restore(&[1, 2, 3]).unwrap_err().status(),
               Status::CorruptSnapshot);
    assert_eq!(session.load("/nonexistent/dir/file.lumen").unwrap_err().status(),
               Status::Io);
    let mut builder = ModelBuilder::new().unwrap();
    let error = builder.add_layer(&layer(Family::GLA, 0, 0, 4, 4)).unwrap_err();
    assert_eq!(error.status(), Status::InvalidArgument);
    assert!(!error.message().is_empty());
}

/// fla's allow_neg_eigval: beta in [0, 2]. One token from a zero state with a unit key: the
/// state becomes beta k v^T, so o = beta (q . k) v.
#[test]
fn allow_neg_eigval_takes_beta_up_to_two() {
    let (q, k, v) = ([1f32, 0.0, 0.0, 0.0], [1f32, 0.0, 0.0, 0.0], [1f32, 2.0, 3.0, 4.0]);
    let mut builder = ModelBuilder::new().unwrap();
    builder.add_layer(&layer(Family::DELTA_NET, 1, 1, 4, 4).scale(1.0).allow_neg_eigval(true))
        .unwrap();
    builder.add_layer(&layer(Family::DELTA_NET, 1, 1, 4, 4).scale(1.0)).unwrap();
    let model = builder.build().unwrap();
    assert_eq!(model.layer_options(0).unwrap().raw_mut().allow_neg_eigval, 1);
    let engine = Engine::new(&model, Some(&EngineOptions::default().threads(1))).unwrap();
    let mut session = engine.session().unwrap();
    let mut o = [0f32; 4];
    session.step(0, &Inputs::new(&q, &k, &v).beta(&[1.5]), &mut o).unwrap();
    assert_eq!(o, [1.5, 3.0, 4.5, 6.0]);
    let error = session.step(0, &Inputs::new(&q, &k, &v).beta(&[2.5]), &mut o).unwrap_err();
    assert!(error.message().contains("must lie in [0, 2]"), "{}", error);
    let error = session.step(1, &Inputs::new(&q, &k, &v).beta(&[1.5]), &mut o).unwrap_err();
    assert!(error.message().contains("must lie in [0, 1]"), "{}", error);
}

/// gated_delta_net, K = V = 1, A_log = dt_bias = 0, raw gates 0: the lower-bounded gate is
/// -2 sigmoid(0) = -1, the raw gate -softplus(0) = -ln 2. A first token writes S = 1 (beta 1);
/// a second with beta 0 only decays it, so it reads exp(g).
#[test]
fn gate_lower_bound_is_flas_lower_bounded_gate() {
    let mut builder = ModelBuilder::new().unwrap();
    for bound in [-2.0f32, 0.0] {
        let index = builder
            .add_layer(&layer(Family::GATED_DELTA_NET, 1, 1, 1, 1).gate_raw(true)
                .gate_lower_bound(bound))
            .unwrap();
        builder.set_param(index, Param::A_LOG, &[0.0]).unwrap();
        builder.set_param(index, Param::DT_BIAS, &[0.0]).unwrap();
    }
    let model = builder.build().unwrap();
    assert_eq!(model.layer_options(0).unwrap().raw_mut().gate_lower_bound, -2.0);
    let engine = Engine::new(&model, Some(&EngineOptions::default().threads(1))).unwrap();
    let mut session = engine.session().unwrap();
    let (one, zero) = ([1f32], [0f32]);
    let mut o = [0f32];
    for (index, expected) in [(0, (-1f64).exp()), (1, 0.5)] {
        session.step(index, &Inputs::new(&one, &one, &one).g(&zero).beta(&one), &mut o).unwrap();
        assert_eq!(o[0], 1.0);
        session.step(index, &Inputs::new(&one, &one, &one).g(&zero).beta(&zero), &mut o).unwrap();
        assert!((f64::from(o[0]) - expected).abs() <= 1e-6, "layer {}: {}", index, o[0]);
    }
}

/// A gla layer, HV = 1, K = 2, V = 3, a convolution of width 3 (channels: H*K = 2 for q).
#[test]
fn states_move_in_flas_layout() {
    let mut builder = ModelBuilder::new().unwrap();
    builder.add_layer(&layer(Family::GLA, 1, 1, 2, 3).conv_size(3)).unwrap();
    builder.set_param(0, Param::CONV_Q_WEIGHT, &[0.0; 6]).unwrap();
    builder.set_param(0, Param::CONV_K_WEIGHT, &[0.0; 6]).unwrap();
    builder.set_param(0, Param::CONV_V_WEIGHT, &[0.0; 9]).unwrap();
    let model = builder.build().unwrap();
    assert_eq!(model.state_count_as(0, StatePart::CONV_Q, StateLayout::FLA).unwrap(), 6);
    let engine = Engine::new(&model, Some(&EngineOptions::default().threads(1))).unwrap();
    let mut session = engine.session().unwrap();
    session.write_state(0, StatePart::MATRIX, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap(); // [K, V]
    assert_eq!(session.read_state_as(0, StatePart::MATRIX, StateLayout::FLA).unwrap(),
               [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]); // [V, K]
    session.write_state_as(0, StatePart::CONV_Q, StateLayout::FLA, &[9.0, 1.0, 2.0, 9.0, 3.0, 4.0])
        .unwrap();
    assert_eq!(session.read_state(0, StatePart::CONV_Q).unwrap(), [1.0, 2.0, 3.0, 4.0]);
    assert_eq!(session.read_state_as(0, StatePart::CONV_Q, StateLayout::FLA).unwrap(),
               [0.0, 1.0, 2.0, 0.0, 3.0, 4.0]);
    let error = session.write_state_as(0, StatePart::CONV_Q, StateLayout::FLA, &[0.0; 4])
        .unwrap_err();
    assert_eq!(error.status(), Status::InvalidArgument);
}

#[test]
fn reserving_scratch_checks_its_arguments() {
    let engine = engine();
    // The CPU backend holds no device scratch: a valid reservation changes nothing.
    engine.reserve(&Reservation::default().max_sessions(8).max_tokens(4096)).unwrap();
    assert_eq!(engine.scratch_bytes().unwrap(), 0);
    for (sessions, tokens) in [(0, 1), (1, 0), (-3, 5), ((1 << 20) + 1, 1)] {
        let reservation = Reservation::default().max_sessions(sessions).max_tokens(tokens);
        let error = engine.reserve(&reservation).unwrap_err();
        assert_eq!(error.status(), Status::InvalidArgument);
        assert!(error.message().contains("max_sessions"), "{}", error);
    }
}

#[test]
fn handles_are_send_and_sync_as_the_header_allows() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Model>();
    send_sync::<Engine>();
    send::<Session>();
    send::<ModelBuilder>();
    // An engine used from several threads at once, each with its own session.
    let engine = engine();
    let x = inputs(&mut Random(5), 1);
    let outputs: Vec<Vec<f32>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let (engine, x) = (&engine, &x);
                scope.spawn(move || {
                    let mut session = engine.session().unwrap();
                    let mut o = vec![0f32; HV * V];
                    session.step(0, &step_inputs(x, 0), &mut o).unwrap();
                    o
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(outputs.windows(2).all(|w| w[0] == w[1]));
}

#[test]
fn stores_save_and_load_with_versions_and_the_budget_evicts() {
    let dir = std::env::temp_dir().join(format!("lumen-rust-store-{}", std::process::id()));
    let model = {
        let mut builder = ModelBuilder::new().unwrap();
        builder
            .add_layer(&LayerOptions::new(Family::GATED_DELTA_NET).heads(H as i32)
                .value_heads(HV as i32).key_dim(K as i32).value_dim(V as i32))
            .unwrap();
        builder.build().unwrap()
    };
    let engine = Engine::new(&model, Some(&EngineOptions::default().threads(1))).unwrap();
    let mut random = Random(29);
    let [q, k, v, g, beta] = inputs(&mut random, 3);
    let mut a = engine.session().unwrap();
    let mut o = vec![0f32; 3 * HV * V];
    a.prefill(0, &Inputs::new(&q, &k, &v).g(&g).beta(&beta), &mut o).unwrap();

    let store = Store::open(&format!("file://{}", dir.display()), None).unwrap();
    assert_eq!(store.save("chat", &a, None).unwrap(), 1);
    let mut b = engine.session().unwrap();
    assert_eq!(store.load("chat", &mut b).unwrap(), 1);
    assert_eq!(a.read_state(0, StatePart::MATRIX).unwrap(), b.read_state(0, StatePart::MATRIX).unwrap());
    let stale = StoreSaveOptions::default().expected_version(0);
    assert_eq!(store.save("chat", &b, Some(&stale)).unwrap_err().status(), Status::VersionConflict);
    assert_eq!(store.load("nobody", &mut b).unwrap_err().status(), Status::NotFound);
    store.remove("chat").unwrap();
    std::fs::remove_dir_all(&dir).unwrap();

    // A budget of one session: the second evicts the first, which comes back on use.
    let budget = model.state_bytes(-1).unwrap();
    let options =
        EngineOptions::default().backend(Backend::CPU).threads(1).memory_budget_bytes(budget);
    let small = Engine::new(&model, Some(&options)).unwrap();
    let first = small.session().unwrap();
    let second = small.session().unwrap();
    assert!(!first.resident().unwrap() && second.resident().unwrap());
    assert_eq!(first.read_state(0, StatePart::MATRIX).unwrap().iter().filter(|x| **x != 0.0).count(), 0);
    let stats = small.stats().unwrap();
    assert_eq!(stats.raw().memory_budget_bytes, budget);
    assert_eq!(stats.raw().evictions, 2);
    assert_eq!(stats.raw().reloads, 1);
}
