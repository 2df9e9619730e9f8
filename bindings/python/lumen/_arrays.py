"""Arrays in and out of lumen without copies: the buffer protocol and DLPack, the shape check,
and the arrays lumen allocates for its outputs."""

import array
import ctypes
import sys

from . import capi

_FLOAT32, _BFLOAT16, _FLOAT16 = (capi.LUMEN_DTYPE_FLOAT32, capi.LUMEN_DTYPE_BFLOAT16,
                                 capi.LUMEN_DTYPE_FLOAT16)
_HOST, _DEVICE = capi.LUMEN_MEMORY_HOST, capi.LUMEN_MEMORY_DEVICE
_DTYPE_NAMES = {"float32": _FLOAT32, "bfloat16": _BFLOAT16, "float16": _FLOAT16}
_NAME_OF_DTYPE = {code: name for name, code in _DTYPE_NAMES.items()}

# struct-module formats of the buffer protocol: 'H' (uint16) carries bf16 or fp16 bits and
# needs dtype= to say which.
_FORMATS = {"f": (_FLOAT32,), "e": (_FLOAT16,), "H": (_BFLOAT16, _FLOAT16)}
_BYTE_FORMATS = ("B", "b", "c")

# DLPack's host device types (kDLCPU, kDLCUDAHost, kDLROCMHost; any other is device memory)
# and (type code, bits) of the dtypes lumen takes.
_DLPACK_HOST_DEVICES = (1, 3, 11)
_DLPACK_DTYPES = {(2, 32): _FLOAT32, (2, 16): _FLOAT16, (4, 16): _BFLOAT16}


def dtype_code(dtype):
    """lumen's dtype code for a DType, its int, or a name ("float32", "bfloat16", "float16");
    None stays None."""
    if dtype is None:
        return None
    code = _DTYPE_NAMES.get(dtype.lower()) if isinstance(dtype, str) else int(dtype)
    if code not in _NAME_OF_DTYPE:
        raise ValueError("unknown dtype %r (float32, bfloat16 or float16)" % (dtype,))
    return code


class Buffer:
    """An array lumen may read or write: its address, element count, lumen dtype and memory;
    its shape (None for a flat array, which is checked by its count only); the DLPack object
    it came from (None for a buffer-protocol object); and what keeps it alive and exported
    until release()."""

    def __init__(self, address, count, dtype, memory, shape, source, keep):
        self.address, self.count, self.dtype, self.memory = address, count, dtype, memory
        self.shape, self.source = shape, source
        self._keep = keep

    def release(self):
        keep, self._keep = self._keep, None
        if isinstance(keep, memoryview):
            keep.release()


def _carried_shape(shape):
    """The shape an array carries, or None for a flat (0-D or 1-D) one."""
    return tuple(shape) if len(shape) > 1 else None


def _from_buffer(obj, name, dtype, writable):
    view = memoryview(obj)
    try:
        if not view.c_contiguous:
            raise ValueError("%s must be C-contiguous" % name)
        if writable and view.readonly:
            raise TypeError("%s must be writable" % name)
        format_code = view.format
        if format_code in _BYTE_FORMATS:
            raise TypeError("%s holds bytes (format %r); lumen takes float32 ('f'), float16 "
                            "('e') or bf16/fp16 bits as uint16 ('H' with dtype=): to pass raw "
                            "float32 bytes, view them as memoryview(%s).cast('f')"
                            % (name, format_code, name))
        choices = _FORMATS.get(format_code.lstrip("@=<"))
        if choices is None:
            raise TypeError("%s has element format %r; lumen takes float32 ('f'), float16 "
                            "('e') or bf16/fp16 bits as uint16 ('H') with dtype="
                            % (name, format_code))
        if dtype is None:
            if len(choices) > 1:
                raise TypeError("%s holds uint16: say dtype='bfloat16' or 'float16'" % name)
            dtype = choices[0]
        elif dtype not in choices:
            raise TypeError("%s has element format %r, which cannot hold dtype %s"
                            % (name, format_code, _NAME_OF_DTYPE.get(dtype, dtype)))
    except Exception:
        view.release()
        raise
    count = view.nbytes // view.itemsize
    return Buffer(capi.binding_buffer_address(view) if count else None, count, dtype, _HOST,
                  _carried_shape(view.shape), None, view)


def _from_dlpack(obj, name, dtype, stream):
    device_type = None
    if hasattr(obj, "__dlpack_device__"):
        device_type = int(obj.__dlpack_device__()[0])
    if device_type is not None and device_type not in _DLPACK_HOST_DEVICES and stream is not None:
        capsule = obj.__dlpack__(stream=stream)
    else:
        capsule = obj.__dlpack__()
    (address, device_type, _, code, bits, lanes, shape, strides,
     owner) = capi.binding_dlpack_import(capsule)
    found = _DLPACK_DTYPES.get((code, bits)) if lanes == 1 else None
    if found is None:
        raise TypeError("%s has DLPack dtype (code %d, %d bits, %d lanes); lumen takes float32, "
                        "float16 or bfloat16" % (name, code, bits, lanes))
    if dtype is not None and dtype != found:
        raise TypeError("%s is %s, not the %s asked for"
                        % (name, _NAME_OF_DTYPE[found], _NAME_OF_DTYPE.get(dtype, dtype)))
    count = 1
    for extent in shape:
        count *= extent
    if strides is not None:
        expected = 1
        for extent, stride in reversed(list(zip(shape, strides))):
            if extent != 1 and stride != expected:
                raise ValueError("%s must be C-contiguous (DLPack strides %r)" % (name, strides))
            expected *= extent
    memory = _HOST if device_type in _DLPACK_HOST_DEVICES else _DEVICE
    return Buffer(address if count else None, count, found, memory, _carried_shape(shape), obj,
                  owner)


def as_buffer(obj, name, dtype=None, stream=None, writable=False):
    """A Buffer over obj: a Buffer as it is, any C-contiguous buffer-protocol object, or
    any object with __dlpack__ (host or device memory)."""
    if isinstance(obj, Buffer):
        return obj
    dtype = dtype_code(dtype)
    try:
        memoryview(obj).release()
    except TypeError:
        if not hasattr(obj, "__dlpack__"):
            raise TypeError("%s: expected a C-contiguous buffer (numpy, array, memoryview...) or "
                            "an object with __dlpack__, got %s" % (name, type(obj).__name__))
        return _from_dlpack(obj, name, dtype, stream)
    return _from_buffer(obj, name, dtype, writable)


class HostFloats:
    """An fp32 host array for the header's `(float* values, int64_t count)` parameters (model
    parameters and session states): `argument` is what the call takes (a buffer), `shape` the
    shape the array carries (None when flat). release() after the call."""

    def __init__(self, argument, shape, keep=None):
        self.argument, self.shape, self._keep = argument, shape, keep

    def release(self):
        keep, self._keep = self._keep, None
        if keep is not None:
            keep.release()


def host_floats(obj, name, writable=False):
    """A HostFloats over obj: a buffer-protocol object as it is (the call checks its format
    and, when writable, that it is), a host DLPack tensor through a view of its memory, or
    unless writable a sequence of numbers as a new array.array of fp32."""
    try:
        view = memoryview(obj)
    except TypeError:
        pass
    else:
        with view:
            return HostFloats(obj, _carried_shape(view.shape))
    if not hasattr(obj, "__dlpack__"):
        if writable:
            raise TypeError("%s must be a writable buffer or a host DLPack tensor, not %s"
                            % (name, type(obj).__name__))
        return HostFloats(array.array("f", obj), None)
    buffer = _from_dlpack(obj, name, None, None)
    if buffer.memory != _HOST or buffer.dtype != _FLOAT32:
        buffer.release()
        raise TypeError("%s must be float32 in host memory (copy a device tensor to the host: "
                        "x.cpu() for PyTorch)" % name)
    if buffer.count:
        argument = (ctypes.c_float * buffer.count).from_address(buffer.address)
    else:
        argument = array.array("f")
    return HostFloats(argument, buffer.shape, buffer)


def check_shape(shape, name, call, axes, leading_one=False):
    """Raises ValueError unless `shape` (a carried shape, or None for a flat array) is None or
    the extents of `axes`, pairs like ("T", 19); an extent of None is unknown (any value fails:
    it is shown by its axis name). leading_one: a leading extent of 1 is accepted too."""
    if shape is None:
        return
    expected = tuple(extent for _, extent in axes)
    if shape == expected or (leading_one and shape == (1,) + expected):
        return
    shown = "(%s)" % ", ".join(str(axis if extent is None else extent) for axis, extent in axes)
    if len(axes) == 1:
        shown = shown[:-1] + ",)"
    names = ", ".join(axis for axis, _ in axes)
    raise ValueError("%s has shape %s, but %s takes %s as [%s] = %s%s" % (
        name, shape, call, name, names, shown, " (or [1, %s])" % names if leading_one else ""))


def new_output(shape, dtype, like=None):
    """A new array of `shape` and lumen dtype `dtype` for lumen to write. When `like` (a
    Buffer) came through DLPack, an array of its library on its device, made by the array
    API's empty(shape, dtype=, device=) of its __array_namespace__() or, without one, of the
    module that defines its type (torch.empty for PyTorch). Otherwise, and for host arrays of
    a library with neither, a numpy array (an array.array of `shape`'s product without numpy,
    uint16 for bf16 and fp16)."""
    namespace = _namespace(like.source) if like is not None and like.source is not None else None
    if namespace is not None:
        element = getattr(namespace, _NAME_OF_DTYPE[dtype], None)
        if element is None:
            raise TypeError("%s has no %s to allocate o with: pass out=" % (
                getattr(namespace, "__name__", "the array namespace"), _NAME_OF_DTYPE[dtype]))
        device = getattr(like.source, "device", None)
        if device is None:
            return namespace.empty(shape, dtype=element)
        return namespace.empty(shape, dtype=element, device=device)
    if like is not None and like.memory != _HOST:
        raise ValueError("the inputs are in device memory and %s has no array namespace for "
                         "lumen to allocate o with: pass out= on the same device"
                         % type(like.source).__name__)
    count = 1
    for extent in shape:
        count *= extent
    try:
        import numpy
    except ImportError:
        return array.array("f" if dtype == _FLOAT32 else "H", bytes(count * (
            4 if dtype == _FLOAT32 else 2)))
    numpy_dtype = {_FLOAT32: numpy.float32, _FLOAT16: numpy.float16}.get(dtype, numpy.uint16)
    return numpy.empty(shape, dtype=numpy_dtype)


def _namespace(obj):
    """The array namespace of a DLPack object: __array_namespace__() (the array API
    standard), else the innermost module of its type's that has empty() and float32."""
    get = getattr(obj, "__array_namespace__", None)
    if get is not None:
        return get()
    module = type(obj).__module__
    while module:
        candidate = sys.modules.get(module)
        if callable(getattr(candidate, "empty", None)) and hasattr(candidate, "float32"):
            return candidate
        module = module.rpartition(".")[0]
    return None
