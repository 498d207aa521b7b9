"""`dsperf measure-gpu`: the shapes of a shipped kernel table timed on the GPU at hand with the
kernels production serving runs there, written as that GPU's own table in the shipped format.

    dsperf measure-gpu [--device H200] [--out DIR] [--budget-s 480] [--quick] [--dry-run]

Which kernel times which family (each row's source names it, with the library versions, the GPU,
its SM clock while the row was timed, and the date):

    gemm_fp8            torch._scaled_mm, FP8 e4m3 with per-tensor scales, BF16 out (cuBLASLt)
    gemm_bf16           torch.matmul in BF16 (cuBLAS), at the gemm_fp8 rows' shapes (the shipped
                        tables have no BF16 rows: the model prices those GEMMs at its default)
    grouped_masked      torch._scaled_grouped_mm, FP8 with row-wise scales, 3D x 3D (one batch of
                        experts, every expert full): PyTorch's CUTLASS grouped GEMM. Skipped, and
                        said so, where the installed PyTorch has no such function: a loop of
                        per-expert GEMMs is not a grouped kernel and would misprice the family.
    grouped_contiguous  the same kernel, 2D x 3D with per-expert row offsets
    mla_decode          FlashInfer's BatchMLAPagedAttentionWrapper (absorbed MLA over a paged BF16
                        latent cache, 64-token pages), where `import flashinfer` works
    mla_prefill         torch's scaled_dot_product_attention, causal, q/k 192 and v 128 wide,
                        restricted to its fused backends (FlashAttention, cuDNN, memory-efficient;
                        the unfused math path is refused); the kernel that ran is named
  dsperf's own CUDA kernels (dsperf.cuda.grouped_gemm, mla_decode) time the same grouped and MLA
  decode shapes where dsperf was built with CUDA. They are not what a serving system runs, so
  their rows go to a separate file beside the comparison, never into the table the model reads.

Every call is timed as benchmarks/gpu_model_check.py times its GEMMs (dsperf.predict.gpu_timing):
an L2 flush before each launch, the kernels' own GPU time from PyTorch's profiler (CUPTI) averaged
over --iters launches; the median CUDA-event time around each launch is kept beside it.

Written to --out (default ./measure-gpu-<DEVICE>):
  <DEVICE>.csv                 the production rows, loadable by dsperf.model.grounded.read_table_rows
  <DEVICE>-measured.toml       the shipped device file with kernel_table = "<DEVICE>.csv": the grounded
                               model prices this GPU from its own rows through it
                               (dsperf predict --device <out>/<DEVICE>-measured.toml)
  <DEVICE>-dsperf-kernels.csv  dsperf's own kernels' rows, same format (not read by the model)
  comparison.csv / comparison.md  each measured shape beside the grounded model's current price for
                               this device (the shipped table, H800's rows for the Hopper parts,
                               moved onto this GPU's roofline) and their ratio; the shapes left
                               out and why; the model's steps from the shipped and the new table.

The run keeps to --budget-s: every shape's cost is estimated from the model's price of it (setup,
warm-up, 2 x iters timed launches with their flushes, the profiler's own overhead), corrected by
what the shapes measured so far really took; a shape whose estimate would end the run past the
budget is left out, and the files say which. The order interleaves the families (and, within one,
takes every other shape first), so a cut leaves a spread of every family rather than none of the
last. Without a GPU or PyTorch it says why and exits 0; --dry-run lists the shapes and the
estimated time without touching a GPU.

The timing is injectable: run_plan takes any object with available() / environment() /
measure(shape, iters) (TorchTimer is the real one) and a clock with now() / window(); the tests run
the whole pipeline with a fake one on a machine without a GPU.
"""
from __future__ import annotations

import csv
import dataclasses
import datetime
import io
import math
import re
import statistics
from importlib import resources
from pathlib import Path
from typing import Callable

import numpy as np

# The families the production timer covers, in the order a round of the plan visits them.
PRODUCTION_FAMILIES = ("gemm_fp8", "gemm_bf16", "grouped_masked", "grouped_contiguous", "mla_decode", "mla_prefill")
DSPERF_FAMILIES = ("grouped_masked", "grouped_contiguous", "mla_decode")
TABLE_COLUMNS = ("family", "m", "n", "k", "groups", "batch", "kv_len", "heads", "dtype", "latency_us", "source")
SHAPE_FIELDS = ("m", "n", "k", "groups", "batch", "kv_len", "heads")
MLA_PAGE = 64  # tokens per page of the paged latent cache (FlashMLA's block size)
DEFAULT_ITERS, QUICK_ITERS = 15, 5

# What each (family, kernel) runs, for the rows' sources.
KERNEL_TEXT = {
    ("gemm_fp8", "production"): "torch._scaled_mm FP8 e4m3, per-tensor scales, BF16 out (cuBLASLt)",
    ("gemm_bf16", "production"): "torch.matmul BF16 (cuBLAS)",
    ("grouped_masked", "production"): "torch._scaled_grouped_mm FP8 e4m3, row-wise scales, 3D x 3D, BF16 out "
                                      "(CUTLASS grouped GEMM)",
    ("grouped_contiguous", "production"): "torch._scaled_grouped_mm FP8 e4m3, row-wise scales, 2D x 3D with "
                                          "expert offsets, BF16 out (CUTLASS grouped GEMM)",
    ("mla_decode", "production"): f"flashinfer BatchMLAPagedAttentionWrapper, BF16 latent cache, {MLA_PAGE}-token pages",
    ("mla_prefill", "production"): "torch scaled_dot_product_attention, causal, q/k 192, v 128, BF16",
    ("grouped_masked", "dsperf"): "dsperf.cuda.grouped_gemm FP8 x FP8, 1x128 / 128x128 block scales, masked layout "
                                  "(dsperf's own kernel, not a production one)",
    ("grouped_contiguous", "dsperf"): "dsperf.cuda.grouped_gemm FP8 x FP8, 1x128 / 128x128 block scales, contiguous "
                                      "layout (dsperf's own kernel, not a production one)",
    ("mla_decode", "dsperf"): f"dsperf.cuda.mla_decode, BF16 latent cache, {MLA_PAGE}-token pages (dsperf's own "
                              "kernel, not a production one)",
}

# Cost model of one shape's measurement (seconds), for the budget: a fixed part (allocation, the
# profiler's start and stop), the inputs' bytes written at INIT_BPS (numpy staging for dsperf's
# kernels is slower), and (2 x iters + 2) launches each after a flush. The first shape of a family
# pays for its library's first call too (heuristics; FlashInfer may compile its MLA module).
FIXED_S = 0.35
INIT_BPS = {"production": 100e9, "dsperf": 4e9}
FLUSH_US = 60.0
FIRST_CALL_S = {"mla_decode": 30.0, "mla_prefill": 5.0}
FIRST_CALL_DEFAULT_S = 2.0


@dataclasses.dataclass(frozen=True)
class Shape:
    """One call to time: a table family, its shape fields, the dtype, and which kernel runs it."""
    family: str
    dtype: str
    dims: tuple  # ((field, value), ...) in SHAPE_FIELDS order
    kernel: str = "production"

    def get(self, field: str, default=0):
        return dict(self.dims).get(field, default)

    def row(self) -> dict:
        return {"family": self.family, "dtype": self.dtype, **{k: v for k, v in self.dims}}

    def label(self) -> str:
        return " ".join(f"{k}={_fmt(v)}" for k, v in self.dims) + f" {self.dtype}"

    def input_bytes(self) -> float:
        """Bytes of the inputs and output a measurement allocates (the budget and the memory check)."""
        g = self.get
        if self.family in ("gemm_fp8", "gemm_bf16"):
            # BF16 staging of both operands (FP8 ones are converted from it), the output in BF16.
            return 2.0 * (g("m") * g("k") + g("n") * g("k")) * 1.5 + 2.0 * g("m") * g("n")
        if self.family.startswith("grouped"):
            e, m = g("groups", 1), g("m")
            return 2.0 * e * (m * g("k") + g("n") * g("k")) + 4.0 * e * m * g("n")
        if self.family == "mla_decode":
            tokens = g("batch") * math.ceil(g("kv_len") / MLA_PAGE) * MLA_PAGE
            return 2.0 * tokens * 576 + 4.0 * g("batch") * g("heads") * 576 * 2
        if self.family == "mla_prefill":
            return 2.0 * g("m") * g("heads") * (192 * 2 + 128 * 2)
        return 0.0


def _fmt(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _shape_of_row(row: dict, family: str | None = None, dtype: str | None = None, kernel="production") -> Shape:
    family = family or row["family"]
    dims = tuple((f, int(row[f]) if float(row[f]).is_integer() else row[f]) for f in SHAPE_FIELDS if f in row)
    return Shape(family, dtype or row.get("dtype", "fp8"), dims, kernel)


def _spread(items: list) -> list:
    """Every other item first, then the rest: a plan cut short still spans the family."""
    return items[0::2] + items[1::2]


def plan_shapes(table: str = "H800", *, quick: bool = False, dsperf_kernels: bool = True) -> list[Shape]:
    """The shapes to time: every row of the shipped table `table` in a family the production
    timer covers (the gemm_fp8 shapes twice: FP8 and BF16), then dsperf's own kernels at the
    grouped and MLA decode shapes. Ordered round-robin over the families, production first, every
    other shape of a family first; --quick keeps only that first half."""
    from ..model import grounded as G

    rows = G.read_table_rows(G._tables_dir() / f"{table}.csv")
    groups: dict[tuple, list[Shape]] = {}
    seen = set()

    def add(shape: Shape):
        if shape not in seen:
            seen.add(shape)
            groups.setdefault((shape.family, shape.kernel), []).append(shape)

    for fam in PRODUCTION_FAMILIES:
        source = "gemm_fp8" if fam == "gemm_bf16" else fam
        for r in rows:
            if r["family"] == source:
                add(_shape_of_row(r, fam, "bf16" if fam == "gemm_bf16" else None))
    if dsperf_kernels:
        for fam in DSPERF_FAMILIES:
            for r in rows:
                if r["family"] == fam:
                    add(_shape_of_row(r, kernel="dsperf"))
    ordered = {key: _spread(v) for key, v in groups.items()}
    if quick:
        ordered = {key: v[: (len(v) + 1) // 2] for key, v in ordered.items()}
    out = []
    for kernel in ("production", "dsperf"):
        lists = [v for (fam, k), v in ordered.items() if k == kernel]
        for i in range(max((len(v) for v in lists), default=0)):
            out.extend(v[i] for v in lists if i < len(v))
    return out


# ---- the model's price ---------------------------------------------------------------------------
class Pricer:
    """The grounded model's current price of a shape on `device` (its shipped kernel table moved
    onto the device's roofline, at the tables' clock) and whether a table row gave it."""

    def __init__(self, device: str):
        from ..model import grounded as G
        from ..model.devices import load_device

        self.G, self.device = G, device
        self.tables, self.spec = G.kernel_tables(device), load_device(device)
        self.table = G.kernel_table_name(device)

    def __call__(self, shape: Shape) -> tuple[float, bool]:
        from .gpu_timing import model_price_us

        return model_price_us(self.G.SM, self.tables, self.spec, shape.family, self.G._shape(shape.row()))


def estimate_s(shape: Shape, price_us: float, iters: int, first_of_family: bool = False) -> float:
    """The seconds measuring one shape is expected to take (the budget's unit)."""
    launches = 2 * iters + 2
    first = FIRST_CALL_S.get(shape.family, FIRST_CALL_DEFAULT_S) if first_of_family else 0.0
    return FIXED_S + shape.input_bytes() / INIT_BPS[shape.kernel] + launches * (price_us + FLUSH_US) * 1e-6 + first


# ---- the measurement loop ------------------------------------------------------------------------
@dataclasses.dataclass
class Measurement:
    us: float                # mean kernel time per call (CUPTI)
    event_us: float = math.nan  # median CUDA-event time around a launch
    kernels: tuple = ()      # the kernels that ran, longest first


@dataclasses.dataclass
class Outcome:
    measured: list   # dicts: shape, us, event_us, kernels, model_us, from_table, clock, date, seconds
    left_out: list   # (shape, reason)
    skipped: dict    # (family, kernel) -> why the family could not run here
    elapsed_s: float
    budget_s: float
    env: dict


def run_plan(timer, shapes: list[Shape], *, budget_s: float, iters: int, clock, price: Callable,
             log: Callable = lambda s: None, today: Callable | None = None) -> Outcome:
    """Measures the shapes in order with `timer` until the budget is spent: a shape whose family
    cannot run here (timer.available()) or whose estimate would end past budget_s (clock.now(),
    seconds since the run began) is left out with the reason; one whose measurement raises is
    left out with the error. Each measured shape keeps the SM clock over its own window."""
    today = today or (lambda: datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    skipped = {key: why for key, why in timer.available().items() if why}
    measured, left_out, ratios, started = [], [], [], set()
    for i, shape in enumerate(shapes):
        try:
            _one_shape(timer, shape, iters, budget_s, clock, price, log, today, skipped, measured, left_out, ratios,
                       started)
        except KeyboardInterrupt:  # stopped from outside (a hard time limit): keep what was measured
            left_out.extend((s, "interrupted: the run was stopped before this shape") for s in shapes[i:])
            break
    return Outcome(measured, left_out, skipped, clock.now(), budget_s, dict(timer.environment()))


def _one_shape(timer, shape, iters, budget_s, clock, price, log, today, skipped, measured, left_out, ratios, started):
    """One shape of run_plan: left out (family not runnable, budget, error) or measured."""
    key = (shape.family, shape.kernel)
    if key in skipped:
        left_out.append((shape, f"not run: {skipped[key]}"))
        return
    model_us, found = price(shape)
    # The estimate's per-shape part scaled by what the shapes so far took over theirs; a
    # family's first call (its library's set-up) is not.
    est = estimate_s(shape, model_us, iters)
    scale = min(10.0, max(0.5, statistics.median(ratios))) if ratios else 1.0
    est = est * scale + (estimate_s(shape, model_us, iters, True) - est if key not in started else 0.0)
    t0 = clock.now()
    if t0 + est > budget_s:
        left_out.append((shape, f"budget: estimated {est:.1f} s, {max(0.0, budget_s - t0):.1f} s left"))
        return
    try:
        m = timer.measure(shape, iters)
    except Exception as e:  # noqa: BLE001 - one shape's failure is reported, the run goes on
        started.add(key)
        left_out.append((shape, f"error: {type(e).__name__}: {' '.join(str(e).split())[:200]}"))
        log(f"  {shape.family} [{shape.kernel}] {shape.label()}: {type(e).__name__}: {str(e)[:120]}")
        return
    t1 = clock.now()
    if key in started:  # a family's first shape carries its library's first call: not a rate
        ratios.append((t1 - t0) / max(estimate_s(shape, model_us, iters), 1e-9))
    started.add(key)
    measured.append(dict(shape=shape, us=m.us, event_us=m.event_us, kernels=tuple(m.kernels), model_us=model_us,
                         from_table=found, clock=clock.window(t0, t1), date=today(), seconds=t1 - t0))
    log(f"  {shape.family} [{shape.kernel}] {shape.label()}: {m.us:.2f} us (model {model_us:.2f} us)")




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
        row = {k: _fmt(v) for k, v in m["shape"].row().items()}
        writer.writerow(dict(row, latency_us=f"{m['us']:.4f}", source=row_source(m, env)))
    return out.getvalue()


def _shipped_device_file(device: str) -> Path:
    from ..model.devices import _read_toml

    folder = resources.files("dsperf") / "data" / "devices"
    for p in sorted(folder.iterdir(), key=lambda p: p.name):
        if p.name.endswith(".toml"):
            data = _read_toml(p)
            names = [str(data.get("name", p.name[:-5]))] + [str(a) for a in data.get("aliases", [])]
            if device.lower() in (n.lower() for n in names):
                return Path(str(p))
    raise ValueError(f"no shipped device file is named '{device}'")


def device_file_text(device: str, table_file: str, env: dict) -> str:
    """The shipped device file of `device` with its kernel_table pointing at the measured table
    beside it (a top-level key: placed before the file's first [section])."""
    lines = _shipped_device_file(device).read_text().splitlines()
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


def _markdown(df, floatfmt) -> str:
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


def comparison_markdown(outcome: Outcome, device: str, df, steps=None, table_kind=None) -> str:
    env = outcome.env
    lines = [f"# dsperf measure-gpu: {env['gpu']} priced as {device}", "",
             f"torch {env['torch']}, CUDA {env['cuda']}; {env['date']}; {len(outcome.measured)} shapes measured in "
             f"{outcome.elapsed_s:.0f} s of a {outcome.budget_s:.0f}-s budget, {len(outcome.left_out)} left out.",
             "",
             "model_over_measured: the grounded model's current price of the shape on this device (its shipped kernel "
             "table moved onto this GPU's roofline, at the tables' clock) over the time measured here. Above 1: the "
             "model prices the call slower than this GPU ran it.", ""]
    if len(df):
        lines += ["## By family", "", _markdown(_family_summary(df), ".3g"), ""]
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
                  _markdown(df.drop(columns=["kernel_name"]), ".4g"), ""]
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
            steps = step_comparison(device, paths["device_file"])
            kind = G.table_kind(str(paths["device_file"]))
        except (ValueError, RuntimeError) as e:  # reported, not fatal: the tables are written
            steps, kind = None, f"not priced: {e}"
    paths["markdown"].write_text(comparison_markdown(outcome, device, df, steps, kind))
    return paths


# ---- the real timer ----------------------------------------------------------------------------------
def _tiled(shape, dtype, rng, scale=1.0):
    """Random values for dsperf's numpy-staged inputs, a 1M-value block tiled over the shape (the
    kernels' speed does not depend on the values)."""
    block = np.clip(rng.standard_normal(1 << 20) * scale, -448.0, 448.0).astype(np.float32).astype(dtype)
    return np.resize(block, shape)


class TorchTimer:
    """Times shapes on GPU 0 through PyTorch (and FlashInfer, and dsperf.cuda, where present)."""

    def __init__(self, torch):
        from .gpu_timing import flush_kernel_names

        self.torch = torch
        props = torch.cuda.get_device_properties(0)
        self.flush = torch.empty(props.L2_cache_size, dtype=torch.int32, device="cuda")  # 4 B each: 4x the L2
        self.flush_kernels = flush_kernel_names(torch, self.flush)
        self.one = torch.ones((), dtype=torch.float32, device="cuda")
        self._kernel_text = {}

    def environment(self) -> dict:
        t = self.torch
        env = {"gpu": t.cuda.get_device_name(0), "torch": t.__version__.split("+")[0], "cuda": t.version.cuda,
               "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
               "kernel_text": dict(self._kernel_text)}
        try:
            import flashinfer
            env["flashinfer"] = getattr(flashinfer, "__version__", "?")
        except Exception:  # noqa: BLE001 - optional
            pass
        return env

    def available(self) -> dict:
        """(family, kernel) -> None where it can run here, else why not."""
        t = self.torch
        out = {}
        major, minor = t.cuda.get_device_capability(0)
        fp8 = (major, minor) >= (8, 9) and hasattr(t, "float8_e4m3fn") and hasattr(t, "_scaled_mm")
        out[("gemm_fp8", "production")] = None if fp8 else "no FP8 GEMM (needs sm_89+ and torch._scaled_mm)"
        out[("gemm_bf16", "production")] = None
        grouped = None
        if not hasattr(t, "_scaled_grouped_mm"):
            grouped = (f"torch {t.__version__} has no torch._scaled_grouped_mm (a production grouped FP8 GEMM); a loop "
                       "of per-expert GEMMs would not be one")
        elif major < 9:
            grouped = "torch._scaled_grouped_mm needs sm_90 or newer"
        out[("grouped_masked", "production")] = out[("grouped_contiguous", "production")] = grouped
        try:
            import flashinfer  # noqa: F401
            import flashinfer.mla  # noqa: F401
            out[("mla_decode", "production")] = None
            self._kernel_text[("mla_decode", "production")] = (
                KERNEL_TEXT[("mla_decode", "production")].replace("flashinfer ", f"flashinfer {flashinfer.__version__} "))
        except Exception as e:  # noqa: BLE001 - any import failure means no FlashInfer here
            out[("mla_decode", "production")] = f"flashinfer is not importable here ({type(e).__name__}: {e})"
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: F401
            out[("mla_prefill", "production")] = None
        except ImportError:
            out[("mla_prefill", "production")] = f"torch {t.__version__} has no torch.nn.attention.sdpa_kernel"
        try:
            from .. import cuda
            ok, why = cuda.available()
        except Exception as e:  # noqa: BLE001
            ok, why = False, f"{type(e).__name__}: {e}"
        for fam in DSPERF_FAMILIES:
            out[(fam, "dsperf")] = None if ok else f"dsperf's CUDA kernels are not usable: {why}"
        return out

    def _check_memory(self, shape: Shape):
        free, _ = self.torch.cuda.mem_get_info(0)
        need = shape.input_bytes() * 1.2
        if need > free:
            raise MemoryError(f"needs about {need / 1e9:.1f} GB, {free / 1e9:.1f} GB free")

    def measure(self, shape: Shape, iters: int) -> Measurement:
        from .gpu_timing import kernel_times, time_us

        self._check_memory(shape)
        build = getattr(self, f"_{shape.kernel}_{shape.family}")
        fn, keep = build(shape)
        try:
            us, names = kernel_times(self.torch, fn, iters, self.flush, self.flush_kernels)
            event = time_us(self.torch, fn, iters, self.flush)
            if shape.family == "mla_prefill" and names:
                self._kernel_text[(shape.family, shape.kernel)] = (
                    f"{KERNEL_TEXT[(shape.family, shape.kernel)]}, fused backend {_sdpa_backend(names[0])}")
        finally:
            del keep
            self.torch.cuda.synchronize()
            self.torch.cuda.empty_cache()
        return Measurement(us, event, tuple(names))

    # production kernels: each builder returns (the call, the tensors it must keep alive)
    def _production_gemm_fp8(self, s):
        t = self.torch
        a = t.randn(s.get("m"), s.get("k"), device="cuda", dtype=t.bfloat16).to(t.float8_e4m3fn)
        b = (t.randn(s.get("n"), s.get("k"), device="cuda", dtype=t.bfloat16) * 0.05).to(t.float8_e4m3fn)
        one = self.one
        return (lambda: t._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=t.bfloat16)), (a, b)

    def _production_gemm_bf16(self, s):
        t = self.torch
        a = t.randn(s.get("m"), s.get("k"), device="cuda", dtype=t.bfloat16)
        b = t.randn(s.get("n"), s.get("k"), device="cuda", dtype=t.bfloat16) * 0.05
        return (lambda: a @ b.t()), (a, b)

    def _grouped_operands(self, s):
        t = self.torch
        e, m, n, k = s.get("groups"), s.get("m"), s.get("n"), s.get("k")
        a = t.randn(e, m, k, device="cuda", dtype=t.bfloat16).to(t.float8_e4m3fn)
        b = (t.randn(e, n, k, device="cuda", dtype=t.bfloat16) * 0.05).to(t.float8_e4m3fn)
        return e, m, n, k, a, b

    def _production_grouped_masked(self, s):
        t = self.torch
        e, m, n, k, a, b = self._grouped_operands(s)
        sa = t.ones(e, m, device="cuda", dtype=t.float32)
        sb = t.ones(e, n, device="cuda", dtype=t.float32)
        bt = b.transpose(-2, -1)  # column-major B, as the kernel wants it
        return (lambda: t._scaled_grouped_mm(a, bt, sa, sb, out_dtype=t.bfloat16)), (a, b, sa, sb)

    def _production_grouped_contiguous(self, s):
        t = self.torch
        e, m, n, k, a, b = self._grouped_operands(s)
        a2 = a.reshape(e * m, k)
        offs = (t.arange(1, e + 1, device="cuda", dtype=t.int32) * m)
        sa = t.ones(e * m, device="cuda", dtype=t.float32)
        sb = t.ones(e, n, device="cuda", dtype=t.float32)
        bt = b.transpose(-2, -1)
        return (lambda: t._scaled_grouped_mm(a2, bt, sa, sb, offs=offs, out_dtype=t.bfloat16)), (a, b, sa, sb, offs)

    def _production_mla_decode(self, s):
        import flashinfer

        t = self.torch
        bsz, kv, heads = s.get("batch"), s.get("kv_len"), s.get("heads")
        pages = math.ceil(kv / MLA_PAGE)
        ckv = t.randn(bsz * pages, MLA_PAGE, 512, device="cuda", dtype=t.bfloat16)
        kpe = t.randn(bsz * pages, MLA_PAGE, 64, device="cuda", dtype=t.bfloat16)
        q_nope = t.randn(bsz, heads, 512, device="cuda", dtype=t.bfloat16) * 0.05
        q_pe = t.randn(bsz, heads, 64, device="cuda", dtype=t.bfloat16) * 0.05
        qo_indptr = t.arange(bsz + 1, device="cuda", dtype=t.int32)
        kv_indptr = t.arange(bsz + 1, device="cuda", dtype=t.int32) * pages
        kv_indices = t.arange(bsz * pages, device="cuda", dtype=t.int32)
        kv_lens = t.full((bsz,), kv, device="cuda", dtype=t.int32)
        workspace = t.empty(128 << 20, dtype=t.int8, device="cuda")
        wrapper = flashinfer.mla.BatchMLAPagedAttentionWrapper(workspace, backend="auto")
        wrapper.plan(qo_indptr, kv_indptr, kv_indices, kv_lens, heads, 512, 64, MLA_PAGE, False, 192 ** -0.5,
                     t.bfloat16, t.bfloat16)
        out = t.empty(bsz, heads, 512, device="cuda", dtype=t.bfloat16)
        return (lambda: wrapper.run(q_nope, q_pe, ckv, kpe, out=out)), (ckv, kpe, q_nope, q_pe, workspace, wrapper, out)

    def _production_mla_prefill(self, s):
        t = self.torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        import torch.nn.functional as F

        tokens, heads = s.get("m"), s.get("heads")
        q = t.randn(1, heads, tokens, 192, device="cuda", dtype=t.bfloat16)
        k = t.randn(1, heads, tokens, 192, device="cuda", dtype=t.bfloat16)
        v = t.randn(1, heads, tokens, 128, device="cuda", dtype=t.bfloat16)
        backends = [getattr(SDPBackend, b) for b in ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION")
                    if hasattr(SDPBackend, b)]

        def call():
            with sdpa_kernel(backends):  # the unfused math path is not a production kernel: refused
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=192 ** -0.5)
        return call, (q, k, v)

    # dsperf's own kernels, on its DeviceArrays (staged from numpy as gpu_validate.py does)
    def _dsperf_grouped(self, s, masked: bool):
        from .. import cuda
        from ..cuda import FP8, DeviceArray

        rng = np.random.default_rng(0)
        e, m, n, k = s.get("groups"), s.get("m"), s.get("n"), s.get("k")
        kb, nb = -(-k // 128), -(-n // 128)
        a_shape = (e, m, k) if masked else (e * m, k)
        a = DeviceArray.from_numpy(_tiled(a_shape, FP8, rng, 100.0))
        a_s = DeviceArray.from_numpy(np.full(a_shape[:-1] + (kb,), 1e-2, np.float32))
        b = DeviceArray.from_numpy(_tiled((e, n, k), FP8, rng, 100.0))
        b_s = DeviceArray.from_numpy(np.full((e, nb, kb), 1e-2, np.float32))
        out = DeviceArray(a_shape[:-1] + (n,), np.float32)
        if masked:
            counts = DeviceArray.from_numpy(np.full(e, m, np.int32))
            fn = lambda: cuda.grouped_gemm(a, b, counts=counts, a_scale=a_s, b_scale=b_s, out=out,  # noqa: E731
                                           validate=False)
            keep = (a, a_s, b, b_s, out, counts)
        else:
            offs = DeviceArray.from_numpy(np.arange(e + 1, dtype=np.int64) * m)
            fn = lambda: cuda.grouped_gemm(a, b, offsets=offs, a_scale=a_s, b_scale=b_s, out=out,  # noqa: E731
                                           validate=False)
            keep = (a, a_s, b, b_s, out, offs)
        return fn, keep

    def _dsperf_grouped_masked(self, s):
        return self._dsperf_grouped(s, True)

    def _dsperf_grouped_contiguous(self, s):
        return self._dsperf_grouped(s, False)

    def _dsperf_mla_decode(self, s):
        from .. import cuda
        from ..cuda import BF16, DeviceArray

        rng = np.random.default_rng(0)
        bsz, kv, heads = s.get("batch"), s.get("kv_len"), s.get("heads")
        pages = math.ceil(kv / MLA_PAGE)
        latent = DeviceArray.from_numpy(_tiled((bsz * pages, MLA_PAGE, 512), BF16, rng))
        rope = DeviceArray.from_numpy(_tiled((bsz * pages, MLA_PAGE, 64), BF16, rng))
        table = DeviceArray.from_numpy(np.arange(bsz * pages, dtype=np.int32).reshape(bsz, pages))
        lens = DeviceArray.from_numpy(np.full(bsz, kv, np.int32))
        q = (DeviceArray.from_numpy(_tiled((bsz, 1, heads, 512), BF16, rng, 0.05)),
             DeviceArray.from_numpy(_tiled((bsz, 1, heads, 64), BF16, rng, 0.05)))
        out = (DeviceArray((bsz, 1, heads, 512), np.float32), DeviceArray((bsz, 1, heads), np.float32))
        meta = cuda.get_mla_metadata(lens, 1, heads)
        fn = lambda: cuda.mla_decode(*q, latent, rope, table, lens, 192 ** -0.5, meta, out=out,  # noqa: E731
                                     validate=False)
        return fn, (latent, rope, table, lens, q, out, meta)


def _sdpa_backend(kernel_name: str) -> str:
    name = kernel_name.lower()
    for key, label in (("cudnn", "cuDNN"), ("flash", "FlashAttention"), ("fmha", "memory-efficient (fmha)"),
                       ("efficient", "memory-efficient")):
        if key in name:
            return label
    return f"kernel {kernel_name[:60]}"


# ---- the command ----------------------------------------------------------------------------------
def plan_text(shapes: list[Shape], price: Callable, iters: int, budget_s: float, device: str, note: str = "") -> str:
    """--dry-run: the shapes, the model's price and the estimated seconds of each, and where the
    budget would cut the plan if the estimates held."""
    import pandas as pd

    rows, total, started = [], 0.0, set()
    for s in shapes:
        us, found = price(s)
        est = estimate_s(s, us, iters, (s.family, s.kernel) not in started)
        started.add((s.family, s.kernel))
        fits = total + est <= budget_s
        total += est if fits else 0.0
        rows.append({"family": s.family, "kernel": s.kernel, "shape": s.label(), "model_us": us,
                     "estimated_s": est, "within_budget": fits})
    df = pd.DataFrame(rows)
    by = df.groupby(["family", "kernel"], sort=False).agg(shapes=("shape", "size"), estimated_s=("estimated_s", "sum"),
                                                          within_budget=("within_budget", "sum")).reset_index()
    out = [f"dsperf measure-gpu --dry-run: {len(shapes)} shapes priced as {device}, {iters} timed launches each "
           f"(CUPTI) plus {iters} event-timed; nothing is timed.{note}", "",
           _markdown(by, ".1f"), "",
           f"estimated total {df['estimated_s'].sum():.0f} s; within the {budget_s:.0f}-s budget: "
           f"{int(df['within_budget'].sum())} shapes ({total:.0f} s), left out: {int((~df['within_budget']).sum())}. "
           "Families this machine cannot run (no grouped FP8 GEMM in torch, no FlashInfer, dsperf built without CUDA) "
           "are skipped on the GPU and named in the output.", "",
           _markdown(df, ".3g"), ""]
    return "\n".join(out)


def run_command(args, *, timer_factory=None, clock_factory=None, print_fn=print) -> int:
    """`dsperf measure-gpu`: returns the exit status (0 also when there is no GPU to measure)."""
    from .gpu_timing import ClockSampler, gpu_device_name

    iters = args.iters if args.iters is not None else (QUICK_ITERS if args.quick else DEFAULT_ITERS)
    if not 1 <= iters <= 1000:
        raise ValueError(f"--iters must lie in [1, 1000], got {iters}")
    if not (math.isfinite(args.budget_s) and args.budget_s > 0):
        raise ValueError(f"--budget-s must be a positive number of seconds, got {args.budget_s}")
    torch, why = None, None
    if timer_factory is None:
        try:
            import torch
        except ImportError:
            why = "PyTorch is not installed"
        else:
            if not torch.cuda.is_available():
                why = "no CUDA GPU is usable here (torch.cuda.is_available() is False)"
                torch = None
    device, note = args.device, ""
    if device is None and torch is not None:
        device = gpu_device_name(torch)
        if device is None:
            raise ValueError(f"--device is needed: no shipped device file matches '{torch.cuda.get_device_name(0)}'")
    if device is None and args.dry_run:
        device, note = "H200", " No GPU to name the device: priced as H200 (--device to choose)."
    shapes = plan_shapes(args.table, quick=args.quick, dsperf_kernels=not args.no_dsperf_kernels)
    if args.dry_run:
        print_fn(plan_text(shapes, Pricer(device), iters, args.budget_s, device, note))
        return 0
    if timer_factory is None and torch is None:
        print_fn(f"dsperf measure-gpu needs PyTorch with a CUDA GPU: {why}. Nothing measured.")
        return 0
    if device is None:
        raise ValueError("--device is needed: the timer names no GPU")
    timer = timer_factory() if timer_factory else TorchTimer(torch)
    price = Pricer(device)
    out_dir = Path(args.out or f"measure-gpu-{device}")
    print_fn(f"GPU 0: {timer.environment()['gpu']}; priced as {device} (shipped kernel table {price.table}); "
             f"{len(shapes)} shapes, {iters} launches each, budget {args.budget_s:.0f} s")
    with (clock_factory() if clock_factory else ClockSampler()) as clock:
        outcome = run_plan(timer, shapes, budget_s=args.budget_s, iters=iters, clock=clock, price=price,
                           log=print_fn if args.verbose else (lambda s: None))
    paths = write_outputs(outcome, device, out_dir)
    print_fn(paths["markdown"].read_text().split("## Every measured shape")[0].rstrip())
    print_fn("\nwritten: " + ", ".join(str(p) for p in paths.values()))
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("measure-gpu", help="time the kernel table's shapes on this GPU with production kernels and "
                                           "write its own table (docs/CUDA.md)")
    p.add_argument("--device", help="device file to price as (default: from the GPU's name; H200 for --dry-run "
                                    "without a GPU)")
    p.add_argument("--table", default="H800", help="shipped kernel table whose shapes are timed (default H800)")
    p.add_argument("--out", help="output folder (default ./measure-gpu-<DEVICE>)")
    p.add_argument("--budget-s", type=float, default=480.0, help="stop starting new shapes past this many seconds")
    p.add_argument("--quick", action="store_true", help=f"half the shapes of every family, {QUICK_ITERS} launches each")
    p.add_argument("--iters", type=int, help=f"timed launches per shape (default {DEFAULT_ITERS}, quick {QUICK_ITERS})")
    p.add_argument("--no-dsperf-kernels", action="store_true", help="time only the production kernels")
    p.add_argument("--dry-run", action="store_true", help="list the shapes and the estimated time; time nothing")
    p.add_argument("--verbose", action="store_true", help="a line per shape as it is measured")

