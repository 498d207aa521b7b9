"""dsperf: DeepSeek-V3/R1 (MLA + fine-grained MoE) inference performance.

A C++ cost model of prefill and decode over device specs, exposed as pandas DataFrames::

    import dsperf
    dsperf.prefill("DeepSeek-V3", devices=["H800", "H20"], seq_len=4383, kv_cache_hit=0.563, tp=4, dp=8)
    dsperf.decode("DeepSeek-V3", devices=["H800"], seq_len=4383, batch_sizes=[32, 64, 128])
"""
__version__ = "0.1.0"

from . import _C  # noqa: E402
from .costmodel import (  # noqa: E402
    EP_STRATEGIES,
    block_complexity,
    decode,
    decode_batch_limits,
    decode_sweep,
    ep_strategies,
    flops_summary,
    kv_cache_per_token,
    parameter_table,
    prefill,
    prefill_mla,
)
from .hardware import DeviceSpec, device_table, list_devices, load_device  # noqa: E402
from .model import ModelConfig, from_hf_config, list_models, load_model  # noqa: E402

__all__ = [
    "EP_STRATEGIES", "block_complexity", "DeviceSpec", "ModelConfig", "decode", "decode_batch_limits", "decode_sweep",
    "device_table", "ep_strategies", "flops_summary", "from_hf_config", "kv_cache_per_token", "list_devices",
    "list_models", "load_device", "load_model", "parameter_table", "prefill", "prefill_mla",
]
