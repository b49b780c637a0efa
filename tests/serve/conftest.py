"""Fixtures of the serving tests: the small reference Llama with a tokenizer trained in the test and a chat template
of its own (:mod:`helpers.text_models`), built once per session."""
from __future__ import annotations

import pytest

from helpers.text_models import reference_llama, write_tokenizer_folder

pytest.importorskip("tokenizers")


@pytest.fixture(scope="session")
def tok_dir(tmp_path_factory):
    return write_tokenizer_folder(tmp_path_factory.mktemp("serve_tok"))


@pytest.fixture(scope="session")
def llama(tok_dir):
    return reference_llama(tok_dir / "tokenizer.json")
