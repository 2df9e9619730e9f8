/*
 * Java typemaps (OpenJDK 17, JNI). Included by lumen.i; generates package org.lumen.capi.
 *
 * - A non-OK lumen_status throws org.lumen.LumenException (status, name, message); calls
 *   that return one return LUMEN_OK otherwise.
 * - Handles and buffer fields are longs (addresses; 0 is NULL).
 * - Out-pointers are arrays of at least one element: long[] for handles and int64_t, int[]
 *   for int32_t and enums.
 * - `(const float* values, int64_t count)`, `(float* out, int64_t count)` take float[];
 *   `(const void* data, int64_t size)`, `(void* buffer, int64_t capacity)` take byte[]; all
 *   are pinned for the call (no copy), never held after it.
 * - Enumerations are int constants (LumenFamily.GATED_DELTA_NET, ...); org.lumen has them as
 *   Java enums.
 * - Options structs are AutoCloseable: close() (or delete()) frees them now, a Cleaner if
 *   they become unreachable. org.lumen has plain Java options objects instead.
 * - The JNI library loads through org.lumen.NativeLibrary (next to lumen.jar, or from the
 *   jar itself).
 */

%include <enumtypeunsafe.swg>
%javaconst(1);

%pragma(java) jniclasscode=%{
  static {
    org.lumen.NativeLibrary.load("lumen_jni");
  }
%}

/* Java names: options classes LayerOptions, ... (lumen.i), fields through setters and getters
 * in lowerCamelCase, enumerations LumenFamily.GATED_DELTA_NET, ... */
%rename("%(lowercamelcase)s", %$isvariable) "";
LUMEN_ENUM_NAMES

/* ---- status ------------------------------------------------------------------------------ */
%typemap(jni) lumen_status "jint"
%typemap(jtype) lumen_status "int"
/* A call returns LUMEN_OK (0) or throws. (Not void: SWIG would declare the LumenStatus
 * constants with the same Java type.) */
%typemap(jstype) lumen_status "int"
%typemap(out) lumen_status "$result = (jint)$1;"
%typemap(javaout) lumen_status {
    int status = $jnicall;
    org.lumen.LumenException.check(status);
    return status;
  }

/* ---- addresses: handles and buffer fields ---------------------------------------------- */
%typemap(jni) void*, const void* "jlong"
%typemap(jtype) void*, const void* "long"
%typemap(jstype) void*, const void* "long"
%typemap(in) void*, const void* "$1 = ($1_ltype)(intptr_t)$input;"
%typemap(out) void*, const void* "$result = (jlong)(intptr_t)$1;"
%typemap(javain) void*, const void* "$javainput"
%typemap(javaout) void*, const void* { return $jnicall; }

/* ---- out-pointers ----------------------------------------------------------------------- */
%{
/* Throws and returns 0 unless `array` holds at least one element. */
static int binding_out_array(JNIEnv* jenv, jarray array) {
  if (!array || (*jenv)->GetArrayLength(jenv, array) < 1) {
    SWIG_JavaThrowException(jenv, SWIG_JavaIllegalArgumentException,
                            "an out argument must be an array of at least one element");
    return 0;
  }
  return 1;
}
%}

%define LUMEN_OUT(CTYPE, NAME, JNITYPE, JAVATYPE, JELEMENT, SETTER)
%typemap(jni) CTYPE* NAME "JNITYPE"
%typemap(jtype) CTYPE* NAME "JAVATYPE"
%typemap(jstype) CTYPE* NAME "JAVATYPE"
%typemap(javain) CTYPE* NAME "$javainput"
%typemap(in) CTYPE* NAME ($*1_ltype temp) {
  if (!binding_out_array(jenv, $input)) return $null;
  memset(&temp, 0, sizeof temp);
  $1 = &temp;
}
%typemap(argout) CTYPE* NAME {
  JELEMENT value = (JELEMENT)(intptr_t)temp$argnum;
  (*jenv)->SETTER(jenv, $input, 0, 1, &value);
}
%enddef
LUMEN_OUT(void*, out, jlongArray, long[], jlong, SetLongArrayRegion)
LUMEN_OUT(int64_t, out, jlongArray, long[], jlong, SetLongArrayRegion)
LUMEN_OUT(int64_t, out_size, jlongArray, long[], jlong, SetLongArrayRegion)
LUMEN_OUT(int64_t, out_version, jlongArray, long[], jlong, SetLongArrayRegion)
LUMEN_OUT(int32_t, out, jintArray, int[], jint, SetIntArrayRegion)
LUMEN_OUT(int32_t, out_layer, jintArray, int[], jint, SetIntArrayRegion)
LUMEN_OUT(lumen_dtype, out, jintArray, int[], jint, SetIntArrayRegion)
LUMEN_OUT(lumen_family, out, jintArray, int[], jint, SetIntArrayRegion)
LUMEN_OUT(lumen_memory, out, jintArray, int[], jint, SetIntArrayRegion)

/* Options structs: proxies named without the lumen_ prefix; an out struct is passed in. */
%define LUMEN_LANGUAGE_STRUCT(TYPE, INIT)
%enddef

/* ---- arrays pinned for one call ------------------------------------------------------------- */
%define LUMEN_PINNED(POINTER, COUNT, JNITYPE, JAVATYPE, ELEMENT_BYTES, RELEASE_MODE)
%typemap(jni) (POINTER, COUNT) "JNITYPE"
%typemap(jtype) (POINTER, COUNT) "JAVATYPE"
%typemap(jstype) (POINTER, COUNT) "JAVATYPE"
%typemap(javain) (POINTER, COUNT) "$javainput"
%typemap(in) (POINTER, COUNT) {
  if (!$input) {
    SWIG_JavaThrowException(jenv, SWIG_JavaNullPointerException, "$1_name: null array");
    return $null;
  }
  $2 = (int64_t)(*jenv)->GetArrayLength(jenv, $input);
  $1 = ($1_ltype)(*jenv)->GetPrimitiveArrayCritical(jenv, $input, NULL);
  if (!$1) return $null; /* OutOfMemoryError is pending */
}
%typemap(freearg) (POINTER, COUNT) {
  if ($1) (*jenv)->ReleasePrimitiveArrayCritical(jenv, $input, (void*)$1, RELEASE_MODE);
}
%enddef
LUMEN_PINNED(const float* values, int64_t count, jfloatArray, float[], 4, JNI_ABORT)
LUMEN_PINNED(float* out, int64_t count, jfloatArray, float[], 4, 0)
LUMEN_PINNED(const void* data, int64_t size, jbyteArray, byte[], 1, JNI_ABORT)
LUMEN_PINNED(void* buffer, int64_t capacity, jbyteArray, byte[], 1, 0)

/* Batches of sessions: long[] of handles; n is its length. */
%typemap(jni) (void* const* sessions, int32_t n) "jlongArray"
%typemap(jtype) (void* const* sessions, int32_t n) "long[]"
%typemap(jstype) (void* const* sessions, int32_t n) "long[]"
%typemap(javain) (void* const* sessions, int32_t n) "$javainput"
%typemap(in) (void* const* sessions, int32_t n) (void** addresses = NULL) {
  jsize size = $input ? (*jenv)->GetArrayLength(jenv, $input) : 0;
  jlong* values = (jlong*)malloc((size_t)(size ? size : 1) * sizeof(jlong));
  jsize i;
  addresses = (void**)malloc((size_t)(size ? size : 1) * sizeof(void*));
  if (!values || !addresses) {
    free(values);
    SWIG_JavaThrowException(jenv, SWIG_JavaOutOfMemoryError, "sessions");
    return $null;
  }
  if (size) (*jenv)->GetLongArrayRegion(jenv, $input, 0, size, values);
  for (i = 0; i < size; ++i) addresses[i] = (void*)(intptr_t)values[i];
  free(values);
  $1 = ($1_ltype)addresses;
  $2 = (int32_t)size;
}
%typemap(freearg) (void* const* sessions, int32_t n) { free(addresses$argnum); }

/* cu_seqlens: int[] (n + 1 entries, checked by lumen's Java classes). */
%typemap(jni) const int32_t* cu_seqlens "jintArray"
%typemap(jtype) const int32_t* cu_seqlens "int[]"
%typemap(jstype) const int32_t* cu_seqlens "int[]"
%typemap(javain) const int32_t* cu_seqlens "$javainput"
%typemap(in) const int32_t* cu_seqlens {
  $1 = NULL; /* null: NULL, which lumen rejects where it needs offsets */
  if ($input) {
    $1 = (int32_t*)(*jenv)->GetIntArrayElements(jenv, $input, NULL);
    if (!$1) return $null;
  }
}
%typemap(freearg) const int32_t* cu_seqlens {
  if ($1) (*jenv)->ReleaseIntArrayElements(jenv, $input, (jint*)$1, JNI_ABORT);
}

/* ---- helpers for lumen's Java classes (not part of lumen.h) -------------------------------- */
%typemap(in, numinputs=0) JNIEnv* jenv "$1 = jenv;"

%javamethodmodifiers binding_direct_buffer_address "
  /** The address of a direct buffer's first element (0 for a heap buffer). */
  public";
%javamethodmodifiers binding_run_pinned "
  /**
   * Runs one layer call (0 step, 1 prefill, 2 step_batch, 3 prefill_varlen, 4 step_tentative,
   * 5 step_tentative_batch) with Java arrays
   * pinned for its duration: arrays holds q, k, v, g, beta, o, each null (the field is
   * already set, or absent) or a float[] / short[] whose element count the caller has set in
   * the matching *_count field. The pinned fields are cleared again afterwards.
   */
  public";
%inline %{
jlong binding_direct_buffer_address(JNIEnv* jenv, jobject buffer) {
  void* address = buffer ? (*jenv)->GetDirectBufferAddress(jenv, buffer) : NULL;
  return (jlong)(intptr_t)address;
}

lumen_status binding_run_pinned(JNIEnv* jenv, int32_t call, void* target, int32_t layer,
                                int32_t num_tokens, void* const* sessions, int32_t n,
                                const int32_t* cu_seqlens, lumen_layer_inputs* inputs,
                                lumen_layer_output* output, jobjectArray arrays) {
  enum { kArrays = 6 };
  jobject objects[kArrays] = {0};
  void* pinned[kArrays] = {0};
  const void** fields[kArrays];
  lumen_status status = LUMEN_ERROR_INVALID_ARGUMENT;
  jsize count = arrays ? (*jenv)->GetArrayLength(jenv, arrays) : 0;
  int i;
  if (!inputs || !output || count > kArrays) {
    SWIG_JavaThrowException(jenv, SWIG_JavaIllegalArgumentException,
                            "inputs, output and at most six arrays are needed");
    return status;
  }
  fields[0] = &inputs->q;
  fields[1] = &inputs->k;
  fields[2] = &inputs->v;
  fields[3] = &inputs->g;
  fields[4] = &inputs->beta;
  fields[5] = (const void**)&output->o;
  /* Every JNI call other than the critical ones comes first. */
  for (i = 0; i < count; ++i) objects[i] = (*jenv)->GetObjectArrayElement(jenv, arrays, i);
  for (i = 0; i < count; ++i) {
    if (!objects[i]) continue;
    pinned[i] = (*jenv)->GetPrimitiveArrayCritical(jenv, (jarray)objects[i], NULL);
    if (!pinned[i]) {
      status = LUMEN_ERROR_OUT_OF_MEMORY;
      goto release;
    }
    *fields[i] = pinned[i];
  }
  switch (call) {
    case 0: status = lumen_session_step((lumen_session*)target, layer, inputs, output); break;
    case 1:
      status = lumen_session_prefill((lumen_session*)target, layer, num_tokens, inputs, output);
      break;
    case 2:
      status = lumen_engine_step_batch((lumen_engine*)target, layer,
                                       (lumen_session* const*)sessions, n, inputs, output);
      break;
    case 3:
      status = lumen_engine_prefill_varlen((lumen_engine*)target, layer,
                                           (lumen_session* const*)sessions, n, cu_seqlens,
                                           inputs, output);
      break;
    case 4:
      status = lumen_session_step_tentative((lumen_session*)target, layer, num_tokens, inputs,
                                            output);
      break;
    case 5:
      status = lumen_engine_step_tentative_batch((lumen_engine*)target, layer,
                                                 (lumen_session* const*)sessions, n, cu_seqlens,
                                                 inputs, output);
      break;
    default: break;
  }
release:
  for (i = count - 1; i >= 0; --i) {
    if (!pinned[i]) continue;
    (*jenv)->ReleasePrimitiveArrayCritical(jenv, (jarray)objects[i], pinned[i],
                                           i == kArrays - 1 ? 0 : JNI_ABORT);
    *fields[i] = NULL;
  }
  for (i = 0; i < count; ++i) {
    if (objects[i]) (*jenv)->DeleteLocalRef(jenv, objects[i]);
  }
  if (status == LUMEN_ERROR_INVALID_ARGUMENT && call > 5) {
    SWIG_JavaThrowException(jenv, SWIG_JavaIllegalArgumentException, "unknown call");
  }
  return status;
}
%}

/* ---- proxies (options structs) free their memory through a Cleaner, not finalize() --------- */
%typemap(javafinalize) SWIGTYPE ""
%typemap(javainterfaces) SWIGTYPE "AutoCloseable"
%typemap(javabody) SWIGTYPE %{
  private transient long swigCPtr;
  protected transient boolean swigCMemOwn;
  private transient java.lang.ref.Cleaner.Cleanable swigCleanable;

  protected $javaclassname(long cPtr, boolean cMemoryOwn) {
    swigCMemOwn = cMemoryOwn;
    swigCPtr = cPtr;
    if (cMemoryOwn) {
      swigCleanable = org.lumen.NativeLibrary.CLEANER.register(
          this, () -> $imclassname.delete_$javaclassname(cPtr));
    }
  }

  protected static long getCPtr($javaclassname obj) {
    return (obj == null) ? 0 : obj.swigCPtr;
  }

  /** Frees the native struct now, as delete() does; a later use finds it gone. */
  @Override
  public void close() {
    delete();
  }
%}
/* A field read or written through a closed proxy throws instead of reaching through NULL. */
%typemap(check) SWIGTYPE* self %{
  if (!$1) {
    SWIG_JavaThrowException(jenv, SWIG_JavaIllegalStateException, "$1_basetype is closed");
    return $null;
  }
%}
%typemap(javadestruct, methodname="delete", methodmodifiers="public synchronized") SWIGTYPE {
    if (swigCPtr != 0) {
      if (swigCMemOwn) {
        swigCMemOwn = false;
        swigCleanable.clean();
      }
      swigCPtr = 0;
    }
  }
