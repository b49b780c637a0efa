"""``recipes/hf/whisper_encoder.yaml`` on tiny random transformers Whisper checkpoints as ``save_pretrained`` writes
them (``WhisperForConditionalGeneration``: the encoder under ``model.encoder.``; ``WhisperModel``: under
``encoder.``), the decoder's tensors ignored: the encoder's ``last_hidden_state`` against transformers on two batch
sizes. Needs torch and transformers (skipped without)."""
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the HF family tests need torch")
T = pytest.importorskip("transformers", reason="the HF family tests need transformers")

import builder  # noqa: E402
from helpers.hf_causal import nudge_and_save  # noqa: E402

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


@pytest.mark.parametrize("cls, prefix", [("WhisperForConditionalGeneration", "model."), ("WhisperModel", "")])
def test_whisper_encoder_of_a_whole_checkpoint_matches_transformers(tmp_path, cls, prefix):
    torch.manual_seed(2)
    config = T.WhisperConfig(vocab_size=64, num_mel_bins=8, d_model=32, encoder_layers=2, decoder_layers=1,
                             encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=48,
                             decoder_ffn_dim=48, max_source_positions=16, max_target_positions=16, pad_token_id=0,
                             bos_token_id=0, eos_token_id=0, decoder_start_token_id=0)
    hf = nudge_and_save(torch, getattr(T, cls)(config), tmp_path / "whisper")
    m = builder.build(RECIPES / "hf" / "whisper_encoder.yaml", weights=tmp_path / "whisper" / "model.safetensors",
                      overrides=("num_mel_bins=8", "d_model=32", "encoder_layers=2", "encoder_attention_heads=4",
                                 "encoder_ffn_dim=48", "max_source_positions=16", f"checkpoint_prefix={prefix!r}"))
    assert not any("decoder" in name for name in m.params)
    encoder = hf.get_encoder()
    for batch in (1, 2):
        x = np.random.default_rng(batch).standard_normal((batch, 8, 32)).astype(np.float32)
        with torch.no_grad():
            ref = encoder(torch.from_numpy(x)).last_hidden_state.double().numpy()
        out = m["forward"](x)
        assert out.shape == (batch, 16, 32)
        np.testing.assert_allclose(out, ref, rtol=0, atol=1e-4)
