/*
 * C# typemaps (Mono 6.8, P/Invoke). Included by lumen.i; generates namespace Lumen.CApi.
 *
 * - A non-OK lumen_status throws Lumen.LumenException (status, name, message).
 * - Handles and buffer fields are IntPtr (addresses; IntPtr.Zero is NULL). The classes of
 *   bindings/csharp own each handle as a SafeHandle (LumenHandle) and hold a reference on it
 *   for every call, since a *_destroy taking the SafeHandle itself could not be called from
 *   its release.
 * - Out-pointers are `out` parameters: out IntPtr for handles, out int, out long.
 * - `float*` parameters (values, out) take float[], `void*` data/buffer parameters byte[],
 *   each with its element count as the next argument; P/Invoke pins them for the call
 *   (blittable arrays are never copied). Sessions of a batch are an IntPtr[], cu_seqlens an
 *   int[].
 * - Enumerations are C# enums (LumenFamily.GATED_DELTA_NET), also where the header carries
 *   them as int32_t: the fields and parameters named below take and give the enum, and the 0/1
 *   option flags are bool. Options classes are partial, so bindings/csharp adds to them (the
 *   presets).
 * - The glue library liblumen_csharp.so is found next to Lumen.dll (Mono and .NET look there).
 */

%include <enums.swg>
%include <typemaps.i>
%csconst(1);

%rename("%(camelcase)s", %$isvariable) "";
LUMEN_ENUM_NAMES

/* ---- status ------------------------------------------------------------------------------ */
%typemap(ctype) lumen_status "int"
%typemap(imtype) lumen_status "int"
%typemap(cstype) lumen_status "void"
%typemap(out) lumen_status "$result = (int)$1;"
%typemap(csout, excode=SWIGEXCODE) lumen_status {
    global::Lumen.LumenException.Check($imcall);$excode
  }

/* ---- addresses: handles and buffer fields ---------------------------------------------- */
%typemap(ctype) void*, const void* "void*"
%typemap(imtype) void*, const void* "global::System.IntPtr"
%typemap(cstype) void*, const void* "global::System.IntPtr"
%typemap(in) void*, const void* "$1 = ($1_ltype)$input;"
%typemap(out) void*, const void* "$result = (void*)$1;"
%typemap(csin) void*, const void* "$csinput"
%typemap(csout, excode=SWIGEXCODE) void*, const void* {
    global::System.IntPtr result = $imcall;$excode
    return result;
  }
%typemap(csvarin, excode=SWIGEXCODE2) void*, const void* %{
    set {
      $imcall;$excode
    }
  %}
%typemap(csvarout, excode=SWIGEXCODE2) void*, const void* %{
    get {
      global::System.IntPtr result = $imcall;$excode
      return result;
    }
  %}

/* ---- out-pointers ----------------------------------------------------------------------- */
%typemap(ctype) void** out "void**"
%typemap(imtype) void** out "out global::System.IntPtr"
%typemap(cstype) void** out "out global::System.IntPtr"
%typemap(csin) void** out "out $csinput"
%typemap(in) void** out "$1 = ($1_ltype)$input;"

%apply int *OUTPUT { int32_t* out, int32_t* out_layer };
%apply long long *OUTPUT { int64_t* out, int64_t* out_size, int64_t* out_version };

/* ---- enumerations carried as int32_t, by the header's field and parameter names ----------- */
%define LUMEN_ENUM_FIELD(NAME, CSENUM)
%typemap(cstype) int32_t NAME "global::Lumen.CApi.CSENUM"
%typemap(csin) int32_t NAME "(int)$csinput"
%typemap(csvarout, excode=SWIGEXCODE2) int32_t NAME %{
    get {
      var result = (global::Lumen.CApi.CSENUM)$imcall;$excode
      return result;
    }
  %}
%enddef
LUMEN_ENUM_FIELD(family, LumenFamily)
LUMEN_ENUM_FIELD(feature_map, LumenFeatureMap)
LUMEN_ENUM_FIELD(dtype, LumenDtype)
LUMEN_ENUM_FIELD(state_dtype, LumenDtype)
LUMEN_ENUM_FIELD(memory, LumenMemory)
LUMEN_ENUM_FIELD(backend, LumenBackend)
LUMEN_ENUM_FIELD(conv_activation, LumenConvActivation)
LUMEN_ENUM_FIELD(part, LumenStatePart)
LUMEN_ENUM_FIELD(layout, LumenStateLayout)
LUMEN_ENUM_FIELD(param, LumenParam)
LUMEN_ENUM_FIELD(status, LumenStatus)

/* An enumeration written through an out-pointer: `out LumenBackend` (blittable as int). */
%define LUMEN_ENUM_OUT(CTYPE, CSENUM)
%typemap(ctype) CTYPE* out "int*"
%typemap(imtype) CTYPE* out "out global::Lumen.CApi.CSENUM"
%typemap(cstype) CTYPE* out "out global::Lumen.CApi.CSENUM"
%typemap(csin) CTYPE* out "out $csinput"
%typemap(in) CTYPE* out "$1 = ($1_ltype)$input;"
%enddef
LUMEN_ENUM_OUT(lumen_dtype, LumenDtype)
LUMEN_ENUM_OUT(lumen_family, LumenFamily)
LUMEN_ENUM_OUT(lumen_memory, LumenMemory)

/* The 0/1 option flags are bool. */
%define LUMEN_FLAG_FIELD(NAME)
%typemap(cstype) int32_t NAME "bool"
%typemap(csin) int32_t NAME "$csinput ? 1 : 0"
%typemap(csvarout, excode=SWIGEXCODE2) int32_t NAME %{
    get {
      bool result = $imcall != 0;$excode
      return result;
    }
  %}
%enddef
LUMEN_FLAG_FIELD(normalize)
LUMEN_FLAG_FIELD(qk_l2norm)
LUMEN_FLAG_FIELD(beta_sigmoid)
LUMEN_FLAG_FIELD(gate_raw)
LUMEN_FLAG_FIELD(allow_neg_eigval)

/* Options structs: proxies named without the lumen_ prefix; an out struct is passed in. They are
 * partial classes, so that bindings/csharp adds the presets to LayerOptions. */
%define LUMEN_LANGUAGE_STRUCT(TYPE, INIT)
%typemap(csclassmodifiers) struct TYPE "public partial class"
%enddef

/* ---- arrays, pinned by P/Invoke for the call ---------------------------------------------- */
%define LUMEN_ARRAY(CTYPE, NAME, CSTYPE, DIRECTION)
%typemap(ctype) CTYPE NAME "void*"
%typemap(imtype, inattributes=DIRECTION) CTYPE NAME "CSTYPE"
%typemap(cstype) CTYPE NAME "CSTYPE"
%typemap(csin) CTYPE NAME "$csinput"
%typemap(in) CTYPE NAME "$1 = ($1_ltype)$input;"
%enddef
LUMEN_ARRAY(const float*, values, float[], "[global::System.Runtime.InteropServices.In]")
LUMEN_ARRAY(float*, out, float[], "[global::System.Runtime.InteropServices.Out]")
LUMEN_ARRAY(const void*, data, byte[], "[global::System.Runtime.InteropServices.In]")
LUMEN_ARRAY(void*, buffer, byte[], "[global::System.Runtime.InteropServices.Out]")
LUMEN_ARRAY(void* const*, sessions, global::System.IntPtr[], "[global::System.Runtime.InteropServices.In]")
LUMEN_ARRAY(const int32_t*, cu_seqlens, int[], "[global::System.Runtime.InteropServices.In]")
LUMEN_ARRAY(const int32_t*, num_accepted, int[], "[global::System.Runtime.InteropServices.In]")
