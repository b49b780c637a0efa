"""Tensor-parallel ranks compare the weights they loaded (issue 40, item 3): every tensor a rank reads is
digested whole (SHA-256 over all its bytes in the file) while only its shard is kept, so two checkpoints
of the same shapes that differ inside one rank's slice are told apart; ranks given different files end
with a DistributedError naming them, ranks given identical copies run.

The references: ``hashlib.sha256`` of the tensor's bytes as numpy writes them, ``TensorShard.take`` of the
whole array, and one process's results for the same checkpoint."""
from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from runtime.distributed import DistributedError, check_same_weights
from runtime.weights import TensorShard, _Checkpoint, load_params, loaded_weights_digest

from .conftest import mpirun

ROOT = Path(__file__).resolve().parents[2]
LLAMA_W = ROOT / "tests" / "data" / "llama_causal_lm.safetensors"
WORKER = [sys.executable, "tests/distributed/_tp_worker.py"]


@pytest.mark.parametrize("block", [7, 64, 1 << 20])     # a stride longer than a block, a few strides, all at once
@pytest.mark.parametrize("shape,dim,count", [((6, 10), 0, 2), ((6, 10), 1, 2), ((4, 6, 9), 1, 3),
                                             ((4, 6, 9), 2, 3), ((12,), 0, 4), ((5, 8), 1, 4)])
def test_a_shard_read_while_hashing_is_the_shard_and_the_whole_tensors_digest(tmp_path, monkeypatch, block,
                                                                              shape, dim, count):
    rng = np.random.default_rng(0)
    full = rng.standard_normal(shape).astype(np.float32)
    other = rng.integers(-100, 100, (3, 3)).astype(np.int16)
    path = tmp_path / "w.safetensors"
    save_file({"before": other, "t": full, "zafter": other}, str(path))
    monkeypatch.setattr(_Checkpoint, "_SHARD_BLOCK_BYTES", block)
    want = hashlib.sha256(np.ascontiguousarray(full).astype("<f4").tobytes()).hexdigest()
    for index in range(count):
        digests: dict = {}
        with _Checkpoint(path, digests) as ckpt:
            got = ckpt.read("t", TensorShard(dim, index, count))
            plain = ckpt.read("zafter")
        np.testing.assert_array_equal(got, TensorShard(dim, index, count).take(full))
        np.testing.assert_array_equal(plain, other)
        assert digests["t"] == ("float32", shape, want)
        assert digests["zafter"][2] == hashlib.sha256(other.astype("<i2").tobytes()).hexdigest()


def _llama_expected(count: int = 2):
    """The parameters and shards a 2-way tensor-parallel llama reads (from the real recipe)."""
    import schemas
    from builder.build_model import _export, _param_specs, worker_shards
    from builder.quant import QuantizeMapping

    recipe = schemas.load_recipe(ROOT / "recipes" / "llama.yaml", [f"tensor_parallel_shards={count}"])
    _, params, _, _, strategies = _export(recipe, QuantizeMapping())
    expected = {n: (s, d) for n, s, d in _param_specs(params)}
    return recipe, expected, [worker_shards(strategies, r) for r in range(count)]


def _changed_in_one_slice(tmp_path: Path, key: str, index) -> Path:
    """A copy of the llama checkpoint with one value of ``key`` changed (the same shapes and header)."""
    tensors = load_file(str(LLAMA_W))
    t = tensors[key].copy()
    t[index] += 1.0
    tensors[key] = t
    path = tmp_path / "changed.safetensors"
    save_file(tensors, str(path))
    return path


def _digest(recipe, expected, shards, path) -> bytes:
    wdef = recipe.weights
    digests: dict = {}
    load_params(path, expected, prefix=wdef.prefix if wdef else "", name_map=wdef.map if wdef else None,
                shards=shards, digests=digests)
    return loaded_weights_digest(digests)


def test_checkpoints_differing_inside_one_ranks_slice_have_different_digests_on_every_rank(tmp_path):
    recipe, expected, shards = _llama_expected()
    key = "model.layers.1.mlp.down_proj.weight"       # row-parallel: rank 0 keeps columns [0, 344)
    assert any(s.dim == 1 for s in shards[0].values())
    changed = _changed_in_one_slice(tmp_path, key, (7, 3))    # inside rank 0's columns only
    copy = tmp_path / "copy.safetensors"
    shutil.copyfile(LLAMA_W, copy)
    a = [_digest(recipe, expected, shards[r], LLAMA_W) for r in range(2)]
    assert a[0] == a[1] == _digest(recipe, expected, shards[1], copy)     # the same bytes under another name
    # rank 1 never keeps the changed value, yet its digest of the other file differs: whole tensors
    assert _digest(recipe, expected, shards[1], changed) != a[1]
    assert _digest(recipe, expected, shards[0], changed) != a[0]
    assert loaded_weights_digest(None) != a[0]


class _Gathered:
    """A stand-in for a group's allgather: every rank's payload, as rank ``rank`` sees them."""

    def __init__(self, payloads):
        self.payloads, self.rank, self.size = payloads, 0, len(payloads)

    def allgather_bytes(self, data: bytes) -> list[bytes]:
        assert data == self.payloads[self.rank]
        return list(self.payloads)


def test_check_same_weights_names_the_ranks_and_their_files():
    same, other = hashlib.sha256(b"a").digest(), hashlib.sha256(b"b").digest()
    check_same_weights(_Gathered([same + b"/x/a.safetensors", same + b"/y/copy.safetensors"]), same,
                       "/x/a.safetensors")
    group = _Gathered([same + b"/x/a.safetensors", other + b"/x/b.safetensors", same + b"/x/c.safetensors"])
    with pytest.raises(DistributedError) as err:
        check_same_weights(group, same, "/x/a.safetensors")
    text = str(err.value)
    assert "weights differ" in text and "rank(s) 1 " in text and "rank 1: /x/b.safetensors" in text
    assert "rank 0: /x/a.safetensors" in text and "c.safetensors" not in text


# -- two ranks under mpirun --------------------------------------------------------------------------------

@pytest.mark.distributed
def test_ranks_given_checkpoints_of_the_same_shapes_stop_with_the_weights_mismatch(tmp_path):
    changed = _changed_in_one_slice(tmp_path, "model.layers.0.self_attn.q_proj.weight", (5, 9))  # rank 0's rows
    out = tmp_path / "out"
    out.mkdir()
    proc = mpirun([*WORKER, str(out), "llama", str(LLAMA_W), "tensor_parallel_shards=2"],
                  [*WORKER, str(out), "llama", str(changed), "tensor_parallel_shards=2"], ccl_timeout=60, timeout=180)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text[-3000:]
    assert "DistributedError" in text and "weights differ" in text and "rank(s) 1" in text, text[-3000:]
    assert str(changed) in text and not list(out.glob("rank*.npz"))      # no rank ran the model


@pytest.mark.distributed
def test_ranks_given_a_checkpoint_and_random_weights_stop(tmp_path):
    proc = mpirun([*WORKER, str(tmp_path), "llama", str(LLAMA_W), "tensor_parallel_shards=2"],
                  [*WORKER, str(tmp_path), "llama", "-", "tensor_parallel_shards=2"], ccl_timeout=60, timeout=180)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "weights differ" in text and "random weights (seed 0)" in text, text[-3000:]


@pytest.mark.distributed
def test_ranks_given_identical_copies_run_as_one_process(tmp_path):
    import builder

    copy = tmp_path / "copy.safetensors"
    shutil.copyfile(LLAMA_W, copy)
    proc = mpirun([*WORKER, str(tmp_path), "llama", str(LLAMA_W), "tensor_parallel_shards=2"],
                  [*WORKER, str(tmp_path), "llama", str(copy), "tensor_parallel_shards=2"], ccl_timeout=60, timeout=180)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    one = builder.build(ROOT / "recipes" / "llama.yaml", weights=str(LLAMA_W))
    ref = np.load(ROOT / "tests" / "data" / "llama_causal_lm.npz")
    logits = one["forward"](ref["input_ids"])
    for r in range(2):
        np.testing.assert_allclose(np.load(tmp_path / f"rank{r}.npz")["logits"], logits, atol=1e-5, rtol=0)
