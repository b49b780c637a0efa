"""Bounds on what a recipe may make the loader, the builder and the weights loader do: one place for every
limit (``schemas``, ``runtime`` and ``builder`` import them from here).

Recipes and ``KEY=VALUE`` overrides are untrusted input. A few hundred bytes of YAML can expand to
billions of values through aliases (a "billion laughs"), ``${var}`` references can double a string at
every level, and deep nesting can exhaust Python's stack. Each bound below is far above what a real
model needs (a 32-layer transformer recipe has a few thousand values and nests less than 10 deep) and
far below what would hurt the machine; exceeding one is a recipe error at the position where it
happened.
"""

MAX_RECIPE_BYTES = 4 << 20
"""The largest recipe file read (bytes)."""

MAX_DEPTH = 64
"""The deepest nesting of mappings and lists in a recipe, after aliases and ``${var}`` values are expanded."""

MAX_VALUES = 200_000
"""The most values (scalars, mappings and lists) a recipe may expand to, aliases and ``${var}`` values counted
each time they are used."""

MAX_STRING_CHARS = 1 << 20
"""The longest string ``${var}`` interpolation may build (characters), and the total it may build."""

MAX_VARIABLE_CHAIN = 64
"""The longest chain of variables whose values reference each other (``a: ${b}``, ``b: ${c}``, ...)."""

MAX_VAR_EXPRESSION_CHARS = 1024
"""The longest arithmetic expression inside one ``${...}`` (``${hidden_size // num_heads}``), in characters."""

MAX_VAR_EXPRESSION_DEPTH = 32
"""The deepest nesting of parentheses and unary signs in one ``${...}`` expression (the evaluator recurses
once per level)."""

MAX_DIM = 2 ** 40
"""The largest size a layer field or an input dim may have; products of sizes (a weight's bytes) must
also stay below ``MAX_TENSOR_BYTES``, so that every size computation fits in int64."""

MAX_TENSOR_BYTES = 2 ** 62
"""The largest number of bytes a tensor with static sizes may have."""

MAX_FORWARD_CHARS = 1 << 16
"""The longest ``forward:`` text (characters)."""

MAX_EXPRESSION_DEPTH = 100
"""The deepest nesting of one expression in ``forward:`` text (``silu(silu(...))``, ``a + b + ...``,
``-(-(...))``); longer computations are written as a sequence of assignments, which has no bound."""

MAX_NDIM = 32
"""The most dims a tensor may have (an input's shape, an op's result): numpy 1.x's limit (numpy 2 allows
64), so every result fits a numpy array; the loops generated for a tensor nest once per dim."""

MAX_FUNCTIONS = 64
"""The most functions a recipe may export. Each one exports and compiles the recipe's whole ``forward``,
so the work is this many times the forward's (a transformer exports a handful: forward, prefill, decode)."""

MAX_WEIGHT_MAP_ENTRIES = 100_000
"""The most entries ``weights.map`` (a name map of :class:`core.weight_names.NameRules`) may have (exact
renames of every parameter of a large model fit)."""

MAX_WEIGHT_PATTERN_ENTRIES = 256
"""The most ``weights.map`` entries with placeholders or a trailing ``.`` (each is tried on every
parameter)."""

MAX_WEIGHT_NAME_CHARS = 1024
"""The longest side of a ``weights.map`` entry and the longest ``weights.ignore`` glob (characters)."""

MAX_WEIGHT_IGNORE = 256
"""The most ``weights.ignore`` globs."""

MAX_WEIGHT_TRANSFORMS = 256
"""The most ``weights.transforms`` entries (:mod:`core.weight_transforms`; each is tried on every tensor name
of the file, once)."""

MAX_WEIGHT_TRANSFORM_PARTS = 64
"""The most parts of one ``split`` and the most inputs of one ``concatenate`` in ``weights.transforms``."""

MAX_MODULES = 16_384
"""The most layers (module-tree nodes, repeats and nested blocks expanded) one recipe may instantiate: a
Llama 3 405B-shaped recipe (126 decoder layers) has 1,517. Building costs about 0.2 ms per layer even
where the forward calls few of them (every parameter is placed, walked and checked), about 4 s here."""

MAX_TRACED_CALLS = 8_192
"""The most layer, block and op calls the exported functions of one recipe may trace in all: the
126-layer Llama's forward, prefill and decode trace 4,552. Each call becomes graph operations that every
compiler pass visits, about 2 ms per call through the whole build (a chain of 8,000 Linear layers builds
in 16 s, of 16,384 in 35 s); calls multiply through blocks that call their layers more than once
(``h = a(x); return a(h)`` in 30 nested blocks traces 3 * 2**30 calls of 32 layers), which ``MAX_MODULES`` does not
see."""

MAX_BLOCK_DEPTH = 32
"""The deepest nesting of blocks inside blocks (a real model nests a handful: model > layers > attention);
the interpreter recurses once per level when a forward calls into a block."""

MAX_TENSOR_PARALLEL_SHARDS = 1024
"""The most workers ``tensor_parallel_shards`` may split a model across (every rank builds the same module
tree, so the bound only keeps shard arithmetic sane)."""

MAX_HF_CONFIG_BYTES = 1 << 20
"""The largest ``config.json`` / ``generation_config.json`` of a Hugging Face checkpoint folder read (bytes;
real ones are a few kilobytes)."""

MAX_HF_INDEX_BYTES = 64 << 20
"""The largest ``model.safetensors.index.json`` read (bytes; a 400-billion-parameter model's is a few MB)."""

MAX_HF_SHARDS = 4096
"""The most safetensors files a sharded checkpoint's index may name."""

MAX_BLOCK_INSTANCES = 256
"""The most distinct instances (block, argument values) the uses of blocks with ``args:`` may create in one
recipe: each is a copy of the block's layers and forward with its arguments substituted (a 126-layer model
whose layers differ in a window size needs two)."""

MAX_INCLUDES = 64
"""The most files one recipe may read through ``include:`` (all levels together; a file included twice is read
once)."""

MAX_INCLUDE_DEPTH = 8
"""The deepest chain of ``include:`` (a recipe including a file that includes a file ...)."""
