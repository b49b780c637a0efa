"""What ``schemas``, ``runtime`` and ``builder`` must agree on, written once: the leaf package.

``core`` imports the standard library and numpy only, never a package of ours, so that every other
room may import it (``schemas`` and ``runtime`` may not import each other, nor ``builder``):

- :mod:`core.limits`: every bound on what a recipe, a weights binding or an imported model may make us do;
- :mod:`core.messages`: how a user value is quoted in an error message (:func:`~core.messages.shorten`);
- :mod:`core.weight_names`: the ``weights.map`` name-rule grammar (parse, check, match), which the recipe
  schema validates and the weights loader applies;
- :mod:`core.dtypes`: the element types of tensors and the bfloat16 bit conversions;
- :mod:`core.layout`: the row-tile layout of quantized and tiled weights (:func:`~core.layout.tile_rows`);
- :mod:`core.precision`: the float32 matmul precisions (:data:`~core.precision.MatmulPrecision`).
"""
