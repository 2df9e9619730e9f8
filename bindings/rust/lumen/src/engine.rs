use std::ptr::{self, NonNull};
use std::sync::Arc;

use crate::error::{check, Error, Result};
use crate::model::Model;
use crate::options::{Backend, EngineOptions, MemoryStats, Reservation};
use crate::session::Session;
use crate::sys;
use crate::tensor::{Element, Inputs};

/// A model bound to a backend and its worker threads (`lumen_engine`). Cloning is cheap and
/// shares the engine; every session holds a clone, so the engine lives while they do.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<EngineHandle>,
}

struct EngineHandle {
    raw: NonNull<sys::lumen_engine>,
    shapes: Vec<LayerShape>,
}

/// What sizing an output takes: H, HV, K, V of a layer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LayerShape {
    pub heads: i64,
    pub value_heads: i64,
    pub key_dim: i64,
    pub value_dim: i64,
}

// SAFETY: the header: an engine may be called from several threads at once.
unsafe impl Send for EngineHandle {}
unsafe impl Sync for EngineHandle {}

impl Drop for EngineHandle {
    fn drop(&mut self) {
        // SAFETY: releases this handle's reference once; sessions keep their own.
        unsafe { sys::lumen_engine_destroy(self.raw.as_ptr()) }
    }
}

impl Engine {
    /// An engine running `model`; `options` None means the AUTO backend on every core.
    pub fn new(model: &Model, options: Option<&EngineOptions>) -> Result<Engine> {
        let shapes = (0..model.num_layers()?)
            .map(|layer| {
                model.layer_options(layer).map(|options| {
                    let raw = options.raw();
                    LayerShape {
                        heads: raw.num_heads.into(),
                        value_heads: raw.num_value_heads.into(),
                        key_dim: raw.key_dim.into(),
                        value_dim: raw.value_dim.into(),
                    }
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let mut raw = ptr::null_mut();
        let options = options.map_or(ptr::null(), EngineOptions::as_ptr);
        // SAFETY: model is live, options NULL or valid, raw a valid out-pointer.
        check(unsafe { sys::lumen_engine_create(model.as_ptr(), options, &mut raw) })?;
        let raw = NonNull::new(raw).expect("lumen returned a NULL engine");
        Ok(Engine { inner: Arc::new(EngineHandle { raw, shapes }) })
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::lumen_engine {
        self.inner.raw.as_ptr()
    }

    /// The shape of a layer, or the library's own error for a bad index.
    pub(crate) fn shape(&self, layer: i32) -> Result<LayerShape> {
        match usize::try_from(layer).ok().and_then(|i| self.inner.shapes.get(i)) {
            Some(shape) => Ok(*shape),
            None => Err(Error::out_of_range(layer, self.inner.shapes.len())),
        }
    }

    /// The backend in use (never AUTO).
    pub fn backend(&self) -> Result<Backend> {
        let mut out = 0;
        // SAFETY: the engine is live; out is a valid out-pointer.
        check(unsafe { sys::lumen_engine_backend(self.as_ptr(), &mut out) })?;
        Ok(Backend(out as i32))
    }

    /// Worker threads, the calling thread included.
    pub fn num_threads(&self) -> Result<i32> {
        let mut out = 0;
        // SAFETY: as above.
        check(unsafe { sys::lumen_engine_num_threads(self.as_ptr(), &mut out) })?;
        Ok(out)
    }

    /// Makes the engine ready for every layer call within `reservation` (sessions and tokens
    /// per call): on a GPU, device-buffer calls within it then neither allocate nor
    /// synchronize (`lumen_engine_reserve`); on the CPU it only checks the arguments.
    pub fn reserve(&self, reservation: &Reservation) -> Result<()> {
        // SAFETY: the engine is live; the reservation is a valid struct, read during the call.
        check(unsafe { sys::lumen_engine_reserve(self.as_ptr(), reservation.as_ptr()) })
    }

    /// Bytes of device scratch the engine holds (`lumen_engine_scratch_bytes`; 0 on the CPU).
    pub fn scratch_bytes(&self) -> Result<i64> {
        let mut out = 0;
        // SAFETY: the engine is live; out is a valid out-pointer.
        check(unsafe { sys::lumen_engine_scratch_bytes(self.as_ptr(), &mut out) })?;
        Ok(out)
    }

    /// Where the engine's session state is and how much has moved (`lumen_engine_stats`).
    pub fn stats(&self) -> Result<MemoryStats> {
        let mut stats = MemoryStats::default();
        // SAFETY: the engine is live; stats is a struct whose struct_size init set.
        check(unsafe { sys::lumen_engine_stats(self.as_ptr(), stats.raw_mut()) })?;
        Ok(stats)
    }

    /// A new session of this engine with every state zero.
    pub fn session(&self) -> Result<Session> {
        Session::new(self)
    }

    /// One token for each of n distinct sessions (the `&mut` borrows guarantee distinct):
    /// inputs stack a leading n; `out` receives o `[n, HV, V]`.
    pub fn step_batch<T: Element, O: Element>(
        &self,
        layer: i32,
        sessions: &mut [&mut Session],
        inputs: &Inputs<'_, T>,
        out: &mut [O],
    ) -> Result<()> {
        let handles = self.handles(sessions)?;
        let (raw_inputs, mut raw_output) = inputs.raw(out);
        // SAFETY: every buffer outlives the call; handles are live sessions.
        check(unsafe {
            sys::lumen_engine_step_batch(self.as_ptr(), layer, handles.as_ptr(), n(&handles)?,
                                         &raw_inputs, &mut raw_output)
        })
    }

    /// Session i consumes tokens `cu_seqlens[i] .. cu_seqlens[i + 1]` of the concatenated
    /// inputs (`cu_seqlens.len()` = n + 1); `out` receives o `[cu_seqlens[n], HV, V]`.
    pub fn prefill_varlen<T: Element, O: Element>(
        &self,
        layer: i32,
        sessions: &mut [&mut Session],
        cu_seqlens: &[i32],
        inputs: &Inputs<'_, T>,
        out: &mut [O],
    ) -> Result<()> {
        if cu_seqlens.len() != sessions.len() + 1 {
            return Err(Error::invalid_argument(format!(
                "cu_seqlens has {} entries; {} sessions need {}",
                cu_seqlens.len(), sessions.len(), sessions.len() + 1)));
        }
        let handles = self.handles(sessions)?;
        let (raw_inputs, mut raw_output) = inputs.raw(out);
        // SAFETY: as in step_batch; cu_seqlens holds n + 1 entries (checked above).
        check(unsafe {
            sys::lumen_engine_prefill_varlen(self.as_ptr(), layer, handles.as_ptr(),
                                             n(&handles)?, cu_seqlens.as_ptr(), &raw_inputs,
                                             &mut raw_output)
        })
    }

    /// Tentative tokens for n distinct sessions (`lumen_engine_step_tentative_batch`, since
    /// 0.4): session i runs tokens `cu_seqlens[i] .. cu_seqlens[i + 1]` (1 to
    /// [`crate::MAX_TENTATIVE_TOKENS`] each) without changing its state; `out` receives o
    /// `[cu_seqlens[n], HV, V]`.
    pub fn step_tentative_batch<T: Element, O: Element>(
        &self,
        layer: i32,
        sessions: &mut [&mut Session],
        cu_seqlens: &[i32],
        inputs: &Inputs<'_, T>,
        out: &mut [O],
    ) -> Result<()> {
        if cu_seqlens.len() != sessions.len() + 1 {
            return Err(Error::invalid_argument(format!(
                "cu_seqlens has {} entries; {} sessions need {}",
                cu_seqlens.len(), sessions.len(), sessions.len() + 1)));
        }
        let handles = self.handles(sessions)?;
        let (raw_inputs, mut raw_output) = inputs.raw(out);
        // SAFETY: as in prefill_varlen.
        check(unsafe {
            sys::lumen_engine_step_tentative_batch(self.as_ptr(), layer, handles.as_ptr(),
                                                   n(&handles)?, cu_seqlens.as_ptr(),
                                                   &raw_inputs, &mut raw_output)
        })
    }

    /// Session i accepts the first `num_accepted[i]` of its tentative tokens
    /// (`lumen_engine_commit_batch`, since 0.4).
    pub fn commit_batch(&self, sessions: &mut [&mut Session], num_accepted: &[i32]) -> Result<()> {
        if num_accepted.len() != sessions.len() {
            return Err(Error::invalid_argument(format!(
                "num_accepted has {} entries; {} sessions need as many",
                num_accepted.len(), sessions.len())));
        }
        let handles = self.handles(sessions)?;
        // SAFETY: handles are live sessions; num_accepted holds n entries (checked above).
        check(unsafe {
            sys::lumen_engine_commit_batch(self.as_ptr(), handles.as_ptr(), n(&handles)?,
                                           num_accepted.as_ptr())
        })
    }

    fn handles(&self, sessions: &mut [&mut Session]) -> Result<Vec<*mut sys::lumen_session>> {
        Ok(sessions.iter_mut().map(|session| session.as_mut_ptr()).collect())
    }
}

fn n(handles: &[*mut sys::lumen_session]) -> Result<i32> {
    i32::try_from(handles.len()).map_err(|_| Error::invalid_argument("too many sessions"))
}
