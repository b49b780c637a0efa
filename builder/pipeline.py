"""The main job as one call: recipe -> module -> IR -> native code -> a runnable model.

    m = builder.build("recipes/llama_mlp_small.yaml", weights="tests/data/llama_mlp_layer0.safetensors")
    y = m(x)                     # the first function; or m["forward"](x)
    m.ir.show(); m.params        # IRModule; name -> numpy array

Weights: parameter names come from the module tree (the names ``export_tvm`` returns); the
recipe's ``weights:`` section maps them to file names (``prefix`` and/or ``map``). Without a
weights file, every parameter is drawn from a seeded normal distribution N(0, 0.02^2) (the
usual transformer initializer range, e.g. HF ``initializer_range``), so any recipe runs.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

import schemas
from runtime import Executable, VirtualMachine, load_params
from runtime.native import numpy_dtype

from . import nn
from .compile import compile as compile_module
from .ir import relax as rx
from .quant import apply_transforms
from .recipe import instantiate

__all__ = ["build", "CompiledModel", "export_recipe", "random_params"]


@dataclass
class CompiledModel:
    """A built recipe: ``ir`` (IRModule), ``params`` (name -> array), ``exe`` and ``vm``.

    ``m["forward"](x)`` runs a function on numpy inputs with the bound parameters; ``m(x)`` runs
    the first function. ``spec`` is the recipe's input spec per function. Random weights (no
    weights file) are drawn on first use of ``params``.
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

    @property
    def params(self) -> dict[str, np.ndarray]:
        """Parameter values by name (the loaded weights, or seeded random ones)."""
        if self._params is None:
            self._params = random_params(self.param_specs, self.seed)
        return self._params

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

    @property
    def num_params(self) -> int:
        """Number of parameter elements."""
        return int(sum(np.prod(shape, dtype=np.int64) for _, shape, _ in self.param_specs))

    @property
    def param_bytes(self) -> int:
        """Bytes of parameter data."""
        return int(sum(np.prod(shape, dtype=np.int64) * numpy_dtype(dtype).itemsize
                       for _, shape, dtype in self.param_specs))


def export_recipe(recipe: schemas.Recipe) -> tuple[rx.IRModule, list[tuple[str, nn.Parameter]], dict]:
    """Instantiate, transform and export a validated recipe: ``(irmod, params, spec)``."""
    module, spec = instantiate(recipe)
    module = apply_transforms(module, recipe)
    irmod, params = module.export_tvm(spec)
    return irmod, params, spec


def random_params(param_specs: Sequence[tuple[str, Sequence, str]], seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded N(0, 0.02^2) values for ``(name, shape, dtype)`` specs (integers: zeros).

    bfloat16 values are returned as uint16 bit patterns (round to nearest even).
    """
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape, dtype in param_specs:
        np_dtype = numpy_dtype(dtype)
        if dtype == "bfloat16":
            bits = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
            u = bits.view(np.uint32)
            out[name] = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        elif np.issubdtype(np_dtype, np.floating):
            out[name] = (rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)).astype(np_dtype)
        else:
            out[name] = np.zeros(shape, dtype=np_dtype)
    return out


def _param_specs(params: Sequence[tuple[str, nn.Parameter]]) -> list[tuple[str, tuple, str]]:
    specs = []
    for name, p in params:
        if any(not isinstance(d, int) for d in p.shape):
            raise ValueError(f"parameter '{name}' has a symbolic shape {p}; its size must be fixed "
                             "by the recipe to build weights for it")
        specs.append((name, tuple(p.shape), p.dtype))
    return specs


def build(recipe_path: str | Path, overrides: Sequence[str] = (), weights: str | Path | None = None,
          seed: int = 0, on_ir: Callable[[rx.IRModule], None] | None = None) -> CompiledModel:
    """Load ``recipe_path`` with ``overrides`` (``"KEY=VALUE"``), build and compile it.

    ``weights``: a safetensors file (default: the recipe's ``weights.path``, else random
    weights drawn with ``seed``). ``on_ir`` is called with the exported IRModule before
    weights are bound and code is generated (the CLI prints it there). Raises :class:`schemas.RecipeError` for recipe problems
    (file:line:col), :class:`runtime.WeightsError` listing every weight problem.
    """
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    recipe = schemas.load_recipe(recipe_path, overrides)
    irmod, params, spec = export_recipe(recipe)
    timings["export"] = time.perf_counter() - t0
    if on_ir is not None:
        on_ir(irmod)
    specs = _param_specs(params)
    values = bind_weights(recipe, specs, weights, Path(recipe_path).parent)
    t1 = time.perf_counter()
    exe = compile_module(irmod)
    timings["compile"] = time.perf_counter() - t1
    return CompiledModel(recipe, irmod, specs, exe, spec, timings, seed, values)


def bind_weights(recipe: schemas.Recipe, param_specs: Sequence[tuple[str, tuple, str]],
                 weights: str | Path | None, base: Path) -> dict[str, np.ndarray] | None:
    """Parameter values from ``weights`` (or the recipe's ``weights.path``, relative to ``base``);
    None when there is no weights file (random weights are drawn later)."""
    wdef = recipe.weights
    path = weights if weights is not None else (wdef.path if wdef and wdef.path else None)
    if path is None:
        return None
    if weights is None and not Path(path).is_absolute():
        path = base / path
    expected = {name: (shape, dtype) for name, shape, dtype in param_specs}
    return load_params(path, expected, prefix=wdef.prefix if wdef else "", name_map=wdef.map if wdef else None)
