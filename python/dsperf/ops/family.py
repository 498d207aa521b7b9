"""What a kernel family declares, in one place: its parameters, its work for the cost model, how
its efficiency is keyed, how the harness builds a call, the points the sweeps measure, the kernel
it runs and the numpy reference it is held to."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from .. import _C

KernelWork = _C.kernel_cost.KernelWork

# DeepSeek-V3's shapes: the sweeps measure one rank of a deployment.
DIM, MOE_INTER, Q_LORA, KV_LORA, NOPE, ROPE, V = 7168, 2048, 1536, 512, 128, 64, 128

Params = Mapping[str, object]
Point = tuple[str, dict]


def is_fp8(params: Params) -> bool:
    """The weight (or cache) dtype of a point: "bf16" (the default) or "fp8"."""
    dt = params.get("dtype", "bf16")
    if dt not in ("bf16", "fp8"):
        raise ValueError(f"dtype must be 'bf16' or 'fp8', got {dt!r}")
    return dt == "fp8"


@dataclass(frozen=True)
class OpFamily:
    """One kernel family.

    name: the name points, sweeps, calibration keys and reports use.
    params: the parameters a point gives ("dtype" may be left out: BF16).
    token_params: those that count tokens (bounded by the token limit, the rest by the size limit).
    kernels: the dsperf.kernels functions one call runs; references: what they are held to in the
        tests (tests/test_kernels_*), as paths below dsperf ("reference.linear": the numpy
        reference; "kernels.decode_layer_by_ops": the same block from kernels that are each held
        to theirs).
    runs_on: "host" (numpy arrays) and, where dsperf.kernels hands GPU arrays to the dsperf.cuda
        twins of the same names, "gpu".
    work: FLOPs and bytes of one call (base families), priced by kernel_cost.
    parts: the points a call is priced as besides its own work: the GEMMs of an MLA layer (priced
        as `linear`), or every part of a composite family (which has no work of its own and is
        never fitted: it tests whether the model composes).
    key_by_dtype / key_by_variant / rows_per_weight: what the efficiency key adds to the name: the
        dtype, the MLA variant, the rows regime of a GEMM (the rows that share each weight).
    build: (params, Pool) -> (call, params): a zero-argument callable making one call on inputs
        from the pool, and the params with what only the inputs decide filled in.
    table_rows: (params, measured microseconds) -> the rows of the grounded model's efficiency
        tables (python/dsperf/data/efficiency/*.csv columns) one measured call gives, so that
        `dsperf calibrate` writes this machine's table in the format the GPUs' tables have.
    example: a tiny point (a call in milliseconds) the tests and the docs use.
    fit_points / default_points: the calibration sweep's points and the report's (other shapes,
        so the report's errors are out of sample); large: those a quick sweep leaves out.
    """

    name: str
    params: tuple[str, ...]
    summary: str
    kernels: tuple[str, ...]
    references: tuple[str, ...]
    build: Callable[[Params, object], tuple[Callable[[], object], dict]]
    default_points: Callable[[], list[dict]]
    example: dict
    large: Callable[[Params], bool]
    token_params: tuple[str, ...] = ()
    runs_on: tuple[str, ...] = ("host",)
    work: Callable[[Params], KernelWork] | None = None
    parts: Callable[[Params], list[Point]] | None = None
    key_by_dtype: bool = False
    key_by_variant: bool = False
    rows_per_weight: Callable[[Params], float] | None = None
    fit_points: Callable[[], list[dict]] = field(default=lambda: [])
    table_rows: Callable[[Params, float], list[dict]] | None = None

    @property
    def composite(self) -> bool:
        """Priced only as the sum of its parts (no work of its own, never fitted)."""
        return self.work is None
