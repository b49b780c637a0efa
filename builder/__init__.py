"""model-builder: YAML recipes and ``nn.Module`` code -> graph IR -> loop IR -> native CPU code.

Public entry points: ``builder.nn`` (TVM Relax nn-shaped frontend), ``builder.ir`` (the IR),
``builder.build(recipe_path, overrides, weights, seed)`` (the whole pipeline, returning a
compiled model) and ``builder.compile(irmod)`` (IRModule -> ``runtime.Executable``).
"""


def build(recipe_path, overrides=(), weights=None, seed=0):
    """Build a recipe into a runnable :class:`builder.pipeline.CompiledModel` (see there)."""
    from .pipeline import build as _build

    return _build(recipe_path, overrides=overrides, weights=weights, seed=seed)


def compile(irmod, target=None):  # noqa: A001 - TVM's name
    """Compile a graph-level IRModule to a :class:`runtime.Executable` (see builder.compile)."""
    from .compile import compile as _compile

    return _compile(irmod, target)
