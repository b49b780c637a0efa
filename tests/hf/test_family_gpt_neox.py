"""``recipes/hf/gpt_neox.yaml`` on a GPT-NeoX checkpoint saved by transformers (``GPTNeoXForCausalLM``: a per-head
fused query_key_value reordered and split by weights.transforms, RoPE on half of each head, the parallel and the
sequential residual), loaded as saved and compared with transformers: logits on two input shapes within 1e-4,
16 greedy tokens over prefill + decode equal to ``generate``, a prefill in two chunks equal to one prefill."""
from pathlib import Path

import numpy as np
import pytest

import builder
from runtime import ContiguousKVCache

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "hf" / "gpt_neox.yaml"
VARS = ["vocab_size=128", "hidden_size=32", "intermediate_size=48", "num_layers=2", "num_heads=4", "rotary_dim=4",
        "rope_theta=500.0"]


def _saved_neox(folder, parallel: bool):
    """A seeded 2-layer GPTNeoXForCausalLM (head_dim 8, rotary_pct 0.5), every parameter nudged off its init, saved."""
    torch.manual_seed(5)
    cfg = transformers.GPTNeoXConfig(vocab_size=128, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                     num_attention_heads=4, use_parallel_residual=parallel, pad_token_id=0,
                                     bos_token_id=0, eos_token_id=0, attn_implementation="eager",
                                     rope_parameters={"rope_type": "default", "rope_theta": 500.0,
                                                      "partial_rotary_factor": 0.5})
    hf = transformers.GPTNeoXForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(0.1 * torch.randn_like(p))
    hf.save_pretrained(str(folder))
    return hf


@pytest.mark.parametrize("parallel", [True, False])
def test_gpt_neox_matches_transformers(tmp_path, parallel):
    hf = _saved_neox(tmp_path, parallel)
    layer = [] if parallel else ["decoder_layer=GPTNeoXLayer"]
    model = builder.build(RECIPE, VARS + layer, weights=tmp_path / "model.safetensors")
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
    # head 1's k rows are rows [1, 1, :] of the file's [heads, 3, head_dim] query_key_value
    qkv = hf.gpt_neox.layers[0].attention.query_key_value.weight.detach().numpy().reshape(4, 3, 8, 32)
    np.testing.assert_array_equal(model.params["gpt_neox.layers.0.attention.k_proj.weight"][8:16], qkv[1, 1])
