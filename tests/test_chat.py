"""builder.chat: chat templates rendered as HF transformers' ``PreTrainedTokenizerFast.apply_chat_template(...,
tokenize=False)`` renders them (a ChatML-shaped template, a Llama-3-shaped one and one of our own with a system
prompt, alternation checked by ``raise_exception``, ``namespace``, ``tojson`` and tools), on a byte-level BPE
tokenizer trained in the test; the sandbox, the output bound and the errors."""
from __future__ import annotations

import json

import pytest

import builder.chat as chat
from builder.chat import ChatTemplate, load_tokenizer_config
from helpers.bpe import train_tokenizer

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

LLAMA3 = ("{{ bos_token }}{% for message in messages %}{% set content = '<|start_header_id|>' + message['role'] + "
          "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' %}{{ content }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")

OURS = """{%- if messages[0]['role'] == 'system' %}
    {%- set system = messages[0]['content'] %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system = 'You are helpful.' %}
{%- endif %}
{{ bos_token }}[SYS] {{ system }} [/SYS]
{% set ns = namespace(turns=0) %}
{% for message in messages %}
    {% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
    {% endif %}
    {% if message['role'] == 'user' %}
        {% set ns.turns = ns.turns + 1 %}
[INST] {{ message['content'] }} [/INST]
    {% else %}
{% generation %}{{ message['content'] }}{% endgeneration %}{{ eos_token }}
    {% endif %}
{% endfor %}
{% if tools %}TOOLS {{ tools | tojson }}
{% endif %}
turns={{ ns.turns }}{% if add_generation_prompt %} >{% endif %}"""

CONVERSATIONS = [
    [{"role": "user", "content": "hello café 😀"}],
    [{"role": "system", "content": "Sois bref."}, {"role": "user", "content": "naïve?"},
     {"role": "assistant", "content": "  oui  "}, {"role": "user", "content": "über <b>&</b>"}],
]


@pytest.fixture(scope="module")
def hf_tokenizer():
    transformers = pytest.importorskip("transformers")
    return transformers.PreTrainedTokenizerFast(tokenizer_object=train_tokenizer(), bos_token="<s>", eos_token="</s>")


@pytest.mark.parametrize("source", [CHATML, LLAMA3, OURS], ids=["chatml", "llama3", "ours"])
@pytest.mark.parametrize("messages", CONVERSATIONS)
@pytest.mark.parametrize("add_generation_prompt", [False, True])
def test_templates_render_as_transformers_apply_chat_template(hf_tokenizer, source, messages, add_generation_prompt):
    want = hf_tokenizer.apply_chat_template(messages, chat_template=source, tokenize=False,
                                            add_generation_prompt=add_generation_prompt)
    got = ChatTemplate(source, {"bos_token": "<s>", "eos_token": "</s>"}).render(
        messages, add_generation_prompt=add_generation_prompt)
    assert got == want and got


def test_tools_reach_the_template_as_transformers_gives_them(hf_tokenizer):
    tools = [{"type": "function", "function": {"name": "météo", "parameters": {"type": "object"}}}]
    messages = CONVERSATIONS[0]
    want = hf_tokenizer.apply_chat_template(messages, chat_template=OURS, tools=tools, tokenize=False)
    assert ChatTemplate(OURS, {"bos_token": "<s>", "eos_token": "</s>"}).render(messages, tools=tools) == want
    assert "météo" in want


def test_raise_exception_is_a_value_error_with_the_templates_message():
    bad = [{"role": "assistant", "content": "x"}]
    with pytest.raises(ValueError, match="roles must alternate"):
        ChatTemplate(OURS).render(bad)


@pytest.mark.parametrize("source", [
    "{{ messages.append(1) }}",                       # the immutable sandbox: no mutation of the inputs
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",  # no Python internals
    "{% set ns = namespace() %}{% set ns._x = 1 %}",
])
def test_the_sandbox_refuses_unsafe_templates(source):
    with pytest.raises(ValueError, match="chat_template"):
        ChatTemplate(source).render(CONVERSATIONS[0])


def test_the_rendered_output_is_bounded(monkeypatch):
    monkeypatch.setattr(chat, "MAX_RENDERED_CHARS", 1000)
    with pytest.raises(ValueError, match="longer than 1000"):
        ChatTemplate("{% for i in range(100000) %}{{ 'xxxxxxxxxx' }}{% endfor %}").render([])


def test_template_and_message_errors():
    with pytest.raises(ValueError, match="line 1"):
        ChatTemplate("{% for %}")
    with pytest.raises(ValueError, match="messages\\[0\\]"):
        ChatTemplate(CHATML).render(["hello"])
    with pytest.raises(ValueError, match="list of dicts"):
        ChatTemplate(CHATML).render("hello")
    with pytest.raises(ValueError, match="not object"):
        ChatTemplate(CHATML).render([{"role": "user", "content": object()}])


def test_the_template_from_tokenizer_config(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "chat_template": [{"name": "default", "template": LLAMA3}, {"name": "tool_use", "template": CHATML}],
        "bos_token": {"content": "<s>", "special": True}, "eos_token": "</s>"}))
    config = load_tokenizer_config(tmp_path / "tokenizer.json")
    t = ChatTemplate.from_tokenizer_config(config)
    assert t.render(CONVERSATIONS[0]).startswith("<s><|start_header_id|>user")
    assert ChatTemplate.from_tokenizer_config(config, name="tool_use").source == CHATML
    with pytest.raises(ValueError, match="no chat template named 'x'"):
        ChatTemplate.from_tokenizer_config(config, name="x")
    assert ChatTemplate.from_tokenizer_config({}) is None
    (tmp_path / "empty").mkdir()
    assert load_tokenizer_config(tmp_path / "empty") is None
    (tmp_path / "tokenizer_config.json").write_text("[1]")
    with pytest.raises(ValueError, match="JSON object"):
        load_tokenizer_config(tmp_path)
