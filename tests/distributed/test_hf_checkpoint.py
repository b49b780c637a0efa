"""``mpirun -n 2 build DIR tensor_parallel_shards=2 --prompt-ids ...`` on a Qwen2 checkpoint saved by
transformers (q / k / v biases split by columns with their heads): the ids transformers' ``generate`` gives."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from helpers.hf_checkpoints import save_tiny

from .conftest import mpirun

pytestmark = pytest.mark.distributed


def test_two_ranks_generate_as_transformers(tmp_path):
    pytest.importorskip("transformers")
    import torch

    hf = save_tiny(tmp_path, "Qwen2Config", "Qwen2ForCausalLM", seed=9, vocab_size=100, hidden_size=64,
                   intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                   tie_word_embeddings=True)
    prompt = np.array([[4, 8, 15, 16, 23]])
    with torch.no_grad():
        want = hf.generate(torch.from_numpy(prompt), do_sample=False, max_new_tokens=8, min_new_tokens=8,
                           pad_token_id=0)[0, 5:].tolist()
    build = str(Path(sys.executable).parent / "build")
    proc = mpirun(*[[build, str(tmp_path), "--no-ir", "--quiet", "--prompt-ids", "4,8,15,16,23", "--max-new-tokens",
                     "8", "tensor_parallel_shards=2"]] * 2)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines().count(",".join(map(str, want))) == 1, proc.stdout
