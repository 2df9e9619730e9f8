//! Options structs with builder methods, and the header's enumerations as typed constants.
//! Every struct keeps the C struct it wraps reachable through `raw_mut`, so a field added to
//! lumen.h is usable at once.

use std::fmt;
use std::mem::MaybeUninit;

use crate::sys;

/// An enumeration of the header as an open set of typed constants: a newer library's value
/// still fits (the struct fields and arguments it travels in are `int32_t`). `Debug` prints a
/// known value as its path, e.g. `Backend::CUDA`, and any other as `Backend(42)`.
macro_rules! constants {
    ($(#[$doc:meta])* $name:ident { $($item:ident = $value:ident),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $name(pub i32);
        impl $name {
            $(#[doc = concat!("`", stringify!($value), "`")]
              pub const $item: $name = $name(sys::$value as i32);)*
        }
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match *self {
                    $($name::$item => f.write_str(concat!(stringify!($name), "::", stringify!($item))),)*
                    $name(other) => write!(f, concat!(stringify!($name), "({})"), other),
                }
            }
        }
    };
}

constants!(
    /// Layer families (`lumen_family`); any other value of the header is `Family(value)`.
    Family {
        LINEAR_ATTN = LUMEN_FAMILY_LINEAR_ATTN, RETENTION = LUMEN_FAMILY_RETENTION,
        SSD = LUMEN_FAMILY_SSD, GLA = LUMEN_FAMILY_GLA, DELTA_NET = LUMEN_FAMILY_DELTA_NET,
        GATED_DELTA_NET = LUMEN_FAMILY_GATED_DELTA_NET, KDA = LUMEN_FAMILY_KDA,
    }
);
constants!(
    /// Feature maps of linear attention (`lumen_feature_map`).
    FeatureMap {
        IDENTITY = LUMEN_FEATURE_MAP_IDENTITY, ELU1 = LUMEN_FEATURE_MAP_ELU1,
        RELU = LUMEN_FEATURE_MAP_RELU,
    }
);
constants!(
    /// Element types (`lumen_dtype`).
    DType { FLOAT32 = LUMEN_DTYPE_FLOAT32, BFLOAT16 = LUMEN_DTYPE_BFLOAT16, FLOAT16 = LUMEN_DTYPE_FLOAT16 }
);
constants!(
    /// Memory kinds (`lumen_memory`).
    Memory { HOST = LUMEN_MEMORY_HOST, DEVICE = LUMEN_MEMORY_DEVICE }
);
constants!(
    /// Backends (`lumen_backend`).
    Backend {
        AUTO = LUMEN_BACKEND_AUTO, CPU = LUMEN_BACKEND_CPU, CUDA = LUMEN_BACKEND_CUDA,
        ROCM = LUMEN_BACKEND_ROCM,
    }
);
constants!(
    /// Per-layer parameters (`lumen_param`).
    Param {
        A_LOG = LUMEN_PARAM_A_LOG, DT_BIAS = LUMEN_PARAM_DT_BIAS, DECAY = LUMEN_PARAM_DECAY,
        CONV_Q_WEIGHT = LUMEN_PARAM_CONV_Q_WEIGHT, CONV_K_WEIGHT = LUMEN_PARAM_CONV_K_WEIGHT,
        CONV_V_WEIGHT = LUMEN_PARAM_CONV_V_WEIGHT, CONV_Q_BIAS = LUMEN_PARAM_CONV_Q_BIAS,
        CONV_K_BIAS = LUMEN_PARAM_CONV_K_BIAS, CONV_V_BIAS = LUMEN_PARAM_CONV_V_BIAS,
        D = LUMEN_PARAM_D,
    }
);
constants!(
    /// Parts of a layer's state (`lumen_state_part`).
    StatePart {
        MATRIX = LUMEN_STATE_MATRIX, NORMALIZER = LUMEN_STATE_NORMALIZER,
        CONV_Q = LUMEN_STATE_CONV_Q, CONV_K = LUMEN_STATE_CONV_K, CONV_V = LUMEN_STATE_CONV_V,
    }
);
constants!(
    /// Layouts a state part is read and written in (`lumen_state_layout`): LUMEN, lumen's
    /// canonical one; FLA, flash-linear-attention's layer caches (the matrix V-first,
    /// [HV, V, K]; a conv window [C, W] whose oldest column lumen does not keep).
    StateLayout { LUMEN = LUMEN_LAYOUT_LUMEN, FLA = LUMEN_LAYOUT_FLA }
);
constants!(
    /// The activation after a layer's short convolution (`lumen_conv_activation`).
    ConvActivation { SILU = LUMEN_CONV_ACTIVATION_SILU, NONE = LUMEN_CONV_ACTIVATION_NONE }
);

macro_rules! options_struct {
    ($(#[$doc:meta])* $name:ident, $raw:ident, $init:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy)]
        pub struct $name(sys::$raw);

        impl $name {
            /// The raw C struct, e.g. for a field these methods do not name.
            pub fn raw_mut(&mut self) -> &mut sys::$raw {
                &mut self.0
            }

            // Not every struct is passed in (MemoryStats only comes out).
            #[allow(dead_code)]
            pub(crate) fn as_ptr(&self) -> *const sys::$raw {
                &self.0
            }
        }

        impl Default for $name {
            /// The header's defaults, from its init function (which also sets struct_size).
            fn default() -> Self {
                let mut raw = MaybeUninit::<sys::$raw>::zeroed();
                // SAFETY: the init function fills every field of the struct.
                unsafe {
                    sys::$init(raw.as_mut_ptr());
                    $name(raw.assume_init())
                }
            }
        }
    };
}

macro_rules! setters {
    ($($(#[$doc:meta])* $method:ident: $field:ident as $t:ty => $convert:expr;)*) => {
        $($(#[$doc])* pub fn $method(mut self, value: $t) -> Self {
            let convert: fn($t) -> _ = $convert;
            self.0.$field = convert(value);
            self
        })*
    };
}

options_struct!(
    /// Description of one layer (`lumen_layer_options`), built with chained setters.
    LayerOptions, lumen_layer_options, lumen_layer_options_init
);
options_struct!(
    /// Engine settings (`lumen_engine_options`).
    EngineOptions, lumen_engine_options, lumen_engine_options_init
);
options_struct!(
    /// How a session store is opened (`lumen_store_options`).
    StoreOptions, lumen_store_options, lumen_store_options_init
);
options_struct!(
    /// How a session is saved to a store (`lumen_store_save_options`).
    StoreSaveOptions, lumen_store_save_options, lumen_store_save_options_init
);
options_struct!(
    /// Where an engine's session state is and how much has moved (`lumen_memory_stats`,
    /// from `Engine::stats`); read its fields with `raw_mut` or `raw`.
    MemoryStats, lumen_memory_stats, lumen_memory_stats_init
);
options_struct!(
    /// How a snapshot is written (`lumen_snapshot_options`).
    SnapshotOptions, lumen_snapshot_options, lumen_snapshot_options_init
);
options_struct!(
    /// The largest layer calls an engine is made ready for (`lumen_reservation`, see
    /// `Engine::reserve`).
    Reservation, lumen_reservation, lumen_reservation_init
);

impl LayerOptions {
    /// Defaults for a layer of `family`; set at least heads, key_dim and value_dim.
    pub fn new(family: Family) -> Self {
        Self::default().family(family)
    }

    setters! {
        /// The layer's family (its update rule).
        family: family as Family => |f| f.0;
        /// H, query/key heads.
        heads: num_heads as i32 => |x| x;
        /// HV, value heads (0: H).
        value_heads: num_value_heads as i32 => |x| x;
        /// K, the key (and query) size of a head.
        key_dim: key_dim as i32 => |x| x;
        /// V, the value size of a head.
        value_dim: value_dim as i32 => |x| x;
        /// Multiplies q; 0 means K^-0.5.
        scale: scale as f32 => |x| x;
        /// phi applied to q and k (linear attention).
        feature_map: feature_map as FeatureMap => |f| f.0;
        /// Keeps the normaliser z and divides by q . z (linear attention).
        normalize: normalize as bool => i32::from;
        /// The epsilon of that division; 0 means 1e-6 (fla's linear attention uses 1e-10: set that
        /// to match it).
        normalize_eps: normalize_eps as f32 => |x| x;
        /// L2-normalises q and k inside the layer.
        qk_l2norm: qk_l2norm as bool => i32::from;
        /// beta arrives as a logit (delta families).
        beta_sigmoid: beta_sigmoid as bool => i32::from;
        /// g arrives raw; needs Param::A_LOG and Param::DT_BIAS (see lumen.h).
        gate_raw: gate_raw as bool => i32::from;
        /// beta may lie in [0, 2], so the state's transition may have negative eigenvalues
        /// (fla's allow_neg_eigval; delta families): with beta_sigmoid, beta = 2 sigmoid(logit).
        allow_neg_eigval: allow_neg_eigval as bool => i32::from;
        /// fla's lower-bounded gate (lower_bound; gated_delta_net and kda with gate_raw):
        /// g = bound * sigmoid(exp(A_log) (g + dt_bias)), in (bound, 0); 0 keeps the raw gate.
        gate_lower_bound: gate_lower_bound as f32 => |x| x;
        /// The element type the session stores the state in.
        state_dtype: state_dtype as DType => |d| d.0;
        /// W, the width of the q/k/v convolutions (0: none).
        conv_size: conv_size as i32 => |x| x;
        /// The activation after the convolutions.
        conv_activation: conv_activation as ConvActivation => |a| a.0;
    }

    /// Qwen3-Next-80B-A3B's Gated DeltaNet layer (`lumen_layer_options_init_qwen3_next_gated_delta_net`).
    pub fn qwen3_next_gated_delta_net() -> Self {
        Self::preset(sys::lumen_layer_options_init_qwen3_next_gated_delta_net)
    }

    /// Kimi-Linear-48B-A3B's KDA layer (`lumen_layer_options_init_kimi_linear_kda`).
    pub fn kimi_linear_kda() -> Self {
        Self::preset(sys::lumen_layer_options_init_kimi_linear_kda)
    }

    /// Mamba-2 2.7B's layer on ssd (`lumen_layer_options_init_mamba2`).
    pub fn mamba2() -> Self {
        Self::preset(sys::lumen_layer_options_init_mamba2)
    }

    fn preset(init: unsafe extern "C" fn(*mut sys::lumen_layer_options)) -> Self {
        let mut raw = MaybeUninit::<sys::lumen_layer_options>::zeroed();
        // SAFETY: every preset fills every field of the struct.
        unsafe {
            init(raw.as_mut_ptr());
            LayerOptions(raw.assume_init())
        }
    }

    pub(crate) fn from_raw(raw: sys::lumen_layer_options) -> Self {
        LayerOptions(raw)
    }

    /// The layer's fields as the C struct holds them.
    pub fn raw(&self) -> &sys::lumen_layer_options {
        &self.0
    }
}

impl EngineOptions {
    setters! {
        /// The backend to run on; AUTO (the default) picks the best one present.
        backend: backend as Backend => |b| b.0;
        /// Worker threads including the caller; 0 = one per hardware thread.
        threads: num_threads as i32 => |x| x;
        /// GPU ordinal.
        device: device as i32 => |x| x;
        /// Bytes of session state kept resident; 0 (the default) is no limit. Evicted
        /// sessions go to a private spill directory unless `raw_mut().spill_directory`
        /// names one (a C string that must outlive `Engine::new`).
        memory_budget_bytes: memory_budget_bytes as i64 => |x| x;
    }
}

impl StoreOptions {
    setters! {
        /// redis://: the limit on connecting and on each answer, in ms; 0 = 5000.
        timeout_ms: timeout_ms as i32 => |x| x;
        /// redis://: the largest part a value is split into; 0 = 4 MiB.
        part_bytes: part_bytes as i64 => |x| x;
    }
}

impl StoreSaveOptions {
    setters! {
        /// FLOAT32 (exact) or BFLOAT16 (half the size).
        state_dtype: state_dtype as DType => |d| d.0;
        /// 0: never expires; > 0: expires this many ms after the save.
        expiry_ms: expiry_ms as i64 => |x| x;
        /// -1: any; 0: only where nothing is stored; n: only over version n.
        expected_version: expected_version as i64 => |x| x;
    }
}

impl MemoryStats {
    /// The counts as the C struct holds them.
    pub fn raw(&self) -> &sys::lumen_memory_stats {
        &self.0
    }
}

impl SnapshotOptions {
    setters! {
        /// FLOAT32 (exact) or BFLOAT16 (half the size).
        state_dtype: state_dtype as DType => |d| d.0;
    }
}

impl Reservation {
    setters! {
        /// Sessions in one layer call (n of the batched calls); default 1.
        max_sessions: max_sessions as i32 => |x| x;
        /// Tokens in one layer call, its sessions together; default 1.
        max_tokens: max_tokens as i32 => |x| x;
    }
}
