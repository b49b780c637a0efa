"""``build MODEL --save-exe DIR`` writes one artifact folder that the runtime alone loads and runs
(:mod:`runtime.artifact`), and the parameter names are one naming end to end: the executable's
functions, the manifest, the params file and ``CompiledModel.params`` say ``model.embed_tokens.weight``."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from builder.cli import main

ROOT = Path(__file__).resolve().parents[2]
SMALL = str(ROOT / "recipes" / "llama_mlp_small.yaml")
WEIGHTS = str(ROOT / "tests" / "data" / "llama_mlp_layer0.safetensors")
LLAMA = str(ROOT / "recipes" / "llama.yaml")
TINY_LLAMA = ["num_layers=1", "vocab_size=64", "hidden_size=32", "intermediate_size=48", "num_heads=2",
              "num_kv_heads=1", "head_dim=16"]

#: Run in a fresh interpreter: load the artifact with the runtime alone, run ``forward`` on x.npz, and
#: report which of our compiler's packages were imported.
RUNTIME_ONLY = """
import json, sys
import numpy as np
import runtime
art = runtime.load_artifact(sys.argv[1])
x = np.load(sys.argv[2])["x"]
np.save(sys.argv[3], art["forward"](x))
print(json.dumps({"modules": sorted(m for m in sys.modules if m.split(".")[0] in ("builder", "schemas", "pydantic")),
                  "params": art.exe.get_function_params("forward")[1:], "names": art.param_names,
                  "recipe": art.recipe_text is not None, "tokenizer": str(art.tokenizer_path)}))
"""


def _silu(v):
    return v / (1.0 + np.exp(-v))


@pytest.fixture(scope="module")
def mlp_artifact(tmp_path_factory):
    """The small LlamaMLP recipe with its real weights, saved by ``build --save-exe`` with a tokenizer file."""
    folder = tmp_path_factory.mktemp("art")
    tok = folder.parent / "tokenizer.json"
    tok.write_text('{"version": "1.0", "model": {"type": "WordLevel", "vocab": {"a": 0}}}')
    assert main([SMALL, "--no-ir", "--quiet", "--weights", WEIGHTS, "--save-exe", str(folder / "out"),
                 "--tokenizer", str(tok)]) == 0
    return folder / "out", tok


def test_the_runtime_alone_runs_the_artifact_as_numpy_computes_it(mlp_artifact, tmp_path):
    """A subprocess that imports only ``runtime`` (no builder, schemas or pydantic in sys.modules) loads the
    folder and runs ``forward``; the result matches a float64 numpy MLP on the checkpoint's weights."""
    from safetensors.numpy import load_file

    folder, _ = mlp_artifact
    x = np.random.default_rng(0).standard_normal((3, 256)).astype(np.float32)
    np.savez(tmp_path / "x.npz", x=x)
    r = subprocess.run([sys.executable, "-c", RUNTIME_ONLY, str(folder), str(tmp_path / "x.npz"), str(tmp_path / "y.npy")],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["modules"] == []
    w = {k: v.astype(np.float64) for k, v in load_file(WEIGHTS).items()}
    x64 = x.astype(np.float64)
    ref = (_silu(x64 @ w["gate_proj.weight"].T) * (x64 @ w["up_proj.weight"].T)) @ w["down_proj.weight"].T
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), ref, rtol=1e-4, atol=1e-5)
    assert report["params"] == report["names"] == ["gate_proj.weight", "up_proj.weight", "down_proj.weight"]
    assert report["recipe"] and report["tokenizer"].endswith("tokenizer.json")


def test_the_folder_holds_what_the_manifest_lists(mlp_artifact):
    import yaml

    from runtime.weights import read_safetensors_header
    from schemas import load_recipe, load_recipe_text

    folder, tok = mlp_artifact
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["format"] == "model-builder-artifact" and manifest["version"] == 1
    assert sorted(manifest["files"]) == ["model.mbx", "params.safetensors", "recipe.yaml", "tokenizer.json"]
    for name, entry in manifest["files"].items():
        assert (folder / name).stat().st_size == entry["bytes"]
    assert [(p["name"], p["shape"], p["dtype"]) for p in manifest["params"]] == [
        ("gate_proj.weight", [688, 256], "float32"), ("up_proj.weight", [688, 256], "float32"),
        ("down_proj.weight", [256, 688], "float32")]
    header = read_safetensors_header(folder / "params.safetensors")
    assert list(header) == [p["name"] for p in manifest["params"]]
    assert manifest["functions"]["forward"] == {"inputs": [{"name": "x", "type": "float32[batch_size, 256]"}],
                                                "output": "float32[batch_size, 256]"}
    assert (folder / "tokenizer.json").read_bytes() == tok.read_bytes()
    recipe_text = (folder / "recipe.yaml").read_text()
    assert yaml.safe_load(recipe_text)["name"] == "llama_mlp_small"
    assert load_recipe_text(recipe_text).model_dump() == load_recipe(SMALL).model_dump()


def _copy(folder: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(folder, dst)
    return dst


@pytest.mark.parametrize("damage,expected", [
    (lambda d: (d / "manifest.json").unlink(), "manifest.json: missing"),
    (lambda d: (d / "params.safetensors").unlink(), "params.safetensors: missing"),
    (lambda d: (d / "recipe.yaml").write_text("name: other\n"), "recipe.yaml: has 12 bytes"),
    (lambda d: _truncate(d / "params.safetensors"), "params.safetensors: has"),
    (lambda d: _flip_last_byte(d / "params.safetensors"), "'down_proj.weight' is damaged"),
    (lambda d: _flip_last_byte(d / "model.mbx"), "model.mbx: the executable is damaged"),
    (lambda d: _flip_last_byte(d / "tokenizer.json"), "tokenizer.json: damaged"),
    (lambda d: (d / "manifest.json").write_text("{not json"), "manifest.json: not valid JSON"),
    (lambda d: _edit_manifest(d, lambda m: m.update(version=7)), "artifact version 7 is not supported"),
    (lambda d: _edit_manifest(d, lambda m: m["params"][0].update(dtype="float16")),
     "function 'forward' takes 3 parameter(s) (first difference"),
    (lambda d: _edit_manifest(d, lambda m: m["params"].pop()), "the manifest lists 2"),
])
def test_a_damaged_or_inconsistent_file_is_one_clear_error(mlp_artifact, tmp_path, damage, expected):
    from runtime import ArtifactError, load_artifact

    folder = _copy(mlp_artifact[0], tmp_path / "copy")
    damage(folder)
    with pytest.raises(ArtifactError) as exc:
        load_artifact(folder)
    assert expected in str(exc.value)
    assert str(folder) in str(exc.value)


def test_a_folder_that_is_not_an_artifact(tmp_path):
    from runtime import ArtifactError, load_artifact

    with pytest.raises(ArtifactError, match="it does not exist"):
        load_artifact(tmp_path / "nothing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ArtifactError, match="not a directory"):
        load_artifact(tmp_path / "file")


def test_save_exe_onto_a_file_is_refused_before_the_build(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    assert main([SMALL, "--no-ir", "--save-exe", str(tmp_path / "f")]) == 1
    assert "--save-exe" in capsys.readouterr().err and (tmp_path / "f").read_text() == "x"


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:-4])


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


def _edit_manifest(folder: Path, edit) -> None:
    m = json.loads((folder / "manifest.json").read_text())
    edit(m)
    (folder / "manifest.json").write_text(json.dumps(m))


def test_quantized_llama_artifact_decodes_as_the_built_model(tmp_path):
    """A q4 Llama (row-tiled 4-bit words, KV cache functions) saved and loaded back: the artifact's prefill /
    decode give the built model's logits exactly (the same code and the same parameter bytes), and the names
    the executable's functions take are the model's parameter names (the KeyError of issue 41 is gone)."""
    import builder
    from runtime import ContiguousKVCache, load_artifact

    m = builder.build(LLAMA, [*TINY_LLAMA, "quantization=q4f32_1"])
    m.save_artifact(tmp_path / "art")
    art = load_artifact(tmp_path / "art")
    assert art.param_names == m.param_names
    assert m.exe.get_function_params("decode")[3:] == m.param_names
    assert "model.layers.0.mlp.gate_proj.q_weight" in m.param_names
    by_name = {n: art.params[n] for n in art.exe.get_function_params("decode")[3:]}     # no KeyError
    for name, value in by_name.items():
        np.testing.assert_array_equal(value, m.params[name])
    ids = np.array([[1, 5, 9]], dtype=np.int64)
    c1, c2 = ContiguousKVCache(), ContiguousKVCache()
    np.testing.assert_array_equal(art["prefill"](ids, c1, 3), m["prefill"](ids, c2, 3))
    step = np.array([[7]], dtype=np.int64)
    np.testing.assert_array_equal(art["decode"](step, c1, 4), m["decode"](step, c2, 4))
    with pytest.raises(TypeError, match="takes inputs"):
        art["decode"](step)
