"""The window exchange's cost term: what dsperf.ep's shared-memory dispatch + combine costs a rank
under uniform routing, for the bench to set beside the measured exchange.

On one node the exchange has no link of its own: every byte moves by a copy a rank makes (the
source writes each record or pair row into the destination's window; the source reads each BF16
row back from the peers' windows and writes its FP32 tokens). So the term is the bytes those copies
read and write at the rank's copy rate (read + write bytes per second, with every rank copying at
once), plus a fixed cost per call (syncs and host code, measured as an exchange of no tokens).
The cost model's all-to-all term (kernel_cost.ep_exchange_ms) still prices the MPI_Alltoallv
exchange (link bytes at the link rate plus the packing around it), which is what crosses nodes.
"""
from __future__ import annotations

import math


def window_exchange_bytes(tokens, *, hidden=7168, top_k=8, experts=256, ranks, layout="token", fp8=True) -> dict:
    """Bytes a rank's copies read and write in one dispatch + combine through the windows, expected
    under uniform routing: dispatch (records or pair rows, read at the source and written at the
    destination), combine (each BF16 row read once, each FP32 token written once)."""
    if layout not in ("token", "expert", "masked"):
        raise ValueError(f"layout must be 'token', 'expert' or 'masked', got {layout!r}")
    for name, v in (("tokens", tokens), ("hidden", hidden), ("top_k", top_k), ("experts", experts), ("ranks", ranks)):
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "tokens" else 1):
            raise ValueError(f"{name} must be an integer >= {0 if name == 'tokens' else 1}, got {v!r}")
    if experts % ranks or top_k > experts:
        raise ValueError("experts must be a multiple of ranks and at least top_k")
    T, H, K = tokens, hidden, top_k
    scales = 4 * math.ceil(H / 128) if fp8 else 0
    values = H if fp8 else 2 * H
    if layout == "token":
        # P(a rank holds none of a token's top_k experts) = C(E - E/W, K) / C(E, K).
        per_rank = experts // ranks
        miss = math.prod(max(0.0, (experts - per_rank - i) / (experts - i)) for i in range(K))
        rows = T * ranks * (1 - miss)
        row_bytes = values + (-values % 4) + scales + 8 * K
    else:
        rows = T * K
        row_bytes = values + scales
    dispatch = 2 * rows * row_bytes
    combine = rows * 2 * H + T * 4 * H
    return dict(dispatch_bytes=dispatch, combine_bytes=combine, bytes=dispatch + combine)


def window_exchange_ms(tokens, *, copy_gbps, overhead_us=0.0, **shape) -> float:
    """Milliseconds for one dispatch + combine: window_exchange_bytes at copy_gbps (read + write
    bytes per second per rank, 1e9) plus overhead_us per call."""
    if not (isinstance(copy_gbps, (int, float)) and copy_gbps > 0):
        raise ValueError(f"copy_gbps must be a number > 0, got {copy_gbps!r}")
    if not (isinstance(overhead_us, (int, float)) and overhead_us >= 0):
        raise ValueError(f"overhead_us must be a number >= 0, got {overhead_us!r}")
    return window_exchange_bytes(tokens, **shape)["bytes"] / (copy_gbps * 1e6) + overhead_us / 1e3
