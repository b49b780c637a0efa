"""Core of the frontend, shaped like ``tvm.relax.frontend.nn.core``.

- :class:`Tensor` wraps a graph-level expression whose struct info is a TensorStructInfo; shape
  and dtype are known eagerly. Tensors are symbolic: they hold no values.
- :class:`Parameter` is a Tensor that may be bound to concrete data (a numpy array).
- :class:`Module` is a tree of Parameters and sub-Modules held in plain attributes.
- :class:`Effect` models side effects (IO, KV caches) as implicit function inputs and outputs.
"""
from __future__ import annotations

import abc
from collections import OrderedDict
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ..ir import expr as E
from ..ir import relax as rx
from ..ir.block_builder import BlockBuilder
from ..ir.struct_info import DTYPES, ObjectStructInfo, TensorStructInfo, TupleStructInfo
from ._tensor_op import _TensorOp

__all__ = [
    "Tensor", "Parameter", "Object", "Effect", "Module", "ModuleList", "ModuleDict",
    "get_default_dtype", "set_default_dtype", "wrap_nested", "StrDimVar",
]

_DEFAULT_DTYPE = "float32"


def get_default_dtype() -> str:
    """The dtype of Parameters created without one (initially ``float32``)."""
    return _DEFAULT_DTYPE


def set_default_dtype(dtype: str) -> None:
    """Set the default Parameter dtype. Raises ValueError for an unknown dtype."""
    global _DEFAULT_DTYPE
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype '{dtype}'; valid dtypes: {', '.join(DTYPES)}")
    _DEFAULT_DTYPE = dtype


class StrDimVar(E.Var):
    """A symbolic dim created from a string (``"batch_size"``).

    Within one exported function, all string dims with the same name are one variable (Python
    strings have value equality); ``Var`` objects made by the user keep their identity.
    """

    __slots__ = ()


def _to_dim(d) -> int | E.PrimExpr:
    if isinstance(d, str):
        if not d.isidentifier():
            raise ValueError(f"a symbolic dim name must be an identifier, got {d!r}")
        return StrDimVar(d, "int64")
    if isinstance(d, bool):
        raise TypeError(f"invalid shape dim {d!r}")
    if isinstance(d, (int, np.integer)):
        if d < 0:
            raise ValueError(f"a shape dim must be >= 0, got {d}")
        return int(d)
    if isinstance(d, E.IntImm):
        return d.value
    if isinstance(d, E.PrimExpr):
        if d.dtype != "int64":
            raise TypeError(f"a symbolic dim must be int64, got {d.dtype} ({d})")
        return d
    raise TypeError(f"invalid shape dim {d!r} of type {type(d).__name__}")


class Tensor(_TensorOp):
    """A symbolic tensor: a graph-level expression with TensorStructInfo.

    ``shape`` is a list of ``int`` (static dims) and int64 ``PrimExpr`` (symbolic dims),
    ``ndim`` and ``dtype`` as in TVM. Never constructed directly by users.
    """

    def __init__(self, *, _expr: rx.Expr) -> None:
        sinfo = _expr.struct_info
        if not isinstance(sinfo, TensorStructInfo) or sinfo.shape is None:
            raise TypeError(f"a Tensor needs a tensor expression with a known shape, got {sinfo!r}")
        self._expr = _expr

    @staticmethod
    def from_const(data: Any) -> "Tensor":
        """A constant tensor from numpy-compatible ``data`` (float64 is kept as float64)."""
        return Tensor(_expr=rx.Constant(np.asarray(data)))

    @staticmethod
    def from_scalar(data: int | float, dtype: str) -> "Tensor":
        """A 0-d constant of ``dtype``."""
        return Tensor(_expr=rx.Constant(np.asarray(data), dtype))

    @staticmethod
    def from_struct_info(struct_info: TensorStructInfo, name: str = "tensor") -> "Tensor":
        """A placeholder tensor (an unbound Var) with the given struct info."""
        return Tensor(_expr=rx.Var(name, struct_info))

    @staticmethod
    def placeholder(shape: Sequence[int | str | E.PrimExpr], dtype: str, name: str = "tensor") -> "Tensor":
        """A placeholder tensor; a string dim ``"n"`` becomes an int64 symbolic variable ``n``.

        Raises TypeError / ValueError for invalid dims or dtypes.
        """
        if isinstance(shape, (str, int)):
            raise TypeError(f"Invalid shape: {shape!r} (expected a sequence of dims)")
        dims = [_to_dim(d) for d in shape]
        return Tensor(_expr=rx.Var(name, TensorStructInfo(dims, dtype)))

    @property
    def shape(self) -> list[int | E.PrimExpr]:
        """The shape: ints for static dims, PrimExprs for symbolic ones."""
        return list(self._expr.struct_info.shape)

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return self._expr.struct_info.ndim

    @property
    def dtype(self) -> str:
        """Element dtype, e.g. ``"float16"``."""
        return self._expr.struct_info.dtype

    def __repr__(self) -> str:
        return f'Tensor({[str(d) for d in self.shape] if any(not isinstance(d, int) for d in self.shape) else self.shape}, "{self.dtype}")'


class Parameter(Tensor):
    """A weight: a Tensor that may be bound to concrete data (``param.data = numpy_array``).

    ``Parameter(shape, dtype=None)``: a string dim is a symbolic dim; ``dtype`` defaults to
    :func:`get_default_dtype`. ``attrs`` holds free-form annotations.
    """

    def __init__(self, shape: Sequence[int | str | E.PrimExpr], dtype: str | None = None) -> None:
        if dtype is None:
            dtype = get_default_dtype()
        super().__init__(_expr=Tensor.placeholder(shape, dtype=dtype, name="param")._expr)
        self._data: np.ndarray | None = None
        self.attrs: dict[str, Any] = OrderedDict()

    @property
    def data(self) -> np.ndarray | None:
        """The bound numpy array, or None."""
        return self._data

    @data.setter
    def data(self, data: Any) -> None:
        """Bind ``data`` (numpy array or any DLPack tensor; None unbinds).

        Raises TypeError for other types, ValueError naming both sides on a shape or dtype
        mismatch (symbolic dims accept any size).
        """
        if data is None:
            self._data = None
            return
        if not isinstance(data, np.ndarray):
            if hasattr(data, "__dlpack__"):
                try:
                    data = np.from_dlpack(data)
                except (TypeError, RuntimeError, BufferError):
                    data = np.asarray(data.cpu()) if hasattr(data, "cpu") else np.asarray(data)
            else:
                raise TypeError(f"Unsupported data type: {type(data).__name__} (expected a numpy array "
                                "or a DLPack tensor)")
        expected = self.shape
        if len(data.shape) != len(expected) or any(
            isinstance(e, int) and e != a for e, a in zip(expected, data.shape)
        ):
            raise ValueError(f"Shape mismatch: expected {tuple(str(d) for d in expected) if any(not isinstance(d, int) for d in expected) else tuple(expected)}, got {data.shape}")
        if str(data.dtype) != self.dtype and not (self.dtype == "bfloat16" and data.dtype == np.uint16):
            raise ValueError(f"Dtype mismatch: expected {self.dtype}, got {data.dtype}")
        self._data = data

    def to(self, dtype: str | None = None) -> None:
        """Change the dtype of an unbound parameter. Raises ValueError when data is bound."""
        if dtype is None:
            return
        if self._data is not None:
            raise ValueError(
                "Changing the dtype of a Parameter that has been bound to concrete data is not "
                "supported: it might lose precision silently. Unbind it or convert the data first."
            )
        self._expr = rx.Var("param", TensorStructInfo(self.shape, dtype))


class Object:
    """A non-tensor value (struct info ``R.Object``), e.g. a KV cache handle."""

    def __init__(self, *, _expr: rx.Expr, _name: str) -> None:
        if not isinstance(_expr, rx.Var):
            _expr = BlockBuilder.current().emit(_expr, _name)
        if not isinstance(_expr.struct_info, ObjectStructInfo):
            raise TypeError(f"an Object needs ObjectStructInfo, got {_expr.struct_info!r}")
        self._expr = _expr


class Effect(abc.ABC):
    """A side effect threaded through exported functions as extra inputs and outputs.

    Subclasses implement ``emit_init`` (bindings in ``_initialize_effect``), ``create`` (the
    implicit function inputs), ``set_state`` and ``finalize`` (the implicit outputs).
    """

    @abc.abstractmethod
    def emit_init(self, name_hint: str, builder: BlockBuilder) -> list[rx.DataflowVar]:
        """Emit the initial state; returns its variables."""

    @abc.abstractmethod
    def create(self, name_hint: str) -> list[rx.Var]:
        """The implicit function inputs representing this effect."""

    @abc.abstractmethod
    def set_state(self, state_vars: list[rx.Var]) -> None:
        """Adopt ``state_vars`` as the current state."""

    @abc.abstractmethod
    def finalize(self) -> list[rx.Var]:
        """The state to return from the function."""

    def to(self, dtype: str | None = None) -> None:
        """Convert to ``dtype``; a no-op for most effects."""


class Module:
    """Base class of model components (PyTorch / TVM Relax nn style).

    Sub-modules and parameters are plain attributes; their names follow attribute order.
    """

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Parameter]]:
        """``(dotted_name, Parameter)`` for every parameter in the tree, in attribute order."""
        yield from _attribute_finder(self, prefix, lambda x: isinstance(x, Parameter))

    def parameters(self) -> Iterator[Parameter]:
        """Every Parameter in the tree."""
        for _, param in self.named_parameters():
            yield param

    def state_dict(self, *, prefix: str = "", destination: dict | None = None) -> dict[str, Parameter]:
        """An ordered mapping ``name -> Parameter``."""
        destination = OrderedDict() if destination is None else destination
        for name, param in self.named_parameters(prefix):
            destination[name] = param
        return destination

    def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True) -> tuple[list[str], list[str]]:
        """Bind parameter data from ``state_dict`` (values: Parameters with data, or arrays).

        Returns ``(missing_keys, unexpected_keys)``. With ``strict`` any missing or unexpected
        key raises KeyError listing both; a value without data raises ValueError.
        """
        own = self.state_dict()
        unexpected: list[str] = []
        for key, value in state_dict.items():
            if key not in own:
                unexpected.append(key)
                continue
            data = value.data if isinstance(value, Parameter) else value
            if data is None:
                raise ValueError(f"Parameter {key} is not set to any concrete tensor")
            own.pop(key).data = data
        missing = list(own.keys())
        if strict and (missing or unexpected):
            raise KeyError(f"Missing keys: {missing}, Unexpected keys: {unexpected}")
        return missing, unexpected

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run ``forward``."""
        forward = getattr(self, "forward", None)
        if forward is None:
            raise TypeError(f"Module {type(self).__name__} does not have a `forward` method")
        return forward(*args, **kwargs)

    def to(self, dtype: str | None = None) -> None:
        """Convert all parameters (and effects) to ``dtype`` recursively."""
        for item in list(self.__dict__.values()):
            if isinstance(item, (Module, Parameter, Effect)):
                item.to(dtype)
        if dtype is not None and isinstance(getattr(self, "dtype", None), str):
            self.dtype = dtype

    def export_tvm(self, spec: dict, debug: bool = False, allow_extern: bool = False):
        """Export to an IRModule: returns ``(irmodule, [(name, Parameter), ...])``.

        ``spec`` maps method name -> {input name -> ``nn.spec.Tensor`` / ``Int`` / ...}.
        ``debug=True`` adds the IO effect (``_io``) used by ``print_``. With ``allow_extern``
        a third element (the extern modules, always empty here) is returned.
        """
        from . import spec as _spec
        from .exporter import Exporter

        mod_spec = _spec.ModuleSpec.from_raw(spec, self)
        mod, params = Exporter(debug=debug).build(mod_spec)
        if allow_extern:
            return mod, params, []
        return mod, params

    def jit(self, spec: dict, device: str = "cpu", pipeline: str | None = "default_build",
            out_format: str = "numpy", debug: bool = False):
        """Export, compile to native code and bind the parameters' data.

        Returns a callable object: ``f["forward"](x)`` or ``f.forward(x)`` with numpy arrays.
        Raises ValueError when a parameter has no data bound.
        """
        if device != "cpu":
            raise ValueError(f"device '{device}' is not supported; only 'cpu'")
        from ..compile import JitModule

        mod, params = self.export_tvm(spec, debug=debug)
        return JitModule(mod, params)


class ModuleList(Module):
    """A list of sub-modules, named ``0``, ``1``, ... in parameter names."""

    def __init__(self, modules: list[Module]) -> None:
        self.modules = list(modules)

    def __iter__(self):
        return iter(self.modules)

    def __getitem__(self, idx: int) -> Module:
        return self.modules[idx]

    def __setitem__(self, idx: int, module: Module) -> None:
        self.modules[idx] = module

    def __len__(self) -> int:
        return len(self.modules)

    def append(self, module: Module) -> None:
        """Add a module at the end."""
        self.modules.append(module)

    def to(self, dtype: str | None = None) -> None:
        for module in self.modules:
            module.to(dtype)

    def forward(self, x):
        """Chain the modules: ``x = m(x)`` for each."""
        for module in self.modules:
            x = module(x)
        return x


class ModuleDict(Module):
    """A dict of named sub-modules (parameter names use the keys)."""

    def __init__(self, modules: dict[str, Module] | None = None) -> None:
        self.modules: dict[str, Module] = dict(modules or {})

    def __getitem__(self, key: str) -> Module:
        return self.modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.modules[key] = module

    def __iter__(self):
        return iter(self.modules)

    def __len__(self) -> int:
        return len(self.modules)

    def items(self):
        """``(key, module)`` pairs."""
        return self.modules.items()

    def to(self, dtype: str | None = None) -> None:
        for module in self.modules.values():
            module.to(dtype)


def wrap_nested(expr: rx.Expr, name: str) -> Tensor | tuple:
    """Emit ``expr`` with name hint ``name`` in the current BlockBuilder and wrap the result:
    a Tensor, or a tuple of Tensors (recursively) for tuple-valued expressions."""
    if not isinstance(expr, rx.DataflowVar):
        expr = BlockBuilder.current().emit(expr, name)
    sinfo = expr.struct_info
    if isinstance(sinfo, TensorStructInfo):
        return Tensor(_expr=expr)
    if isinstance(sinfo, TupleStructInfo):
        return tuple(wrap_nested(rx.TupleGetItem(expr, i), f"{name}_{i}") for i in range(len(sinfo.fields)))
    raise TypeError(f"Unsupported return type: {sinfo!r}")


def _attribute_finder(root: Module, prefix: str, condition_yield: Callable[[Any], bool]):
    """Walk the module tree in attribute order, yielding ``(dotted name, item)``."""
    if isinstance(root, ModuleList):
        for i, sub in enumerate(root):
            yield from _attribute_finder(sub, prefix + f"{i}.", condition_yield)
        return
    if isinstance(root, ModuleDict):
        for key, sub in root.items():
            yield from _attribute_finder(sub, prefix + f"{key}.", condition_yield)
        return
    for name, item in root.__dict__.items():
        if condition_yield(item):
            yield prefix + name, item
        elif isinstance(item, Module):
            yield from _attribute_finder(item, prefix + name + ".", condition_yield)
