"""model-builder: YAML recipes and ``nn.Module`` code -> graph IR -> loop IR -> native CPU code.

Public entry points: ``builder.nn`` (TVM Relax nn-shaped frontend), ``builder.ir`` (the IR),
``builder.build(recipe_path, overrides, weights, seed)`` (the whole pipeline, returning a
compiled model) and ``builder.compile(irmod)`` (IRModule -> ``runtime.Executable``).
"""
