"""``recipes/hf/gemma.yaml`` on a tiny random transformers ``GemmaForCausalLM`` as ``save_pretrained`` writes it
(RMSNorm weights stored as offsets from 1, a sqrt(hidden_size)-scaled embedding, head_dim 16 with hidden 32 / 4 heads, no lm_head.weight: tied): logits, greedy generation over the KV cache and chunked prefill against transformers. Needs torch and
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
def gemma(tmp_path_factory):
    path = tmp_path_factory.mktemp("gemma")
    torch.manual_seed(0)
    config = T.GemmaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
                            rope_theta=10000.0, pad_token_id=0, bos_token_id=0, eos_token_id=0)
    hf = nudge_and_save(torch, T.GemmaForCausalLM(config), path)
    m = builder.build(RECIPES / "hf" / "gemma.yaml", weights=path / "model.safetensors",
                      overrides=(f"vocab_size={VOCAB}", "hidden_size=32", "num_layers=2", "intermediate_size=64", "num_heads=4", "num_kv_heads=2", "head_dim=16"))
    return m, hf


def test_gemma_logits_match_transformers(gemma):
    m, hf = gemma
    assert m.params["model.layers.0.self_attn.q_proj.weight"].shape == (64, 32)     # 4 heads x head_dim 16
    check_logits(torch, m, hf, VOCAB)


def test_gemma_greedy_generation_over_the_kv_cache_matches_transformers(gemma):
    check_generation(torch, *gemma, VOCAB)


def test_gemma_two_prefill_chunks_equal_one_prefill(gemma):
    check_chunked_prefill(gemma[0], VOCAB)
