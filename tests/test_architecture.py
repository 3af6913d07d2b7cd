"""The house rules, checked by parsing the package: layers import one way, no cycles, no private names across
modules, no file reading below the interface outside ``specs``, short functions and modules, sources inside the repository."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "roofline"

#: layer of each module prefix (longest prefix wins); a module may import only layers <= its own
LAYERS = {
    "roofline.errors": 0, "roofline.units": 0, "roofline.workload": 0, "roofline.version": 0, "roofline.records": 0,
    "roofline.memo": 0,
    "roofline.specs": 1, "roofline.physics": 2, "roofline.symbolic": 2, "roofline.serving": 3,
    "roofline.evidence": 4, "roofline": 4.5, "roofline.ui": 5, "roofline.__main__": 6,
}
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 800


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> float:
    best = max((k for k in LAYERS if module == k or module.startswith(k + ".")), key=len)
    return LAYERS[best]


def _resolve(source: str, node: ast.ImportFrom | ast.Import) -> list[tuple[str, list[str]]]:
    """(imported module, names) for an import node, relative imports resolved against ``source``."""
    if isinstance(node, ast.Import):
        return [(a.name, []) for a in node.names if a.name.split(".")[0] == "roofline"]
    is_package = MODULES[source].name == "__init__.py"
    base = source.split(".") if is_package else source.split(".")[:-1]
    if node.level:
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    if target.split(".")[0] != "roofline":
        return []
    out = []
    for alias in node.names:   # `from . import render` imports a module, `from .x import y` a name
        sub = f"{target}.{alias.name}"
        out.append((sub, []) if sub in MODULES else (target, [alias.name]))
    return out


def _module_imports(name: str, tree: ast.AST) -> list[tuple[str, list[str], int]]:
    """Every import of module ``name`` (parsed as ``tree``): at the top, inside functions (lazy) and under ``if
    TYPE_CHECKING:`` alike (an import made only for the type checker still ties two modules together; skipping
    those once hid a circle in specs/: devices -> params -> formats -> devices)."""
    return [(t, names, node.lineno) for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
            for t, names in _resolve(name, node)]


def _imports() -> dict[str, list[tuple[str, list[str], int]]]:
    return {name: _module_imports(name, ast.parse(path.read_text())) for name, path in MODULES.items()}


def test_type_checking_imports_are_counted():
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .devices import Device\n")
    assert ("roofline.specs.devices", ["Device"], 3) in _module_imports("roofline.specs.formats", tree)


IMPORTS = _imports()


def test_layers_import_one_way():
    bad = [f"{src}:{line} imports {dst} (layer {layer(dst)} above {layer(src)})"
           for src, items in IMPORTS.items() for dst, _names, line in items
           if layer(dst) > layer(src) and not (src.startswith(dst + ".") or dst == "roofline.version")]
    assert not bad, "\n".join(bad)


def test_no_import_cycles():
    graph = {src: {dst for dst, _n, _l in items if dst in MODULES and dst != src and not src.startswith(dst + ".")}
             for src, items in IMPORTS.items()}
    state: dict[str, int] = {}
    cycles: list[str] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, "\n".join(cycles)


def test_no_private_names_across_modules():
    bad = [f"{src}:{line} imports {n} from {dst}" for src, items in IMPORTS.items() for dst, names, line in items
           for n in names if n.startswith("_") and not n.startswith("__")]
    assert not bad, "\n".join(bad)


READERS = ("open", "read_text", "read_bytes", "write_text", "write_bytes", "loads", "load")


def test_only_specs_touches_files_below_the_interface():
    bad = []
    for name, path in MODULES.items():
        if layer(name) >= 5 or name.startswith("roofline.specs") or name == "roofline.symbolic":
            continue
        from_specs = {n for dst, names, _l in IMPORTS[name] if dst.startswith("roofline.specs") for n in names}
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                f = node.func
                called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                if isinstance(f, ast.Name) and called in from_specs:
                    continue   # the specs layer's own reader does the reading
                if called in READERS and not ast.unparse(f).startswith(("tomllib.loads", "np.", "json.loads")):
                    bad.append(f"{name}:{node.lineno} calls {ast.unparse(f)}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_functions_are_short(path):
    long = [f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, long


def test_modules_are_short():
    """No module of the package over MAX_MODULE_LINES lines (issue 51: a module a maintainer can read in one
    sitting; a longer one is split along a seam, its names re-exported where callers import them)."""
    long = [f"{p.relative_to(ROOT)} ({n} lines)" for p in sorted(PACKAGE.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES]
    assert not long, long


#: The functions that turn names (ids, aliases, paths, group and link strings) into records. Issue 51: names are
#: resolved in specs/ and at the door (roofline.api, roofline.serving_api, the command line); physics/ and serving/
#: take records.
RESOLVERS = frozenset({"resolve_model", "resolve_device", "resolve_group", "load_model", "load_device",
                       "model_from_hf_config", "load_profile", "get_link", "device_or_group", "split_group"})
#: Where serving/ still resolves names (module, enclosing function, resolver), to be moved to the door. Empty since
#: issue 51's second pass: the sizings, the placement study and the intervals take records (their doors are in
#: roofline.serving_api), and Placement, a deployment's description, moved to specs/ with its constructor from
#: names. The list may only shrink.
RESOLVING_STILL: frozenset[tuple[str, str, str]] = frozenset()


def _resolving_calls(name: str, tree: ast.AST) -> set[tuple[str, str, str]]:
    """(module, enclosing function, resolver) of every call to a :data:`RESOLVERS` function in ``tree``."""
    found: set[tuple[str, str, str]] = set()

    def walk(node: ast.AST, where: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            inner = where + [child.name] if isinstance(child, (ast.FunctionDef, ast.ClassDef)) else where
            if isinstance(child, ast.Call):
                f = child.func
                called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                if called in RESOLVERS:
                    found.add((name, ".".join(where) or "<module>", called))
            walk(child, inner)
    walk(tree, [])
    return found


def test_physics_and_serving_take_records():
    """No module of physics/ or serving/ resolves a name (beyond the listed ones still to move to the door)."""
    calls = {c for name, path in MODULES.items() if name.startswith(("roofline.physics", "roofline.serving"))
             for c in _resolving_calls(name, ast.parse(path.read_text()))}
    new = sorted(calls - RESOLVING_STILL)
    assert not new, "names resolved below the door (resolve them in roofline.api or the CLI):\n" + "\n".join(map(str, new))
    moved = sorted(RESOLVING_STILL - calls)
    assert not moved, "no longer resolved there: remove from RESOLVING_STILL:\n" + "\n".join(map(str, moved))


OUTSIDE = re.compile(r"\.\./shared|(?<![\w/])(theory|gimlet)\.md|DESIGN\.md")


def test_citations_stay_inside_the_repository():
    files = [*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "examples").glob("*.py"),
             *(ROOT / "scripts").glob("*.py"), *(ROOT / "hardware_specs").rglob("*"), ROOT / "README.md"]
    bad = [f"{p.relative_to(ROOT)}:{i}: {line.strip()[:90]}" for p in files if p.is_file()
           for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
           if OUTSIDE.search(line) and "docs/" not in line[max(0, OUTSIDE.search(line).start() - 5):OUTSIDE.search(line).start()]]
    assert not bad, "\n".join(bad[:40]) + f"\n({len(bad)} in all)"
    for doc in ("docs/theory.md", "docs/gimlet.md", "docs/design.md"):
        assert (ROOT / doc).is_file(), doc


def test_tree_is_clean_under_ruff():
    """The lint configured in pyproject.toml passes on the whole tree (ruff ships with the test extra)."""
    import importlib.util
    import subprocess
    import sys
    if importlib.util.find_spec("ruff") is None:
        pytest.skip("ruff is not installed (pip install -e '.[test]' installs it)")
    p = subprocess.run([sys.executable, "-m", "ruff", "check", "--quiet", str(ROOT)], capture_output=True, text=True,
                       cwd=ROOT)
    assert p.returncode == 0, p.stdout[-3000:]


def test_run_level_tables_are_bounded(monkeypatch):
    """validate's tables of largest batches and latency-bound searches keep at most their limit of entries, the
    oldest leaving first (a long notebook session or a calibration with many folds must not grow them forever)."""
    from roofline.evidence import validate as v
    table: dict = {}
    monkeypatch.setattr(v, "_TABLE_LIMIT", 3)
    for k in range(5):
        v._bounded(table, k, k)
    assert list(table) == [2, 3, 4]


def test_package_is_clean_under_mypy(mypy_run):
    """``python -m mypy`` (configuration in pyproject.toml's [tool.mypy]: the package) reports no error. mypy ships
    with the test extra; a cold run (no .mypy_cache) takes 15-25 s on a busy 2-core machine, so the suite starts
    it at collection in its own process (conftest) and this test collects its answer."""
    if mypy_run is None:
        pytest.skip("mypy is not installed (pip install -e '.[test]' installs it)")
    out, _ = mypy_run.communicate(timeout=600)
    assert mypy_run.returncode == 0, out[-3000:]
