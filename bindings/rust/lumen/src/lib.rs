//! lumen: sessions for the recurrent state of linear-attention layers (RetNet, GLA, Mamba-2,
//! DeltaNet, Gated DeltaNet, KDA, linear attention), over lumen's C API (`lumen-sys`).
//!
//! ```no_run
//! use lumen::{Engine, Family, Inputs, LayerOptions, ModelBuilder};
//! # fn main() -> lumen::Result<()> {
//! let mut builder = ModelBuilder::new()?;
//! builder.add_layer(&LayerOptions::new(Family::GATED_DELTA_NET).heads(2).key_dim(4).value_dim(4))?;
//! let engine = Engine::new(&builder.build()?, None)?;
//! let mut session = engine.session()?;
//! let (q, k, v, g, beta) = ([0.5f32; 8], [0.5f32; 8], [1.0f32; 8], [-0.1f32; 2], [0.5f32; 2]);
//! let mut o = [0f32; 8];
//! session.step(0, &Inputs::new(&q, &k, &v).g(&g).beta(&beta), &mut o)?;
//! let snapshot = session.snapshot(None)?;
//! # Ok(()) }
//! ```
//!
//! A failed call is an [`Error`]: its [`Status`] (one variant per `LUMEN_ERROR_*`) and the
//! library's message.
//!
//! Ownership and threads follow `lumen.h`: every handle frees its native object on drop; a
//! session keeps its engine (and the engine its model) alive, so drops may come in any order.
//! Models and engines are `Send + Sync` (the header lets several threads call an engine); a
//! session is `Send` but not `Sync` (never two calls at once, not even two reads), and calls
//! that change it take `&mut self`. A model builder is `Send` but not `Sync`.

#![warn(missing_docs)]

pub use lumen_sys as sys;

mod engine;
mod error;
mod model;
mod options;
mod session;
mod store;
mod tensor;

pub use engine::Engine;
pub use error::{Error, Result, Status};
pub use model::{Model, ModelBuilder};
pub use options::{
    Backend, ConvActivation, DType, EngineOptions, Family, FeatureMap, LayerOptions, Memory,
    MemoryStats, Param, Reservation, SnapshotOptions, StateLayout, StatePart, StoreOptions,
    StoreSaveOptions,
};
pub use session::Session;
pub use store::Store;
pub use tensor::{Bf16, Element, F16, Inputs};

/// The most tokens one tentative call runs per session (`LUMEN_MAX_TENTATIVE_TOKENS`, since
/// 0.4).
pub const MAX_TENTATIVE_TOKENS: i32 = sys::LUMEN_MAX_TENTATIVE_TOKENS as i32;

/// The deepest rewind a session keeps (`LUMEN_MAX_REWIND_TOKENS`, since 0.4).
pub const MAX_REWIND_TOKENS: i32 = sys::LUMEN_MAX_REWIND_TOKENS as i32;

/// The loaded library's version, e.g. "0.4.0".
pub fn version() -> String {
    // SAFETY: lumen_version_string returns a static NUL-terminated string.
    unsafe { std::ffi::CStr::from_ptr(sys::lumen_version_string()) }
        .to_string_lossy()
        .into_owned()
}
