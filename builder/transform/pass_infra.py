"""Passes as named objects, run in sequence with instruments (TVM's ``tvm.ir.transform``).

- :class:`Pass`: ``pass_(mod) -> mod`` with a ``name``; :class:`FunctionPass` rewrites each
  graph-level function with a shared :class:`~builder.ir.BlockBuilder` (new loop-level functions go
  into the output module), which is the driver every Relax rewrite uses;
- :class:`Sequential`: passes in order; each run is wrapped by the instruments of the current
  :class:`PassContext`;
- instruments (:class:`PassInstrument`): :class:`VerifyAfter` (the IR verifier after every pass),
  :class:`PassTiming` (seconds per pass), :class:`PrintAfter` (the IR after the named passes, as
  LLVM's ``-print-after`` / TVM's ``PrintAfterAll``).

Example::

    with PassContext(instruments=[PassTiming(), PrintAfter(["fuse_ops"])]):
        mod = default_pipeline()(mod)
"""
from __future__ import annotations

import abc
import contextlib
import time
from typing import Callable, Iterator, Sequence

from ..ir import relax as rx
from ..ir.block_builder import BlockBuilder

__all__ = ["Pass", "FunctionPass", "Sequential", "PassContext", "PassInstrument", "VerifyAfter", "PassTiming",
           "PrintAfter"]


class Pass(abc.ABC):
    """A named transformation of an IRModule. Subclasses set ``name`` and implement
    :meth:`transform_module`; calling the pass runs it under the current :class:`PassContext`."""

    name = "pass"

    @abc.abstractmethod
    def transform_module(self, mod: rx.IRModule) -> rx.IRModule:
        """The transformed module (the input may be reused, not modified in place)."""

    def __call__(self, mod: rx.IRModule) -> rx.IRModule:
        ctx = PassContext.current()
        for inst in ctx.instruments:
            inst.run_before_pass(mod, self)
        out = self.transform_module(mod)
        for inst in ctx.instruments:
            inst.run_after_pass(out, self)
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"


class FunctionPass(Pass):
    """A pass that rewrites every graph-level function: :meth:`transform_function` gets a
    BlockBuilder over the output module (loop-level functions of the input are copied into it
    first, and new ones a rewrite adds land there) and returns the new function."""

    @abc.abstractmethod
    def transform_function(self, bb: BlockBuilder, func: rx.Function, name: str) -> rx.Function:
        """The rewritten graph-level function ``name``."""

    def transform_module(self, mod: rx.IRModule) -> rx.IRModule:
        """A new module: the input's loop-level functions copied into it first, then each graph-level
        function replaced by :meth:`transform_function` (one shared BlockBuilder, so the PrimFuncs a rewrite
        adds land in the output, under fresh names)."""
        out = rx.IRModule({}, mod.attrs)
        bb = BlockBuilder(out)
        for name, func in mod.functions.items():
            if not isinstance(func, rx.Function):
                bb.add_func(func, name)
        for name, func in mod.functions.items():
            if isinstance(func, rx.Function):
                out[name] = self.transform_function(bb, func, name)
        return out


class Sequential(Pass):
    """``passes`` in order (TVM's ``tvm.transform.Sequential``); ``names`` lists them."""

    name = "sequential"

    def __init__(self, passes: Sequence[Pass], name: str = "sequential") -> None:
        self.passes = list(passes)
        self.name = name

    @property
    def names(self) -> list[str]:
        """The names of the passes, in order (nested sequences flattened)."""
        out = []
        for p in self.passes:
            out.extend(p.names if isinstance(p, Sequential) else [p.name])
        return out

    def transform_module(self, mod: rx.IRModule) -> rx.IRModule:
        """``mod`` run through each pass in order, each under the current :class:`PassContext`'s
        instruments."""
        for p in self.passes:
            mod = p(mod)
        return mod


class PassInstrument:
    """Hooks around every pass that runs in a :class:`PassContext`."""

    def run_before_pass(self, mod: rx.IRModule, pass_: Pass) -> None:
        """Called with the input module before ``pass_`` runs."""

    def run_after_pass(self, mod: rx.IRModule, pass_: Pass) -> None:
        """Called with the output module after ``pass_`` ran."""


class VerifyAfter(PassInstrument):
    """Runs the IR verifier after every pass (:func:`builder.ir.verify`, graph level; with
    ``loop_level=True`` also :func:`builder.ir.tir.verify` on every PrimFunc); raises its error
    naming the pass."""

    def __init__(self, loop_level: bool = False) -> None:
        self.loop_level = loop_level

    def run_after_pass(self, mod: rx.IRModule, pass_: Pass) -> None:
        """Verify ``mod`` after ``pass_`` (a :class:`Sequential` is skipped: its passes were verified one by
        one). Raises the verifier's error (:class:`builder.ir.verifier.IRVerifyError`, or
        ``tir.VerifyError`` with ``loop_level``) with ``after pass <name>:`` in front."""
        if isinstance(pass_, Sequential):
            return
        from ..ir import tir
        from ..ir.verifier import IRVerifyError, verify

        try:
            verify(mod)
            for func in mod.functions.values() if self.loop_level else ():
                if isinstance(func, tir.PrimFunc):
                    tir.verify(func)
        except (IRVerifyError, tir.VerifyError) as err:
            raise type(err)(f"after pass {pass_.name}: {err}") from None


class PassTiming(PassInstrument):
    """Seconds each pass took, in ``timings`` (name -> seconds, summed over runs)."""

    def __init__(self) -> None:
        self.timings: dict[str, float] = {}
        self._start: list[float] = []

    def run_before_pass(self, mod: rx.IRModule, pass_: Pass) -> None:
        """Start the clock of ``pass_`` (a stack, so nested :class:`Sequential` runs time correctly)."""
        self._start.append(time.perf_counter())

    def run_after_pass(self, mod: rx.IRModule, pass_: Pass) -> None:
        """Add the wall-clock seconds (``time.perf_counter``) ``pass_`` took to ``timings[pass_.name]``
        (a :class:`Sequential`'s own time is not recorded: its passes are)."""
        elapsed = time.perf_counter() - self._start.pop()
        if not isinstance(pass_, Sequential):
            self.timings[pass_.name] = self.timings.get(pass_.name, 0.0) + elapsed


class PrintAfter(PassInstrument):
    """Calls ``show(mod, name)`` after each pass named in ``names`` (default: prints the IR with a
    ``# after <name>`` header)."""

    def __init__(self, names: Sequence[str], show: Callable[[rx.IRModule, str], None] | None = None) -> None:
        self.names = set(names)
        self.show = show or (lambda mod, name: print(f"# after {name}\n{mod.script()}"))

    def run_after_pass(self, mod: rx.IRModule, pass_: Pass) -> None:
        """Call ``show(mod, pass_.name)`` when ``pass_`` is one of the named passes."""
        if pass_.name in self.names:
            self.show(mod, pass_.name)


class PassContext:
    """The instruments passes run under (TVM's ``PassContext``); ``with PassContext(instruments=[...]):``
    makes it current. Outside any ``with``, passes run with no instruments."""

    _stack: list["PassContext"] = []

    def __init__(self, instruments: Sequence[PassInstrument] = ()) -> None:
        self.instruments = list(instruments)

    @classmethod
    def current(cls) -> "PassContext":
        """The innermost active context (an empty one when none is active)."""
        return cls._stack[-1] if cls._stack else _EMPTY

    def __enter__(self) -> "PassContext":
        PassContext._stack.append(self)
        return self

    def __exit__(self, *exc) -> None:
        PassContext._stack.pop()

    @contextlib.contextmanager
    def adding(self, instruments: Sequence[PassInstrument]) -> Iterator["PassContext"]:
        """A context with this one's instruments plus ``instruments``."""
        with PassContext([*self.instruments, *instruments]) as ctx:
            yield ctx


_EMPTY = PassContext()
