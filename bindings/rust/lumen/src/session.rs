use std::ffi::CString;
use std::path::Path;
use std::ptr::{self, NonNull};

use crate::engine::Engine;
use crate::error::{check, Error, Result};
use crate::model::Model;
use crate::options::{SnapshotOptions, StateLayout, StatePart};
use crate::sys;
use crate::tensor::{Element, Inputs};

/// One conversation: every layer's state and token count (`lumen_session`). It holds its
/// engine, so it may outlive every other handle.
pub struct Session {
    raw: NonNull<sys::lumen_session>,
    engine: Engine,
}

// SAFETY: a session may move between threads. It is not Sync: the header forbids two calls at
// once on one session, reads included, so shared references must stay on one thread.
unsafe impl Send for Session {}

impl Session {
    pub(crate) fn new(engine: &Engine) -> Result<Session> {
        let mut raw = ptr::null_mut();
        // SAFETY: the engine is live; raw is a valid out-pointer.
        check(unsafe { sys::lumen_session_create(engine.as_ptr(), &mut raw) })?;
        Ok(Session::from_raw(raw, engine.clone()))
    }

    fn from_raw(raw: *mut sys::lumen_session, engine: Engine) -> Session {
        Session { raw: NonNull::new(raw).expect("lumen returned a NULL session"), engine }
    }

    pub(crate) fn as_mut_ptr(&mut self) -> *mut sys::lumen_session {
        self.raw.as_ptr()
    }

    fn as_ptr(&self) -> *const sys::lumen_session {
        self.raw.as_ptr()
    }

    pub(crate) fn as_raw(&self) -> *const sys::lumen_session {
        self.as_ptr()
    }

    /// Starts bringing an evicted session back in the background (`lumen_session_prefetch`;
    /// a no-op for a resident session or an engine without a memory budget).
    pub fn prefetch(&mut self) -> Result<()> {
        // SAFETY: the session is live.
        check(unsafe { sys::lumen_session_prefetch(self.as_mut_ptr()) })
    }

    /// Whether the session's state is in the engine's memory (`lumen_session_resident`).
    pub fn resident(&self) -> Result<bool> {
        let mut out = 0;
        // SAFETY: the session is live; out is a valid out-pointer.
        check(unsafe { sys::lumen_session_resident(self.as_ptr(), &mut out) })?;
        Ok(out == 1)
    }

    /// The engine the session runs on.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// A new reference to the session's model.
    pub fn model(&self) -> Result<Model> {
        let mut raw = ptr::null_mut();
        // SAFETY: the session is live; raw is a valid out-pointer.
        check(unsafe { sys::lumen_session_model(self.as_ptr(), &mut raw) })?;
        Ok(Model::from_raw(raw))
    }

    /// A deep copy (state and token counts) on the same engine.
    pub fn fork(&self) -> Result<Session> {
        let mut raw = ptr::null_mut();
        // SAFETY: as above.
        check(unsafe { sys::lumen_session_fork(self.as_ptr(), &mut raw) })?;
        Ok(Session::from_raw(raw, self.engine.clone()))
    }

    /// Zeroes every state and token count.
    pub fn reset(&mut self) -> Result<()> {
        // SAFETY: the session is live and exclusively borrowed.
        check(unsafe { sys::lumen_session_reset(self.as_mut_ptr()) })
    }

    /// Tokens layer `layer` has consumed.
    pub fn tokens(&self, layer: i32) -> Result<i64> {
        let mut out = 0;
        // SAFETY: as above.
        check(unsafe { sys::lumen_session_tokens(self.as_ptr(), layer, &mut out) })?;
        Ok(out)
    }

    /// One token through one layer; `out` receives o `[HV, V]`.
    pub fn step<T: Element, O: Element>(&mut self, layer: i32, inputs: &Inputs<'_, T>,
                                        out: &mut [O]) -> Result<()> {
        let (raw_inputs, mut raw_output) = inputs.raw(out);
        // SAFETY: every buffer outlives the call; the session is exclusively borrowed.
        check(unsafe {
            sys::lumen_session_step(self.as_mut_ptr(), layer, &raw_inputs, &mut raw_output)
        })
    }

    /// T tokens through one layer, T from q's length (`[T, H, K]`); `out` receives o
    /// `[T, HV, V]`.
    pub fn prefill<T: Element, O: Element>(&mut self, layer: i32, inputs: &Inputs<'_, T>,
                                           out: &mut [O]) -> Result<()> {
        let shape = self.engine.shape(layer)?;
        let per_token = shape.heads * shape.key_dim;
        let tokens = i32::try_from(inputs.q.len() as i64 / per_token)
            .map_err(|_| Error::invalid_argument("too many tokens for one prefill"))?;
        if inputs.q.len() as i64 % per_token != 0 {
            return Err(Error::invalid_argument(format!(
                "q holds {} elements, not a multiple of H * K = {}", inputs.q.len(), per_token)));
        }
        let (raw_inputs, mut raw_output) = inputs.raw(out);
        // SAFETY: as in step.
        check(unsafe {
            sys::lumen_session_prefill(self.as_mut_ptr(), layer, tokens, &raw_inputs,
                                       &mut raw_output)
        })
    }

    /// T tokens (1 to [`crate::MAX_TENTATIVE_TOKENS`], T from q's length) through one layer
    /// tentatively (`lumen_session_step_tentative`): `out` receives every token's o
    /// `[T, HV, V]`, and the state stays unchanged until [`Session::commit`] (since 0.4).
    pub fn step_tentative<T: Element, O: Element>(&mut self, layer: i32,
                                                  inputs: &Inputs<'_, T>,
                                                  out: &mut [O]) -> Result<()> {
        let shape = self.engine.shape(layer)?;
        let per_token = shape.heads * shape.key_dim;
        if inputs.q.len() as i64 % per_token != 0 {
            return Err(Error::invalid_argument(format!(
                "q holds {} elements, not a multiple of H * K = {}", inputs.q.len(), per_token)));
        }
        let tokens = i32::try_from(inputs.q.len() as i64 / per_token)
            .map_err(|_| Error::invalid_argument("too many tentative tokens"))?;
        let (raw_inputs, mut raw_output) = inputs.raw(out);
        // SAFETY: as in step.
        check(unsafe {
            sys::lumen_session_step_tentative(self.as_mut_ptr(), layer, tokens, &raw_inputs,
                                              &mut raw_output)
        })
    }

    /// How many tentative tokens the session holds (0: none; since 0.4).
    pub fn tentative_tokens(&self) -> Result<i32> {
        let mut out = 0;
        // SAFETY: the session is live.
        check(unsafe { sys::lumen_session_tentative_tokens(self.as_ptr(), &mut out) })?;
        Ok(out)
    }

    /// Accepts the first `num_accepted` tentative tokens, as steps would take them, and drops
    /// the rest; 0 rejects them all (`lumen_session_commit`, since 0.4).
    pub fn commit(&mut self, num_accepted: i32) -> Result<()> {
        // SAFETY: the session is live and exclusively borrowed.
        check(unsafe { sys::lumen_session_commit(self.as_mut_ptr(), num_accepted) })
    }

    /// Keeps what the session needs to go back up to `depth` tokens (0 to
    /// [`crate::MAX_REWIND_TOKENS`]; 0 keeps nothing) (`lumen_session_set_rewind_depth`,
    /// since 0.4).
    pub fn set_rewind_depth(&mut self, depth: i32) -> Result<()> {
        // SAFETY: the session is live and exclusively borrowed.
        check(unsafe { sys::lumen_session_set_rewind_depth(self.as_mut_ptr(), depth) })
    }

    /// How many tokens the session can go back now (`lumen_session_rewind_available`, since
    /// 0.4).
    pub fn rewind_available(&self) -> Result<i32> {
        let mut out = 0;
        // SAFETY: the session is live.
        check(unsafe { sys::lumen_session_rewind_available(self.as_ptr(), &mut out) })?;
        Ok(out)
    }

    /// Takes every layer back `num_tokens` tokens, bitwise (`lumen_session_rewind`, since 0.4).
    pub fn rewind(&mut self, num_tokens: i32) -> Result<()> {
        // SAFETY: the session is live and exclusively borrowed.
        check(unsafe { sys::lumen_session_rewind(self.as_mut_ptr(), num_tokens) })
    }

    /// The length of o for `tokens` tokens of a layer: tokens * HV * V.
    pub fn output_len(&self, layer: i32, tokens: usize) -> Result<usize> {
        let shape = self.engine.shape(layer)?;
        Ok(tokens * (shape.value_heads * shape.value_dim) as usize)
    }

    /// One part of a layer's state, fp32, canonical layout (`[HV, K, V]` for the matrix).
    pub fn read_state(&self, layer: i32, part: StatePart) -> Result<Vec<f32>> {
        let count = self.model()?.state_count(layer, part)?;
        let mut state = vec![0f32; count as usize];
        // SAFETY: state holds count elements.
        check(unsafe {
            sys::lumen_session_read_state(self.as_ptr(), layer, part.0, state.as_mut_ptr(), count)
        })?;
        Ok(state)
    }

    /// One part of a layer's state in a layout: `StateLayout::FLA` is fla's layer caches (the
    /// matrix V-first, [HV, V, K]; a conv window [C, W] whose oldest column reads 0).
    pub fn read_state_as(&self, layer: i32, part: StatePart, layout: StateLayout)
                         -> Result<Vec<f32>> {
        let count = self.model()?.state_count_as(layer, part, layout)?;
        let mut state = vec![0f32; count as usize];
        // SAFETY: state holds count elements.
        check(unsafe {
            sys::lumen_session_read_state_as(self.as_ptr(), layer, part.0, layout.0,
                                             state.as_mut_ptr(), count)
        })?;
        Ok(state)
    }

    /// Overwrites one part of a layer's state from values in a layout (`StateLayout::FLA`: a
    /// state from an fla layer's cache, as it is).
    pub fn write_state_as(&mut self, layer: i32, part: StatePart, layout: StateLayout,
                          values: &[f32]) -> Result<()> {
        // SAFETY: values holds values.len() elements.
        check(unsafe {
            sys::lumen_session_write_state_as(self.as_mut_ptr(), layer, part.0, layout.0,
                                              values.as_ptr(), values.len() as i64)
        })
    }

    /// Overwrites one part of a layer's state (fp32, canonical layout).
    pub fn write_state(&mut self, layer: i32, part: StatePart, values: &[f32]) -> Result<()> {
        // SAFETY: values holds values.len() elements.
        check(unsafe {
            sys::lumen_session_write_state(self.as_mut_ptr(), layer, part.0, values.as_ptr(),
                                           values.len() as i64)
        })
    }

    /// The session's snapshot; `options` None means an exact fp32 one.
    pub fn snapshot(&self, options: Option<&SnapshotOptions>) -> Result<Vec<u8>> {
        let options = options.map_or(ptr::null(), SnapshotOptions::as_ptr);
        let mut size = 0;
        // SAFETY: the session is live; options NULL or valid.
        check(unsafe { sys::lumen_session_snapshot_size(self.as_ptr(), options, &mut size) })?;
        let mut data = vec![0u8; size as usize];
        let mut written = 0;
        // SAFETY: data holds size bytes.
        check(unsafe {
            sys::lumen_session_snapshot(self.as_ptr(), options, data.as_mut_ptr().cast(), size,
                                        &mut written)
        })?;
        data.truncate(written as usize);
        Ok(data)
    }

    /// Replaces state and token counts from a snapshot; all or nothing.
    pub fn restore(&mut self, data: &[u8]) -> Result<()> {
        // SAFETY: data holds data.len() bytes.
        check(unsafe {
            sys::lumen_session_restore(self.as_mut_ptr(), data.as_ptr().cast(), data.len() as i64)
        })
    }

    /// Saves the snapshot to a file, atomically and durably.
    pub fn save(&self, path: impl AsRef<Path>, options: Option<&SnapshotOptions>) -> Result<()> {
        let path = c_path(path.as_ref())?;
        let options = options.map_or(ptr::null(), SnapshotOptions::as_ptr);
        // SAFETY: path is NUL-terminated; options NULL or valid.
        check(unsafe { sys::lumen_session_save(self.as_ptr(), path.as_ptr(), options) })
    }

    /// Restores from a snapshot file; all or nothing.
    pub fn load(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let path = c_path(path.as_ref())?;
        // SAFETY: path is NUL-terminated.
        check(unsafe { sys::lumen_session_load(self.as_mut_ptr(), path.as_ptr()) })
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // SAFETY: the session is live and dropped once.
        unsafe { sys::lumen_session_destroy(self.raw.as_ptr()) }
    }
}

fn c_path(path: &Path) -> Result<CString> {
    let text = path
        .to_str()
        .ok_or_else(|| Error::invalid_argument(format!("path {:?} is not UTF-8", path)))?;
    CString::new(text)
        .map_err(|_| Error::invalid_argument(format!("path {:?} contains a NUL", text)))
}
