"""Checks shared by the Hugging Face family tests (``tests/hf/test_family_*.py``): a tiny transformers model
nudged off its init and saved as ``save_pretrained`` writes it, and the checks of a built causal LM against
it (logits on two input shapes, greedy generation over prefill + decode, a prefill in two chunks)."""
from __future__ import annotations

import numpy as np

from runtime import ContiguousKVCache


def nudge_and_save(torch, hf, path, scale: float = 0.1):
    """Move every parameter of ``hf`` off its init (``p += scale * randn``: unit norms, zero biases and
    zero CLS tokens would hide a missing offset or a swapped tensor), put it in eval mode and save it
    with ``save_pretrained(path)`` (safetensors). Returns ``hf``."""
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * scale)
    hf.eval()
    hf.save_pretrained(path)
    return hf


def check_logits(torch, m, hf, vocab: int, shapes=((1, 5), (2, 9)), atol: float = 1e-4) -> None:
    """``m["forward"]`` logits equal transformers' within ``atol`` on random ids of each (batch, seq)."""
    for batch, seq in shapes:
        ids = np.random.default_rng(batch * 100 + seq).integers(0, vocab, (batch, seq))
        with torch.no_grad():
            ref = hf(torch.from_numpy(ids)).logits.double().numpy()
        out = m["forward"](ids)
        assert out.shape == (batch, seq, vocab)
        np.testing.assert_allclose(out, ref, rtol=0, atol=atol)


def check_generation(torch, m, hf, vocab: int, new_tokens: int = 16) -> None:
    """Greedy generation of ``new_tokens`` over ``prefill`` + ``decode`` (``m.generate``) gives HF's
    ``generate(do_sample=False)`` ids (no stopping at an end-of-sequence token: ``min_new_tokens``)."""
    prompt = np.random.default_rng(7).integers(0, vocab, (2, 4))
    ids = m.generate(prompt, new_tokens)
    with torch.no_grad():
        ref = hf.generate(torch.from_numpy(prompt), attention_mask=torch.ones(prompt.shape, dtype=torch.int64),
                          do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                          pad_token_id=0, eos_token_id=None)
    np.testing.assert_array_equal(ids, ref[:, prompt.shape[1]:].numpy())


def check_chunked_prefill(m, vocab: int) -> None:
    """A prompt prefilled in two chunks gives the last logits of one prefill, and the decode step after
    either is the same."""
    prompt = np.random.default_rng(3).integers(0, vocab, (2, 9))
    whole_cache, cache = ContiguousKVCache(), ContiguousKVCache()
    whole = m["prefill"](prompt, whole_cache, 9)
    m["prefill"](prompt[:, :4], cache, 4)
    second = m["prefill"](prompt[:, 4:], cache, 9)
    np.testing.assert_allclose(second, whole, rtol=0, atol=1e-5)
    nxt = np.argmax(whole[:, -1], axis=-1)[:, None]
    np.testing.assert_allclose(m["decode"](nxt, cache, 10), m["decode"](nxt, whole_cache, 10), rtol=0, atol=1e-5)
