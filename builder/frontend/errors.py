"""The errors of the PyTorch importers, naming the node, its op / target and the source line it comes from.
"""
from __future__ import annotations

import re


class FrontendError(ValueError):
    """A node could not be translated (bad arguments, shapes the op rejects, an input missing)."""


class UnsupportedNodeError(FrontendError, NotImplementedError):
    """A node whose op / target / module has no translation (a NotImplementedError too)."""


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)')


def node_location(node) -> str:
    """Where a torch.fx node comes from: the last frame outside torch of its stack trace
    (``node.stack_trace`` or ``node.meta["stack_trace"]``) as ``file:line in fn: code``, or "" when fx
    recorded none."""
    trace = getattr(node, "stack_trace", None) or getattr(node, "meta", {}).get("stack_trace") or ""
    frames = _FRAME.findall(trace)
    own = [f for f in frames if not re.search(r"[/\\]torch[/\\]|<eval_with_key>", f[0])]
    frames = own or frames       # the model's frames, not torch's tracing machinery
    if not frames:
        return ""
    path, line, fn, code = frames[-1]
    return f"{path}:{line} in {fn}: {code.strip()}"


FX_TRACE_HINT = ("pass the nn.Module itself, or trace with torch.fx.Tracer(record_stack_traces=True)")


def describe_node(node, what: str | None = None, hint: str = "") -> str:
    """``node 'name' (call_function aten.add.Tensor) at file:line in fn: code``; without a recorded
    source line, ``(no source line recorded[: hint])``."""
    target = what if what is not None else target_name(node.target)
    loc = node_location(node)
    return f"node '{node.name}' ({node.op} {target})" + (
        f" at {loc}" if loc else " (no source line recorded" + (f": {hint})" if hint else ")"))


def target_name(target) -> str:
    """How a node's target is named in messages: a string as it is, a Python function or class by ``module.qualname``,
    an ATen op (``aten.add.Tensor``) by its own text."""
    if isinstance(target, str):
        return target
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    mod = getattr(target, "__module__", None)
    if name and mod and not str(target).startswith("aten."):
        return f"{mod}.{name}"
    return str(target)
