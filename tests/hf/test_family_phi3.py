"""``recipes/hf/phi3.yaml`` on a tiny random transformers ``Phi3ForCausalLM`` as ``save_pretrained`` writes it
(q, k and v fused in one qkv_proj, gate and up in one gate_up_proj, split by weights.transforms): logits, greedy generation over the KV cache and chunked prefill against transformers. Needs torch and
transformers (skipped without)."""
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the HF family tests need torch")
T = pytest.importorskip("transformers", reason="the HF family tests need transformers")

import builder  # noqa: E402
from helpers.hf_causal import check_chunked_prefill, check_generation, check_logits, nudge_and_save  # noqa: E402

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
VOCAB = 128


@pytest.fixture(scope="module")
def phi3(tmp_path_factory):
    path = tmp_path_factory.mktemp("phi3")
    torch.manual_seed(0)
    config = T.Phi3Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5, rope_theta=500.0,
                           pad_token_id=0, bos_token_id=0, eos_token_id=0)
    hf = nudge_and_save(torch, T.Phi3ForCausalLM(config), path)
    m = builder.build(RECIPES / "hf" / "phi3.yaml", weights=path / "model.safetensors",
                      overrides=(f"vocab_size={VOCAB}", "hidden_size=32", "num_layers=2", "intermediate_size=48", "num_heads=4", "num_kv_heads=2", "rope_theta=500.0"))
    return m, hf


def test_phi3_logits_match_transformers(phi3):
    m, hf = phi3
    assert m.params["model.layers.0.self_attn.k_proj.weight"].shape == (16, 32)     # 2 KV heads of 8 from qkv_proj
    assert m.params["model.layers.1.mlp.up_proj.weight"].shape == (48, 32)         # the second half of gate_up_proj
    check_logits(torch, m, hf, VOCAB)


def test_phi3_greedy_generation_over_the_kv_cache_matches_transformers(phi3):
    check_generation(torch, *phi3, VOCAB)


def test_phi3_two_prefill_chunks_equal_one_prefill(phi3):
    check_chunked_prefill(phi3[0], VOCAB)
