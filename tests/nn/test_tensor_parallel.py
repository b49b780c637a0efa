"""Tensor parallelism without a launcher: how layers split (shapes, shard strategies, the all-reduce in the
IR), recipe errors for splits that do not divide, sharded weight loading and random weights. The
multi-rank runs are in ``tests/distributed/test_tensor_parallel.py``.

The numeric check here plays the workers' parts in one process: each worker's sharded Linear pair
(column then row) is computed with numpy on the shards the loader returns, and the sum over workers
must equal the unsplit layer (the algebra ``ccl_allreduce`` completes at run time).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import schemas
from builder import nn
from builder.nn.tensor_parallel import SHARD_ATTR, ShardError, ShardSingleDim, param_shards
from builder.build_model import _export, random_params, worker_shards
from builder.quant import QuantizeMapping
from runtime.weights import TensorShard, WeightsError, load_params, save_params

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "recipes"


# -- layers ------------------------------------------------------------------------------------------

def test_linear_column_and_row_shapes_and_strategies():
    col = nn.Linear(16, 24, bias=True, tensor_parallel="column", tensor_parallel_shards=4)
    assert tuple(col.weight.shape) == (6, 16) and tuple(col.bias.shape) == (6,)
    assert col.weight.attrs[SHARD_ATTR] == ShardSingleDim(0, 4) == col.bias.attrs[SHARD_ATTR]
    row = nn.Linear(24, 16, bias=True, tensor_parallel="row", tensor_parallel_shards=4)
    assert tuple(row.weight.shape) == (16, 6) and tuple(row.bias.shape) == (16,)
    assert row.weight.attrs[SHARD_ATTR] == ShardSingleDim(1, 4)
    assert SHARD_ATTR not in row.bias.attrs            # the bias is added once, after the all-reduce
    one = nn.Linear(24, 16, tensor_parallel="row")     # one shard: a plain Linear
    assert tuple(one.weight.shape) == (16, 24) and not one.weight.attrs and one.tensor_parallel is None
    with pytest.raises(ShardError, match=r"out_features \(10\) is not divisible by tensor_parallel_shards \(4\)") as e:
        nn.Linear(16, 10, tensor_parallel="column", tensor_parallel_shards=4)
    assert e.value.field == "out_features"
    with pytest.raises(ValueError, match="'column', 'row' or None"):
        nn.Linear(16, 16, tensor_parallel="diagonal", tensor_parallel_shards=2)
    with pytest.raises(ValueError, match="positive int"):
        nn.Linear(16, 16, tensor_parallel="row", tensor_parallel_shards=0)


def test_row_parallel_linear_all_reduces_before_its_bias():
    class Pair(nn.Module):
        def __init__(self):
            self.up = nn.Linear(8, 32, tensor_parallel="column", tensor_parallel_shards=2)
            self.down = nn.Linear(32, 8, tensor_parallel="row", tensor_parallel_shards=2)

        def forward(self, x):
            return self.down(nn.op.silu(self.up(x)))

    mod, _ = Pair().export_tvm({"forward": {"x": nn.spec.Tensor(["n", 8], "float32")}})
    lines = [ln.strip() for ln in mod.script().splitlines()]
    reduce_at = next(i for i, ln in enumerate(lines) if "R.ccl.allreduce(" in ln)
    assert 'op_type="sum"' in lines[reduce_at] and "(n, 8)" in lines[reduce_at]
    assert any("R.add(allreduce" in ln for ln in lines[reduce_at + 1:]), lines   # bias after the sum
    assert sum("R.ccl.allreduce(" in ln for ln in lines) == 1


def test_quantized_row_parallel_linear_keeps_the_all_reduce():
    from builder.quant import QuantizedLinear
    from schemas.models import QUANTIZATION_PRESETS

    src = nn.Linear(64, 32, bias=False, tensor_parallel="row", tensor_parallel_shards=2)
    q = QuantizedLinear.from_linear(src, QUANTIZATION_PRESETS["q4f32_1"])
    assert q.in_features == 32 and q.tensor_parallel == "row" and q.tensor_parallel_shards == 2
    mod, _ = q.export_tvm({"forward": {"x": nn.spec.Tensor([1, 32], "float32")}})
    assert "R.ccl.allreduce(" in mod.script()


def test_attention_splits_heads_and_keeps_gqa_groups_whole():
    att = nn.Attention(64, num_heads=8, num_kv_heads=4, head_dim=8, tensor_parallel_shards=2)
    assert (att.local_num_heads, att.local_num_kv_heads) == (4, 2) and (att.num_heads, att.num_kv_heads) == (8, 4)
    assert tuple(att.q_proj.weight.shape) == (32, 64) and tuple(att.k_proj.weight.shape) == (16, 64)
    assert tuple(att.o_proj.weight.shape) == (64, 32) and att.o_proj.tensor_parallel == "row"
    whole = nn.Attention(64, num_heads=8, num_kv_heads=4, head_dim=8, tensor_parallel_shards=2,
                         tensor_parallel=False)
    assert whole.local_num_heads == 8 and not param_shards(whole)
    with pytest.raises(ShardError, match=r"num_kv_heads \(4\) is not divisible by tensor_parallel_shards \(8\).*"
                                         r"group of 2 query heads") as e:
        nn.Attention(64, num_heads=8, num_kv_heads=4, head_dim=8, tensor_parallel_shards=8)
    assert e.value.field == "num_kv_heads"


# -- recipes -----------------------------------------------------------------------------------------

def _exported(recipe: str, *overrides: str):
    r = schemas.load_recipe(RECIPES / recipe, overrides)
    mapping = QuantizeMapping()
    irmod, params, spec, module, strategies = _export(r, mapping)
    return r, irmod, params, strategies, mapping


@pytest.mark.parametrize("override, field, line_of", [
    ("tensor_parallel_shards=3", "blocks.LlamaDecoderLayer.layers.self_attn.num_heads", "num_heads: ${num_heads}"),
    ("tensor_parallel_shards=8", "blocks.LlamaDecoderLayer.layers.self_attn.num_kv_heads",
     "num_kv_heads: ${num_kv_heads}"),
])
def test_splits_that_do_not_divide_are_recipe_errors_at_the_field(override, field, line_of):
    text = (RECIPES / "llama.yaml").read_text()
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if line_of in ln)
    with pytest.raises(schemas.RecipeError) as e:
        _exported("llama.yaml", override)
    (issue,) = e.value.issues
    assert issue.line == line and issue.path == field, str(issue)
    assert "tensor_parallel_shards" in issue.message


def test_fused_qkv_under_tensor_parallelism_is_a_recipe_error_at_the_field():
    """A fused qkv_proj cannot be cut into one contiguous slice per worker (each needs rows of q, k and v):
    the error names the attention's fused_qkv; ``tensor_parallel: false`` keeps the layer whole."""
    fused = "blocks.LlamaDecoderLayer.layers.self_attn.fused_qkv=true"
    with pytest.raises(schemas.RecipeError) as e:
        _exported("llama.yaml", "tensor_parallel_shards=2", fused)
    (issue,) = e.value.issues
    assert issue.path == "blocks.LlamaDecoderLayer.layers.self_attn.fused_qkv", str(issue)
    assert "does not split across 2 workers" in issue.message
    _, _, params, strategies, _ = _exported("llama.yaml", "tensor_parallel_shards=2", fused,
                                            "blocks.LlamaDecoderLayer.layers.self_attn.tensor_parallel=false")
    assert not any("qkv_proj" in n for n in strategies) and any("qkv_proj" in n for n, _ in params)


def test_mlp_split_that_does_not_divide_names_the_linear_field():
    with pytest.raises(schemas.RecipeError) as e:
        _exported("llama.yaml", "tensor_parallel_shards=2", "intermediate_size=687", "num_heads=2",
                  "num_kv_heads=2")
    paths = {i.path for i in e.value.issues}
    assert "blocks.LlamaMLP.layers.gate_proj.out_features" in paths, paths


def test_shards_bounds_and_type_are_validated():
    for bad in ("tensor_parallel_shards=0", "tensor_parallel_shards=two", "tensor_parallel_shards=100000"):
        with pytest.raises(schemas.RecipeError) as e:
            schemas.load_recipe(RECIPES / "llama.yaml", [bad])
        assert e.value.issues[0].path == "tensor_parallel_shards"


def test_llama_recipe_ir_of_a_worker():
    r, irmod, params, strategies, _ = _exported("llama.yaml", "tensor_parallel_shards=2")
    shapes = {n: tuple(p.shape) for n, p in params}
    assert shapes["model.layers.0.self_attn.q_proj.weight"] == (128, 256)
    assert shapes["model.layers.0.mlp.down_proj.weight"] == (256, 344)
    assert shapes["model.embed_tokens.weight"] == (1000, 256) and shapes["lm_head.weight"] == (1000, 256)
    assert strategies["model.layers.1.mlp.down_proj.weight"] == ShardSingleDim(1, 2)
    assert "model.norm.weight" not in strategies and "lm_head.weight" not in strategies
    text = irmod.script()
    # per layer: o_proj and down_proj all-reduce; per function: input_ids broadcast from worker 0
    for fname, layers in (("forward", 2), ("prefill", 2), ("decode", 2)):
        body = text.split(f"def {fname}(")[1].split("\n    @R.function")[0]
        assert body.count("R.ccl.allreduce(") == 2 * layers, fname
        assert body.count("R.ccl.broadcast_from_worker0(input_ids)") == 1, fname


# -- weights -----------------------------------------------------------------------------------------

def test_tensor_shard_shapes_and_take():
    s = TensorShard(1, 2, 3)
    assert s.full_shape((4, 5, 6)) == (4, 15, 6)
    full = np.arange(4 * 15 * 6).reshape(4, 15, 6)
    np.testing.assert_array_equal(s.take(full), full[:, 10:15, :])
    for bad in ((0, 3, 3), (0, -1, 2), (-1, 0, 2), (0, 0, 0)):
        with pytest.raises(ValueError):
            TensorShard(*bad)
    with pytest.raises(ValueError, match="not an axis"):
        TensorShard(2, 0, 2).full_shape((4, 4))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32"])
@pytest.mark.parametrize("shape, dim, count", [((12, 10), 0, 3), ((12, 10), 1, 2), ((4, 6, 10), 1, 3),
                                               ((4, 6, 10), 2, 5), ((3, 2000, 4), 1, 2), ((30,), 0, 3)])
def test_load_params_reads_each_shard_of_the_whole_tensor(tmp_path, dtype, shape, dim, count, monkeypatch):
    from runtime import weights as w

    monkeypatch.setattr(w._Checkpoint, "_SHARD_BLOCK_BYTES", 256)   # exercise blocked and one-by-one reads
    rng = np.random.default_rng(1)
    full = (rng.integers(0, 2**16, size=shape).astype(np.uint16) if dtype == "bfloat16"
            else (rng.standard_normal(shape) * 100).astype(dtype))
    path = tmp_path / "w.safetensors"
    save_params(path, {"t": full, "other": np.ones(3, np.float32)}, dtypes={"t": dtype, "other": "float32"})
    pieces = []
    for index in range(count):
        shard = TensorShard(dim, index, count)
        local = list(shape)
        local[dim] //= count
        got = load_params(path, {"t": (local, dtype), "other": ((3,), "float32")}, shards={"t": shard})
        assert got["t"].flags.c_contiguous and got["t"].dtype == full.dtype
        np.testing.assert_array_equal(got["t"], shard.take(full))
        pieces.append(got["t"])
    np.testing.assert_array_equal(np.concatenate(pieces, axis=dim), full)


def test_load_params_shards_a_conversion_source_and_reports_whole_shapes(tmp_path):
    full = np.random.default_rng(2).standard_normal((8, 6)).astype(np.float32)
    path = tmp_path / "w.safetensors"
    save_params(path, {"w": full})
    from runtime.weights import ParamConversion

    conv = {"w": ParamConversion(("w_half",), lambda a: [a.astype(np.float16)], (8, 3))}
    got = load_params(path, {"w_half": ((8, 3), "float16")}, conversions=conv, shards={"w": TensorShard(1, 1, 2)})
    np.testing.assert_array_equal(got["w_half"], full[:, 3:].astype(np.float16))
    with pytest.raises(WeightsError, match=r"'w' has shape \(8, 6\), parameter 'w' expects \(8, 9\)"):
        load_params(path, {"w": ((8, 3), "float32")}, shards={"w": TensorShard(1, 0, 3)})


def test_random_weights_of_the_workers_put_together_equal_one_process():
    _, _, params1, _, _ = _exported("llama.yaml")
    specs1 = [(n, tuple(p.shape), p.dtype) for n, p in params1]
    one = random_params(specs1, seed=5)
    _, _, params2, strategies, _ = _exported("llama.yaml", "tensor_parallel_shards=2")
    specs2 = [(n, tuple(p.shape), p.dtype) for n, p in params2]
    parts = [random_params(specs2, seed=5, shards=worker_shards(strategies, rank)) for rank in (0, 1)]
    for name, value in one.items():
        if name in strategies:
            joined = np.concatenate([p[name] for p in parts], axis=strategies[name].dim)
            np.testing.assert_array_equal(joined, value)
        else:
            np.testing.assert_array_equal(parts[0][name], value)
            np.testing.assert_array_equal(parts[1][name], value)


def test_workers_column_row_pair_sums_to_the_unsplit_mlp(tmp_path):
    """The LlamaMLP of the recipe at 2 shards, computed per worker with numpy from the shards the loader
    gives, summed over workers (the all-reduce), equals the whole MLP in float64."""
    rng = np.random.default_rng(3)
    h, i = 256, 688
    wg, wu, wd = ((rng.standard_normal(s) * 0.05).astype(np.float32).astype(np.float64)
                  for s in ((i, h), (i, h), (h, i)))
    path = tmp_path / "mlp.safetensors"
    save_params(path, {"g": wg.astype(np.float32), "u": wu.astype(np.float32), "d": wd.astype(np.float32)})
    x = rng.standard_normal((3, h))

    def silu(a):
        return a / (1 + np.exp(-a))

    whole = (silu(x @ wg.T) * (x @ wu.T)) @ wd.T
    total = np.zeros_like(whole)
    for rank in range(2):
        shards = {"g": TensorShard(0, rank, 2), "u": TensorShard(0, rank, 2), "d": TensorShard(1, rank, 2)}
        p = load_params(path, {"g": ((i // 2, h), "float32"), "u": ((i // 2, h), "float32"),
                               "d": ((h, i // 2), "float32")}, shards=shards)
        g, u, d = (p[k].astype(np.float64) for k in "gud")
        total += (silu(x @ g.T) * (x @ u.T)) @ d.T
    np.testing.assert_allclose(total, whole, rtol=1e-6, atol=1e-6)


def test_validate_checks_a_checkpoint_against_a_worker_s_shards(tmp_path):
    """``build --validate tensor_parallel_shards=2`` needs no launcher: it binds rank 0's shards of the file;
    a file whose split tensors are too small for the whole shapes is refused, naming them."""
    from builder.build_model import validate

    weights = ROOT / "tests" / "data" / "llama_causal_lm.safetensors"
    report = validate(RECIPES / "llama.yaml", ("tensor_parallel_shards=2",), weights=weights)
    assert report.weights_checked
    shapes = {n: s for n, s, _ in report.param_specs}
    assert shapes["model.layers.0.mlp.up_proj.weight"] == (344, 256)
    strategies = _exported("llama.yaml", "tensor_parallel_shards=2")[3]
    halves = load_params(weights, {n: (s, "float32") for n, s, _ in report.param_specs},
                         shards=worker_shards(strategies, 0))
    small = tmp_path / "shard0.safetensors"      # a rank's shards saved as if they were the whole model
    save_params(small, halves)
    with pytest.raises(WeightsError, match=r"'model.layers.0.mlp.up_proj.weight' has shape \(344, 256\), "
                                           r"parameter 'model.layers.0.mlp.up_proj.weight' expects \(688, 256\)"):
        validate(RECIPES / "llama.yaml", ("tensor_parallel_shards=2",), weights=small)
