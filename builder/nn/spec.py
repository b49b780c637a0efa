"""Input specifications for export (``tvm.relax.frontend.nn.spec``).

``spec = {"forward": {"x": Tensor(["batch_size", 4096], "float16")}}``: per method, a mapping
of argument name to an ArgSpec:

- ``Tensor(shape, dtype)``: a tensor; a string dim is a symbolic int64 dim (the same string
  inside one function is one variable), a ``Var`` keeps its identity;
- ``Int()`` (also written ``int`` or ``"int"``): a symbolic int64 scalar, passed to the
  method as a ``Var`` and to the function as ``R.Shape(["name"])``;
- ``Object(object_type)``: an opaque object (``R.Object``);
- ``Tuple(name, elements)`` (also written as a Python list or tuple of specs): a tuple input,
  handed to the method as a list / tuple of the converted elements.

The optional key ``"$"`` configures the method: ``{"param_mode": ..., "effect_mode": ...}``.
``param_mode``: ``"plain"`` (each parameter is a function input after the effects),
``"packed"`` (one tuple input ``packed_params``), ``"none"`` (no parameter inputs; the method
must not read parameters). ``effect_mode``: ``"plain"`` (each effect is an input and the
function returns ``(result, (effects...))``), ``"packed"`` (one tuple input
``packed_effects``), ``"none"`` (effects are neither inputs nor outputs).
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence

from ..ir import expr as E
from ..ir.struct_info import DTYPES
from .core import Object as _CoreObject

__all__ = ["Tensor", "Int", "Tuple", "Object", "MethodSpec", "ModuleSpec", "ArgSpecType"]

PARAM_MODES = ("plain", "packed", "none")
EFFECT_MODES = ("plain", "packed", "none")


class Tensor:
    """A tensor argument: ``Tensor(shape, dtype)``; dims are ints, strings or int64 Vars.

    Raises ValueError for an unknown dtype or a negative dim, TypeError for an invalid shape.
    """

    def __init__(self, shape: Sequence[int | str | E.PrimExpr], dtype: str) -> None:
        if dtype not in DTYPES:
            raise ValueError(f"spec.Tensor: unknown dtype '{dtype}'; valid dtypes: {', '.join(DTYPES)}")
        if isinstance(shape, (str, int)) or not isinstance(shape, Sequence):
            raise TypeError(f"spec.Tensor: shape must be a sequence of dims, got {shape!r}")
        for d in shape:
            if isinstance(d, bool) or not isinstance(d, (int, str, E.PrimExpr)):
                raise TypeError(f"spec.Tensor: invalid dim {d!r} in shape {list(shape)}")
            if isinstance(d, int) and d < 0:
                raise ValueError(f"spec.Tensor: negative dim {d} in shape {list(shape)}")
        self.shape = list(shape)
        self.dtype = dtype

    def __repr__(self) -> str:
        return f"Tensor([{', '.join(str(d) for d in self.shape)}], '{self.dtype}')"


class Int:
    """A scalar int64 argument: the method receives a symbolic ``Var`` named after the
    argument; the function takes ``R.Shape(["name"])``."""

    def __repr__(self) -> str:
        return "int"


class Object:
    """An opaque object argument (``R.Object``); the method receives ``object_type(...)``
    (default: ``nn.Object``)."""

    def __init__(self, object_type: type | None = None) -> None:
        if object_type is None:
            object_type = _CoreObject
        self.object_type = object_type

    def __repr__(self) -> str:
        return "object"


class Tuple:
    """A tuple argument: ``Tuple(name, [spec, ...])``; ``elements`` keeps its container type
    (list or tuple), which is what the method receives. Raises TypeError for other containers."""

    def __init__(self, name: str, elements: Sequence["ArgSpecType"]) -> None:
        if not isinstance(elements, (list, tuple)):
            raise TypeError(f"spec.Tuple: elements must be a list or tuple, got {type(elements).__name__}")
        self.name = name
        self.elements = elements

    def __repr__(self) -> str:
        return repr(self.elements)


ArgSpecType = Tensor | Int | Object | Tuple


def _to_arg(value: Any, name: str) -> ArgSpecType:
    if value is Int or value is int or (isinstance(value, str) and value == "int"):
        return Int()
    if isinstance(value, (Tensor, Int, Object)):
        return value
    if isinstance(value, Tuple):
        return Tuple(name, type(value.elements)(_to_arg(v, f"{name}_{i}") for i, v in enumerate(value.elements)))
    if isinstance(value, (list, tuple)):
        return Tuple(name, type(value)(_to_arg(v, f"{name}_{i}") for i, v in enumerate(value)))
    raise TypeError(f"Invalid spec for argument {name}: {value!r} (expected nn.spec.Tensor, Int, Object, "
                    "Tuple, or a list / tuple of them)")


class MethodSpec:
    """The spec of one exported method: ``arg_names``, ``arg_specs``, ``param_mode`` and
    ``effect_mode`` (see the module docstring). Raises ValueError for an unknown mode."""

    def __init__(self, method: Callable, arg_names: list[str], arg_specs: list[ArgSpecType],
                 param_mode: str = "plain", effect_mode: str = "plain") -> None:
        if param_mode not in PARAM_MODES:
            raise ValueError(f"Invalid param_mode: {param_mode!r} (expected one of {', '.join(PARAM_MODES)})")
        if effect_mode not in EFFECT_MODES:
            raise ValueError(f"Invalid effect_mode: {effect_mode!r} (expected one of {', '.join(EFFECT_MODES)})")
        if len(arg_names) != len(arg_specs):
            raise ValueError(f"{len(arg_names)} argument names {arg_names} but {len(arg_specs)} specs")
        self.method = method
        self.arg_names = list(arg_names)
        self.arg_specs = list(arg_specs)
        self.param_mode = param_mode
        self.effect_mode = effect_mode

    def _repr(self, name: str) -> str:
        args = ", ".join(f"{n}: {s}" for n, s in zip(self.arg_names, self.arg_specs))
        return f"{name}({args})"

    def __repr__(self) -> str:
        return self._repr("MethodSpec")

    @staticmethod
    def from_raw(spec: Any, method: Callable) -> "MethodSpec":
        """From ``{"x": Tensor(...), "n": int, "$": {"param_mode": ..., "effect_mode": ...}}``.

        Arguments are ordered as in the method's signature. Raises ValueError when a spec key
        is not a parameter of the method, or a parameter without a default has no spec (both
        sides named); TypeError for a spec that is not a dict or an invalid argument spec.
        The caller's dict is not modified.
        """
        if isinstance(spec, MethodSpec):
            return spec
        if not isinstance(spec, dict):
            raise TypeError(f"a method spec must be a dict of argument specs, got {type(spec).__name__}")
        config = dict(spec.get("$", {}))
        unknown = set(config) - {"param_mode", "effect_mode"}
        if unknown:
            raise ValueError(f"unknown method spec options {sorted(unknown)}; valid: param_mode, effect_mode")
        args = {k: v for k, v in spec.items() if k != "$"}
        qualname = getattr(method, "__qualname__", repr(method))
        try:
            sig = inspect.signature(method).parameters.values()
        except (TypeError, ValueError):
            sig = None
        params = None if sig is None else [
            p for p in sig if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if params is None or any(p.kind == p.VAR_POSITIONAL for p in sig):
            # no signature, or ``*args``: the spec's own order
            names = list(args)
        else:
            names = [p.name for p in params if p.name in args]
            extra = [k for k in args if k not in names]
            missing = [p.name for p in params if p.name not in args and p.default is p.empty]
            if extra or missing:
                raise ValueError(f"spec arguments {list(args)} do not match the parameters "
                                 f"{[p.name for p in params]} of {qualname}"
                                 + (f" (not parameters: {extra})" if extra else "")
                                 + (f" (no spec: {missing})" if missing else ""))
        return MethodSpec(method, names, [_to_arg(args[n], n) for n in names],
                          param_mode=config.get("param_mode", "plain"),
                          effect_mode=config.get("effect_mode", "plain"))


class ModuleSpec:
    """Specs of every exported method of a module: ``module``, ``method_names``,
    ``method_specs``."""

    def __init__(self, module: Any, method_names: list[str], method_specs: list[MethodSpec]) -> None:
        self.module = module
        self.method_names = list(method_names)
        self.method_specs = list(method_specs)

    def __repr__(self) -> str:
        return "ModuleSpec:\n" + "\n".join(
            "  " + s._repr(n) for n, s in zip(self.method_names, self.method_specs))

    @staticmethod
    def from_raw(spec: Any, module: Any) -> "ModuleSpec":
        """From ``{"forward": {...}, ...}`` (values may also be MethodSpecs).

        Raises ValueError for a method the module lacks, TypeError for a spec that is not a
        non-empty dict.
        """
        if isinstance(spec, ModuleSpec):
            return spec
        if not isinstance(spec, dict) or not spec:
            raise TypeError("a module spec must be a non-empty dict: method name -> argument specs")
        names, specs = [], []
        for name, method_spec in spec.items():
            method = getattr(module, name, None)
            if method is None or not callable(method):
                raise ValueError(f"module {type(module).__name__} has no method '{name}' to export")
            names.append(name)
            specs.append(MethodSpec.from_raw(method_spec, method))
        return ModuleSpec(module, names, specs)
