"""The kernel-family registry (dsperf.ops) is complete: every family module is registered, every
family declares everything the cost model, the harness and the sweeps need, and what it declares
is true of the kernels it names."""
import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import dsperf
from dsperf import harness, kernel_cost, kernels, ops, sweeps

HELPERS = {"family", "inputs"}  # ops modules that declare no family


def test_every_family_module_is_registered():
    modules = {m.name for m in pkgutil.iter_modules(ops.__path__)} - HELPERS
    assert modules == {m.__name__.rsplit(".", 1)[1] for m in ops.MODULES}
    for m in ops.MODULES:
        for fam in getattr(m, "FAMILIES", None) or (m.FAMILY,):
            assert ops.FAMILIES[fam.name] is fam


@pytest.mark.parametrize("name", list(ops.FAMILIES))
def test_family_declares_a_complete_op(name):
    fam = ops.get(name)
    assert fam.summary and fam.params and set(fam.token_params) <= set(fam.params)
    for k in fam.kernels:
        assert callable(getattr(kernels, k)), k
    for path in fam.references:
        module, fn = path.split(".")
        assert callable(getattr(importlib.import_module(f"dsperf.{module}"), fn)), path
    # Placement: "gpu" exactly where dsperf.kernels hands GPU arrays to a dsperf.cuda twin, which
    # then exists under the same name (and is looked up by kernels.py's dispatch).
    from dsperf import cuda

    for k in fam.kernels:
        body = inspect.getsource(getattr(kernels, k))
        dispatches = "_on_gpu(" in body
        assert dispatches == ("gpu" in fam.runs_on), (k, fam.runs_on)
        assert not dispatches or callable(getattr(cuda, k))
    # Work or parts, never neither: composite families are their parts.
    assert fam.work is not None or fam.parts is not None
    assert fam.composite == (fam.work is None)


@pytest.mark.parametrize("name", list(ops.FAMILIES))
def test_sweep_points_price_and_key(name):
    fam = ops.get(name)
    fit, default = fam.fit_points(), fam.default_points()
    assert default, "every family is in the report's sweep"
    assert bool(fit) != fam.composite, "base families are fitted, composite ones never"
    for p in fit + default + [fam.example]:
        assert set(fam.params) - {"dtype", "active"} <= set(p), p
    if not fam.composite:
        for p in fit + default:
            w = kernel_cost.work(name, p)
            assert w.flops >= 0 and w.bytes > 0
            assert kernel_cost.efficiency_key(name, p).startswith(name)
    # A quick sweep keeps at least one point of every family.
    assert any(not fam.large(p) for p in default)


def test_sweeps_are_the_families_points():
    for quick in (False, True):
        assert {f for f, _ in sweeps.fit_points(quick)} == set(ops.base())
        assert {f for f, _ in sweeps.default_points(quick)} == set(ops.FAMILIES)
    assert len(sweeps.fit_points(True)) < len(sweeps.fit_points(False))


@pytest.mark.parametrize("name", list(ops.FAMILIES))
def test_example_builds_runs_and_is_priced(name):
    fam = ops.get(name)
    call, measured = harness.build(name, fam.example, harness.Pool(0))
    call()
    if fam.composite:
        assert 1 <= measured["active"] <= fam.example["experts"]
    assert kernel_cost.predict_ms(name, measured, "H800") > 0


def test_unknown_family_is_named():
    with pytest.raises(ValueError, match="unknown kernel family 'gemm'; known: linear, gate"):
        ops.get("gemm")
    with pytest.raises(TypeError, match="family must be a string"):
        kernel_cost.work(["linear"], {})


def test_mla_variants_have_one_home():
    # Declared once in C++ (csrc/model/mla_variant.hpp); Python reads the names from the binding.
    assert kernel_cost.VARIANTS is kernels.MLA_VARIANTS == tuple(dsperf._C.kernels.MLA_VARIANTS)
    pkg = Path(dsperf.__file__).parent
    hits = [p for p in pkg.rglob("*.py") if '"CD", "CC", "A_CC", "A_CC_ME", "AM_CC_ME"' in p.read_text()]
    assert hits == [], hits


def test_no_family_name_in_an_if_chain_outside_ops():
    """kernel_cost, harness and sweeps iterate the registry: none compares a family name."""
    names = set(ops.FAMILIES)
    for mod in (kernel_cost, harness, sweeps):
        tree = ast.parse(Path(mod.__file__).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                consts = {c.value for c in ast.walk(node) if isinstance(c, ast.Constant)}
                assert not consts & names, (mod.__name__, ast.unparse(node))
