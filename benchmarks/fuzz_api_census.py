"""Census of bad input over dsperf's public API outside dsperf.kernels: the cost model, the model
and device loaders, kernel_cost, EPLB and the CLI.

A fixed, seeded set of bad-input cases (wrong types, non-finite values, integers beyond int32 and
int64, values far beyond any real deployment, broken config.json and device TOML files, sweeps
whose row count overflows) runs each in its own forked process, under a time limit and a memory
limit, and is classified:

  clean error      ValueError/TypeError (or a one-line CLI error, non-zero exit) naming the argument
  other exception  any other exception, or an error that names no argument (pybind11's
                   "incompatible function arguments", a KeyError, a CLI traceback, MemoryError)
  wrong result     the call returned (or the CLI exited 0) although the input is invalid
  crash            the process died (a signal, e.g. a segfault)
  hang             still running after the time limit

    PYTHONPATH=python python benchmarks/fuzz_api_census.py [--limit-s 10] [--show CLASS]

Every input here is invalid under any reading (none is merely large), so "wrong result" means the
API took invalid input silently. Run it with PYTHONPATH pointing at another checkout to compare.
"""
from __future__ import annotations

import argparse
import io
import os
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.forked, run as a script
from benchmarks.forked import print_census, run_forked  # noqa: E402

import dsperf  # noqa: E402
from dsperf import ep as dep
from dsperf import kernel_cost as kc

CLASSES = ("clean error", "other exception", "wrong result", "crash", "hang")

# Values no numeric argument accepts. Int arguments also get floats; flag arguments get strings.
BAD_NUMBERS = [float("nan"), float("inf"), -float("inf"), 1e300, 1e308, -1e308, True, False, "4", "no", None,
               [1, 2], b"x", 1 + 2j, 2 ** 63, 2 ** 64, -(2 ** 63) - 1, 10 ** 30, -(10 ** 30)]
BAD_INTS = BAD_NUMBERS + [4.5, 2 ** 31, 2 ** 32 + 3, -(2 ** 31) - 1, 2 ** 40]
BAD_FLAGS = ["no", "false", "", None, 2, float("nan"), [True], "True"]


def _cases(rng: random.Random):
    """(api, argument, callable) triples. The callables run in the child."""
    out = []

    def add(api, arg, fn):
        out.append((api, arg, fn))

    # -- the cost model, one argument at a time -------------------------------------------------
    numeric = {
        "prefill": dict(seq_len=BAD_NUMBERS, kv_cache_hit=BAD_NUMBERS, tp=BAD_INTS, dp=BAD_INTS,
                        dispatch_nodes=BAD_INTS, gpus=BAD_INTS),
        "prefill_mla": dict(seq_len=BAD_NUMBERS, kv_cache_hit=BAD_NUMBERS, tps=BAD_INTS),
        "decode": dict(seq_len=BAD_NUMBERS, decode_len=BAD_NUMBERS, batch_sizes=BAD_NUMBERS, tp=BAD_INTS,
                       ep=BAD_INTS, redundant_experts=BAD_INTS, group_gemm_discount=BAD_NUMBERS,
                       absorbed=BAD_FLAGS, kv_fp8=BAD_FLAGS),
        "decode_batch_limits": dict(seq_len=BAD_NUMBERS, decode_len=BAD_NUMBERS, tp=BAD_INTS),
        "decode_sweep": dict(batch=BAD_NUMBERS, seq_len=BAD_NUMBERS, decode_len=BAD_NUMBERS, tp=BAD_INTS,
                             ep=BAD_INTS, redundant_experts=BAD_INTS, group_gemm_discount=BAD_NUMBERS,
                             absorbed=BAD_FLAGS, kv_fp8=BAD_FLAGS),
        "flops_summary": dict(kv_len_avg=BAD_NUMBERS),
    }
    base = {"prefill": dict(devices=["H800"]), "prefill_mla": dict(devices=["H800"]),
            "decode": dict(devices=["H800"], batch_sizes=[32]), "decode_batch_limits": dict(devices=["H800"]),
            "decode_sweep": dict(devices=["H800"], batch=[32]), "flops_summary": {}}
    for api, args in numeric.items():
        for arg, values in args.items():
            for v in values:
                if arg in ("gpus", "redundant_experts") and v is None and api in ("prefill", "decode_sweep"):
                    continue  # None is the default there: valid
                if isinstance(v, list) and (api == "decode_sweep" or arg in ("batch_sizes", "tps")):
                    continue  # [1, 2] is a valid axis
                # The list-valued arguments also get the bad value inside a list.
                for wrap in ((False, True) if arg in ("batch_sizes", "tps", "batch", "seq_len", "decode_len", "tp",
                                                      "ep", "redundant_experts", "kv_fp8") and api == "decode_sweep"
                             or arg in ("batch_sizes", "tps") else (False,)):
                    value = [32, v] if wrap else v
                    kw = dict(base[api], **{arg: value})
                    add(api, arg, lambda api=api, kw=kw: getattr(dsperf, api)(**kw))
    for v in BAD_NUMBERS + ["EP1"]:
        add("ep_strategies", "strategies", lambda v=v: dsperf.ep_strategies(strategies={"EPX": (v, 32)}))
    for mode in (None, 3, b"corrected", ["corrected"]):
        add("decode", "mode", lambda mode=mode: dsperf.decode(devices=["H800"], mode=mode))

    # -- decode_sweep grids whose row count overflows, or would exhaust memory -------------------
    for n in (700, 1000, 1500):          # 7 axes of n values: n**7 rows overflow 64 bits
        axis = list(range(1, n + 1))
        add("decode_sweep", "grid", lambda axis=axis: dsperf.decode_sweep(
            devices=["H800"] * len(axis), batch=axis, seq_len=axis, decode_len=axis, tp=[0] * len(axis),
            ep=[144] * len(axis), kv_fp8=[True] * len(axis)))
        add("_C.decode_sweep", "grid", lambda axis=axis: dsperf._C.decode_sweep(
            dsperf.load_model(), [dsperf.load_device("H800")] * len(axis), [0] * len(axis), [144] * len(axis),
            [32] * len(axis), [1] * len(axis), [float(v) for v in axis], [float(v) for v in axis],
            [float(v) for v in axis]))
    # 3 x 59 x 379 x 653 x 937 x 1723 x 2393 rows: times the 109 bytes of a row's columns, the size
    # wraps past 2**64 to about 1 MB (a small buffer, then writes far beyond it).
    wrap = dict(devices=["H800"] * 3, tp=[0] * 59, ep=[144] * 379, kv_fp8=[True] * 653,
                seq_len=[float(v) for v in range(1, 938)], decode_len=[float(v) for v in range(1723)],
                batch=[float(v) for v in range(1, 2394)])
    add("decode_sweep", "grid", lambda: dsperf.decode_sweep(**wrap))
    add("_C.decode_sweep", "grid", lambda: dsperf._C.decode_sweep(
        dsperf.load_model(), [dsperf.load_device("H800")] * 3, wrap["tp"], wrap["ep"], [32] * 379, [1] * 653,
        wrap["seq_len"], wrap["decode_len"], wrap["batch"]))
    for n in (20000, 2 ** 17):           # row counts in the tens of billions: exhausts memory
        axis = [float(v) for v in range(1, n + 1)]
        add("decode_sweep", "grid", lambda axis=axis: dsperf.decode_sweep(devices=["H800"], batch=axis, seq_len=axis,
                                                                         decode_len=[1210.0]))

    # -- model fields, through every door ---------------------------------------------------------
    fields = list(dsperf.model.HF_FIELDS)
    cfg0 = dict(dsperf.model.configs._shipped_config("DeepSeek-V3"))
    model_bad = [2 ** 31, 2 ** 32 + 61, 2 ** 63, -(2 ** 31), float("nan"), float("inf"), 1e300, True, "61", None, [61]]
    for key in fields:
        for v in rng.sample(model_bad, 5):
            if v is None and key in dsperf.model.configs._NULLABLE:
                v = "none"  # None is valid there (no query compression)
            cfg = dict(cfg0, **{key: v})
            add("from_hf_config", key, lambda cfg=cfg: dsperf.decode(cfg, devices=["H800"], batch_sizes=[32]))
    for attr in ("n_layers", "n_dense_layers", "dim", "n_routed_experts", "n_heads", "kv_lora_rank"):
        for v in (2 ** 31, 2 ** 32 + 61, 2 ** 63, True, 61.0):
            def fn(attr=attr, v=v):
                m = dsperf.load_model("DeepSeek-V3")
                setattr(m, attr, v)
                return dsperf.decode(m, devices=["H800"], batch_sizes=[32])
            add("ModelConfig", attr, fn)

    # -- broken files -----------------------------------------------------------------------------
    import json
    good = json.dumps(cfg0)
    contents = {
        "nan": good.replace('"routed_scaling_factor": 2.5', '"routed_scaling_factor": NaN'),
        "infinity": good.replace('"num_hidden_layers": 61', '"num_hidden_layers": Infinity'),
        "huge layers": good.replace('"num_hidden_layers": 61', '"num_hidden_layers": 2147483648'),
        "huge layers 2**64": good.replace('"num_hidden_layers": 61', '"num_hidden_layers": 18446744073709551616'),
        "latin-1": good.encode("utf-8") + b' \xff\xfe',
        "deep nesting": "[" * 100000 + "]" * 100000,
        "deep object": '{"a":' * 50000 + "1" + "}" * 50000,
        "array": "[1, 2, 3]",
        "empty": "",
        "binary": bytes(range(256)),
    }
    for label, text in contents.items():
        add("load_model(file)", label, lambda text=text: dsperf.decode(_write("config.json", text), devices=["H800"]))
        add("cli --model", label, lambda text=text: _cli(["tables", "--sections", "model", "--model",
                                                          _write("config.json", text)]))
    toml0 = (dsperf.hardware._devices_dir() / "H800.toml").read_text()
    tomls = {
        "nan": toml0.replace("discount = 0.85", "discount = nan"),
        "inf": toml0.replace("mem_gb = ", "mem_gb = inf #"),
        "huge sm_count": toml0.replace("sm_count = 132", "sm_count = 2147483648"),
        "float sm_count": toml0.replace("sm_count = 132", "sm_count = 132.7"),
        "bool": toml0.replace("sm_count = 132", "sm_count = true"),
        "seed tp 128": toml0 + "\nseed_decode_tp = 128\n",
        "latin-1": toml0.encode("utf-8") + b"\n# \xff\xfe\n",
        "deep nesting": "a = " + "[" * 100000 + "]" * 100000,
        "binary": bytes(range(256)),
        "as_published not a table": "as_published = 3\n" + toml0,
    }
    for label, text in tomls.items():
        add("load_device(file)", label, lambda text=text: dsperf.decode(devices=[_write("X1.toml", text)]))
    for field, v in (("sm_count", 132.7), ("sm_count", 2 ** 31), ("sm_count", True), ("scaleout_gbps", "25"),
                     ("gpus_per_node", 2 ** 40), ("mem_gb", float("inf")), ("discount", True), ("name", 3),
                     ("seed_decode_tp", 128), ("seed_decode_tp", 2 ** 31)):
        add("load_device(overrides)", field, lambda field=field, v=v: dsperf.decode(
            devices=[dsperf.load_device("H800", **{field: v})]))

    # -- kernel_cost --------------------------------------------------------------------------------
    points = {
        "linear": dict(m=16, n=64, k=64),
        "gate": dict(tokens=16, dim=64, experts=8, top_k=2),
        "dispatch_combine": dict(tokens=16, top_k=2, dim=64),
        "experts_masked": dict(rows=16, active=4, dim=64, inter=32),
        "mla_decode": dict(keys=100, batch=2, q_len=1, heads=4),
        "mla_layer_prefill": dict(variant="A_CC", tokens=8, prefix=0, heads=4),
        "moe_layer": dict(tokens=8, dim=64, inter=32, experts=8, top_k=2, active=4, shared_inter=32),
    }
    kbad = [2 ** 63, 2 ** 64, -(2 ** 63) - 1, 10 ** 30, 1.5, True, "8", None, float("nan")]
    for fam, p in points.items():
        for key in p:
            if key == "variant":
                continue
            for v in rng.sample(kbad, 4):
                q = dict(p, **{key: v})
                add("kernel_cost.predict_ms", key, lambda fam=fam, q=q: kc.predict_ms(fam, q, "H800"))
    for arg, v in (("tokens", 3.7), ("tokens", "8"), ("top_k", 2 ** 62), ("experts", 2 ** 62), ("hidden", 2 ** 63),
                   ("link_gbps", True), ("link_gbps", float("inf")), ("latency_us", float("nan")),
                   ("ranks", 2 ** 31), ("fp8", "no")):
        kw = dict(tokens=64, ranks=4, link_gbps=50.0, latency_us=5.0)
        kw[arg] = v
        if arg in ("top_k",):
            kw["experts"] = 2 ** 62
        add("kernel_cost.ep_exchange_ms", arg, lambda kw=kw: kc.ep_exchange_ms(**kw))
    for v in ("fast", True, float("nan"), -1.0, None):
        add("kernel_cost.efficiencies_from_dict", "compute", lambda v=v: kc.predict_ms(
            "linear", dict(m=1, n=2, k=3), "H800", kc.efficiencies_from_dict({"linear": {"compute": v, "memory": 1}})))

    # -- EPLB ---------------------------------------------------------------------------------------
    for arg, v in (("num_physical", 2 ** 31), ("num_physical", 2 ** 40), ("num_physical", 2 ** 63),
                   ("num_physical", 10 ** 7), ("num_gpus", 2 ** 31), ("num_gpus", 2 ** 63), ("num_nodes", 2 ** 63),
                   ("num_groups", 2 ** 63), ("num_physical", 16.0), ("num_gpus", True), ("num_physical", "16")):
        kw = dict(num_physical=16, num_gpus=4)
        kw[arg] = v
        add("ep.rebalance", arg, lambda kw=kw: dep.rebalance(np.ones(8), **kw))
    for load in ([[1, 2], [3]], ["a", "b"], [True, False], np.ones((2, 2, 2)), [float("nan")] * 8):
        add("ep.rebalance", "load", lambda load=load: dep.rebalance(load, 8, num_gpus=2))
    for policy in (None, 3, b"auto"):
        add("ep.rebalance", "policy", lambda policy=policy: dep.rebalance(np.ones(8), 8, num_gpus=2, policy=policy))
    for arg, v in (("num_experts", 2 ** 40), ("tokens", 2 ** 64), ("alpha", "x"), ("alpha", float("nan")),
                   ("tokens", 1.5), ("num_experts", True)):
        kw = dict(num_experts=8, tokens=100)
        kw[arg] = v
        add("ep.zipf_load", arg, lambda kw=kw: dep.zipf_load(**kw))

    # -- the CLI ------------------------------------------------------------------------------------
    flags = {"--seq-len": ["1e308", "inf", "nan", "-1e308", "1e300"], "--decode-len": ["1e308", "nan", "inf"],
             "--kv-cache-hit": ["nan", "inf"], "--tp": ["2147483648", "99999999999999999999"],
             "--dp": ["2147483648", "99999999999999999999"], "--ep": ["2147483648", "99999999999999999999"],
             "--redundant-experts": ["2147483648", "99999999999999999999"],
             "--dispatch-nodes": ["2147483648", "99999999999999999999"],
             "--batch-sizes": ["nan", "1e308", "inf,32"], "--alt-tp": ["2147483648"], "--alt-dp": ["2147483648"]}
    for flag, values in flags.items():
        for v in values:
            section = "decode" if flag in ("--decode-len", "--ep", "--redundant-experts", "--batch-sizes") else "prefill"
            add("cli tables", flag, lambda flag=flag, v=v, section=section: _cli(["tables", "--sections", section,
                                                                                   flag, v]))
    return out


# ---- running one case -------------------------------------------------------------------------------
_TMP = tempfile.mkdtemp(prefix="dsperf-census-")


def _write(name, text):
    folder = tempfile.mkdtemp(dir=_TMP)
    path = os.path.join(folder, name)
    with open(path, "wb") as f:
        f.write(text.encode("utf-8") if isinstance(text, str) else text)
    return path


class _CliResult:
    def __init__(self, code, stderr):
        self.code, self.stderr = code, stderr


def _cli(argv):
    from dsperf.cli import main

    err, out = io.StringIO(), io.StringIO()
    old = sys.stderr, sys.stdout
    sys.stderr, sys.stdout = err, out
    try:
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 1
    finally:
        sys.stderr, sys.stdout = old
    return _CliResult(code, err.getvalue())


def _names_argument(msg: str, arg: str, api: str) -> bool:
    """Whether an error message names the argument (or, for files, the file)."""
    if "incompatible function arguments" in msg:
        return False
    if api in ("load_model(file)", "cli --model"):
        return "config.json" in msg
    if api == "load_device(file)":
        return "X1.toml" in msg
    if arg == "grid":
        return "decode_sweep" in msg or "grid" in msg
    if api == "from_hf_config":
        return arg in msg
    names = {arg, arg.lstrip("-").replace("-", "_")}
    return any(n in msg for n in names)


def _classify_in_child(api, arg, fn):
    """Run fn; return (class, detail). Runs in the forked child."""
    try:
        r = fn()
    except (ValueError, TypeError) as e:
        msg = str(e)
        return ("clean error" if _names_argument(msg, arg, api) else "other exception"), f"{type(e).__name__}: {msg}"
    except BaseException as e:  # noqa: BLE001 - classified, not handled
        return "other exception", f"{type(e).__name__}: {e}"
    if isinstance(r, _CliResult):
        lines = r.stderr.strip().splitlines()
        if r.code == 0:
            return "wrong result", "exit 0"
        if len(lines) == 1 and "Traceback" not in r.stderr and _names_argument(lines[0], arg, api):
            return "clean error", lines[0]
        return "other exception", (r.stderr.strip().splitlines() or ["(no message)"])[-1]
    return "wrong result", f"returned {type(r).__name__}"


def run_case(api, arg, fn, limit_s=10.0, mem_bytes=4 << 30):
    """Fork, run the case under a time and an address-space limit, classify what happened."""
    out = run_forked(lambda: _classify_in_child(api, arg, fn), limit_s, mem_bytes, poll_s=0.005)
    if out[0] == "ok":
        return out[1]
    if out[0] == "hang":
        return "hang", f"still running after {limit_s:g} s"
    if out[0] == "crash":
        return "crash", f"signal {out[1]}"
    return "other exception", f"{out[1]}: {out[2]}"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--limit-s", type=float, default=10.0, help="time limit per case (a hang past it)")
    p.add_argument("--show", action="append", default=[], choices=CLASSES, help="print the cases of this class")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    cases = _cases(random.Random(a.seed))
    counts, shown = Counter(), []
    by_api = {}
    t0 = time.monotonic()
    for api, arg, fn in cases:
        cls, detail = run_case(api, arg, fn, a.limit_s)
        counts[cls] += 1
        by_api.setdefault(api, Counter())[cls] += 1
        if cls in a.show:
            shown.append(f"[{cls}] {api} {arg}: {detail[:200]}")
    print_census(f"dsperf {dsperf.__file__}: {len(cases)} bad-input cases, each in its own process "
                 f"({time.monotonic() - t0:.0f} s)", CLASSES, counts, by_api, shown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
