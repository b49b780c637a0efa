"""Input specifications for export (``tvm.relax.frontend.nn.spec``).

``spec = {"forward": {"x": Tensor(["batch_size", 4096], "float16")}}``: per method, an ordered
mapping of argument name to an ArgSpec (``Tensor``, ``Int``, ``Tuple``, ``Object``). A string
dim is a symbolic int64 dim; the same string inside one function is one variable.
``MethodSpec`` carries ``param_mode`` ("plain": parameters become function inputs after the
user inputs; "packed": one tuple input ``packed_params``; "none": no parameters) and
``effect_mode`` ("plain": effects are inputs/outputs; "none").
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence

from ..ir import expr as E
from ..ir.struct_info import DTYPES

__all__ = ["Tensor", "Int", "Tuple", "Object", "MethodSpec", "ModuleSpec", "ArgSpecType"]


class Tensor:
    """A tensor argument: ``Tensor(shape, dtype)``; dims are ints, strings or int64 Vars."""

    def __init__(self, shape: Sequence[int | str | E.PrimExpr], dtype: str) -> None:
        if dtype not in DTYPES:
            raise ValueError(f"spec.Tensor: unknown dtype '{dtype}'; valid dtypes: {', '.join(DTYPES)}")
        if isinstance(shape, (str, int)):
            raise TypeError(f"spec.Tensor: shape must be a sequence of dims, got {shape!r}")
        for d in shape:
            if isinstance(d, bool) or not isinstance(d, (int, str, E.PrimExpr)):
                raise TypeError(f"spec.Tensor: invalid dim {d!r} in shape {list(shape)}")
            if isinstance(d, int) and d < 0:
                raise ValueError(f"spec.Tensor: negative dim {d} in shape {list(shape)}")
        self.shape = list(shape)
        self.dtype = dtype

    def __repr__(self) -> str:
        return f'spec.Tensor({self.shape}, "{self.dtype}")'


class Int:
    """A scalar int64 argument (``R.Prim("int64")``)."""

    def __repr__(self) -> str:
        return "spec.Int"


class Object:
    """An opaque object argument (``R.Object``)."""

    def __init__(self, object_type: type | None = None) -> None:
        self.object_type = object_type

    def __repr__(self) -> str:
        return "spec.Object"


class Tuple:
    """A tuple argument: ``Tuple(name, [spec, ...])``."""

    def __init__(self, name: str, elements: Sequence["ArgSpecType"]) -> None:
        self.name = name
        self.elements = list(elements)

    def __repr__(self) -> str:
        return f"spec.Tuple({self.name}, {self.elements})"


ArgSpecType = Tensor | Int | Object | Tuple


def _to_arg(value: Any) -> ArgSpecType:
    if isinstance(value, (Tensor, Int, Object, Tuple)):
        return value
    if value is int:
        return Int()
    raise TypeError(f"invalid argument spec {value!r}: expected nn.spec.Tensor, Int, Tuple or Object")


class MethodSpec:
    """The spec of one exported method: argument names and specs, and parameter/effect modes."""

    def __init__(self, method: Callable, arg_names: list[str], arg_specs: list[ArgSpecType],
                 param_mode: str = "plain", effect_mode: str = "plain") -> None:
        if param_mode not in ("plain", "packed", "none"):
            raise ValueError(f"param_mode must be 'plain', 'packed' or 'none', got {param_mode!r}")
        if effect_mode not in ("plain", "none"):
            raise ValueError(f"effect_mode must be 'plain' or 'none', got {effect_mode!r}")
        self.method = method
        self.arg_names = arg_names
        self.arg_specs = arg_specs
        self.param_mode = param_mode
        self.effect_mode = effect_mode

    @staticmethod
    def from_raw(spec: Any, method: Callable) -> "MethodSpec":
        """From ``{"x": Tensor(...), "$": {"param_mode": ..., "effect_mode": ...}}``.

        The argument names must be the method's parameters (ValueError lists both otherwise).
        """
        if isinstance(spec, MethodSpec):
            return spec
        if not isinstance(spec, dict):
            raise TypeError(f"a method spec must be a dict of argument specs, got {type(spec).__name__}")
        config = dict(spec.get("$", {}))
        args = {k: v for k, v in spec.items() if k != "$"}
        try:
            sig = inspect.signature(method)
            names = [p.name for p in sig.parameters.values()
                     if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            has_var = any(p.kind == p.VAR_POSITIONAL for p in sig.parameters.values())
        except (TypeError, ValueError):
            names, has_var = list(args), True
        if not has_var and names != list(args)[: len(names)] and set(args) != set(names):
            raise ValueError(f"spec arguments {list(args)} do not match the parameters {names} of "
                             f"{getattr(method, '__qualname__', method)}")
        return MethodSpec(method, list(args), [_to_arg(v) for v in args.values()],
                          param_mode=config.get("param_mode", "plain"),
                          effect_mode=config.get("effect_mode", "plain"))


class ModuleSpec:
    """Specs of every exported method of a module: ``method_names``, ``method_specs``."""

    def __init__(self, module: Any, method_names: list[str], method_specs: list[MethodSpec]) -> None:
        self.module = module
        self.method_names = method_names
        self.method_specs = method_specs

    @staticmethod
    def from_raw(spec: Any, module: Any) -> "ModuleSpec":
        """From ``{"forward": {...}, ...}``. Raises ValueError for a method the module lacks."""
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
