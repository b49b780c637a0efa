"""``mpirun -n 2 build DIR tensor_parallel_shards=2 --prompt-ids ...`` on checkpoints saved by transformers: Qwen2
(q / k / v biases split by columns with their heads), Phi-3 (the fused ``qkv_proj`` / ``gate_up_proj`` split by
``weights.transforms`` before each rank takes its columns) and GPT-2 (Conv1D weights transposed, ``c_attn`` split):
the ids transformers' ``generate`` gives."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from helpers.hf_checkpoints import save_tiny

from .conftest import mpirun

pytestmark = pytest.mark.distributed


_LLAMA_SIZES = dict(vocab_size=100, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2)
#: family -> (config class, model class, config fields)
CHECKPOINTS = {
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {**_LLAMA_SIZES, "tie_word_embeddings": True}),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {**_LLAMA_SIZES, "pad_token_id": 0,
                                              "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", {"vocab_size": 100, "n_positions": 64, "n_embd": 64, "n_layer": 2,
                                               "n_head": 4, "n_inner": 96}),
}


@pytest.mark.parametrize("family", sorted(CHECKPOINTS))
def test_two_ranks_generate_as_transformers(tmp_path, family):
    pytest.importorskip("transformers")
    import torch

    cfg_cls, model_cls, fields = CHECKPOINTS[family]
    hf = save_tiny(tmp_path, cfg_cls, model_cls, seed=9, **fields)
    prompt = np.array([[4, 8, 15, 16, 23]])
    with torch.no_grad():
        want = hf.generate(torch.from_numpy(prompt), do_sample=False, max_new_tokens=8, min_new_tokens=8,
                           pad_token_id=0)[0, 5:].tolist()
    build = str(Path(sys.executable).parent / "build")
    proc = mpirun(*[[build, str(tmp_path), "--no-ir", "--quiet", "--prompt-ids", "4,8,15,16,23", "--max-new-tokens",
                     "8", "tensor_parallel_shards=2"]] * 2)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines().count(",".join(map(str, want))) == 1, proc.stdout
