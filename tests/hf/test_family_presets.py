"""The causal families' ``build DIR`` under a quantization preset: ``quantization=q8f32_1`` (8-bit group-quantized
weights, float32 activations) stays close to transformers' float logits, and its prefill + decode over the KV cache
equal its own forward (the quantized kernels serve all three functions alike). Checkpoints saved by transformers
(tests/helpers/hf_checkpoints.py)."""
import numpy as np
import pytest

from helpers.hf_checkpoints import save_tiny

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import builder  # noqa: E402
from runtime import ContiguousKVCache  # noqa: E402

pytestmark = pytest.mark.hf

_LLAMA = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, pad_token_id=0, bos_token_id=0, eos_token_id=0)
_ROPE = {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}

#: family -> (config class, model class, config fields): the families whose layers differ from Llama's (fused or
#: transposed weights split at load, qk_norm, windows and soft-caps, partial RoPE); Llama, Qwen2, Mistral and Gemma
#: run the same quantized layers (tests/hf/test_llama.py builds Llama under q4f16_1)
CAUSAL = {
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {**_LLAMA, "head_dim": 16, **_ROPE}),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {**_LLAMA, "head_dim": 16, "sliding_window": 4,
                                                     "query_pre_attn_scalar": 16, **_ROPE}),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {**_LLAMA, **_ROPE}),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM",
                 {**{k: v for k, v in _LLAMA.items() if k != "num_key_value_heads"},
                  "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}}),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", {"vocab_size": 96, "n_positions": 64, "n_embd": 64, "n_layer": 2,
                                               "n_head": 4, "n_inner": 96, "bos_token_id": 0, "eos_token_id": 0}),
}


@pytest.mark.filterwarnings("ignore:.*matches no tensor")   # GPT-2's rule for old files' mask buffers
@pytest.mark.parametrize("family", sorted(CAUSAL))
def test_causal_family_under_q8f32_1(tmp_path, family):
    cfg_cls, model_cls, fields = CAUSAL[family]
    hf = save_tiny(tmp_path, cfg_cls, model_cls, seed=21, **fields)
    m = builder.build(tmp_path, ["quantization=q8f32_1"])
    assert any(name.endswith("q_weight") for name in m.params), sorted(m.params)[:4]   # really quantized
    ids = np.random.default_rng(3).integers(0, 96, (2, 7), dtype=np.int64)
    with torch.no_grad():
        ref = hf(torch.from_numpy(ids)).logits.numpy()
    got = m["forward"](ids)
    # 8-bit groups of 32: a few tenths of a percent per weight, well under 5% of the logits' spread
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 0.05
    cache = ContiguousKVCache()
    m["prefill"](ids[:, :5], cache, 5)
    steps = [m["decode"](ids[:, t:t + 1], cache, t + 1) for t in (5, 6)]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), got[:, 5:7], atol=1e-4, rtol=0)

