"""EPLB: place logical experts, the heavy ones replicated, onto the physical slots of EP ranks.

The planning runs in C++ (csrc/ep/eplb.cpp); this module checks the arguments and returns numpy
arrays. Nothing here needs MPI.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from .. import _C

POLICIES = ("auto", "hierarchical", "global")


@dataclass(frozen=True)
class EplbPlan:
    """A placement. Arrays have a leading layer axis when the load had one.

    phy2log [.., num_physical]: the logical expert each physical slot holds; rank r of an EP group
    of num_gpus ranks owns slots [r * P / num_gpus, (r + 1) * P / num_gpus).
    log2phy [.., num_logical, max_replicas]: each logical expert's slots, ascending, -1 padded.
    logcnt [.., num_logical]: replicas per logical expert.
    """
    phy2log: np.ndarray
    log2phy: np.ndarray
    logcnt: np.ndarray
    num_gpus: int
    hierarchical: bool

    @property
    def num_physical(self) -> int:
        return self.phy2log.shape[-1]

    @property
    def slots_per_gpu(self) -> int:
        return self.num_physical // self.num_gpus


# Bounds that keep a plan's time and memory small: slots, GPUs, nodes, groups and experts each at most
# MAX_SLOTS (phy2log holds int32 expert ids), and the planning work, layers x slots x (experts + GPUs)
# (the greedy replication and packing loops; it also bounds log2phy, experts x replicas), at most
# MAX_WORK (well under a second and 256 MB; DeepSeek-V3's
# 61 layers x 288 slots x (256 + 36) is 5e6).
MAX_SLOTS = 2 ** 20
MAX_WORK = 2 ** 26


def _count(name, v, minimum=1, maximum=MAX_SLOTS):
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {v!r}")
    if v < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {v}")
    if v > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {v}")
    return int(v)


def _load(load):
    if isinstance(load, (str, bytes, dict)) or load is None:
        raise TypeError(f"load must be an array of numbers, got {load!r}")
    try:
        arr = np.asarray(load)
    except ValueError:  # ragged nesting
        raise ValueError("load must be [experts] or [layers, experts] (a rectangular array of numbers)") from None
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise TypeError(f"load must hold numbers (tokens per logical expert), got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    if arr.ndim not in (1, 2) or arr.shape[-1] == 0:
        raise ValueError(f"load must be [experts] or [layers, experts] with at least one expert, got shape {arr.shape}")
    if arr.shape[-1] > MAX_SLOTS:
        raise ValueError(f"load has {arr.shape[-1]} experts, more than {MAX_SLOTS}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError("load must hold finite values >= 0 (tokens per logical expert)")
    return arr


def rebalance(load, num_physical, *, num_gpus, num_groups=1, num_nodes=1, policy="auto") -> EplbPlan:
    """Plan the placement of len(load) logical experts onto num_physical slots over num_gpus ranks.

    load: tokens (or any non-negative load) per logical expert, [experts] or [layers, experts].
    policy: "hierarchical" packs the num_groups expert groups onto num_nodes nodes, replicates the
    heaviest experts within each node and packs the replicas onto the node's GPUs; "global"
    replicates and packs over all GPUs at once; "auto" takes hierarchical when num_groups is a
    multiple of num_nodes, else global.
    """
    arr = _load(load)
    if not isinstance(policy, str) or policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    p = _count("num_physical", num_physical)
    args = (_count("num_groups", num_groups), _count("num_nodes", num_nodes), _count("num_gpus", num_gpus))
    layers = arr.shape[0] if arr.ndim == 2 else 1
    work = layers * p * (arr.shape[-1] + args[2])
    if work > MAX_WORK:
        raise ValueError(f"num_physical ({p}) is too large a plan: layers x num_physical x (experts + num_gpus) = "
                         f"{work} exceeds {MAX_WORK}")
    phy2log, log2phy, logcnt, hier = _C.ep.rebalance(np.ascontiguousarray(arr.reshape(-1, arr.shape[-1])), p, *args,
                                                     policy)
    if arr.ndim == 1:
        phy2log, log2phy, logcnt = phy2log[0], log2phy[0], logcnt[0]
    return EplbPlan(phy2log, log2phy, logcnt, args[2], bool(hier))


def imbalance(load, plan: EplbPlan | None = None, *, num_gpus=None) -> float:
    """max / mean tokens per rank of one layer's load: under plan (a replica gets its expert's load
    divided by the replica count), or, without a plan, under the plain placement that gives rank r
    the experts [r * E / num_gpus, (r + 1) * E / num_gpus)."""
    arr = _load(load)
    if arr.ndim != 1:
        raise ValueError(f"imbalance takes one layer's load [experts], got shape {arr.shape}")
    if plan is None:
        g = _count("num_gpus", num_gpus)
        if arr.shape[0] % g:
            raise ValueError(f"num_gpus ({g}) must divide the experts ({arr.shape[0]}) for the plain placement")
        phy2log = np.arange(arr.shape[0], dtype=np.int32)
        logcnt = np.ones(arr.shape[0], np.int32)
    else:
        if not isinstance(plan, EplbPlan):
            raise TypeError(f"plan must be an EplbPlan (from rebalance), got {type(plan).__name__}")
        if plan.phy2log.ndim != 1:
            raise ValueError("imbalance takes a one-layer plan (rebalance a 1-D load)")
        g = plan.num_gpus if num_gpus is None else _count("num_gpus", num_gpus)
        phy2log, logcnt = plan.phy2log, plan.logcnt
        if logcnt.shape[0] != arr.shape[0]:
            raise ValueError(f"load has {arr.shape[0]} experts but the plan places {logcnt.shape[0]}")
    return float(_C.ep.imbalance(arr, phy2log, logcnt, g))


def zipf_load(num_experts, tokens, *, alpha=1.0, seed=0) -> np.ndarray:
    """A skewed synthetic load: tokens spread over the experts with Zipf-like weights 1 / rank^alpha,
    the ranks shuffled (so the heavy experts are not all in the first group)."""
    n = _count("num_experts", num_experts)
    tokens = _count("tokens", tokens, 0, 2 ** 62)
    if isinstance(alpha, (bool, np.bool_)) or not isinstance(alpha, numbers.Real) or not 0 <= alpha <= 100:
        raise ValueError(f"alpha must be a number in [0, 100], got {alpha!r}")
    if seed is not None:
        seed = _count("seed", seed, 0, 2 ** 63 - 1)
    rng = np.random.default_rng(seed)
    w = 1.0 / np.arange(1, n + 1) ** float(alpha)
    return rng.multinomial(tokens, w[rng.permutation(n)] / w.sum()).astype(np.float64)
