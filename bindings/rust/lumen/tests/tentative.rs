//! Tentative tokens from Rust: a tentative step then commit(m) is bitwise m plain steps, for
//! one session and a batch; a session holding tentative tokens refuses other calls.
use lumen::{Engine, EngineOptions, Family, Inputs, LayerOptions, ModelBuilder, StatePart, Status};

const H: usize = 2;
const HV: usize = 4;
const K: usize = 8;
const V: usize = 6;

/// q, k (unit rows), v, g, beta for `tokens` tokens, from a small deterministic sequence.
fn inputs(tokens: usize) -> [Vec<f32>; 5] {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        (state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    };
    let q = (0..tokens * H * K).map(|_| (next() - 0.5) as f32).collect();
    let mut k: Vec<f32> = (0..tokens * H * K).map(|_| (next() - 0.5) as f32).collect();
    for row in k.chunks_mut(K) {
        let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        row.iter_mut().for_each(|x| *x /= norm);
    }
    let v = (0..tokens * HV * V).map(|_| (next() - 0.5) as f32).collect();
    let g = (0..tokens * HV).map(|_| -(0.01 + 0.5 * next()) as f32).collect();
    let beta = (0..tokens * HV).map(|_| (0.1 + 0.8 * next()) as f32).collect();
    [q, k, v, g, beta]
}

fn engine() -> Engine {
    let mut builder = ModelBuilder::new().unwrap();
    builder.add_layer(&LayerOptions::new(Family::GATED_DELTA_NET).heads(H as i32)
        .value_heads(HV as i32).key_dim(K as i32).value_dim(V as i32)).unwrap();
    let model = builder.build().unwrap();
    Engine::new(&model, Some(&EngineOptions::default().threads(2))).unwrap()
}

/// Tokens [first, first + count) of x as one call's inputs.
fn span(x: &[Vec<f32>; 5], first: usize, count: usize) -> Inputs<'_, f32> {
    fn rows(a: &[f32], width: usize, first: usize, count: usize) -> &[f32] {
        &a[first * width..(first + count) * width]
    }
    Inputs::new(rows(&x[0], H * K, first, count), rows(&x[1], H * K, first, count),
                rows(&x[2], HV * V, first, count))
        .g(rows(&x[3], HV, first, count))
        .beta(rows(&x[4], HV, first, count))
}

fn step_plainly(session: &mut lumen::Session, x: &[Vec<f32>; 5], first: usize, count: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; count * HV * V];
    for (t, o) in out.chunks_mut(HV * V).enumerate() {
        session.step(0, &span(x, first + t, 1), o).unwrap();
    }
    out
}

#[test]
fn tentative_then_commit_equals_plain_steps() {
    let x = inputs(5);
    let engine = engine();
    let mut tentative = engine.session().unwrap();
    let mut all = engine.session().unwrap();
    let mut plain = engine.session().unwrap();
    let mut out = vec![f32::NAN; 5 * HV * V];
    tentative.step_tentative(0, &span(&x, 0, 5), &mut out).unwrap();
    assert_eq!(tentative.tentative_tokens().unwrap(), 5);
    let stepped = step_plainly(&mut all, &x, 0, 5);
    assert!(out.iter().zip(&stepped).all(|(a, b)| a.to_bits() == b.to_bits()));
    let busy = tentative.read_state(0, StatePart::MATRIX).unwrap_err();
    assert_eq!(busy.status(), Status::UncommittedTokens);
    assert_eq!(tentative.commit(6).unwrap_err().status(), Status::InvalidArgument);
    tentative.commit(3).unwrap();
    step_plainly(&mut plain, &x, 0, 3);
    assert_eq!(tentative.tokens(0).unwrap(), 3);
    assert_eq!(tentative.read_state(0, StatePart::MATRIX).unwrap(),
               plain.read_state(0, StatePart::MATRIX).unwrap());
    assert_eq!(lumen::MAX_TENTATIVE_TOKENS, 16);
}

#[test]
fn rewind_goes_back_bitwise() {
    let x = inputs(5);
    let engine = engine();
    let mut session = engine.session().unwrap();
    session.set_rewind_depth(3).unwrap();
    let mut states = vec![session.read_state(0, StatePart::MATRIX).unwrap()];
    for t in 0..5 {
        step_plainly(&mut session, &x, t, 1);
        states.push(session.read_state(0, StatePart::MATRIX).unwrap());
    }
    assert_eq!(session.rewind_available().unwrap(), 3);
    session.rewind(2).unwrap();
    assert_eq!(session.tokens(0).unwrap(), 3);
    assert_eq!(session.read_state(0, StatePart::MATRIX).unwrap(), states[3]);
    assert_eq!(session.rewind(lumen::MAX_REWIND_TOKENS).unwrap_err().status(),
               Status::InvalidArgument);
}

#[test]
fn batched_tentative_tokens_commit_per_session() {
    let x = inputs(6);
    let engine = engine();
    let mut a = engine.session().unwrap();
    let mut b = engine.session().unwrap();
    let cu_seqlens = [0, 2, 6];
    let accepted = [2, 3];
    let mut out = vec![f32::NAN; 6 * HV * V];
    engine.step_tentative_batch(0, &mut [&mut a, &mut b], &cu_seqlens, &span(&x, 0, 6), &mut out)
        .unwrap();
    engine.commit_batch(&mut [&mut a, &mut b], &accepted).unwrap();
    for (i, session) in [&a, &b].into_iter().enumerate() {
        let mut plain = engine.session().unwrap();
        step_plainly(&mut plain, &x, cu_seqlens[i] as usize, accepted[i] as usize);
        assert_eq!(session.read_state(0, StatePart::MATRIX).unwrap(),
                   plain.read_state(0, StatePart::MATRIX).unwrap());
    }
}
