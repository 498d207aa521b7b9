"""The explorer's default price per GPU-hour: one row per device in data/prices.csv, each with the
tier it stands for and its source (or "assumed"). A caller's gpu_hour_usd replaces it; a device
without a row gets no cost (NaN), never a guess."""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from importlib import resources


@dataclass(frozen=True)
class Price:
    usd_per_gpu_hour: float
    basis: str   # the tier ("hyperscaler tier"), or "assumed"
    source: str


def load_prices(path=None) -> dict[str, Price]:
    """The price table, checked: every price positive and finite, every row with a basis and a
    source, no device twice."""
    path = path or resources.files("dsperf") / "data" / "prices.csv"
    with open(path, newline="") as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    out: dict[str, Price] = {}
    for i, row in enumerate(rows, start=1):
        where = f"{path}: row {i}"
        device = (row.get("device") or "").strip()
        if not device or device in out:
            raise ValueError(f"{where}: device must be given once, got {device!r}")
        try:
            usd = float(row["usd_per_gpu_hour"])
        except (TypeError, ValueError):
            raise ValueError(f"{where}: usd_per_gpu_hour must be a number, got {row.get('usd_per_gpu_hour')!r}") from None
        if not (math.isfinite(usd) and usd > 0):
            raise ValueError(f"{where}: usd_per_gpu_hour must be positive, got {usd}")
        basis, source = (row.get("basis") or "").strip(), (row.get("source") or "").strip()
        if not basis or not source:
            raise ValueError(f"{where}: basis and source must be given for {device}")
        out[device] = Price(usd, basis, source)
    return out


PRICES = load_prices()
DEFAULT_GPU_HOUR_USD = {device: p.usd_per_gpu_hour for device, p in PRICES.items()}
