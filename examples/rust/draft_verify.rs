//! Speculative decoding against one gated_delta_net layer: a draft proposes N tokens, the
//! layer runs them tentatively (every token's output, no state written), the caller accepts a
//! prefix and commits it, then steps the layer's own token where the draft was rejected. At
//! the end the session is checked, bit for bit, against one that stepped only the kept tokens.
//! Run: cd bindings/rust && cargo run --offline --example draft_verify.
use lumen::{Engine, Family, Inputs, LayerOptions, ModelBuilder, StatePart};

const H: usize = 2;
const K: usize = 4;
const V: usize = 4;
const N: usize = 4;
const ROUNDS: usize = 5;

/// A stand-in for a small model's proposal: q, k, v of token `t` (g and beta are fixed).
fn draft(t: usize) -> [Vec<f32>; 3] {
    let values = |count: usize, salt: f64| -> Vec<f32> {
        (0..count).map(|i| (0.37 * i as f64 + 1.3 * t as f64 + salt).sin() as f32).collect()
    };
    [values(H * K, 0.0), values(H * K, 1.0), values(H * V, 2.0)]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut builder = ModelBuilder::new()?;
    builder.add_layer(&LayerOptions::new(Family::GATED_DELTA_NET).heads(H as i32)
        .key_dim(K as i32).value_dim(V as i32).qk_l2norm(true))?;
    let model = builder.build()?;
    let engine = Engine::new(&model, None)?;
    let mut session = engine.session()?;
    let mut plain = engine.session()?;
    let (g, beta) = (vec![-0.1f32; N * H], vec![0.5f32; N * H]);
    let mut t = 0;
    for round in 0..ROUNDS {
        let tokens: Vec<[Vec<f32>; 3]> = (t..t + N).map(draft).collect();
        let joined = |part: usize| -> Vec<f32> { tokens.iter().flat_map(|x| x[part].clone()).collect() };
        let (q, k, v) = (joined(0), joined(1), joined(2));
        let mut o = vec![0f32; N * H * V];
        session.step_tentative(0, &Inputs::new(&q, &k, &v).g(&g).beta(&beta), &mut o)?;
        // Accept while the layer agrees with the draft (here: o[0] of the token is positive).
        let accepted = (0..N).take_while(|&i| o[i * H * V] > 0.0).count();
        session.commit(accepted as i32)?;
        let mut kept: Vec<[Vec<f32>; 3]> = tokens[..accepted].to_vec();
        if accepted < N {
            // The layer's own token replaces the rejected draft token (stand-in: another).
            let own = draft(t + 1000);
            let mut out = vec![0f32; H * V];
            session.step(0, &Inputs::new(&own[0], &own[1], &own[2]).g(&g[..H]).beta(&beta[..H]),
                         &mut out)?;
            kept.push(own);
        }
        for x in &kept {  // the reference: plain steps of the kept tokens
            let mut out = vec![0f32; H * V];
            plain.step(0, &Inputs::new(&x[0], &x[1], &x[2]).g(&g[..H]).beta(&beta[..H]), &mut out)?;
        }
        t += kept.len();
        println!("round {round}: accepted {accepted} of {N} draft tokens");
    }
    let same = session.read_state(0, StatePart::MATRIX)? == plain.read_state(0, StatePart::MATRIX)?;
    println!("{t} tokens consumed; state {} plain steps bit for bit",
             if same { "equals" } else { "DIFFERS FROM" });
    if same { Ok(()) } else { Err("the committed state differs from plain steps".into()) }
}
