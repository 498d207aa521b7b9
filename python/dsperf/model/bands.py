"""Error bands by regime, measured by leave-one-out over the validation's `check` points.

A prediction's band is how far the model has been from published figures in the same regime,
where a regime is (how the device's kernel table was obtained, the phase, what bounds the step):

- table: ``measured`` (a table of kernel timings measured on that GPU family), ``derived`` (the
  Hopper curve over shapes scaled to published figures of the device at large shapes; see
  model/derive_table.py), ``partial`` (rows for some core families only, say no grouped-matmul rows;
  no shipped table is, since 2026-11-28) or ``default`` (no table: every compute call at the default efficiency);
- phase: ``decode``, ``prefill`` or ``e2e`` (prefill and decode on the same GPUs);
- bound: ``latency`` where a decode step serves fewer than LATENCY_BATCH requests per GPU (fixed
  costs, launches and all-reduces dominate), else ``throughput``.

The band of a regime is the conformal BAND_QUANTILE quantile of |error| over the `check` points in
it (`design` points, on which a term was shaped, would make it look better than it is): of n
errors, the ceil((n + 1) x BAND_QUANTILE)-th smallest. A plain quantile of n errors covers a new
point less often than BAND_QUANTILE (the new point is one more draw, and the quantile interpolates
below the largest errors); the conformal rank covers it at least that often when the new point is
like the others (split conformal prediction). A regime whose rank would be past its largest error
has too few points to promise the share, as does one with fewer than MIN_POINTS points: it falls
back to a coarser one, (table, phase), then (table); where no regime of that table kind has
enough points, the band is the worst |error| of any check point. Leave-one-out: a point's own band is computed without it, so
the share of check points inside their band (``coverage``) is an honest estimate of how often a
printed band holds.

A `design` point never narrows a band, but it floors it: a regime's band is at least the largest
|error| of the design points in that very regime (of any design point, where the band is the worst
check error). An in-sample error is an optimistic estimate of
the error a new point meets, so a band narrower than the model's miss on points it was shaped on
(TensorRT-LLM's one-request H200 decode, +65% against the ±20% its regime's check points give) would
promise what the model has already failed to do there.

The bands are data: `dsperf validate --write-bands` writes data/validation/bands.csv, which
predictions read; a test checks that the shipped file matches the current validation.
"""
from __future__ import annotations

import csv
import functools
import math
from importlib import resources

import numpy as np
import pandas as pd

LATENCY_BATCH = 8           # requests per GPU below which a decode step is called latency-bound (assumed)
BAND_QUANTILE = 0.8         # the band holds for about this share of points in its regime (assumed)
# The band of a regime no table kind has enough check points for: the worst error of any point.
WORST_OF_ALL = "worst of all"
MIN_POINTS = 3              # fewer check points than this in a regime: use the coarser regime
TABLE_KINDS = ("measured", "derived", "partial", "default")
BAND_COLUMNS = ("table", "phase", "bound", "points", "band", "from_regime")


def phases() -> tuple:
    """The phases a regime may hold: those a published point may measure, declared once with how each
    is priced (dsperf.model.validation.POINT_PHASES; imported here, not at the top, since validation
    reads this module)."""
    from .validation import POINT_PHASES

    return tuple(POINT_PHASES)


def bands_path():
    return resources.files("dsperf") / "data" / "validation" / "bands.csv"


def bound_of(phase: str, batch: float | None) -> str:
    return "latency" if phase == "decode" and batch is not None and batch < LATENCY_BATCH else "throughput"


def conformal_rank(n: int) -> int:
    """The 1-based rank, among n sorted |errors|, of the band that holds for a new point at least
    BAND_QUANTILE of the time: ceil((n + 1) x BAND_QUANTILE) (above n: no band from n points)."""
    return math.ceil(round((n + 1) * BAND_QUANTILE, 9))


def _quantile(errors) -> float:
    """The conformal BAND_QUANTILE quantile of |errors| (NaN where there are too few of them)."""
    e = np.sort(np.abs(np.asarray(errors, dtype=float)))
    rank = conformal_rank(len(e))
    return float(e[rank - 1]) if 1 <= rank <= len(e) else math.nan


def _regimes(table: str, phase: str, bound: str):
    """From the regime itself to the coarsest: the keys a band is looked for under."""
    return [(table, phase, bound), (table, phase, "*"), (table, "*", "*"), ("*", "*", "*")]


def _matching(df: pd.DataFrame, key) -> pd.DataFrame:
    table, phase, bound = key
    m = np.ones(len(df), dtype=bool)
    if table != "*":
        m &= df["table"].to_numpy() == table
    if phase != "*":
        m &= df["phase"].to_numpy() == phase
    if bound != "*":
        m &= df["bound"].to_numpy() == bound
    return df[m]


def band_from(check: pd.DataFrame, table: str, phase: str, bound: str,
              design: pd.DataFrame | None = None) -> tuple[float, int, str]:
    """(band, points it was measured on, the regime they came from) for a regime, from the given
    check points (with columns table, phase, bound, error), floored by the largest |error| of the
    given design points (with columns point too) in the regime itself."""
    band, n, src = _check_band(check, table, phase, bound)
    if design is not None and len(design):
        # The regime's own design points; where the regime is untested (the worst check error),
        # every design point: the worst error the model has shown anywhere.
        own = design if src == WORST_OF_ALL else _matching(design, (table, phase, bound))
        if len(own) and (worst := float(own["error"].abs().max())) > band:
            point = own.loc[own["error"].abs().idxmax(), "point"]
            return worst, n, f"{src}, floored by design point {point}"
    return band, n, src


def _check_band(check: pd.DataFrame, table: str, phase: str, bound: str) -> tuple[float, int, str]:
    for key in _regimes(table, phase, bound)[:-1]:
        g = _matching(check, key)
        if len(g) >= MIN_POINTS and math.isfinite(band := _quantile(g["error"])):
            return band, int(len(g)), "/".join(key)
    # No regime of this table kind has enough points: the model is untested there, and the band is
    # the worst error of any check point, not a quantile.
    if len(check) == 0:
        return math.nan, 0, "none"
    return float(check["error"].abs().max()), int(len(check)), WORST_OF_ALL


def leave_one_out(df: pd.DataFrame) -> pd.DataFrame:
    """Per peak point: its regime's band computed from the other check points (floored by the other
    design points, band_from), and whether its error fell inside. df: validation rows with point,
    table, phase, bound, role, kind, error."""
    peaks = df[df["kind"] == "peak"]
    check, design = peaks[peaks["role"] == "check"], peaks[peaks["role"] == "design"]
    bands, inside = [], []
    for idx, row in df.iterrows():
        if row["kind"] != "peak":
            bands.append(math.nan)
            inside.append(None)
            continue
        band, _, _ = band_from(check.drop(index=idx, errors="ignore"), row["table"], row["phase"], row["bound"],
                               design.drop(index=idx, errors="ignore"))
        bands.append(band)
        inside.append(bool(abs(row["error"]) <= band) if math.isfinite(band) else False)
    out = df.copy()
    out["loo_band"] = bands
    out["inside_band"] = inside
    return out


# The latency section's phase: a serving simulation's TTFT and TPOT-like figures (its bounds are
# dsperf.model.validation_latency.BOUND_LABELS' keys).
SERVING_PHASE = "serving"


def serving_bounds() -> tuple:
    """The latency section's bounds (read lazily: validation_latency reads this module)."""
    from .validation_latency import BOUND_LABELS

    return tuple(BOUND_LABELS)


def _regime_rows(df: pd.DataFrame, regimes) -> list[dict]:
    peaks = df[df["kind"] == "peak"]
    check, design = peaks[peaks["role"] == "check"], peaks[peaks["role"] == "design"]
    rows = []
    for table, phase, bound in regimes:
        band, n, src = band_from(check, table, phase, bound, design)
        rows.append({"table": table, "phase": phase, "bound": bound, "points": n,
                     "band": round(band, 6), "from_regime": src})
    return rows


def peak_band_table(df: pd.DataFrame) -> pd.DataFrame:
    """The band of every regime a grounded step's prediction can fall in (table kind x phase x
    bound), from the peak section's validation: its check points, floored by its design points."""
    regimes = [(table, phase, bound) for table in TABLE_KINDS for phase in phases()
               for bound in ("latency", "throughput") if phase == "decode" or bound == "throughput"]
    return pd.DataFrame(_regime_rows(df, regimes), columns=list(BAND_COLUMNS))


def serving_band_table(serving: pd.DataFrame) -> pd.DataFrame:
    """The band of every regime a serving simulation's TTFT and TPOT-like figures can fall in
    (table kind x serving x bound), from the latency section's validation."""
    regimes = [(table, SERVING_PHASE, bound) for table in TABLE_KINDS for bound in serving_bounds()]
    return pd.DataFrame(_regime_rows(serving, regimes), columns=list(BAND_COLUMNS))


def band_table(df: pd.DataFrame, serving: pd.DataFrame | None = None) -> pd.DataFrame:
    """What bands.csv holds: the peak section's regimes (peak_band_table) and, given the latency
    section's validation, the serving ones (serving_band_table)."""
    tables = [peak_band_table(df)] + ([serving_band_table(serving)] if serving is not None else [])
    return pd.concat(tables, ignore_index=True)


def write_bands(df: pd.DataFrame, serving: pd.DataFrame, path=None) -> str:
    """Write bands.csv from the peak section's validation (df) and the latency section's (serving)."""
    path = path or bands_path()
    table = band_table(df, serving)
    with open(path, "w", newline="") as f:
        f.write("# Error bands by regime: the conformal 80% quantile of |error| (dsperf.model.bands.conformal_rank) over dsperf validate's check points, "
                "floored by the regime's design points; phase serving: the latency section's "
                "(dsperf.model.bands; written by `dsperf validate --write-bands`).\n")
        table.to_csv(f, index=False, lineterminator="\n")
    return str(path)


@functools.lru_cache(maxsize=1)
def _shipped() -> dict:
    with bands_path().open(newline="") as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    return {(r["table"], r["phase"], r["bound"]): (float(r["band"]), int(r["points"]), r["from_regime"])
            for r in rows}


def lookup(table: str, phase: str, bound: str) -> tuple[float, int, str]:
    """The shipped band of a regime: (band, points, the regime it was measured on). The shipped
    file holds every regime (tests/test_bands.py); a file written before a regime existed gives
    NaN with the reason, which is what validation itself sees while it measures the bands."""
    return _shipped().get((table, phase, bound), (math.nan, 0, "no band: bands.csv has no row for this regime"))


def serving_bands(table: str) -> dict:
    """The shipped bands a serving simulation on a device with this kind of table prints, one per
    latency-section bound: {"band_regime": "<table>/serving", "<bound>_band": band, ...}."""
    if table not in TABLE_KINDS:
        raise ValueError(f"table must be one of {', '.join(TABLE_KINDS)}, got {table!r}")
    out = {"band_regime": f"{table}/{SERVING_PHASE}"}
    for bound in serving_bounds():
        out[f"{bound}_band"] = lookup(table, SERVING_PHASE, bound)[0]
    return out


def describe(band: float) -> str:
    """A band as a user reads it: error = predicted / published - 1 within +/- band puts the published
    figure between 1 / (1 + band) and 1 / (1 - band) times the prediction, which for a wide band is
    far from symmetric (+/- 97% allows a figure 33x the prediction)."""
    if isinstance(band, bool) or not isinstance(band, (int, float)) or band < 0:
        raise ValueError(f"band must be a number >= 0 (NaN: no band), got {band!r}")
    if not math.isfinite(band):
        return "no band"
    hi = f"{1 / (1 - band):.2g}x" if band < 1 else "any multiple of"
    return f"+/- {band:.0%}: the published figure {1 / (1 + band):.2g}x to {hi} the prediction"
