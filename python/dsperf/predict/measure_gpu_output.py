"""dsperf measure-gpu, its files: the measured table in the shipped format, the device file that
points at it, and the comparison with the grounded model's current prices."""
from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

from .measure_gpu_plan import KERNEL_TEXT, SHAPE_FIELDS, TABLE_COLUMNS, Outcome, format_number


# ---- output ----------------------------------------------------------------------------------------
def clock_text(clock: tuple) -> str:
    med, lo, hi, n = clock
    if not n or math.isnan(med):
        return "SM clock not sampled (no nvidia-smi)"
    return f"SM clock {med:.0f} MHz ({lo:.0f}-{hi:.0f})"


def row_source(m: dict, env: dict) -> str:
    shape = m["shape"]
    kernel = env.get("kernel_text", {}).get((shape.family, shape.kernel), KERNEL_TEXT[(shape.family, shape.kernel)])
    return (f"measured by dsperf measure-gpu: {kernel} (torch {env['torch']}, CUDA {env['cuda']}, {env['gpu']}), "
            f"{clock_text(m['clock'])}, {m['date']}")


def table_text(measured: list, env: dict, kernel: str, device: str) -> str:
    """The measured rows of one kernel kind as an efficiency table (the shipped format)."""
    out = io.StringIO()
    what = ("production kernels: the grounded model's table for this GPU" if kernel == "production"
            else "dsperf's own CUDA kernels, for comparison only (not a table any device file names)")
    out.write(f"# Kernel latencies measured on {env['gpu']} by dsperf measure-gpu ({what}); priced as {device}.\n"
              "# Columns as the shipped tables: gemm_* m,n,k; grouped_* m = rows per expert, n,k of one projection, "
              "groups = experts;\n# mla_decode batch,kv_len,heads (dtype: the cache); mla_prefill m = prompt tokens, "
              "kv_len, heads. Each row's source names its kernel, SM clock and date.\n")
    writer = csv.DictWriter(out, TABLE_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for m in measured:
        if m["shape"].kernel != kernel:
            continue
        row = {k: format_number(v) for k, v in m["shape"].row().items()}
        writer.writerow(dict(row, latency_us=f"{m['us']:.4f}", source=row_source(m, env)))
    return out.getvalue()


def device_file_text(device: str, table_file: str, env: dict) -> str:
    """The shipped device file of `device` with its kernel_table pointing at the measured table
    beside it (a top-level key: placed before the file's first [section])."""
    from ..model.devices import shipped_device_file

    lines = Path(str(shipped_device_file(device))).read_text().splitlines()
    at = next((i for i, ln in enumerate(lines) if re.match(r"\s*kernel_table\s*=", ln)), None)
    if at is not None:  # the old key and the comment lines right above it (which describe the old table)
        start = at
        while start > 0 and lines[start - 1].lstrip().startswith("#"):
            start -= 1
        lines = lines[:start] + lines[at + 1:]
    key = [f"# Grounded model: kernel efficiencies from {table_file} beside this file, measured on {env['gpu']} by "
           f"dsperf measure-gpu ({env['date']}).", f'kernel_table = "{table_file}"']
    at = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("[")), len(lines))
    return "\n".join(lines[:at] + key + lines[at:]) + "\n"


def markdown_table(df, floatfmt) -> str:
    """df as a markdown table; plain text where tabulate is missing (a GPU machine's bare Python:
    the measured files are written before this, and must not be lost to a formatting library)."""
    try:
        return df.to_markdown(index=False, floatfmt=floatfmt)
    except ImportError:
        return "```\n" + df.to_string(index=False) + "\n```"


def comparison_frame(outcome: Outcome):
    """One row per measured shape: the measurement, the model's current price on this device and
    their ratio (model / measured); dsperf's rows also carry the production kernel's time at the
    same shape where it was measured."""
    import pandas as pd

    prod = {(m["shape"].family, m["shape"].dtype, m["shape"].dims): m["us"] for m in outcome.measured
            if m["shape"].kernel == "production"}
    rows = []
    for m in outcome.measured:
        s = m["shape"]
        row = {"family": s.family, "kernel": s.kernel, **{f: s.get(f, None) for f in SHAPE_FIELDS}, "dtype": s.dtype,
               "measured_us": m["us"], "event_us": m["event_us"], "model_us": m["model_us"],
               "model_from_table": m["from_table"], "model_over_measured": m["model_us"] / m["us"],
               "sm_clock_mhz": m["clock"][0], "kernel_name": (m["kernels"][0][:120] if m["kernels"] else "")}
        if s.kernel == "dsperf":
            p = prod.get((s.family, s.dtype, s.dims))
            row["dsperf_over_production"] = m["us"] / p if p else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def _family_summary(df):
    import pandas as pd

    out = []
    for (fam, kernel), g in df.groupby(["family", "kernel"], sort=False):
        r = g["model_over_measured"].to_numpy()
        item = {"family": fam, "kernel": kernel, "shapes": len(g), "model/measured median": np.median(r),
                "median |model/measured - 1|": np.median(np.abs(r - 1)), "min": r.min(), "max": r.max(),
                "priced from a table row": f"{int(g['model_from_table'].sum())} of {len(g)}"}
        if kernel == "dsperf":
            both = g["dsperf_over_production"].dropna()
            item["dsperf/production median"] = float(np.median(both)) if len(both) else math.nan
        out.append(item)
    return pd.DataFrame(out)


def step_comparison(device: str, device_file: Path) -> list[tuple[str, float, float]]:
    """(step, ms from the shipped table, ms from the measured table) for a decode and a prefill step
    of DeepSeek-V3 at the grounded model's defaults."""
    from ..model import grounded as G

    out = []
    for name, fn in (("decode, batch 128, kv 4989, EP128", G.decode), ("prefill, 16384 tokens, EP32", G.prefill)):
        out.append((name, fn("DeepSeek-V3", device)["step_ms"], fn("DeepSeek-V3", str(device_file))["step_ms"]))
    return out


def step_comparison_in_child(device: str, device_file: Path, timeout_s: float = 180.0):
    """step_comparison in a child Python, so that a fault in pricing cannot take the measurements
    down with it: on one H200 host the priced step ended measure-gpu with a segfault after every
    table was written (docs/CUDA.md), which neither this machine, ASan/UBSan nor valgrind reproduce.
    Raises RuntimeError naming how the child ended."""
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])))
    code = ("import json, sys; from pathlib import Path; from dsperf.predict.measure_gpu_output import "
            "step_comparison; print(json.dumps(step_comparison(sys.argv[1], Path(sys.argv[2]))))")
    try:
        r = subprocess.run([sys.executable, "-c", code, device, str(device_file)], capture_output=True, text=True,
                           timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"the step comparison did not finish in {timeout_s:.0f} s") from None
    if r.returncode != 0:
        how = (f"signal {signal.Signals(-r.returncode).name}" if r.returncode < 0 else f"exit status {r.returncode}")
        last = (r.stderr.strip().splitlines() or ["no message"])[-1]
        raise RuntimeError(f"the step comparison's process ended with {how} ({last})")
    return [tuple(row) for row in json.loads(r.stdout.strip().splitlines()[-1])]


def comparisonmarkdown_table(outcome: Outcome, device: str, df, steps=None, table_kind=None) -> str:
    env = outcome.env
    lines = [f"# dsperf measure-gpu: {env['gpu']} priced as {device}", "",
             f"torch {env['torch']}, CUDA {env['cuda']}; {env['date']}; {len(outcome.measured)} shapes measured in "
             f"{outcome.elapsed_s:.0f} s of a {outcome.budget_s:.0f}-s budget, {len(outcome.left_out)} left out.",
             "",
             "model_over_measured: the grounded model's current price of the shape on this device (its shipped kernel "
             "table moved onto this GPU's roofline, at the tables' clock) over the time measured here. Above 1: the "
             "model prices the call slower than this GPU ran it.", ""]
    if len(df):
        lines += ["## By family", "", markdown_table(_family_summary(df), ".3g"), ""]
    if outcome.skipped:
        lines += ["## Families not run here", ""]
        lines += [f"- {fam} ({kernel}): {why}" for (fam, kernel), why in outcome.skipped.items()]
        lines.append("")
    if steps:
        lines += ["## The grounded model from the new table", "",
                  f"DeepSeek-V3 steps priced on {device} from its shipped table and from the table measured here "
                  f"(kind: {table_kind}; a family without measured rows prices at the default efficiency):", "",
                  "| step | shipped table, ms | measured table, ms | measured / shipped |", "|---|---:|---:|---:|"]
        lines += [f"| {n} | {a:.3f} | {b:.3f} | {b / a:.3f} |" for n, a, b in steps]
        lines.append("")
    left = [(s, why) for s, why in outcome.left_out if not why.startswith("not run")]
    if left:
        lines += ["## Shapes left out", ""]
        lines += [f"- {s.family} [{s.kernel}] {s.label()}: {why}" for s, why in left]
        lines.append("")
    if len(df):
        lines += ["## Every measured shape", "",
                  markdown_table(df.drop(columns=["kernel_name"]), ".4g"), ""]
    return "\n".join(lines)


def write_outputs(outcome: Outcome, device: str, out_dir) -> dict:
    """Writes the table, the device file naming it, dsperf's rows and the comparison; returns
    their paths (and the step comparison where the model could price it)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    env = outcome.env
    paths = {"table": out_dir / f"{device}.csv", "device_file": out_dir / f"{device}-measured.toml",
             "dsperf": out_dir / f"{device}-dsperf-kernels.csv", "csv": out_dir / "comparison.csv",
             "markdown": out_dir / "comparison.md"}
    paths["table"].write_text(table_text(outcome.measured, env, "production", device))
    paths["device_file"].write_text(device_file_text(device, paths["table"].name, env))
    if any(m["shape"].kernel == "dsperf" for m in outcome.measured):
        paths["dsperf"].write_text(table_text(outcome.measured, env, "dsperf", device))
    else:
        del paths["dsperf"]
    df = comparison_frame(outcome)
    df.to_csv(paths["csv"], index=False, float_format="%.6g")
    steps, kind = None, None
    if any(m["shape"].kernel == "production" for m in outcome.measured):
        from ..model import grounded as G
        try:
            steps = step_comparison_in_child(device, paths["device_file"])
            kind = G.table_kind(str(paths["device_file"]))
        except (ValueError, RuntimeError) as e:  # reported, not fatal: the tables are written
            steps, kind = None, f"not priced: {e}"
    paths["markdown"].write_text(comparisonmarkdown_table(outcome, device, df, steps, kind))
    return paths
