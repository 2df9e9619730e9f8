/*
 * Python typemaps (CPython 3.11; no numpy needed to build). Included by lumen.i.
 *
 * - A non-OK lumen_status raises capi.LumenError(status, status_name, message).
 * - Handles and buffer fields are ints (addresses); None is NULL.
 * - Out-pointers are returned (a tuple when there are several).
 * - `(const float* values, int64_t count)`, `(float* out, int64_t count)`, `(const void* data,
 *   int64_t size)` and `(void* buffer, int64_t capacity)` take any C-contiguous buffer
 *   (buffer protocol: numpy, array, bytes, bytearray, memoryview), without copying;
 *   `buffer` also takes an int n and returns a new bytes object of n bytes.
 * - Every call releases the GIL (swig -threads).
 */

%{
static PyObject* binding_error_class = NULL;

/* Raises LumenError(status, status_name, message) with the calling thread's message. */
static void binding_raise(lumen_status status) {
  PyObject* args = Py_BuildValue("(iss)", (int)status, lumen_status_string(status),
                                 lumen_last_error_message());
  if (args) {
    PyErr_SetObject(binding_error_class, args);
    Py_DECREF(args);
  }
}

/* True if a buffer's struct-module format is `code` in native or little-endian order. */
static int binding_format_is(const char* format, char code) {
  if (!format) return code == 'B';
  if (*format == '@' || *format == '=' || *format == '<') ++format;
  return format[0] == code && format[1] == '\0';
}

/* Returns a memoryview over obj (the export stays held while it lives) after checking that
 * it is C-contiguous, writable if asked and of element type `code` (0: any; then the count
 * is in bytes). Writes the address and element count. NULL with an exception otherwise. */
static PyObject* binding_view(PyObject* obj, int writable, char code, const char* name,
                              void** data, int64_t* count) {
  PyObject* memory = PyMemoryView_FromObject(obj);
  Py_buffer* view;
  if (!memory) return NULL;
  view = PyMemoryView_GET_BUFFER(memory);
  if (!PyBuffer_IsContiguous(view, 'C')) {
    PyErr_Format(PyExc_ValueError, "%s: the buffer must be C-contiguous", name);
  } else if (writable && view->readonly) {
    PyErr_Format(PyExc_TypeError, "%s: the buffer must be writable", name);
  } else if (code && !binding_format_is(view->format, code)) {
    PyErr_Format(PyExc_TypeError, "%s: expected elements of format '%c', got '%s'", name,
                 code, view->format ? view->format : "B");
  } else {
    *data = view->buf;
    *count = code ? (int64_t)(view->len / view->itemsize) : (int64_t)view->len;
    return memory;
  }
  Py_DECREF(memory);
  return NULL;
}

/* Fills a C array of n addresses from a sequence of ints; NULL with an exception otherwise. */
static void** binding_addresses(PyObject* sequence, Py_ssize_t* n) {
  PyObject* fast = PySequence_Fast(sequence, "expected a sequence of handles");
  void** addresses;
  Py_ssize_t i;
  if (!fast) return NULL;
  *n = PySequence_Fast_GET_SIZE(fast);
  addresses = (void**)malloc((size_t)(*n ? *n : 1) * sizeof(void*));
  if (!addresses) {
    Py_DECREF(fast);
    PyErr_NoMemory();
    return NULL;
  }
  for (i = 0; i < *n; ++i) {
    addresses[i] = PyLong_AsVoidPtr(PySequence_Fast_GET_ITEM(fast, i));
    if (PyErr_Occurred()) {
      free(addresses);
      Py_DECREF(fast);
      return NULL;
    }
  }
  Py_DECREF(fast);
  return addresses;
}
%}

%init %{
  binding_error_class = PyErr_NewException("lumen.capi.LumenError", NULL, NULL);
  Py_XINCREF(binding_error_class);
  if (!binding_error_class || PyModule_AddObject(m, "LumenError", binding_error_class) < 0)
    return NULL;
%}

%pythoncode %{
LumenError = _capi.LumenError
LumenError.__doc__ = "A lumen call failed: args are (status, status_name, message)."
LumenError.status = property(lambda self: self.args[0], doc="the lumen_status code")
LumenError.status_name = property(lambda self: self.args[1], doc="e.g. 'LUMEN_ERROR_IO'")
LumenError.message = property(lambda self: self.args[2], doc="the library's message")
LumenError.__str__ = lambda self: "%s: %s" % (self.args[1], self.args[2])
%}

/* ---- status -------------------------------------------------------------------------- */
%typemap(out) lumen_status {
  if ($1 != LUMEN_OK) {
    binding_raise($1);
    SWIG_fail;
  }
  $result = SWIG_Py_Void();
}

/* ---- addresses: handles and buffer fields ---------------------------------------------- */
%typemap(in) void*, const void* {
  if ($input == Py_None) {
    $1 = NULL;
  } else {
    $1 = ($1_ltype)PyLong_AsVoidPtr($input);
    if (PyErr_Occurred()) SWIG_fail;
  }
}
%typemap(out) void*, const void* {
  $result = $1 ? PyLong_FromVoidPtr((void*)$1) : SWIG_Py_Void();
}

/* ---- out-pointers ----------------------------------------------------------------------- */
%typemap(in, numinputs=0) void** out ($*1_ltype temp = NULL) { $1 = &temp; }
%typemap(argout) void** out {
  $result = SWIG_Python_AppendOutput($result, PyLong_FromVoidPtr((void*)temp$argnum));
}

%define LUMEN_SCALAR_OUT(TYPE, NAME)
%typemap(in, numinputs=0) TYPE* NAME ($*1_ltype temp) {
  memset(&temp, 0, sizeof temp);
  $1 = &temp;
}
%typemap(argout) TYPE* NAME {
  $result = SWIG_Python_AppendOutput($result, PyLong_FromLongLong((long long)temp$argnum));
}
%enddef
LUMEN_SCALAR_OUT(int32_t, out)
LUMEN_SCALAR_OUT(int32_t, out_layer)
LUMEN_SCALAR_OUT(int64_t, out)
LUMEN_SCALAR_OUT(int64_t, out_size)
LUMEN_SCALAR_OUT(int64_t, out_version)
LUMEN_SCALAR_OUT(lumen_dtype, out)
LUMEN_SCALAR_OUT(lumen_family, out)
LUMEN_SCALAR_OUT(lumen_memory, out)

/* An options struct written by a call comes back as a new, owned object. */
%define LUMEN_LANGUAGE_STRUCT(TYPE, INIT)
%typemap(in, numinputs=0) TYPE* out {
  $1 = ($1_ltype)calloc(1, sizeof(TYPE));
  if (!$1) {
    PyErr_NoMemory();
    SWIG_fail;
  }
  INIT($1);
}
%typemap(argout) TYPE* out {
  $result = SWIG_Python_AppendOutput($result,
                                     SWIG_NewPointerObj($1, $1_descriptor, SWIG_POINTER_OWN));
  $1 = NULL;
}
%typemap(freearg) TYPE* out { free($1); }
%enddef

/* ---- buffers ---------------------------------------------------------------------------- */
%define LUMEN_BUFFER(POINTER, COUNT, WRITABLE, CODE)
%typemap(in) (POINTER, COUNT) (PyObject* memory = NULL, void* data = NULL) {
  memory = binding_view($input, WRITABLE, CODE, "$1_name", &data, &$2);
  if (!memory) SWIG_fail;
  $1 = ($1_ltype)data;
}
%typemap(freearg) (POINTER, COUNT) { Py_XDECREF(memory$argnum); }
%enddef
LUMEN_BUFFER(const float* values, int64_t count, 0, 'f')
LUMEN_BUFFER(float* out, int64_t count, 1, 'f')
LUMEN_BUFFER(const void* data, int64_t size, 0, 0)

/* A snapshot buffer: a writable buffer, or an int n for a new bytes object of n bytes. */
%typemap(in) (void* buffer, int64_t capacity) (PyObject* memory = NULL, PyObject* bytes = NULL,
                                                void* data = NULL) {
  if (PyLong_Check($input)) {
    Py_ssize_t size = PyLong_AsSsize_t($input);
    if (size < 0) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "capacity must be >= 0");
      SWIG_fail;
    }
    bytes = PyBytes_FromStringAndSize(NULL, size);
    if (!bytes) SWIG_fail;
    $1 = PyBytes_AS_STRING(bytes);
    $2 = (int64_t)size;
  } else {
    memory = binding_view($input, 1, 0, "buffer", &data, &$2);
    if (!memory) SWIG_fail;
    $1 = data;
  }
}
%typemap(argout) (void* buffer, int64_t capacity) {
  if (bytes$argnum) {
    $result = SWIG_Python_AppendOutput($result, bytes$argnum);
    bytes$argnum = NULL;
  }
}
%typemap(freearg) (void* buffer, int64_t capacity) {
  Py_XDECREF(memory$argnum);
  Py_XDECREF(bytes$argnum);
}

/* ---- batches of sessions ------------------------------------------------------------------ */
%typemap(in) (void* const* sessions, int32_t n) (void** addresses = NULL, Py_ssize_t size = 0) {
  addresses = binding_addresses($input, &size);
  if (!addresses) SWIG_fail;
  if (size > INT32_MAX) {
    PyErr_SetString(PyExc_ValueError, "too many sessions");
    SWIG_fail;
  }
  $1 = ($1_ltype)addresses;
  $2 = (int32_t)size;
}
%typemap(freearg) (void* const* sessions, int32_t n) { free(addresses$argnum); }

/* Variable-length batches take one argument, the pair (sessions, cu_seqlens), so that the
 * n + 1 entries of cu_seqlens can be checked here (SWIG maps one Python argument per group). */
%typemap(in) (void* const* sessions, int32_t n, const int32_t* cu_seqlens)
    (void** addresses = NULL, Py_ssize_t size = 0, int32_t* offsets = NULL) {
  PyObject *sessions, *lengths, *fast;
  Py_ssize_t i;
  if (!PyArg_ParseTuple($input, "OO;expected the pair (sessions, cu_seqlens)", &sessions,
                        &lengths))
    SWIG_fail;
  addresses = binding_addresses(sessions, &size);
  if (!addresses) SWIG_fail;
  if (size > INT32_MAX - 1) {
    PyErr_SetString(PyExc_ValueError, "too many sessions");
    SWIG_fail;
  }
  fast = PySequence_Fast(lengths, "cu_seqlens must be a sequence of ints");
  if (!fast) SWIG_fail;
  if (PySequence_Fast_GET_SIZE(fast) != size + 1) {
    PyErr_Format(PyExc_ValueError, "cu_seqlens must have len(sessions) + 1 = %zd entries",
                 size + 1);
    Py_DECREF(fast);
    SWIG_fail;
  }
  offsets = (int32_t*)malloc((size_t)(size + 1) * sizeof(int32_t));
  if (!offsets) {
    Py_DECREF(fast);
    PyErr_NoMemory();
    SWIG_fail;
  }
  for (i = 0; i <= size; ++i) {
    long value = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
    if ((value == -1 && PyErr_Occurred()) || value < INT32_MIN || value > INT32_MAX) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_OverflowError, "cu_seqlens entry");
      Py_DECREF(fast);
      SWIG_fail;
    }
    offsets[i] = (int32_t)value;
  }
  Py_DECREF(fast);
  $1 = ($1_ltype)addresses;
  $2 = (int32_t)size;
  $3 = offsets;
}
%typemap(freearg) (void* const* sessions, int32_t n, const int32_t* cu_seqlens) {
  free(addresses$argnum);
  free(offsets$argnum);
}

/* Batched commits take the pair (sessions, num_accepted): one count per session. */
%typemap(in) (void* const* sessions, int32_t n, const int32_t* num_accepted)
    (void** addresses = NULL, Py_ssize_t size = 0, int32_t* counts = NULL) {
  PyObject *sessions, *accepted, *fast;
  Py_ssize_t i;
  if (!PyArg_ParseTuple($input, "OO;expected the pair (sessions, num_accepted)", &sessions,
                        &accepted))
    SWIG_fail;
  addresses = binding_addresses(sessions, &size);
  if (!addresses) SWIG_fail;
  if (size > INT32_MAX) {
    PyErr_SetString(PyExc_ValueError, "too many sessions");
    SWIG_fail;
  }
  fast = PySequence_Fast(accepted, "num_accepted must be a sequence of ints");
  if (!fast) SWIG_fail;
  if (PySequence_Fast_GET_SIZE(fast) != size) {
    PyErr_Format(PyExc_ValueError, "num_accepted must have len(sessions) = %zd entries", size);
    Py_DECREF(fast);
    SWIG_fail;
  }
  counts = (int32_t*)malloc((size_t)(size ? size : 1) * sizeof(int32_t));
  if (!counts) {
    Py_DECREF(fast);
    PyErr_NoMemory();
    SWIG_fail;
  }
  for (i = 0; i < size; ++i) {
    long value = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
    if ((value == -1 && PyErr_Occurred()) || value < INT32_MIN || value > INT32_MAX) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_OverflowError, "num_accepted entry");
      Py_DECREF(fast);
      SWIG_fail;
    }
    counts[i] = (int32_t)value;
  }
  Py_DECREF(fast);
  $1 = ($1_ltype)addresses;
  $2 = (int32_t)size;
  $3 = counts;
}
%typemap(freearg) (void* const* sessions, int32_t n, const int32_t* num_accepted) {
  free(addresses$argnum);
  free(counts$argnum);
}

/* ---- helpers for the lumen package (not part of lumen.h) ----------------------------------- */
%nothread binding_buffer_address;
%nothread binding_dlpack_import;
%{
/* DLPack's ABI (dlpack.h, v0.x, stable since 2017): what __dlpack__ capsules hold. */
typedef struct {
  int32_t device_type;
  int32_t device_id;
} BindingDLDevice;
typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} BindingDLDataType;
typedef struct {
  void* data;
  BindingDLDevice device;
  int32_t ndim;
  BindingDLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
} BindingDLTensor;
typedef struct BindingDLManagedTensor {
  BindingDLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(struct BindingDLManagedTensor*);
} BindingDLManagedTensor;

static void binding_dlpack_release(PyObject* owner) {
  BindingDLManagedTensor* tensor =
      (BindingDLManagedTensor*)PyCapsule_GetPointer(owner, "lumen_dltensor");
  if (tensor && tensor->deleter) tensor->deleter(tensor);
}
%}

%feature("docstring") binding_buffer_address
  "Returns the address of the data a memoryview exposes (valid while the memoryview lives).";
%feature("docstring") binding_dlpack_import
  "Takes a 'dltensor' capsule from __dlpack__() and returns (address, device_type, device_id, "
  "dtype_code, dtype_bits, dtype_lanes, shape, strides or None, owner); the tensor is "
  "released when owner is garbage.";
%inline %{
PyObject* binding_buffer_address(PyObject* memory) {
  if (!PyMemoryView_Check(memory)) {
    PyErr_SetString(PyExc_TypeError, "expected a memoryview");
    return NULL;
  }
  return PyLong_FromVoidPtr(PyMemoryView_GET_BUFFER(memory)->buf);
}

PyObject* binding_dlpack_import(PyObject* capsule) {
  BindingDLManagedTensor* tensor;
  BindingDLTensor* t;
  PyObject *owner, *shape, *strides, *result;
  int32_t i;
  tensor = (BindingDLManagedTensor*)PyCapsule_GetPointer(capsule, "dltensor");
  if (!tensor) return NULL; /* a used or foreign capsule: the exception is set */
  /* Take ownership as the DLPack protocol says: rename the capsule, then release through
   * the tensor's deleter when the owner goes. */
  if (PyCapsule_SetName(capsule, "used_dltensor") < 0) return NULL;
  owner = PyCapsule_New(tensor, "lumen_dltensor", binding_dlpack_release);
  if (!owner) {
    if (tensor->deleter) tensor->deleter(tensor);
    return NULL;
  }
  t = &tensor->dl_tensor;
  shape = PyTuple_New(t->ndim);
  strides = t->strides ? PyTuple_New(t->ndim) : (Py_INCREF(Py_None), Py_None);
  if (!shape || !strides) {
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    Py_DECREF(owner);
    return NULL;
  }
  for (i = 0; i < t->ndim; ++i) {
    PyTuple_SET_ITEM(shape, i, PyLong_FromLongLong(t->shape[i]));
    if (t->strides) PyTuple_SET_ITEM(strides, i, PyLong_FromLongLong(t->strides[i]));
  }
  result = Py_BuildValue("(NiiiiiNNN)", PyLong_FromVoidPtr((char*)t->data + t->byte_offset),
                         (int)t->device.device_type, (int)t->device.device_id,
                         (int)t->dtype.code, (int)t->dtype.bits, (int)t->dtype.lanes, shape,
                         strides, owner);
  return result;
}
%}
