"""The CPU kernels on numpy arrays (BF16 and FP8 as ml_dtypes' bfloat16 and float8_e4m3fn).

Every function checks its arrays (type, dtype, shape, C-contiguity) and raises TypeError or
ValueError naming the argument; inputs are never modified; outputs are new arrays; the GIL is
released while the C++ kernels run. ``isa()`` says which micro-kernels this CPU uses
("avx512_bf16" or "portable"; set DSPERF_ISA=portable to force the portable ones, or
DSPERF_ISA=avx512_bf16 where a virtual machine's CPUID hides BF16 but the CPU runs it;
``cpu_features()["why"]`` says which rule chose).

The same calls run on the GPU when their arrays live there (dsperf.cuda DeviceArrays, or PyTorch /
CuPy tensors through __cuda_array_interface__ or DLPack): rmsnorm, apply_rope, silu_mul, act_quant,
moe_gate, moe_permute, moe_unpermute, experts_contiguous, experts_masked and mla_decode hand such
calls to their dsperf.cuda twins, whose results stay on the GPU; host and GPU arrays mixed in one
call raise TypeError naming the argument.
"""
from __future__ import annotations

# One module per kernel family; this package is their front door (dsperf.kernels.<name>).
from ._base import BF16, F32, FP8, _K, _gate_args, amx_status, cpu_features, isa  # noqa: F401
from .blocks import (  # noqa: F401
    PackedWeights, linear, rmsnorm, rope_frequencies, rope_mscale, apply_rope, embedding, silu_mul, act_quant, weight_dequant,
)
from .moe import (  # noqa: F401
    PackedExperts, moe_gate, moe_route, moe_permute, moe_unpermute, experts_contiguous, experts_masked, moe_layer, _moe_binding_args,
)
from .mla import (  # noqa: F401
    PagedMlaCache, paged_cache_write, mla_decode, MLA_VARIANTS, _MLA_BF16, _MLA_F32, MlaCache, _check_mla_call, _mla_weights, mla_prolog, mla_absorb_weights, mla_forward, _paged_rows, mla_forward_paged,
)
from .layer import (  # noqa: F401
    _moe_args, decode_layer, _decode_layer_args, decode_layer_by_ops,
)
