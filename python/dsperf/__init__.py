"""dsperf: DeepSeek-V3/R1 (MLA + fine-grained MoE) inference performance.

A C++ cost model of prefill and decode over device specs, exposed as pandas DataFrames::

    import dsperf
    dsperf.prefill("DeepSeek-V3", devices=["H800", "H20"], seq_len=4383, kv_cache_hit=0.563, tp=4, dp=8)
    dsperf.decode("DeepSeek-V3", devices=["H800"], seq_len=4383, batch_sizes=[32, 64, 128])

The package by concern: dsperf.seed (the seed analysis: formulas, tables, deviations),
dsperf.model (configs, devices, the grounded model, validation, explorer), dsperf.ops (one module per kernel family) with the front doors
dsperf.kernels and dsperf.reference, dsperf.cuda (GPU twins), dsperf.ep (expert parallelism),
dsperf.predict (kernel cost, harness, calibration, fit, plots, report). docs/ARCHITECTURE.md maps
every file.
"""
__version__ = "0.1.0"

from . import _C  # noqa: E402
from . import _aliases  # noqa: E402

_aliases.install()  # dsperf.harness, dsperf.kernel_cost, ...: the former flat names
from .model.api import decode, decode_sweep, prefill  # noqa: E402  (either model: mode="grounded" by default)
from .seed.formulas import (  # noqa: E402  (the seed analysis' own tables)
    EP_STRATEGIES,
    block_complexity,
    decode_batch_limits,
    ep_strategies,
    flops_summary,
    kv_cache_per_token,
    parameter_table,
    prefill_mla,
)
from .model.devices import DeviceSpec, device_table, list_devices, load_device  # noqa: E402
from .model.configs import ModelConfig, from_hf_config, list_models, load_model  # noqa: E402

__all__ = [
    "EP_STRATEGIES", "block_complexity", "DeviceSpec", "ModelConfig", "decode", "decode_batch_limits", "decode_sweep",
    "device_table", "ep_strategies", "flops_summary", "from_hf_config", "kv_cache_per_token", "list_devices",
    "list_models", "load_device", "load_model", "parameter_table", "prefill", "prefill_mla",
]


def __getattr__(name):
    """dsperf.hardware and the other former flat names, as attributes too."""
    if f"dsperf.{name}" in _aliases.FORMER_NAMES:
        import importlib

        return importlib.import_module(f"dsperf.{name}")
    raise AttributeError(f"module 'dsperf' has no attribute {name!r}")
