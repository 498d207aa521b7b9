"""`dsperf measure-gpu --step POINT`: the calls the grounded model prices for one decode step of a
validation point, each timed on the GPU at hand at the exact shape the model priced it at, beside
the model's price of that call (at the tables' clock, as a benchmark loop runs).

What it answers: where a step's predicted time and a published step's differ, is it the kernels'
prices (a GEMM of 4 rows, a norm of 100 KB: shapes below every shipped table's smallest row) or
what the step spends between and around them? Each call's time is its kernels' own GPU time
(CUPTI, after an L2 flush, as measure-gpu times every row), so launch gaps are excluded: the
difference between the sum here and a published step is what the kernels alone do not explain.

Shapes are rounded up to whole rows, experts and requests (the model prices the average: 0.5
tokens per GPU, 7.6 experts). Families without a kernel to time here (the all-reduces: one GPU;
FlashInfer's MLA where it is not installed) are listed as not timed. `elementwise` calls (norms,
activation quantisation, RoPE) are timed with a stand-in of the call's size: torch.mul in BF16,
reading and writing half its bytes each: the floor of a memory-bound kernel of that size, not the
fused kernel a stack runs.
"""
from __future__ import annotations

import math

from .measure_gpu_plan import Shape

# The families a step's calls are timed in, and the fields of its shape each one keeps.
STEP_FIELDS = {
    "gemm_fp8": ("m", "n", "k"),
    "gemm_bf16": ("m", "n", "k", "groups"),
    "grouped_masked": ("m", "n", "k", "groups"),
    "grouped_contiguous": ("m", "n", "k", "groups"),
    "mla_decode": ("batch", "kv_len", "heads", "q_len"),
    "mla_prefill": ("m", "kv_len", "heads"),
    "elementwise": ("bytes",),
}
# Counts the model may price as averages: experts, requests and query tokens are rounded up (a
# part-used one still runs), rows per expert or per GPU to the nearest whole row, at least one.
_CEIL, _NEAREST = ("groups", "batch", "q_len"), ("m",)


# The columns of a calls file (`dsperf predict --calls-out`): a call's name, family, calls per step,
# its price in the step and whether a table row gave it, then its shape (grounded.SHAPE_COLUMNS, fp8).
CALL_COLUMNS = ("kernel", "family", "calls_per_step", "us", "from_table")
SHAPE_KEYS = ("m", "n", "k", "groups", "batch", "kv_len", "heads", "q_len", "bytes", "ep", "tp", "fp8")
# (grounded.SHAPE_COLUMNS and fp8: the names the binding gives a call's shape; a test holds all three equal.)


def calls_table(calls: list[dict]) -> "pd.DataFrame":
    """The priced calls of a step, one row each, with their shapes as columns (a calls file)."""
    import pandas as pd

    return pd.DataFrame([{**{k: c[k] for k in CALL_COLUMNS}, **{k: c["shape"][k] for k in SHAPE_KEYS}}
                         for c in calls])


def read_calls(path) -> list[dict]:
    """The calls of a calls file (calls_table's columns), as step_calls gives them; a missing file,
    column or a cell that is not a number is a ValueError naming the file, row and column."""
    import pandas as pd
    from pathlib import Path

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--step-calls: no file {path}")
    try:
        df = pd.read_csv(path)
    except Exception as e:  # noqa: BLE001 - any parse failure is the file's
        raise ValueError(f"--step-calls: {path} is not a CSV file ({type(e).__name__}: {e})") from None
    missing = [c for c in CALL_COLUMNS + SHAPE_KEYS if c not in df.columns]
    if missing:
        raise ValueError(f"--step-calls: {path} lacks the column '{missing[0]}' (write it with dsperf predict --calls-out)")
    out = []
    for i, row in enumerate(df.to_dict("records"), start=1):
        shape = {}
        for k in SHAPE_KEYS:
            v = row[k]
            if k == "fp8":
                if str(v).strip().lower() not in ("true", "false", "1", "0"):
                    raise ValueError(f"--step-calls: {path}, row {i}, column 'fp8': expected True or False, got {v!r}")
                shape[k] = str(v).strip().lower() in ("true", "1")
                continue
            try:
                v = float(v)
            except (TypeError, ValueError):
                v = math.nan
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"--step-calls: {path}, row {i}, column '{k}': expected a number >= 0, got {row[k]!r}")
            shape[k] = v
        for k in ("calls_per_step", "us"):
            if not (isinstance(row[k], (int, float)) and math.isfinite(row[k]) and row[k] >= 0):
                raise ValueError(f"--step-calls: {path}, row {i}, column '{k}': expected a number >= 0, got {row[k]!r}")
        out.append({"kernel": str(row["kernel"]), "family": str(row["family"]), "calls_per_step": float(row["calls_per_step"]),
                    "us": float(row["us"]), "from_table": bool(row["from_table"]), "shape": shape})
    return out


def find_point(name: str, flag: str = "--step") -> dict:
    """The decode validation point named `name` (points.csv), or a ValueError naming the flag."""
    from ..model import validation

    points = validation.load_points()
    match = [p for p in points if p["point"] == name]
    if not match:
        decode = sorted(p["point"] for p in points if p["phase"] == "decode")
        raise ValueError(f"{flag}: no validation point {name!r}; decode points: {', '.join(decode)}")
    if match[0]["phase"] != "decode":
        raise ValueError(f"{flag}: point {name!r} is a {match[0]['phase']} point; {flag} times decode steps")
    return match[0]


def step_calls(point: dict) -> tuple[list[dict], dict]:
    """The model's priced calls of the point's decode step, and the step's result."""
    from ..model import validation

    result = validation._decode(point)
    return list(result["calls"]), result


def call_shape(call: dict, kernel: str = "production") -> Shape | None:
    """The Shape to time for one priced call, None for a family not timed here."""
    fields = STEP_FIELDS.get(call["family"])
    if fields is None:
        return None
    s = call["shape"]
    dims = []
    for f in fields:
        v = s[f]
        if f in _CEIL:
            v = max(1, math.ceil(v - 1e-9))
        else:
            v = max(1, math.floor(v + 0.5)) if f in _NEAREST else int(round(v))
        dims.append((f, v))
    # The binding's fp8 says whether the call reads FP8 operands (C++ table_reads_fp8).
    dtype = "fp8" if s["fp8"] else "bf16"
    return Shape(call["family"], dtype, tuple(dims), kernel)


def step_shapes(calls: list[dict]) -> list[tuple[dict, Shape]]:
    """(call, shape) for every call of the step with a kernel to time: production kernels, and
    dsperf's own MLA decode beside FlashInfer's (it runs where FlashInfer is not installed)."""
    out = []
    for c in calls:
        shape = call_shape(c)
        if shape is None:
            continue
        out.append((c, shape))
        if c["family"] == "mla_decode":
            out.append((c, call_shape(c, "dsperf")))
    return out


def step_frame(calls: list[dict], outcome) -> "pd.DataFrame":
    """One row per priced call: the model's price of it in the step (as priced, at the sustained
    clock), its price at the tables' clock, what it measured (per kernel kind), and calls per step."""
    import pandas as pd

    measured = {(m["shape"].family, m["shape"].kernel, m["shape"].dims): m for m in outcome.measured}
    rows = []
    for c in calls:
        row = {"kernel": c["kernel"], "family": c["family"], "calls_per_step": c["calls_per_step"],
               "model_us": c["us"], "from_table": c["from_table"]}
        for kind in ("production", "dsperf"):
            shape = call_shape(c, kind)
            m = measured.get((shape.family, shape.kernel, shape.dims)) if shape is not None else None
            row[f"{kind}_us"] = m["us"] if m else math.nan
            if kind == "production" and shape is not None:
                row["shape"] = shape.label()
        rows.append(row)
    df = pd.DataFrame(rows)
    df["measured_us"] = df["production_us"].fillna(df["dsperf_us"])
    df["measured_over_model"] = df["measured_us"] / df["model_us"]
    return df


def step_summary(df, result: dict) -> dict:
    """The step's priced calls as the model sums them and as measured, over the calls timed."""
    timed = df[df["measured_us"].notna()]
    model_ms = float((timed["model_us"] * timed["calls_per_step"]).sum() / 1e3)
    measured_ms = float((timed["measured_us"] * timed["calls_per_step"]).sum() / 1e3)
    untimed = df[df["measured_us"].isna()]
    return {"timed_calls": int(len(timed)), "untimed": sorted(set(untimed["kernel"])),
            "model_timed_ms": model_ms, "measured_timed_ms": measured_ms,
            "model_untimed_ms": float((untimed["model_us"] * untimed["calls_per_step"]).sum() / 1e3),
            "model_step_ms": float(result["step_ms"]) if result else math.nan,
            "model_overhead_ms": float(result["overhead_ms"]) if result else math.nan}


def step_markdown(title: str, source: str, df, summary: dict, env: dict, device: str) -> str:
    from .measure_gpu_output import markdown_table

    s = summary
    step = (f"The model's step: {s['model_step_ms']:.3f} ms (overhead {s['model_overhead_ms']:.3f} ms). "
            if math.isfinite(s["model_step_ms"]) else "")
    lines = [f"# dsperf measure-gpu {title}", "",
             f"{source}. Priced as {device}; timed on {env.get('gpu', '?')} (torch {env.get('torch', '?')}, "
             f"CUDA {env.get('cuda', '?')}), {env.get('date', '?')}.", "",
             f"{step}Over the {s['timed_calls']} calls timed here, the calls as priced in the step sum to {s['model_timed_ms']:.3f} ms "
             f"and as measured to {s['measured_timed_ms']:.3f} ms per step (x calls per step; kernels' own time, "
             f"no launch gaps). Not timed: {', '.join(s['untimed']) or 'none'} ({s['model_untimed_ms']:.3f} ms as "
             "priced).", "",
             "model_us is the call as priced in the step (sustained clock); measured_us the production kernel's "
             "time, or dsperf's own where no production kernel ran (MLA decode without FlashInfer).", "",
             markdown_table(df, ".3g"), ""]
    return "\n".join(lines)


def shipped_step_path():
    """The shipped timed one-request step (measure-gpu --step trtllm_h200_min_latency on an H200)."""
    from ..model import grounded

    return grounded.measured_tables_dir() / "steps" / "H200-trtllm_h200_min_latency.csv"


def shipped_step_ratio() -> float:
    """Measured over priced time of the shipped timed step's calls (step_summary's sums): how far
    the kernels of a one-request step ran from their prices on the GPU that timed them."""
    import pandas as pd

    s = step_summary(pd.read_csv(shipped_step_path()), None)
    return s["measured_timed_ms"] / s["model_timed_ms"]
