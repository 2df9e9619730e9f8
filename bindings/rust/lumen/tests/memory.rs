//! Native memory is released: its own test binary, so that no other test allocates while it
//! measures.
use lumen::{Engine, EngineOptions, Family, LayerOptions, ModelBuilder};

fn resident_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    statm.split_whitespace().nth(1).unwrap().parse::<usize>().unwrap() * 4096
}

#[test]
fn native_memory_is_released() {
    // 256 KiB of state per session: 2,000 leaked sessions would hold 500 MiB.
    let mut builder = ModelBuilder::new().unwrap();
    builder.add_layer(&LayerOptions::new(Family::RETENTION).heads(4).key_dim(128).value_dim(128))
        .unwrap();
    let model = builder.build().unwrap();
    let options = EngineOptions::default().threads(1);
    let cycles = |count: usize| {
        for _ in 0..count {
            let engine = Engine::new(&model, Some(&options)).unwrap();
            let session = engine.session().unwrap();
            let mut fork = session.fork().unwrap();
            fork.restore(&session.snapshot(None).unwrap()).unwrap();
            drop(engine); // sessions outlive their engine handle
        }
    };
    cycles(200);
    let before = resident_bytes();
    cycles(2000);
    let grown = resident_bytes().saturating_sub(before);
    assert!(grown < 32 << 20, "resident memory grew by {} bytes", grown);
}
