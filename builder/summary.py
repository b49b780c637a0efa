"""What ``build`` shows about a model: its functions (inputs and output shapes), its module tree, a
parameter table, the kernels' fallbacks in words (:func:`kernel_notes`), and the functional ops recipes may
call (``build --list-ops``: :func:`ops_rows`), and the summary as data (``build --json``:
:func:`model_summary`). The renderables are rich's; user text (names from recipes) is never read as markup.

Repeated layers (``repeat: N``) are shown once: the tree names the copies' type and count and expands the
first copy; the parameter table folds ``layers.0.*`` ... ``layers.31.*`` into one row ``layers.{0..31}.*``
with the count.
"""
from __future__ import annotations

import inspect
import math
import re
from typing import Any, Callable

from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from schemas.errors import printable

from . import nn

__all__ = ["function_table", "module_tree", "param_table", "ops_rows", "plain_doc", "model_summary",
           "describe_input", "describe_struct_info", "format_bytes", "kernel_notes"]


def describe_input(spec: Any) -> str:
    """One function input as text: ``[batch, seq] int64``, ``int`` or ``kv_cache``."""
    if isinstance(spec, nn.spec.Int):
        return "int"
    if isinstance(spec, nn.spec.Object):
        return "kv_cache"
    return f"[{', '.join(map(str, spec.shape))}] {spec.dtype}"


def describe_struct_info(sinfo: Any) -> str:
    """A function's result as text: ``(batch, seq, 384) float32``; tuples in parentheses."""
    fields = getattr(sinfo, "fields", None)
    if fields is not None:
        return "(" + ", ".join(describe_struct_info(f) for f in fields) + ")"
    shape = getattr(sinfo, "shape", None)
    dtype = getattr(sinfo, "dtype", None)
    if dtype is None:
        return type(sinfo).__name__.replace("StructInfo", "")
    dims = "?" if shape is None else ", ".join(map(str, shape))
    return f"({dims}) {dtype}"


def function_table(title: str, spec: dict, ir=None) -> Table:
    """Functions with their inputs and (from the exported IR ``ir``, when given) output shapes."""
    table = Table(title=Text(printable(title)), show_header=True, header_style="bold")
    table.add_column("function")
    table.add_column("inputs")
    if ir is not None:
        table.add_column("output")
    for fname, inputs in spec.items():
        row = [Text(fname), Text(printable(", ".join(f"{n}: {describe_input(s)}" for n, s in inputs.items())))]
        if ir is not None:
            func = ir.functions.get(fname)
            row.append(Text(describe_struct_info(func.ret_struct_info) if func is not None else ""))
        table.add_row(*row)
    return table


def module_tree(module: nn.Module, title: str) -> Tree:
    """The module tree, as ``print(model)`` in PyTorch: each child with its type and its own settings;
    a repeated layer once, as ``name: ModuleList x N of Type`` with its first copy expanded."""
    tree = Tree(Text(printable(title), style="bold"))

    def add(node: Tree, mod: nn.Module) -> None:
        for name, child in _children(mod):
            if isinstance(child, nn.ModuleList):
                first = child[0] if len(child) else None
                label = f"{name}: ModuleList x {len(child)}" + (f" of {_type_name(first)}" if first is not None else "")
                branch = node.add(Text(printable(label)))
                if first is not None:
                    add(branch.add(Text(f"[0] {_type_name(first)}{_settings(first)}")), first)
            elif isinstance(child, nn.Parameter):   # a recipe's Parameter layer
                node.add(Text(printable(f"{name}: Parameter(shape={tuple(child.shape)}, dtype={child.dtype})")))
            else:
                add(node.add(Text(printable(f"{name}: {_type_name(child)}{_settings(child)}"))), child)

    add(tree, module)
    return tree


def param_table(param_specs: list[tuple[str, tuple, str]], title: str = "parameters") -> Table:
    """Parameters (name, shape, dtype) with copies of repeated layers folded into one row each
    (``layers.{0..31}.mlp.up_proj.weight`` x 32) and the total bytes per row."""
    from core.dtypes import numpy_dtype

    rows: dict[tuple[str, tuple, str], list[int]] = {}
    order: list[tuple[str, tuple, str]] = []
    for name, shape, dtype in param_specs:
        m = _INDEX.search(name)
        key = (_INDEX.sub(".{i}.", name, count=1) if m else name, tuple(shape), dtype)
        if key not in rows:
            rows[key] = []
            order.append(key)
        if m:
            rows[key].append(int(m.group(1)))
    table = Table(title=title, show_header=True, header_style="bold")
    for col, justify in (("name", "left"), ("shape", "left"), ("dtype", "left"), ("count", "right"),
                         ("bytes", "right")):
        table.add_column(col, justify=justify, overflow="fold")
    for key in order:
        pattern, shape, dtype = key
        idx = rows[key]
        count = max(len(idx), 1)
        name = pattern.replace("{i}", f"{{{min(idx)}..{max(idx)}}}") if idx else pattern
        nbytes = math.prod(shape) * numpy_dtype(dtype).itemsize * count
        table.add_row(Text(printable(name)), str(tuple(shape)), dtype, str(count), format_bytes(nbytes))
    return table


def ops_rows(functions: dict[str, Callable]) -> list[tuple[str, str, str]]:
    """``build --list-ops``' data: ``(name, signature, what it does)`` for every function a recipe's
    ``forward:`` may call, sorted by name; the signature as a recipe writes it (``(x, axis=-1)``), the
    first sentence of its docstring as plain text (:func:`plain_doc`)."""
    return [(name, _plain_signature(functions[name]), plain_doc(nn.op.recipe_summary(functions[name])))
            for name in sorted(functions)]


_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`~?([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")


def plain_doc(text: str) -> str:
    """Docstring text as a reader sees it: reST roles (``:func:`builder.te.topi.pool```) become their
    target (``~`` targets their last name), inline literals (````x````) their text; everything else is kept."""
    text = _ROLE.sub(lambda m: m.group(1).rsplit(".", 1)[-1] if m.group(0).split("`")[1].startswith("~")
                     else m.group(1), text)
    return _LITERAL.sub(r"\1", text)


def model_summary(model: Any, origin: str = "", kinds: str = "", version: str = "") -> dict:
    """``build --json``: what the text report says about a built model, as data (JSON-able): ``name``,
    ``functions`` (name -> ``inputs`` {name: ``[batch, 8] float32`` / ``int`` / ``kv_cache``} and
    ``output`` ``(batch, 4) float32``), ``params`` (``count``, ``elements``, ``bytes``, ``source_bytes``,
    ``origin``, ``tensors``: [{name, shape, dtype}] in function-signature order), ``quantization``,
    ``matmul_precision``, ``timings_ms`` (export, weights, compile), ``kernels`` (``count``, ``kinds``, the
    ``target`` CPU, ``notes``: :func:`kernel_notes`) and the builder ``version``. ``model`` is a
    :class:`builder.build_model.CompiledModel`."""
    functions = {}
    for fname, inputs in model.spec.items():
        func = model.ir.functions.get(fname)
        functions[fname] = {"inputs": {n: describe_input(s) for n, s in inputs.items()},
                            "output": describe_struct_info(func.ret_struct_info) if func is not None else None}
    exe = model.exe
    return {"version": version, "name": model.recipe.name, "functions": functions,
            "params": {"count": len(model.param_specs), "elements": model.num_params, "bytes": model.param_bytes,
                       "source_bytes": model.source_param_bytes, "origin": origin,
                       "tensors": [{"name": n, "shape": list(shape), "dtype": d} for n, shape, d in model.param_specs]},
            "quantization": model.quantization, "matmul_precision": model.recipe.matmul_precision,
            "timings_ms": {k: v * 1e3 for k, v in model.timings.items()},
            "kernels": {"count": len(exe.kernels), "kinds": kinds, "target": exe.target.get("cpu", "host"),
                        "notes": kernel_notes(exe.kernels)}}


_INDEX = re.compile(r"\.(\d+)\.")


def _plain_signature(fn: Callable) -> str:
    """``(x, axis=-1)``: the parameters as a recipe writes them (no annotations, no ``name`` hint)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return "(...)"
    parts = []
    for p in params:
        if p.name == "name":
            continue
        prefix = "*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD else ""
        parts.append(prefix + p.name + ("" if p.default is p.empty else f"={p.default!r}"))
    return "(" + ", ".join(parts) + ")"


def _children(mod: nn.Module) -> list[tuple[str, nn.Module | nn.Parameter]]:
    """The child modules of ``mod`` and, of a recipe block (or the model), its ``Parameter`` layers' tensors."""
    items = mod.__dict__.items() if not isinstance(mod, nn.ModuleList) else enumerate(mod)
    block = "_recipe_block" in mod.__dict__
    return [(str(k), v) for k, v in items if isinstance(v, nn.Module) or (block and isinstance(v, nn.Parameter))]


def _type_name(mod: Any) -> str:
    block = getattr(mod, "__dict__", {}).get("_recipe_block")
    return block[0] if block else type(mod).__name__


_SETTINGS = ("in_features", "out_features", "num", "dim", "normalized_shape", "hidden_size", "num_heads",
             "num_kv_heads", "head_dim", "in_channels", "out_channels", "kernel_size", "stride", "num_groups",
             "num_channels", "eps", "epsilon", "rope_theta", "causal")


def _settings(mod: Any) -> str:
    found = [f"{k}={mod.__dict__[k]}" for k in _SETTINGS
             if k in getattr(mod, "__dict__", {}) and isinstance(mod.__dict__[k], (int, float, str, bool))
             and mod.__dict__[k] is not None]
    return f"({', '.join(found)})" if found else ""


def format_bytes(n: float) -> str:
    """``1.5 MiB``: bytes in binary units, one decimal."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def kernel_notes(kernels: dict[str, dict]) -> list[str]:
    """The fallbacks of an executable's kernels in words, one line each with how many kernels took it:
    ``kernels`` is :attr:`runtime.Executable.kernels` (name -> metadata), whose ``"notes"`` (a list of
    strings, set by the kernels' planner: :func:`builder.codegen.kernels.linear.plan._fallback_notes`, e.g.
    ``matmul_precision=high`` without AMX tiles computing in float32) are gathered in first-seen order.
    Metadata without notes, or with a malformed ``"notes"`` (an executable from elsewhere), adds nothing."""
    counts: dict[str, int] = {}
    for meta in kernels.values():
        notes = meta.get("notes") if isinstance(meta, dict) else None
        for note in notes if isinstance(notes, list) else ():
            if isinstance(note, str):
                counts[note] = counts.get(note, 0) + 1
    return [f"note: {note} ({n} kernel{'s' if n > 1 else ''})" for note, n in counts.items()]
