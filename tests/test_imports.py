"""The import rules of docs/ARCHITECTURE.md ("Imports run one way"), checked on the source: an AST walk of
``core/``, ``schemas/``, ``runtime/`` and ``builder/`` that counts every import of ours, at module level and
inside functions alike; and, in fresh interpreters, what importing a package really loads.

Rules (a room is ``core``, ``schemas``, ``runtime``, ``builder`` (the package itself) or ``builder.X``):

- ``core`` imports nothing of ours, and only the standard library and numpy;
- ``schemas`` and ``runtime`` import only ``core`` (never each other, never ``builder``);
- inside ``builder``, the base rooms import only what :data:`BASE_ROOMS` lists (``ir`` only ``core``;
  ``codegen`` also ``runtime``: the compiler emits what the runtime loads), and never llvmlite or pydantic
  where :data:`NO_HEAVY` says so;
- the higher rooms (:data:`HIGHER_ROOMS`, lowest first) import any base room, ``core``, ``schemas``,
  ``runtime`` and the higher rooms before them, never one after them;
- no cycles: the strongly connected components of the module graph are single modules, once the edges of
  :data:`DEFERRED` are taken out; each of those is written down with its reason, and one that no longer
  exists fails the test (so the list only shrinks).
"""
from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "schemas", "runtime", "builder")

BASE_ROOMS = {
    "core": set(),
    "schemas": {"core"},
    "runtime": {"core"},
    "builder.ir": {"core"},
    "builder.te": {"builder.ir", "core"},
    "builder.ops": {"builder.ir", "builder.te", "core"},
    "builder.transform": {"builder.ir", "builder.te", "builder.ops", "core"},
    "builder.codegen": {"builder.ir", "builder.te", "core", "runtime"},
    "builder.nn": {"builder.ir", "builder.te", "builder.ops", "core"},
}
"""What each base room may import besides itself."""

HIGHER_ROOMS = ["builder.compile", "builder.frontend", "builder.layers", "builder.quant", "builder.forward_language",
                "builder.recipe", "builder.sampling", "builder.structured", "builder.generation", "builder.text",
                "builder.chat", "builder.text_stream", "builder.completion", "builder.serve", "builder.summary",
                "builder.checkpoint",
                "builder.build_model", "builder.terminal",
                "builder.cli_text", "builder.cli_serve", "builder.cli", "builder.__main__", "builder"]
"""The rooms above the base ones, lowest first: each may import the base rooms, ``core``, ``schemas``,
``runtime`` and the rooms before it here. ``builder`` is the package itself (its ``__init__``)."""

NO_HEAVY = {"core": ("llvmlite", "pydantic"), "schemas": ("llvmlite",), "runtime": ("pydantic",),
            **{room: ("llvmlite", "pydantic") for room in ("builder.ir", "builder.te", "builder.ops",
                                                          "builder.transform", "builder.nn")}}
"""Third-party packages a room never imports (anywhere in its source)."""

DEFERRED = {
    ("builder.ir.relax", "builder.ops"):
        "the op library (a higher room) registers its records in ir's registry; Op.get / registered_ops load "
        "it on the first lookup by name, so `import builder.ir` stays light and a caller always finds its op "
        "(TVM registers its ops when libtvm loads)",
    ("builder.ir.prim_expr", "builder.ir.expr_printer"):
        "str(PrimExpr) prints through the scalar printer, which imports the nodes (TVM's Node.__str__)",
    ("builder.ir.relax", "builder.ir.printer"):
        "IRModule.script() / str(node) print through the printer, which imports the nodes",
    ("builder.ir.tir.nodes", "builder.ir.tir.printer"):
        "str(stmt) prints through the loop-level printer, which imports the nodes",
    ("builder.nn._tensor_op", "builder.nn.op"):
        "Tensor's Python operators (+, reshape, astype, ...) are nn.op functions, which take and return "
        "Tensors (TVM's nn._tensor_op imports nn.op on use the same way)",
    ("builder.nn.core", "builder.nn.exporter"):
        "Module.export_tvm (TVM's API) is the exporter's entry point, a method of the Module it imports",
    ("builder.nn.core", "builder.nn.spec"):
        "Module.export_tvm reads the spec, whose nn.spec.Object defaults to nn.Object",
    ("builder.nn.core", "builder.compile"):
        "Module.jit (TVM's API) compiles: the compiler is a higher room than nn",
    ("runtime.weights", "runtime.sharded_weights"):
        "load_params opens a sharded checkpoint's index through the sharded reader, which reads each of its files "
        "with weights' single-file reader",
}
"""Imports allowed to break the rules above (a room's order, or a cycle), each with its reason; they are
deferred to the function that needs them."""


def _modules() -> dict[str, Path]:
    mods = {}
    for top in PACKAGES:
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join(parts)] = path
    return mods


MODULES = _modules()


def _ours(name: str) -> str | None:
    """The module of ours ``name`` is or is in (``builder.ir.expr.Var`` -> ``builder.ir.expr``), or None."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path):
    """``(target module or third-party top-level name, line, at module level)`` for every import in the file."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    top_level = set()            # what runs when the module is imported: not inside a function
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            top_level.add(id(node))
            todo.extend(ast.iter_child_nodes(node))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        for name in names:
            target = _ours(name) if name.split(".")[0] in PACKAGES else name.split(".")[0]
            if target is not None and target != module:
                yield target, node.lineno, id(node) in top_level


EDGES = {m: list(_imports(m, p)) for m, p in MODULES.items()}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[0] if parts[0] != "builder" or len(parts) == 1 else ".".join(parts[:2])


def _ours_edges():
    for module, targets in EDGES.items():
        for target, line, top in targets:
            if target.split(".")[0] in PACKAGES:
                yield module, target, line, top


def _where(module: str, line: int) -> str:
    return f"{MODULES[module].relative_to(ROOT)}:{line}"


def test_every_module_is_in_a_room():
    rooms = set(BASE_ROOMS) | set(HIGHER_ROOMS)
    strays = sorted({_room(m) for m in MODULES} - rooms)
    assert not strays, f"modules outside the known rooms {strays}: add them to BASE_ROOMS or HIGHER_ROOMS"


def test_rooms_import_one_way():
    order = {room: i for i, room in enumerate(HIGHER_ROOMS)}
    bad = []
    for module, target, line, _ in _ours_edges():
        a, b = _room(module), _room(target)
        if a == b or (module, target) in DEFERRED:
            continue
        if a in BASE_ROOMS:
            ok = b in BASE_ROOMS[a]
        else:
            ok = b in BASE_ROOMS or (b in order and order[b] < order[a])
        if not ok:
            bad.append(f"{_where(module, line)}: {a} imports {target} ({b})")
    assert not bad, "imports against the rooms' order (docs/ARCHITECTURE.md):\n" + "\n".join(bad)


def test_light_rooms_import_no_heavy_package():
    bad = [f"{_where(m, line)}: {_room(m)} imports {t}" for m, targets in EDGES.items()
           for t, line, _ in targets if t in NO_HEAVY.get(_room(m), ())]
    assert not bad, "\n".join(bad)


def test_core_imports_only_the_standard_library_and_numpy():
    bad = [f"{_where(m, line)}: {t}" for m, targets in EDGES.items() if _room(m) == "core"
           for t, line, _ in targets
           if t.split(".")[0] not in ("core", "numpy") and t.split(".")[0] not in sys.stdlib_module_names]
    assert not bad, "core is the leaf package:\n" + "\n".join(bad)


def _components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    out.append(sorted(comp))
    return out


def test_no_import_cycles():
    graph = {m: set() for m in MODULES}
    lines = {}
    for module, target, line, _ in _ours_edges():
        if (module, target) not in DEFERRED:
            graph[module].add(target)
            lines[module, target] = line
    cycles = [comp for comp in _components(graph) if len(comp) > 1]
    report = []
    for comp in cycles:
        members = set(comp)
        report.append(f"{len(comp)} modules import each other:")
        report += [f"  {_where(m, lines[m, t])}: {m} -> {t}" for m in comp for t in sorted(graph[m] & members)]
    assert not cycles, ("move the code where it belongs (or defer an import, with its reason in DEFERRED):\n"
                        + "\n".join(report))


def test_deferred_imports_exist_and_are_deferred():
    found: dict = {}
    for m, t, _, top in _ours_edges():
        found[m, t] = found.get((m, t), False) or top
    stale = sorted(edge for edge in DEFERRED if edge not in found)
    assert not stale, f"DEFERRED lists imports the code no longer has, remove them: {stale}"
    eager = sorted(edge for edge, top in found.items() if edge in DEFERRED and top)
    assert not eager, f"imports in DEFERRED made at module level: {eager}"


def _loaded(statement: str) -> set[str]:
    code = f"import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    return set(out.stdout.split())


@pytest.mark.parametrize("statement, never", [
    ("import builder.ir", ("builder.codegen", "builder.ops", "builder.te", "builder.compile", "runtime", "schemas",
                           "llvmlite", "pydantic")),
    ("import builder", ("builder.ir", "builder.ops", "builder.compile", "numpy", "llvmlite", "pydantic")),
    ("import builder.nn", ("builder.codegen", "builder.compile", "builder.transform", "runtime", "schemas",
                           "llvmlite", "pydantic")),
    ("import builder.completion", ("llguidance",)),      # structured output loads it when a grammar is built
    ("import runtime", ("builder", "schemas", "pydantic")),
    ("import schemas", ("builder", "runtime", "llvmlite")),
    ("import core.limits, core.weight_names, core.dtypes, core.layout, core.precision, core.messages",
     ("builder", "runtime", "schemas", "llvmlite", "pydantic")),
])
def test_an_import_loads_only_its_rooms(statement, never):
    loaded = _loaded(statement)
    assert not [name for name in never if name in loaded], sorted(name for name in never if name in loaded)


def test_ops_are_registered_before_use_without_importing_builder_ops():
    """``builder.ir`` alone: looking an op up by name (the parser does) loads the op library."""
    code = ("import sys\nfrom builder.ir.relax import Op\nassert 'builder.ops' not in sys.modules\n"
            "print(Op.get('relax.add').name, 'builder.ops' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.split() == ["relax.add", "True"]


def test_builder_compile_is_the_function_however_the_submodule_was_imported():
    code = ("import builder.compile, builder\nfrom builder.compile import JitModule\n"
            "from builder import compile, BuildProgress\nprint(callable(compile) and not hasattr(compile, '__path__'),"
            " builder.compile is compile, BuildProgress.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.split() == ["True", "True", "builder.compile"]
