"""Where physics says the grounded model must be monotone, is it? A census over sampled deployments.

More work never takes less time: a decode step is non-decreasing in the batch, the context
(kv_len) and the routing imbalance; a prefill step in its tokens (and imbalance). A slower part is
never faster: tokens/s per GPU is non-increasing when any bandwidth (memory, scale-up, scale-out) or
tensor peak (FP16, FP8, FP4) falls. Each property is checked on pairs of deployments that differ in
that one input, for every device family: devices priced with the H800 kernel table, the H20 table,
the derived Blackwell table, the AMD and Ascend tables (measured and derived rows), and without a
table (roofline at the default efficiency); decode samples BF16 and FP8 caches and FP8 attention math.

    PYTHONPATH=python python -m benchmarks.monotone_census     # 10,500 pairs per family
    PYTHONPATH=python python -m benchmarks.monotone_census --per-family 2000 --seed 1

Run it with PYTHONPATH pointing at another checkout to compare.

tests/test_monotone.py draws the same properties with hypothesis (a few hundred cases in CI).
"""
from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

from dsperf import grounded, load_device

FAMILIES = {"H800 table": ("H800", "H100", "H200"), "H20 table": ("H20", "H20-3e"),
            "Blackwell table (derived)": ("B200", "B300", "GB200", "GB300"),
            "AMD tables (measured and derived rows)": ("MI300X", "MI325X", "MI355X"),
            "Ascend table (measured and derived rows)": ("Ascend910C", "Ascend910B-376T"),
            "RTX 4090 table (derived)": ("RTX4090",)}
EP = (8, 16, 32, 64, 72, 128, 144, 256)
REDUNDANT = {8: 0, 16: 0, 32: 32, 64: 64, 72: 32, 128: 0, 144: 32, 256: 0}
MTP = ((0, 0.0), (1, 0.85), (2, 1.55))
# Attention TP: inside a node, and over two 8-GPU nodes (priced as NCCL over the network; a part whose
# node it neither divides nor spans is refused, and the pair skipped).
ATTN_TP = (1, 2, 4, 8, 16)
RATE_FIELDS = ("mem_bw_gbps", "nvlink_gbps", "scaleout_gbps", "fp16_tflops", "fp8_tflops", "fp4_tflops")
# Relative slack for rounding: the two prices of a pair are sums of the same calls' times.
REL_TOL = 1e-9
PROPERTIES = ("decode_batch", "decode_kv_len", "decode_imbalance", "prefill_tokens", "prefill_imbalance",
              "decode_rate_falls", "prefill_rate_falls")


def decode_config(rng, device: str) -> dict:
    """A decode deployment drawn over the explorer's axes (log-uniform batch and context)."""
    ep = int(rng.choice(EP))
    attn_tp = int(rng.choice(ATTN_TP))
    mtp, accepted = MTP[rng.integers(len(MTP))]
    spec = load_device(device)
    weights = ["fp8", "bf16"] + (["fp4"] if spec.fp4_tflops > 0 else [])
    kv_fp8 = bool(rng.integers(2))
    return dict(device=device, ep=ep, redundant_experts=REDUNDANT[ep], attn_tp=attn_tp,
                batch=float(np.exp(rng.uniform(np.log(1 / attn_tp), np.log(512)))),
                kv_len=float(np.exp(rng.uniform(0, np.log(131072)))), mtp=mtp, mtp_accepted=accepted,
                kv_fp8=kv_fp8, attn_fp8=kv_fp8 and bool(rng.integers(2)),
                overlap=str(rng.choice(("two_batch", "single_batch", "none"))),
                imbalance=float(rng.uniform(1, 4)), weight_dtype=str(rng.choice(weights)))


def prefill_config(rng, device: str) -> dict:
    ep = int(rng.choice(EP[:4]))
    prompt = float(np.exp(rng.uniform(0, np.log(131072))))
    return dict(device=device, ep=ep, redundant_experts=REDUNDANT[ep], attn_tp=int(rng.choice(ATTN_TP)),
                tokens=float(np.exp(rng.uniform(0, np.log(65536)))), prompt_len=prompt,
                overlap=str(rng.choice(("two_batch", "single_batch", "none"))), imbalance=float(rng.uniform(1, 4)))


def _price(phase: str, cfg: dict, device=None) -> dict:
    kw = dict(cfg)
    dev = kw.pop("device") if device is None else device
    kw.pop("device", None)
    return (grounded.decode if phase == "decode" else grounded.prefill)("DeepSeek-V3", dev, **kw)


def check_more_work(phase: str, cfg: dict, axis: str, factor: float) -> tuple[bool, float] | None:
    """(holds, ratio) for a pair that differs in `axis` (the second has factor x it, or imbalance
    plus factor - 1); None where the model refuses the deployment (a clean ValueError)."""
    more = dict(cfg)
    more[axis] = cfg[axis] + (factor - 1) if axis == "imbalance" else cfg[axis] * factor
    try:
        a, b = _price(phase, cfg)["step_ms"], _price(phase, more)["step_ms"]
    except ValueError:
        return None
    return b >= a * (1 - REL_TOL), b / a


def check_rate_falls(phase: str, cfg: dict, field: str, factor: float) -> tuple[bool, float] | None:
    """(holds, ratio): tokens/s per GPU with `field` scaled by factor (< 1) against the device's own."""
    spec = load_device(cfg["device"])
    if getattr(spec, field) == 0:  # no such unit (a part without FP4): nothing to lower
        return None
    slower = load_device(cfg["device"], **{field: getattr(spec, field) * factor})
    try:
        a = _price(phase, cfg)["tokens_per_gpu_s"]
        b = _price(phase, cfg, device=slower)["tokens_per_gpu_s"]
    except ValueError:
        return None
    return b <= a * (1 + REL_TOL), b / a


def run_property(name: str, rng, device: str):
    """One sampled pair of property `name` on `device`: (holds, ratio, config) or None (refused)."""
    factor = float(np.exp(rng.uniform(0, np.log(4))))
    if name.startswith("decode"):
        cfg = decode_config(rng, device)
    else:
        cfg = prefill_config(rng, device)
    phase = name.split("_")[0]
    if name.endswith("rate_falls"):
        spec = load_device(device)  # a unit the part has (no FP4 peak to lower on a part without one)
        field = str(rng.choice([f for f in RATE_FIELDS if getattr(spec, f) > 0]))
        out = check_rate_falls(phase, cfg, field, 1 / factor)
        cfg = {**cfg, "lowered": field, "factor": 1 / factor}
    else:
        axis = {"decode_batch": "batch", "decode_kv_len": "kv_len", "prefill_tokens": "tokens"}.get(name, "imbalance")
        out = check_more_work(phase, cfg, axis, factor)
        cfg = {**cfg, "axis": axis, "factor": factor}
    return None if out is None else (out[0], out[1], cfg)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--per-family", type=int, default=10_500, help="sampled pairs per device family (all properties)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    t0 = time.time()
    failures = 0
    # skipped: the model refused the deployment (a clean ValueError).
    print("| family | property | pairs checked | skipped | violations | worst ratio |")
    print("|---|---|---|---|---|---|")
    for family, devices in FAMILIES.items():
        for name in PROPERTIES:
            checked = refused = bad = 0
            worst, worst_cfg = 1.0, None
            for i in range(math.ceil(args.per_family / len(PROPERTIES))):
                r = run_property(name, rng, devices[i % len(devices)])
                if r is None:
                    refused += 1
                    continue
                holds, ratio, cfg = r
                checked += 1
                if not holds:
                    bad += 1
                    off = ratio if "rate" in name else 1 / ratio
                    if off > worst:
                        worst, worst_cfg = off, cfg
            failures += bad
            print(f"| {family} | {name} | {checked} | {refused} | {bad} | {worst:.4g} |", flush=True)
            if worst_cfg is not None:
                print(f"|   | worst case | {worst_cfg} | | | |")
    print(f"\n{failures} violations; {time.time() - t0:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
