"""Fixtures of the serving tests: the small reference Llama (recipes/llama.yaml, tests/data/llama_causal_lm.safetensors)
with a byte-level BPE tokenizer of 1000 ids trained in the test and a ChatML-shaped chat template of its own, built
once per session."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import builder
from helpers.bpe import train_tokenizer

pytest.importorskip("tokenizers")
ROOT = Path(__file__).resolve().parents[2]
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


@pytest.fixture(scope="session")
def tok_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve_tok")
    train_tokenizer(1000).save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML, "bos_token": "<s>",
                                                              "eos_token": "<|im_end|>"}))
    return folder


@pytest.fixture(scope="session")
def llama(tok_dir):
    return builder.build(ROOT / "recipes" / "llama.yaml", weights=ROOT / "tests" / "data" / "llama_causal_lm.safetensors",
                         tokenizer=tok_dir / "tokenizer.json")
