"""builder.structured: ``response_format`` parsing (each bad shape names its field, the bounds), grammars refused
by llguidance, and :class:`GrammarConstraint` on a byte-level BPE tokenizer trained in the test: for a small regex
the allowed tokens at each step equal a brute force over the whole vocabulary with Python's ``re`` (a token is
allowed iff the text with it is a prefix of one of the regex's finitely many matches), random walks through JSON
schemas validated by ``jsonschema``, padded logits past the tokenizer's vocabulary masked, refused tokens; the
:class:`builder.sampling.Sampler` and :func:`builder.generation.stream_generate` wiring on a numpy "model"."""
from __future__ import annotations

import itertools
import json
import re

import numpy as np
import pytest

from builder.generation import stream_generate
from builder.sampling import Sampler, SamplingParams, log_softmax
from builder.structured import (MAX_REGEX_CHARS, MAX_SCHEMA_CHARS, GrammarConstraint, ResponseFormat,
                                ll_tokenizer)
from helpers.bpe import SPECIAL_TOKENS, train_tokenizer

pytest.importorskip("llguidance")
pytest.importorskip("tokenizers")

EOS = SPECIAL_TOKENS.index("<|im_end|>")
REGEX = "[ab]{2,4}c"
MATCHES = ["".join(p) + "c" for n in (2, 3, 4) for p in itertools.product("ab", repeat=n)]   # REGEX's language
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 150}},
          "required": ["name", "age"], "additionalProperties": False}


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(1000)


@pytest.fixture(scope="module")
def texts(tok):
    """Each id's text (None for the special tokens, which decode to nothing)."""
    size = tok.get_vocab_size()
    return [None if i < len(SPECIAL_TOKENS) else tok.decode([i]) for i in range(size)]


def _schema(schema=SCHEMA, **extra):
    return {"type": "json_schema", "json_schema": {"name": "person", "schema": schema, **extra}}


@pytest.mark.parametrize("value, field", [
    ("json", "response_format must be an object"),
    ({}, "response_format.type must be one of"),
    ({"type": "xml"}, "response_format.type must be one of"),
    ({"type": 3}, "response_format.type must be one of"),
    ({"type": "text", "regex": "a"}, "response_format has unknown field"),
    ({"type": "json_object", "schema": {}}, "response_format has unknown field"),
    ({"type": "regex"}, "response_format.regex must be a string"),
    ({"type": "regex", "regex": 5}, "response_format.regex must be a string"),
    ({"type": "json_schema"}, "response_format.json_schema must be an object"),
    ({"type": "json_schema", "json_schema": []}, "response_format.json_schema must be an object"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {}, "strcit": True}},
     "response_format.json_schema has unknown field"),
    ({"type": "json_schema", "json_schema": {"schema": {}}}, "response_format.json_schema.name"),
    ({"type": "json_schema", "json_schema": {"name": "a b", "schema": {}}}, "response_format.json_schema.name"),
    ({"type": "json_schema", "json_schema": {"name": "x" * 65, "schema": {}}}, "response_format.json_schema.name"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {}, "strict": "yes"}},
     "response_format.json_schema.strict must be a bool"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {}, "description": 1}},
     "response_format.json_schema.description"),
    ({"type": "json_schema", "json_schema": {"name": "x"}}, "response_format.json_schema.schema must be an object"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": [1]}},
     "response_format.json_schema.schema must be an object"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"a": float("nan")}}},
     "response_format.json_schema.schema must be JSON"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"a": object()}}},
     "response_format.json_schema.schema must be JSON"),
])
def test_parse_names_the_bad_field(value, field):
    with pytest.raises(ValueError, match=re.escape(field)):
        ResponseFormat.parse(value)


def test_parse_bounds_and_good_values():
    big = {"type": "object", "description": "x" * MAX_SCHEMA_CHARS}
    with pytest.raises(ValueError, match=r"response_format.json_schema.schema is \d+ characters serialized"):
        ResponseFormat.parse(_schema(big))
    with pytest.raises(ValueError, match=f"response_format.regex has {MAX_REGEX_CHARS + 1} characters"):
        ResponseFormat.parse({"type": "regex", "regex": "a" * (MAX_REGEX_CHARS + 1)})
    deep: dict = {}
    for _ in range(100_000):
        deep = {"a": deep}
    with pytest.raises(ValueError, match="response_format.json_schema.schema must be JSON"):
        ResponseFormat.parse(_schema(deep))
    assert ResponseFormat.parse({"type": "regex", "regex": "a" * MAX_REGEX_CHARS}).regex == "a" * MAX_REGEX_CHARS
    assert ResponseFormat.parse(None) == ResponseFormat.parse({"type": "text"}) == ResponseFormat("text")
    assert ResponseFormat.parse(None).grammar() is None
    rf = ResponseFormat.parse(_schema(strict=True, description="a person"))
    assert (rf.type, rf.name, rf.strict, rf.description, json.loads(rf.schema)) == (
        "json_schema", "person", True, "a person", SCHEMA)
    assert ResponseFormat.parse(rf) is rf
    assert json.loads(rf.grammar())["grammars"][0]["json_schema"]["properties"] == SCHEMA["properties"]
    assert ResponseFormat.parse({"type": "json_object"}).grammar()


@pytest.mark.parametrize("value, field", [
    (_schema({"type": "foo"}), "response_format.json_schema.schema: "),
    (_schema({"$ref": "#/nowhere"}), "response_format.json_schema.schema: "),
    (_schema({"type": "integer", "minimum": "x"}), "response_format.json_schema.schema: "),
    ({"type": "regex", "regex": "[ab"}, "response_format.regex: "),
    ({"type": "regex", "regex": "a(b"}, "response_format.regex: "),
])
def test_a_grammar_llguidance_refuses_names_the_field(value, field, tok):
    rf = ResponseFormat.parse(value)
    with pytest.raises(ValueError, match=re.escape(field)):
        rf.grammar()
    with pytest.raises(ValueError, match=re.escape(field)):
        GrammarConstraint(value, tok, None, [EOS])


def _expected(texts, text):
    """The ids that keep ``text`` a prefix of a match of REGEX, and the eos when ``text`` is one."""
    want = {i for i, t in enumerate(texts) if t and any(m.startswith(text + t) for m in MATCHES)}
    return want | ({EOS} if text in MATCHES else set())


@pytest.mark.parametrize("seed", range(6))
def test_regex_allowed_tokens_equal_a_brute_force_with_re(tok, texts, seed):
    rng = np.random.default_rng(seed)
    c = GrammarConstraint({"type": "regex", "regex": REGEX}, tok, None, [EOS])
    text = ""
    for _ in range(8):
        ok = c.allowed()
        assert ok.shape == (tok.get_vocab_size(),) and ok.dtype == bool
        assert set(np.flatnonzero(ok)) == _expected(texts, text), text
        if c.is_finished:
            break
        choice = int(rng.choice(np.flatnonzero(ok)))
        c.accept(choice)
        text += texts[choice]
    assert c.is_finished and re.fullmatch(REGEX, text) and set(np.flatnonzero(c.allowed())) == {EOS}
    c.accept(EOS)            # the eos after the end leaves it finished
    assert c.is_finished


def test_a_refused_token_raises_and_leaves_the_state(tok, texts):
    c = GrammarConstraint({"type": "regex", "regex": REGEX}, tok, None, [EOS])
    before = c.allowed()
    for bad in (tok.token_to_id("c"), EOS, 999, 1000, -1):
        with pytest.raises(ValueError, match="response_format.regex: token"):
            c.accept(bad)
        assert np.array_equal(c.allowed(), before)
    for ch in "abc":
        c.accept(tok.token_to_id(ch))
    assert c.is_finished
    with pytest.raises(ValueError, match="after the grammar's end"):
        c.accept(tok.token_to_id("a"))


def test_copy_is_independent(tok):
    c = GrammarConstraint({"type": "regex", "regex": REGEX}, tok, None, [EOS])
    c.accept(tok.token_to_id("a"))
    d = c.copy()
    d.accept(tok.token_to_id("a"))
    d.accept(tok.token_to_id("c"))
    assert d.is_finished and not c.is_finished
    assert c.allowed()[tok.token_to_id("a")] and not c.allowed()[tok.token_to_id("c")]


def test_padded_ids_past_the_tokenizer_are_masked(tok):
    size = tok.get_vocab_size()
    c = GrammarConstraint({"type": "regex", "regex": REGEX}, tok, size + 24, [EOS])
    ok = c.allowed()
    assert ok.shape == (size + 24,) and not ok[size:].any()
    logits = np.zeros(size + 24)
    assert c.mask(logits) is logits
    assert np.array_equal(np.isfinite(logits), ok) and set(np.flatnonzero(ok)) == {tok.token_to_id("a"),
                                                                                      tok.token_to_id("b")}
    for ch in "abc":
        c.accept(tok.token_to_id(ch))
    logits = np.zeros(size + 24, dtype=np.float32)
    c.mask(logits)
    assert np.flatnonzero(np.isfinite(logits)).tolist() == [EOS]
    with pytest.raises(ValueError, match="no token of the model's"):
        GrammarConstraint({"type": "regex", "regex": REGEX}, tok, None, [EOS]).mask(np.zeros(50))
    with pytest.raises(ValueError, match="logits must be a float array"):
        c.mask(np.zeros((2, size)))


@pytest.mark.parametrize("seed", range(4))
def test_random_walks_through_a_json_schema_validate(tok, texts, seed):
    jsonschema = pytest.importorskip("jsonschema")
    rng = np.random.default_rng(seed)
    c = GrammarConstraint(_schema(), tok, None, [EOS])
    ids = []
    for _ in range(200):
        if c.is_finished:
            break
        ok = np.flatnonzero(c.allowed())
        if EOS in ok and rng.random() < 0.5:
            c.accept(EOS)
            break
        choice = int(rng.choice(ok[ok != EOS]))
        c.accept(choice)
        ids.append(choice)
    text = tok.decode(ids)
    assert c.is_finished, text
    value = json.loads(text)
    jsonschema.validate(value, SCHEMA)
    assert " " not in text.replace(value["name"], "")        # compact: no whitespace between JSON tokens


def test_json_object_and_whitespace_by_the_schema(tok):
    c = GrammarConstraint({"type": "json_object"}, tok, None, [EOS])
    assert np.flatnonzero(c.allowed()).tolist() == [tok.token_to_id("{")]
    c.accept(tok.token_to_id("{"))
    after = {tok.decode([int(i)]) for i in np.flatnonzero(c.allowed())}
    assert after == {'"', "}"}
    flexible = GrammarConstraint(_schema({"type": "object", "x-guidance": {"whitespace_flexible": True}}), tok,
                                 None, [EOS])
    flexible.accept(tok.token_to_id("{"))
    assert {" ", "\n"} <= {tok.decode([int(i)]) for i in np.flatnonzero(flexible.allowed())}


def test_ll_tokenizer_errors_and_cache(tok):
    from tokenizers import Tokenizer, models, pre_tokenizers

    assert ll_tokenizer(tok, [EOS]) is ll_tokenizer(tok, [EOS])
    assert ll_tokenizer(tok, [EOS]) is not ll_tokenizer(tok, [EOS, 1])
    assert ll_tokenizer(tok, [EOS, 1]).eos_tokens == [EOS, 1]
    word = Tokenizer(models.WordLevel({"a": 0, "b": 1, "[UNK]": 2}, unk_token="[UNK]"))
    word.pre_tokenizer = pre_tokenizers.Whitespace()
    with pytest.raises(ValueError, match="byte by byte"):
        ll_tokenizer(word, [2])
    with pytest.raises(TypeError, match="tokenizers.Tokenizer"):
        ll_tokenizer("tokenizer.json", [EOS])
    with pytest.raises(ValueError, match="eos_ids"):
        ll_tokenizer(tok, [])
    with pytest.raises(ValueError, match="eos_ids"):
        ll_tokenizer(tok, [tok.get_vocab_size()])
    with pytest.raises(ValueError, match="constrains nothing"):
        GrammarConstraint({"type": "text"}, tok, None, [EOS])
    with pytest.raises(ValueError, match="vocab"):
        GrammarConstraint({"type": "json_object"}, tok, 0, [EOS])


def test_the_sampler_masks_before_the_chain_and_accepts(tok, texts):
    size = tok.get_vocab_size()
    logits = np.random.default_rng(0).normal(0, 3, size=(2, size + 8)).astype(np.float32)
    params = SamplingParams(temperature=0.7, repetition_penalty=1.3, seed=3, logprobs=3)
    prompt = np.array([[tok.token_to_id("a")], [4]])
    c = GrammarConstraint({"type": "regex", "regex": REGEX}, tok, size + 8, [EOS])
    ok = c.allowed()
    out = Sampler(params, prompt, size + 8, constraints=[c, None])(logits)
    x = np.where(ok, logits[0].astype(np.float64), -np.inf)         # masked, then the chain: penalty, temperature
    a = tok.token_to_id("a")
    x[a] = x[a] / 1.3 if x[a] >= 0 else x[a] * 1.3
    want = log_softmax((x / 0.7)[None])[0]
    chosen = int(out.token_ids[0])
    assert ok[chosen] and np.isclose(out.logprobs[0], want[chosen], rtol=1e-12)
    assert set(out.top_ids[0][:2].tolist()) == set(np.flatnonzero(ok).tolist()) and np.isneginf(out.top_logprobs[0][2])
    np.testing.assert_allclose(out.top_logprobs[0][:2], np.sort(want[ok])[::-1], rtol=1e-12)
    assert set(np.flatnonzero(c.allowed())) == _expected(texts, texts[chosen])      # the token was accepted
    free = Sampler(params, prompt, size + 8)(logits)                                  # row 1 as without it
    assert free.token_ids[1] == out.token_ids[1] and free.logprobs[1] == out.logprobs[1]
    greedy = GrammarConstraint({"type": "regex", "regex": REGEX}, tok, size + 8, [EOS])
    ids = Sampler(SamplingParams(temperature=0), prompt[:1], size + 8, [greedy])(logits[:1])
    assert ids.token_ids[0] == int(np.argmax(np.where(ok, logits[0], -np.inf)))
    inactive = GrammarConstraint({"type": "regex", "regex": REGEX}, tok, size + 8, [EOS])
    Sampler(params, prompt[:1], size + 8, [inactive])(logits[:1], active=np.array([False]))
    assert np.array_equal(inactive.allowed(), ok)                                    # an inactive row: untouched
    with pytest.raises(ValueError, match="one entry per row"):
        Sampler(params, prompt, size, constraints=[c])
    with pytest.raises(TypeError, match=r"constraints\[0\] must have mask\(\) and accept\(\)"):
        Sampler(params, prompt[:1], size, constraints=["x"])


def test_stream_generate_ends_a_row_when_its_grammar_is_finished(tok):
    size = tok.get_vocab_size() + 16
    table = np.random.default_rng(1).normal(0, 2, size=(64, size)).astype(np.float32)

    def model(ids, cache, total):
        return np.repeat(table[total][None, None], ids.shape[0], axis=0)

    regex = "(yes|no)(, [a-z]{1,5})?!"
    c = GrammarConstraint({"type": "regex", "regex": regex}, tok, size, [EOS])
    stream = stream_generate(model, model, np.array([[5, 9]]), 40, SamplingParams(temperature=1.0, seed=4, n=2),
                             stop_ids=[EOS], new_cache=lambda: None, constraints=[c, None])
    got = [[], []]
    for step in stream:
        for r in np.flatnonzero(step.active):
            got[r].append(int(step.token_ids[r]))
    assert stream.finish_reasons == ["stop", "length"] and len(got[1]) == 40
    text = tok.decode([t for t in got[0] if t != EOS])
    assert re.fullmatch(regex, text), text
    assert c.is_finished
    with pytest.raises(ValueError, match="one entry per row"):
        stream_generate(model, model, np.array([[5]]), 4, SamplingParams(n=2), new_cache=lambda: None,
                        constraints=[c])


def test_a_grammar_past_llguidances_limits_fails_with_a_value_error(tok):
    """Nested counted repetitions (a million-state regex) meet llguidance's lexer limit on the first token: a
    ValueError naming the field (the state left failed), not a hang or an exhausted memory."""
    c = GrammarConstraint({"type": "regex", "regex": "(a{1000}){1000}"}, tok, None, [EOS])
    assert np.flatnonzero(c.allowed()).tolist() == [tok.token_to_id("a")]
    with pytest.raises(ValueError, match=r"response_format\.regex: the grammar failed: .*too many"):
        c.accept(tok.token_to_id("a"))
    with pytest.raises(ValueError, match=r"response_format\.regex: the grammar failed"):
        c.allowed()
