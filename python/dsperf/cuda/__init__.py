"""CUDA kernels with the semantics of their `dsperf.kernels` twins.

Every kernel takes either numpy arrays (copied to the GPU, run, results copied back as numpy) or
GPU arrays -- ``DeviceArray``, or any object exposing ``__cuda_array_interface__`` or DLPack, such
as PyTorch or CuPy tensors, taken without a copy -- in which case results stay on the GPU as
DeviceArray. Mixing host and GPU arrays in one call raises TypeError naming the argument; GPU
arrays on different devices raise ValueError.

Arguments are checked on the host first (dtype, shape, and for numpy inputs their values), so a
bad call raises ValueError/TypeError naming the argument on any machine; a good call on a machine
without a GPU raises RuntimeError saying why (``available()`` tells beforehand). Values held on
the GPU (ids, offsets, block tables) are checked there before the kernel proper.

Kernels run on the legacy default stream and wait for their work unless inside
``async_launches()`` (benchmarks), which ends by waiting for the device.
"""
from __future__ import annotations

# One module per family; this package is their front door. _G (the binding) stays here too, for
# the callers that reach it directly.
from ._base import _G, F32, I32, I64, available  # noqa: F401
from .arrays import (BF16, FP8, DeviceArray, as_device_array, from_cuda_array_interface, from_dlpack,  # noqa: F401
                     is_device_array_like)
from .device import (  # noqa: F401
    device_count, device_name, synchronize, async_launches, CudaGraph,
)
from .elementwise import (  # noqa: F401
    rmsnorm, silu_mul, act_quant, apply_rope, moe_gate, moe_permute, moe_unpermute,
)
from .experts import (  # noqa: F401
    _check_offsets, _check_counts, grouped_gemm, _experts, experts_contiguous, experts_masked, cublas_gemm_bf16,
)
from .mla import (  # noqa: F401
    MlaMetadata, get_mla_metadata, mla_decode, mla_prefill,
)

__all__ = ["DeviceArray", "available", "device_count", "device_name", "as_device_array", "from_dlpack",
           "from_cuda_array_interface", "synchronize", "async_launches", "rmsnorm", "silu_mul", "act_quant",
           "apply_rope", "moe_gate", "moe_permute", "moe_unpermute", "grouped_gemm", "experts_contiguous",
           "experts_masked", "cublas_gemm_bf16", "get_mla_metadata", "MlaMetadata", "mla_decode", "mla_prefill",
           "CudaGraph"]

