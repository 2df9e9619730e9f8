use crate::options::DType;

/// An element type lumen reads and writes: `f32`, or bf16 / fp16 bits ([`Bf16`], [`F16`]).
pub trait Element: Copy {
    /// The `lumen_dtype` a slice of this type is passed as.
    const DTYPE: DType;
}

/// bfloat16 bits (the upper half of an fp32).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(transparent)]
pub struct Bf16(pub u16);

/// IEEE binary16 bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(transparent)]
pub struct F16(pub u16);

impl Element for f32 {
    const DTYPE: DType = DType::FLOAT32;
}
impl Element for Bf16 {
    const DTYPE: DType = DType::BFLOAT16;
}
impl Element for F16 {
    const DTYPE: DType = DType::FLOAT16;
}

impl Bf16 {
    /// Rounds an f32 to the nearest bf16 (ties to even).
    pub fn from_f32(value: f32) -> Bf16 {
        let bits = value.to_bits();
        if value.is_nan() {
            return Bf16(((bits >> 16) | 0x40) as u16);
        }
        let rounding = 0x7fff + ((bits >> 16) & 1);
        Bf16((bits.wrapping_add(rounding) >> 16) as u16)
    }

    /// The f32 of the same value (exact).
    pub fn to_f32(self) -> f32 {
        f32::from_bits(u32::from(self.0) << 16)
    }
}

/// The host arrays of one layer call: q, k, v and, where the family takes them, g and beta,
/// all of one element type. Read in place, never copied.
#[derive(Clone, Copy)]
pub struct Inputs<'a, T: Element> {
    /// Queries, `[T, H, K]`.
    pub q: &'a [T],
    /// Keys, `[T, H, K]`.
    pub k: &'a [T],
    /// Values, `[T, HV, V]`.
    pub v: &'a [T],
    /// Gates (log-decays), `[T, HV]` or `[T, HV, K]` (GLA, KDA); the gated families only.
    pub g: Option<&'a [T]>,
    /// Delta-rule strengths, `[T, HV]`; the delta families only.
    pub beta: Option<&'a [T]>,
}

impl<'a, T: Element> Inputs<'a, T> {
    /// q, k and v, without g and beta.
    pub fn new(q: &'a [T], k: &'a [T], v: &'a [T]) -> Self {
        Inputs { q, k, v, g: None, beta: None }
    }

    /// Adds the gates.
    pub fn g(mut self, g: &'a [T]) -> Self {
        self.g = Some(g);
        self
    }

    /// Adds beta.
    pub fn beta(mut self, beta: &'a [T]) -> Self {
        self.beta = Some(beta);
        self
    }

    /// The C structs of a call reading these inputs and writing `out`.
    pub(crate) fn raw<O: Element>(
        &self,
        out: &mut [O],
    ) -> (crate::sys::lumen_layer_inputs, crate::sys::lumen_layer_output) {
        use crate::sys;
        use std::mem::MaybeUninit;
        // SAFETY: the init functions fill every field.
        let (mut inputs, mut output) = unsafe {
            let mut inputs = MaybeUninit::<sys::lumen_layer_inputs>::zeroed();
            let mut output = MaybeUninit::<sys::lumen_layer_output>::zeroed();
            sys::lumen_layer_inputs_init(inputs.as_mut_ptr());
            sys::lumen_layer_output_init(output.as_mut_ptr());
            (inputs.assume_init(), output.assume_init())
        };
        fn slot<T>(slice: Option<&[T]>) -> (*const std::os::raw::c_void, i64) {
            slice.map_or((std::ptr::null(), 0), |s| (s.as_ptr().cast(), s.len() as i64))
        }
        inputs.dtype = T::DTYPE.0;
        (inputs.q, inputs.q_count) = slot(Some(self.q));
        (inputs.k, inputs.k_count) = slot(Some(self.k));
        (inputs.v, inputs.v_count) = slot(Some(self.v));
        (inputs.g, inputs.g_count) = slot(self.g);
        (inputs.beta, inputs.beta_count) = slot(self.beta);
        output.dtype = O::DTYPE.0;
        output.o = out.as_mut_ptr().cast();
        output.o_count = out.len() as i64;
        (inputs, output)
    }
}
