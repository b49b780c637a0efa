"""Every public definition of the compiler's packages has a docstring (issue 41; what a docstring
gives is in README.md: shapes, dtypes, errors, sources where they apply).

Public: a name without a leading underscore, defined in the module (an import is not a definition) at
module level (also inside a module-level ``if`` / ``try``), or a method / nested class of a public
class; dunder methods, and a property's setter / deleter (the getter carries the docstring), do not
count. The walk reads the source (AST), so it imports nothing and sees function bodies' helpers as
private (they are not module level)."""
import ast
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = [
    "builder/ir",
    "builder/codegen",
    "builder/transform",
    "builder/frontend",
]


def _is_accessor(node: ast.AST) -> bool:
    """A ``@name.setter`` / ``@name.deleter`` method: the property's docstring is on its getter."""
    return any(isinstance(d, ast.Attribute) and d.attr in ("setter", "deleter") for d in node.decorator_list)


def _public_definitions(body: list, prefix: str = ""):
    """``(node, qualified name)`` of each public function / class in ``body`` and, for a public
    class, of its public methods and nested classes."""
    for node in body:
        if isinstance(node, (ast.If, ast.Try)):
            blocks = [node.body, node.orelse] + ([node.finalbody] + [h.body for h in node.handlers]
                                                 if isinstance(node, ast.Try) else [])
            for block in blocks:
                yield from _public_definitions(block, prefix)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name.startswith("_") or _is_accessor(node):
                continue
            yield node, prefix + node.name
            if isinstance(node, ast.ClassDef):
                yield from _public_definitions(node.body, f"{prefix}{node.name}.")


def undocumented(source: str, path: str) -> list[str]:
    """``path:line name`` of every public definition in ``source`` without a docstring."""
    tree = ast.parse(source, filename=path)
    return [f"{path}:{node.lineno} {name}" for node, name in _public_definitions(tree.body)
            if not (ast.get_docstring(node) or "").strip()]


def test_every_public_definition_has_a_docstring():
    missing = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            missing += undocumented(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert not missing, f"{len(missing)} public definitions without a docstring:\n" + "\n".join(missing)


def test_the_walker_finds_what_lacks_a_docstring(tmp_path):
    source = textwrap.dedent('''
        """A module."""
        import os
        from os.path import join


        def documented(x):
            """Has one."""


        def undocumented_function(x):
            return x


        def _private(x):
            return x


        class Public:
            """A class."""

            def __init__(self):
                pass

            def method_without(self):
                pass

            @property
            def value(self):
                """The value."""
                return 1

            @value.setter
            def value(self, v):
                pass

            class Inner:
                pass


        class _Hidden:
            def method(self):
                pass


        if os.name:
            def conditional():
                pass
        else:
            def other():
                """Documented."""


        def outer():
            """Its helper is not public."""
            def helper():
                pass
            return helper


        def empty_docstring():
            """ """
    ''')
    path = tmp_path / "sample.py"
    path.write_text(source)
    found = undocumented(path.read_text(), "sample.py")
    lines = source.splitlines()
    names = [entry.split(" ", 1)[1] for entry in found]
    assert names == ["undocumented_function", "Public.method_without", "Public.Inner", "conditional",
                     "empty_docstring"]
    for entry in found:   # each line number points at the definition it names
        where, name = entry.split(" ")
        line = int(where.split(":")[1])
        assert lines[line - 1].lstrip().startswith(("def " + name.split(".")[-1], "class " + name.split(".")[-1]))
    assert "join" not in names and "os" not in names   # imports are not definitions
