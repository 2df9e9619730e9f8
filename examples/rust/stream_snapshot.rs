//! Builds a two-layer model, prefills a prompt, steps, saves the session to a file, loads it
//! into a new session and checks that both continue with the same outputs.
//! Run: cd bindings/rust && cargo run --offline --example stream_snapshot (with
//! LUMEN_LIB_DIR=<build>/src to use a build tree's library; bindings/rust/README.md says more).
use lumen::{Engine, Family, Inputs, LayerOptions, ModelBuilder, Session};

const H: usize = 2;
const K: usize = 4;
const V: usize = 4;
const PROMPT: usize = 8;

fn values(count: usize, t: usize, salt: f64) -> Vec<f32> {
    (0..count).map(|i| (0.37 * i as f64 + 1.3 * t as f64 + salt).sin() as f32).collect()
}

/// One token through both layers (layer 0 gated, layer 1 retention); both outputs.
fn step(session: &mut Session, t: usize) -> lumen::Result<Vec<f32>> {
    let (q, k, v) = (values(H * K, t, 0.0), values(H * K, t, 1.0), values(H * V, t, 2.0));
    let (g, beta) = (vec![-0.1f32; H], vec![0.5f32; H]);
    let mut o = vec![0f32; 2 * H * V];
    let (o0, o1) = o.split_at_mut(H * V);
    session.step(0, &Inputs::new(&q, &k, &v).g(&g).beta(&beta), o0)?;
    session.step(1, &Inputs::new(&q, &k, &v), o1)?;
    Ok(o)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).unwrap_or_else(|| "stream_snapshot.lumen".into());
    let mut builder = ModelBuilder::new()?;
    // qk_l2norm: the delta rule wants unit-norm keys.
    let gated = LayerOptions::new(Family::GATED_DELTA_NET).heads(H as i32).key_dim(K as i32)
        .value_dim(V as i32).qk_l2norm(true);
    builder.add_layer(&gated)?;
    builder.add_layer(&LayerOptions::new(Family::RETENTION).heads(H as i32).key_dim(K as i32)
        .value_dim(V as i32))?;
    let engine = Engine::new(&builder.build()?, None)?;
    let mut session = engine.session()?;
    let mut resumed = engine.session()?;

    let (q, k) = (values(PROMPT * H * K, 100, 0.0), values(PROMPT * H * K, 100, 1.0));
    let v = values(PROMPT * H * V, 100, 2.0);
    let (g, beta) = (vec![-0.1f32; PROMPT * H], vec![0.5f32; PROMPT * H]);
    let mut o = vec![0f32; PROMPT * H * V];
    session.prefill(0, &Inputs::new(&q, &k, &v).g(&g).beta(&beta), &mut o)?;
    session.prefill(1, &Inputs::new(&q, &k, &v), &mut o)?;
    let o = step(&mut session, 0)?;
    println!("after the prompt and one step: o[0..{}] = {:.4} {:.4} {:.4} {:.4}", V - 1, o[0],
             o[1], o[2], o[3]);

    session.save(&path, None)?;
    resumed.load(&path)?;
    for t in 1..=4 {
        if step(&mut session, t)? != step(&mut resumed, t)? {
            return Err(format!("token {}: the loaded session differs", t).into());
        }
    }
    println!("saved to {}, loaded, and 4 more tokens match bit for bit", path);
    Ok(())
}
