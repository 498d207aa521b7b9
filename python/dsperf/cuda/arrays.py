"""DeviceArray: a small GPU array without a framework.

It allocates device memory, copies to and from numpy, and knows its shape, dtype (numpy's, with
ml_dtypes' bfloat16 and float8_e4m3fn) and device. It speaks both exchange protocols:

* ``__cuda_array_interface__`` (version 3) out, and in from any object exposing it (CuPy, Numba,
  PyTorch for the dtypes it allows there);
* DLPack (``__dlpack__`` / ``__dlpack_device__``) out, and in from any producer (PyTorch, CuPy,
  JAX), including BF16 and FP8 e4m3fn tensors, which only DLPack can describe.

Foreign arrays come in without a copy: the DeviceArray points at their memory and keeps the
producer alive. Only C-contiguous arrays are accepted (the kernels assume dense rows).

The kernels run on the legacy default stream and, by default, wait for their work
(see ``dsperf.cuda.async_launches``); exported arrays name that stream.
"""
from __future__ import annotations

import math
import numbers

import ml_dtypes
import numpy as np

from .. import _C

_G = _C.cuda

BF16 = np.dtype(ml_dtypes.bfloat16)
FP8 = np.dtype(ml_dtypes.float8_e4m3fn)

# numpy dtype <-> DLPack (type code, bits). Codes from the DLPack specification: 0 int, 1 uint,
# 2 float, 4 bfloat, 6 bool, 10 float8_e4m3fn.
_DLPACK = {
    np.dtype(np.float32): (2, 32), np.dtype(np.float64): (2, 64), np.dtype(np.float16): (2, 16),
    np.dtype(np.int8): (0, 8), np.dtype(np.int16): (0, 16), np.dtype(np.int32): (0, 32), np.dtype(np.int64): (0, 64),
    np.dtype(np.uint8): (1, 8), np.dtype(np.uint16): (1, 16), np.dtype(np.uint32): (1, 32),
    np.dtype(np.uint64): (1, 64), np.dtype(np.bool_): (6, 8), BF16: (4, 16), FP8: (10, 8),
}
_FROM_DLPACK = {v: k for k, v in _DLPACK.items()}
KDL_CPU, KDL_CUDA, KDL_CUDA_MANAGED = 1, 2, 13
LEGACY_DEFAULT_STREAM = 1  # the __cuda_array_interface__ / DLPack name of CUDA's legacy default stream

# While a CUDA graph is captured, every array allocated joins this list, so that the memory the
# graph's kernels read and write lives as long as the graph (dsperf.cuda.CudaGraph sets it).
_capture_keep = None


def _shape(shape) -> tuple:
    if isinstance(shape, numbers.Integral):
        shape = (shape,)
    shape = tuple(shape)
    for s in shape:
        if isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 0:
            raise ValueError(f"shape must hold non-negative integers, got {shape}")
    return tuple(int(s) for s in shape)


def _dtype(dtype) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in _DLPACK:
        raise TypeError(f"dtype {dt} is not supported by DeviceArray (supported: "
                        f"{', '.join(sorted(str(d) for d in _DLPACK))})")
    return dt


def _c_strides(shape, itemsize):
    strides, step = [], itemsize
    for s in reversed(shape):
        strides.append(step)
        step *= max(s, 1)
    return tuple(reversed(strides))


class DeviceArray:
    """A C-contiguous array in GPU memory (see the module docstring)."""

    __slots__ = ("_ptr", "_shape", "_dtype", "_device", "_owner", "__weakref__")

    def __init__(self, shape, dtype, device: int = 0):
        """Allocates an uninitialised array on `device` (DeviceArray.zeros for a cleared one)."""
        shape, dtype = _shape(shape), _dtype(dtype)
        if isinstance(device, bool) or not isinstance(device, numbers.Integral) or device < 0:
            raise ValueError(f"device must be an integer >= 0, got {device!r}")
        alloc = _G.Allocation(math.prod(shape) * dtype.itemsize, int(device))
        self._set(alloc.ptr, shape, dtype, int(device), alloc)
        if _capture_keep is not None:
            _capture_keep.append(self)

    def _set(self, ptr, shape, dtype, device, owner):
        self._ptr, self._shape, self._dtype, self._device, self._owner = int(ptr), shape, dtype, device, owner

    @classmethod
    def _wrap(cls, ptr: int, shape, dtype, device: int, owner) -> "DeviceArray":
        """A view of existing device memory (no copy); `owner` is kept alive with it."""
        a = cls.__new__(cls)
        a._set(ptr, _shape(shape), _dtype(dtype), int(device), owner)
        return a

    # ---- construction and copies ---------------------------------------------------------------
    @classmethod
    def from_numpy(cls, a, device: int = 0) -> "DeviceArray":
        if not isinstance(a, np.ndarray):
            raise TypeError(f"from_numpy needs a numpy array, got {type(a).__name__}")
        a = np.ascontiguousarray(a)
        d = cls(a.shape, a.dtype, device)
        _G.copy_to_device(d._ptr, a.ctypes.data, a.nbytes, d._device)
        return d

    @classmethod
    def zeros(cls, shape, dtype, device: int = 0) -> "DeviceArray":
        d = cls(shape, dtype, device)
        _G.fill_zero(d._ptr, d.nbytes, d._device)
        return d

    def set(self, a) -> "DeviceArray":
        """Copies numpy `a` (this array's shape and dtype) into this array, in place: new inputs
        for a captured CUDA graph."""
        if not isinstance(a, np.ndarray):
            raise TypeError(f"set needs a numpy array, got {type(a).__name__}")
        if a.shape != self._shape or a.dtype != self._dtype:
            raise ValueError(f"set needs {self._dtype} {self._shape}, got {a.dtype} {a.shape}")
        a = np.ascontiguousarray(a)
        _G.copy_to_device(self._ptr, a.ctypes.data, a.nbytes, self._device)
        return self

    def numpy(self) -> np.ndarray:
        """A numpy copy (waits for the device's queued work first)."""
        out = np.empty(self._shape, self._dtype)
        _G.copy_to_host(out.ctypes.data, self._ptr, self.nbytes, self._device)
        return out

    to_numpy = numpy

    def copy(self) -> "DeviceArray":
        d = DeviceArray(self._shape, self._dtype, self._device)
        _G.copy_on_device(d._ptr, self._ptr, self.nbytes, self._device)
        return d

    def reshape(self, *shape) -> "DeviceArray":
        """The same memory under another shape (one entry may be -1)."""
        if len(shape) == 1 and not isinstance(shape[0], numbers.Integral):
            shape = tuple(shape[0])
        if shape.count(-1) > 1:
            raise ValueError("reshape: at most one dimension may be -1")
        if -1 in shape:
            known = math.prod(s for s in shape if s != -1)
            if known == 0 or self.size % known:
                raise ValueError(f"cannot reshape {self._shape} into {shape}")
            shape = tuple(self.size // known if s == -1 else s for s in shape)
        shape = _shape(shape)
        if math.prod(shape) != self.size:
            raise ValueError(f"cannot reshape {self._shape} ({self.size} elements) into {shape}")
        return DeviceArray._wrap(self._ptr, shape, self._dtype, self._device, self)

    def view(self, dtype) -> "DeviceArray":
        """The same bytes as another dtype of the same item size (e.g. bfloat16 <-> uint16)."""
        dt = _dtype(dtype)
        if dt.itemsize != self._dtype.itemsize:
            raise ValueError(f"view needs a dtype of {self._dtype.itemsize} bytes, got {dt} ({dt.itemsize})")
        return DeviceArray._wrap(self._ptr, self._shape, dt, self._device, self)

    # ---- description ---------------------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def device(self) -> int:
        return self._device

    @property
    def ptr(self) -> int:
        return self._ptr

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self) -> int:
        return math.prod(self._shape)

    @property
    def nbytes(self) -> int:
        return self.size * self._dtype.itemsize

    def __len__(self):
        if not self._shape:
            raise TypeError("len() of a 0-d DeviceArray")
        return self._shape[0]

    def __repr__(self):
        return f"DeviceArray(shape={self._shape}, dtype={self._dtype}, device={self._device})"

    # ---- exchange protocols --------------------------------------------------------------------
    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self._shape, "typestr": self._dtype.str, "descr": [("", self._dtype.str)],
                "data": (self._ptr, False), "strides": None, "version": 3, "stream": LEGACY_DEFAULT_STREAM}

    def __dlpack_device__(self):
        return (KDL_CUDA, self._device)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if dl_device is not None and tuple(dl_device) != (KDL_CUDA, self._device):
            raise BufferError(f"this DeviceArray lives on CUDA device {self._device}; it cannot be exported to "
                              f"{tuple(dl_device)} without a copy (use .numpy())")
        if copy:
            raise BufferError("DeviceArray exports without copying only (copy=True is not supported)")
        # Our work runs on the legacy default stream; a consumer on another stream must not read
        # before it ends. Waiting for the device is the simple, safe form of that ordering.
        if stream is not None and stream not in (-1, LEGACY_DEFAULT_STREAM):
            _G.synchronize(self._device)
        code, bits = _DLPACK[self._dtype]
        return _G.dlpack_export(self._ptr, list(self._shape), code, bits, KDL_CUDA, self._device, self)


# ---- foreign arrays in -------------------------------------------------------------------------
def _check_contiguous(name, shape, strides, itemsize):
    if strides is None:
        return
    strides = tuple(int(s) for s in strides)
    want = _c_strides(shape, itemsize)
    # Strides of dimensions of extent 1 carry no meaning (PyTorch reports arbitrary ones there).
    if any(s != w for s, w, n in zip(strides, want, shape) if n > 1):
        raise ValueError(f"{name} must be C-contiguous, got strides {strides} for shape {tuple(shape)}")


def from_cuda_array_interface(obj, name: str = "array", device: int | None = None) -> DeviceArray:
    """A DeviceArray viewing the memory `obj.__cuda_array_interface__` describes (no copy).
    device: the GPU owning the memory; None asks CUDA (which needs a GPU)."""
    cai = obj.__cuda_array_interface__
    if not isinstance(cai, dict):
        raise TypeError(f"{name}.__cuda_array_interface__ must be a dict, got {type(cai).__name__}")
    for key in ("shape", "typestr", "data", "version"):
        if key not in cai:
            raise ValueError(f"{name}.__cuda_array_interface__ lacks {key!r}")
    if cai.get("mask") is not None:
        raise ValueError(f"{name}: masked arrays are not supported")
    try:
        dtype = np.dtype(cai["typestr"])
    except TypeError as e:
        raise TypeError(f"{name}: typestr {cai['typestr']!r} is not a numpy dtype") from e
    if dtype.kind == "V":
        raise TypeError(f"{name}: typestr {cai['typestr']!r} does not say which dtype it is; pass BF16 or FP8 "
                        f"arrays through DLPack (__dlpack__), which names them")
    dtype = _dtype(dtype)
    shape = _shape(cai["shape"])
    _check_contiguous(name, shape, cai.get("strides"), dtype.itemsize)
    ptr = int(cai["data"][0])
    if device is None:
        device = _G.pointer_device(ptr) if _G.why_unavailable() == "" else -1
        if device < 0:
            raise TypeError(f"{name}: CUDA does not know the address {ptr:#x} as device memory")
    stream = cai.get("stream")
    if stream is not None and stream != LEGACY_DEFAULT_STREAM and cai["version"] >= 3:
        _G.synchronize(device)  # the producer's stream may still be writing; wait for the device
    return DeviceArray._wrap(ptr, shape, dtype, device, obj)


def from_dlpack(obj, name: str = "array") -> DeviceArray:
    """A DeviceArray viewing a DLPack producer's CUDA tensor (no copy)."""
    dev_type, dev_id = obj.__dlpack_device__()
    if int(dev_type) not in (KDL_CUDA, KDL_CUDA_MANAGED):
        where = "the CPU" if int(dev_type) == KDL_CPU else f"DLPack device type {int(dev_type)}"
        raise TypeError(f"{name} lives on {where}, not on a CUDA GPU")
    try:
        capsule = obj.__dlpack__(stream=LEGACY_DEFAULT_STREAM)
    except TypeError:  # producers of the older protocol take no stream
        capsule = obj.__dlpack__()
    info = _G.dlpack_import(capsule)
    return _from_dlpack_info(info, name, obj)


def _from_dlpack_info(info, name, obj=None) -> DeviceArray:
    if info["device_type"] not in (KDL_CUDA, KDL_CUDA_MANAGED):
        raise TypeError(f"{name}: the DLPack tensor is on device type {info['device_type']}, not CUDA")
    if info["lanes"] != 1:
        raise TypeError(f"{name}: vector dtypes (lanes = {info['lanes']}) are not supported")
    key = (info["code"], info["bits"])
    if key not in _FROM_DLPACK:
        raise TypeError(f"{name}: DLPack dtype (code {key[0]}, {key[1]} bits) is not supported")
    dtype = _FROM_DLPACK[key]
    shape = _shape(info["shape"])
    if info["strides"] is not None:
        _check_contiguous(name, shape, [s * dtype.itemsize for s in info["strides"]], dtype.itemsize)
    # The holder calls the producer's deleter when the last view goes.
    return DeviceArray._wrap(info["ptr"], shape, dtype, info["device_id"], (info["holder"], obj))


def is_device_array_like(obj) -> bool:
    return isinstance(obj, DeviceArray) or hasattr(obj, "__cuda_array_interface__") or (
        hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__") and not isinstance(obj, np.ndarray))


def _anonymous_cai(obj) -> bool:
    """True when obj's __cuda_array_interface__ gives a typestr that names no dtype ('<V2' for BF16,
    '<V1' for FP8, as PyTorch writes them): such a tensor must come through DLPack, which names it."""
    cai = obj.__cuda_array_interface__
    try:
        return isinstance(cai, dict) and np.dtype(cai.get("typestr")).kind == "V"
    except TypeError:
        return False


def as_device_array(obj, name: str = "array") -> DeviceArray:
    """obj as a DeviceArray without copying: a DeviceArray itself, or a view of an object exposing
    __cuda_array_interface__ or DLPack on a CUDA device (DLPack where the interface's typestr names
    no dtype, as for PyTorch's BF16 and FP8 tensors, which offer both). TypeError names `name`
    otherwise."""
    if isinstance(obj, DeviceArray):
        return obj
    if isinstance(obj, np.ndarray):
        raise TypeError(f"{name} is a numpy (host) array, not a GPU array")
    has_dlpack = hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__")
    if hasattr(obj, "__cuda_array_interface__") and not (has_dlpack and _anonymous_cai(obj)):
        return from_cuda_array_interface(obj, name)
    if has_dlpack:
        return from_dlpack(obj, name)
    raise TypeError(f"{name} must be a numpy array or a GPU array (DeviceArray, or an object with "
                    f"__cuda_array_interface__ or __dlpack__), got {type(obj).__name__}")
