"""The benchmark harness: builds the inputs of a kernel point, times its calls, and sweeps.

A point is (family, params) as dsperf.kernel_cost names them. `build(family, params, pool)` makes
the kernel's inputs (random BF16/FP8 data from a shared pool, so a sweep generates each weight
tensor once) and returns a zero-argument callable that makes one call, plus the parameters only a
run can tell (how many experts the gate's routing activates). `measure` times it: warm-up calls,
then repeats, each after flushing the last-level cache when cold=True (the weights stream from
memory, as in a real decode step) or back to back when cold=False (cache-resident). `run_sweep`
does a list of points, with a progress line, and returns a DataFrame (CSV-ready).
"""
from __future__ import annotations

import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, Mapping

import numpy as np

from . import kernels as K
from .kernel_cost import COMPOSITE_FAMILIES, FAMILIES, VARIANTS, work

# DeepSeek-V3's shapes.
DIM, MOE_INTER, Q_LORA, KV_LORA, NOPE, ROPE, V = 7168, 2048, 1536, 512, 128, 64, 128


def l3_bytes() -> int:
    """The last-level cache size from sysfs (64 MiB if it cannot be read)."""
    for index in (3, 2):
        try:
            text = Path(f"/sys/devices/system/cpu/cpu0/cache/index{index}/size").read_text().strip()
            mult = {"K": 1 << 10, "M": 1 << 20}.get(text[-1], 1)
            return int(text.rstrip("KM")) * mult
        except (OSError, ValueError):
            continue
    return 64 << 20


def random_bf16(rng, shape, scale_exp=118):
    """BF16 values of magnitude 2^(scale_exp-127) .. 2^(scale_exp-119), made from random bits: fast
    for gigabytes, no NaN or Inf."""
    sign = rng.integers(0, 2, size=shape, dtype=np.uint16) << 15
    exp = rng.integers(scale_exp, scale_exp + 8, size=shape, dtype=np.uint16) << 7
    return (sign | exp | rng.integers(0, 128, size=shape, dtype=np.uint16)).view(K.BF16)


def random_fp8(rng, shape):
    """FP8 e4m3 bit patterns, every code but NaN."""
    bits = rng.integers(0, 256, size=shape, dtype=np.uint8)
    bits[(bits & 0x7F) == 0x7F] = 0x7E
    return bits.view(K.FP8)


class Pool:
    """Random arrays by (name, shape, dtype), generated once and reused; a request for a smaller
    leading dimension gets a view of the bigger array (so 2 of 8 experts costs nothing new)."""

    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)
        self._arrays: dict[tuple, np.ndarray] = {}

    def _make(self, shape, kind):
        if kind == "bf16":
            return random_bf16(self.rng, shape)
        if kind == "fp8":
            return random_fp8(self.rng, shape)
        if kind == "scale":
            return self.rng.uniform(1e-4, 2e-3, size=shape).astype(np.float32)
        if kind == "f32":
            return self.rng.standard_normal(shape, dtype=np.float32)
        raise ValueError(kind)

    def get(self, name, shape, kind="bf16"):
        shape = tuple(int(s) for s in shape)
        key = (name, shape[1:], kind)
        have = self._arrays.get(key)
        if have is None or have.shape[0] < shape[0]:
            have = self._arrays[key] = self._make(shape, kind)
        return have[: shape[0]]

    def weight(self, name, shape, dtype):
        """A weight [.., n, k] in BF16, or FP8 with its 128x128 block scales: (w, scale or None)."""
        if dtype == "bf16":
            return self.get(name, shape, "bf16"), None
        scale_shape = tuple(shape[:-2]) + (math.ceil(shape[-2] / 128), math.ceil(shape[-1] / 128))
        return self.get(name, shape, "fp8"), self.get(name + ".scale", scale_shape, "scale")


def _even_split(rows, parts):
    """rows spread as evenly as possible over parts (the first ones get the remainder)."""
    base, extra = divmod(rows, parts)
    return np.array([base + (i < extra) for i in range(parts)], np.int64)


def _mla_weights(pool, heads, dim=DIM):
    w = {"wq_a": pool.get("wq_a", (Q_LORA, dim)), "q_norm": np.ones(Q_LORA, np.float32),
         "wq_b": pool.get(f"wq_b{heads}", (heads * (NOPE + ROPE), Q_LORA)), "wkv_a": pool.get("wkv_a", (KV_LORA + ROPE, dim)),
         "kv_norm": np.ones(KV_LORA, np.float32), "wkv_b": pool.get(f"wkv_b{heads}", (heads * (NOPE + V), KV_LORA)),
         "wo": pool.get(f"wo{heads}", (dim, heads * V))}
    key = ("absorbed", heads, dim)
    if key not in pool._arrays:
        pool._arrays[key] = K.mla_absorb_weights(w, heads=heads, nope=NOPE, rope=ROPE, v=V)
    return pool._arrays[key]


def _mla_cache(pool, variant, prefix, tokens, heads):
    cache = K.MlaCache(prefix + tokens, KV_LORA, ROPE, decompressed=variant == "CD", heads=heads, nope=NOPE, v=V)
    cache.latent[:] = pool.get("latent", cache.latent.shape)
    cache.k_pe[:] = pool.get("k_pe", cache.k_pe.shape)
    if cache.k_full is not None:
        cache.k_full[:] = pool.get(f"k_full{heads}", cache.k_full.shape)
        cache.v_full[:] = pool.get(f"v_full{heads}", cache.v_full.shape)
    return cache


def _moe_weights(pool, experts, dim, inter, shared_inter, dtype):
    w13, s13 = pool.weight("w13", (experts, 2 * inter, dim), dtype)
    w2, s2 = pool.weight("w2", (experts, dim, inter), dtype)
    out = {"gate_weight": pool.get("gate_w", (experts, dim)), "gate_bias": np.zeros(experts, np.float32),
           "w13": w13, "w2": w2, "w13_scale": s13, "w2_scale": s2}
    if shared_inter:
        sw13, ss13 = pool.weight("shared_w13", (2 * shared_inter, dim), dtype)
        sw2, ss2 = pool.weight("shared_w2", (dim, shared_inter), dtype)
        out.update(shared_w13=sw13, shared_w2=sw2, shared_w13_scale=ss13, shared_w2_scale=ss2)
    return out


def _gate_groups(experts, top_k):
    """DeepSeek-V3's grouping where it fits (8 groups, keep 4), else one group."""
    groups = 8 if experts % 8 == 0 and experts >= 16 and experts // 8 * 4 >= top_k else 1
    return dict(n_group=groups, topk_group=min(4, groups), top_k=top_k, route_scale=2.5)


def _active_experts(moe, x, experts, top_k):
    _, ids = K.moe_gate(x, moe["gate_weight"], moe["gate_bias"], **_gate_groups(experts, top_k))
    return int(np.unique(ids).size)


def build(family: str, params: Mapping, pool: Pool) -> tuple[Callable[[], object], dict]:
    """(call, measured_params): a zero-argument callable making one kernel call, and the params
    with what only the inputs decide filled in (moe_layer / decode_layer: `active`)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown kernel family {family!r}; known: {', '.join(FAMILIES)}")
    if family not in COMPOSITE_FAMILIES:
        work(family, params)  # the cost model's checks of the sizes, before any array is made
    p = dict(params)
    dt = p.get("dtype", "bf16")
    if family == "linear":
        x = pool.get("x", (p["m"], p["k"]))
        w, s = pool.weight("linear_w", (p["n"], p["k"]), dt)
        return (lambda: K.linear(x, w, s)), p
    if family == "gate":
        x = pool.get("x", (p["tokens"], p["dim"]))
        w = pool.get("gate_w", (p["experts"], p["dim"]))
        bias = np.zeros(p["experts"], np.float32)
        g = _gate_groups(p["experts"], p["top_k"])
        return (lambda: K.moe_gate(x, w, bias, **g)), p
    if family == "dispatch_combine":
        t, k, d = p["tokens"], p["top_k"], p["dim"]
        x = pool.get("x", (t, d))
        ids = pool.rng.integers(0, 256, size=(t, k)).astype(np.int32)
        _, position, source = K.moe_route(ids, 256)
        y_perm = pool.get("y_perm", (t * k, d), "f32")
        weights = np.full((t, k), 1.0 / k, np.float32)

        def call():
            K.moe_permute(x, source)
            return K.moe_unpermute(y_perm, position, weights)

        return call, p
    if family in ("experts_contiguous", "experts_masked"):
        rows, active, d, i = p["rows"], p["active"], p["dim"], p["inter"]
        w13, s13 = pool.weight("w13", (active, 2 * i, d), dt)
        w2, s2 = pool.weight("w2", (active, d, i), dt)
        counts = _even_split(rows, active)
        if family == "experts_contiguous":
            x = pool.get("x", (rows, d))
            offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
            return (lambda: K.experts_contiguous(x, offsets, w13, w2, s13, s2)), p
        capacity = int(counts.max()) if rows else 1
        x = pool.get("x_masked", (active, capacity, d))
        c32 = counts.astype(np.int32)
        return (lambda: K.experts_masked(x, c32, w13, w2, s13, s2)), p
    if family == "mla_decode":
        b, q, h = p["batch"], p["q_len"], p["heads"]
        seqlens = _even_split(p["keys"], b).astype(np.int32)
        if seqlens.min() < q:
            raise ValueError("mla_decode: every request needs at least q_len keys")
        blocks_per = [math.ceil(s / 64) for s in seqlens]
        cache = K.PagedMlaCache(sum(blocks_per), 64, KV_LORA, ROPE, dtype=dt)
        cache.latent[:] = pool.get("paged_latent", cache.latent.shape, dt)
        cache.rope[:] = pool.get("paged_rope", cache.rope.shape)
        if cache.latent_scale is not None:
            cache.latent_scale[:] = pool.get("paged_scale", cache.latent_scale.shape, "scale")
        table = np.zeros((b, max(blocks_per)), np.int32)
        start = 0
        for r, n in enumerate(blocks_per):
            table[r, :n] = np.arange(start, start + n)
            start += n
        qn = pool.get("q_nope", (b, q, h, KV_LORA))
        qr = pool.get("q_rope", (b, q, h, ROPE))
        splits = max(1, min(8, int(seqlens.max()) // 1024))
        return (lambda: K.mla_decode(qn, qr, cache.latent, cache.rope, table, seqlens, 192 ** -0.5, splits,
                                     latent_scale=cache.latent_scale)), p
    if family in ("mla_prefill", "mla_step"):
        variant, t, prefix, h = p["variant"], p["tokens"], p["prefix"], p["heads"]
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
        w = _mla_weights(pool, h, p.get("dim", DIM))
        cache = _mla_cache(pool, variant, prefix, t, h)
        x = pool.get("x", (t, p.get("dim", DIM)))
        freqs = K.rope_frequencies()

        def call():
            cache.prefix = prefix
            return K.mla_forward(variant, x, w, cache, heads=h, freqs=freqs, softmax_scale=192 ** -0.5)

        return call, p
    # Composite layers.
    d, i, e, k = p["dim"], p["inter"], p["experts"], p["top_k"]
    moe = _moe_weights(pool, e, d, i, p["shared_inter"], dt)
    gate = _gate_groups(e, k)
    x = pool.get("x", (p["tokens"], d))
    p["active"] = _active_experts(moe, x, e, k)
    if family == "moe_layer":
        def call():
            return K.moe_layer(x, moe["gate_weight"], moe["w13"], moe["w2"], gate_bias=moe["gate_bias"],
                               shared_w13=moe.get("shared_w13"), shared_w2=moe.get("shared_w2"),
                               w13_scale=moe["w13_scale"], w2_scale=moe["w2_scale"],
                               shared_w13_scale=moe.get("shared_w13_scale"),
                               shared_w2_scale=moe.get("shared_w2_scale"), **gate)

        return call, p
    variant, t, prefix, h = p["variant"], p["tokens"], p["prefix"], p["heads"]
    layer = {"attn_norm": np.ones(d, np.float32), "ffn_norm": np.ones(d, np.float32),
             "mla": _mla_weights(pool, h, d), "moe": dict(moe, **gate)}
    cache = _mla_cache(pool, variant, prefix, t, h)
    freqs = K.rope_frequencies()

    def call():
        cache.prefix = prefix
        return K.decode_layer(variant, x, layer, cache, heads=h, freqs=freqs, softmax_scale=192 ** -0.5)

    return call, p


class CacheFlusher:
    """Evicts the last-level cache by reading a buffer 1.5x its size."""

    def __init__(self):
        self.buf = np.ones(int(l3_bytes() * 1.5) // 8, np.int64)

    def __call__(self):
        return int(self.buf.sum())


def _cpu_jiffies():
    """(busy jiffies of the whole machine, jiffies of this process), or None where /proc is absent."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        total = [int(v) for v in fields]
        busy = sum(total) - total[3] - (total[4] if len(total) > 4 else 0)  # minus idle and iowait
        own = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        return busy, int(own[11]) + int(own[12])  # utime + stime of all threads
    except (OSError, ValueError, IndexError):
        return None


def _foreign_cores(before, after, seconds):
    """Cores other processes kept busy on average between two _cpu_jiffies readings."""
    if before is None or after is None or seconds <= 0:
        return 0.0
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    return max(0.0, ((after[0] - before[0]) - (after[1] - before[1])) / hz / seconds)


def measure(call: Callable[[], object], repeats=5, warmup=1, flush: Callable[[], object] | None = None,
            max_foreign_cores=0.3, attempts=4, min_seconds=0.4) -> dict:
    """Times `repeats` calls after `warmup` untimed ones; flush (if given) runs before each timed
    call, untimed. Returns median, min and spread ((p75 - p25) / median) in ms, and the cores other
    processes used meanwhile: on a shared machine the point is measured again (up to `attempts`
    times) while they use more than max_foreign_cores, and the least disturbed attempt is kept."""
    if repeats < 1 or warmup < 0:
        raise ValueError("repeats must be >= 1 and warmup >= 0")
    best = None
    for attempt in range(attempts):
        for _ in range(warmup):
            call()
        times = []
        j0, w0 = _cpu_jiffies(), time.perf_counter()
        # Short calls repeat more (up to 4x `repeats`, within about min_seconds): their medians are
        # the noisiest.
        while len(times) < repeats or (len(times) < 4 * repeats and sum(times) < min_seconds * 1e3):
            if flush is not None:
                flush()
            t0 = time.perf_counter()
            call()
            times.append((time.perf_counter() - t0) * 1e3)
        foreign = _foreign_cores(j0, _cpu_jiffies(), time.perf_counter() - w0)
        if best is None or foreign < best[1]:
            best = (times, foreign)
        if foreign <= max_foreign_cores:
            break
        time.sleep(1.0 * (attempt + 1))
    times, foreign = best
    times.sort()
    med = statistics.median(times)
    q1, q3 = np.percentile(times, [25, 75])
    return {"measured_ms": med, "min_ms": times[0], "spread": float((q3 - q1) / med) if med > 0 else 0.0,
            "repeats": len(times), "foreign_cores": round(foreign, 3)}


def _progress(i, n, label, stream):
    if stream is None:
        return
    width = 24
    done = int(width * i / n) if n else width
    stream.write(f"\r[{'#' * done}{'.' * (width - done)}] {i}/{n} {label[:60]:<60}")
    if i == n:
        stream.write("\n")
    stream.flush()


def run_sweep(points: Iterable[tuple[str, Mapping]], repeats=5, warmup=1, cold=True, progress=True,
              pool: Pool | None = None):
    """Measures every (family, params) point: one row per point with the family, its params
    (one column each), measured_ms, min_ms, spread, repeats and cold."""
    import pandas as pd

    points = list(points)
    pool = pool or Pool()
    flush = CacheFlusher() if cold else None
    stream = sys.stderr if progress else None
    rows = []
    for n, (family, params) in enumerate(points):
        label = f"{family} " + " ".join(f"{k}={v}" for k, v in params.items())
        _progress(n, len(points), label, stream)
        call, p = build(family, params, pool)
        rows.append({"kernel": family, **p, **measure(call, repeats, warmup, flush), "cold": cold})
    _progress(len(points), len(points), "done", stream)
    return pd.DataFrame(rows)

