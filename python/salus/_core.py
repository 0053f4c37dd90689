"""The native library, status codes and errors, and the conversions of
shapes, dtypes and numpy buffers that the other modules share."""

import enum

import numpy as np

from ._native import ffi, lib


F32 = "f32"
I32 = "i32"
_DTYPE_CODE = {F32: lib.SALUS_F32, I32: lib.SALUS_I32}
_NUMPY = {lib.SALUS_F32: np.dtype(np.float32), lib.SALUS_I32: np.dtype(np.int32)}


class Code(enum.IntEnum):
    """salus status codes: the numbers of the C API and of the wire protocol."""
    OK = lib.SALUS_OK
    EINVAL = lib.SALUS_EINVAL
    ENOMEM = lib.SALUS_ENOMEM
    EEXHAUSTED = lib.SALUS_EEXHAUSTED
    ENOTFOUND = lib.SALUS_ENOTFOUND
    EPERM = lib.SALUS_EPERM
    EPROTO = lib.SALUS_EPROTO
    EDEVICE = lib.SALUS_EDEVICE
    ENODEV = lib.SALUS_ENODEV
    ESHUTDOWN = lib.SALUS_ESHUTDOWN
    EUNSUPPORTED = lib.SALUS_EUNSUPPORTED
    ETIMEDOUT = lib.SALUS_ETIMEDOUT
    ECONN = lib.SALUS_ECONN
    EINTERNAL = lib.SALUS_EINTERNAL
    ESESSIONLOST = lib.SALUS_ESESSIONLOST
    EDEVICERESET = lib.SALUS_EDEVICERESET
    EBUSY = lib.SALUS_EBUSY


class Error(Exception):
    """A failed salus call.

    code     the status code (a Code, or a plain int for a code this binding
             does not know)
    message  the server's (or library's) explanation; may be empty
    """

    def __init__(self, code, message=""):
        try:
            code = Code(code)
        except ValueError:
            pass
        self.code = code
        self.message = message
        text = _text(lib.salus_strerror(int(code)))
        name = code.name if isinstance(code, Code) else str(int(code))
        super().__init__(f"{name}: {message}" if message else f"{name}: {text}")


def _text(cstr):
    return ffi.string(cstr).decode("utf-8", "replace") if cstr != ffi.NULL else ""


def _dims(shape):
    shape = tuple(int(d) for d in shape)
    if not 0 < len(shape) <= lib.SALUS_MAX_DIMS:
        raise ValueError(f"a shape has 1 to {lib.SALUS_MAX_DIMS} dimensions, not {len(shape)}")
    return shape, ffi.new("int64_t[]", shape)


def _dtype_code(dtype):
    if isinstance(dtype, str):
        if dtype not in _DTYPE_CODE:
            raise ValueError(f"unknown dtype {dtype!r} (known: f32, i32)")
        return _DTYPE_CODE[dtype]
    for code, npd in _NUMPY.items():
        if np.dtype(dtype) == npd:
            return code
    raise ValueError(f"salus tensors are float32 or int32, not {np.dtype(dtype)}")


def _buffer(array, dtype_code, shape, what):
    """A C-contiguous array of the right dtype and size (the caller's own
    array when it already is one) and a pointer into it."""
    a = np.ascontiguousarray(array, dtype=_NUMPY[dtype_code])
    if a.size != int(np.prod(shape)):
        raise ValueError(f"{what}: {a.size} elements given, {tuple(shape)} needs {int(np.prod(shape))}")
    return a, ffi.from_buffer(a)


def default_url():
    """The URL salus.connect() uses when given none ($SALUS_URL, else the
    user's own salusd socket, else the system's)."""
    return _text(lib.salus_default_url())
