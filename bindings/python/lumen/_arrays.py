"""Arrays in and out of lumen without copies: the buffer protocol and DLPack."""

from . import capi

_FLOAT32, _BFLOAT16, _FLOAT16 = (capi.LUMEN_DTYPE_FLOAT32, capi.LUMEN_DTYPE_BFLOAT16,
                                 capi.LUMEN_DTYPE_FLOAT16)
_HOST, _DEVICE = capi.LUMEN_MEMORY_HOST, capi.LUMEN_MEMORY_DEVICE
_DTYPE_NAMES = {"float32": _FLOAT32, "bfloat16": _BFLOAT16, "float16": _FLOAT16}

# struct-module formats of the buffer protocol: 'H' (uint16) carries bf16 or fp16 bits and
# needs dtype= to say which.
_FORMATS = {"f": (_FLOAT32,), "e": (_FLOAT16,), "H": (_BFLOAT16, _FLOAT16)}

# DLPack device types and (type code, bits) of the dtypes lumen takes.
_DLPACK_CPU, _DLPACK_CUDA, _DLPACK_CUDA_HOST, _DLPACK_ROCM, _DLPACK_ROCM_HOST = 1, 2, 3, 10, 11
_DLPACK_CUDA_MANAGED = 13
_DLPACK_HOST_DEVICES = (_DLPACK_CPU, _DLPACK_CUDA_HOST, _DLPACK_ROCM_HOST)
_DLPACK_DTYPES = {(2, 32): _FLOAT32, (2, 16): _FLOAT16, (4, 16): _BFLOAT16}


def _dtype_code(dtype):
    if dtype is None:
        return None
    if isinstance(dtype, str):
        try:
            return _DTYPE_NAMES[dtype.lower()]
        except KeyError:
            raise ValueError("unknown dtype %r (float32, bfloat16 or float16)" % dtype)
    return int(dtype)


class Buffer:
    """An array lumen may read or write: its address, element count, lumen dtype and memory,
    and what keeps it alive and exported until release()."""

    def __init__(self, address, count, dtype, memory, keep):
        self.address, self.count, self.dtype, self.memory = address, count, dtype, memory
        self._keep = keep

    def release(self):
        keep, self._keep = self._keep, None
        if isinstance(keep, memoryview):
            keep.release()


def _from_buffer(obj, name, dtype, writable):
    view = memoryview(obj)
    if not view.c_contiguous:
        view.release()
        raise ValueError("%s must be C-contiguous" % name)
    if writable and view.readonly:
        view.release()
        raise TypeError("%s must be writable" % name)
    format_code = view.format
    choices = _FORMATS.get(format_code.lstrip("@=<"))
    if choices is None:
        view.release()
        raise TypeError("%s has element format %r; lumen takes float32 ('f'), float16 ('e') or "
                        "bf16/fp16 bits as uint16 ('H') with dtype=" % (name, format_code))
    if dtype is None:
        if len(choices) > 1:
            view.release()
            raise TypeError("%s holds uint16: say dtype='bfloat16' or 'float16'" % name)
        dtype = choices[0]
    elif dtype not in choices:
        view.release()
        raise TypeError("%s has element format %r, which cannot hold dtype %d"
                        % (name, format_code, dtype))
    count = view.nbytes // view.itemsize
    return Buffer(capi.binding_buffer_address(view) if count else None, count, dtype, _HOST,
                  view)


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
        raise TypeError("%s is DLPack dtype %d, not the dtype %d asked for" % (name, found, dtype))
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
    return Buffer(address if count else None, count, found, memory, owner)


def as_buffer(obj, name, dtype=None, stream=None, writable=False):
    """A Buffer over obj: a Buffer as it is, any C-contiguous buffer-protocol object, or
    any object with __dlpack__ (host or device memory)."""
    if isinstance(obj, Buffer):
        return obj
    dtype = _dtype_code(dtype)
    try:
        memoryview(obj).release()
    except TypeError:
        if not hasattr(obj, "__dlpack__"):
            raise TypeError("%s: expected a C-contiguous buffer (numpy, array, bytes...) or an "
                            "object with __dlpack__, got %s" % (name, type(obj).__name__))
        return _from_dlpack(obj, name, dtype, stream)
    return _from_buffer(obj, name, dtype, writable)


def new_output(count, dtype, shape):
    """A new host array of `count` elements: a numpy array of `shape` when numpy is there,
    an array.array otherwise (uint16 for bf16 and fp16)."""
    try:
        import numpy
    except ImportError:
        import array
        return array.array("f" if dtype == _FLOAT32 else "H", bytes(count * (
            4 if dtype == _FLOAT32 else 2)))
    numpy_dtype = {_FLOAT32: numpy.float32, _FLOAT16: numpy.float16}.get(dtype, numpy.uint16)
    array = numpy.empty(count, dtype=numpy_dtype)
    return array.reshape(shape) if shape is not None else array
