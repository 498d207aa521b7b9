"""dsperf measure-gpu, its plan: the families it times and with which kernel, the shapes of a shipped
table it times them at (Shape, plan_shapes), the model's price and time estimate of each (Pricer,
estimate_s), and what a run measured (Measurement, Outcome)."""
from __future__ import annotations

import dataclasses
import math

# The families the production timer covers, in the order a round of the plan visits them.
PRODUCTION_FAMILIES = ("gemm_fp8", "gemm_bf16", "grouped_masked", "grouped_contiguous", "mla_decode", "mla_prefill")
DSPERF_FAMILIES = ("grouped_masked", "grouped_contiguous", "mla_decode")
TABLE_COLUMNS = ("family", "m", "n", "k", "groups", "batch", "kv_len", "heads", "q_len", "bytes", "dtype", "latency_us",
                 "source")
SHAPE_FIELDS = ("m", "n", "k", "groups", "batch", "kv_len", "heads", "q_len", "bytes")
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
    ("elementwise", "production"): "torch.mul BF16 reading and writing half the call's bytes each (a stand-in of the "
                                   "call's size for a fused norm, RoPE or quantisation kernel)",
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
        return " ".join(f"{k}={format_number(v)}" for k, v in self.dims) + f" {self.dtype}"

    def input_bytes(self) -> float:
        """Bytes of the inputs and output a measurement allocates (the budget and the memory check)."""
        g = self.get
        if self.family in ("gemm_fp8", "gemm_bf16"):
            # BF16 staging of both operands (FP8 ones are converted from it), the output in BF16;
            # a per-head GEMM (groups > 1) holds one of each per head.
            e = g("groups", 1)
            return e * (2.0 * (g("m") * g("k") + g("n") * g("k")) * 1.5 + 2.0 * g("m") * g("n"))
        if self.family == "elementwise":
            return float(g("bytes"))
        if self.family.startswith("grouped"):
            e, m = g("groups", 1), g("m")
            return 2.0 * e * (m * g("k") + g("n") * g("k")) + 4.0 * e * m * g("n")
        if self.family == "mla_decode":
            tokens = g("batch") * math.ceil(g("kv_len") / MLA_PAGE) * MLA_PAGE
            return 2.0 * tokens * 576 + 4.0 * g("batch") * g("q_len", 1) * g("heads") * 576 * 2
        if self.family == "mla_prefill":
            tokens, heads, keys = prefill_keys(self)
            return 2.0 * heads * (tokens * (192 + 128) + keys * (192 + 128))
        return 0.0


def prefill_keys(shape: "Shape") -> tuple[int, int, int]:
    """(new tokens, heads, keys) of an mla_prefill shape: keys = kv_len (cached prefix + new tokens)
    where the shape gives it (a step's call), else the tokens (a table row: no prefix)."""
    tokens = int(shape.get("m"))
    return tokens, int(shape.get("heads")), max(tokens, int(shape.get("kv_len", 0) or 0))


def format_number(v) -> str:
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

    rows = G.read_table_rows(G.tables_dir() / f"{table}.csv")
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

        return model_price_us(self.G.SM, self.tables, self.spec, shape.family, self.G.row_shape(shape.row()))


def estimate_s(shape: Shape, price_us: float, iters: int, first_of_family: bool = False) -> float:
    """The seconds measuring one shape is expected to take (the budget's unit)."""
    launches = 2 * iters + 2
    first = FIRST_CALL_S.get(shape.family, FIRST_CALL_DEFAULT_S) if first_of_family else 0.0
    return FIXED_S + shape.input_bytes() / INIT_BPS[shape.kernel] + launches * (price_us + FLUSH_US) * 1e-6 + first


# ---- what a run measured -----------------------------------------------------------------------------
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
