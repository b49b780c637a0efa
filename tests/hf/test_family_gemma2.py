"""``build DIR`` on a Gemma 2 checkpoint saved by transformers (``Gemma2ForCausalLM``, ``recipes/hf/gemma2.yaml``):
4 layers (sliding window 3 on layers 0 and 2, all positions on 1 and 3), four 1 + weight RMSNorms a layer,
query_pre_attn_scalar 8 (not head_dim 16), attention scores capped at 5 and logits at 3, head_dim 16 with hidden 32 /
4 heads, a tied lm_head; compared with transformers (logits on two shapes longer than the window, 16 greedy tokens
against its uncached forward, chunked prefill: tests/helpers/hf_checkpoints.py). Each of the softcaps and the
window changes the logits (an override dropping it fails the comparison); a ``layer_types`` the recipe does not
compute is refused."""
import json

import numpy as np
import pytest

import builder
from builder.checkpoint import HFCheckpointError
from helpers.hf_checkpoints import check_causal_lm, save_tiny
from helpers.ragged_decode import check_ragged_decode

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.hf   # a checkpoint saved by transformers (pyproject's markers)

SMALL = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6, pad_token_id=0, bos_token_id=0, eos_token_id=0,
             query_pre_attn_scalar=8, attn_logit_softcapping=5.0, final_logit_softcapping=3.0, sliding_window=3,
             rope_parameters={"rope_type": "default", "rope_theta": 500.0})


@pytest.fixture(scope="module")
def gemma2(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gemma2")
    return folder, save_tiny(folder, "Gemma2Config", "Gemma2ForCausalLM", seed=21, **SMALL)


def test_gemma2_matches_transformers(gemma2):
    folder, hf = gemma2
    assert hf.config.layer_types == ["sliding_attention", "full_attention"] * 2
    m = check_causal_lm(folder, hf, 128, shapes=((1, 5), (2, 11)), uncached=True)
    assert m.params["model.layers.3.post_feedforward_layernorm.weight"].shape == (32,)
    assert m.params["model.layers.0.self_attn.q_proj.weight"].shape == (64, 32)   # 4 heads x head_dim 16


def test_gemma2_ragged_decode_equals_each_sequence_alone(gemma2):
    """Sequences longer than the window (3) in one paged cache, decoded together: right-aligned rows keep the
    window's token distances, so each equals its run alone (issue 43)."""
    m = builder.build(gemma2[0])
    prompts = [np.random.default_rng(7 + i).integers(0, 128, n) for i, n in enumerate((2, 7, 4))]
    check_ragged_decode(m, prompts, 5)


@pytest.mark.parametrize("dropped", ["attn_logit_softcapping=null", "sliding_window=null"])   # the two per-score ones
def test_each_feature_changes_the_logits(gemma2, dropped):
    """The comparison above can fail: without the attention cap or the window the logits depart from HF's."""
    folder, hf = gemma2
    ids = np.random.default_rng(4).integers(0, 128, (2, 11), dtype=np.int64)
    with torch.no_grad():
        ref = hf(torch.from_numpy(ids)).logits.numpy()
    got = builder.build(folder, [dropped])["forward"](ids)
    assert np.abs(got - ref).max() > 1e-3


def _saved(tmp_path, **changes):
    save_tiny(tmp_path, "Gemma2Config", "Gemma2ForCausalLM", **{**SMALL, "num_hidden_layers": 2})
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg.update(changes)
    (tmp_path / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("layer_types", [["full_attention", "sliding_attention"], ["sliding_attention"] * 2])
def test_other_layer_types_are_refused(tmp_path, layer_types):
    _saved(tmp_path, layer_types=layer_types)
    with pytest.raises(HFCheckpointError, match=r'layer_types = .*the recipe windows the even layers.*'
                                                r'"sliding_attention", "full_attention"'):
        builder.build(tmp_path)


def test_a_config_without_layer_types_or_final_cap(tmp_path):
    """transformers 4 saved no layer_types (its Gemma 2 windows the even layers too): built; a null final cap
    is refused by name."""
    _saved(tmp_path, layer_types=None)
    assert builder.build(tmp_path).params["model.layers.1.pre_feedforward_layernorm.weight"].shape == (32,)
    _saved(tmp_path, layer_types=None, final_logit_softcapping=None)
    with pytest.raises(HFCheckpointError, match="final_logit_softcapping.* is missing"):
        builder.build(tmp_path)
