"""Recipe -> ``nn.Module`` tree + export spec.

A recipe's ``model.layers`` (and each block's ``layers``) become the children of an ``nn.Module``; an
entry of a registered layer type builds the module its registration names, with the arguments and the
tensor-parallel rule it gives (:mod:`builder.layers`); a layer entry whose ``type`` names a block of
``blocks:`` is an instance of that block (its own layers and forward); ``repeat: N`` makes an
``nn.ModuleList`` of N copies. Parameters are named from the module tree as PyTorch names them
(``layers.0.self_attn.q_proj.weight``). Each function of ``functions:`` is a method
of the model running its own ``forward:`` text (or the model's) on its inputs: tensors, symbolic ints
(``nn.spec.Int``) and KV caches (``nn.spec.Object``).

The ``forward`` texts are checked and run by :mod:`builder.forward_language`. Bounds (:mod:`core.limits`):
blocks may not contain themselves nor nest more than ``MAX_BLOCK_DEPTH`` deep, and a recipe instantiates at
most ``MAX_MODULES`` layers in all (counted before any is built).
"""
from __future__ import annotations

from typing import Any

from core.limits import MAX_BLOCK_DEPTH, MAX_MODULES
from schemas import Recipe
from schemas.models import BlockLayer, FunctionDef, IntInput, KVCacheInput
from schemas.source import FieldPath

from . import nn
from .forward_language import (FORWARD_OPS, BlockModule, RecipeModule, _error, _ForwardError, _Program,
                               _reserved, parse_forward)
from .layers import registration
from .nn.tensor_parallel import ShardError
from .ir.printer import PRINTER_RESERVED

__all__ = ["instantiate", "RecipeModule", "BlockModule", "FORWARD_OPS", "parse_forward", "MAX_MODULES"]


class _Builder:
    """Builds the module tree of a recipe: built-in layers, block instances and repeats, with the
    forward texts of the blocks parsed once per block type."""

    def __init__(self, recipe: Recipe, dims: set[str]) -> None:
        self.recipe = recipe
        self.dims = dims
        self.programs: dict[str, _Program] = {}

    def layers(self, table: dict, path: FieldPath) -> dict[str, nn.Module]:
        out: dict[str, nn.Module] = {}
        for name, cfg in table.items():
            where = path + (name,)
            if _reserved(name):
                raise self.recipe.source.error(where, f"layer name '{name}' is reserved (it is an nn.Module attribute)")
            if cfg.repeat is None:
                out[name] = self.layer(cfg, where)
                if isinstance(out[name], nn.ParameterLayer):   # the tensor itself, named as the layer
                    out[name] = out[name].weight
            else:
                types = getattr(cfg, "types", None) or [cfg.type] * cfg.repeat   # per copy (per_layer)
                out[name] = nn.ModuleList([self.layer(cfg, where, t) for t in types])
        return out

    def layer(self, cfg, where: FieldPath, block_type: str | None = None) -> nn.Module:
        if isinstance(cfg, BlockLayer):
            block_type = block_type or cfg.type
            block = self.recipe.blocks[block_type]
            layers = self.layers(block.layers, ("blocks", block_type, "layers"))
            params = {n for n, v in layers.items() if isinstance(v, nn.Parameter)}
            return BlockModule(block_type, layers, self.program(block_type, list(layers), params))
        try:
            reg = registration(cfg.type)
        except KeyError as exc:   # a schema model registered without its module (schemas.register_layer_model)
            raise self.recipe.source.error(where + ("type",), f"{cfg.type}: {exc.args[0]}") from None
        shards = self.recipe.tensor_parallel_shards
        try:
            return reg.module(**reg.init_arguments(cfg, shards))
        except ShardError as exc:
            raise self.recipe.source.error(where + (reg.field_of(exc.field),),
                                           f"{cfg.type}: {exc} (tensor_parallel_shards={shards})") from None
        except (ValueError, TypeError) as exc:
            raise self.recipe.source.error(where, f"{cfg.type}: {exc}") from None

    def program(self, block_type: str, layer_names: list[str], params: set[str] = frozenset()) -> _Program:
        if block_type not in self.programs:
            block = self.recipe.blocks[block_type]
            path = ("blocks", block_type, "forward")
            for name in block.input_names:
                if name in layer_names or name in FORWARD_OPS or _reserved(name):
                    raise self.recipe.source.error(("blocks", block_type, "inputs"),
                                                   f"input name '{name}' shadows a layer, an op or an nn.Module "
                                                   "attribute of the same name")
            if len(set(block.input_names)) != len(block.input_names):
                raise self.recipe.source.error(("blocks", block_type, "inputs"), "input names must be distinct")
            try:
                tree = parse_forward(block.forward, block.input_names, layer_names, self.dims, params)
            except _ForwardError as err:
                raise _error(self.recipe, err, path) from None
            self.programs[block_type] = _Program(tree, path, block.input_names, block.optional_inputs)
        return self.programs[block_type]


def _check_blocks(recipe: Recipe) -> None:
    """Raise :class:`schemas.RecipeError` for a block that contains itself (directly or through other
    blocks), for blocks nested more than ``MAX_BLOCK_DEPTH`` deep, and when the recipe would instantiate
    more than ``MAX_MODULES`` layers; counted with
    memoised per-block sizes, before anything is built."""
    sizes: dict[str, int] = {}
    state: dict[str, str] = {}

    def size(table: dict, path: FieldPath, depth: int) -> int:
        total = 0
        for name, cfg in table.items():
            types = (getattr(cfg, "types", None) or [cfg.type] * (cfg.repeat or 1)) if isinstance(cfg, BlockLayer) \
                else [None] * (cfg.repeat or 1)
            for t in dict.fromkeys(types):   # each block type once; its copies counted below
                if t is not None:
                    block_size(t, path + (name, "type"), depth + 1)
            total += sum(1 + (sizes[t] if t is not None else 0) for t in types) + (1 if cfg.repeat else 0)
            if total > MAX_MODULES:
                raise recipe.source.error(path + (name,), f"the recipe would build more than {MAX_MODULES:,} layers "
                                                          "(repeats and nested blocks multiplied)")
        return total

    def block_size(block_type: str, where: FieldPath, depth: int) -> int:
        if state.get(block_type) == "open":
            raise recipe.source.error(where, f"block '{block_type}' contains itself")
        if depth > MAX_BLOCK_DEPTH:
            raise recipe.source.error(where, f"blocks nest more than {MAX_BLOCK_DEPTH} deep")
        if block_type not in sizes:
            state[block_type] = "open"
            sizes[block_type] = size(recipe.blocks[block_type].layers, ("blocks", block_type, "layers"), depth)
            state[block_type] = "done"
        return sizes[block_type]

    size(recipe.model.layers, ("model", "layers"), 0)
    for name in recipe.blocks:
        block_size(name, ("blocks", name), 1)


def _input_spec(value) -> Any:
    if isinstance(value, IntInput):
        return nn.spec.Int()
    if isinstance(value, KVCacheInput):
        return nn.spec.Object()
    return nn.spec.Tensor(list(value.shape), value.dtype)


def instantiate(recipe: Recipe) -> tuple[nn.Module, dict]:
    """Build the module tree and the export spec of ``recipe``.

    Returns ``(module, spec)`` with ``spec = {function: {input: nn.spec.Tensor | Int | Object}}``;
    ``module`` has one method per function. The recipe's top-level ``dtype`` is applied afterwards by
    the transforms in ``builder.quant``. Raises :class:`schemas.RecipeError` (file:line:col) for a
    layer name that clashes with a Module attribute or an op, an unknown block or a block containing
    itself, too many layers, a function without a forward, and any problem in a ``forward`` text.
    """
    _check_blocks(recipe)
    functions: dict[str, FunctionDef] = recipe.function_defs
    dims = {str(d) for f in functions.values() for spec in f.inputs.values()
            for d in getattr(spec, "shape", ()) if isinstance(d, str)}
    dims |= {name for f in functions.values() for name, spec in f.inputs.items() if isinstance(spec, IntInput)}
    builder = _Builder(recipe, dims)
    layers = builder.layers(recipe.model.layers, ("model", "layers"))
    spec: dict[str, dict] = {}
    programs: dict[str, _Program] = {}
    for fname, fdef in functions.items():
        if (_reserved(fname) and fname != "forward") or fname in PRINTER_RESERVED or fname in layers:
            raise recipe.source.error(("functions", fname),
                                      f"function name '{fname}' is reserved (a layer, an nn.Module attribute or a "
                                      "name of the printed IR)")
        long_form = isinstance(recipe.functions[fname], FunctionDef)
        for iname in fdef.inputs:
            if iname in layers or iname in FORWARD_OPS or _reserved(iname):
                raise recipe.source.error(("functions", fname) + (("inputs",) if long_form else ()) + (iname,),
                                          f"input name '{iname}' shadows a layer, an op or an nn.Module "
                                          "attribute of the same name")
        spec[fname] = {iname: _input_spec(s) for iname, s in fdef.inputs.items()}
        text, path = fdef.forward, ("functions", fname, "forward")
        if text is None:
            text, path = recipe.model.forward, ("model", "forward")
        if text is None:
            raise recipe.source.error(("functions", fname), f"function '{fname}' has no forward, and the model has "
                                                            "none to share: give it `forward:` text")
        own_dims = {str(d) for s in fdef.inputs.values() for d in getattr(s, "shape", ()) if isinstance(d, str)}
        try:
            tree = parse_forward(text, list(fdef.inputs), list(layers), own_dims,
                                 {n for n, v in layers.items() if isinstance(v, nn.Parameter)})
        except _ForwardError as err:
            raise _error(recipe, err, path) from None
        programs[fname] = _Program(tree, path, list(fdef.inputs))
    module = RecipeModule(recipe, layers, programs)
    _number_cache_layers(module)
    return module, spec


def _number_cache_layers(module: nn.Module) -> None:
    """Give every module holding a KV cache slot (``nn.CACHE_LAYERS``: Attention, KVCache) its ``layer_id``
    (0, 1, ... in module-tree order, as ``named_parameters`` walks it): the KV cache keeps one store per id."""
    count = 0
    stack = [module]
    while stack:
        mod = stack.pop()
        if isinstance(mod, nn.CACHE_LAYERS):
            mod.layer_id = count
            count += 1
        children = list(mod) if isinstance(mod, nn.ModuleList) else \
            [v for v in mod.__dict__.values() if isinstance(v, nn.Module)]
        stack.extend(reversed(children))
