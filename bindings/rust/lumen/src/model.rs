use std::ptr::{self, NonNull};

use crate::error::{check, Result};
use crate::options::{LayerOptions, Param, StateLayout, StatePart};
use crate::sys;

/// Collects the layers of a model (`lumen_model_builder`).
pub struct ModelBuilder {
    raw: NonNull<sys::lumen_model_builder>,
}

// SAFETY: a builder may move between threads; it is not Sync (the header: not thread-safe).
unsafe impl Send for ModelBuilder {}

impl ModelBuilder {
    /// An empty builder.
    pub fn new() -> Result<Self> {
        let mut raw = ptr::null_mut();
        // SAFETY: raw is a valid out-pointer.
        check(unsafe { sys::lumen_model_builder_create(&mut raw) })?;
        Ok(ModelBuilder { raw: NonNull::new(raw).expect("lumen returned a NULL builder") })
    }

    /// Appends a layer (validated now); returns its index.
    pub fn add_layer(&mut self, options: &LayerOptions) -> Result<i32> {
        let mut layer = 0;
        // SAFETY: the builder is live and exclusively borrowed; options is a valid struct.
        check(unsafe { sys::lumen_model_builder_add_layer(self.raw.as_ptr(), options.as_ptr(), &mut layer) })?;
        Ok(layer)
    }

    /// Sets a parameter of a layer to a copy of `values`.
    pub fn set_param(&mut self, layer: i32, param: Param, values: &[f32]) -> Result<()> {
        // SAFETY: values is valid for values.len() elements during the call.
        check(unsafe {
            sys::lumen_model_builder_set_param(self.raw.as_ptr(), layer, param.0, values.as_ptr(),
                                               values.len() as i64)
        })
    }

    /// Builds an immutable model from the layers so far; the builder may go on.
    pub fn build(&self) -> Result<Model> {
        let mut raw = ptr::null_mut();
        // SAFETY: the builder is live; raw is a valid out-pointer.
        check(unsafe { sys::lumen_model_builder_build(self.raw.as_ptr(), &mut raw) })?;
        Ok(Model::from_raw(raw))
    }
}

impl Drop for ModelBuilder {
    fn drop(&mut self) {
        // SAFETY: the builder is live and dropped once.
        unsafe { sys::lumen_model_builder_destroy(self.raw.as_ptr()) }
    }
}

/// An immutable, validated list of layers (`lumen_model`).
pub struct Model {
    raw: NonNull<sys::lumen_model>,
}

// SAFETY: the header: models are immutable and may be shared freely.
unsafe impl Send for Model {}
unsafe impl Sync for Model {}

impl Model {
    pub(crate) fn from_raw(raw: *mut sys::lumen_model) -> Model {
        Model { raw: NonNull::new(raw).expect("lumen returned a NULL model") }
    }

    pub(crate) fn as_ptr(&self) -> *const sys::lumen_model {
        self.raw.as_ptr()
    }

    /// Layers in the model.
    pub fn num_layers(&self) -> Result<i32> {
        let mut out = 0;
        // SAFETY: the model is live; out is a valid out-pointer.
        check(unsafe { sys::lumen_model_num_layers(self.as_ptr(), &mut out) })?;
        Ok(out)
    }

    /// A layer's options, defaults resolved.
    pub fn layer_options(&self, layer: i32) -> Result<LayerOptions> {
        let mut out = LayerOptions::default();
        // SAFETY: out is a valid, initialised struct.
        check(unsafe { sys::lumen_model_layer_options(self.as_ptr(), layer, out.raw_mut()) })?;
        Ok(LayerOptions::from_raw(*out.raw()))
    }

    /// Elements of one part of a layer's fp32 state.
    pub fn state_count(&self, layer: i32, part: StatePart) -> Result<i64> {
        let mut out = 0;
        // SAFETY: as above.
        check(unsafe { sys::lumen_model_state_count(self.as_ptr(), layer, part.0, &mut out) })?;
        Ok(out)
    }

    /// Elements of one part of a layer's state in a layout (`StateLayout::FLA`: fla's layer
    /// caches, a conv window W columns wide).
    pub fn state_count_as(&self, layer: i32, part: StatePart, layout: StateLayout) -> Result<i64> {
        let mut out = 0;
        // SAFETY: as above.
        check(unsafe {
            sys::lumen_model_state_count_as(self.as_ptr(), layer, part.0, layout.0, &mut out)
        })?;
        Ok(out)
    }

    /// Bytes a session keeps for a layer, or for the whole model with `layer` -1.
    pub fn state_bytes(&self, layer: i32) -> Result<i64> {
        let mut out = 0;
        // SAFETY: as above.
        check(unsafe { sys::lumen_model_state_bytes(self.as_ptr(), layer, &mut out) })?;
        Ok(out)
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        // SAFETY: releases this handle's reference once; engines and sessions keep theirs.
        unsafe { sys::lumen_model_destroy(self.raw.as_ptr()) }
    }
}
