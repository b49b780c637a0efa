"""The layer registry: one :func:`register_layer` call per layer type of recipes.

A registration ties together what a layer type is in each part of the builder:

- the recipe schema model (a :class:`schemas.LayerEntry` subclass with ``type: Literal["Name"] = "Name"``;
  registering it here makes ``Name`` a valid ``type`` of ``layers:`` entries, see :mod:`schemas.layers`);
- the ``builder.nn`` module class an entry builds, and how the model's fields become the class's
  ``__init__`` arguments (each field under its own name unless ``arguments`` renames or drops it; ``type``
  and ``repeat`` are the entry's, never passed). The fields are checked against the ``__init__`` signature
  when the layer is registered (at import for the built-in layers below), not when a recipe is built;
- the tensor-parallel rule (:class:`TensorParallelRule`): which entries split across
  ``tensor_parallel_shards`` workers; the module then shards its own parameters
  (:mod:`builder.nn.tensor_parallel`);
- the quantization rule (:class:`QuantizeRule`): whether and how weight quantization (:mod:`builder.quant`)
  replaces the module, wherever one sits in a module tree (``Attention``'s ``q_proj`` is an ``nn.Linear``).

Adding a layer type is its schema model, its ``nn.Module`` class and one :func:`register_layer` call
(``tests/test_architecture.py::test_add_a_layer_is_one_registration`` does it). The registry imports
``schemas`` and ``builder.nn``; :mod:`builder.recipe` and :mod:`builder.quant` read it.
"""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping, Optional

import schemas
from schemas.layers import ENTRY_FIELDS, LayerEntry, layer_type_name

from . import nn

__all__ = ["LayerRegistration", "LayerRegistrationError", "TensorParallelRule", "QuantizeRule", "LAYERS",
           "register_layer", "unregister_layer", "registration", "quantize_rule"]


class LayerRegistrationError(TypeError):
    """A registration whose schema model and module class do not fit together (a field that is no
    ``__init__`` argument, a required argument no field gives, ...); the message names the layer type and
    the field or argument."""


def _always(_: Any) -> bool:
    return True


@dataclass(frozen=True)
class TensorParallelRule:
    """How a layer type splits across the workers of ``tensor_parallel_shards: N`` (Megatron-LM, Shoeybi et
    al. 2019): an entry for which ``splits(entry)`` is true gets the number of workers as the ``__init__``
    argument ``argument``, and the module keeps its slice of each split parameter (recording a
    :class:`~builder.nn.tensor_parallel.ShardSingleDim` on it, which the weight loader reads) and
    all-reduces its partial sums. Other entries, and layer types without a rule, are replicated on every
    worker. Raises nothing itself; the module raises :class:`~builder.nn.tensor_parallel.ShardError` for a
    size that does not divide."""

    splits: Callable[[LayerEntry], bool] = _always
    """Whether an entry (the validated schema model) splits; default: every entry (the module decides,
    as ``Attention`` does from its own ``tensor_parallel`` setting)."""
    argument: str = "tensor_parallel_shards"
    """The ``__init__`` argument that receives the number of workers."""


@dataclass(frozen=True)
class QuantizeRule:
    """How weight quantization replaces a module of this layer type's class (or of a subclass), anywhere in
    a module tree, unless the spec's ``exclude`` or the module's ``no_quantization`` keeps it.

    ``replacement(module, spec) -> nn.Module`` makes the quantized module (parameters ``q_weight`` /
    ``q_scale`` in place of ``weight``); it is a callable or a ``"module:qualname"`` reference, resolved
    when quantization first needs it (as entry points are), so that the registry need not import
    :mod:`builder.quant`, which reads it. ``enabled(spec)`` says whether a spec quantizes this layer type at
    all (``Embedding``: the spec's ``quantize_embedding``). Raises ImportError / AttributeError (when
    resolved) for a reference to nothing."""

    replacement: str | Callable[[nn.Module, Any], nn.Module]
    enabled: Callable[[Any], bool] = _always

    def replace(self, module: nn.Module, spec: Any) -> nn.Module:
        """The quantized counterpart of ``module`` under ``spec`` (``replacement(module, spec)``)."""
        return _resolve(self.replacement)(module, spec)


_RESOLVED: dict[str, Callable] = {}


def _resolve(ref: str | Callable) -> Callable:
    """The callable a ``"module:qualname"`` reference names (cached), or ``ref`` itself."""
    if callable(ref):
        return ref
    if ref not in _RESOLVED:
        module_name, _, qualname = ref.partition(":")
        target: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            target = getattr(target, part)
        _RESOLVED[ref] = target
    return _RESOLVED[ref]


@dataclass(frozen=True)
class LayerRegistration:
    """One layer type: its ``type`` name, schema model, module class, field -> ``__init__`` argument
    renames (``None``: the field is not passed), tensor-parallel rule and quantization rule
    (see the module docstring)."""

    type: str
    schema: type[LayerEntry]
    module: type[nn.Module]
    arguments: Mapping[str, Optional[str]] = field(default_factory=dict)
    tensor_parallel: Optional[TensorParallelRule] = None
    quantize: Optional[QuantizeRule] = None

    def init_arguments(self, entry: LayerEntry, shards: int = 1) -> dict[str, Any]:
        """The keyword arguments of ``module(...)`` for the validated ``entry`` of a recipe built with
        ``shards`` tensor-parallel workers (nested models, such as ``rope_scaling``, as plain dicts)."""
        kwargs: dict[str, Any] = {}
        for name, value in entry.model_dump(exclude=set(ENTRY_FIELDS)).items():
            argument = self.arguments.get(name, name)
            if argument is not None:
                kwargs[argument] = value
        if self.tensor_parallel is not None and self.tensor_parallel.splits(entry):
            kwargs[self.tensor_parallel.argument] = shards
        return kwargs

    def field_of(self, argument: str) -> str:
        """The schema field that gives the ``__init__`` argument ``argument`` (itself when none renames to
        it), for pointing a recipe error at the setting at fault."""
        return next((f for f, a in self.arguments.items() if a == argument), argument)


_BY_TYPE: dict[str, LayerRegistration] = {}
_BY_MODULE: dict[type, LayerRegistration] = {}

LAYERS: Mapping[str, LayerRegistration] = MappingProxyType(_BY_TYPE)
"""Every registered layer type's :class:`LayerRegistration` by its ``type`` name (read-only, live)."""


def register_layer(schema: type[LayerEntry], module: type[nn.Module], *,
                   arguments: Mapping[str, Optional[str]] | None = None,
                   tensor_parallel: TensorParallelRule | None = None,
                   quantize: QuantizeRule | None = None) -> LayerRegistration:
    """Register a layer type: ``schema`` (named by its ``type`` field) builds ``module``; see the module
    docstring for ``arguments``, ``tensor_parallel`` and ``quantize``. Also makes the type valid in recipes
    (:func:`schemas.register_layer_model`). Returns the registration.

    Raises :class:`LayerRegistrationError` naming the layer type and the field or argument: a schema field
    (or ``arguments`` key) that is not an argument of ``module.__init__`` (nor a field), an ``__init__``
    argument without a default that no field gives, a tensor-parallel argument ``__init__`` lacks or a field
    also gives, a layer type or a ``module`` class registered already, a ``module`` that is not an ``nn.Module``
    class; TypeError /
    ValueError (from :mod:`schemas.layers`) for a schema model without a ``type`` Literal or a name taken.
    """
    name = layer_type_name(schema)
    arguments = dict(arguments or {})
    if not (isinstance(module, type) and issubclass(module, nn.Module)):
        raise LayerRegistrationError(f"layer {name!r}: the module must be a builder.nn.Module class, got {module!r}")
    if name in _BY_TYPE:
        raise LayerRegistrationError(f"layer {name!r} is registered already (module "
                                     f"{_BY_TYPE[name].module.__qualname__}); unregister_layer({name!r}) first")
    if module in _BY_MODULE:
        raise LayerRegistrationError(f"layer {name!r}: {module.__qualname__} is registered already, as layer type "
                                     f"{_BY_MODULE[module].type!r}")
    _check_arguments(name, schema, module, arguments, tensor_parallel)
    schemas.register_layer_model(schema)   # raises for a name taken by another model
    reg = LayerRegistration(name, schema, module, MappingProxyType(arguments), tensor_parallel, quantize)
    _BY_TYPE[name] = reg
    _BY_MODULE[module] = reg
    return reg


def unregister_layer(name: str) -> LayerRegistration:
    """Remove the layer type ``name`` (from recipes too); returns its registration. Raises KeyError for
    a name that is not registered."""
    reg = registration(name)
    del _BY_TYPE[name], _BY_MODULE[reg.module]
    schemas.unregister_layer_model(name)
    return reg


def registration(name: str) -> LayerRegistration:
    """The registration of layer type ``name``. Raises KeyError, listing the registered types, for
    another name."""
    try:
        return _BY_TYPE[name]
    except KeyError:
        raise KeyError(f"no layer type {name!r} is registered with builder.layers.register_layer "
                       f"(registered: {', '.join(_BY_TYPE)})") from None


def quantize_rule(module: nn.Module) -> QuantizeRule | None:
    """The :class:`QuantizeRule` of ``module``'s class or its nearest registered base class (None: weight
    quantization leaves it as it is and looks inside)."""
    for cls in type(module).__mro__:
        reg = _BY_MODULE.get(cls)
        if reg is not None:
            return reg.quantize
    return None


def _check_arguments(name: str, schema: type[LayerEntry], module: type, arguments: dict[str, Optional[str]],
                     tensor_parallel: TensorParallelRule | None) -> None:
    """Raise :class:`LayerRegistrationError` unless ``schema``'s fields fit ``module.__init__`` (see
    :func:`register_layer`)."""
    params = inspect.signature(module).parameters.values()
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params)
    named = {p.name: p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    where = f"{module.__qualname__}.__init__"
    fields = [f for f in schema.model_fields if f not in ENTRY_FIELDS]
    for key in arguments:
        if key not in fields:
            raise LayerRegistrationError(f"layer {name!r}: arguments renames {key!r}, which is not a field of "
                                         f"{schema.__qualname__} (fields: {', '.join(fields) or 'none'})")
    given: dict[str, str] = {}
    for f in fields:
        argument = arguments.get(f, f)
        if argument is None:
            continue
        if argument not in named and not takes_any:
            raise LayerRegistrationError(
                f"layer {name!r}: field {f!r} of {schema.__qualname__} is not an argument of {where} "
                f"(its arguments: {', '.join(named) or 'none'}); rename it with arguments={{{f!r}: ...}} or "
                f"drop it with arguments={{{f!r}: None}}")
        if argument in given:
            raise LayerRegistrationError(f"layer {name!r}: fields {given[argument]!r} and {f!r} both give the "
                                         f"argument {argument!r} of {where}")
        given[argument] = f
    if tensor_parallel is not None:
        argument = tensor_parallel.argument
        if argument not in named and not takes_any:
            raise LayerRegistrationError(f"layer {name!r}: the tensor-parallel argument {argument!r} is not an "
                                         f"argument of {where}")
        if argument in given:
            raise LayerRegistrationError(f"layer {name!r}: field {given[argument]!r} gives {argument!r}, the "
                                         "argument the tensor-parallel rule sets")
        given[argument] = "(tensor parallelism)"
    for p in params:
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.default is p.empty and p.name not in given:
            raise LayerRegistrationError(f"layer {name!r}: argument {p.name!r} of {where} has no default and no "
                                         f"field of {schema.__qualname__} gives it")


def _splits_when_set(entry: LayerEntry) -> bool:
    """A Linear splits when its ``tensor_parallel`` is ``column`` or ``row``."""
    return entry.tensor_parallel is not None


def _quantizes_embeddings(spec: Any) -> bool:
    """An Embedding is quantized when the spec's ``quantize_embedding`` says so."""
    return spec.quantize_embedding


# --- the built-in layers (tvm.relax.frontend.nn's names and arguments) -------------------------------

register_layer(schemas.layers.Linear, nn.Linear, tensor_parallel=TensorParallelRule(splits=_splits_when_set),
               quantize=QuantizeRule("builder.quant.modules:QuantizedLinear.from_linear"))
register_layer(schemas.layers.LayerNorm, nn.LayerNorm)
register_layer(schemas.layers.RMSNorm, nn.RMSNorm)
register_layer(schemas.layers.Conv1D, nn.Conv1D)
register_layer(schemas.layers.ConvTranspose1D, nn.ConvTranspose1D)
register_layer(schemas.layers.Embedding, nn.Embedding,
               quantize=QuantizeRule("builder.quant.modules:QuantizedEmbedding.from_embedding",
                                     enabled=_quantizes_embeddings))
register_layer(schemas.layers.GroupNorm, nn.GroupNorm)
register_layer(schemas.layers.Attention, nn.Attention, tensor_parallel=TensorParallelRule())
register_layer(schemas.layers.ReLU, nn.ReLU)
register_layer(schemas.layers.SiLU, nn.SiLU)
register_layer(schemas.layers.GELU, nn.GELU)


# --- learned tensors and 2-D convolution (issue 42) -----------------------------------------------------
# A Parameter layer builds an nn.ParameterLayer; builder.recipe puts its ``weight`` in the tree under the
# layer's own name (see nn.ParameterLayer).

register_layer(schemas.layers.Parameter, nn.ParameterLayer)
register_layer(schemas.layers.Conv2D, nn.Conv2D)


# --- one slot of the runtime KV cache, for attention written out in forward: (issue 42) ---------------------
# (nn.KVCache is TVM's cache effect; the recipe type KVCache builds an nn.KVCacheLayer, numbered with the
# Attention layers: nn.CACHE_LAYERS.)

register_layer(schemas.layers.KVCache, nn.KVCacheLayer, tensor_parallel=TensorParallelRule())
