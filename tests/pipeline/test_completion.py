"""``m.complete`` / ``m.chat`` on recipes/llama.yaml with its reference weights and a byte-level BPE tokenizer of
1000 ids trained in the test (with a ChatML-shaped chat template in tokenizer_config.json): greedy text equal to
``tokenizer.decode`` of ``m.generate``'s ids (for the chat, of the ids transformers' ``apply_chat_template``
gives), the stream equal to the whole, stop strings and eos ids (generation_config.json) ending the text, seeded
sampling reproducible, logprobs, and the errors."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import builder
from helpers.bpe import train_tokenizer
from helpers.text_models import CHATML, ROOT, reference_llama, write_tokenizer_folder

pytest.importorskip("tokenizers")
PROMPT = "hello café 😀 the model"


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    return write_tokenizer_folder(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def llama(tok_dir):
    return reference_llama(tok_dir / "tokenizer.json")


def _greedy_text(m, tok, ids, n, eos):
    out = m.generate(np.array([ids], dtype=np.int64), n)[0].tolist()
    cut = next((i for i, t in enumerate(out) if t in eos), None)
    return tok.decode(out if cut is None else out[:cut]), out if cut is None else out[:cut + 1]


def test_greedy_completion_is_the_decoded_greedy_ids(llama, tok_dir):
    tok = train_tokenizer(1000)
    eos = {tok.token_to_id("<|im_end|>")}
    want, ids = _greedy_text(llama, tok, tok.encode(PROMPT).ids, 12, eos)
    got = llama.complete(PROMPT, max_tokens=12, temperature=0)
    assert got.text == want and got.choices[0].token_ids == ids and got.prompt_tokens == len(tok.encode(PROMPT).ids)
    assert got.choices[0].finish_reason == ("stop" if ids[-1] in eos else "length")
    chunks = list(llama.complete(PROMPT, max_tokens=12, temperature=0, stream=True))
    assert "".join(c.text for c in chunks) == want and chunks[-1].finish_reason == got.choices[0].finish_reason
    assert not any("\ufffd" in c.text for c in chunks)


def test_a_stop_string_ends_the_text_before_it(llama):
    whole = llama.complete(PROMPT, max_tokens=12, temperature=0).text
    assert len(whole) >= 6
    stop = whole[3:6]
    got = llama.complete(PROMPT, max_tokens=12, temperature=0, stop=[stop, "\x00never"])
    assert got.text == whole[:whole.find(stop)] and got.choices[0].finish_reason == "stop"
    streamed = list(llama.complete(PROMPT, max_tokens=12, temperature=0, stop=stop, stream=True))
    assert "".join(c.text for c in streamed) == got.text


def test_an_eos_id_from_generation_config_ends_the_completion(llama, tok_dir, tmp_path):
    tok = train_tokenizer(1000)
    first = int(llama.generate(np.array([tok.encode(PROMPT).ids]), 1)[0, 0])
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_bytes((tok_dir / name).read_bytes())
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [first, 999]}))
    m = builder.build(ROOT / "recipes" / "llama.yaml", weights=ROOT / "tests" / "data" / "llama_causal_lm.safetensors",
                      tokenizer=tmp_path)
    got = m.complete(PROMPT, max_tokens=8, temperature=0)
    assert got.text == "" and got.choices[0].token_ids == [first] and got.choices[0].finish_reason == "stop"


def test_chat_renders_the_template_as_transformers_and_continues_it(llama):
    transformers = pytest.importorskip("transformers")
    tok = train_tokenizer(1000)
    hf = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>")
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "naïve café?"}]
    ids = hf.apply_chat_template(messages, chat_template=CHATML, add_generation_prompt=True, tokenize=True,
                                 return_dict=False)
    want, _ = _greedy_text(llama, tok, list(ids), 10, {tok.token_to_id("<|im_end|>")})
    got = llama.chat(messages, max_tokens=10, temperature=0)
    assert got.text == want and got.prompt_tokens == len(ids)
    assert "".join(c.text for c in llama.chat(messages, max_tokens=10, temperature=0, stream=True)) == want


def test_seeded_sampling_is_reproducible_with_n_choices_and_logprobs(llama):
    a = llama.complete(PROMPT, max_tokens=10, temperature=1.2, top_p=0.95, seed=123, n=3, logprobs=2)
    b = llama.complete(PROMPT, max_tokens=10, temperature=1.2, top_p=0.95, seed=123, n=3, logprobs=2)
    assert [c.text for c in a.choices] == [c.text for c in b.choices] and len(a.choices) == 3
    assert len({tuple(c.token_ids) for c in a.choices}) > 1
    for c in a.choices:
        assert len(c.logprobs) == len(c.token_ids) and all(len(t) == 2 for t in c.top_logprobs)
        assert all(lp <= 0 for lp in c.logprobs) and all(t[0][1] >= lp for t, lp in zip(c.top_logprobs, c.logprobs))
    streamed = {}
    for chunk in llama.complete(PROMPT, max_tokens=10, temperature=1.2, top_p=0.95, seed=123, n=3, stream=True):
        streamed[chunk.index] = streamed.get(chunk.index, "") + chunk.text
    assert [streamed[i] for i in range(3)] == [c.text for c in a.choices]


def test_complete_and_chat_errors(llama, tok_dir):
    m = builder.build(ROOT / "recipes" / "llama.yaml", weights=ROOT / "tests" / "data" / "llama_causal_lm.safetensors")
    with pytest.raises(ValueError, match="tokenizer"):
        m.complete("hi")
    with pytest.raises(ValueError, match="top_p"):
        llama.complete("hi", top_p=0)
    with pytest.raises(ValueError, match="max_tokens"):
        llama.complete("hi", max_tokens=0)
    with pytest.raises(ValueError, match="unknown sampling parameter"):
        llama.complete("hi", tempreature=1)
    with pytest.raises(ValueError, match="stop"):
        llama.complete("hi", stop=[""])
    m.tokenizer = train_tokenizer(1000)       # a Tokenizer object: no config, no template
    assert m.complete("hi", max_tokens=2, temperature=0).choices[0].token_ids
    with pytest.raises(ValueError, match="chat template"):
        m.chat([{"role": "user", "content": "hi"}])
    with pytest.raises(ValueError, match="response_format needs an eos token id"):   # no config: no eos id
        m.complete("hi", response_format={"type": "json_object"})
    assert m.chat([{"role": "user", "content": "hi"}], max_tokens=2, temperature=0, chat_template=CHATML).choices


def _cli(tok_dir, *args):
    from builder.cli import main

    return main([str(ROOT / "recipes" / "llama.yaml"), "--no-ir", "--weights",
                 str(ROOT / "tests" / "data" / "llama_causal_lm.safetensors"), "--tokenizer",
                 str(tok_dir / "tokenizer.json"), *args])


def test_cli_prompt_streams_the_completion(llama, tok_dir, capsys):
    want = llama.complete(PROMPT, max_tokens=7, temperature=0).text
    assert _cli(tok_dir, "--prompt", PROMPT, "--max-new-tokens", "7", "--quiet") == 0
    assert capsys.readouterr().out == want + "\n"
    sampled = llama.complete(PROMPT, max_tokens=7, temperature=0.9, top_k=40, top_p=0.9, min_p=0.01, seed=5,
                             stop=["zz"])
    assert _cli(tok_dir, "--prompt", PROMPT, "--max-new-tokens", "7", "--temperature", "0.9", "--top-k", "40",
                "--top-p", "0.9", "--min-p", "0.01", "--seed", "5", "--stop", "zz", "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["complete"]["text"] == sampled.text and data["complete"]["tokens"] == len(sampled.choices[0].token_ids)


def test_cli_prompt_errors(tok_dir, capsys):
    from builder.cli import main

    assert main([str(ROOT / "recipes" / "llama.yaml"), "--no-ir", "--prompt", "hi"]) == 1
    assert "--prompt needs --tokenizer" in capsys.readouterr().err
    assert _cli(tok_dir, "--prompt", "hi", "--top-p", "0") == 1
    assert "--top-p must be in" in capsys.readouterr().err
    assert _cli(tok_dir, "--prompt", "hi", "--prompt-ids", "1,2") == 1
    assert "give one of them" in capsys.readouterr().err


def test_the_cli_escapes_control_characters_of_the_models_text():
    from builder.cli_text import terminal_safe

    assert terminal_safe("a\nb\tc\x1b[31md\x07") == "a\nb\tc\\x1b[31md\\x07"


def test_cli_chat_keeps_the_conversation_and_streams_each_reply(llama, tok_dir, capsys, monkeypatch):
    import io

    from builder.cli_text import terminal_safe

    first = llama.chat([{"role": "user", "content": "hi"}], max_tokens=5, temperature=0).text
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": first},
               {"role": "user", "content": "again"}]
    second = llama.chat(history, max_tokens=5, temperature=0).text
    fresh = llama.chat([{"role": "user", "content": "again"}], max_tokens=5, temperature=0).text
    monkeypatch.setattr("sys.stdin", io.StringIO("hi\nagain\n/reset\nagain\n"))
    assert _cli(tok_dir, "--chat", "--max-new-tokens", "5", "--quiet") == 0
    out = capsys.readouterr().out
    first, second, fresh = (terminal_safe(t) for t in (first, second, fresh))   # the model's \x07 is escaped
    assert out.endswith(f"> {first}\n> {second}\n> > {fresh}\n> \n") and first != second
    assert _cli(tok_dir, "--chat", "--json") == 1
    assert "no --json" in capsys.readouterr().err


PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 999}},
          "required": ["name", "age"], "additionalProperties": False}
PERSON_FORMAT = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}


def _check_person(text):
    value = json.loads(text)
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(value, PERSON)
    return value


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 1.0, "seed": 11},
                                      {"temperature": 1.0, "seed": 12, "top_p": 0.9, "n": 2}])
def test_a_json_schema_response_parses_and_validates(llama, sampling):
    pytest.importorskip("llguidance")
    got = llama.complete(PROMPT, max_tokens=64, response_format=PERSON_FORMAT, **sampling)
    assert len(got.choices) == sampling.get("n", 1)
    for c in got.choices:
        assert c.finish_reason == "stop", c.text
        _check_person(c.text)
    if len(got.choices) == 2:
        assert got.choices[0].text != got.choices[1].text
    streamed = {}
    for chunk in llama.complete(PROMPT, max_tokens=64, response_format=PERSON_FORMAT, stream=True, **sampling):
        streamed[chunk.index] = streamed.get(chunk.index, "") + chunk.text
    assert [streamed[i] for i in range(len(got.choices))] == [c.text for c in got.choices]


def test_json_object_and_regex_responses_of_complete_and_chat(llama):
    pytest.importorskip("llguidance")
    tok = train_tokenizer(1000)
    eos = tok.token_to_id("<|im_end|>")
    for sampling in ({"temperature": 0}, {"temperature": 1.0, "seed": 1}):
        got = llama.complete(PROMPT, max_tokens=64, response_format={"type": "json_object"}, **sampling).choices[0]
        assert got.finish_reason == "stop" and isinstance(json.loads(got.text), dict)
    regex = "(yes|no)(, [a-zé]{1,6})?!?"
    ended_on_eos = 0
    for sampling in ({"temperature": 0}, {"temperature": 1.0, "seed": 2, "n": 2}):
        reply = llama.chat([{"role": "user", "content": "ok?"}], max_tokens=32,
                           response_format={"type": "regex", "regex": regex}, **sampling)
        for c in reply.choices:
            assert c.finish_reason == "stop" and re.fullmatch(regex, c.text), c.text
            # the eos that may end an accepting grammar is an id of the choice, not text of it
            assert tok.decode([t for t in c.token_ids if t != eos]) == c.text
            ended_on_eos += c.token_ids[-1] == eos
    assert ended_on_eos       # (seed 2: both sampled choices end on the eos, the greedy one on its '!')


def test_a_structured_response_cut_by_max_tokens_ends_with_length(llama):
    pytest.importorskip("llguidance")
    got = llama.complete(PROMPT, max_tokens=3, response_format=PERSON_FORMAT, temperature=0).choices[0]
    assert got.finish_reason == "length" and len(got.token_ids) == 3 and got.text.startswith('{"')
    with pytest.raises(json.JSONDecodeError):
        json.loads(got.text)


def test_response_format_errors_come_at_call_time(llama):
    pytest.importorskip("llguidance")
    with pytest.raises(ValueError, match=r"response_format\.regex: "):
        llama.complete(PROMPT, stream=True, response_format={"type": "regex", "regex": "[ab"})
    with pytest.raises(ValueError, match=r"response_format\.json_schema\.schema: "):
        llama.chat([{"role": "user", "content": "hi"}], stream=True,
                   response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}})
    with pytest.raises(ValueError, match=r"response_format\.type"):
        llama.complete(PROMPT, response_format={"type": "yaml"})
    free = llama.complete(PROMPT, max_tokens=6, temperature=0, response_format={"type": "text"})
    assert free.text == llama.complete(PROMPT, max_tokens=6, temperature=0).text
