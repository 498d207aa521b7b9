"""Predicted against measured on a GPU: the grounded model's price of each dense GEMM shape in its
kernel table, against the same GEMM timed on this GPU through PyTorch.

    python benchmarks/gpu_model_check.py [--device H200] [--table H800] [--iters 15] [--csv out.csv]

The grounded model prices a GEMM as its datasheet roofline divided by the efficiency its kernel
table measured at that shape (data/efficiency/<table>.csv, DeepGEMM's FP8 GEMMs on an H800; an H100
or H200 reuses that table through its own roofline). Here every `gemm_fp8` row of the table is
timed as
  - FP8: torch._scaled_mm (cuBLASLt, per-tensor scales; DeepGEMM's 1x128 / 128x128 block scales
    cost a little more on the same tensor cores), BF16 output;
  - BF16: torch.matmul, priced by the model at its default efficiency (no BF16 table rows),
and both are printed beside the model's latency at the tables' clock (clock_ratio 1: a short
benchmark loop, like the tables'). Before every launch the L2 is flushed by writing a buffer four
times its size, so weights come from HBM as in a model step. The measured figure is the GEMM's own
kernel time from PyTorch's profiler (CUPTI), averaged over --iters launches: the way DeepGEMM's
benchmarks, whose numbers fill the table, time kernels. The median of CUDA-event times around each
launch is printed beside it (`*_event_us`): it adds the launch gap, about 10 us after a flush, which
swamps the small-M shapes. Without a CUDA GPU (or PyTorch) it says so and exits 0.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

try:
    import dsperf  # noqa: F401
except ImportError:  # run from a checkout without an install: dsperf from its python/ folder
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
# The timing and pricing pieces live in dsperf (shared with `dsperf measure-gpu`); re-exported here
# under the names this script always had.
from dsperf.predict.gpu_timing import (ClockSampler, _device_us, _is_gpu_kernel, flush_kernel_names,  # noqa: E402,F401
                                       gpu_device_name, kernel_us, predicted_us, time_us)


def measure_row(torch, SM, tables, spec, r, iters, flush, flush_kernels, one) -> dict:
    """One table row's GEMM timed in FP8 and BF16, beside the model's price of each."""
    m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
    a16 = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b16 = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.05
    a8, b8 = a16.to(torch.float8_e4m3fn), b16.to(torch.float8_e4m3fn)
    fp8 = lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
    bf16 = lambda: a16 @ b16.t()  # noqa: E731
    fp8_us = kernel_us(torch, fp8, iters, flush, flush_kernels)
    bf16_us = kernel_us(torch, bf16, iters, flush, flush_kernels)
    fp8_event_us, bf16_event_us = time_us(torch, fp8, iters, flush), time_us(torch, bf16, iters, flush)
    p8, found8 = predicted_us(SM, tables, spec, "gemm_fp8", m, n, k)
    p16, found16 = predicted_us(SM, tables, spec, "gemm_bf16", m, n, k)
    flops = 2.0 * m * n * k
    return dict(m=m, n=n, k=k, fp8_measured_us=fp8_us, fp8_predicted_us=p8, fp8_error=p8 / fp8_us - 1,
                fp8_tflops=flops / fp8_us / 1e6, fp8_event_us=fp8_event_us, fp8_from_table=found8,
                bf16_measured_us=bf16_us, bf16_predicted_us=p16, bf16_error=p16 / bf16_us - 1,
                bf16_tflops=flops / bf16_us / 1e6, bf16_event_us=bf16_event_us, bf16_from_table=found16)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", help="device file to price with (default: from the GPU's name)")
    ap.add_argument("--table", default="H800", help="kernel table whose gemm_fp8 shapes are timed")
    ap.add_argument("--iters", type=int, default=15)
    ap.add_argument("--csv", help="also write the rows to this CSV file")
    args = ap.parse_args(argv)
    if args.iters < 1:
        ap.error(f"--iters must be >= 1, got {args.iters}")
    try:
        import torch
    except ImportError:
        print("gpu_model_check needs PyTorch with CUDA; it is not installed. Nothing measured.")
        return 0
    if not torch.cuda.is_available():
        print("gpu_model_check needs a CUDA GPU; none is usable here. Nothing measured.")
        return 0
    from dsperf.model import grounded as G
    from dsperf.model.devices import load_device

    device = args.device or gpu_device_name(torch)
    if device is None:
        ap.error(f"--device is needed: no device file matches '{torch.cuda.get_device_name(0)}'")
    spec, tables = load_device(device), G.kernel_tables(device)
    SM = G.SM
    rows = [r for r in G.read_table_rows(G.tables_dir() / f"{args.table}.csv") if r["family"] == "gemm_fp8"]
    print(f"GPU 0: {torch.cuda.get_device_name(0)}; priced as {device} (kernel table {G.kernel_table_name(device)}); "
          f"{len(rows)} GEMM shapes of {args.table}.csv; torch {torch.__version__}")
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(l2, dtype=torch.int32, device="cuda")  # 4 bytes each: four times the L2
    flush_kernels = flush_kernel_names(torch, flush)
    one = torch.ones((), dtype=torch.float32, device="cuda")
    out = []
    sampler = ClockSampler()
    with sampler:
        for r in rows:
            out.append(measure_row(torch, SM, tables, spec, r, args.iters, flush, flush_kernels, one))
    df = pd.DataFrame(out)
    print(df.to_markdown(index=False, floatfmt=".3g"))
    clock = sampler.summary()
    if clock is None:
        print("SM clock during the measurement: not sampled (no nvidia-smi)")
    else:
        mhz = np.array([v[0] for _, v in sampler.samples], dtype=float)
        print(f"SM clock during the measurement: median {clock[0]:.0f} MHz (range {np.nanmin(mhz):.0f} .. "
              f"{np.nanmax(mhz):.0f}, {clock[4]} samples) of {clock[1]:.0f} maximum; power median {clock[2]:.0f} W "
              f"of {clock[3]:.0f} W")
    for dt in ("fp8", "bf16"):
        err = df[f"{dt}_error"].to_numpy()
        big = df[df.m >= 1024][f"{dt}_error"].to_numpy()
        print(f"{dt.upper()}: model / measured - 1 over {len(err)} shapes: median {np.median(err):+.1%}, "
              f"median |error| {np.median(np.abs(err)):.1%}, range {err.min():+.1%} .. {err.max():+.1%}; "
              f"m >= 1024 ({len(big)} shapes): median {np.median(big):+.1%}")
    print("Positive error: the model predicts slower than measured. The FP8 predictions come from DeepGEMM's "
          "block-scaled kernels on an H800 moved to this GPU's roofline; the measurement is cuBLASLt with per-tensor "
          "scales, so part of the gap is the kernel, not the model.")
    if args.csv:
        df.to_csv(args.csv, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
