"""Tiny Hugging Face checkpoints saved by transformers itself (tests/hf/), and the checks every family's test runs on them:
logits against transformers' own model on two input shapes, greedy generation against ``generate``, chunked
prefill against one prefill."""
from pathlib import Path

import numpy as np
import pytest

import builder
from runtime import ContiguousKVCache


def save_tiny(folder: Path, config_cls: str, model_cls: str, seed: int = 0, max_shard_size=None, model_kwargs=None,
              **fields):
    """``transformers.<model_cls>(<config_cls>(**fields), **model_kwargs)`` (``add_pooling_layer=False``), seeded,
    every parameter nudged off its init, eager attention, saved with ``save_pretrained`` into ``folder``; returns
    the model (eval mode)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    cfg = getattr(transformers, config_cls)(**fields, attn_implementation="eager")
    model = getattr(transformers, model_cls)(cfg, **(model_kwargs or {})).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    kwargs = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
    model.save_pretrained(str(folder), **kwargs)
    return model


def check_causal_lm(folder: Path, hf, vocab: int, seed: int = 1, overrides=(), shapes=((1, 5), (2, 11)),
                    uncached=False                    ) -> builder.build_model.CompiledModel:
    """Build ``folder`` with ``builder.build(DIR)`` and compare with ``hf``: the forward logits on ``shapes`` of
    ids (default (1, 5) and (2, 11)) within 1e-4, 16 greedy tokens over prefill + decode equal to ``hf.generate(do_sample=False)``,
    a prefill in two chunks equal to one prefill. ``uncached``: the 16 tokens are instead the argmax of ``hf``'s
    forward over the whole sequence at each step, without its cache (transformers 5.24's generate over a
    ``DynamicSlidingWindowLayer`` cache departs from its own forward once decoding passes the window). Returns
    the model."""
    import torch

    model = builder.build(folder, overrides)
    rng = np.random.default_rng(seed)
    for shape in shapes:
        ids = rng.integers(0, vocab, shape, dtype=np.int64)
        with torch.no_grad():
            ref = hf(torch.from_numpy(ids)).logits.numpy()
        np.testing.assert_allclose(model["forward"](ids), ref, atol=1e-4, rtol=0)
    prompt = rng.integers(0, vocab, (2, 6), dtype=np.int64)
    with torch.no_grad():
        if uncached:
            seq = torch.from_numpy(prompt)
            for _ in range(16):
                seq = torch.cat([seq, hf(seq).logits[:, -1].argmax(-1, keepdim=True)], 1)
            want = seq[:, 6:].numpy()
        else:
            want = hf.generate(torch.from_numpy(prompt), do_sample=False, max_new_tokens=16, min_new_tokens=16,
                               pad_token_id=0)[:, 6:].numpy()
    np.testing.assert_array_equal(model.generate(prompt, 16), want)
    whole = model["prefill"](prompt, ContiguousKVCache(), 6)
    cache = ContiguousKVCache()
    model["prefill"](prompt[:, :4], cache, 4)
    np.testing.assert_allclose(model["prefill"](prompt[:, 4:], cache, 6), whole, atol=1e-5, rtol=0)
    return model
