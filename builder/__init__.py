"""model-builder: YAML recipes and ``nn.Module`` code -> graph IR -> loop IR -> native CPU code.

Public entry points: ``builder.nn`` (TVM Relax nn-shaped frontend), ``builder.ir`` (the IR),
``builder.build(recipe_path, overrides, weights, seed)`` (the whole pipeline, returning a
compiled model) and ``builder.compile(irmod)`` (IRModule -> ``runtime.Executable``).

Importing ``builder`` imports nothing else (PEP 562): ``builder.compile``, ``builder.BuildProgress`` and
the subpackages (``builder.nn``, ``builder.ir``, ...) load on first use, so that ``import builder.ir`` or
the command line's ``--help`` do not load the code generator and llvmlite. The op library
(``builder.ops``) is loaded by ``builder.nn`` and by the first lookup of an op by name
(:meth:`builder.ir.relax.Op.get`, :func:`builder.ir.op.registered_ops`).
"""
from __future__ import annotations

import importlib
import sys
import types

__all__ = ["build", "compile", "BuildProgress"]

_SUBMODULES = frozenset({"build_model", "checkpoint", "cli", "codegen", "frontend", "generation", "ir", "layers", "nn",
                         "ops", "quant", "recipe", "summary", "te", "text", "transform"})


def build(recipe_path, overrides=(), weights=None, seed=0, **kwargs):
    """Build a recipe (or a Hugging Face checkpoint folder: ``build("path/to/hf_dir")``, docs/models.md) into a
    runnable :class:`builder.build_model.CompiledModel`; keyword arguments
    (``on_ir``, ``progress``, ...) pass through to :func:`builder.build_model.build`."""
    from .build_model import build as _build   # deferred: the pipeline loads the compiler (start-up time)

    return _build(recipe_path, overrides=overrides, weights=weights, seed=seed, **kwargs)


def __getattr__(name: str):
    """``compile`` / ``BuildProgress`` (from :mod:`builder.compile`) and the subpackages, imported on first use.
    Raises AttributeError for any other name."""
    if name in ("compile", "BuildProgress"):
        module = importlib.import_module(".compile", __name__)
        value = getattr(module, name)
    elif name in _SUBMODULES:
        value = importlib.import_module("." + name, __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


class _Package(types.ModuleType):
    """``builder.compile`` is the function (TVM's name), not the submodule of the same name: importing the
    submodule (``from builder.compile import JitModule``) sets the package's attribute to the module, which
    this refuses, so the attribute is the function however the two were first imported."""

    def __setattr__(self, name: str, value) -> None:
        if name == "compile" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
