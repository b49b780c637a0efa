"""model-builder: YAML recipes and ``nn.Module`` code -> graph IR -> loop IR -> native CPU code.

Public entry points: ``builder.nn`` (TVM Relax nn-shaped frontend), ``builder.ir`` (the IR),
``builder.build(recipe_path, overrides, weights, seed)`` (the whole pipeline, returning a
compiled model) and ``builder.compile(irmod)`` (IRModule -> ``runtime.Executable``).
"""
from . import ops  # noqa: F401 - registers every op (one record each) before anything uses them


def build(recipe_path, overrides=(), weights=None, seed=0, **kwargs):
    """Build a recipe into a runnable :class:`builder.pipeline.CompiledModel`; keyword arguments
    (``on_ir``, ``progress``, ...) pass through to :func:`builder.pipeline.build`."""
    from .pipeline import build as _build

    return _build(recipe_path, overrides=overrides, weights=weights, seed=seed, **kwargs)


# `builder.compile` is the function (TVM's name), not the submodule of the same name: binding
# it here, after the submodule is first imported, keeps later imports from rebinding it.
from .compile import BuildProgress, compile  # noqa: E402,F401
