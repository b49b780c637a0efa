"""The main job as one call: recipe -> module -> IR -> native code -> a runnable model.

    m = builder.build("recipes/llama_mlp_small.yaml", weights="tests/data/llama_mlp_layer0.safetensors")
    y = m(x)                     # the first function; or m["forward"](x)
    m.ir.show(); m.params        # IRModule; name -> numpy array

Weights: parameter names come from the module tree (the names ``export_tvm`` returns); the
recipe's ``weights:`` section maps them to file names (``prefix`` and/or ``map``). Without a
weights file, every parameter is drawn from a seeded normal distribution N(0, 0.02^2) (the
usual transformer initializer range, e.g. HF ``initializer_range``), so any recipe runs; a ``Parameter``
layer's ``init`` (zeros, ones, normal with its ``std``) replaces its draw.

Transforms (``quantization:``, ``dtype:``; see :mod:`builder.quant`): the module is rewritten
before export and a :class:`~builder.quant.QuantizeMapping` records how each float parameter
becomes the new ones. A float checkpoint is converted while it is loaded (quantized on the
fly); parameters saved with :meth:`CompiledModel.save_params` load back directly. Random
weights of a transformed recipe are the untransformed model's random weights (same seed),
converted, so that results are comparable.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Callable, Sequence

import numpy as np

import schemas
from core.dtypes import bfloat16_bits_to_float32, float32_to_bfloat16_bits, numpy_dtype
from runtime import Executable, VirtualMachine, load_params
from runtime.memory import check_allocation, move_to_huge_pages
from runtime.weights import TensorShard, WeightsError, read_safetensors_metadata
from runtime.weights import save_params as _save_params

from . import nn
from .codegen import Target
from .compile import compile as compile_module
from .ir import relax as rx
from .ir.expr import is_float_dtype
from .quant import GroupSizeError, QuantizeMapping, apply_transforms, describe, model_dtype, resolve
from .recipe import instantiate
from .summary import describe_input
from .transform import PassInstrument

__all__ = ["build", "build_model_file", "CompiledModel", "export_recipe", "random_params", "bind_weights",
           "worker_shards", "name_params", "token_vocab", "check_token_ids", "MODEL_FILE_SUFFIXES"]

Progress = Callable[[int, int, str], None]
"""``progress(done, total, name)``: called with ``done=0`` before converting parameters and after each one."""


@dataclass
class CompiledModel:
    """A built recipe: ``ir`` (IRModule), ``params`` (name -> array), ``exe`` and ``vm``.

    ``m["forward"](x)`` runs a function on numpy inputs with the bound parameters; ``m(x)`` runs
    the first function. The float weights the kernels read in row tiles become read-only arrays
    when a function is taken: the VM keeps their tiles (``runtime.vm``); to change one, assign a
    new array (``m.params[name] = a``) and take the function again. ``spec`` is the recipe's input
    spec per function. Random weights (no weights file) are drawn on first use of ``params``. The
    parameters, loaded or drawn, are moved into buffers backed by huge pages when first used
    (:func:`runtime.memory.move_to_huge_pages`: fewer TLB misses streaming the weights); an array
    assigned later is used as it is.
    """

    recipe: schemas.Recipe
    ir: rx.IRModule
    param_specs: list[tuple[str, tuple, str]]
    exe: Executable
    spec: dict[str, dict]
    timings: dict[str, float] = field(default_factory=dict)
    seed: int = 0
    _params: dict[str, np.ndarray] | None = None
    _vm: VirtualMachine | None = None
    _placed: bool = False
    mapping: QuantizeMapping = field(default_factory=QuantizeMapping)
    progress: Progress | None = None
    module: nn.Module | None = None
    shards: dict[str, TensorShard] = field(default_factory=dict)
    group: Any = None
    tokenizer: Any = None   # tokenizer.json (or its folder, or a tokenizers.Tokenizer) for complete / chat
    _text: tuple | None = None

    @property
    def params(self) -> dict[str, np.ndarray]:
        """Parameter values by name (the loaded weights, or seeded random ones: for a transformed
        recipe the untransformed model's random weights, converted by the mapping; a tensor-parallel
        worker draws the whole tensors, as one process would, and keeps its shards)."""
        if self._params is None:
            _check_param_memory(self.recipe, self.param_specs, self.mapping, "random", streamed=True)
            if self.mapping.param_map:
                floats = _StreamedRandom(self.mapping.float_specs, self.seed, self.shards)
                self._params = self.mapping.apply(floats, self.param_specs, _started(self.progress,
                                                                                     self.mapping))
            else:
                self._params = random_params(self.param_specs, self.seed, self.shards)
            _apply_inits(self._params, self.module)
        if not self._placed:
            move_to_huge_pages(self._params)
            self._placed = True
        return self._params

    @property
    def rank(self) -> int:
        """This worker's index among ``recipe.tensor_parallel_shards`` (0 for a single process)."""
        return 0 if self.group is None else self.group.rank

    @property
    def param_names(self) -> list[str]:
        """Parameter names, in function-signature order."""
        return [name for name, _, _ in self.param_specs]

    @property
    def vm(self) -> VirtualMachine:
        """The VirtualMachine (native code loaded on first use)."""
        if self._vm is None:
            self._vm = VirtualMachine(self.exe)
        return self._vm

    @property
    def functions(self) -> list[str]:
        """Exported function names, in recipe order."""
        return list(self.spec)

    def __getitem__(self, name: str):
        if name not in self.spec:
            raise KeyError(f"no function '{name}'; the recipe exports {self.functions}")
        fn = self.vm[name]
        weights = [self.params[n] for n in self.param_names]
        inputs = list(self.spec[name])
        for i in self.vm.transformed_params(name):   # the VM keeps row tiles of read-only weights
            if i >= len(inputs) and isinstance(weights[i - len(inputs)], np.ndarray):
                weights[i - len(inputs)].flags.writeable = False

        def call(*args: Any, **kwargs: Any):
            values = list(args)
            for key in inputs[len(values):]:
                if key not in kwargs:
                    raise TypeError(f"{name}() missing input '{key}' (inputs: {', '.join(inputs)})")
                values.append(kwargs.pop(key))
            if kwargs or len(values) != len(inputs):
                raise TypeError(f"{name}() takes inputs {inputs}, got {len(args)} positional and "
                                f"{sorted(kwargs)} keyword")
            return fn(*values, *weights)

        return call

    def __call__(self, *args: Any, **kwargs: Any):
        return self[self.functions[0]](*args, **kwargs)

    def __getattr__(self, name: str):
        """``m.embed(...)``: a function of the recipe as a method (``m["embed"](...)``)."""
        spec = self.__dict__.get("spec")
        if spec is not None and name in spec:
            return self[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}"
                             + (f"; the recipe exports {list(spec)}" if spec else ""))

    def generate(self, prompt_ids, max_new_tokens: int, return_logits: bool = False):
        """Greedy generation with the recipe's ``prefill`` and ``decode`` functions over a KV cache
        (:func:`builder.generation.greedy_generate`): ``prompt_ids`` (batch, prompt_len) integers ->
        the new ids (batch, max_new_tokens) int64 (and the logits each was chosen from, (batch,
        max_new_tokens, vocab) float32, with ``return_logits``). Both functions take
        ``(input_ids, cache, total_seq_len)`` and return logits (batch, seq, vocab) of which the last
        position is used. Raises ValueError when the recipe lacks them or their inputs differ."""
        from .generation import greedy_generate

        self._check_generation("generate")
        return greedy_generate(self._float_outputs("prefill"), self._float_outputs("decode"), prompt_ids,
                               max_new_tokens, return_logits=return_logits)

    def _check_generation(self, what: str) -> None:
        for fname in ("prefill", "decode"):
            kinds = [describe_input(s) for s in self.spec.get(fname, {}).values()]
            if len(kinds) != 3 or kinds[1:] != ["kv_cache", "int"]:
                raise ValueError(f"{what} needs a function '{fname}(input_ids, cache: kv_cache, total_seq_len: "
                                 f"int)'; the recipe exports {self.functions}"
                                 + (f" and {fname} takes {list(self.spec[fname])}" if fname in self.spec else ""))

    def text_model(self, chat_template: str | None = None):
        """The model with its :attr:`tokenizer` as a :class:`builder.completion.TextModel` (what :meth:`complete`
        and :meth:`chat` use). Raises ValueError without a tokenizer or without prefill / decode."""
        from .completion import TextModel

        self._check_generation("complete / chat")
        if self.tokenizer is None:
            raise ValueError("complete / chat need the model's tokenizer: build(..., tokenizer='tokenizer.json') "
                             "(build --tokenizer), or set m.tokenizer")
        prefill, decode = self._float_outputs("prefill"), self._float_outputs("decode")   # the current params
        key = (self.tokenizer, chat_template)     # the tokenizer is loaded once while it stays the same
        if self._text is None or self._text[0] is not key[0] or self._text[1] != key[1]:
            found = token_vocab(self.ir, "prefill", "input_ids")
            self._text = (*key, TextModel(prefill, decode, self.tokenizer, vocab=None if found is None else found[0],
                                          chat_template=chat_template))
        self._text[2].prefill, self._text[2].decode = prefill, decode
        return self._text[2]

    def complete(self, text: str, max_tokens: int = 16, stream: bool = False, **sampling):
        """Continue ``text`` with the model's tokenizer: :meth:`builder.completion.TextModel.complete` (a
        ``Completion``, or ``TextChunk`` s with ``stream=True``; ``stop=``, ``temperature=``, ``seed=``,
        ``response_format=`` (structured output), ...)."""
        return self.text_model().complete(text, max_tokens, stream, **sampling)

    def chat(self, messages, max_tokens: int = 16, stream: bool = False, chat_template: str | None = None,
             **sampling):
        """Reply to ``messages`` with the tokenizer's chat template (or ``chat_template``):
        :meth:`builder.completion.TextModel.chat`."""
        return self.text_model(chat_template).chat(messages, max_tokens, stream, **sampling)

    def embed_texts(self, texts: str | Sequence[str], max_length: int = 256) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Sentence embeddings of ``texts`` with the recipe's ``embed`` function and :attr:`tokenizer`, tokenized as
        sentence-transformers does (:func:`builder.text.tokenize`: special tokens, truncated to ``max_length``,
        padded to the longest). Returns the embeddings (len(texts), dim) (the function's dtype) and the token
        arrays ``tokenize`` gave (``input_ids``, ``attention_mask``, ``token_type_ids``). Raises ValueError without ``embed`` or a tokenizer, or when ``embed``
        takes inputs the tokenizer does not give (and what :func:`~builder.text.tokenize` raises)."""
        from .text import tokenize

        if "embed" not in self.spec:
            raise ValueError(f"embeddings need the recipe's 'embed' function; the recipe exports {self.functions}")
        if self.tokenizer is None:
            raise ValueError("embeddings need the model's tokenizer: build(..., tokenizer='tokenizer.json')")
        tokens = tokenize(self.tokenizer, texts, max_length=max_length)
        names = list(self.spec["embed"])
        missing = [n for n in names if n not in tokens]
        if missing:
            raise ValueError(f"embed takes {names}; the tokenizer gives {sorted(tokens)}")
        emb = np.asarray(self["embed"](*[tokens[n] for n in names]))
        return emb, tokens

    def _float_outputs(self, name: str):
        """Function ``name``, its bfloat16 result (uint16 bits: numpy has no bfloat16) widened to float32."""
        fn = self[name]
        ret = getattr(self.ir.functions.get(name), "ret_struct_info", None)
        if getattr(ret, "dtype", None) != "bfloat16":
            return fn
        return lambda *args: bfloat16_bits_to_float32(fn(*args))

    @property
    def num_params(self) -> int:
        """Number of parameter elements."""
        return sum(math.prod(shape) for _, shape, _ in self.param_specs)

    @property
    def param_bytes(self) -> int:
        """Bytes of parameter data."""
        return _nbytes(self.param_specs)

    @property
    def source_param_bytes(self) -> int:
        """Bytes of parameter data before the recipe's transforms (quantization, dtype cast)."""
        return _nbytes(self.mapping.float_specs) if self.mapping.float_specs else self.param_bytes

    @property
    def transformed(self) -> bool:
        """True when the recipe's transforms changed any parameter."""
        return bool(self.mapping.param_map)

    @property
    def quantization(self) -> str:
        """The recipe's quantization, as a preset name or a short description."""
        return describe(self.recipe.quantization)

    def file_keys(self) -> dict[str, str]:
        """Parameter name -> tensor name in a weights file, by the recipe's ``weights`` rule
        (``map`` entry, else ``prefix + name``)."""
        from core.weight_names import NameRules

        w = self.recipe.weights
        rules = NameRules(w.map, w.prefix) if w else NameRules()
        return {n: rules.file_key(n) for n in self.param_names}

    def save_params(self, path: str | Path) -> None:
        """Write the (transformed) parameters to a safetensors file, under the recipe's file
        names (:meth:`file_keys`), so that building the same recipe with ``weights=path`` loads
        them directly without converting. The header records the recipe and its quantization. Raises
        ValueError for a tensor-parallel worker (its parameters are shards of the file's tensors)."""
        if self.shards:
            raise ValueError("save_params: this tensor-parallel worker holds shards of the parameters, which "
                             "would be saved under the whole tensors' names; save them from a single process "
                             "(tensor_parallel_shards=1)")
        keys = self.file_keys()
        dtypes = {keys[n]: d for n, _, d in self.param_specs}
        _save_params(path, {keys[n]: self.params[n] for n in self.param_names},
                     metadata={"format": "model-builder", "recipe": self.recipe.name,
                               "quantization": self.quantization,
                               "model_dtype": str(model_dtype(self.recipe))},
                     dtypes=dtypes)

    def save_artifact(self, folder: str | Path, tokenizer: str | Path | None = None) -> Path:
        """Write the artifact folder ``folder`` (:func:`runtime.artifact.save_artifact`): the Executable,
        the (converted) parameters under the names its functions take them (:attr:`param_names`), the
        resolved recipe (YAML; none for an imported model file), ``tokenizer`` (a ``tokenizer.json``,
        copied) and a manifest; ``runtime.load_artifact(folder)`` loads and runs it without the compiler.
        Returns the folder. Raises ValueError for a tensor-parallel worker (as :meth:`save_params`),
        :class:`runtime.ArtifactError` for a path that is not a folder."""
        from runtime.artifact import save_artifact

        if self.shards:
            raise ValueError("--save-exe: this tensor-parallel worker holds shards of the parameters; save the "
                             "artifact from a single process (tensor_parallel_shards=1)")
        recipe_text = None
        if self.module is not None:       # a recipe (an imported model file has no recipe to give)
            recipe_text = schemas.dump_recipe(self.recipe)
        return save_artifact(folder, self.exe, self.params, self.param_specs, name=self.recipe.name,
                             recipe_text=recipe_text, tokenizer=tokenizer,
                             metadata={"quantization": self.quantization,
                                       "model_dtype": str(model_dtype(self.recipe))})


def export_recipe(recipe: schemas.Recipe, mapping: QuantizeMapping | None = None
                  ) -> tuple[rx.IRModule, list[tuple[str, nn.Parameter]], dict]:
    """Instantiate, transform and export a validated recipe: ``(irmod, params, spec)``.

    The transforms are the recipe's quantization / dtype (:func:`builder.quant.apply_transforms`);
    when the quantization sets a model dtype, floating-point inputs take it too. ``mapping``
    (optional) receives the parameter mapping. Raises :class:`schemas.RecipeError` for recipe
    problems, ValueError for a layer that cannot be quantized.
    """
    irmod, params, spec, _, _ = _export(recipe, mapping)
    return irmod, params, spec


def _export(recipe: schemas.Recipe, mapping: QuantizeMapping | None):
    """:func:`export_recipe`, also returning the (transformed) module tree and the shard strategies
    of the untransformed model's parameters (name -> ``ShardSingleDim``; empty for one shard)."""
    module, spec = instantiate(recipe)
    _check_fixed_sizes(recipe, module)
    _check_tensor_bytes(recipe, module, spec)
    _check_exclude(recipe, module)
    strategies = nn.tensor_parallel.param_shards(module)
    try:
        module = apply_transforms(module, recipe, mapping)
    except GroupSizeError as exc:
        raise schemas.RecipeError([_issue(recipe, "quantization.group_size", str(exc))]) from None
    dtype = resolve(recipe.quantization).model_dtype
    if dtype is not None:
        spec = {fname: {iname: _cast_input(t, dtype) for iname, t in inputs.items()}
                for fname, inputs in spec.items()}
    irmod, params = module.export_tvm(spec)
    return irmod, params, spec, module, strategies


def worker_shards(strategies: Mapping[str, Any], rank: int) -> dict[str, TensorShard]:
    """Worker ``rank``'s :class:`runtime.weights.TensorShard` of each sharded parameter (``strategies``:
    name -> ``ShardSingleDim`` as :func:`builder.nn.tensor_parallel.param_shards` gives them)."""
    return {name: TensorShard(s.dim, rank, s.shards) for name, s in strategies.items()}


def _check_fixed_sizes(recipe: schemas.Recipe, module: nn.Module) -> None:
    """Raise :class:`schemas.RecipeError` (file:line:col of the field) when a layer's weight
    would have a symbolic size: a layer field such as ``in_features`` set to a name (``eight``,
    or a variable overridden with ``hidden=abc``) is a symbolic dim, which function inputs may
    have but weights, which the build must create or load, may not."""
    issues = []
    layers = recipe.model.layers
    for name, p in module.named_parameters():
        names = {str(d) for d in p.shape if not isinstance(d, int)}
        if not names:
            continue
        layer = name.split(".")[0]
        fields = layers[layer].model_dump() if layer in layers else {}
        culprits = [f for f, v in fields.items() if isinstance(v, str) and v in names]
        for fld in culprits or [None]:
            path = f"model.layers.{layer}" + (f".{fld}" if fld else "")
            what = f"{fld} is {fields[fld]!r}, a symbolic name" if fld else "a size is symbolic"
            issues.append(_issue(recipe, path,
                f"{what}: parameter '{name}' would have the shape ({', '.join(map(str, p.shape))}); "
                "the sizes of a layer's weights must be integers (symbolic names are for function "
                "inputs)"))
    if issues:
        raise schemas.RecipeError(issues)


def _check_tensor_bytes(recipe: schemas.Recipe, module: nn.Module, spec: dict) -> None:
    """Raise :class:`schemas.RecipeError` when a parameter, or an input's static dims, would take
    more than :data:`core.limits.MAX_TENSOR_BYTES` (sizes whose products overflow int64 arithmetic:
    each size is bounded by the schema, their products are checked here, at the layer or input)."""
    from core.limits import MAX_TENSOR_BYTES

    issues = []
    for name, p in module.named_parameters():
        nbytes = math.prod(d for d in p.shape if isinstance(d, int)) * numpy_dtype(p.dtype).itemsize
        if nbytes > MAX_TENSOR_BYTES:
            issues.append(_issue(recipe, "model.layers." + name.split(".")[0],
                                 f"parameter '{name}' of shape {tuple(p.shape)} would take {nbytes:,} bytes, more "
                                 f"than the 2**62 any tensor may have"))
    for fname, inputs in spec.items():
        for iname, t in inputs.items():
            if not isinstance(t, nn.spec.Tensor):
                continue
            shape = t.shape
            nbytes = math.prod(d for d in shape if isinstance(d, int)) * numpy_dtype(t.dtype).itemsize
            if nbytes > MAX_TENSOR_BYTES:
                issues.append(_issue(recipe, f"functions.{fname}.{iname}.shape",
                                     f"input '{iname}' of shape {list(shape)} would take {nbytes:,} bytes, more "
                                     "than the 2**62 any tensor may have"))
    if issues:
        raise schemas.RecipeError(issues)


def _issue(recipe: schemas.Recipe, path: str, message: str) -> schemas.RecipeIssue:
    """A recipe issue at ``path``'s position in the file, or citing the override that set it."""
    return recipe.source.issue(path, message)


def _check_exclude(recipe: schemas.Recipe, module: nn.Module) -> None:
    """Raise :class:`schemas.RecipeError` for a ``quantization.exclude`` glob that matches no
    layer path (a typo would otherwise quantize the layer it meant to keep)."""
    import fnmatch

    patterns = list(getattr(resolve(recipe.quantization), "exclude", None) or [])
    if not patterns:
        return
    paths: set[str] = set()
    for name, _ in module.named_parameters():
        parts = name.split(".")[:-1]
        paths.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    issues = [_issue(recipe, f"quantization.exclude.{i}",
                     f"pattern {pat!r} matches no layer (layers: {', '.join(sorted(paths))})")
              for i, pat in enumerate(patterns) if not any(fnmatch.fnmatchcase(p, pat) for p in paths)]
    if issues:
        raise schemas.RecipeError(issues)


def _cast_input(t, dtype: str):
    if isinstance(t, nn.spec.Tensor) and is_float_dtype(t.dtype) and t.dtype != dtype:
        return nn.spec.Tensor(t.shape, dtype)
    return t


def _nbytes(specs: Sequence[tuple[str, Sequence, str]]) -> int:
    return sum(math.prod(shape) * numpy_dtype(dtype).itemsize for _, shape, dtype in specs)


def _check_param_memory(recipe: schemas.Recipe, param_specs, mapping: QuantizeMapping | None, how: str,
                        streamed: bool = False) -> None:
    """Raise :class:`runtime.memory.MemoryLimitError` before any parameter is allocated when the
    parameters (plus, for a transformed recipe, the float values they are converted from: all of them,
    or with ``streamed`` the largest one, as :class:`_StreamedRandom` draws them one at a time) need
    more memory than is available."""
    need = _nbytes(param_specs)
    if mapping is not None and mapping.param_map:
        need += (max((_nbytes([s]) for s in mapping.float_specs), default=0) * 2 if streamed
                 else _nbytes(mapping.float_specs))
    check_allocation(need, f"the {how} parameters of '{recipe.name}' ({len(param_specs)} tensors)")


def _started(progress: Progress | None, mapping: QuantizeMapping) -> Progress | None:
    """``progress`` after announcing the start (``done=0``) of converting ``mapping``."""
    if progress is not None and mapping.param_map:
        progress(0, len(mapping.param_map), next(iter(mapping.param_map)))
    return progress


class _StreamedRandom(Mapping):
    """``random_params(specs, seed)`` as a mapping that draws the tensors one at a time, in ``specs``
    order, when they are asked for: a transformed (quantized) model's float weights are converted as
    they are drawn instead of all existing at once (a 7B-shaped model's float32 weights alone would
    take 27 GB). Each value is handed out once (then forgotten); values drawn past, on the way to a
    later name, wait until asked for. The arrays equal :func:`random_params`'s."""

    def __init__(self, specs: Sequence[tuple[str, Sequence, str]], seed: int,
                 shards: Mapping[str, TensorShard] | None = None) -> None:
        self._specs = list(specs)
        self._shards = dict(shards or {})
        self._next = 0
        self._rng = np.random.default_rng(seed)
        self._waiting: dict[str, np.ndarray] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        while name not in self._waiting:
            if self._next >= len(self._specs):
                raise KeyError(name)
            spec = self._specs[self._next]
            self._next += 1
            self._waiting[spec[0]] = _draw(self._rng, *spec, self._shards)
        return self._waiting.pop(name)

    def __iter__(self):
        return (name for name, _, _ in self._specs)

    def __len__(self) -> int:
        return len(self._specs)


def _draw(rng: np.random.Generator, name: str, shape: Sequence, dtype: str,
          shards: Mapping[str, TensorShard] | None = None) -> np.ndarray:
    """One tensor of :func:`random_params` from ``rng``: for a sharded name, the whole tensor is drawn
    (the same numbers one process draws) and the shard kept."""
    shard = (shards or {}).get(name)
    if shard is not None:
        return shard.take(_draw(rng, name, shard.full_shape(shape), dtype))
    np_dtype = numpy_dtype(dtype)
    if dtype == "bfloat16":
        return float32_to_bfloat16_bits(rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02))
    if np.issubdtype(np_dtype, np.floating):
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)).astype(np_dtype)
    return np.zeros(shape, dtype=np_dtype)


def random_params(param_specs: Sequence[tuple[str, Sequence, str]], seed: int = 0,
                  shards: Mapping[str, TensorShard] | None = None) -> dict[str, np.ndarray]:
    """Seeded N(0, 0.02^2) values for ``(name, shape, dtype)`` specs (integers: zeros).

    bfloat16 values are returned as uint16 bit patterns (round to nearest even). ``shards`` (name ->
    :class:`runtime.weights.TensorShard`): the spec's shape is the shard's; the whole tensor is drawn
    and the shard returned, so every worker's pieces put together equal one process's values.
    """
    rng = np.random.default_rng(seed)
    return {name: _draw(rng, name, shape, dtype, shards) for name, shape, dtype in param_specs}


def _apply_inits(params: dict[str, np.ndarray], module: nn.Module | None) -> None:
    """Give the random weights of ``module``'s ``Parameter`` layers (``nn.ParameterLayer``: the parameters with
    ``attrs["init"] = (init, std)``) what their ``init`` asks, in place: zeros, ones, or the N(0, 0.02^2)
    values drawn for them rescaled to N(0, std^2) (so that every other parameter's values stay as drawn)."""
    for name, p in module.named_parameters() if module is not None else ():
        init, values = p.attrs.get("init"), params.get(name)
        if init is None or values is None or init == ("normal", 0.02):
            continue
        bf16 = p.dtype == "bfloat16"
        drawn = bfloat16_bits_to_float32(values) if bf16 else values.astype(np.float64)
        new = np.full_like(drawn, init[0] == "ones") if init[0] != "normal" else drawn * (init[1] / 0.02)
        params[name] = float32_to_bfloat16_bits(new.astype(np.float32)) if bf16 else new.astype(values.dtype)


def _param_specs(params: Sequence[tuple[str, nn.Parameter]]) -> list[tuple[str, tuple, str]]:
    specs = []
    for name, p in params:
        if any(not isinstance(d, int) for d in p.shape):
            raise ValueError(f"parameter '{name}' has a symbolic shape {p}; its size must be fixed "
                             "by the recipe to build weights for it")
        specs.append((name, tuple(p.shape), p.dtype))
    return specs


def checkpoint_source(recipe_path: str | Path, overrides: Sequence[str], weights: str | Path | None
                      ) -> tuple[str | Path, list[str], str | Path | None]:
    """``(recipe, overrides, weights)`` to build: as given for a recipe file; for a Hugging Face checkpoint
    folder, its family's recipe, the overrides its ``config.json`` makes followed by ``overrides``, and its
    weights unless ``weights`` is given (:func:`builder.checkpoint.resolve_checkpoint`, which raises
    :class:`builder.checkpoint.HFCheckpointError`)."""
    if not Path(recipe_path).is_dir():
        return recipe_path, list(overrides) if not isinstance(overrides, str) else [overrides], weights
    from .checkpoint import resolve_checkpoint

    hf = resolve_checkpoint(recipe_path, [overrides] if isinstance(overrides, str) else overrides)
    return hf.recipe, hf.overrides, hf.weights if weights is None else weights


def build(recipe_path: str | Path, overrides: Sequence[str] = (), weights: str | Path | None = None,
          seed: int = 0, on_ir: Callable[[rx.IRModule], None] | None = None,
          progress: Progress | None = None, instruments: Sequence[PassInstrument] = (),
          build_progress: Callable | None = None,
          check_inputs: Callable[[rx.IRModule, list[tuple[str, nn.Parameter]]], None] | None = None,
          tokenizer: Any = None) -> CompiledModel:
    """Load ``recipe_path`` with ``overrides`` (``"KEY=VALUE"``), build and compile it. ``recipe_path`` may be
    a Hugging Face checkpoint folder (``config.json`` + ``model.safetensors``): its family's recipe with the
    config's values, the folder's weights (:func:`checkpoint_source`; docs/models.md).

    ``weights``: a safetensors file (default: the recipe's ``weights.path``, else random
    weights drawn with ``seed``); a float checkpoint is converted (quantized) while it is loaded.
    ``on_ir`` is called with the exported IRModule before weights are bound and code is
    generated (the CLI prints it there). ``progress`` reports parameter conversions (see
    :data:`Progress`). ``instruments`` run around each compiler pass
    (:class:`builder.transform.PrintAfter`, :class:`~builder.transform.PassTiming`). ``check_inputs(irmod,
    params)`` runs on the exported module before anything else (``build --prompt-ids`` refuses ids past the
    vocabulary there: :func:`check_token_ids`). ``tokenizer`` (a ``tokenizer.json``, its folder or a
    ``tokenizers.Tokenizer``) is kept for :meth:`CompiledModel.complete` / :meth:`~CompiledModel.chat`. Raises
    :class:`schemas.RecipeError` for recipe problems (file:line:col), :class:`runtime.WeightsError`
    listing every weight problem; under tensor parallelism :class:`runtime.distributed.DistributedError`
    on every rank when the ranks build different models or load different weights (each tensor's whole
    bytes are digested while its shard is read: :func:`runtime.distributed.check_same_weights`).
    """
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    recipe_path, overrides, weights = checkpoint_source(recipe_path, overrides, weights)
    recipe = schemas.load_recipe(recipe_path, overrides)
    mapping = QuantizeMapping()
    irmod, params, spec, module, strategies = _export(recipe, mapping)
    timings["export"] = time.perf_counter() - t0
    if check_inputs is not None:
        check_inputs(irmod, params)
    group = _worker_group(recipe, irmod, seed)
    shards = worker_shards(strategies, 0 if group is None else group.rank)
    if on_ir is not None:
        on_ir(irmod)
    specs = _param_specs(params)
    t1 = time.perf_counter()
    digests = {} if group is not None and group.size > 1 else None     # what each rank read, to compare
    values = bind_weights(recipe, specs, weights, Path(recipe_path).parent, mapping, progress, shards,
                          digests=digests)
    if digests is not None:
        _check_same_weights(group, None if values is None else digests,
                            _weights_path(recipe, weights, Path(recipe_path).parent), seed)
    timings["weights"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    if group is None or group.rank == 0:
        exe = compile_module(irmod, Target.host(recipe.matmul_precision), instruments=instruments,
                             progress=build_progress)
    if group is not None and group.size > 1:    # every rank's IR is the same: rank 0 compiles it for all
        data = group.broadcast_bytes(exe.save() if group.rank == 0 else None)
        if group.rank != 0:
            exe = Executable.load(data)
    timings["compile"] = time.perf_counter() - t1
    name_params(exe, [name for name, _, _ in specs])
    return CompiledModel(recipe, irmod, specs, exe, spec, timings, seed, values, mapping=mapping, progress=progress,
                         module=module, shards=shards, group=group, tokenizer=tokenizer)


def name_params(exe: Executable, param_names: Sequence[str]) -> None:
    """Give the parameters of ``exe``'s functions their module-tree names (``model.embed_tokens.weight``),
    the names of :attr:`CompiledModel.params`, ``--save-params`` / ``--save-exe`` files and error
    messages, so that ``exe.get_function_params(f)`` and ``vm[f](**{name: array})`` use them too. The IR
    keeps TVM's identifiers (``model_embed_tokens_weight``: the exporter replaces the dots, as
    ``tvm.relax.frontend.nn`` does, since a printed name must be an identifier); only parameters whose
    IR name is that of ``param_names`` in order (after each function's inputs) are renamed."""
    for fn in exe.functions.values():
        taken = fn["params"][fn.get("num_input", len(fn["params"])):]
        if [p["name"] for p in taken] == [n.replace(".", "_") for n in param_names]:
            for p, n in zip(taken, param_names):
                p["name"] = n


#: Ops that pass integer ids on unchanged (only their shape changes), followed from an input to its ``take``.
_ID_PRESERVING_OPS = ("relax.reshape", "relax.flatten", "relax.squeeze", "relax.expand_dims", "relax.permute_dims")


def token_vocab(irmod: rx.IRModule, fname: str, input_name: str,
                params: Sequence[tuple[str, nn.Parameter]] = ()) -> tuple[int, str] | None:
    """The vocabulary an integer input indexes: ``(rows, table)`` for the smallest static axis-0 length
    of the tables (``R.take(table, ids, axis=0)``, an Embedding's lookup) that input ``input_name`` of
    function ``fname`` reaches through shape-only ops (reshape, flatten, squeeze, expand_dims,
    permute_dims); ``table`` is the parameter's module-tree name (``params``: ``export_tvm``'s
    ``[(name, Parameter)]``) or its IR name. None when the input reaches no such table (a quantized
    embedding's lookup, say): nothing is known before the model runs."""
    func = irmod.functions.get(fname)
    if not isinstance(func, rx.Function):
        return None
    var = next((p for p in func.params if p.name_hint == input_name), None)
    if var is None:
        return None
    dotted = {name.replace(".", "_"): name for name, _ in params}
    aliases, best = {var}, None
    for block in func.body.blocks:
        for b in block.bindings:
            call = b.value
            if not isinstance(call, rx.Call) or not isinstance(call.op, rx.Op) or not call.args:
                continue
            name = call.op.name
            if name in _ID_PRESERVING_OPS and call.args[0] in aliases:
                aliases.add(b.var)
            elif (name == "relax.take" and len(call.args) > 1 and call.args[1] in aliases
                  and call.attrs.get("axis", 0) in (0, None)):
                shape = getattr(call.args[0].struct_info, "shape", None)
                if shape and isinstance(shape[0], int) and (best is None or shape[0] < best[0]):
                    table = getattr(call.args[0], "name_hint", "the table")
                    best = (shape[0], dotted.get(table, table))
    return best


def check_token_ids(irmod: rx.IRModule, params: Sequence[tuple[str, nn.Parameter]], fname: str, input_name: str,
                    ids: np.ndarray, flag: str) -> None:
    """Refuse token ids past the vocabulary before compiling: ValueError naming ``flag``, the first id
    out of range with its row and position, and the table ``input_name`` of ``fname`` indexes
    (:func:`token_vocab`); nothing when the vocabulary is not known from the IR."""
    found = token_vocab(irmod, fname, input_name, params)
    if found is None:
        return
    vocab, table = found
    bad = np.argwhere((ids < 0) | (ids >= vocab))
    if bad.size:
        row, col = (int(i) for i in bad[0])
        raise ValueError(f"{flag}: id {int(ids[row, col])} (row {row}, position {col}) is past the vocabulary: "
                         f"{fname}'s {input_name} index {table}, of {vocab} rows (ids 0..{vocab - 1})")


def _worker_group(recipe: schemas.Recipe, irmod: rx.IRModule, seed: int):
    """The worker group of a tensor-parallel recipe (None for one shard): joins the launcher's ranks
    (:func:`runtime.distributed.init`, which raises when their number is not ``tensor_parallel_shards``)
    and checks that every rank builds the same model (recipe after overrides, the exported IR's
    parameters, the seed of random weights), so a rank started with other overrides ends every rank with
    an error naming it instead of computing garbage or waiting forever."""
    if recipe.tensor_parallel_shards == 1:
        return None
    import hashlib

    from runtime import distributed

    group = distributed.init(recipe.tensor_parallel_shards)
    what = recipe.model_dump_json(exclude={"weights"}) + repr(seed) + repr(
        [(p.name_hint, p.struct_info) for f in irmod.functions.values() if isinstance(f, rx.Function)
         for p in f.params])
    distributed.check_same(group, "the model (recipe, overrides, seed)", hashlib.sha256(what.encode()).digest())
    return group


def _check_same_weights(group, digests: dict | None, path, seed: int) -> None:
    """Compare the weights every rank loaded (:func:`runtime.distributed.check_same_weights`): the
    digest of each tensor's whole bytes in its file (``digests``, filled by :func:`bind_weights`; None
    when there is no file and random weights are drawn from ``seed``). Ranks given different checkpoints
    of the same shapes (the recipe handshake cannot see them) end with a DistributedError naming the
    ranks and their files, instead of computing a mix of both."""
    from runtime import distributed
    from runtime.weights import loaded_weights_digest

    source = str(path) if digests is not None else f"random weights (seed {seed})"
    distributed.check_same_weights(group, loaded_weights_digest(digests), source)


def _where(recipe: schemas.Recipe, path: tuple) -> str:
    """``file:line:column`` of the recipe field ``path`` (a field path: ``("weights", "layout", glob)``;
    the file alone when no position is known)."""
    pos = recipe.source.position(path)
    return f"{recipe.source.file}:{pos[0]}:{pos[1]}" if pos else str(recipe.source.file)


def _weights_path(recipe: schemas.Recipe, weights: str | Path | None, base: Path) -> str | Path | None:
    """The weights file :func:`bind_weights` reads: ``weights``, else the recipe's ``weights.path``
    (relative to ``base``), else None."""
    wdef = recipe.weights
    path = weights if weights is not None else (wdef.path if wdef and wdef.path else None)
    if path is not None and weights is None and not Path(path).is_absolute():
        path = base / path
    return path


#: Model files ``build`` imports instead of a recipe, by suffix. Not ``.pt2``: ``torch.export.load`` falls
#: back to unpickling (``torch.load(weights_only=False)``), which runs code the file's author chose; a
#: ``torch.export`` program goes through :func:`builder.frontend.from_exported_program` from Python.
MODEL_FILE_SUFFIXES = (".onnx",)


def build_model_file(path: str | Path, on_ir: Callable[[rx.IRModule], None] | None = None,
                     instruments: Sequence[PassInstrument] = (), build_progress: Callable | None = None,
                     quantization: str | None = None, matmul_precision: str = "highest") -> CompiledModel:
    """Import a model file and compile it: an ONNX model (``.onnx``, :func:`builder.frontend.from_onnx`,
    which checks and bounds the file before use). The result is a :class:`CompiledModel` with one
    function ``main`` whose inputs are the model's (weights are constants inside the module, so
    ``params`` is empty). ``quantization`` (a preset such as ``"q4f16_1"``) quantizes the constant Linear
    weights (:func:`builder.quant.quantize_constants`); ``matmul_precision`` is the recipe field's
    (:attr:`schemas.Recipe.matmul_precision`). Raises ValueError for another suffix, an unknown preset or
    precision, and what the importer raises (an error naming every unsupported op, ImportError without the
    optional extra)."""
    path = Path(path)
    suffix = path.suffix.lower()
    t0 = time.perf_counter()
    if suffix == ".onnx":
        from .frontend.onnx import from_onnx

        irmod = from_onnx(str(path))
        if quantization is not None:
            from .quant import quantize_constants

            irmod = quantize_constants(irmod, quantization)
    else:
        raise ValueError(f"{path}: not a recipe or a model file this build imports ({', '.join(MODEL_FILE_SUFFIXES)})")
    export_s = time.perf_counter() - t0
    if on_ir is not None:
        on_ir(irmod)
    t1 = time.perf_counter()
    exe = compile_module(irmod, Target.host(matmul_precision), instruments=instruments, progress=build_progress)
    main = irmod.functions["main"]
    inputs = main.params[:main.num_input] if main.num_input is not None else main.params
    spec = {"main": {p.name_hint: nn.spec.Tensor([d if isinstance(d, int) else str(d) for d in p.struct_info.shape],
                                                 p.struct_info.dtype) for p in inputs}}
    recipe = schemas.Recipe(name=path.name, description=f"imported from {path.name}",
                            model=schemas.ModelDef(), functions={"main": {}}, matmul_precision=matmul_precision)
    return CompiledModel(recipe, irmod, [], exe, spec, {"export": export_s, "weights": 0.0,
                                                        "compile": time.perf_counter() - t1}, 0, {})


@dataclass
class Validation:
    """What :func:`validate` checked: the recipe, the exported functions' input specs, the parameters
    (name, shape, dtype) and whether a weights file was read and bound."""

    recipe: schemas.Recipe
    spec: dict
    param_specs: list
    weights_checked: bool


def validate(recipe_path: str | Path, overrides: Sequence[str] = (), weights: str | Path | None = None
             ) -> Validation:
    """Everything :func:`build` checks before it compiles: the recipe (schema, variables,
    overrides, ``forward:``), the export of every function (shapes and dtypes through every op), and
    the weights file when one is given or the recipe names one (every parameter found with its shape
    and dtype, converted as the recipe's quantization says). Raises :class:`schemas.RecipeError` /
    :class:`runtime.WeightsError` as :func:`build` does; no code is generated."""
    recipe_path, overrides, weights = checkpoint_source(recipe_path, overrides, weights)
    recipe = schemas.load_recipe(recipe_path, overrides)
    mapping = QuantizeMapping()
    _, params, spec, _, strategies = _export(recipe, mapping)
    specs = _param_specs(params)
    values = bind_weights(recipe, specs, weights, Path(recipe_path).parent, mapping,
                          shards=worker_shards(strategies, 0))
    return Validation(recipe, spec, specs, values is not None)


def bind_weights(recipe: schemas.Recipe, param_specs: Sequence[tuple[str, tuple, str]],
                 weights: str | Path | None, base: Path, mapping: QuantizeMapping | None = None,
                 progress: Progress | None = None, shards: Mapping[str, TensorShard] | None = None,
                 digests: dict | None = None) -> dict[str, np.ndarray] | None:
    """Parameter values from ``weights`` (or the recipe's ``weights.path``, relative to ``base``);
    None when there is no weights file (random weights are drawn later).

    Tensor names follow the recipe's ``weights`` rules (``prefix``, ``map`` with exact names,
    ``{placeholder}`` patterns and prefix rules; ``ignore`` globs for tensors the model does not
    need; ``transforms`` rewriting the file's tensors first, checked against ``param_specs`` before
    any data is read; ``layout`` checked against them: :mod:`runtime.weights`,
    :mod:`core.weight_transforms`; neither for a file :meth:`CompiledModel.save_params` wrote, whose
    parameters are in the model's layout already). With a ``mapping`` (the recipe's quantization /
    dtype transforms), a parameter missing
    from the file is computed from its float source, found by the same rules, by the mapping's
    function (a float checkpoint is quantized / cast on the fly); parameters present with the exact
    shape and dtype load directly. ``shards`` (name -> :class:`runtime.weights.TensorShard`, a
    tensor-parallel worker's): the file holds whole tensors and only the shards are read (and
    converted). ``digests``: a dict :func:`runtime.weights.load_params` fills with each tensor's
    whole-bytes SHA-256 (what tensor-parallel ranks compare). Raises :class:`runtime.WeightsError` listing every problem
    (ValueError for name rules the recipe validation let through: it checks them too); warns
    :class:`runtime.weights.WeightsWarning` for an ``ignore`` glob that matches no tensor.
    """
    wdef = recipe.weights
    path = _weights_path(recipe, weights, base)
    if path is None:
        return None
    expected = {name: (shape, dtype) for name, shape, dtype in param_specs}
    _check_param_memory(recipe, param_specs, mapping, "loaded")
    conversions = mapping.conversions() if mapping is not None else None
    transforms = [t.model_dump() for t in wdef.transforms] if wdef else []
    layout = dict(wdef.layout) if wdef else {}
    if (transforms or layout) and read_safetensors_metadata(path).get("format") == "model-builder":
        transforms, layout = [], {}     # saved by save_params: the parameters are in the model's layout already
    try:
        return load_params(path, expected, prefix=wdef.prefix if wdef else "",
                           name_map=wdef.map if wdef else None, conversions=conversions, progress=progress,
                           ignore=wdef.ignore if wdef else (), shards=shards,
                           row_tiles=mapping.row_tiles if mapping is not None else None, digests=digests,
                           transforms=transforms, layout=layout,
                           where={**{f"weights.transforms.{i}": _where(recipe, ("weights", "transforms", i))
                                     for i in range(len(transforms))},
                                  **{f"weights.layout.{g}": _where(recipe, ("weights", "layout", g)) for g in layout}})
    except WeightsError as err:
        meta = read_safetensors_metadata(path) if Path(path).is_file() else {}
        ours = describe(recipe.quantization)
        if meta.get("format") == "model-builder" and meta.get("quantization") not in (None, ours):
            raise WeightsError(err.path, err.problems + [
                f"the file holds parameters saved by recipe '{meta.get('recipe')}' with quantization "
                f"'{meta['quantization']}', this recipe uses '{ours}': load the float checkpoint "
                "instead, or build with the same quantization"]) from None
        raise
