"""The native library, status codes and errors, and the conversions of
shapes, dtypes and numpy buffers that the other modules share."""

import enum

import numpy as np

from ._native import ffi, lib


F32 = "f32"
I32 = "i32"
# bfloat16 has no numpy type: its elements travel as numpy.uint16 arrays of
# their bit patterns (the upper half of an f32), made with to_bf16 and read
# with from_bf16. f16 is numpy.float16.
BF16 = "bf16"
F16 = "f16"
_DTYPE_CODE = {F32: lib.SALUS_F32, I32: lib.SALUS_I32, BF16: lib.SALUS_BF16, F16: lib.SALUS_F16}
_NUMPY = {lib.SALUS_F32: np.dtype(np.float32), lib.SALUS_I32: np.dtype(np.int32),
          lib.SALUS_BF16: np.dtype(np.uint16), lib.SALUS_F16: np.dtype(np.float16)}


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
            raise ValueError(f"unknown dtype {dtype!r} (known: f32, i32, bf16, f16)")
        return _DTYPE_CODE[dtype]
    npd = np.dtype(dtype)
    if npd == np.uint16:
        raise ValueError("uint16 is ambiguous: say dtype=\"bf16\" for bfloat16 bit patterns")
    for code, known in _NUMPY.items():
        if npd == known:
            return code
    raise ValueError(f"salus tensors are float32, int32, bf16 or float16, not {npd}")


def _half(src_dtype, array, out_dtype):
    """f32 values (any float array) narrowed to a 16-bit type by the C
    library, rounding as salusd does."""
    src = np.ascontiguousarray(array, dtype=np.float32)
    out = np.empty(src.shape, dtype=out_dtype)
    rc = lib.salus_half_from_f32(src_dtype, ffi.cast("const float *", ffi.from_buffer(src)),
                                 ffi.cast("uint16_t *", ffi.from_buffer(out)), src.size)
    if rc:
        raise Error(rc, "converting to a 16-bit float")
    return out


def to_bf16(array):
    """bfloat16 bit patterns (a numpy.uint16 array of the same shape) of the
    values of a float array, rounded to nearest, ties to even, as salusd
    and PyTorch's .to(torch.bfloat16) round: NaN stays NaN, values beyond
    bf16's range become infinity."""
    return _half(lib.SALUS_BF16, array, np.uint16)


def from_bf16(bits):
    """The float32 values (exact) of bfloat16 bit patterns (uint16)."""
    src = np.ascontiguousarray(bits)
    if src.dtype != np.uint16:
        raise ValueError(f"bf16 bit patterns are uint16, not {src.dtype}")
    out = np.empty(src.shape, dtype=np.float32)
    rc = lib.salus_half_to_f32(lib.SALUS_BF16, ffi.cast("const uint16_t *", ffi.from_buffer(src)),
                               ffi.cast("float *", ffi.from_buffer(out)), src.size)
    if rc:
        raise Error(rc, "converting from bf16")
    return out


def _convert(array, dtype_code):
    """array as the elements of dtype_code: floats given for a bf16 or f16
    tensor are rounded (to_bf16; f16 through float32, as the C library
    rounds); uint16 for bf16 and float16 for f16 are taken as they are."""
    a = np.asarray(array)
    if dtype_code == lib.SALUS_BF16:
        if a.dtype == np.uint16:
            return a
        if a.dtype.kind != "f":
            raise ValueError(f"bf16 data is uint16 bit patterns or floats, not {a.dtype}")
        return to_bf16(a)
    if dtype_code == lib.SALUS_F16 and a.dtype != np.float16:
        if a.dtype.kind not in "fiub":
            raise ValueError(f"f16 data is numbers, not {a.dtype}")
        return _half(lib.SALUS_F16, a, np.float16)
    return a


def _buffer(array, dtype_code, shape, what):
    """A C-contiguous array of the right dtype and size (the caller's own
    array when it already is one) and a pointer into it."""
    a = np.ascontiguousarray(_convert(array, dtype_code), dtype=_NUMPY[dtype_code])
    if a.size != int(np.prod(shape)):
        raise ValueError(f"{what}: {a.size} elements given, {tuple(shape)} needs {int(np.prod(shape))}")
    return a, ffi.from_buffer(a)


def default_url():
    """The URL salus.connect() uses when given none ($SALUS_URL, else the
    user's own salusd socket, else the system's)."""
    return _text(lib.salus_default_url())
