"""``build DIR`` on GPT-2 checkpoints saved by transformers (``recipes/hf/gpt2.yaml``): a ``GPT2LMHeadModel``
(Conv1D weights stored (in, out), a fused c_attn, no lm_head.weight: tied), compared with transformers (logits on
two shapes, 16 greedy tokens over prefill + decode, chunked prefill: tests/helpers/hf_checkpoints.py); a bare
``GPT2Model`` (no ``transformer.`` prefix); an untied GPT2LMHeadModel (the tie rule merged into the recipe's map only
when tied); and a config the family refuses."""
import numpy as np
import pytest

import builder
from builder.checkpoint import HFCheckpointError, resolve_checkpoint
from helpers.hf_checkpoints import check_causal_lm, save_tiny
from helpers.ragged_decode import check_ragged_decode
from runtime.weights import WeightsWarning

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.hf   # a checkpoint saved by transformers (pyproject's markers)

SMALL = dict(vocab_size=128, n_positions=64, n_embd=32, n_layer=2, n_head=4, n_inner=48, bos_token_id=0,
             eos_token_id=0)
NO_MASK_BUFFERS = r"attn\.(masked_)?bias' matches no tensor"   # a file of transformers 5 has no causal-mask buffers


def test_gpt2_lm_head_model_matches_transformers(tmp_path):
    hf = save_tiny(tmp_path, "GPT2Config", "GPT2LMHeadModel", seed=11, **SMALL)
    with pytest.warns(WeightsWarning, match=NO_MASK_BUFFERS):
        m = check_causal_lm(tmp_path, hf, 128)
    assert m.params["h.1.mlp.c_fc.weight"].shape == (48, 32)      # (out, in): transposed from the file's (in, out)
    np.testing.assert_array_equal(m.params["h.0.attn.k_proj.bias"], hf.transformer.h[0].attn.c_attn.bias[32:64].detach().numpy())


def test_gpt2_ragged_decode_equals_each_sequence_alone(tmp_path):
    """Learned absolute positions (wpe) taken per row from the paged cache: sequences of different lengths
    decoded together equal each run alone (issue 43)."""
    save_tiny(tmp_path, "GPT2Config", "GPT2LMHeadModel", seed=13, **SMALL)
    with pytest.warns(WeightsWarning, match=NO_MASK_BUFFERS):
        m = builder.build(tmp_path)
    prompts = [np.random.default_rng(5 + i).integers(0, 128, n) for i, n in enumerate((6, 1, 10))]
    check_ragged_decode(m, prompts, 5, order=[2, 0, 1])


def test_a_bare_gpt2_model_gives_the_logits_of_its_tied_embedding(tmp_path):
    hf = save_tiny(tmp_path, "GPT2Config", "GPT2Model", seed=12, **SMALL)
    with pytest.warns(WeightsWarning, match=NO_MASK_BUFFERS):
        m = builder.build(tmp_path)
    ids = np.random.default_rng(0).integers(0, 128, (2, 7))
    with torch.no_grad():
        ref = (hf(torch.from_numpy(ids)).last_hidden_state @ hf.wte.weight.T).numpy()
    np.testing.assert_allclose(m["forward"](ids), ref, rtol=0, atol=1e-4)


def test_gpt2_configs_the_recipe_does_not_compute_are_refused(tmp_path):
    save_tiny(tmp_path, "GPT2Config", "GPT2LMHeadModel", **SMALL, scale_attn_by_inverse_layer_idx=True)
    with pytest.raises(HFCheckpointError, match="scale_attn_by_inverse_layer_idx = true: the Attention layer "
                                                "scales every layer alike"):
        builder.build(tmp_path)


@pytest.mark.parametrize("tied", [True, False])
def test_the_tie_rule_merges_into_the_recipe_map(tmp_path, tied):
    """tie_word_embeddings true adds lm_head.weight -> transformer.wte.weight to the recipe's own map (its
    attn.o_proj -> attn.c_proj entry kept); false reads the file's lm_head.weight (an untied GPT-2)."""
    hf = save_tiny(tmp_path, "GPT2Config", "GPT2LMHeadModel", seed=16, **SMALL, tie_word_embeddings=tied)
    overrides = resolve_checkpoint(tmp_path).overrides
    maps = [o for o in overrides if o.startswith("weights.map=")]
    if tied:
        assert maps == ['weights.map={"h.{i}.attn.o_proj.": "${weights_prefix}h.{i}.attn.c_proj.", '
                        '"lm_head.weight": "${weights_prefix}wte.weight"}']
    else:
        assert maps == [] and "lm_head_weight=lm_head.weight" in overrides
    with pytest.warns(WeightsWarning, match=NO_MASK_BUFFERS):
        m = builder.build(tmp_path)
    ids = np.random.default_rng(2).integers(0, 128, (2, 7))
    with torch.no_grad():
        np.testing.assert_allclose(m["forward"](ids), hf(torch.from_numpy(ids)).logits.numpy(), rtol=0, atol=1e-4)
    assert not np.array_equal(hf.lm_head.weight.detach().numpy(), hf.transformer.wte.weight.detach().numpy()) or tied
