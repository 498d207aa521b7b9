"""Census of the grounded model, the explorer, the kernel tables, their CLI and the EP exchange
under adversarial input: the surfaces the second fuzzing round (issue 32) found holes in.

Each case runs in its own forked process under a time and a memory limit (benchmarks/forked.py)
and is classified as in fuzz_api_census.py:

  clean error      ValueError/TypeError (or a one-line CLI error, non-zero exit) naming the
                   argument, the file (and, for table files, the row and field) or the flag as typed
  other exception  any other exception, or an error that names none of those
  wrong result     an invalid input accepted (a result returned, the CLI exited 0), or a valid one
                   answered wrongly (the check beside it failed)
  crash            the process died (a signal)
  hang             still running after the time limit

Invalid inputs must give a clean error. Valid inputs the first round got wrong (a table file with a
byte-order mark, a device file's own table in the explorer, --routing-zipf 1.2, kv_fp8=True, a
TTFT SLA applied after the search, ...) must give the right answer: a check compares the result
with what it must be, and counts "right result" when it holds.

    PYTHONPATH=python python benchmarks/fuzz_grounded_census.py [--limit-s 20] [--show CLASS]
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.forked import print_census, run_forked  # noqa: E402
from benchmarks.fuzz_api_census import _CliResult, _cli  # noqa: E402

import dsperf  # noqa: E402
from dsperf import explore, grounded, kernels as K  # noqa: E402
from dsperf.ep import routed  # noqa: E402
from dsperf.ep.transport import SimulatedTransport  # noqa: E402

CLASSES = ("clean error", "right result", "other exception", "wrong result", "crash", "hang")
TINY = [1e-308, 1e-310, 5e-324, 1e-300, 1e-30]
HUGE = [1e308, 1e300, 1e30]
_TMP = tempfile.mkdtemp(prefix="dsperf-grounded-census-")
DATA = Path(dsperf.__file__).parent / "data"
TOML0 = (DATA / "devices" / "H800.toml").read_text()
CSV0 = (DATA / "efficiency" / "H800.csv").read_text()


def _device_files(toml_edit=None, csv_text=None, table="mine.csv"):
    """A custom device 'Fz' (H800's values) whose kernel_table is its own CSV beside it: the path of
    its TOML file."""
    folder = tempfile.mkdtemp(dir=_TMP)
    text = TOML0.replace('name = "H800"', 'name = "Fz"').replace('kernel_table = "H800"', f'kernel_table = "{table}"')
    text = "\n".join(line for line in text.splitlines() if not line.startswith("aliases"))
    if toml_edit:
        text = toml_edit(text)
    Path(folder, "Fz.toml").write_text(text)
    if csv_text is not None:
        Path(folder, "mine.csv").write_bytes(csv_text if isinstance(csv_text, bytes) else csv_text.encode())
    return os.path.join(folder, "Fz.toml")


def _csv_with(first_gemm_row_edit):
    """H800's table with its first gemm_fp8 row edited (a function of the row's fields)."""
    lines = CSV0.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith("gemm_fp8,"))
    lines[i] = first_gemm_row_edit(lines[i])
    return "\n".join(lines) + "\n"


def _set_field(row: str, col: int, value: str) -> str:
    head, source = row.split(',"', 1)
    fields = head.split(",")
    fields[col] = value
    return ",".join(fields) + ',"' + source


# Columns of H800.csv: family,m,n,k,groups,batch,kv_len,heads,ep,dtype,latency_us,gbps,source
M, LATENCY = 1, 10


def _cases():
    """(api, names, fn, check): names, any of which a clean error must contain; check(result) ->
    bool for a valid input (None: the input is invalid and must raise)."""
    out = []

    def bad(api, names, fn):
        out.append((api, names if isinstance(names, tuple) else (names,), fn, None))

    def good(api, fn, check):
        out.append((api, (), fn, check))

    # -- device fields: tiny and huge rates, through overrides and through a device file ----------
    floats = [f for f, kind, _ in dsperf.DeviceSpec.FIELDS if kind == "float"]
    for field in floats:
        for v in TINY + HUGE + [-1e-300]:
            bad("load_device(override)", field, lambda field=field, v=v: grounded.decode(
                device=dsperf.load_device("H800", **{field: v})))
        for v in (1e-308, 1e308):
            def edit(text, field=field, v=v):
                lines = [line for line in text.splitlines() if not line.startswith(field + " ")]
                return "\n".join(lines[:3] + [f"{field} = {v!r}"] + lines[3:])
            path = _device_files(edit, CSV0)
            for api, fn in (("grounded.decode(file)", lambda p=path: grounded.decode(device=p)),
                            ("grounded.prefill(file)", lambda p=path: grounded.prefill(device=p)),
                            ("explore.search(file)", lambda p=path: explore.search(devices=[p], batch=(32.0,)))):
                bad(api, field, fn)
    for field, values in (("sm_count", (0, -1, 2 ** 30)), ("gpus_per_node", (0, -1, 2 ** 30)),
                          ("comm_sms_decode", (-1, 132, 2 ** 30))):
        for v in values:
            bad("load_device(override)", field, lambda field=field, v=v: grounded.decode(
                device=dsperf.load_device("H800", **{field: v})))

    # -- the busiest rank (csrc/grounded/routing_skew.hpp): extremes in, a number in [1, ranks] out --
    SM = dsperf._C.step_model
    for mean in (0.0, *TINY, 0.5, 8.0, 400.0, 401.0, *HUGE):
        for ranks in (1.0, 2.0, 8.0, 2.0 ** 20):
            for disp in (0.0, 1.0, 1.71, 1000.0):
                good("routing_skew", lambda m=mean, r=ranks, d=disp: (SM.routing_skew(m, r, d), r),
                     lambda out: math.isfinite(out[0]) and 1.0 - 1e-9 <= out[0] <= out[1] * (1 + 1e-9))
    for args, name in (((math.nan, 8, 1), "mean_rows"), ((math.inf, 8, 1), "mean_rows"), ((-1e-300, 8, 1), "mean_rows"),
                       ((1, 0.5, 1), "ranks"), ((1, math.nan, 1), "ranks"), ((1, 2.0 ** 21, 1), "ranks"),
                       ((1, 8, -1e-300), "dispersion"), ((1, 8, 1e300), "dispersion"), ((1, 8, math.inf), "dispersion")):
        bad("routing_skew", name, lambda a=args: SM.routing_skew(*a))
    v3 = dsperf.load_model("DeepSeek-V3")
    for ranks in (1.0, 2.0, 8.0, 3.0, 256.0, 2.0 ** 20):
        good("routing_dispersion", lambda r=ranks: SM.routing_dispersion(v3, r, 0), lambda d: 1.0 <= d < 8)
    for ranks, red, name in ((0.5, 0, "ranks"), (math.nan, 0, "ranks"), (2.0 ** 21, 0, "ranks"), (8, -1, "redundant_experts")):
        bad("routing_dispersion", name, lambda r=ranks, e=red: SM.routing_dispersion(v3, r, e))

    # -- default_efficiency -----------------------------------------------------------------------
    for v in (1e-310, 5e-324, 1e-300, 0.0, -0.5, 1.5, float("nan"), float("inf"), True, "0.6", None):
        for api, fn in (("grounded.decode", lambda v=v: grounded.decode(default_efficiency=v)),
                        ("grounded.prefill", lambda v=v: grounded.prefill(default_efficiency=v)),
                        ("grounded.aggregated", lambda v=v: grounded.aggregated(default_efficiency=v)),
                        ("grounded.kernel_tables", lambda v=v: grounded.kernel_tables("H800", v))):
            bad(api, "default_efficiency", fn)

    # -- kernel table files ------------------------------------------------------------------------
    for v in ("5e-324", "1e-310", "1e308", "1e300", "0", "-1", "nan", "inf", "fast", "1e-4"):
        path = _device_files(csv_text=_csv_with(lambda r, v=v: _set_field(r, LATENCY, v)))
        bad("table latency_us", ("mine.csv", "latency_us"), lambda p=path: grounded.decode(device=p))
    for v in ("1e300", "2e9", "-4", "nan", "0"):
        path = _device_files(csv_text=_csv_with(lambda r, v=v: _set_field(r, M, v)))
        bad("table m", ("mine.csv", "'m'"), lambda p=path: grounded.decode(device=p))
    dup = _csv_with(lambda r: r + "\n" + _set_field(r, LATENCY, "9999"))
    bad("table duplicate rows", ("mine.csv", "row"), lambda p=_device_files(csv_text=dup): grounded.decode(device=p))
    comm = CSV0 + 'dispatch_ll,,,,,,,,8,,,40,"a network row in a device table"\n'
    bad("table comm row", ("mine.csv", "row"), lambda p=_device_files(csv_text=comm): grounded.decode(device=p))
    unknown = CSV0 + 'gemm_int4,16,1536,7168,,,,,,fp8,10,,"x"\n'
    bad("table family", ("mine.csv", "family"), lambda p=_device_files(csv_text=unknown): grounded.decode(device=p))
    for label, text in (("no family column", CSV0.replace("family,m", "famly,m")), ("empty", ""),
                        ("latin-1", CSV0.encode() + b"\n# \xff\xfe\n")):
        bad("table file", "mine.csv", lambda p=_device_files(csv_text=text): grounded.decode(device=p))
    for v in ("3", "true", "[1]", '""'):
        path = _device_files(lambda t, v=v: t.replace('kernel_table = "mine.csv"', f"kernel_table = {v}"), CSV0)
        bad("device kernel_table", "kernel_table", lambda p=path: grounded.decode(device=p))
    bad("device kernel_table", "missing.csv",
        lambda p=_device_files(table="missing.csv"): grounded.decode(device=p))
    for v in ("1e-300", "-1", '"700"', "1e308", "0"):
        path = _device_files(lambda t, v=v: t.replace("board_power_w = 700", f"board_power_w = {v}"), CSV0)
        bad("device board_power_w", "board_power_w", lambda p=path: explore.search(devices=[p], batch=(32.0,)))
    for v in ("nope", 3, None, b"H800"):
        bad("grounded.kernel_tables", ("nope", "device"), lambda v=v: grounded.kernel_tables(v))

    bom = _device_files(csv_text=b"\xef\xbb\xbf" + CSV0.encode())
    plain = _device_files(csv_text=CSV0)
    good("table with a BOM", lambda: (grounded.decode(device=bom)["step_ms"], grounded.decode(device=plain)["step_ms"]),
         lambda r: r[0] == r[1])

    # -- the explorer ------------------------------------------------------------------------------
    one = dict(ep=[128], attn_tp=[1], mtp=[(0, 0.0)], overlap=["two_batch"], batch=[128.0], isl=4096, osl=1024)
    good("explore.search(own table)", lambda: (
        explore.search(devices=[plain], kv_fp8=False, **one).iloc[0].to_dict(),
        grounded.decode(device=plain, batch=128, kv_len=4096 + 512, ep=128)["tpot_ms"]),
        lambda r: abs(r[0]["tpot_ms"] - r[1]) < 1e-9 * r[1] and r[0]["kernel_table"]
        and math.isfinite(r[0]["energy_j_per_output_token"]))
    good("explore.search(kv_fp8=True)", lambda: explore.search(devices=["H800"], kv_fp8=True, **one)["kv_fp8"].tolist(),
         lambda r: r == [True])
    for v in (["H800", "H800"], ["H800", "h800"]):
        bad("explore.search", "devices", lambda v=v: explore.search(devices=v, batch=(32.0,)))
    for v in ("no", 1, None, [1]):
        bad("explore.search", "kv_fp8", lambda v=v: explore.search(devices=["H800"], kv_fp8=v, batch=(32.0,)))
    for v in (5000.0, 0.5, float("nan")):
        bad("explore.search", "imbalance", lambda v=v: explore.search(devices=["H800"], imbalance=v, batch=(32.0,)))
    good("explore.search(imbalance 65)", lambda: int(explore.search(devices=["H800"], imbalance=65.0, **dict(
        one, kv_fp8=False))["feasible"].sum()), lambda r: r == 1)
    small = explore.search(devices=["H800", "H20"], batch=(8.0, 32.0, 128.0))
    for v in (-1, 1.5, True, "3"):
        bad("explore.nearest", "n", lambda v=v: explore.nearest(small, tpot_ms=1, n=v))
    for v in (0, -1, float("nan")):
        bad("explore.meets_sla", "ttft_ms", lambda v=v: explore.meets_sla(small, ttft_ms=v))
    good("explore.frontier_gap(NaN rows)", lambda: explore.frontier_gap(small, small.head(5).assign(
        tps_user=np.nan)).tolist(), lambda r: len(r) == 5 and all(math.isnan(v) for v in r))
    # A TTFT SLA applied after the search chooses the prefill layout, as the search given it does.
    good("explore.meets_sla(ttft)", lambda: (
        explore.meets_sla(small, tpot_ms=50, ttft_ms=3000)[["tokens_per_gpu_s_served", "ttft_ms"]].to_numpy(),
        explore.meets_sla(explore.search(devices=["H800", "H20"], batch=(8.0, 32.0, 128.0), ttft_ms=3000),
                          tpot_ms=50, ttft_ms=3000)[["tokens_per_gpu_s_served", "ttft_ms"]].to_numpy()),
        lambda r: len(r[0]) > 0 and r[0].shape == r[1].shape and np.allclose(r[0], r[1]))

    # -- eplb_imbalance, a model without MoE layers -----------------------------------------------
    load = dsperf.ep.zipf_load(256, 10000, alpha=1.0)
    for v in (0, -1, 1.5, True, 2 ** 40):
        bad("grounded.eplb_imbalance", "gpus_per_node", lambda v=v: grounded.eplb_imbalance(load, ep=8, gpus_per_node=v))
    for v in (3.0, np.ones((2, 2, 2)), []):
        bad("grounded.eplb_imbalance", "load", lambda v=v: grounded.eplb_imbalance(v, ep=8))

    def dense():
        m = dsperf.load_model("DeepSeek-V3")
        m.n_dense_layers = m.n_layers
        return grounded.decode(m)
    good("grounded.decode(no MoE)", dense, lambda r: r["moe_layer_ms"] == 0 and math.isfinite(r["step_ms"]))

    # -- the CLI: explore's and predict's flags, named as typed, before the search -----------------
    flags = {"--tpot-ms": ["0", "-1", "nan", "inf"], "--ttft-ms": ["0", "nan"], "--isl": ["0", "nan", "1e300"],
             "--osl": ["0", "-5"], "--routing-zipf": ["-1", "11", "nan"], "--top": ["0", "-3"],
             "--gpu-hour-usd": ["0", "inf"], "--request-rate": ["-1", "nan"], "--dense-tp": ["0", "99", "x"],
             "--moe-tp": ["0", "128"], "--weight-dtype": ["int4", ""]}
    for flag, values in flags.items():
        for v in values:
            bad("cli explore", flag, lambda flag=flag, v=v: _cli(["explore", "--devices", "H800", flag, v,
                                                                   "--out", tempfile.mkdtemp(dir=_TMP)]))
    good("cli explore --routing-zipf 1.2", lambda: _cli(["explore", "--devices", "H800", "--routing-zipf", "1.2",
                                                         "--out", tempfile.mkdtemp(dir=_TMP)]).code, lambda r: r == 0)
    pflags = {"--batch": ["0", "nan", "1e300"], "--kv-len": ["0", "inf"], "--imbalance": ["0.5", "5000"],
              "--mtp-accepted": ["-1"], "--attn-tp": ["0", "3"], "--tokens": ["0"], "--prompt-len": ["nan"]}
    for flag, values in pflags.items():
        for v in values:
            phase = ["--phase", "prefill"] if flag in ("--tokens", "--prompt-len") else []
            bad("cli predict", flag, lambda flag=flag, v=v, phase=phase: _cli(["predict", *phase, flag, v]))

    # -- EP: ranks, shapes, dims, handles ----------------------------------------------------------
    for v in (0, -1, 2.5, True, "2", 2 ** 40, None):
        bad("ep.SimulatedTransport", "nranks", lambda v=v: SimulatedTransport(v))
    rng = np.random.default_rng(0)
    xs = {r: rng.standard_normal((4, 16)).astype(K.BF16) for r in range(2)}
    ids = {r: np.array([[0, 1], [2, 3], [1, 2], [3, 0]]) for r in range(2)}
    w = {r: np.full((4, 2), 0.5, np.float32) for r in range(2)}
    T = SimulatedTransport(2)
    dup = {0: np.array([[0, 0], [2, 3], [1, 1], [3, 0]]), 1: ids[1]}
    bad("ep.dispatch_low_latency", "ids[0]", lambda: routed.dispatch_low_latency(T, xs, dup, w, 4, 8))
    for layout in ("expert", "token"):
        bad("ep.dispatch", "ids[0]", lambda layout=layout: routed.dispatch(T, xs, dup, w, 4, layout=layout))
    other = {0: xs[0], 1: rng.standard_normal((4, 24)).astype(K.BF16)}
    bad("ep.dispatch", "xs[1]", lambda: routed.dispatch(T, other, ids, w, 4))
    bad("ep.dispatch", "xs[0]", lambda: routed.dispatch(T, {0: xs[0][0], 1: xs[1]}, ids, w, 4))
    bad("ep.dispatch", "xs[0]", lambda: routed.dispatch(T, {0: xs[0][None], 1: xs[1]}, ids, w, 4))
    zero_k = {r: np.zeros((4, 0), np.int64) for r in range(2)}
    bad("ep.dispatch", "top_k", lambda: routed.dispatch(T, xs, zero_k, {r: np.zeros((4, 0), np.float32) for r in range(2)}, 4))
    bad("ep.dispatch", "ids[1]", lambda: routed.dispatch(T, xs, {0: ids[0], 1: ids[1][:, :1]}, w, 4))
    bad("ep.dispatch", "ids[0]", lambda: routed.dispatch(T, xs, {0: ids[0] + 8, 1: ids[1]}, w, 4))
    bad("ep.dispatch", "weights", lambda: routed.dispatch(T, xs, ids, {0: w[0][:3], 1: w[1]}, 4))
    for v in (3, 0, 2.5, True):
        bad("ep.dispatch", "n_experts", lambda v=v: routed.dispatch(T, xs, ids, w, v))
    for v in (0, 2.5, 2 ** 40):
        bad("ep.dispatch_low_latency", "max_tokens", lambda v=v: routed.dispatch_low_latency(T, xs, ids, w, 4, v))
    bad("ep.dispatch", "xs", lambda: routed.dispatch(T, {0: xs[0]}, ids, w, 4))
    bad("ep.dispatch", "transport", lambda: routed.dispatch("mpi", xs, ids, w, 4))
    x, _, h = routed.dispatch(T, xs, ids, w, 4)
    _, _, h2 = routed.dispatch(T, xs, ids, w, 4)
    xl, _, hl = routed.dispatch_low_latency(T, xs, ids, w, 4, 8)
    ys = {r: np.ones((x[r].shape[0], 16), np.float32) for r in range(2)}
    bad("ep.combine", "handles[0]", lambda: routed.combine(T, ys, {0: h[1], 1: h[0]}))
    bad("ep.combine", "handles[1]", lambda: routed.combine(T, ys, {0: h[0], 1: h2[1]}))
    bad("ep.combine", "handles[0]", lambda: routed.combine(T, ys, {0: None, 1: h[1]}))
    T4 = SimulatedTransport(4)
    bad("ep.combine", "handles[0]", lambda: routed.combine(T4, {r: ys[0] for r in range(4)}, {r: h[0] for r in range(4)}))
    bad("ep.combine", "ys[0]", lambda: routed.combine(T, {r: np.ones((x[r].shape[0], 5), np.float32) for r in range(2)}, h))
    bad("ep.combine", "ys[0]", lambda: routed.combine(T, {r: np.ones(7, np.float32) for r in range(2)}, h))
    bad("ep.combine", "ys", lambda: routed.combine(T, {0: ys[0]}, h))
    bad("ep.combine", "per_token", lambda: routed.combine(T, ys, h, per_token=True))
    bad("ep.combine", "ys[0]", lambda: routed.combine(T, {r: np.ones((2, 16), np.float32) for r in range(2)}, h))

    # combine of the masked dispatch is sum_k w_k y_k: expert outputs of 1 give the weights' sum.
    def masked_roundtrip():
        out = routed.combine(T, {r: np.ones(xl[r].shape, np.float32) for r in range(2)}, hl)
        return [out[r] for r in range(2)]
    good("ep masked round trip", masked_roundtrip, lambda r: all(np.allclose(o, 1.0) for o in r))
    return out


def _classify_in_child(api, names, fn, check):
    try:
        r = fn()
    except (ValueError, TypeError) as e:
        msg = str(e)
        if check is not None:
            return "other exception", f"valid input raised {type(e).__name__}: {msg}"
        ok = "incompatible function arguments" not in msg and any(n in msg for n in names)
        return ("clean error" if ok else "other exception"), f"{type(e).__name__}: {msg}"
    except BaseException as e:  # noqa: BLE001 - classified, not handled
        return "other exception", f"{type(e).__name__}: {e}"
    if check is not None:
        return ("right result" if check(r) else "wrong result"), repr(r)[:200]
    if isinstance(r, _CliResult):
        lines = r.stderr.strip().splitlines()
        if r.code == 0:
            return "wrong result", "exit 0"
        searched = any("configurations" in line for line in lines)  # the search ran before the flag was checked
        err = [line for line in lines if "error" in line]
        if len(err) == 1 and "Traceback" not in r.stderr and any(n in err[0] for n in names) and not searched:
            return "clean error", err[0]
        return "other exception", " | ".join(lines[-2:]) or "(no message)"
    return "wrong result", f"returned {type(r).__name__}"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--limit-s", type=float, default=30.0, help="time limit per case (a hang past it)")
    p.add_argument("--show", action="append", default=[], choices=CLASSES, help="print the cases of this class")
    a = p.parse_args(argv)
    cases = _cases()
    counts, by_api, shown = Counter(), {}, []
    t0 = time.monotonic()
    for api, names, fn, check in cases:
        res = run_forked(lambda: _classify_in_child(api, names, fn, check), a.limit_s, 4 << 30, poll_s=0.005)
        if res[0] == "ok":
            cls, detail = res[1]
        elif res[0] == "hang":
            cls, detail = "hang", f"still running after {a.limit_s:g} s"
        elif res[0] == "crash":
            cls, detail = "crash", f"signal {res[1]}"
        else:
            cls, detail = "other exception", f"{res[1]}: {res[2]}"
        counts[cls] += 1
        by_api.setdefault(api, Counter())[cls] += 1
        if cls in a.show:
            shown.append(f"[{cls}] {api} {names}: {detail[:240]}")
    invalid = sum(1 for c in cases if c[3] is None)
    print_census(f"dsperf {dsperf.__file__}: {len(cases)} cases ({invalid} invalid inputs, "
                 f"{len(cases) - invalid} valid ones with a check), each in its own process "
                 f"({time.monotonic() - t0:.0f} s)", CLASSES, counts, by_api, shown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
