"""``build DIR`` on Whisper checkpoints saved by transformers (``recipes/hf/whisper_encoder.yaml``): a
``WhisperForConditionalGeneration`` (the encoder under ``model.encoder.``) and a ``WhisperModel`` (under
``encoder.``), the decoder's tensors ignored; the encoder's ``last_hidden_state`` against transformers on two batch
sizes."""
import numpy as np
import pytest

import builder
from helpers.hf_checkpoints import save_tiny

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.hf   # a checkpoint saved by transformers (pyproject's markers)


@pytest.mark.parametrize("model_cls", ["WhisperForConditionalGeneration", "WhisperModel"])
def test_whisper_encoder_of_a_whole_checkpoint_matches_transformers(tmp_path, model_cls):
    hf = save_tiny(tmp_path, "WhisperConfig", model_cls, seed=16, vocab_size=64, num_mel_bins=8, d_model=32,
                   encoder_layers=2, decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4,
                   encoder_ffn_dim=48, decoder_ffn_dim=48, max_source_positions=16, max_target_positions=16,
                   pad_token_id=0, bos_token_id=0, eos_token_id=0, decoder_start_token_id=0)
    m = builder.build(tmp_path)
    assert m.params and not any("decoder" in name for name in m.params)
    for batch in (1, 2):
        x = np.random.default_rng(batch).standard_normal((batch, 8, 32)).astype(np.float32)
        with torch.no_grad():
            ref = hf.get_encoder()(torch.from_numpy(x)).last_hidden_state.numpy()
        out = m["forward"](x)
        assert out.shape == (batch, 16, 32)
        np.testing.assert_allclose(out, ref, rtol=0, atol=1e-4)
