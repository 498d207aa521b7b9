"""python/dsperf has no import cycle: the graph of module-level imports between its modules is
acyclic (imports inside functions, which load on first use, are left out)."""
import ast
from pathlib import Path

import dsperf

PKG = Path(dsperf.__file__).parent


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, name: str, modules) -> set[str]:
    """The dsperf modules a module imports at module level (relative or absolute)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("dsperf"):
                # `from . import kernels` needs the submodule only; `from .x import f` needs x.
                out.update(f"{target}.{a.name}" if f"{target}.{a.name}" in modules else target
                           for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("dsperf"))
    return out


def test_no_import_cycle():
    modules = {_module_name(p): p for p in PKG.rglob("*.py")}
    extensions = {f"dsperf.{p.name.split('.')[0]}" for p in PKG.glob("*.so")}  # _C: imports nothing of ours
    graph = {m: {t for t in _imports(p, m, modules.keys() | extensions) if t in modules and t != m} for m, p in modules.items()}
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(m):
        state[m] = 1
        path.append(m)
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                cycle = path[path.index(t):] + [t]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if t not in state:
                visit(t)
        path.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert len(graph) > 20


def test_gpu_twins_do_not_import_the_cpu_front_door():
    """dsperf.kernels hands GPU arrays to dsperf.cuda; dsperf.cuda shares only the argument checks
    (dsperf._arrays), never the CPU module's private names or its kernels."""
    tree = ast.parse((PKG / "cuda" / "__init__.py").read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert "kernels" not in imported and "dsperf.kernels" not in imported, imported


def test_former_flat_names_are_the_new_modules():
    """README, notebooks and users' scripts import the former flat names: each is the module of its
    new home, by import, from-import and attribute alike."""
    import importlib

    from dsperf import _aliases

    for old, new in _aliases.FORMER_NAMES.items():
        assert importlib.import_module(old) is importlib.import_module(new), old
        parent, _, leaf = old.rpartition(".")
        assert getattr(importlib.import_module(parent), leaf) is importlib.import_module(new), old
    from dsperf import harness, kernel_cost  # noqa: F401

    assert harness.__name__ == "dsperf.predict.harness" and kernel_cost.__name__ == "dsperf.predict.kernel_cost"
    # The flat top level is gone: only the front doors, the command and private helpers remain.
    top = sorted(p.stem for p in PKG.glob("*.py"))
    assert top == ["__init__", "_aliases", "_arrays", "_checks", "_markdown", "cli", "cli_grounded", "reference"], top
    assert (PKG / "kernels" / "__init__.py").is_file()  # the CPU front door, one module per family
