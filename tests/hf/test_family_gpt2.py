"""``recipes/hf/gpt2.yaml`` on a tiny random transformers ``GPT2LMHeadModel`` as ``save_pretrained`` writes it
(Conv1D weights stored (in, out), a fused c_attn, no lm_head.weight: tied): logits, greedy generation over the KV
cache and chunked prefill against transformers. Needs torch and transformers (skipped without)."""
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the HF family tests need torch")
T = pytest.importorskip("transformers", reason="the HF family tests need transformers")

import builder  # noqa: E402
from helpers.hf_causal import check_chunked_prefill, check_generation, check_logits, nudge_and_save  # noqa: E402
RECIPES = Path(__file__).resolve().parents[2] / "recipes"

VOCAB = 128


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    path = tmp_path_factory.mktemp("gpt2")
    torch.manual_seed(0)
    config = T.GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=4, n_inner=48,
                          layer_norm_epsilon=1e-5, bos_token_id=0, eos_token_id=0)
    hf = nudge_and_save(torch, T.GPT2LMHeadModel(config), path)
    with pytest.warns(Warning, match=r"attn\.(masked_)?bias' matches no tensor"):   # a new file has no causal-mask buffers
        m = builder.build(RECIPES / "hf" / "gpt2.yaml", weights=path / "model.safetensors",
                          overrides=(f"vocab_size={VOCAB}", "hidden_size=32", "num_heads=4", "num_layers=2",
                                     "intermediate_size=48", "max_position_embeddings=64"))
    return m, hf


def test_gpt2_logits_match_transformers(gpt2):
    m, hf = gpt2
    assert m.params["h.0.attn.q_proj.weight"].shape == (32, 32)
    assert m.params["h.1.mlp.c_fc.weight"].shape == (48, 32)      # (out, in): transposed from the file's (in, out)
    check_logits(torch, m, hf, VOCAB)


def test_gpt2_greedy_generation_over_the_kv_cache_matches_transformers(gpt2):
    check_generation(torch, *gpt2, VOCAB)


def test_gpt2_two_prefill_chunks_equal_one_prefill(gpt2):
    check_chunked_prefill(gpt2[0], VOCAB)
