/*
 * One SWIG interface over lumen.h for Python, Java and C#.
 *
 * The header is %included whole, so every function, enum value and struct field it declares
 * reaches each language without an edit here. What this file adds is generic, keyed on types
 * and on the header's parameter-name conventions, never on one function:
 *   - lumen_status results become the language's exception (status + the library's message);
 *   - handles (lumen_model_builder, lumen_model, lumen_engine, lumen_session, lumen_store) are opaque
 *     addresses; the idiomatic classes in bindings/<language>/ own and free them;
 *   - `T** out` / `T* out` / `T* out_*` out-pointers come back as results (Python) or
 *     single-element arrays / out parameters (Java, C#);
 *   - options structs are classes whose constructor runs their *_options_init, and whose
 *     struct_size is hidden;
 *   - `void*` buffer fields are addresses, so any memory (host or device) passes through;
 *     `(float* out, int64_t count)`-style parameters take the language's arrays.
 * The per-language typemaps live in python.i, java.i and csharp.i.
 */
#if defined(SWIGPYTHON)
%module(package="lumen", moduleimport="from . import _capi") capi
#else
%module capi
#endif

%{
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "lumen/lumen.h"
%}

%include <stdint.i>

/* The export macro means nothing to SWIG. */
#define LUMEN_API

/* Java and C# names of enumerations: LumenFamily.GATED_DELTA_NET, LumenStatus.OK. Prefixes not
 * listed keep their full names. */
%define LUMEN_ENUM_NAMES
%rename("%(camelcase)s", %$isenum) "";
%rename("%(regex:/^LUMEN_(ERROR|FAMILY|FEATURE_MAP|DTYPE|MEMORY|BACKEND|PARAM|STATE|LAYOUT|CONV_ACTIVATION)_(.*)$/\\2/)s",
        %$isenumitem) "";
%rename(OK) LUMEN_OK;
%enddef

#if defined(SWIGPYTHON)
%include "python.i"
#elif defined(SWIGJAVA)
%include "java.i"
#elif defined(SWIGCSHARP)
%include "csharp.i"
#else
#error "lumen.i supports Python, Java and C#"
#endif

/* struct_size is set by the *_init functions; callers never see it. */
%rename("$ignore", match$name="struct_size") "";

/* Options structs: `new` fills the defaults through the header's init function; `delete` runs
 * RELEASE (freeing what the struct owns) before freeing the struct. */
%define LUMEN_OPTIONS_STRUCT_RELEASING(TYPE, INIT, NAME, RELEASE)
#if !defined(SWIGPYTHON)
%rename(NAME) TYPE;
#endif
%extend TYPE {
  TYPE() {
    TYPE* options = (TYPE*)calloc(1, sizeof(TYPE));
    if (options) INIT(options);
    return options;
  }
  ~TYPE() { RELEASE free($self); }
}
LUMEN_LANGUAGE_STRUCT(TYPE, INIT)
%enddef
%define LUMEN_OPTIONS_STRUCT(TYPE, INIT, NAME)
LUMEN_OPTIONS_STRUCT_RELEASING(TYPE, INIT, NAME, )
%enddef

/* Text fields own their copy: SWIG's own setter for a `const char*` member mallocs a copy that
 * nothing frees (its warning 451). Here a write frees the previous copy and the struct's
 * destructor frees the last one. The library copies the text where it keeps it (e.g.
 * lumen_engine_create copies spill_directory), so the struct may go once the call returns.
 * Every struct with such a field must be created by its bindings constructor (whose init
 * leaves the field NULL), never handed over from C, and release the field in RELEASE. */
%typemap(memberin, noblock=1) const char* spill_directory {
  free((char*)$1);
  $1 = NULL;
  if ($input) {
    size_t size = strlen((const char*)$input) + 1;
    char* copy = (char*)malloc(size);
    if (copy) memcpy(copy, (const char*)$input, size);
    $1 = copy;
  }
}

LUMEN_OPTIONS_STRUCT(lumen_layer_options, lumen_layer_options_init, LayerOptions)
LUMEN_OPTIONS_STRUCT_RELEASING(lumen_engine_options, lumen_engine_options_init, EngineOptions,
                               free((char*)$self->spill_directory);)
LUMEN_OPTIONS_STRUCT(lumen_layer_inputs, lumen_layer_inputs_init, LayerInputs)
LUMEN_OPTIONS_STRUCT(lumen_layer_output, lumen_layer_output_init, LayerOutput)
LUMEN_OPTIONS_STRUCT(lumen_snapshot_options, lumen_snapshot_options_init, SnapshotOptions)
LUMEN_OPTIONS_STRUCT(lumen_reservation, lumen_reservation_init, Reservation)
LUMEN_OPTIONS_STRUCT(lumen_store_options, lumen_store_options_init, StoreOptions)
LUMEN_OPTIONS_STRUCT(lumen_store_save_options, lumen_store_save_options_init, StoreSaveOptions)
LUMEN_OPTIONS_STRUCT(lumen_memory_stats, lumen_memory_stats_init, MemoryStats)

/* Every language's typemaps for `void*` (an address) and `void** out` (a new handle) also
 * serve the handles. */
%define LUMEN_HANDLE(TYPE)
%apply void* { TYPE*, const TYPE* };
%apply void** out { TYPE** out };
%enddef

LUMEN_HANDLE(lumen_model_builder)
LUMEN_HANDLE(lumen_model)
LUMEN_HANDLE(lumen_engine)
LUMEN_HANDLE(lumen_session)
LUMEN_HANDLE(lumen_store)
/* Batches of sessions (Python checks cu_seqlens against n; Java and C# take n from the array). */
#if defined(SWIGCSHARP)
%apply void* const* sessions { lumen_session* const* sessions };
#else
%apply (void* const* sessions, int32_t n) { (lumen_session* const* sessions, int32_t n) };
#endif
#if defined(SWIGPYTHON)
%apply (void* const* sessions, int32_t n, const int32_t* cu_seqlens) {
  (lumen_session* const* sessions, int32_t n, const int32_t* cu_seqlens) };
%apply (void* const* sessions, int32_t n, const int32_t* num_accepted) {
  (lumen_session* const* sessions, int32_t n, const int32_t* num_accepted) };
#else
/* One accepted count per session of a batch: an int[] like cu_seqlens. */
%apply const int32_t* cu_seqlens { const int32_t* num_accepted };
#endif

%include "lumen/lumen.h"
