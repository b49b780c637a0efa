"""``build DIR`` from the command line: generation, ``--print-recipe`` building the same model from the file,
and the refusals (a folder without config.json, an unknown architecture, a malformed config, a field the family
does not know or a value it does not compute, a missing weights file): one message, exit 1, no traceback."""
import json

import numpy as np
import pytest

import builder
from builder.cli import main

pytestmark = pytest.mark.hf   # a checkpoint saved by transformers (pyproject's markers)

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 64, "hidden_size": 32,
         "intermediate_size": 48, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
         "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": False, "transformers_version": "5.24.0",
         "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}


def _run(capsys, *args):
    rc = main([str(a) for a in args])
    out = capsys.readouterr()
    assert "Traceback" not in out.err + out.out
    return rc, out.err, out.out


def _folder(tmp_path, weights=True, **changes):
    config = {**LLAMA, **changes}
    config = {k: v for k, v in config.items() if v is not ...}
    (tmp_path / "config.json").write_text(json.dumps(config))
    if weights:   # random weights of the recipe's shapes, saved by the recipe's own --save-params
        m = builder.build(_recipe(), _overrides())
        m.save_params(tmp_path / "model.safetensors")
    return tmp_path


def _recipe():
    from builder.checkpoint import FAMILIES_FILE

    return FAMILIES_FILE.parent.parent / "llama.yaml"


def _overrides():
    return ["vocab_size=64", "hidden_size=32", "intermediate_size=48", "num_layers=1", "num_heads=4",
            "num_kv_heads=2", "head_dim=8", "rms_norm_eps=1e-6"]


def test_cli_generates_as_transformers_and_print_recipe_round_trips(tmp_path, capsys):
    pytest.importorskip("transformers")
    import torch
    from helpers.hf_checkpoints import save_tiny

    hf = save_tiny(tmp_path / "m", "Qwen2Config", "Qwen2ForCausalLM", seed=2, vocab_size=120, hidden_size=32,
                   intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    prompt = np.array([[5, 9, 33, 2, 71]])
    with torch.no_grad():
        want = hf.generate(torch.from_numpy(prompt), do_sample=False, max_new_tokens=8, min_new_tokens=8,
                           pad_token_id=0)[0, 5:].tolist()
    rc, err, out = _run(capsys, tmp_path / "m", "--no-ir", "--quiet", "--prompt-ids", "5,9,33,2,71",
                        "--max-new-tokens", "8")
    assert rc == 0, err
    assert ",".join(map(str, want)) in out
    rc, err, text = _run(capsys, tmp_path / "m", "--print-recipe")
    assert rc == 0, err
    assert "out_bias: false" in text and "vocab_size: 120" in text
    (tmp_path / "r.yaml").write_text(text)
    ids = prompt.astype(np.int64)
    a = builder.build(tmp_path / "r.yaml", weights=tmp_path / "m" / "model.safetensors")["forward"](ids)
    with torch.no_grad():
        np.testing.assert_allclose(a, hf(torch.from_numpy(ids)).logits.numpy(), atol=1e-4, rtol=0)


@pytest.mark.parametrize("changes, message", [
    (dict(architectures=["GPTBigCodeForCausalLM"], model_type="gpt_bigcode"),
     "no family serves architectures [\"GPTBigCodeForCausalLM\"]"),
    (dict(hidden_act="gelu"), "hidden_act = \"gelu\": the recipe's MLP is SiLU-gated"),
    (dict(rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}),
     "rope_parameters.rope_type = \"yarn\" is not supported"),
    (dict(attn_logit_softcapping=30.0), "does not know, which may change the computation: attn_logit_softcapping = 30.0"),
    (dict(hidden_size=...), "field 'hidden_size' is missing"),
    (dict(architectures=["Qwen2ForCausalLM"], model_type="qwen2", use_sliding_window=True, sliding_window=16,
          max_window_layers=1), "use_sliding_window = true: it windows only the layers from max_window_layers on"),
])
def test_refused_configs(tmp_path, capsys, changes, message):
    folder = _folder(tmp_path, weights=False, **changes)
    (folder / "model.safetensors").write_bytes(b"")
    rc, err, _ = _run(capsys, folder, "--no-ir")
    assert rc == 1 and message in err, err


def test_known_architectures_listed_and_other_folder_errors(tmp_path, capsys):
    folder = _folder(tmp_path, weights=False, architectures=["Nope"], model_type="nope")
    rc, err, _ = _run(capsys, folder)
    assert rc == 1 and "known architectures: " in err and "LlamaForCausalLM" in err and "Qwen2ForCausalLM" in err
    (tmp_path / "config.json").unlink()
    rc, err, _ = _run(capsys, tmp_path)
    assert rc == 1 and "no config.json" in err
    (tmp_path / "config.json").write_text("{\"hidden_size\": 32,")
    rc, err, _ = _run(capsys, tmp_path)
    assert rc == 1 and "config.json is not valid JSON" in err
    (tmp_path / "config.json").write_text("[1, 2]")
    rc, err, _ = _run(capsys, tmp_path)
    assert rc == 1 and "expected a JSON object" in err
    for text, message in (("[" * 100_000, "maximum recursion depth"), ('{"hidden_size": NaN}', "NaN is not a number")):
        (tmp_path / "config.json").write_text(text)
        rc, err, _ = _run(capsys, tmp_path)
        assert rc == 1 and message in err, err
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    (tmp_path / "pytorch_model.bin").write_bytes(b"x")
    rc, err, _ = _run(capsys, tmp_path)
    assert rc == 1 and "no model.safetensors or model.safetensors.index.json" in err and "pickles" in err
    (tmp_path / "config.json").write_text(" " * (2 << 20))
    rc, err, _ = _run(capsys, tmp_path)
    assert rc == 1 and "more than the" in err


def test_a_recipe_error_from_an_override_exits_2(tmp_path, capsys):
    folder = _folder(tmp_path)
    rc, err, _ = _run(capsys, folder, "--no-ir", "num_heads=5")
    assert rc == 2, err
    rc, err, _ = _run(capsys, folder, "--no-ir", "--quiet", "--prompt-ids", "1,2,3", "--max-new-tokens", "2")
    assert rc == 0, err
    rc, err, out = _run(capsys, folder, "--validate")
    assert rc == 0 and "(llama family, llama.yaml): valid" in out and "weights file checked" in out, err


def test_transformers_4_rope_fields_and_defaults(tmp_path):
    """A transformers 4.x config (rope_theta at the top, rope_scaling with the old key ``type``, head_dim null,
    no num_key_value_heads): the same recipe variables as transformers 5's rope_parameters."""
    from builder.checkpoint import resolve_checkpoint

    old = {k: v for k, v in LLAMA.items() if k not in ("rope_parameters", "num_key_value_heads")}
    folder = _folder(tmp_path, weights=False, **{"rope_parameters": ..., "num_key_value_heads": ...})
    (folder / "config.json").write_text(json.dumps({**old, "rope_theta": 500000.0, "head_dim": None,
                                                    "rope_scaling": {"type": "linear", "factor": 2.0}}))
    (folder / "model.safetensors").write_bytes(b"")
    got = resolve_checkpoint(folder, ["num_layers=3"]).overrides
    for want in ("rope_theta=500000.0", 'rope_scaling={"rope_type": "linear", "factor": 2.0}', "num_kv_heads=4",
                 "head_dim=8"):
        assert want in got, got
    assert got[-1] == "num_layers=3"      # the caller's overrides come last, so they win
