/*
 * C# typemaps (Mono 6.8, P/Invoke). Included by lumen.i; generates namespace Lumen.CApi.
 *
 * - A non-OK lumen_status throws Lumen.LumenException (status, name, message).
 * - Handles and buffer fields are IntPtr (addresses; IntPtr.Zero is NULL).
 * - Out-pointers are `out` parameters: out IntPtr for handles, out int, out long.
 * - `float*` parameters (values, out) take float[], `void*` data/buffer parameters byte[],
 *   each with its element count as the next argument; P/Invoke pins them for the call
 *   (blittable arrays are never copied). Sessions of a batch are an IntPtr[], cu_seqlens an
 *   int[].
 * - Enumerations are C# enums (LumenFamily.GATED_DELTA_NET); int32_t fields take them cast.
 * - The glue library liblumen_csharp.so is found next to Lumen.dll (Mono looks there).
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

%apply int *OUTPUT { int32_t* out, int32_t* out_layer, lumen_backend* out, lumen_dtype* out,
                     lumen_family* out, lumen_memory* out };
%apply long long *OUTPUT { int64_t* out, int64_t* out_size };

/* Options structs: proxies named without the lumen_ prefix; an out struct is passed in. */
%define LUMEN_LANGUAGE_STRUCT(TYPE, INIT)
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
