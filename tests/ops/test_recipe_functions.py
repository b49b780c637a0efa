"""``builder.nn.op.recipe_functions()`` (issue 14): what a recipe's ``forward:`` may call -- the
functions of op records marked ``in_recipes`` plus the composites marked with
``recipe_function`` -- each with a signature and a one-line summary, and each refusing malformed
recipe arguments (numbers, strings, lists, tensors in the wrong places) with ValueError /
TypeError only."""
import inspect

import pytest

from builder import nn
from builder.ir.op import registered_ops
from builder.nn import op
from builder.ops import recipe_ops

FUNCS = op.recipe_functions()


def test_records_and_composites():
    names = list(FUNCS)
    assert names == sorted(names)
    assert set(recipe_ops()) <= set(FUNCS)
    assert set(FUNCS) - set(recipe_ops()) == {"batch_norm", "chunk", "get_timestep_embedding",
                                              "kv_cache_positions", "mean_pooling", "normalize", "pad_input",
                                              "rotary_embedding", "unpad_input"}
    for must in ("take", "concat", "split", "where", "triu", "tril", "sum", "mean", "max", "min", "argmax",
                 "arange", "cumsum", "unsqueeze", "squeeze", "broadcast_to", "repeat", "permute_dims", "softmax",
                 "layer_norm", "rms_norm", "group_norm", "scaled_dot_product_attention", "erf", "equal", "less",
                 "greater_equal", "full", "zeros", "ones", "strided_slice", "astype", "pad", "conv1d", "matmul"):
        assert must in FUNCS, must
    assert {op_.frontend for op_ in registered_ops() if op_.in_recipes} <= set(FUNCS)
    for name, fn in FUNCS.items():
        assert fn is getattr(op, name)
        assert "name" in inspect.signature(fn).parameters, name
        summary = op.recipe_summary(fn)
        assert summary and "\n" not in summary, name


def test_recipe_summary():
    assert op.recipe_summary(FUNCS["chunk"]) == ("``chunks`` pieces of ``x`` along ``dim``: ``R.split(x, "
                                                 "indices_or_sections=chunks, axis=dim)`` (each ``ceil(d / chunks)`` "
                                                 "long, the last one shorter).")
    assert op.recipe_summary(FUNCS["add"]) == "``a + b``."


BAD = [None, "a", 1.5, -1, 10**20, [1, "a"], [[1]], (), [0.5], True]


class Fn(nn.Module):
    def __init__(self, fn):
        self.fn = fn

    def forward(self, x, i):
        return self.fn(x, i)


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_malformed_arguments_raise_value_or_type_errors(name):
    """Every parameter after the first, given each malformed value (the other parameters left at
    their defaults or given tensors), raises ValueError / TypeError or builds a valid graph; the
    first parameter, when it takes tensors, given a number raises TypeError."""
    fn = FUNCS[name]
    params = [p for p in inspect.signature(fn).parameters.values()
              if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "name"]
    spec = {"forward": {"x": nn.spec.Tensor([2, 4, 4, 4], "float32"), "i": nn.spec.Tensor([3], "int64")}}

    def run(args, kwargs):
        def call(x, i):
            tensors = {"x": x, "i": i}
            return fn(*[tensors.get(a, a) if isinstance(a, str) and a in tensors else a for a in args],
                      **{k: tensors.get(v, v) if isinstance(v, str) and v in tensors else v for k, v in kwargs.items()})
        try:
            Fn(call).export_tvm(spec)
        except (ValueError, TypeError):
            pass

    if params[0].annotation in ("Tensor", "Sequence[Tensor]"):
        with pytest.raises(TypeError):
            Fn(lambda x, i: fn(3)).export_tvm(spec)
    required = [p for p in params if p.default is inspect.Parameter.empty]
    base = ["x" if params[0].annotation in ("Tensor", "Sequence[Tensor]") else 4] + ["x" if p.annotation in ("Tensor", "Tensor | None") else 1 for p in required[1:]]
    for k, p in enumerate(params[1:], start=1):
        for bad in BAD:
            if p.kind == p.KEYWORD_ONLY or k >= len(base):
                run(base, {p.name: bad})
            else:
                args = list(base)
                args[k] = bad
                run(args, {})
