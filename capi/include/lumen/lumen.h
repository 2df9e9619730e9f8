/*
 * lumen: sessions for the recurrent state of linear-attention layers.
 *
 * This is the library's only public header and its stable C ABI (C99).
 *
 * Objects
 *   lumen_model_builder  collects the description of a model, layer by layer.
 *   lumen_model          an immutable, validated list of layers (reference counted).
 *   lumen_engine         a model bound to a backend (CPU, CUDA or ROCm) and its
 *                        worker threads; it runs every step and prefill.
 *   lumen_session        the fixed-size state of every layer of the model for one
 *                        conversation, plus how many tokens each layer has consumed.
 *
 * Conventions
 *   - Every fallible call returns lumen_status; on failure lumen_last_error_message() holds a
 *     message for the calling thread, and no object was changed. A successful call clears it.
 *   - Results come back through trailing out-pointers, written only on success.
 *   - In every call, a NULL handle or a NULL out-pointer that the call does not mark optional
 *     is LUMEN_ERROR_INVALID_ARGUMENT, and a layer index outside the model is
 *     LUMEN_ERROR_OUT_OF_RANGE; doc comments list the rest.
 *   - Handles are reference counted internally: a session keeps its engine and model alive, an
 *     engine keeps its model alive, so *_destroy may be called in any order. *_destroy(NULL) is
 *     a no-op.
 *   - Structs that start with struct_size (options, reservations, layer inputs and output) are
 *     filled by their *_init(); new fields are only ever added at the end, and each says
 *     since which version. A struct_size that ends between two fields, from the end of the
 *     struct's first version up to this header's sizeof, is accepted (a caller built against
 *     an older header): the fields wholly inside it are read and the later ones take their
 *     defaults. A struct_size below the first version's end, or one that ends inside a field,
 *     is LUMEN_ERROR_INVALID_ARGUMENT. A larger one (a caller built against a newer header)
 *     is accepted only when every byte beyond the fields this library knows is zero, i.e. the
 *     newer fields are left at their defaults; otherwise the call fails with
 *     LUMEN_ERROR_INVALID_ARGUMENT naming the offset of the first non-zero byte (the Linux
 *     kernel's convention for extensible structs). struct_size is at most 4096.
 *   - Element counts are int64_t and count elements of the buffer's dtype, not bytes.
 *   - Enumerations travel as int32_t in parameters and struct fields, so any value a caller
 *     or a binding passes is well defined; unknown values are rejected with a message.
 *   - Memory: unless a call says otherwise, every pointer is host memory. Input and output
 *     structs carry a `memory` field so that GPU backends can take device pointers; the CPU
 *     backend accepts LUMEN_MEMORY_HOST only. See "GPU engines" below.
 *   - Thread safety: models are immutable and may be shared freely. An engine may be called
 *     from several threads at once (its layer calls take turns on its worker threads). A
 *     session must not be used by two calls at the same time, including calls that only read
 *     it (fork, read_state, snapshot) while another call changes it. Builders are not
 *     thread-safe.
 *
 * GPU engines (LUMEN_BACKEND_CUDA, LUMEN_BACKEND_ROCM)
 *   - Both run the same kernels (the ROCm backend is the CUDA backend's sources compiled with
 *     HIP for AMD GPUs), with the same rules below; for ROCm read HIP for CUDA throughout:
 *     device memory is HIP device memory, a stream a hipStream_t, a graph a HIP graph.
 *   - A session's state lives in device memory, in slots of a pool the engine grows on demand.
 *   - Layer calls whose input and output buffers are all LUMEN_MEMORY_DEVICE are asynchronous:
 *     the work is enqueued on lumen_layer_inputs.stream (a cudaStream_t, or a hipStream_t for
 *     ROCm; NULL is the default stream, CUDA's legacy one) and the call returns without
 *     waiting. The output and the new state are ready when the work enqueued on that stream
 *     before the call returned has finished; the caller's buffers must stay valid and
 *     unchanged until then. Such a call synchronizes and
 *     copies nothing through host memory, so it may be captured in a CUDA graph and replayed
 *     (replays update the same sessions' state, in the captured order).
 *   - Scratch. A prefill, and a step of a layer with a convolution or Mamba-2, uses the
 *     engine's device scratch. Reserve it before serving (lumen_engine_reserve: the most
 *     sessions and tokens one call will take); lumen_engine_scratch_bytes says what is held.
 *     A call over device buffers that needs no more than the engine holds neither allocates
 *     nor synchronizes. One that needs more grows the scratch first: outside capture it
 *     waits for the engine's earlier asynchronous calls that use the scratch, frees it and
 *     allocates the larger size (cudaMalloc), so that call is not asynchronous; while the
 *     stream is captured it fails with LUMEN_ERROR_UNSUPPORTED, changing nothing (reserve
 *     first). Graphs of such calls share the scratch: replay them in order with the
 *     engine's other calls (one stream, or synchronize in between).
 *   - A call with any LUMEN_MEMORY_HOST buffer copies through the engine's pinned host
 *     staging and device scratch (one copy in, one out) and returns when its output has been
 *     written back and the state updated. It cannot be captured: on a stream being captured
 *     it is LUMEN_ERROR_UNSUPPORTED and enqueues nothing.
 *   - Every other call that touches a session's state (create, fork, reset, read_state,
 *     write_state, snapshot, restore, save, load) first waits for the engine's earlier
 *     asynchronous layer calls on their streams, then works synchronously. Work you replay
 *     from a CUDA graph is not known to the engine: synchronize its stream before such a call.
 *     These calls, engine creation and lumen_engine_reserve wait for the engine's own work
 *     only, on a non-blocking stream of the engine's: never for the legacy default stream or
 *     the whole device, so they do not wait for your other kernels. They may run while
 *     another thread captures a stream, in any capture mode: the allocations they may make
 *     (growing the state pool or the scratch) run under the calling thread's relaxed capture
 *     mode, which does not disturb that capture.
 *   - A launch that fails is reported by the call that launched it (LUMEN_ERROR_BACKEND). A
 *     kernel that faults while running is reported by the next call that waits for the device
 *     (any of the calls above, or cudaStreamSynchronize); CUDA errors of that kind are sticky,
 *     and the engine then answers LUMEN_ERROR_BACKEND with CUDA's message.
 *   - LUMEN_BACKEND_CUDA without a usable CUDA device (none, no driver, or a library built
 *     without CUDA) is LUMEN_ERROR_UNSUPPORTED with a message; so is LUMEN_BACKEND_ROCM
 *     without a usable AMD GPU (none, no HIP 5 runtime libamdhip64.so.5, a GPU of a target
 *     the library was not built for, or a library built without ROCm). A ROCm-enabled
 *     library loads the HIP runtime only when it looks for an AMD GPU, so it loads and runs
 *     on the CPU where ROCm is not installed. LUMEN_BACKEND_AUTO picks CUDA, then ROCm, then
 *     the CPU.
 *   - Input values are checked on the device (see lumen_layer_inputs). A call with any
 *     LUMEN_MEMORY_HOST buffer returns the error itself, with the CPU backend's message, and
 *     changes no session and no output. An asynchronous call cannot: it returns LUMEN_OK, and
 *     the error is recorded in the engine and reported, as LUMEN_ERROR_INVALID_ARGUMENT whose
 *     message quotes the CPU's, by the next call of the engine that waits for the device: any
 *     call listed above (create, fork, reset, read_state, ...) or a layer call with a host
 *     buffer. That call does nothing else (repeat it), and reporting clears the record. From
 *     the failing call until the report, every layer call of the engine (the failing one, and
 *     any enqueued after it, graph replays included) leaves state and outputs unchanged.
 *     Token counts (lumen_session_tokens) follow the states: until the report they include
 *     the tokens of those calls, and the reporting call takes them back out of every
 *     session they were added to, so that afterwards each count is the tokens its state has
 *     consumed. A graph replay never changes a count (the capture counted its tokens once):
 *     when the failing call is a replay, the engine cannot tell which of its direct calls ran
 *     before it, and takes back nothing (reset or restore the sessions involved).
 *
 * Shapes (one session, one layer; row-major, innermost last; docs/spec.md §1):
 *   q, k   [T, H, K]      v, o   [T, HV, V]      beta [T, HV]
 *   g      [T, HV] for a scalar gate (ssd, gated_delta_net), [T, HV, K] for a vector gate
 *          (gla, kda); natural-log decay, g <= 0 (raw pre-activations when gate_raw is on).
 *   Every input value must be finite; beta in [0, 1] unless beta_sigmoid ([0, 2] with
 *   allow_neg_eigval; see lumen_layer_inputs).
 *   state  [HV, K, V] fp32 (canonical layout); normalizer [HV, K] fp32.
 *   conv windows (conv_size = W > 0)  q, k [H * K, W-1]   v [HV * V, W-1]
 */
#ifndef LUMEN_LUMEN_H_
#define LUMEN_LUMEN_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32) && !defined(LUMEN_STATIC)
#if defined(LUMEN_BUILDING)
#define LUMEN_API __declspec(dllexport)
#else
#define LUMEN_API __declspec(dllimport)
#endif
#elif defined(__GNUC__)
#define LUMEN_API __attribute__((visibility("default")))
#else
#define LUMEN_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Version. Same major version = ABI compatible: a program built against this header runs with
 * any library of the same major version whose minor version is at least this one's. Each
 * declaration added after 0.1.0 says "Since 0.2" (and so on), so that a caller can test
 * LUMEN_VERSION_NUMBER at compile time, or lumen_version_number() at run time, before using
 * it. Declarations in the experimental section at the end of this header are outside that
 * promise (see there).
 */
#define LUMEN_VERSION_MAJOR 0
#define LUMEN_VERSION_MINOR 4
#define LUMEN_VERSION_PATCH 0
/** MAJOR * 10000 + MINOR * 100 + PATCH of this header. Since 0.2. */
#define LUMEN_VERSION_NUMBER \
  (LUMEN_VERSION_MAJOR * 10000 + LUMEN_VERSION_MINOR * 100 + LUMEN_VERSION_PATCH)

/** Returns MAJOR * 10000 + MINOR * 100 + PATCH of the loaded library. Thread-safe. */
LUMEN_API int32_t lumen_version_number(void);

/** Returns the loaded library's version as "MAJOR.MINOR.PATCH" (static storage). Thread-safe. */
LUMEN_API const char* lumen_version_string(void);

/* ------------------------------------------------------------------------------------------ */
/* Status                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/** Result of every fallible call. Values are fixed forever; new codes are appended. */
typedef enum lumen_status {
  LUMEN_OK = 0,
  /** An argument is NULL, out of range, inconsistent, or a buffer has the wrong size. */
  LUMEN_ERROR_INVALID_ARGUMENT = 1,
  /** A layer index is outside the model. */
  LUMEN_ERROR_OUT_OF_RANGE = 2,
  /** A session belongs to another engine or model than the call needs. */
  LUMEN_ERROR_MODEL_MISMATCH = 3,
  /** Memory could not be allocated. */
  LUMEN_ERROR_OUT_OF_MEMORY = 4,
  /** The request is valid but this build or backend cannot do it (e.g. CUDA not built). */
  LUMEN_ERROR_UNSUPPORTED = 5,
  /** The backend (a device runtime) failed. */
  LUMEN_ERROR_BACKEND = 6,
  /** A bug in lumen: please report it with the message. */
  LUMEN_ERROR_INTERNAL = 7,
  /** A caller buffer is smaller than the result; query the size first. */
  LUMEN_ERROR_BUFFER_TOO_SMALL = 8,
  /** Snapshot bytes are truncated, damaged or not a lumen snapshot (checksum, magic, layout). */
  LUMEN_ERROR_CORRUPT_SNAPSHOT = 9,
  /** A snapshot was written in a newer format version than this library reads. */
  LUMEN_ERROR_SNAPSHOT_VERSION = 10,
  /** A file could not be opened, read, written, flushed or renamed. */
  LUMEN_ERROR_IO = 11,
  /* The session stores' statuses (see "Session stores"): since 0.3. */
  /** A store holds no value under the key (never saved, removed, or expired). */
  LUMEN_ERROR_NOT_FOUND = 12,
  /** A save's expected version is not the stored one: another writer saved first. */
  LUMEN_ERROR_VERSION_CONFLICT = 13,
  /** A store's server cannot be reached, or closed the connection during the call. */
  LUMEN_ERROR_UNAVAILABLE = 14,
  /** A store's server did not answer within the store's timeout. */
  LUMEN_ERROR_TIMEOUT = 15,
  /** The session holds tentative tokens (see "Tentative tokens"): commit them first. Since
   *  0.4. */
  LUMEN_ERROR_UNCOMMITTED_TOKENS = 16
} lumen_status;

/**
 * Returns a static, human-readable name for a lumen_status value ("LUMEN_OK", ...), or
 * "LUMEN_ERROR_UNKNOWN_STATUS" for any other value; never NULL. Thread-safe.
 */
LUMEN_API const char* lumen_status_string(int32_t status);

/**
 * Returns the message of the last failed call made by the calling thread, or "" if the
 * thread's last fallible call succeeded or it made none. The string is owned by lumen and
 * stays valid until the thread's next fallible call (lumen_status_string, the version calls
 * and the *_init and *_destroy functions leave it alone).
 */
LUMEN_API const char* lumen_last_error_message(void);

/* ------------------------------------------------------------------------------------------ */
/* Enumerations                                                                               */
/* ------------------------------------------------------------------------------------------ */

/** Layer families; docs/spec.md §2 gives each update rule. */
typedef enum lumen_family {
  LUMEN_FAMILY_LINEAR_ATTN = 1,     /* S += phi(k) v^T */
  LUMEN_FAMILY_RETENTION = 2,       /* S = gamma_h S + k v^T */
  LUMEN_FAMILY_SSD = 3,             /* S = exp(g) S + k v^T  (Mamba-2) */
  LUMEN_FAMILY_GLA = 4,             /* S = Diag(exp(g)) S + k v^T */
  LUMEN_FAMILY_DELTA_NET = 5,       /* delta rule */
  LUMEN_FAMILY_GATED_DELTA_NET = 6, /* scalar gate, then delta rule (Qwen3-Next) */
  LUMEN_FAMILY_KDA = 7              /* per-channel gate, then delta rule (Kimi Linear) */
} lumen_family;

/**
 * Returns a static name for a lumen_family value, as the bindings and fla spell it
 * ("linear_attn", "retention", "ssd", "gla", "delta_net", "gated_delta_net", "kda"), or
 * "unknown" for any other value; never NULL. Thread-safe. Since 0.2.
 */
LUMEN_API const char* lumen_family_string(int32_t family);

/** Feature map phi applied to q and k by linear_attn. */
typedef enum lumen_feature_map {
  LUMEN_FEATURE_MAP_IDENTITY = 0,
  LUMEN_FEATURE_MAP_ELU1 = 1, /* elu(x) + 1 */
  LUMEN_FEATURE_MAP_RELU = 2
} lumen_feature_map;

/** Element types of inputs, outputs and stored state. */
typedef enum lumen_dtype {
  LUMEN_DTYPE_FLOAT32 = 0,
  LUMEN_DTYPE_BFLOAT16 = 1,
  LUMEN_DTYPE_FLOAT16 = 2
} lumen_dtype;

/** Which memory a buffer lives in. */
typedef enum lumen_memory {
  LUMEN_MEMORY_HOST = 0,
  LUMEN_MEMORY_DEVICE = 1 /* memory of the engine's device: CUDA device memory for CUDA,
                             HIP device memory for ROCm */
} lumen_memory;

/** Backends an engine can run on. */
typedef enum lumen_backend {
  LUMEN_BACKEND_AUTO = 0, /* the best backend built, present and able to run the model:
                             CUDA, then ROCm, then the CPU */
  LUMEN_BACKEND_CPU = 1,
  LUMEN_BACKEND_CUDA = 2, /* NVIDIA GPUs of compute capability 8.0 or newer */
  LUMEN_BACKEND_ROCM = 3  /* AMD GPUs of the targets the library was built for (by default
                             gfx90a, gfx908, gfx1030), through the HIP 5 runtime */
} lumen_backend;

/**
 * Returns a static name for a lumen_backend value ("AUTO", "CPU", "CUDA", "ROCM"), or
 * "UNKNOWN" for any other value; never NULL. Thread-safe.
 */
LUMEN_API const char* lumen_backend_string(int32_t backend);

/**
 * Per-layer parameter arrays (see lumen_model_builder_set_param). C below is a convolution's
 * channel count: H * K for the q and k parts, HV * V for the v part.
 */
typedef enum lumen_param {
  /** [HV], needed with gate_raw (gated_delta_net, kda, ssd): g = -exp(A_log[h]) * dt, where
   *  dt = softplus(g_raw + dt_bias); with gate_lower_bound, g = gate_lower_bound *
   *  sigmoid(exp(A_log[h]) * (g_raw + dt_bias)). */
  LUMEN_PARAM_A_LOG = 0,
  /** [HV] for gated_delta_net and ssd, [HV * K] for kda; needed with gate_raw. */
  LUMEN_PARAM_DT_BIAS = 1,
  /** [HV]: retention decays gamma_h in (0, 1); default 1 - 2^(-5-h). */
  LUMEN_PARAM_DECAY = 2,
  /* The convolution's parameters (LUMEN_PARAM_CONV_*) and D: since 0.2. */
  /** [H * K, W] with conv_size = W > 0, needed: the depthwise causal convolution of q
   *  (PyTorch's Conv1d(C, C, W, groups=C) weight [C, 1, W] without its middle axis; w[c, W-1]
   *  weighs the current token). */
  LUMEN_PARAM_CONV_Q_WEIGHT = 3,
  /** [H * K, W] with conv_size > 0, needed: the convolution of k. */
  LUMEN_PARAM_CONV_K_WEIGHT = 4,
  /** [HV * V, W] with conv_size > 0, needed: the convolution of v (Mamba-2's x). */
  LUMEN_PARAM_CONV_V_WEIGHT = 5,
  /** [H * K] with conv_size > 0, optional (default 0): the bias of q's convolution. */
  LUMEN_PARAM_CONV_Q_BIAS = 6,
  /** [H * K] with conv_size > 0, optional (default 0): the bias of k's convolution. */
  LUMEN_PARAM_CONV_K_BIAS = 7,
  /** [HV * V] with conv_size > 0, optional (default 0): the bias of v's convolution. */
  LUMEN_PARAM_CONV_V_BIAS = 8,
  /** [HV], ssd with gate_raw only, optional: Mamba-2's skip, o_t += D[h] * x_t, where x_t is
   *  the value input after the convolution (before the dt scaling). */
  LUMEN_PARAM_D = 9
} lumen_param;

/** The parts of a layer's state. */
typedef enum lumen_state_part {
  LUMEN_STATE_MATRIX = 0,     /* S, [HV, K, V] */
  LUMEN_STATE_NORMALIZER = 1, /* z, [HV, K]; linear_attn with normalize only */
  /* Since 0.2, the convolution windows, conv_size = W > 0 only: the last W-1 raw inputs,
   * oldest first, per channel (causal-conv1d's and vLLM's layout); zero before the session's
   * first token. */
  LUMEN_STATE_CONV_Q = 2,     /* [H * K, W-1] */
  LUMEN_STATE_CONV_K = 3,     /* [H * K, W-1] */
  LUMEN_STATE_CONV_V = 4      /* [HV * V, W-1] */
} lumen_state_part;

/** The layouts lumen_session_read_state_as and lumen_session_write_state_as take. Since 0.4. */
typedef enum lumen_state_layout {
  /** lumen's canonical layout (lumen_session_read_state's): the matrix [HV, K, V], the
   *  normalizer [HV, K], a conv window [C, W-1] holding the last W-1 inputs, oldest first. */
  LUMEN_LAYOUT_LUMEN = 0,
  /** flash-linear-attention's layer caches: the matrix V-first, [HV, V, K] (fla's
   *  state_v_first=True, its layers' choice); the normalizer [HV, K]; a conv window [C, W], the
   *  last W inputs oldest first, as fla's ShortConvolution keeps it, whose oldest column
   *  (column 0) fla drops before the next token reads the window. lumen does not keep that
   *  column: reading writes 0 there, writing ignores it. */
  LUMEN_LAYOUT_FLA = 1
} lumen_state_layout;

/** The activation after a layer's short convolution. Since 0.2. */
typedef enum lumen_conv_activation {
  LUMEN_CONV_ACTIVATION_SILU = 0, /* x * sigmoid(x): fla's and the models' default */
  LUMEN_CONV_ACTIVATION_NONE = 1
} lumen_conv_activation;

/* ------------------------------------------------------------------------------------------ */
/* Model                                                                                      */
/* ------------------------------------------------------------------------------------------ */

typedef struct lumen_model_builder lumen_model_builder;
typedef struct lumen_model lumen_model;

/**
 * Description of one layer. Fill with lumen_layer_options_init (or a preset below), then set
 * what you need.
 *
 * Inside a layer, each token's inputs go through, in order: the short convolution and its
 * activation (conv_size > 0) on the raw q, k and v; then phi (linear_attn), qk_l2norm, scale,
 * beta_sigmoid and the raw gate. With gate_raw on ssd (Mamba-2: q = C, k = B, v = x, H its
 * groups, HV its heads, K its d_state, V its headdim) g is the raw dt: dt = softplus(g +
 * dt_bias), the decay is exp(-exp(A_log) * dt), the write is k (x * dt)^T, and with the D
 * parameter o_t += D[h] * x_t. Mamba-2's z gate and output norm stay outside the layer.
 */
typedef struct lumen_layer_options {
  uint32_t struct_size;   /* sizeof(lumen_layer_options); set by init */
  int32_t family;         /* lumen_family; required */
  int32_t num_heads;      /* H, query/key heads; required, > 0 */
  int32_t num_value_heads;/* HV, value heads; 0 means H; HV % H == 0 */
  int32_t key_dim;        /* K; required, > 0 */
  int32_t value_dim;      /* V; required, > 0 */
  float scale;            /* multiplies q; 0 means the default K^-0.5 (Mamba-2 uses 1) */
  int32_t feature_map;    /* lumen_feature_map; linear_attn only */
  int32_t normalize;      /* 0/1; linear_attn only: keep z and divide by q.z + eps */
  float normalize_eps;    /* eps of normalize; 0 means 1e-6. fla's linear attention adds
                             1e-10: set that to reproduce its outputs (docs/spec.md §2) */
  int32_t qk_l2norm;      /* 0/1: L2-normalise q and k inside the layer (before phi and scale) */
  int32_t beta_sigmoid;   /* 0/1: beta arrives as a logit (delta family only) */
  int32_t gate_raw;       /* 0/1: g arrives raw; needs A_log and dt_bias (gated_delta_net, kda,
                             ssd) */
  int32_t state_dtype;    /* lumen_dtype of the stored state: FLOAT32 (default) or BFLOAT16 */
  /* Since 0.2 (0.1.0's struct ends here: its layers have no convolution). */
  int32_t conv_size;      /* W, 0 (none) to 64: a depthwise causal convolution of width W over
                             each of q, k and v, with weights LUMEN_PARAM_CONV_*_WEIGHT and a
                             window of the last W-1 inputs in the session (LUMEN_STATE_CONV_*) */
  int32_t conv_activation;/* lumen_conv_activation after the convolution; default SILU */
  /* Since 0.4 (struct_size tells whether a caller has them): fla's layer options. */
  int32_t allow_neg_eigval;/* 0/1, delta family only: beta may lie in [0, 2], so the state's
                             transition may have negative eigenvalues (fla's allow_neg_eigval);
                             with beta_sigmoid beta = 2 * sigmoid(logit) */
  float gate_lower_bound; /* 0 (default: the raw gate above) or a finite value < 0, with
                             gate_raw on gated_delta_net and kda: the lower-bounded gate
                             g = gate_lower_bound * sigmoid(exp(A_log) * (g_raw + dt_bias)),
                             in (gate_lower_bound, 0) (fla's lower_bound, as with safe_gate;
                             fla's form without A_log is A_log = 0) */
} lumen_layer_options;

/** Fills *options with defaults (everything 0 except struct_size and state_dtype = FLOAT32;
 *  so no convolution, and SILU should one be added). NULL is a no-op. */
LUMEN_API void lumen_layer_options_init(lumen_layer_options* options);

/**
 * Presets: the layer of a published model, dims and options as in its public config, so that
 * one call describes it. Each fills *options as lumen_layer_options_init does, then sets the
 * fields below; every field may still be changed before add_layer. The layer's parameters
 * (A_log, dt_bias, conv weights and biases, D) come from the checkpoint through
 * lumen_model_builder_set_param. NULL is a no-op. Thread-safe. Since 0.2.
 */

/**
 * Qwen3-Next-80B-A3B's Gated DeltaNet layer: gated_delta_net, H = 16 (linear_num_key_heads),
 * HV = 32 (linear_num_value_heads), K = V = 128 (linear_key_head_dim, linear_value_head_dim),
 * conv_size 4 (linear_conv_kernel_dim) with SILU and no bias, qk_l2norm, beta_sigmoid,
 * gate_raw (A_log [HV], dt_bias [HV]); scale K^-0.5.
 */
LUMEN_API void lumen_layer_options_init_qwen3_next_gated_delta_net(lumen_layer_options* options);

/**
 * Kimi-Linear-48B-A3B's KDA layer: kda, H = HV = 32 (linear_attn_config.num_heads), K = V =
 * 128 (head_dim), conv_size 4 (short_conv_kernel_size) with SILU and no bias, qk_l2norm,
 * beta_sigmoid, gate_raw (A_log [HV], dt_bias [HV * K]); scale K^-0.5.
 */
LUMEN_API void lumen_layer_options_init_kimi_linear_kda(lumen_layer_options* options);

/**
 * Mamba-2 2.7B's layer on ssd: d_model 2560, expand 2, headdim 64, so HV = 80 heads of V = 64;
 * H = 1 (ngroups), K = 128 (d_state), conv_size 4 (d_conv) with SILU and biases, gate_raw
 * (A_log [HV], dt_bias [HV]; D [HV] optional), scale 1. Inputs: q = C, k = B, v = x, g = dt.
 */
LUMEN_API void lumen_layer_options_init_mamba2(lumen_layer_options* options);

/**
 * Creates an empty model builder. The caller owns *out and frees it with
 * lumen_model_builder_destroy. Returns LUMEN_ERROR_INVALID_ARGUMENT if out is NULL.
 * Builders are not thread-safe.
 */
LUMEN_API lumen_status lumen_model_builder_create(lumen_model_builder** out);

/** Frees a builder (models built from it stay valid). NULL is a no-op. */
LUMEN_API void lumen_model_builder_destroy(lumen_model_builder* builder);

/**
 * Appends a layer. The options are validated now: a known family; H, K, V >= 1 and HV a
 * multiple of H (dims up to 65536 heads and 16384 per head); scale and normalize_eps finite
 * and >= 0; 0/1 flags; and no option the family does not take (feature_map and normalize
 * are linear_attn's, beta_sigmoid and allow_neg_eigval the delta family's, gate_raw
 * gated_delta_net's, kda's and ssd's, gate_lower_bound (finite, <= 0) gated_delta_net's and
 * kda's with gate_raw; state_dtype FLOAT32 or BFLOAT16); conv_size in [0, 64] and a known
 * conv_activation. On success the new layer's index is written to
 * *out_layer if it is not NULL. Returns LUMEN_ERROR_INVALID_ARGUMENT with a message naming
 * the problem.
 */
LUMEN_API lumen_status lumen_model_builder_add_layer(lumen_model_builder* builder,
                                                     const lumen_layer_options* options,
                                                     int32_t* out_layer);

/**
 * Sets parameter `param` of layer `layer` to a copy of values[0..count) (setting it again
 * replaces it). count must be the parameter's size (see lumen_param). Returns
 * LUMEN_ERROR_OUT_OF_RANGE for a bad layer index and LUMEN_ERROR_INVALID_ARGUMENT for a
 * parameter the layer does not take (e.g. conv weights without conv_size, D but not ssd with
 * gate_raw), a wrong count or values that are not finite (decays must lie in (0, 1)).
 */
LUMEN_API lumen_status lumen_model_builder_set_param(lumen_model_builder* builder, int32_t layer,
                                                     int32_t param, const float* values,
                                                     int64_t count);

/**
 * Builds an immutable model from the builder's layers, checking that every layer has the
 * parameters it needs (A_log and dt_bias with gate_raw; the three conv weights with
 * conv_size > 0; LUMEN_ERROR_INVALID_ARGUMENT names the layer and what is missing), that
 * there are 1 to 1048576 (2^20) layers, and that a session's state fits in 2^62 bytes both as
 * stored and at 4 bytes per element (an fp32 snapshot), so that every size the library
 * derives from the model fits in int64_t. Returns LUMEN_ERROR_INVALID_ARGUMENT with a message
 * otherwise. The caller owns *out (free with
 * lumen_model_destroy). The builder is left unchanged and may build again.
 */
LUMEN_API lumen_status lumen_model_builder_build(const lumen_model_builder* builder,
                                                 lumen_model** out);

/** Releases the caller's reference; engines and sessions keep their own. NULL is a no-op. */
LUMEN_API void lumen_model_destroy(lumen_model* model);

/** Writes the number of layers to *out. Thread-safe. */
LUMEN_API lumen_status lumen_model_num_layers(const lumen_model* model, int32_t* out);

/**
 * Writes a copy of layer `layer`'s options (defaults resolved: HV, scale, eps) to *out.
 * Set out->struct_size first (lumen_layer_options_init does): the call writes the fields that
 * lie wholly inside that size, none beyond this header's sizeof, and sets struct_size to the
 * bytes written. A struct_size below 0.1.0's struct or above 4096 is taken as 0.1.0's struct
 * (whose callers did not set it).
 */
LUMEN_API lumen_status lumen_model_layer_options(const lumen_model* model, int32_t layer,
                                                 lumen_layer_options* out);

/**
 * Writes the element count of one part (lumen_state_part) of layer `layer`'s state in the
 * canonical fp32 layout: HV*K*V for the matrix; HV*K for the normalizer, 0 when the layer
 * keeps none; H*K*(W-1), H*K*(W-1) and HV*V*(W-1) for the conv windows, 0 without a
 * convolution. An unknown part is LUMEN_ERROR_INVALID_ARGUMENT.
 */
LUMEN_API lumen_status lumen_model_state_count(const lumen_model* model, int32_t layer,
                                               int32_t part, int64_t* out);

/**
 * lumen_model_state_count in a lumen_state_layout: the part's element count in that layout
 * (in fla's, a conv window holds W columns: H*K*W, H*K*W and HV*V*W, 0 without a
 * convolution). An unknown part or layout is LUMEN_ERROR_INVALID_ARGUMENT. Since 0.4.
 */
LUMEN_API lumen_status lumen_model_state_count_as(const lumen_model* model, int32_t layer,
                                                  int32_t part, int32_t layout, int64_t* out);

/**
 * Writes the bytes a session keeps for layer `layer` (every part, in its stored dtype), or,
 * if layer is -1, the bytes of a session's state for the whole model: the layers' bytes plus
 * the padding that aligns each layer to 64 bytes. Independent of how many tokens the session
 * has consumed. A CPU engine allocates a little more beside it: for each delta-rule layer
 * with fp32 state, 64 bytes and (K + V) floats per value head, where a step holds back its
 * last write so that the next one passes over the state once (never visible in the state).
 */
LUMEN_API lumen_status lumen_model_state_bytes(const lumen_model* model, int32_t layer,
                                               int64_t* out);

/* ------------------------------------------------------------------------------------------ */
/* Engine                                                                                     */
/* ------------------------------------------------------------------------------------------ */

typedef struct lumen_engine lumen_engine;

/** Engine settings. Fill with lumen_engine_options_init. */
typedef struct lumen_engine_options {
  uint32_t struct_size; /* sizeof(lumen_engine_options); set by init */
  int32_t backend;      /* lumen_backend; default AUTO */
  int32_t num_threads;  /* CPU worker threads including the caller, at most 1024;
                           0 = one per hardware thread */
  int32_t device;       /* GPU ordinal for GPU backends; default 0 */
  /* Since 0.3 (struct_size tells whether a caller has them): the session memory budget, see
   * "Session memory budget" below. */
  int64_t memory_budget_bytes;  /* bytes of session state kept resident; 0 (default): no limit */
  const char* spill_directory;  /* UTF-8 directory for evicted sessions (must exist), copied
                                   at creation; NULL (default): a private directory the
                                   engine makes under $TMPDIR (or /tmp) and removes */
} lumen_engine_options;

/** Fills *options with defaults. */
LUMEN_API void lumen_engine_options_init(lumen_engine_options* options);

/**
 * Creates an engine that runs `model` on the chosen backend. options may be NULL (defaults).
 * The engine keeps a reference to the model. Returns LUMEN_ERROR_UNSUPPORTED when the backend
 * was not built, no usable device is present (see "GPU engines" above), or the backend does
 * not run one of the model's layers. Free with lumen_engine_destroy.
 */
LUMEN_API lumen_status lumen_engine_create(const lumen_model* model,
                                           const lumen_engine_options* options,
                                           lumen_engine** out);

/** Releases the caller's reference; sessions keep their own. NULL is a no-op. */
LUMEN_API void lumen_engine_destroy(lumen_engine* engine);

/**
 * Writes the backend actually used (a lumen_backend value, never AUTO) to *out. (Before 0.2
 * *out was declared lumen_backend; the same 32 bits, now int32_t like every enumeration that
 * crosses the ABI.)
 */
LUMEN_API lumen_status lumen_engine_backend(const lumen_engine* engine, int32_t* out);

/**
 * Writes the number of threads the engine's layer calls use, the caller's included, to *out
 * (num_threads = 0 resolved to the hardware's count).
 */
LUMEN_API lumen_status lumen_engine_num_threads(const lumen_engine* engine, int32_t* out);

/**
 * The largest layer calls lumen_engine_reserve makes an engine ready for. Fill with
 * lumen_reservation_init. Since 0.2.
 */
typedef struct lumen_reservation {
  uint32_t struct_size;  /* sizeof(lumen_reservation); set by init */
  int32_t max_sessions;  /* sessions in one layer call: n of lumen_engine_step_batch and
                            lumen_engine_prefill_varlen, 1 for the session calls; default 1 */
  int32_t max_tokens;    /* tokens in one layer call, its sessions together (a step takes one
                            per session); default 1 */
} lumen_reservation;

/** Fills *reservation with defaults (one session, one token). Since 0.2. */
LUMEN_API void lumen_reservation_init(lumen_reservation* reservation);

/**
 * Makes the engine ready, now, for every layer call of at most reservation->max_sessions
 * sessions and reservation->max_tokens tokens: any layer of the model, step or prefill,
 * every input and output dtype, buffers in device memory. Since 0.2.
 *
 * GPU engines: grows the engine's device scratch (see "GPU engines") to what the largest such
 * call needs, so that afterwards no call within the reservation whose buffers are all
 * LUMEN_MEMORY_DEVICE allocates or synchronizes, also while its stream is being captured
 * into a CUDA graph. Growing waits for the engine's earlier asynchronous calls that use the
 * scratch (an input error of theirs is not reported here). The scratch never shrinks while
 * the engine lives: reserving less than it holds changes nothing. Calls with host buffers
 * copy through the scratch too and may still grow it; they synchronize anyway.
 *
 * CPU engine: checks the arguments and changes nothing (its layer calls keep their scratch
 * in host memory and need no reservation).
 *
 * Returns LUMEN_ERROR_INVALID_ARGUMENT for a NULL reservation, a bad struct_size, max_sessions
 * or max_tokens below 1, or max_sessions above 2^20 (1048576); LUMEN_ERROR_OUT_OF_MEMORY,
 * with the bytes asked for, when the device cannot hold the scratch (the engine may then hold
 * none: lumen_engine_scratch_bytes says); LUMEN_ERROR_BACKEND for a failure of the GPU
 * runtime. Thread-safe: other threads may use the engine meanwhile (their calls wait for it),
 * and other threads may be capturing streams (see "GPU engines").
 */
LUMEN_API lumen_status lumen_engine_reserve(lumen_engine* engine,
                                            const lumen_reservation* reservation);

/* ------------------------------------------------------------------------------------------ */
/* Session memory budget (since 0.3)                                                          */
/*                                                                                            */
/* An engine created with lumen_engine_options.memory_budget_bytes > 0 keeps at most that     */
/* many bytes of session state resident (host memory for the CPU engine): each session counts */
/* lumen_model_state_bytes(model, -1, ...) bytes; the engine's one spare block for restores   */
/* and the CPU's held writes are not counted. When a session must become resident (created,   */
/* or called while evicted) and the budget is full, the least recently used sessions that no  */
/* call is using are evicted: each is written, as an fp32 snapshot with its checksum, to a    */
/* file in the spill directory, and its state memory is freed. Any call on an evicted session */
/* brings it back first, bit for bit, transparently (counted in lumen_engine_stats); so does  */
/* lumen_session_prefetch, in the background. Eviction never loses data: a file that cannot   */
/* be written (a full disk, a missing or read-only directory) leaves the session resident,    */
/* and the call that needed the room fails with LUMEN_ERROR_IO saying why; a call that needs  */
/* more sessions resident at once than the budget holds (or whose other sessions are in use   */
/* by other threads) fails with LUMEN_ERROR_OUT_OF_MEMORY. A failed call changes no session.  */
/* Evictions and reloads take turns within an engine. Supported by the CPU engine; a GPU      */
/* engine with a budget is LUMEN_ERROR_UNSUPPORTED for now. A budget below one session's      */
/* state is LUMEN_ERROR_INVALID_ARGUMENT.                                                     */
/* ------------------------------------------------------------------------------------------ */

/**
 * Where an engine's session state is and how much has moved. Sizes count state bytes as the
 * budget does. An engine without a budget counts nothing: every field is 0 (all its sessions
 * are resident). Set struct_size (lumen_memory_stats_init does) before lumen_engine_stats.
 * Since 0.3.
 */
typedef struct lumen_memory_stats {
  uint32_t struct_size;          /* set by init */
  int64_t memory_budget_bytes;   /* the budget; 0: none */
  int64_t resident_sessions;     /* sessions in the engine's memory (device for a GPU engine) */
  int64_t resident_bytes;
  int64_t host_sessions;         /* sessions in the pinned host tier of a GPU engine; 0 on CPU */
  int64_t host_bytes;
  int64_t spilled_sessions;      /* sessions in the spill directory */
  int64_t spilled_bytes;         /* their files' bytes */
  int64_t evictions;             /* sessions evicted so far */
  int64_t reloads;               /* sessions brought back by a call on them */
  int64_t prefetches;            /* sessions brought back by lumen_session_prefetch */
  int64_t bytes_evicted;         /* bytes written to the spill directory so far */
  int64_t bytes_reloaded;        /* bytes read back from it so far */
} lumen_memory_stats;

/** Fills *stats with zeros and struct_size. NULL is a no-op. Since 0.3. */
LUMEN_API void lumen_memory_stats_init(lumen_memory_stats* stats);

/**
 * Writes the engine's session tiers and traffic to *out (see lumen_memory_stats). The
 * caller's struct_size says how many bytes may be written (at least the 0.3 struct, at most
 * 4096, else LUMEN_ERROR_INVALID_ARGUMENT): the call writes the fields that lie wholly inside
 * it, none beyond this header's sizeof, and sets struct_size to the bytes written.
 * Thread-safe. Since 0.3.
 */
LUMEN_API lumen_status lumen_engine_stats(const lumen_engine* engine, lumen_memory_stats* out);

/* ------------------------------------------------------------------------------------------ */
/* Sessions                                                                                   */
/* ------------------------------------------------------------------------------------------ */

typedef struct lumen_session lumen_session;

/**
 * Creates a session of the engine's model with every state zero and every token count 0.
 * The session keeps a reference to the engine. Free with lumen_session_destroy.
 */
LUMEN_API lumen_status lumen_session_create(lumen_engine* engine, lumen_session** out);

/** Frees a session and its state. NULL is a no-op. */
LUMEN_API void lumen_session_destroy(lumen_session* session);

/** Creates *out as a deep copy of `session` (state and token counts) on the same engine. */
LUMEN_API lumen_status lumen_session_fork(const lumen_session* session, lumen_session** out);

/** Sets every state to zero and every token count to 0. */
LUMEN_API lumen_status lumen_session_reset(lumen_session* session);

/**
 * Starts bringing an evicted session back into the engine's memory in the background (see
 * "Session memory budget"), so that the next call on it does not wait for the spill file;
 * returns at once. A session that is resident, or an engine without a budget, makes it a
 * no-op. If there is no room without evicting a session in use, or the reload fails, the
 * session stays evicted and the next call on it reloads it (and reports any error). The
 * session may be used, or destroyed, meanwhile. Since 0.3.
 */
LUMEN_API lumen_status lumen_session_prefetch(lumen_session* session);

/**
 * Writes 1 to *out if the session's state is in the engine's memory, 0 if it is evicted
 * (see "Session memory budget"). Since 0.3.
 */
LUMEN_API lumen_status lumen_session_resident(const lumen_session* session, int32_t* out);

/**
 * Writes a new reference to the session's model to *out (free it with lumen_model_destroy),
 * e.g. to size the buffers of lumen_session_read_state.
 */
LUMEN_API lumen_status lumen_session_model(const lumen_session* session, lumen_model** out);

/**
 * Writes how many tokens layer `layer` of the session has consumed to *out. A layer consumes
 * at most 2^62 tokens (4611686018427387904; at a billion tokens a second, 146 years): a
 * layer call that would take a session's layer past it fails with
 * LUMEN_ERROR_INVALID_ARGUMENT before anything changes (reset or restore the session to go
 * on), and a snapshot whose token count exceeds it is LUMEN_ERROR_CORRUPT_SNAPSHOT. On GPU
 * engines the count includes the calls over device buffers enqueued so far; those that fail
 * their input check are taken back out when the error is reported (see "GPU engines").
 */
LUMEN_API lumen_status lumen_session_tokens(const lumen_session* session, int32_t layer,
                                            int64_t* out);

/**
 * Copies one part (lumen_state_part) of layer `layer`'s state into out[0..count), fp32,
 * canonical layout ([HV, K, V], [HV, K] or a conv window [C, W-1]). count must equal
 * lumen_model_state_count; a part the layer does not keep is LUMEN_ERROR_INVALID_ARGUMENT.
 * Host memory.
 */
LUMEN_API lumen_status lumen_session_read_state(const lumen_session* session, int32_t layer,
                                                int32_t part, float* out, int64_t count);

/**
 * Overwrites one part of layer `layer`'s state from values[0..count) (fp32, canonical layout;
 * e.g. a state exported from flash-linear-attention, or a conv window from causal-conv1d or
 * vLLM). Rounds to the stored dtype. The token
 * count is unchanged. Rejects non-finite values. Host memory.
 */
LUMEN_API lumen_status lumen_session_write_state(lumen_session* session, int32_t layer,
                                                 int32_t part, const float* values,
                                                 int64_t count);

/**
 * lumen_session_read_state in a lumen_state_layout: copies one part of layer `layer`'s state
 * into out[0..count), fp32. count must equal the part's element count in that layout (in
 * fla's: HV * V * K for the matrix, HV * K for the normalizer, C * W for a conv window). An
 * unknown layout, a wrong count or a part the layer does not keep is
 * LUMEN_ERROR_INVALID_ARGUMENT. Host memory. Since 0.4.
 */
LUMEN_API lumen_status lumen_session_read_state_as(const lumen_session* session, int32_t layer,
                                                   int32_t part, int32_t layout, float* out,
                                                   int64_t count);

/**
 * lumen_session_write_state in a lumen_state_layout: overwrites one part of layer `layer`'s
 * state from values[0..count) (fp32; count as for lumen_session_read_state_as). With
 * LUMEN_LAYOUT_FLA, one sequence's recurrent state ([HV, V, K]) and conv windows
 * ([C, W]) from an fla layer's cache go in as they are, and the conversation continues here.
 * Rounds to the stored dtype. The token count is unchanged. Rejects non-finite values (in
 * the ignored column too). Same errors as lumen_session_read_state_as; the session is
 * unchanged on any error. Host memory. Since 0.4.
 */
LUMEN_API lumen_status lumen_session_write_state_as(lumen_session* session, int32_t layer,
                                                    int32_t part, int32_t layout,
                                                    const float* values, int64_t count);

/* ------------------------------------------------------------------------------------------ */
/* Running layers                                                                             */
/* ------------------------------------------------------------------------------------------ */

/**
 * The per-token inputs of one layer call. Fill with lumen_layer_inputs_init. Each pointer
 * comes with its element count, checked against the call's shape. g is needed by ssd, gla,
 * gated_delta_net and kda; beta by the delta family; for a layer that does not take one,
 * the pointer must be NULL and its count 0 (anything else is LUMEN_ERROR_INVALID_ARGUMENT,
 * as it usually means a mixed-up model). memory other than what the engine's backend reads
 * (the CPU backend: HOST only) is LUMEN_ERROR_UNSUPPORTED. Host buffers are only read during
 * the call; device buffers until the call's work on its stream has run (see "GPU engines").
 * A struct_size of 0.1.0's struct (without `stream`) is accepted and means stream NULL.
 *
 * Values are checked before anything runs: NaN or infinity in any input, g > 0 as a log-decay
 * (any finite value with gate_raw), and beta outside [0, 1] ([0, 2] with allow_neg_eigval; any
 * finite logit with beta_sigmoid) fail the call with LUMEN_ERROR_INVALID_ARGUMENT, naming the
 * tensor, the token
 * (and, in a call of several sessions, which session's token), the head and the channel; no
 * session changes. On GPU engines a call over device buffers reports this later (see "GPU
 * engines").
 */
typedef struct lumen_layer_inputs {
  uint32_t struct_size; /* set by init */
  int32_t dtype;        /* lumen_dtype of q, k, v, g, beta; default FLOAT32 */
  int32_t memory;       /* lumen_memory of every buffer; default HOST */
  const void* q;    int64_t q_count;    /* [T, H, K] */
  const void* k;    int64_t k_count;    /* [T, H, K] */
  const void* v;    int64_t v_count;    /* [T, HV, V] */
  const void* g;    int64_t g_count;    /* [T, HV] or [T, HV, K] */
  const void* beta; int64_t beta_count; /* [T, HV] */
  /* Since 0.2 (struct_size tells whether a caller has it): the GPU stream that a call
   * over LUMEN_MEMORY_DEVICE buffers is enqueued on, a cudaStream_t for CUDA engines and a
   * hipStream_t for ROCm engines; NULL is the default stream (CUDA's legacy default stream).
   * Ignored by the CPU backend and by calls with host buffers. */
  void* stream;
} lumen_layer_inputs;

/** Fills *inputs with defaults (no buffers, FLOAT32, HOST, stream NULL). */
LUMEN_API void lumen_layer_inputs_init(lumen_layer_inputs* inputs);

/** Where a layer call writes its output o, [T, HV, V]. Fill with lumen_layer_output_init. */
typedef struct lumen_layer_output {
  uint32_t struct_size; /* set by init */
  int32_t dtype;        /* lumen_dtype of o: FLOAT32 (default) or the inputs' dtype */
  int32_t memory;       /* lumen_memory of o; default HOST */
  void* o;              /* written only on success */
  int64_t o_count;
} lumen_layer_output;

/** Fills *output with defaults (no buffer, FLOAT32, HOST). */
LUMEN_API void lumen_layer_output_init(lumen_layer_output* output);

/**
 * Advances layer `layer` of one session by one token (T = 1) in the recurrent form.
 * Returns LUMEN_ERROR_OUT_OF_RANGE for a bad layer and LUMEN_ERROR_INVALID_ARGUMENT for
 * missing or wrongly sized buffers, input values outside their domain (lumen_layer_inputs)
 * or a layer at its 2^62 tokens (lumen_session_tokens); the session is unchanged on any
 * error.
 */
LUMEN_API lumen_status lumen_session_step(lumen_session* session, int32_t layer,
                                          const lumen_layer_inputs* inputs,
                                          lumen_layer_output* output);

/**
 * Advances layer `layer` of one session by num_tokens tokens (T = num_tokens >= 1) in the
 * chunkwise form. Equal, within the bounds of docs/spec.md §4, to num_tokens steps, whatever
 * the split of a sequence into prefill calls. Same errors as lumen_session_step; the session
 * is unchanged on any error.
 */
LUMEN_API lumen_status lumen_session_prefill(lumen_session* session, int32_t layer,
                                             int32_t num_tokens,
                                             const lumen_layer_inputs* inputs,
                                             lumen_layer_output* output);

/**
 * Advances layer `layer` of n distinct sessions of this engine by one token each, in one
 * call. Inputs and output stack a leading n: q [n, H, K], ..., o [n, HV, V]. n = 0 is a
 * no-op. Returns the errors of lumen_session_step, LUMEN_ERROR_MODEL_MISMATCH if a session
 * belongs to another engine and LUMEN_ERROR_INVALID_ARGUMENT if a session appears twice; no
 * session changes on any error.
 */
LUMEN_API lumen_status lumen_engine_step_batch(lumen_engine* engine, int32_t layer,
                                               lumen_session* const* sessions, int32_t n,
                                               const lumen_layer_inputs* inputs,
                                               lumen_layer_output* output);

/**
 * Advances layer `layer` of n distinct sessions by variable numbers of tokens in one call.
 * Session i consumes tokens cu_seqlens[i] .. cu_seqlens[i+1] of the concatenated inputs
 * (cu_seqlens has n + 1 entries, starts at 0, never decreases; host memory). A session may
 * get 0 tokens. Same errors and guarantees as lumen_engine_step_batch.
 */
LUMEN_API lumen_status lumen_engine_prefill_varlen(lumen_engine* engine, int32_t layer,
                                                   lumen_session* const* sessions, int32_t n,
                                                   const int32_t* cu_seqlens,
                                                   const lumen_layer_inputs* inputs,
                                                   lumen_layer_output* output);

/* ------------------------------------------------------------------------------------------ */
/* Tentative tokens (since 0.4)                                                               */
/*                                                                                            */
/* For speculative decoding: run a few draft tokens through a layer, read every token's       */
/* output, then keep the state after the first m of them (commit). A recurrent state cannot   */
/* be truncated, so a tentative call writes no state at all: it reads the session's state and */
/* conv windows, computes every token's output, and keeps a copy of the call's inputs with    */
/* the session. lumen_session_commit(session, m) then replays the first m tokens through each */
/* layer that ran them, in the step's arithmetic, and drops the rest.                         */
/*                                                                                            */
/*   - Exact. The outputs of a tentative call are bitwise those of stepping its tokens one by */
/*     one with lumen_session_step; after commit(m) the session's state, conv windows and     */
/*     token counts are bitwise those of stepping the first m. commit(0) leaves the session   */
/*     bitwise as it was.                                                                     */
/*   - Cost. A tentative call of n tokens reads the state once and runs the n tokens'         */
/*     arithmetic on a copy of each head in cache, writing no state; a commit of m tokens     */
/*     replays them in place, reading and writing the state once with m tokens' arithmetic.   */
/*     The session keeps the inputs of n tokens per layer (q, k, v, g, beta in their dtype).  */
/*   - One count per session. Every layer's tentative call on a session takes the same n,     */
/*     1 to LUMEN_MAX_TENTATIVE_TOKENS, and a layer takes tentative tokens once until commit. */
/*     A commit replays every layer that ran them, and no other.                              */
/*   - Until commit, every other call that reads or changes the session's state (step,        */
/*     prefill, the batched calls, reset, fork, read_state, write_state, snapshot, restore,   */
/*     save, load, the stores' save and load, rewind) fails with                              */
/*     LUMEN_ERROR_UNCOMMITTED_TOKENS and changes nothing; lumen_session_tokens counts        */
/*     committed tokens only. Snapshots therefore never contain tentative tokens.             */
/*   - Memory budget. A session holding tentative tokens may be evicted like any other: the   */
/*     kept inputs stay in memory beside it, and the commit reloads it.                       */
/*   - Backends. The CPU backend runs every layer but one with a bfloat16 state and a short   */
/*     convolution (LUMEN_ERROR_UNSUPPORTED). GPU engines run the layers of their register    */
/*     step kernel (fp32 state, key_dim 128, value_dim a multiple of 32, no normaliser, the   */
/*     identity feature map: the published models' layers), over host or device buffers, and */
/*     answer LUMEN_ERROR_UNSUPPORTED for other layers.                                       */
/* ------------------------------------------------------------------------------------------ */

/** The most tokens a tentative call runs per session. Since 0.4. */
#define LUMEN_MAX_TENTATIVE_TOKENS 16

/**
 * Runs num_tokens tokens (1 to LUMEN_MAX_TENTATIVE_TOKENS) of layer `layer` of one session
 * tentatively: writes every token's output, [num_tokens, HV, V], leaves the session's state
 * and token counts unchanged, and keeps a copy of the inputs (the caller's buffers may be
 * reused at once) for lumen_session_commit. Inputs are shaped as for lumen_session_prefill.
 * Returns the errors of lumen_session_step; LUMEN_ERROR_INVALID_ARGUMENT for num_tokens
 * outside [1, LUMEN_MAX_TENTATIVE_TOKENS] or other than the session's other layers' tentative
 * count; LUMEN_ERROR_UNCOMMITTED_TOKENS when the layer already ran tentative tokens that
 * are not committed yet; LUMEN_ERROR_UNSUPPORTED for a layer its engine does not run
 * tentatively (see "Tentative tokens"). The session is unchanged on any error. Since 0.4.
 */
LUMEN_API lumen_status lumen_session_step_tentative(lumen_session* session, int32_t layer,
                                                    int32_t num_tokens,
                                                    const lumen_layer_inputs* inputs,
                                                    lumen_layer_output* output);

/**
 * lumen_session_step_tentative for n distinct sessions in one call, each with its own number
 * of tokens: session i runs tokens cu_seqlens[i] .. cu_seqlens[i+1] of the concatenated
 * inputs (cu_seqlens has n + 1 entries, starts at 0; host memory), 1 to
 * LUMEN_MAX_TENTATIVE_TOKENS each. n = 0 is a no-op. Same errors as
 * lumen_session_step_tentative and lumen_engine_step_batch; no session changes on any error.
 * Since 0.4.
 */
LUMEN_API lumen_status lumen_engine_step_tentative_batch(lumen_engine* engine, int32_t layer,
                                                         lumen_session* const* sessions,
                                                         int32_t n, const int32_t* cu_seqlens,
                                                         const lumen_layer_inputs* inputs,
                                                         lumen_layer_output* output);

/**
 * Writes the session's tentative token count to *out: the n of its tentative calls since the
 * last commit, 0 when it holds none. Since 0.4.
 */
LUMEN_API lumen_status lumen_session_tentative_tokens(const lumen_session* session,
                                                      int32_t* out);

/**
 * Accepts the first num_accepted (0 <= num_accepted <= n) of the session's n tentative
 * tokens: every layer that ran them consumes those tokens as steps would, and the rest are
 * dropped. num_accepted = 0 rejects them all and leaves the session as it was. Afterwards the
 * session holds no tentative tokens. Returns LUMEN_ERROR_INVALID_ARGUMENT when the session
 * holds no tentative tokens (e.g. a second commit) or num_accepted is outside [0, n], changing
 * nothing. Should the replay run out of memory (LUMEN_ERROR_OUT_OF_MEMORY), the layers
 * replayed before it keep their tokens and the others keep theirs tentative: commit again
 * with the same num_accepted to finish. Since 0.4.
 */
LUMEN_API lumen_status lumen_session_commit(lumen_session* session, int32_t num_accepted);

/**
 * lumen_session_commit for n distinct sessions of this engine in one call, session i
 * accepting num_accepted[i] of its tentative tokens (host memory, n entries); each layer's
 * replay runs as one call over the sessions. n = 0 is a no-op. Same errors as
 * lumen_session_commit and lumen_engine_step_batch; on an argument error no session changes.
 * Since 0.4.
 */
LUMEN_API lumen_status lumen_engine_commit_batch(lumen_engine* engine,
                                                 lumen_session* const* sessions, int32_t n,
                                                 const int32_t* num_accepted);

/* ------------------------------------------------------------------------------------------ */
/* Rewind (since 0.4)                                                                         */
/*                                                                                            */
/* For agents that retry a tool call or edit the last turn: a session that keeps a rewind     */
/* depth r goes back j <= r tokens exactly (bitwise the state and token counts it had then).  */
/* Each layer keeps host copies of its state at one or two checkpoints and the inputs of      */
/* every token consumed since the older one; it takes a new checkpoint every r tokens. A      */
/* rewind copies a checkpoint back and replays fewer than 2r tokens through the step path.    */
/*                                                                                            */
/*   - Memory: about two copies of the session's state in host memory, plus the inputs        */
/*     (q, k, v, g, beta) of fewer than 2r tokens per layer. Cost per token stepped: a        */
/*     copy of its inputs, and every r tokens a copy of the layer's state.                    */
/*   - What is kept: tokens consumed by steps (lumen_session_step, lumen_engine_step_batch)   */
/*     and by commits of tentative tokens. A prefill of a layer, and reset, write_state,      */
/*     restore and load, start the history afresh: a layer can go back only over the steps    */
/*     since then. A fork keeps no history.                                                   */
/*   - CPU engines only, for now (others: LUMEN_ERROR_UNSUPPORTED).                           */
/* ------------------------------------------------------------------------------------------ */

/** The deepest rewind a session keeps. Since 0.4. */
#define LUMEN_MAX_REWIND_TOKENS 64

/**
 * Makes the session keep what it needs to go back up to `depth` tokens (0 to
 * LUMEN_MAX_REWIND_TOKENS; 0, the default, keeps nothing), and forgets what it kept before.
 * Returns LUMEN_ERROR_INVALID_ARGUMENT for a depth outside that range,
 * LUMEN_ERROR_UNSUPPORTED on engines other than the CPU's, and
 * LUMEN_ERROR_UNCOMMITTED_TOKENS while the session holds tentative tokens. Since 0.4.
 */
LUMEN_API lumen_status lumen_session_set_rewind_depth(lumen_session* session, int32_t depth);

/**
 * Writes to *out how many tokens the session can go back now: the fewest steps any layer has
 * kept since its history started, at most the depth (0 without a depth). Since 0.4.
 */
LUMEN_API lumen_status lumen_session_rewind_available(const lumen_session* session,
                                                      int32_t* out);

/**
 * Takes every layer of the session back num_tokens tokens (0 to
 * lumen_session_rewind_available): state, conv windows and token counts become bitwise what
 * they were then, and the tokens gone back over are forgotten. Returns
 * LUMEN_ERROR_INVALID_ARGUMENT for a session without a depth or num_tokens outside that
 * range, and LUMEN_ERROR_UNCOMMITTED_TOKENS while the session holds tentative tokens,
 * changing nothing. Since 0.4.
 */
LUMEN_API lumen_status lumen_session_rewind(lumen_session* session, int32_t num_tokens);

/* ------------------------------------------------------------------------------------------ */
/* Snapshots                                                                                  */
/*                                                                                            */
/* A snapshot holds a session's whole state and token counts in O(state) bytes, whatever the  */
/* length of its conversation, with the fingerprint of the model that wrote it and a checksum */
/* over every byte. The format is documented in docs/snapshot_format.md. A snapshot taken on  */
/* one backend restores on any other.                                                         */
/* ------------------------------------------------------------------------------------------ */

/** How a snapshot is written. Fill with lumen_snapshot_options_init. */
typedef struct lumen_snapshot_options {
  uint32_t struct_size; /* set by init */
  /** lumen_dtype of the stored state: FLOAT32 (default, exact) or BFLOAT16 (half the size,
   *  rounded to nearest even: relative error at most 2^-8 per element). */
  int32_t state_dtype;
} lumen_snapshot_options;

/** Fills *options with defaults (FLOAT32 state). */
LUMEN_API void lumen_snapshot_options_init(lumen_snapshot_options* options);

/**
 * Writes the size in bytes of the session's snapshot to *out. options may be NULL (defaults).
 * The size depends on the model and the options only, never on the tokens consumed.
 */
LUMEN_API lumen_status lumen_session_snapshot_size(const lumen_session* session,
                                                   const lumen_snapshot_options* options,
                                                   int64_t* out);

/**
 * Writes the session's snapshot into buffer[0..capacity) (host memory) and its size to
 * *out_size (may be NULL). Returns LUMEN_ERROR_BUFFER_TOO_SMALL, writing nothing, when
 * capacity is below lumen_session_snapshot_size. The session is only read.
 */
LUMEN_API lumen_status lumen_session_snapshot(const lumen_session* session,
                                              const lumen_snapshot_options* options,
                                              void* buffer, int64_t capacity,
                                              int64_t* out_size);

/**
 * Replaces the session's state and token counts with those of a snapshot (host memory,
 * only read), exactly as saved (an fp32 snapshot restores bit for bit, whatever values it
 * holds). All or nothing: on any error the session is exactly as before. The payload is
 * copied into a spare state block while its checksum is verified, then swapped in; the
 * engine keeps the swapped-out block for its next restore (one block per engine). Returns
 * LUMEN_ERROR_CORRUPT_SNAPSHOT for truncated or damaged bytes (or a token count above 2^62,
 * see lumen_session_tokens), LUMEN_ERROR_SNAPSHOT_VERSION for a newer format,
 * LUMEN_ERROR_MODEL_MISMATCH when the snapshot's model differs from the session's (the
 * message says which layer and what differs). Damage is reported before what the damaged
 * bytes say, except for a size that no snapshot of the session's model has: such bytes are
 * judged from their head alone (docs/snapshot_format.md, "Reading rules").
 */
LUMEN_API lumen_status lumen_session_restore(lumen_session* session, const void* data,
                                             int64_t size);

/**
 * Saves the session's snapshot to the file `path` (UTF-8) atomically and durably: the bytes
 * go to a temporary file in the same directory, which is flushed to disk and renamed over
 * `path`, and the directory is flushed. A crash at any moment leaves the old file or the new
 * one, never a torn one. The file is readable and writable by its owner only (it holds a
 * conversation). options may be NULL.
 *
 * If `path` is a symbolic link (or a chain of them), the file it points to is replaced and
 * the link stays. The temporary file is ".lumen-tmp-" and 16 hex digits, in the replaced
 * file's directory, and the same for every save to that file: a save killed midway may leave
 * it behind, and the next save to the same path reuses it (so removes it). Saves to the same
 * path wait for each other through a lock on it (flock; where the file system has none,
 * callers must not save to one path from two places at once).
 *
 * Returns LUMEN_ERROR_IO with the system's reason. Thread-safe for distinct sessions; the
 * session is only read.
 */
LUMEN_API lumen_status lumen_session_save(const lumen_session* session, const char* path,
                                          const lumen_snapshot_options* options);

/**
 * Restores the session from the snapshot file `path`; same guarantees and statuses as
 * restore. Only a regular file is read: anything else (a FIFO, a device, a directory) is
 * LUMEN_ERROR_IO without waiting on it. A file whose size no snapshot of the session's model
 * can have is rejected after reading its head only (at most 32 + 56 * layers bytes).
 */
LUMEN_API lumen_status lumen_session_load(lumen_session* session, const char* path);

/* ------------------------------------------------------------------------------------------ */
/* Session stores (since 0.3)                                                                 */
/*                                                                                            */
/* A store keeps sessions' snapshots under string keys, so that any process, on any machine   */
/* that opens the same store, can continue a conversation from where it was last saved. Two   */
/* kinds, chosen by the URI: a directory (file://) and a Redis server (redis://). What a      */
/* store holds under a key is the self-describing snapshot (docs/snapshot_format.md: model    */
/* fingerprint and checksum included), a version and an optional expiry.                      */
/*                                                                                            */
/*   - Versions. Every successful save stores the previous version + 1 (1 for a key that     */
/*     holds nothing: never saved, removed or expired). A save may name the version it       */
/*     expects to replace (compare-and-set); if another writer saved in between, the save    */
/*     fails with LUMEN_ERROR_VERSION_CONFLICT and stores nothing, so that two machines      */
/*     cannot silently overwrite each other's newer state.                                   */
/*   - Atomicity. A reader sees the old value or the new one, never a mix, whatever happens  */
/*     to the writer (killed, disconnected, out of space) and however many parts the value   */
/*     is split into.                                                                        */
/*   - Errors. A load that fails leaves the session exactly as it was; a save only reads the */
/*     session. A missing key is LUMEN_ERROR_NOT_FOUND; a value of another model             */
/*     LUMEN_ERROR_MODEL_MISMATCH; damaged bytes LUMEN_ERROR_CORRUPT_SNAPSHOT; a server that */
/*     cannot be reached or drops the connection LUMEN_ERROR_UNAVAILABLE; one that does not  */
/*     answer in time LUMEN_ERROR_TIMEOUT; a file that cannot be written (a full disk, a     */
/*     read-only directory), or a command the server refuses (e.g. out of memory),           */
/*     LUMEN_ERROR_IO. Each message names the store, the key and the reason. A store whose   */
/*     connection failed connects again on its next call.                                    */
/*   - Keys: 1 to 1024 bytes, any bytes but NUL.                                             */
/*   - Thread safety: a store may be called from several threads; its calls take turns       */
/*     (open one store per thread for parallel transfers). The session rules are those of    */
/*     lumen_session_snapshot (save) and lumen_session_restore (load).                       */
/* ------------------------------------------------------------------------------------------ */

typedef struct lumen_store lumen_store;

/** How a store is opened. Fill with lumen_store_options_init. Since 0.3. */
typedef struct lumen_store_options {
  uint32_t struct_size; /* set by init */
  /** redis://: the limit, in milliseconds, on connecting and on each command's answer;
   *  0 means 5000. Ignored by file://. */
  int32_t timeout_ms;
  /** redis://: a snapshot larger than this many bytes is stored as parts of at most this
   *  size; 0 means 4 MiB (4194304). At least 4096 and at most 512 MiB (Redis's largest
   *  string). Ignored by file:// (one file per key). */
  int64_t part_bytes;
} lumen_store_options;

/** Fills *options with defaults (timeout 5000 ms, parts of 4 MiB). NULL is a no-op. Since 0.3. */
LUMEN_API void lumen_store_options_init(lumen_store_options* options);

/**
 * Opens the store `uri` (UTF-8) and writes it to *out; free it with lumen_store_destroy.
 * options may be NULL (defaults). Since 0.3.
 *
 *   file:///path/to/dir   a directory, created (mode 0700) if its parent exists and it does
 *                         not; each key is one file in it, saved atomically and durably as
 *                         lumen_session_save does (a temporary file, flushed, renamed), its
 *                         name the key with bytes other than [A-Za-z0-9_-] written %XX (cut
 *                         at 180 bytes and ended with a hash of the whole key when longer)
 *                         and the suffix ".lumen-store"; saves to one key wait for each other
 *                         (flock on a lock file beside it). An expired file stays on disk
 *                         until the key is saved again or removed.
 *   redis://host[:port][/db]   a Redis server (port 6379 and database 0 by default; a
 *                         password as the URI's user information, redis://:secret\@host),
 *                         through hiredis. The connection is made here. Keys live under
 *                         "lumen:{key}:" (one hash slot per key): a head that names the
 *                         value's generation, version and size, and the parts of each
 *                         generation, written first with a five-minute expiry; one Lua
 *                         script then checks the version, points the head at the new
 *                         generation, gives its parts the value's expiry (or none) and
 *                         deletes the old generation's parts. A save that dies before the
 *                         script leaves parts that expire by themselves. A read takes the
 *                         head, then its parts; should a newer save replace them meanwhile,
 *                         it reads again, at last through a script the server runs whole.
 *
 * Returns LUMEN_ERROR_INVALID_ARGUMENT for a URI that is not one of these (the message says
 * what is wrong) or bad options; LUMEN_ERROR_UNSUPPORTED for redis:// in a library built
 * without hiredis; LUMEN_ERROR_IO when the directory cannot be made or is not one;
 * LUMEN_ERROR_UNAVAILABLE or LUMEN_ERROR_TIMEOUT when the server cannot be reached, and
 * LUMEN_ERROR_IO when it refuses the password or the database.
 */
LUMEN_API lumen_status lumen_store_open(const char* uri, const lumen_store_options* options,
                                        lumen_store** out);

/** Closes the store (its connection). NULL is a no-op. Since 0.3. */
LUMEN_API void lumen_store_destroy(lumen_store* store);

/** How a session is saved to a store. Fill with lumen_store_save_options_init. Since 0.3. */
typedef struct lumen_store_save_options {
  uint32_t struct_size; /* set by init */
  /** lumen_dtype of the stored state, as in lumen_snapshot_options: FLOAT32 (default) or
   *  BFLOAT16. */
  int32_t state_dtype;
  /** 0 (default): the value never expires; > 0: it expires this many milliseconds after
   *  the save, and the key then holds nothing. */
  int64_t expiry_ms;
  /** -1 (default): replace whatever the key holds; 0: save only if the key holds nothing;
   *  n > 0: save only if the stored version is n. Otherwise LUMEN_ERROR_VERSION_CONFLICT. */
  int64_t expected_version;
} lumen_store_save_options;

/** Fills *options with defaults (FLOAT32, no expiry, no version check). NULL is a no-op.
 *  Since 0.3. */
LUMEN_API void lumen_store_save_options_init(lumen_store_save_options* options);

/**
 * Saves the session's snapshot under `key`, atomically (see above), and writes the version
 * it now has to *out_version (may be NULL). options may be NULL (defaults). The session is
 * only read. Returns LUMEN_ERROR_VERSION_CONFLICT, naming the stored version, when
 * options->expected_version is not -1 and differs from it (nothing is written), and the
 * errors listed above; after any error the key holds what it held before. Since 0.3.
 */
LUMEN_API lumen_status lumen_store_save(lumen_store* store, const char* key,
                                        const lumen_session* session,
                                        const lumen_store_save_options* options,
                                        int64_t* out_version);

/**
 * Replaces the session's state and token counts with the snapshot stored under `key`, as
 * lumen_session_restore does (all or nothing), and writes its version to *out_version (may
 * be NULL). Returns LUMEN_ERROR_NOT_FOUND for a key that holds nothing, the statuses of
 * lumen_session_restore for the value itself (LUMEN_ERROR_MODEL_MISMATCH,
 * LUMEN_ERROR_CORRUPT_SNAPSHOT, LUMEN_ERROR_SNAPSHOT_VERSION; a missing or resized part is
 * LUMEN_ERROR_CORRUPT_SNAPSHOT too), and the errors listed above. Since 0.3.
 */
LUMEN_API lumen_status lumen_store_load(lumen_store* store, const char* key,
                                        lumen_session* session, int64_t* out_version);

/**
 * Removes what the store holds under `key`. Returns LUMEN_ERROR_NOT_FOUND when it holds
 * nothing, and the errors listed above. Since 0.3.
 */
LUMEN_API lumen_status lumen_store_remove(lumen_store* store, const char* key);

/* ------------------------------------------------------------------------------------------ */
/* Experimental                                                                               */
/* ------------------------------------------------------------------------------------------ */

/*
 * What may still change, or go, in a minor version: visible only where LUMEN_EXPERIMENTAL is
 * defined before this header is included (zstd's ZSTD_STATIC_LINKING_ONLY is the model). The
 * ABI promise of the version section does not cover it: a program that uses it must run with
 * the library of the same MAJOR.MINOR it was built against. The bindings expose it, marked
 * experimental. A declaration leaves this section, with a "Since", when it is settled.
 */
#ifdef LUMEN_EXPERIMENTAL

/**
 * Writes the bytes of device scratch the engine holds now to *out: what lumen_engine_reserve
 * and the calls so far grew it to (for GPU engines at least 1 MiB once any call used it;
 * outgrown buffers that captured graphs may still use are not counted). A call that needs
 * no more than this grows nothing. Always 0 for the CPU backend. Thread-safe.
 */
LUMEN_API lumen_status lumen_engine_scratch_bytes(const lumen_engine* engine, int64_t* out);

#endif /* LUMEN_EXPERIMENTAL */

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LUMEN_LUMEN_H_ */
