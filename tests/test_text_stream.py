"""builder.text_stream: incremental detokenization with a byte-level BPE tokenizer trained in the test (characters
whose UTF-8 bytes are split over tokens are held back until whole; the streamed text equals
``Tokenizer.decode`` of all the ids), and stop strings (the text ends before the earliest one, even when it spans
tokens, and what is streamed is always a prefix of that text), against ``str.find`` on the whole text."""
from __future__ import annotations

import random

import pytest

from builder.text_stream import MAX_HELD_TOKENS, IncrementalDetokenizer, StopStrings
from helpers.bpe import train_tokenizer

pytest.importorskip("tokenizers")

TEXTS = ["hello café 😀 naïve", "🦙🦙 ₿ x", "straße 中文 日本語 👍🏽 end", "ça va? mañana 🎉🚀", "plain ascii words",
         "Ωmega π ≠ ∞ 𝄞 done"]


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer()


def _stream(tok, ids, skip=True):
    d = IncrementalDetokenizer(tok, skip_special_tokens=skip)
    pieces = [d.push(i) for i in ids]
    return pieces, d.flush(), d


@pytest.mark.parametrize("text", TEXTS)
def test_the_stream_is_whole_characters_and_adds_up_to_decode(tok, text):
    ids = tok.encode(text).ids
    pieces, tail, d = _stream(tok, ids)
    assert "".join(pieces) + tail == tok.decode(ids) == text
    assert tail == "" and d.text == text
    assert not any("\ufffd" in p for p in pieces)


def test_a_character_split_over_byte_tokens_is_held_until_complete(tok):
    ids = tok.encode("a 🦙").ids
    assert [tok.decode([i]) for i in ids[-3:]].count("\ufffd") >= 2   # the llama is bytes in this vocabulary
    pieces, _, _ = _stream(tok, ids)
    assert pieces[-1].endswith("🦙") and "".join(pieces) == "a 🦙"
    assert "" in pieces[-3:]


def test_special_tokens_are_skipped_or_kept(tok):
    eos = tok.token_to_id("</s>")
    ids = tok.encode("café").ids + [eos] + tok.encode(" ok").ids
    assert "".join(_stream(tok, ids)[0]) == tok.decode(ids) == "café ok"
    assert "".join(_stream(tok, ids, skip=False)[0]) == tok.decode(ids, skip_special_tokens=False)


def test_bytes_that_are_not_utf8_come_out_after_the_hold_bound(tok):
    lead = tok.encode("🦙").ids[0]          # a UTF-8 lead byte, never completed
    ids = [lead] * (MAX_HELD_TOKENS + 1)
    pieces, tail, d = _stream(tok, ids)
    assert pieces[:MAX_HELD_TOKENS - 1] == [""] * (MAX_HELD_TOKENS - 1)
    assert "\ufffd" in "".join(pieces) + tail


def _stopped(text, stops):
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    return text[:min(hits)] if hits else text


@pytest.mark.parametrize("stops", [["STOP"], ["é 😀", "zz"], ["ab", "abc", "b"], ["aaa"], ["\n\n"], []])
def test_stop_strings_over_random_pieces_match_find_on_the_whole_text(stops):
    rng = random.Random(3)
    texts = ["xx aSTOP yy STOP", "hello café 😀 naïve", "abcabc", "aaaaab", "one\n\ntwo", "no stop at all", "aab"]
    for text in texts:
        for _ in range(20):
            cuts = sorted(rng.sample(range(1, len(text)), k=min(len(text) - 1, rng.randint(0, 5))))
            pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
            s = StopStrings(stops)
            streamed = ""
            stopped = False
            want = _stopped(text, stops)
            for piece in pieces:
                safe, stopped = s.push(piece)
                streamed += safe
                assert want.startswith(streamed)   # never a piece of a stop string that later completes
                if stopped:
                    break
            if not stopped:
                streamed += s.flush()
            assert streamed == want and stopped == (want != text)


def test_a_stop_string_spanning_tokens_ends_the_text_before_it(tok):
    text = "the model builds a recipe and runs it"
    ids = tok.encode(text).ids
    d, s = IncrementalDetokenizer(tok), StopStrings(["ds a rec"])
    out = []
    for i in ids:
        safe, stopped = s.push(d.push(i))
        out.append(safe)
        if stopped:
            break
    assert stopped and "".join(out) == "the model buil"
    assert len(tok.encode("ds a rec").ids) > 1


def test_stop_string_errors():
    for bad in ([""], [1], ["x" * 2000], ["a"] * 100):
        with pytest.raises(ValueError, match="stop"):
            StopStrings(bad)
    s = StopStrings("x")
    assert s.push("axb") == ("a", True)
    with pytest.raises(ValueError, match="after a stop string"):
        s.push("c")
