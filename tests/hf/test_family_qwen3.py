"""``recipes/hf/qwen3.yaml`` on a Qwen3 checkpoint saved by transformers (``Qwen3ForCausalLM``: q_norm / k_norm
over each head, head_dim from the config, tied or untied lm_head), loaded as saved and compared with transformers:
logits on two input shapes within 1e-4, 16 greedy tokens over prefill + decode equal to ``generate``, a prefill
in two chunks equal to one prefill."""
from pathlib import Path

import numpy as np
import pytest

import builder
from runtime import ContiguousKVCache

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "hf" / "qwen3.yaml"
VARS = ["vocab_size=128", "hidden_size=32", "intermediate_size=48", "num_layers=2", "num_heads=4", "num_kv_heads=2",
        "head_dim=16", "rms_norm_eps=1e-6", "rope_theta=500.0"]


def _saved_qwen3(folder, tied: bool):
    """A seeded 2-layer Qwen3ForCausalLM (head_dim 16 != 32 // 4), every parameter nudged off its init, saved."""
    torch.manual_seed(3)
    cfg = transformers.Qwen3Config(vocab_size=128, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
                                   tie_word_embeddings=tied, pad_token_id=0, bos_token_id=0, eos_token_id=0,
                                   rope_parameters={"rope_type": "default", "rope_theta": 500.0},
                                   attn_implementation="eager")
    hf = transformers.Qwen3ForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(0.1 * torch.randn_like(p))
    hf.save_pretrained(str(folder))
    return hf


@pytest.mark.parametrize("tied", [False, True])
def test_qwen3_matches_transformers(tmp_path, tied):
    hf = _saved_qwen3(tmp_path, tied)
    tie = ["lm_head_weight=model.embed_tokens.weight"] if tied else []
    model = builder.build(RECIPE, VARS + tie, weights=tmp_path / "model.safetensors")
    rng = np.random.default_rng(1)
    for shape in ((1, 5), (2, 11)):
        ids = rng.integers(0, 128, shape, dtype=np.int64)
        with torch.no_grad():
            ref = hf(torch.from_numpy(ids)).logits.numpy()
        np.testing.assert_allclose(model["forward"](ids), ref, atol=1e-4, rtol=0)
    prompt = rng.integers(0, 128, (2, 6), dtype=np.int64)
    with torch.no_grad():
        want = hf.generate(torch.from_numpy(prompt), do_sample=False, max_new_tokens=16, min_new_tokens=16,
                           pad_token_id=0)[:, 6:].numpy()
    np.testing.assert_array_equal(model.generate(prompt, 16), want)
    whole = model["prefill"](prompt, ContiguousKVCache(), 6)
    cache = ContiguousKVCache()
    model["prefill"](prompt[:, :4], cache, 4)
    np.testing.assert_allclose(model["prefill"](prompt[:, 4:], cache, 6), whole, atol=1e-5, rtol=0)
    q_norm = hf.model.layers[1].self_attn.q_norm.weight.detach().numpy()
    np.testing.assert_array_equal(model.params["model.layers.1.self_attn.q_norm.weight"], q_norm)
