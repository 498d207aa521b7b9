"""Bad input against every public call of dsperf.kernels, each case in its own process.

    PYTHONPATH=python python benchmarks/fuzz_kernels_census.py [--family kernels] [--per-function]
        [--show CLASS] [--only NAME] [--list]

A case is one valid small call with one argument spoiled: a wrong type or dtype, a wrong shape, a
strided or read-only array, an empty dimension, an out-of-range or huge integer (int64 indices
past 2**32 included), a bool or a string where a number or a flag belongs, NaN or Inf in the data.
Each runs in a forked child (so a crash or a hang is seen, not suffered) under a 4 GiB address
space limit, and lands in one class:

  clean error      ValueError or TypeError whose message names the spoiled argument
  correct result   the call is valid after all (an empty dimension, say) and the result matches
                   dsperf.reference; or NaN/Inf went in and came out where the reference has it
  other exception  any other exception, or a ValueError/TypeError that does not name the argument
  wrong result     a result where an error was due, or one that differs from the reference
                   (a NaN turned finite, say)
  crash            the child died (a signal, or exit without a verdict)
  hang             no verdict within the time limit

The cases are fixed (a seeded generator), so counts compare across versions of the code: run it
with PYTHONPATH pointing at another checkout for its counts. tests/test_fuzz_kernels.py draws
cases of the same kinds with hypothesis.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import select
import signal
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.*, run as a script or loaded by path
from benchmarks.fuzz_kernels_calls import Arg, Fn, _k, _r, functions  # noqa: E402

CLASSES = ("clean error", "correct result", "other exception", "wrong result", "crash", "hang")
MEMORY_LIMIT = 4 << 30
TIMEOUT_S = 20.0


# ---- spoiling one argument -----------------------------------------------------------------------
@dataclass
class Case:
    fn: str
    arg: str
    how: str
    expect: str           # "error": must raise naming `names`; "ref": a result equal to the reference, or
    names: tuple = ()     # a clean error; "nonfinite": non-finite exactly where the reference has it
    spoil: Callable[[dict], None] | None = field(default=None, repr=False)

    @property
    def name(self):
        return f"{self.fn}:{self.arg}:{self.how}"


def _float_like(a):
    return isinstance(a, np.ndarray) and a.dtype.kind == "f" or (isinstance(a, np.ndarray) and a.dtype.name in (
        "bfloat16", "float8_e4m3fn"))


def _array_spoils(arg, spec: Arg, value):
    """(how, expect, spoil(kwargs) or value-maker) for one array argument."""
    out = []
    put = lambda f: (lambda kw: kw.__setitem__(arg, f(kw[arg])))  # noqa: E731
    out += [("list", "error", put(lambda a: a.tolist())), ("string", "error", put(lambda a: "array"))]
    if not spec.optional:
        out.append(("None", "error", put(lambda a: None)))
    strided = lambda a: np.repeat(a, 2, axis=-1)[..., ::2]  # noqa: E731
    # numpy calls an array with one element per row contiguous whatever its strides: valid then.
    layout = "error" if not strided(value).flags.c_contiguous else "ref"
    out += [("float64", "error", put(lambda a: a.astype(np.float64))), ("int8", "error", put(lambda a: a.astype(np.int8))),
            ("extra-axis", "ref", put(lambda a: a[None])), ("scalar", "error", put(lambda a: a.reshape(-1)[:1].reshape(()))),
            ("strided", layout, put(strided)),
            ("fortran", "error" if not np.asfortranarray(value).flags.c_contiguous else "ref", put(np.asfortranarray)),
            ("wrong-width", "ref", put(lambda a: np.concatenate([a, a[..., :1]], axis=-1)))]
    for ax in range(value.ndim):
        out.append((f"empty-axis{ax}", "ref", put(lambda a, ax=ax: np.take(a, [], axis=ax))))
    if spec.nan and _float_like(value):
        for how, v in (("nan", np.nan), ("inf", np.inf), ("-inf", -np.inf)):
            def spoil(kw, v=v):
                a = kw[arg].copy()
                flat = a.reshape(-1)
                flat[(flat.size * 3) // 7] = v
                kw[arg] = a
            out.append((how, "nonfinite", spoil))
            if how == "nan":
                out.append(("all-nan", "nonfinite", put(lambda a: np.full_like(a, np.nan))))
    return out


_HUGE = (2 ** 31, 2 ** 32 + 3, 2 ** 63, 2 ** 64 + 1, 10 ** 30)


def _ids_spoils(arg, spec: Arg, value):
    put = lambda f: (lambda kw: kw.__setitem__(arg, f(kw[arg])))  # noqa: E731
    out = [("list", "error", put(lambda a: a.tolist())), ("float", "error", put(lambda a: a.astype(np.float64))),
           ("uint64", "error", put(lambda a: a.astype(np.uint64))), ("bool", "error", put(lambda a: a.astype(bool))),
           ("extra-axis", "error", put(lambda a: a[None])),
           ("strided", "error", put(lambda a: np.repeat(a, 2, axis=-1)[..., ::2]))]

    def setv(v, dtype=np.int64):
        def spoil(kw):
            a = np.array(kw[arg], dtype=dtype)
            a.reshape(-1)[0] = v  # the first entry: always in use (block tables may pad with anything)
            kw[arg] = a
        return spoil
    for v in _HUGE[:2] + (-(2 ** 32) + 1, 2 ** 32 + 1, -(2 ** 31) - 1):
        out.append((f"int64={v}", "error", setv(v)))
    if spec.bound is not None:
        out += [("-1", "error", setv(-1)), (f"bound={spec.bound}", "error", setv(spec.bound)),
                ("int32-max", "error", setv(2 ** 31 - 1, np.int32))]
    return out


def _int_spoils(arg, spec: Arg):
    out = [("True", "error", True), ("float", "error", 132.7), ("float-integral", "error", 2.0), ("string", "error", "3"),
           ("None", "error", None), ("list", "error", [2])]
    if spec.minimum is not None:
        out += [(f"{spec.minimum - 1}", "error", spec.minimum - 1), ("-2**40", "error", -(2 ** 40))]
    for v in _HUGE:
        out.append((f"huge={v}", "ref" if spec.huge_valid and v < 2 ** 63 else "error", v))
    return out


def _real_spoils(arg, spec: Arg):
    out = [("True", "error", True), ("string", "error", "1.0"), ("None", "error", None), ("nan", "error", float("nan")),
           ("inf", "error", float("inf")), ("-inf", "error", float("-inf")), ("1e300", "error", 1e300),
           ("complex", "error", 1j)]
    if spec.positive:
        out += [("0", "error", 0.0), ("-1", "error", -1.0), ("1e-50", "error", 1e-50)]
    elif spec.minimum is not None:
        out += [("-1", "error", -1.0)]
    return out


def _cache_spoils(arg, paged, base):
    def attr(name, f):
        def spoil(kw):
            c = kw[arg]
            setattr(c, name, f(getattr(c, name)))
        return spoil
    out = [("dict", "error", lambda kw: kw.__setitem__(arg, {"latent": None})),
           ("None", "error", lambda kw: kw.__setitem__(arg, None))]
    names = ("latent", "latent_scale", "rope", "k_full") if paged else ("latent", "k_pe", "k_full")
    for n in (n for n in names if getattr(base, n) is not None):
        out += [(f"{n}-strided", "error", attr(n, lambda a: np.repeat(a, 2, axis=-1)[..., ::2])),
                (f"{n}-float64", "error", attr(n, lambda a: a.astype(np.float64))),
                (f"{n}-uint16", "error", attr(n, lambda a: a.view(np.uint16))),
                (f"{n}-readonly", "error", attr(n, lambda a: (a.setflags(write=False), a)[1])),
                (f"{n}-None", "error", attr(n, lambda a: None))]
    if not paged:
        out += [("prefix=-1", "error", attr("prefix", lambda p: -1)), ("prefix=True", "error", attr("prefix", lambda p: True)),
                ("prefix=1.0", "error", attr("prefix", lambda p: 1.0)),
                ("prefix=2**63", "error", attr("prefix", lambda p: 2 ** 63)),
                ("prefix=2**32", "error", attr("prefix", lambda p: 2 ** 32))]
    return [(how, exp, sp, (f"cache.{how.split('-')[0].split('=')[0]}" if how not in ("dict", "None") else "cache"))
            for how, exp, sp in out]


_OPTIONAL_KEYS = ("gate_bias",)   # a dict entry whose absence is valid


def _dict_spoils(arg, value, path, nan, unused=(), no_ref=()):
    """Spoils of the arrays of a dict argument (weights, layer, layer['moe'], ...). NaN is not put
    into `unused` entries (inputs this variant ignores), and in `no_ref` entries (inputs the
    reference does not take) it must only reach the output."""
    out = []
    for key, v in value.items():
        sub = path + [key]

        def put(f, sub=sub):
            def spoil(kw):
                d = kw[arg] = _deep_copy_dicts(kw[arg])
                for k in sub[:-1]:
                    d = d[k]
                d[sub[-1]] = f(d[sub[-1]])
            return spoil
        if isinstance(v, dict):
            out += _dict_spoils(arg, v, sub, nan, unused, no_ref)
            continue
        label = "/".join(map(str, sub))
        if isinstance(v, np.ndarray):
            out += [(f"{label}-float64", "error", put(lambda a: a.astype(np.float64)), key),
                    (f"{label}-strided", "error", put(lambda a: np.repeat(a, 2, axis=-1)[..., ::2]), key),
                    (f"{label}-extra-axis", "error", put(lambda a: a[None]), key),
                    (f"{label}-missing", "ref" if key in _OPTIONAL_KEYS else "error", put(lambda a: None), key)]
            if nan and _float_like(v) and key not in unused:
                def nan_spoil(a):
                    a = a.copy()
                    a.reshape(-1)[(a.size * 3) // 7] = np.nan
                    return a
                out.append((f"{label}-nan", "nonfinite-any" if key in no_ref else "nonfinite", put(nan_spoil), key))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            huge = 2 ** 64 if isinstance(v, int) else 1e300
            out += [(f"{label}-True", "error", put(lambda a: True), key), (f"{label}-str", "error", put(lambda a: "2"), key),
                    (f"{label}-huge", "error", put(lambda a, huge=huge: huge), key)]
    return out


def _deep_copy_dicts(d):
    return {k: _deep_copy_dicts(v) if isinstance(v, dict) else v for k, v in d.items()}


def cases_for(fn: Fn) -> list[Case]:
    """The fixed spoils of one function's arguments (builds its valid call: runs kernels)."""
    if not fn.args:
        return [Case(fn.name, "-", "call", "ref")]
    out = []
    base = fn.build()
    for arg, spec in fn.args.items():
        if spec.kind == "array":
            for how, exp, sp in _array_spoils(arg, spec, base[arg]):
                out.append(Case(fn.name, arg, how, exp, (arg,), sp))
        elif spec.kind == "ids":
            for how, exp, sp in _ids_spoils(arg, spec, base[arg]):
                out.append(Case(fn.name, arg, how, exp, (arg,), sp))
        elif spec.kind in ("int", "real", "bool", "choice"):
            vals = (_int_spoils(arg, spec) if spec.kind == "int" else _real_spoils(arg, spec) if spec.kind == "real"
                    else [("string-no", "error", "no"), ("string-false", "error", "false"), ("int", "error", 0),
                          ("None", "error", None)] if spec.kind == "bool"
                    else [("bogus", "error", "bogus"), ("int", "error", 3), ("None", "error", None)])
            for how, exp, v in vals:
                out.append(Case(fn.name, arg, how, exp, (arg,), lambda kw, arg=arg, v=v: kw.__setitem__(arg, v)))
        elif spec.kind in ("cache", "paged_cache"):
            for how, exp, sp, name in _cache_spoils(arg, spec.kind == "paged_cache", base[arg]):
                out.append(Case(fn.name, arg, how, exp, (name,), sp))
        elif spec.kind in ("weights", "layer"):
            out.append(Case(fn.name, arg, "not-a-dict", "error", (arg,), lambda kw, arg=arg: kw.__setitem__(arg, [1])))
            for how, exp, sp, key in _dict_spoils(arg, base[arg], [], spec.nan, fn.nan_unused, fn.nan_no_ref):
                out.append(Case(fn.name, arg, how, exp, (key,), sp))
    return out


def case_from_spec(spec: dict) -> tuple[Case, Fn]:
    """A case from its JSON description: {"fn", "index"} (the fixed catalogue), or a drawn value:
    {"fn", "arg", "how": "scalar" | "id" | "nan-at", "value"} (tests/test_fuzz_kernels.py).
    A drawn scalar or id must be invalid for the argument: the case expects an error naming it."""
    fn = {f.name: f for f in functions()}[spec["fn"]]
    if "index" in spec:
        return cases_for(fn)[spec["index"]], fn
    arg, how, v = spec["arg"], spec["how"], spec["value"]
    if how == "scalar":
        return Case(fn.name, arg, f"scalar={v!r}", "error", (arg,), lambda kw: kw.__setitem__(arg, v)), fn
    if how == "id":
        def set_id(kw):
            a = np.array(kw[arg], dtype=np.int64)
            a.reshape(-1)[0] = v
            kw[arg] = a
        return Case(fn.name, arg, f"id={v}", "error", (arg,), set_id), fn
    if how == "nan-at":
        def put_nan(kw):
            a = kw[arg].copy()
            a.reshape(-1)[min(int(v[0] * a.size), a.size - 1)] = v[1]
            kw[arg] = a
        return Case(fn.name, arg, f"{v[1]}-at-{v[0]:.3f}", "nonfinite", (arg,), put_nan), fn
    raise ValueError(f"unknown case kind {how!r}")


# ---- running one case ----------------------------------------------------------------------------
def _floats(result):
    """The floating-point arrays of a result (tuples and dicts flattened; integer ids skipped)."""
    if isinstance(result, dict):
        return [a for v in result.values() for a in _floats(v)]
    if isinstance(result, (tuple, list)):
        return [a for v in result for a in _floats(v)]
    if isinstance(result, np.ndarray) and (result.dtype.kind == "f" or result.dtype.name in ("bfloat16",
                                                                                             "float8_e4m3fn")):
        return [result.astype(np.float32)]
    if isinstance(result, float):
        return [np.array([result], np.float32)]
    return []


def _equal(a, b):
    """Results equal up to the kernels' rounding (they are tested tightly elsewhere)."""
    if isinstance(a, dict) or isinstance(b, dict):
        return isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
        return (isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)) and len(a) == len(b)
                and all(_equal(x, y) for x, y in zip(a, b)))
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    fa, fb = a.astype(np.float64), b.astype(np.float64)
    same_nan = np.array_equal(np.isnan(fa), np.isnan(fb))
    fin = np.isfinite(fa) & np.isfinite(fb)
    return same_nan and np.array_equal(np.isinf(fa), np.isinf(fb)) and np.allclose(fa[fin], fb[fin], rtol=0.05, atol=0.05)


def _names(msg, names):
    return any(n in msg for n in names)


def _call(fn: Fn, kw):
    if fn.call is not None:
        return fn.call(**kw)
    return getattr(_k(), fn.name)(**kw)


def judge(case: Case, fn: Fn) -> tuple[str, str]:
    """The class of one case and a one-line detail (run in the child)."""
    kw = fn.build()
    if case.spoil is not None:
        case.spoil(kw)
    ref_kw = dict(kw)
    if fn.fresh_cache and "cache" in kw and kw["cache"].__class__.__name__ == "MlaCache":
        ref_kw["cache"] = None
    try:
        result = _call(fn, kw)
    except (ValueError, TypeError) as e:
        msg = f"{type(e).__name__}: {e}"
        if case.expect.startswith("nonfinite"):
            return "wrong result", f"raised for a non-finite input the reference carries: {msg}"
        if _names(str(e), case.names) or (case.expect == "ref" and _names(str(e), fn.args) and _ref_raises(fn, ref_kw)):
            return "clean error", msg
        return "other exception", f"does not name {case.names[0]}: {msg}"
    except Exception as e:  # noqa: BLE001 - every other exception is a finding
        return "other exception", f"{type(e).__name__}: {e}"
    if case.expect == "error":
        return "wrong result", f"returned {type(result).__name__} where an error naming {case.names[0]} was due"
    if fn.ref is None or case.expect == "nonfinite-any":
        if case.expect.startswith("nonfinite"):
            if any(not np.isfinite(a).all() for a in _floats(result)):
                return "correct result", "non-finite output"
            return "wrong result", "a non-finite input gave a finite output"
        return "correct result", "returned"
    try:
        expected = fn.ref(**ref_kw)
    except Exception as e:  # noqa: BLE001
        if case.how.startswith("empty") and all(a.size == 0 for a in _floats(result)):
            return "correct result", f"empty output (the reference fails on the empty input: {e})"
        return "wrong result", f"returned where the reference raises {type(e).__name__}: {e}"
    if case.expect == "nonfinite":
        mine, theirs = _floats(result), _floats(expected)
        for a, b in zip(mine, theirs):
            if a.shape != b.shape:
                return "wrong result", f"shape {a.shape} vs the reference's {b.shape}"
            hidden = ~np.isfinite(b) & np.isfinite(a)
            spread = np.isfinite(b) & ~np.isfinite(a)
            if hidden.any():
                return "wrong result", f"{int(hidden.sum())} outputs finite where the reference's are not"
            if spread.any():
                return "wrong result", f"{int(spread.sum())} outputs non-finite where the reference's are finite"
        return "correct result", "non-finite where the reference's are"
    if _equal(result, expected):
        return "correct result", "equals the reference"
    return "wrong result", "differs from the reference"


def _ref_raises(fn, kw):
    if fn.ref is None:
        return False
    try:
        fn.ref(**kw)
    except Exception:  # noqa: BLE001
        return True
    return False


def _preload():
    """Imports (not runs) dsperf in the forking process, so that each child starts warm."""
    _k(), _r()


def _in_child(work, timeout):
    """work() -> JSON-able, in a forked child under the memory limit; (result, None) or (None,
    (class, detail)) when the child crashed or hung. The forking process must not have run an
    OpenMP region (libgomp's threads do not survive fork), hence the server below."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            import faulthandler
            faulthandler.disable()  # a crash is this harness's to report, not the child's to print
            resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
            import warnings
            warnings.simplefilter("ignore")
            out = work()
        except BaseException as e:  # noqa: BLE001 - the harness itself must report, not die
            out = ["other exception", f"harness: {type(e).__name__}: {e} {traceback.format_exc(limit=3)}"]
        os.write(w, json.dumps(out).encode())
        os.close(w)
        os._exit(0)
    os.close(w)
    data, deadline = b"", time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(r)
            return None, ("hang", f"no verdict in {timeout:.0f} s")
        ready, _, _ = select.select([r], [], [], left)
        if ready:
            chunk = os.read(r, 1 << 20)
            if not chunk:
                break
            data += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return None, ("crash", f"signal {sig} ({signal.Signals(sig).name})")
    if not data:
        return None, ("crash", f"exit status {os.WEXITSTATUS(status)} without a verdict")
    return json.loads(data), None


def run_spec(spec: dict, timeout=TIMEOUT_S) -> list:
    """[class, detail, case name] of one case, in its own process."""
    def work():
        case, fn = case_from_spec(spec)
        cls, detail = judge(case, fn)
        return [cls, detail[:500], case.name]
    out, failed = _in_child(work, timeout)
    return out if failed is None else [failed[0], failed[1], json.dumps(spec)]


def catalogue(timeout=600) -> list[dict]:
    """Every fixed case as a spec with its name, listed in a child (listing runs kernels)."""
    def work():
        return [{"fn": fn.name, "index": i, "name": c.name, "expect": c.expect}
                for fn in functions() for i, c in enumerate(cases_for(fn))]
    _preload()
    out, failed = _in_child(work, timeout)
    if failed:
        raise RuntimeError(f"listing the cases failed: {failed}")
    return out


def serve():
    """Runs specs (JSON lines on stdin), one process each, answering [class, detail, name] lines
    ("list" answers the catalogue): the fork server of tests/test_fuzz_kernels.py, a process that
    never runs a kernel itself."""
    _preload()
    for line in sys.stdin:
        if line.strip():
            spec = json.loads(line)
            print(json.dumps(catalogue() if spec == "list" else run_spec(spec)), flush=True)


def census(selected=None, show=(), verbose=False):
    counts, per_fn = Counter(), {}
    for spec in catalogue():
        if selected and not any(s in spec["name"] for s in selected):
            continue
        cls, detail, name = run_spec({"fn": spec["fn"], "index": spec["index"]})
        counts[cls] += 1
        per_fn.setdefault(spec["fn"], Counter())[cls] += 1
        if cls in show or verbose:
            print(f"{cls:16s} {name}: {detail}", flush=True)
    return counts, per_fn


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--family", default="kernels", choices=["kernels"], help="the API family (this script: kernels)")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    p.add_argument("--only", action="append", help="run the cases whose name contains this (repeatable)")
    p.add_argument("--show", action="append", default=[], help="print the cases of this class (repeatable)")
    p.add_argument("--per-function", action="store_true", help="counts per function too")
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.serve:
        serve()
        return 0
    if a.list:
        for c in catalogue():
            print(c["name"], c["expect"])
        return 0
    t0 = time.time()
    counts, per_fn = census(a.only, set(a.show), a.verbose)
    import dsperf  # noqa: F401 - imported, not run: where the counts come from
    print(f"dsperf from {os.path.dirname(dsperf.__file__)}: {sum(counts.values())} cases in {time.time() - t0:.0f} s")
    for cls in CLASSES:
        print(f"  {cls:16s} {counts[cls]}")
    if a.per_function:
        for name, c in per_fn.items():
            bad = {k: v for k, v in c.items() if k not in ("clean error", "correct result")}
            print(f"  {name:28s} {dict(c)}" + (f"  <- {bad}" if bad else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
