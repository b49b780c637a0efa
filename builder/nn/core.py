"""Core of the frontend, shaped like ``tvm.relax.frontend.nn.core``.

- :class:`Tensor` wraps a graph-level expression whose struct info is a TensorStructInfo; shape
  and dtype are known eagerly. Tensors are symbolic: they hold no values.
- :class:`Parameter` is a Tensor that may be bound to concrete data (a numpy array).
- :class:`Module` is a tree of Parameters, Effects and sub-Modules held in plain attributes.
- :class:`Effect` models side effects (IO, KV caches) as implicit function inputs and outputs.

Ops outside an export. An op applied while no BlockBuilder is active (typically in a module's
``__init__``: ``self.proj.weight = nn.op.concat([self.a.weight, self.b.weight], dim=0)``)
does not fail: it returns a *deferred* Tensor that records the expression over the
Parameters (and other deferred Tensors) it reads. When an exported method first reads a
deferred Tensor, the expression is emitted into that function, bound to the function's
parameter variables, under the op's name hint; later reads in the same function reuse the
binding. A deferred Tensor is not a Parameter, so it adds no function input.
"""
from __future__ import annotations

import abc
import weakref
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


def _shape_text(shape) -> str:
    dims = [str(d) for d in shape]
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


class _OwnedVar(rx.Var):
    """A placeholder Var that remembers (weakly) the frontend object it stands for: a
    Parameter's unbound placeholder, or the slot of a deferred expression."""

    def __init__(self, name_hint: str, struct_info, owner: Any) -> None:
        super().__init__(name_hint, struct_info)
        self.owner = weakref.ref(owner)


class Tensor(_TensorOp):
    """A symbolic tensor: a graph-level expression with TensorStructInfo.

    ``shape`` is a list of ``int`` (static dims) and int64 ``PrimExpr`` (symbolic dims),
    ``ndim`` and ``dtype`` as in TVM. Never constructed directly by users: ops, specs and
    the static constructors below make them. Raises TypeError for a non-tensor expression.
    """

    def __init__(self, *, _expr: rx.Expr) -> None:
        sinfo = _expr.struct_info
        if not isinstance(sinfo, TensorStructInfo) or sinfo.shape is None:
            raise TypeError(f"a Tensor needs a tensor expression with a known shape, got {sinfo!r}")
        self._expr = _expr

    @staticmethod
    def from_const(data: Any) -> "Tensor":
        """A constant tensor from a Python scalar, a (nested) list or a numpy array.

        As TVM's ``relax.const``: float64 data becomes float32 and int64 data becomes int32;
        every other dtype is kept (use :meth:`from_scalar` or ``astype`` for an exact dtype).
        """
        arr = np.asarray(data)
        narrow = {np.dtype("float64"): "float32", np.dtype("int64"): "int32"}.get(arr.dtype)
        return Tensor(_expr=rx.Constant(arr, narrow))

    @staticmethod
    def from_scalar(data: int | float, dtype: str) -> "Tensor":
        """A 0-d constant ``data`` of ``dtype``. Raises ValueError for an unknown dtype."""
        if dtype not in DTYPES:
            raise ValueError(f"from_scalar: unknown dtype '{dtype}'; valid dtypes: {', '.join(DTYPES)}")
        return Tensor(_expr=rx.Constant(np.asarray(data), dtype))

    @staticmethod
    def from_struct_info(struct_info: TensorStructInfo, name: str = "tensor") -> "Tensor":
        """A placeholder tensor (an unbound Var) with the given struct info."""
        return Tensor(_expr=rx.Var(name, struct_info))

    @staticmethod
    def placeholder(shape: Sequence[int | str | E.PrimExpr], dtype: str, name: str = "tensor") -> "Tensor":
        """A placeholder tensor; a string dim ``"n"`` becomes an int64 symbolic variable ``n``.

        Used to state the shape and dtype of an extern function's result. Raises TypeError for
        a non-sequence shape or an invalid dim, ValueError for a negative dim or unknown dtype.
        """
        if isinstance(shape, (str, int)) or not isinstance(shape, Sequence):
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
        shape = self.shape
        if any(not isinstance(d, int) for d in shape):
            return f'Tensor({[str(d) for d in shape]}, "{self.dtype}")'
        return f'Tensor({shape}, "{self.dtype}")'


class Parameter(Tensor):
    """A weight: a Tensor that may be bound to concrete data (``param.data = numpy_array``).

    ``Parameter(shape, dtype=None)``: a string dim is a symbolic dim; ``dtype`` defaults to
    :func:`get_default_dtype`. ``attrs`` holds free-form annotations.
    """

    def __init__(self, shape: Sequence[int | str | E.PrimExpr], dtype: str | None = None) -> None:
        if dtype is None:
            dtype = get_default_dtype()
        placeholder = Tensor.placeholder(shape, dtype=dtype, name="param")._expr
        super().__init__(_expr=_OwnedVar("param", placeholder.struct_info, self))
        self._data: np.ndarray | None = None
        self.attrs: dict[str, Any] = OrderedDict()

    @property
    def data(self) -> np.ndarray | None:
        """The bound numpy array, or None."""
        return self._data

    @data.setter
    def data(self, data: Any) -> None:
        """Bind ``data``: a numpy array or any DLPack tensor (``__dlpack__``); None unbinds.

        Raises TypeError for other types, ValueError naming both sides on a shape or dtype
        mismatch. Symbolic dims accept any size (TVM rejects them outright); ``bfloat16``
        parameters also accept raw ``uint16`` bits.
        """
        if data is None:
            self._data = None
            return
        if not isinstance(data, np.ndarray):
            if hasattr(data, "__dlpack__"):
                try:
                    data = np.from_dlpack(data)
                except (TypeError, RuntimeError, BufferError, AttributeError):
                    data = np.asarray(data.cpu()) if hasattr(data, "cpu") else np.asarray(data)
            else:
                raise TypeError(f"Unsupported data type: {type(data).__name__} (expected a numpy array "
                                "or a DLPack tensor)")
        expected = self.shape
        if len(data.shape) != len(expected) or any(
            isinstance(e, int) and e != a for e, a in zip(expected, data.shape)
        ):
            raise ValueError(f"Shape mismatch: expected {_shape_text(expected)}, got {data.shape}")
        if str(data.dtype) != self.dtype and not (self.dtype == "bfloat16" and data.dtype == np.uint16):
            raise ValueError(f"Dtype mismatch: expected {self.dtype}, got {data.dtype}")
        self._data = data

    def to(self, dtype: str | None = None) -> None:
        """Change the dtype of an unbound parameter (``None``: no change).

        Raises ValueError when data is bound (converting it could silently lose precision).
        """
        if dtype is None:
            return
        if self._data is not None:
            raise ValueError(
                f"Changing the dtype of a Parameter bound to concrete data ({self.dtype} -> {dtype}) "
                "is not supported: it might lose precision silently. Unbind it or convert the data first."
            )
        self._expr = _OwnedVar("param", TensorStructInfo(self.shape, dtype), self)


class Object:
    """A non-tensor value (struct info ``R.Object``), e.g. a KV cache handle.

    ``Object(_expr=..., _name=...)``: a non-Var expression is emitted in the current
    BlockBuilder under ``_name``. Raises TypeError when the value is not an object.
    """

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

    Sub-modules, parameters and effects are plain attributes; names follow attribute order.
    """

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Parameter]]:
        """``(dotted_name, Parameter)`` for every parameter in the tree, in attribute order
        (``ModuleList`` items are named ``0``, ``1``, ...; ``ModuleDict`` items by key)."""
        yield from _attribute_finder(self, prefix, lambda x: isinstance(x, Parameter))

    def get_parameter(self, target: str) -> Parameter:
        """The parameter at the dotted name ``target`` of :meth:`named_parameters` (``"weight"``,
        ``"q_proj.bias"``, ``"0.weight"``; PyTorch's ``Module.get_parameter``). Raises AttributeError
        naming the parameters the module has (the first 12 and their count), or saying it has none."""
        owned = dict(self.named_parameters())
        if target in owned:
            return owned[target]
        names = list(owned)
        if not names:
            raise AttributeError(f"{type(self).__name__} has no parameters")
        listed = ", ".join(names[:12]) + (f", ... ({len(names)} in all)" if len(names) > 12 else "")
        raise AttributeError(f"{type(self).__name__} has no parameter {target!r} (its parameters: {listed})")

    def parameters(self) -> Iterator[Parameter]:
        """Every Parameter in the tree."""
        for _, param in self.named_parameters():
            yield param

    def state_dict(self, *, prefix: str = "", destination: dict | None = None) -> dict[str, Parameter]:
        """An ordered mapping ``name -> Parameter`` (added to ``destination`` when given)."""
        destination = OrderedDict() if destination is None else destination
        for name, param in self.named_parameters(prefix):
            destination[name] = param
        return destination

    def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True) -> tuple[list[str], list[str]]:
        """Bind parameter data from ``state_dict`` (values: Parameters with data, numpy arrays
        or DLPack tensors).

        Returns ``(missing_keys, unexpected_keys)``. With ``strict`` any missing or unexpected
        key raises KeyError listing both; a Parameter value without data raises ValueError; a
        shape or dtype mismatch raises ValueError (from :attr:`Parameter.data`).
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
        """Run ``forward``. Raises TypeError when the module has none."""
        forward = getattr(self, "forward", None)
        if forward is None:
            raise TypeError(f"Module {type(self).__name__} does not have a `forward` method")
        return forward(*args, **kwargs)

    def to(self, dtype: str | None = None) -> None:
        """Convert all parameters, effects and sub-modules to ``dtype`` recursively; a string
        ``dtype`` attribute of the module follows."""
        for item in list(self.__dict__.values()):
            if isinstance(item, (Module, Parameter, Effect)):
                item.to(dtype)
        if dtype is not None and isinstance(getattr(self, "dtype", None), str):
            self.dtype = dtype

    def export_tvm(self, spec: dict, debug: bool = False, allow_extern: bool = False):
        """Export to an IRModule: returns ``(irmodule, [(name, Parameter), ...])``.

        ``spec`` maps method name -> {input name -> ``nn.spec.Tensor`` / ``Int`` / ...} (or a
        ``nn.spec.ModuleSpec``). ``debug=True`` adds the IO effect (``_io``) that
        ``nn.op.print_`` / ``debug_func`` use. With ``allow_extern`` a third element (the
        extern modules, always empty here) is returned.
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

        Returns a :class:`builder.compile.JitModule`: ``f["forward"](x)`` or ``f.forward(x)``
        with numpy arrays (and ints for ``spec.Int`` inputs). Effects (the IO effect under
        ``debug=True``, KV caches) are created once by ``_initialize_effect`` and threaded
        through every call by the JitModule; callers pass only the inputs of the spec.
        ``pipeline`` is accepted for TVM compatibility (there is one pipeline).

        Raises ValueError for a device other than ``"cpu"``, an ``out_format`` other than
        ``"numpy"`` (TVM's default ``"torch"`` needs PyTorch) or a parameter without data.
        """
        if str(device).split(":")[0] != "cpu":
            raise ValueError(f"device '{device}' is not supported; only 'cpu'")
        if out_format != "numpy":
            raise ValueError(f"Unknown out_format: {out_format!r} (this runtime returns 'numpy')")
        from . import spec as _spec
        from ..compile import JitModule

        mod_spec = _spec.ModuleSpec.from_raw(spec, self)
        mod, params = self.export_tvm(mod_spec, debug=debug)
        return JitModule(mod, params, spec=mod_spec)


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
        """Convert every module to ``dtype``."""
        for module in self.modules:
            module.to(dtype)

    def forward(self, x):
        """Chain the modules: ``x = m(x)`` for each."""
        for module in self.modules:
            x = module(x)
        return x


class ModuleDict(Module):
    """An ordered dict of named sub-modules (PyTorch ``nn.ModuleDict``); parameter names use
    the keys (``blocks.attn.weight``). Keys must be strings without dots (KeyError / TypeError
    otherwise)."""

    def __init__(self, modules: dict[str, Module] | None = None) -> None:
        self.modules: dict[str, Module] = {}
        if modules:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        return self.modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        if not isinstance(key, str) or not key or "." in key:
            raise KeyError(f"ModuleDict keys must be non-empty strings without '.', got {key!r}")
        self.modules[key] = module

    def __delitem__(self, key: str) -> None:
        del self.modules[key]

    def __contains__(self, key: object) -> bool:
        return key in self.modules

    def __iter__(self):
        return iter(self.modules)

    def __len__(self) -> int:
        return len(self.modules)

    def keys(self):
        """The keys, in insertion order."""
        return self.modules.keys()

    def values(self):
        """The modules, in insertion order."""
        return self.modules.values()

    def items(self):
        """``(key, module)`` pairs."""
        return self.modules.items()

    def update(self, modules) -> None:
        """Add (or replace) entries from a mapping or an iterable of ``(key, module)`` pairs."""
        items = modules.items() if hasattr(modules, "items") else modules
        for key, module in items:
            self[key] = module

    def to(self, dtype: str | None = None) -> None:
        """Convert every module to ``dtype``."""
        for module in self.modules.values():
            module.to(dtype)


# ---------------------------------------------------------------------------------------------
# emission of op results (and deferred expressions outside an export)


def _active_builder() -> BlockBuilder | None:
    try:
        return BlockBuilder.current()
    except RuntimeError:
        return None


def wrap_nested(expr: rx.Expr, name: str) -> Tensor | tuple:
    """Emit ``expr`` with name hint ``name`` in the current BlockBuilder and wrap the result:
    a Tensor, or a tuple of Tensors (recursively) for tuple-valued expressions (elements
    named ``name_0``, ``name_1``, ...).

    With no BlockBuilder active the result is deferred (see the module docstring). Raises
    TypeError for a value that is neither a tensor nor a tuple, ValueError for a deferred
    expression that reads a variable which is not a Parameter or a deferred result.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a string (the result's name hint), got {type(name).__name__}")
    if _active_builder() is None:
        return _wrap_deferred(_Deferred(expr, name))
    if not isinstance(expr, rx.DataflowVar):
        expr = BlockBuilder.current().emit(expr, name)
    sinfo = expr.struct_info
    if isinstance(sinfo, TensorStructInfo):
        return Tensor(_expr=expr)
    if isinstance(sinfo, TupleStructInfo):
        return tuple(wrap_nested(rx.TupleGetItem(expr, i), f"{name}_{i}") for i in range(len(sinfo.fields)))
    raise TypeError(f"Unsupported return type: {sinfo!r}")


class _Deferred:
    """An expression built outside an export, emitted on first use inside each function."""

    def __init__(self, expr: rx.Expr, name: str) -> None:
        self.template = expr
        self.name = name
        self.deps: list[tuple[rx.Var, Any]] = []
        for v in rx.used_vars(expr):
            owner = v.owner() if isinstance(v, _OwnedVar) else None
            if owner is None:
                raise ValueError(
                    f"'{name}' is computed outside an export from '{v.name_hint}', which is neither a "
                    "Parameter nor the result of another op on Parameters; only expressions of "
                    "Parameters can be built outside an export")
            if all(v is not d for d, _ in self.deps):
                self.deps.append((v, owner))
        self.slot = _OwnedVar(name, expr.struct_info, self)
        self._emitted: tuple[Any, rx.Var] | None = None

    def resolve(self) -> rx.Var:
        """The value in the function being built (emitted there on first use), or the
        placeholder slot when no BlockBuilder is active."""
        bb = _active_builder()
        if bb is None:
            return self.slot
        frame = getattr(bb, "_frame", None) or bb  # the function being built
        if self._emitted is not None and self._emitted[0]() is frame:
            return self._emitted[1]
        vmap = {v: (owner.resolve() if isinstance(owner, _Deferred) else owner._expr) for v, owner in self.deps}
        var = bb.emit(rx.substitute_vars(self.template, vmap, reinfer=True), self.name)
        self._emitted = (weakref.ref(frame), var)
        return var


class _DeferredTensor(Tensor):
    """A Tensor whose expression is emitted lazily into the function that first reads it."""

    def __init__(self, node: _Deferred) -> None:  # pylint: disable=super-init-not-called
        sinfo = node.template.struct_info
        if not isinstance(sinfo, TensorStructInfo) or sinfo.shape is None:
            raise TypeError(f"a Tensor needs a tensor expression with a known shape, got {sinfo!r}")
        self._node = node

    @property
    def _expr(self) -> rx.Expr:  # type: ignore[override]
        return self._node.resolve()

    @property
    def _sinfo(self) -> TensorStructInfo:
        return self._node.template.struct_info

    @property
    def shape(self) -> list[int | E.PrimExpr]:
        """The shape (reading it emits nothing)."""
        return list(self._sinfo.shape)

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return self._sinfo.ndim

    @property
    def dtype(self) -> str:
        """Element dtype."""
        return self._sinfo.dtype


def _wrap_deferred(node: _Deferred) -> Tensor | tuple:
    sinfo = node.template.struct_info
    if isinstance(sinfo, TensorStructInfo):
        return _DeferredTensor(node)
    if isinstance(sinfo, TupleStructInfo):
        return tuple(_wrap_deferred(_Deferred(rx.TupleGetItem(node.slot, i), f"{node.name}_{i}"))
                     for i in range(len(sinfo.fields)))
    raise TypeError(f"Unsupported return type: {sinfo!r}")


def _attribute_finder(root: Module, prefix: str, condition_yield: Callable[[Any], bool]):
    """Walk the module tree in attribute order, yielding ``(dotted name, item)`` for every
    item that satisfies ``condition_yield`` (Modules that do not are descended into)."""
    if isinstance(root, ModuleList):
        children: Iterator = ((str(i), sub) for i, sub in enumerate(root))
    elif isinstance(root, ModuleDict):
        children = iter(root.items())
    else:
        children = iter(root.__dict__.items())
    for name, item in children:
        if condition_yield(item):
            yield prefix + name, item
        elif isinstance(item, Module):
            yield from _attribute_finder(item, prefix + name + ".", condition_yield)
