"""``build DIR`` on BERT-family encoders saved by transformers (BertModel, RobertaModel, XLMRobertaModel):
last_hidden_state and pooler_output within 1e-4 of transformers' own model on two input shapes, with an
attention mask and token types; a BertModel saved without its pooler (add_pooling_layer=False) builds with
pooled = the first token's last hidden state, chosen by the family from the safetensors header."""
import numpy as np
import pytest

import builder
from helpers.hf_checkpoints import save_tiny

pytest.importorskip("transformers")

pytestmark = pytest.mark.hf   # a checkpoint saved by transformers (pyproject's markers)

SMALL = dict(vocab_size=120, hidden_size=48, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96,
             max_position_embeddings=40)


def _compare(folder, hf, types: int, pad: int):
    import torch

    model = builder.build(folder)
    rng = np.random.default_rng(0)
    for batch, seq in ((1, 6), (3, 13)):
        ids = rng.integers(pad + 1, 120, (batch, seq), dtype=np.int64)   # no pad ids: RoBERTa's positions
        mask = np.ones((batch, seq), np.int64)
        mask[-1, seq - 3:] = 0                                            # right padding in the last row
        tt = rng.integers(0, types, (batch, seq), dtype=np.int64)
        with torch.no_grad():
            ref = hf(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                     token_type_ids=torch.from_numpy(tt))
        got = model["forward"](ids, mask, tt)
        real = mask.astype(bool)
        np.testing.assert_allclose(got[real], ref.last_hidden_state.numpy()[real], atol=1e-4, rtol=0)
        np.testing.assert_allclose(model["pooled"](ids, mask, tt), ref.pooler_output.numpy(), atol=1e-4, rtol=0)


def test_bert(tmp_path):
    hf = save_tiny(tmp_path, "BertConfig", "BertModel", seed=1, **SMALL, layer_norm_eps=1e-7)
    _compare(tmp_path, hf, 2, 0)


def test_bert_saved_without_its_pooler(tmp_path):
    import torch

    hf = save_tiny(tmp_path, "BertConfig", "BertModel", seed=6, model_kwargs={"add_pooling_layer": False}, **SMALL)
    assert 'pooler_type="BertNoPooler"' in builder.checkpoint.resolve_checkpoint(tmp_path).overrides
    model = builder.build(tmp_path)
    assert not any(k.startswith("pooler.") for k in model.params)
    ids = np.random.default_rng(7).integers(1, 120, (2, 9), dtype=np.int64)
    mask, tt = np.ones_like(ids), np.zeros_like(ids)
    with torch.no_grad():
        ref = hf(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                 token_type_ids=torch.from_numpy(tt))
    assert ref.pooler_output is None
    np.testing.assert_allclose(model["forward"](ids, mask, tt), ref.last_hidden_state.numpy(), atol=1e-4, rtol=0)
    np.testing.assert_allclose(model["pooled"](ids, mask, tt), ref.last_hidden_state[:, 0].numpy(), atol=1e-4,
                               rtol=0)


@pytest.mark.parametrize("config, model", [("RobertaConfig", "RobertaModel"), ("XLMRobertaConfig", "XLMRobertaModel")])
def test_roberta_positions_start_after_padding_idx(tmp_path, config, model):
    hf = save_tiny(tmp_path, config, model, seed=2, **SMALL, type_vocab_size=1, pad_token_id=1)
    assert "position_offset=2" in builder.checkpoint.resolve_checkpoint(tmp_path).overrides
    _compare(tmp_path, hf, 1, 1)


def test_distilbert(tmp_path):
    import torch

    hf = save_tiny(tmp_path, "DistilBertConfig", "DistilBertModel", seed=3, vocab_size=120, dim=48, hidden_dim=96,
                   n_layers=2, n_heads=4, max_position_embeddings=40)
    model = builder.build(tmp_path)
    rng = np.random.default_rng(4)
    for batch, seq in ((1, 6), (3, 13)):
        ids = rng.integers(0, 120, (batch, seq), dtype=np.int64)
        mask = np.ones((batch, seq), np.int64)
        mask[0, seq - 2:] = 0
        with torch.no_grad():
            ref = hf(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).last_hidden_state.numpy()
        real = mask.astype(bool)
        np.testing.assert_allclose(model["forward"](ids, mask)[real], ref[real], atol=1e-4, rtol=0)


def test_folder_tokenizer_is_the_artifacts(tmp_path, capsys):
    """``tokenizer.json`` of the folder is used as ``--tokenizer``: ``build DIR --save-exe`` ships it."""
    from builder.cli import main

    save_tiny(tmp_path / "m", "BertConfig", "BertModel", seed=5, **SMALL)
    text = '{"version": "1.0", "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "a": 1}, "unk_token": "[UNK]"}}'
    (tmp_path / "m" / "tokenizer.json").write_text(text)
    assert main([str(tmp_path / "m"), "--no-ir", "--quiet", "--save-exe", str(tmp_path / "art")]) == 0, \
        capsys.readouterr().err
    assert (tmp_path / "art" / "tokenizer.json").read_text() == text
