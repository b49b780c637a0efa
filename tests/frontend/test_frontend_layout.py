"""The importers' files (issue 41): each module of ``builder/frontend`` under 900 lines, every public
function, class and method with a docstring, every ONNX converter registered once with one, and the
torch-free modules importable without torch or onnx. Read from the source (AST), not by importing."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

FRONTEND = Path(__file__).resolve().parents[2] / "builder" / "frontend"
MAX_LINES = 900


def _modules():
    return sorted(FRONTEND.rglob("*.py"))


def _public_without_docstring(path: Path) -> list[str]:
    """``file:line name`` of each public top-level function / class, and public method of a class, without a
    docstring (names starting with ``_`` are private)."""
    tree = ast.parse(path.read_text())
    missing = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
            if not ast.get_docstring(node):
                missing.append(f"{path.name}:{node.lineno} {node.name}")
            if isinstance(node, ast.ClassDef):
                missing += [f"{path.name}:{m.lineno} {node.name}.{m.name}" for m in node.body
                            if isinstance(m, ast.FunctionDef) and not m.name.startswith("_") and not ast.get_docstring(m)]
    return missing


def test_no_frontend_module_is_over_the_line_limit():
    sizes = {p.relative_to(FRONTEND).as_posix(): len(p.read_text().splitlines()) for p in _modules()}
    assert len(sizes) > 30 and "onnx/importer.py" in sizes and "torch_ops/table.py" in sizes
    assert {p: n for p, n in sizes.items() if n > MAX_LINES} == {}


def test_every_public_function_class_and_method_has_a_docstring():
    missing = [m for p in _modules() for m in _public_without_docstring(p)]
    assert missing == []


def test_the_checker_finds_a_missing_docstring(tmp_path):
    """The docstring check itself: a public function, class or method without one is listed, private
    names and documented ones are not."""
    src = tmp_path / "m.py"
    src.write_text('def f():\n    pass\n\n\ndef _g():\n    pass\n\n\nclass C:\n    """C."""\n\n'
                   '    def m(self):\n        pass\n\n    def n(self):\n        """n."""\n')
    assert _public_without_docstring(src) == ["m.py:1 f", "m.py:12 C.m"]


def test_each_onnx_converter_has_a_docstring():
    """Every converter (a function under ``@_register``) says what it covers: the ONNX op, its version, its
    attributes, its errors."""
    converters, undocumented = [], []
    for path in sorted((FRONTEND / "onnx").glob("convert_*.py")):
        for node in ast.parse(path.read_text()).body:
            if any(isinstance(d, ast.Call) and getattr(d.func, "id", "") == "_register"
                   for d in getattr(node, "decorator_list", [])):
                converters.append(node.name)
                if not ast.get_docstring(node):
                    undocumented.append(f"{path.name} {node.name}")
    assert len(converters) > 90 and undocumented == []


def test_an_op_type_registered_twice_is_refused():
    """One converter per op type: registering a second one for an op type fails at import, naming both,
    rather than silently replacing the first (the table is built once, by the decorators)."""
    pytest.importorskip("onnx")
    from builder.frontend.onnx import SUPPORTED_OPS
    from builder.frontend.onnx.registry import _CONVERTERS, _register

    assert set(SUPPORTED_OPS) == set(_CONVERTERS) and {"Conv", "MatMul", "Loop", "com.microsoft:MatMulNBits"} <= set(
        SUPPORTED_OPS)
    before = dict(_CONVERTERS)
    with pytest.raises(ValueError, match="'Relu' has two converters: _unary in builder.frontend.onnx.convert_elementwise"):
        @_register("NotAnOp", "Relu")
        def _other_relu(im, node, ins, at):
            return ins[0]
    assert _CONVERTERS == before


def test_importing_the_frontend_needs_neither_torch_nor_onnx():
    """``builder.frontend`` and its importer modules load without importing torch or onnx (they are imported
    when an importer runs); ``import onnx`` inside ``builder/frontend/onnx/`` is the third-party package."""
    code = ("import sys, builder.frontend, builder.frontend.fx, builder.frontend.exported_program, "
            "builder.frontend.onnx\n"
            "assert 'torch' not in sys.modules and 'onnx' not in sys.modules, sorted(sys.modules)\n"
            "from builder.frontend.onnx.proto import _onnx\n"
            "try:\n    m = _onnx()\nexcept ImportError:\n    print('no onnx')\nelse:\n"
            "    assert not m.__name__.startswith('builder'), m\n    print(m.__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=FRONTEND.parents[1])
    assert out.stdout.strip() in ("onnx", "no onnx")
