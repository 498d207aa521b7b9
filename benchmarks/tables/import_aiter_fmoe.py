"""Write dsperf kernel-table rows (grouped_masked, grouped_contiguous) from ROCm/aiter's tuned fused-MoE
timings at DeepSeek-V3 shapes (aiter/configs/model_configs/a8w8_blockscale_tuned_fmoe_ds_v3.csv:
columns cu_num, token, model_dim, inter_dim, expert, topk, ..., q_type, ..., us1, ..., us2, ..., us).

    git -C aiter show 84493f0:aiter/configs/model_configs/a8w8_blockscale_tuned_fmoe_ds_v3.csv > fmoe.csv
    python benchmarks/tables/import_aiter_fmoe.py fmoe.csv --cu 256 --gfx gfx950 --device MI355X \\
        --commit 84493f0 --origin "1638f9e7a9 (MI355X tuned FMoE configs for DeepSeek-V3.2)" >> MI355X.csv

What a row of aiter's file is: the tuner's best kernel for `token` tokens routed (random scores,
torch.randn, so top-k uniform over the experts) to `topk` of `expert` experts, each of hidden
`model_dim` and intermediate `inter_dim` (the TP shard), FP8 weights with 128x128 block scales and
FP8 activations with 1x128 scales (q_type per_1x128, DeepSeek's format). Two-stage kernels give
us1 (gate/up GEMM with SiLU-and-mul) and us2 (down GEMM with the weighted sum); one-stage kernels
give only us (both projections in one kernel, us2 = 0).

How it becomes dsperf rows (the grouped families price one projection of the experts as m rows per
expert over `groups` experts, data/efficiency/README in H800.csv's header):
- groups: the experts the tokens touch, expected over uniform distinct top-k routing,
  E (1 - (1 - k/E)^T); m = T k / groups.
- up: n = 2 inter_dim, k = model_dim; down: n = model_dim, k = inter_dim.
- two-stage rows: up = us1, down = us2. One-stage rows: us split between the projections in
  proportion to their datasheet roofline times on the device (dsperf's own work functions), i.e.
  both projections at the one efficiency the fused kernel reached. The source column says which.
- A timing repeated at several token counts of one shape was copied, not measured at each (the
  file's lookup pads tokens; aiter's history shows the copies): every such row is left out.
- aiter's fused MoE serves both phases (SGLang and vLLM on ROCm call it for decode and prefill),
  so each row is written to grouped_masked (dsperf's decode family) and grouped_contiguous
  (its prefill family).

Only rows of the given cu_num, model_dim 7168, FP8 per_1x128, are read; the rows name the file,
the commit read, the commit that added them, and the GPU.
"""
from __future__ import annotations

import argparse
import csv
import sys
from collections import Counter

from import_aiter_gemm import COLUMNS


def _work_split(us: float, up_shape: dict, down_shape: dict, device: str) -> tuple[float, float]:
    """us split between the up and down projections in proportion to their roofline times on device."""
    from dsperf import _C
    from dsperf.model.devices import load_device

    sm, d = _C.step_model, load_device(device, "corrected")
    r = [sm.datasheet_roofline_s(sm.table_work("grouped_masked", sm.KernelShape(**s)), d) for s in (up_shape, down_shape)]
    return us * r[0] / sum(r), us * r[1] / sum(r)


def rows(path: str, cu: int, device: str, gfx: str, commit: str, origin: str) -> list[dict]:
    with open(path, newline="") as f:
        src = [r for r in csv.DictReader(f)
               if int(r["cu_num"]) == cu and int(r["model_dim"]) == 7168 and r["q_type"] == "QuantType.per_1x128"
               and "float8" in r["q_dtype_w"]]
    if not src:
        raise SystemExit(f"{path}: no FP8 per_1x128 rows at model_dim 7168 for cu_num {cu}")
    shape = lambda r: (int(r["inter_dim"]), int(r["expert"]), int(r["topk"]))  # noqa: E731
    timing = lambda r: (r["us1"], r["us2"], r["us"])  # noqa: E731
    repeats = Counter((shape(r), timing(r)) for r in src)
    where = (f"ROCm/aiter aiter/configs/model_configs/a8w8_blockscale_tuned_fmoe_ds_v3.csv (commit {commit}; row from "
             f"commit {origin}): tuned FP8 block-scale fused MoE, measured on {gfx} ({device}, {cu} CUs)")
    out = []
    for r in sorted(src, key=lambda r: (shape(r), int(r["token"]))):
        if repeats[(shape(r), timing(r))] > 1:
            continue
        inter, E, K = shape(r)
        T, D = int(r["token"]), int(r["model_dim"])
        groups = E * (1 - (1 - K / E) ** T)
        m = T * K / groups
        up = dict(m=m, n=2.0 * inter, k=float(D), groups=groups)
        down = dict(m=m, n=float(D), k=float(inter), groups=groups)
        us1, us2, us = float(r["us1"]), float(r["us2"]), float(r["us"])
        if us2 > 0 and us1 > 0:
            t_up, t_down, how = us1, us2, "two-stage kernel: stage 1 (up, SiLU-mul) us1, stage 2 (down) us2"
        else:
            t_up, t_down = _work_split(us, up, down, device)
            how = ("one-stage kernel: its us split between the projections by roofline time "
                   "(both at the fused kernel's efficiency)")
        note = (f"{T} tokens, top-{K} of {E} experts ({groups:.4g} touched), inter_dim {inter}; {how}")
        for fam in ("grouped_masked", "grouped_contiguous"):
            for proj, s, t in (("up", up, t_up), ("down", down, t_down)):
                out.append(dict(family=fam, m=f"{s['m']:.6g}", n=int(s["n"]), k=int(s["k"]),
                                groups=f"{s['groups']:.6g}", dtype="fp8", latency_us=f"{t:.6g}", measured_on=device,
                                source=f"{where}; {proj} projection of {note}"))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--cu", type=int, required=True, help="cu_num of the rows to read (256: gfx950)")
    ap.add_argument("--gfx", required=True)
    ap.add_argument("--device", required=True, help="the dsperf device the rows were measured on")
    ap.add_argument("--commit", required=True, help="the aiter commit the file was read at")
    ap.add_argument("--origin", required=True, help="the aiter commit (and its title) that added the rows")
    a = ap.parse_args(argv)
    w = csv.DictWriter(sys.stdout, fieldnames=COLUMNS, lineterminator="\n", restval="")
    for row in rows(a.csv, a.cu, a.device, a.gfx, a.commit, a.origin):
        w.writerow(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
