"""Weight transforms declared in ``weights.transforms`` (issue 42): transpose, split, slice, reshape and
concatenate of the file's tensors before names bind -- in the loader (values against numpy float64, shapes
checked before any data is read, strict accounting, a tensor-parallel rank reading only its part), the recipe
schema (positions of errors) and a built model (a GPT-2-style Conv1D checkpoint as saved)."""
from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import save_file

from builder.build_model import build
from core.limits import MAX_WEIGHT_TRANSFORMS
from core.weight_transforms import parse_transforms, transform_problems
from runtime import WeightsError, load_params
from runtime.weights import TensorShard, _Checkpoint
from schemas import RecipeError, dump_recipe, load_recipe_text


def _values(shape, seed):
    """Float32 values exactly representable in float64 (the references are float64)."""
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _write(tmp_path, tensors, name="w.safetensors"):
    path = tmp_path / name
    save_file(tensors, str(path))
    return path


SPLIT = {"from": "l.{i}.qkv.weight", "split": {"axis": 0, "sizes": [6, 3, 3]},
         "to": ["l.{i}.q.weight", "l.{i}.k.weight", "l.{i}.v.weight"]}


@pytest.fixture
def fused(tmp_path):
    tensors = {"l.0.qkv.weight": _values((12, 5), 0), "l.1.qkv.weight": _values((12, 5), 1),
               "l.0.proj.weight": _values((5, 7), 2), "l.0.extra": _values((2, 3, 4), 3)}
    return _write(tmp_path, tensors), {k: v.astype(np.float64) for k, v in tensors.items()}


def _qkv(layers=(0, 1), sizes=(6, 3, 3)):
    return {f"l.{i}.{p}.weight": ((s, 5), "float32") for i in layers for p, s in zip("qkv", sizes)}


# --- the loader ---------------------------------------------------------------------------------------

def test_split_and_transpose_give_the_numpy_parts(fused):
    path, ref = fused
    expected = {**_qkv(), "l.0.proj.weight": ((7, 5), "float32")}
    out = load_params(path, expected, transforms=[SPLIT, {"from": "l.0.proj.weight", "transpose": True}],
                      ignore=["l.0.extra"])
    for i in (0, 1):
        q, k, v = np.split(ref[f"l.{i}.qkv.weight"], [6, 9], axis=0)
        np.testing.assert_array_equal(out[f"l.{i}.q.weight"], q)
        np.testing.assert_array_equal(out[f"l.{i}.k.weight"], k)
        np.testing.assert_array_equal(out[f"l.{i}.v.weight"], v)
    np.testing.assert_array_equal(out["l.0.proj.weight"], ref["l.0.proj.weight"].T)
    assert out["l.0.proj.weight"].flags.c_contiguous


def test_slice_reshape_concatenate_and_a_chain(fused):
    path, ref = fused
    transforms = [
        {"from": "l.0.extra", "reshape": [6, -1]},                                 # (2, 3, 4) -> (6, 4)
        {"from": "l.0.extra", "transpose": True, "to": "extra_t"},                 # then (4, 6)
        {"from": "l.0.proj.weight", "slice": {"axis": -1, "start": 2, "stop": 6}, "to": "proj_part"},
        {"from": ["l.0.qkv.weight", "l.1.qkv.weight"], "concatenate": {"axis": 1}, "to": "both"},
    ]
    expected = {"extra_t": ((4, 6), "float32"), "proj_part": ((5, 4), "float32"), "both": ((12, 10), "float32")}
    out = load_params(path, expected, transforms=transforms)
    np.testing.assert_array_equal(out["extra_t"], ref["l.0.extra"].reshape(6, 4).T)
    np.testing.assert_array_equal(out["proj_part"], ref["l.0.proj.weight"][:, 2:6])
    np.testing.assert_array_equal(out["both"], np.concatenate([ref["l.0.qkv.weight"], ref["l.1.qkv.weight"]], 1))


def test_a_shape_mismatch_names_the_transform_the_tensor_and_both_shapes_before_any_data_is_read(fused, monkeypatch):
    path, _ = fused
    monkeypatch.setattr(_Checkpoint, "read_region", lambda *a: pytest.fail("data read before the shapes were checked"))
    with pytest.raises(WeightsError) as info:
        load_params(path, {**_qkv(sizes=(6, 4, 2)), "l.0.proj.weight": ((7, 5), "float32")},
                    transforms=[SPLIT, {"from": "l.0.proj.weight", "transpose": True}], ignore=["l.0.extra"])
    text = str(info.value)
    assert ("'l.0.k.weight' (made by weights.transforms[0] (split of 'l.{i}.qkv.weight') from 'l.0.qkv.weight' "
            "(12, 5)) has shape (3, 5), parameter 'l.0.k.weight' expects (4, 5)") in text
    with pytest.raises(WeightsError, match=r"split sizes \[6, 3, 2\] along axis 0 add up to 11, not its length 12"):
        load_params(path, _qkv(), transforms=[{**SPLIT, "split": {"axis": 0, "sizes": [6, 3, 2]}}],
                    ignore=["l.0.*"])


def test_strict_accounting_holds_through_transforms(fused):
    path, _ = fused
    # an output no parameter uses is reported with its transform; a consumed tensor is used
    with pytest.raises(WeightsError) as info:
        load_params(path, _qkv(sizes=(6, 3, 3)) | {}, transforms=[SPLIT], ignore=["l.0.extra"])
    assert "unexpected tensor 'l.0.proj.weight' (no parameter uses it)" in str(info.value)
    assert "qkv" not in str(info.value)
    with pytest.raises(WeightsError) as info:
        load_params(path, {k: v for k, v in _qkv().items() if k != "l.1.v.weight"}, transforms=[SPLIT],
                    ignore=["l.0.extra", "l.0.proj.*"])
    assert "unexpected tensor 'l.1.v.weight' (made by weights.transforms[0]" in str(info.value)
    # a transform that matches nothing, an output that would replace another tensor
    with pytest.raises(WeightsError, match=r"weights.transforms\[0\] \(transpose of 'nope.{i}'\) matches no tensor"):
        load_params(path, {}, transforms=[{"from": "nope.{i}", "transpose": True}], ignore=["*"])
    with pytest.raises(WeightsError) as info:
        load_params(path, {"b": ((24, 5), "float32")}, ignore=["l.0.[pe]*", "l.1.*"],
                    transforms=[{"from": ["l.0.qkv.weight", "l.0.qkv.weight"], "concatenate": {"axis": 0}, "to": "b"}])
    assert info.value.problems == ["weights.transforms[0] (concatenate of 'l.0.qkv.weight'): the inputs "
                                   "'l.0.qkv.weight', 'l.0.qkv.weight' name one tensor twice"]
    with pytest.raises(WeightsError, match="output 'l.0.extra' would replace another tensor"):
        load_params(path, {}, transforms=[{"from": "l.0.proj.weight", "transpose": True, "to": "l.0.extra"}],
                    ignore=["*"])


def test_a_rank_reads_only_its_part_of_each_split_part(fused, monkeypatch):
    path, ref = fused
    reads = []
    original = _Checkpoint.read_region

    def spy(self, name, region=None):
        reads.append((name, region))
        return original(self, name, region)

    monkeypatch.setattr(_Checkpoint, "read_region", spy)
    for rank in range(3):
        reads.clear()
        shards = {n: TensorShard(0, rank, 3) for n in _qkv(layers=(0,))}
        expected = {n: ((s[0] // 3, 5), d) for n, (s, d) in _qkv(layers=(0,)).items()}
        expected["l.0.proj.weight"] = ((7, 5), "float32")
        out = load_params(path, expected, shards=shards,
                          transforms=[SPLIT, {"from": "l.0.proj.weight", "transpose": True}],
                          ignore=["l.1.*", "l.0.extra"])
        q, k, v = np.split(ref["l.0.qkv.weight"], [6, 9], axis=0)
        np.testing.assert_array_equal(out["l.0.q.weight"], q[2 * rank:2 * rank + 2])
        np.testing.assert_array_equal(out["l.0.k.weight"], k[rank:rank + 1])
        np.testing.assert_array_equal(out["l.0.v.weight"], v[rank:rank + 1])
        assert ("l.0.qkv.weight", (0, 2 * rank, 2 * rank + 2)) in reads          # q's rows of this rank only
        assert ("l.0.qkv.weight", (0, 6 + rank, 7 + rank)) in reads
        assert ("l.0.qkv.weight", (0, 9 + rank, 10 + rank)) in reads
        assert all(region is not None for name, region in reads if name == "l.0.qkv.weight")


def test_a_shard_of_a_concatenation_reads_only_the_parts_it_covers(fused):
    path, ref = fused
    both = np.concatenate([ref["l.0.qkv.weight"], ref["l.1.qkv.weight"]], axis=0)     # (24, 5)
    for rank in range(4):
        out = load_params(path, {"both": ((6, 5), "float32")}, shards={"both": TensorShard(0, rank, 4)},
                          transforms=[{"from": ["l.0.qkv.weight", "l.1.qkv.weight"], "concatenate": {"axis": 0},
                                       "to": "both"}], ignore=["l.0.proj.weight", "l.0.extra"])
        np.testing.assert_array_equal(out["both"], both[6 * rank:6 * rank + 6])


def test_digests_are_the_whole_file_tensors_with_or_without_transforms(fused):
    path, _ = fused
    plain, moved = {}, {}
    load_params(path, {"l.0.qkv.weight": ((12, 5), "float32")}, ignore=["*"], digests=plain)
    load_params(path, {n: ((s[0] // 3, 5), d) for n, (s, d) in _qkv(layers=(0,)).items()}, ignore=["*"],
                shards={n: TensorShard(0, 1, 3) for n in _qkv(layers=(0,))}, transforms=[SPLIT], digests=moved)
    assert moved["l.0.qkv.weight"] == plain["l.0.qkv.weight"]


# --- the grammar and the recipe schema ------------------------------------------------------------------

BAD = [
    ({"from": "a"}, "exactly one of"),
    ({"from": "a", "transpose": True, "reshape": [2]}, "exactly one of"),
    ({"from": "a", "transpose": [0, 0]}, "permutation"),
    ({"from": "a.{i}", "split": {"axis": 0, "sizes": [1, 2]}, "to": ["b.{i}", "c"]}, "placeholders of 'from'"),
    ({"from": "a", "split": {"axis": 0, "sizes": [1, 2]}, "to": "b"}, "list of 2 to"),
    ({"from": "a", "split": {"axis": 0, "sizes": [1, 2, 3]}, "to": ["b", "c"]}, "makes 3 parts, 'to' names 2"),
    ({"from": "a", "slice": {"axis": 0, "start": 3, "stop": 3}}, "0 <= start < stop"),
    ({"from": "a", "reshape": [-1, -1]}, "one of them -1"),
    ({"from": "a.", "transpose": True}, "must not be empty or end with '.'"),
    ({"from": ["a", "b"], "transpose": True}, "one tensor name"),
]


@pytest.mark.parametrize("entry, words", BAD)
def test_invalid_transforms_are_refused_by_the_loader_and_the_schema_alike(entry, words, tmp_path):
    assert any(words in p for p in transform_problems(entry)), transform_problems(entry)
    with pytest.raises(ValueError, match="invalid weight transforms"):
        parse_transforms([entry])
    text = ("name: t\nmodel: {layers: {fc: {type: Linear, in_features: 2, out_features: 2}}, forward: fc(x)}\n"
            "functions: {forward: {x: {shape: [1, 2], dtype: float32}}}\n"
            "weights:\n  transforms:\n    - " + repr(entry).replace("True", "true") + "\n")
    with pytest.raises(RecipeError) as info:
        load_recipe_text(text, "r.yaml")
    issues = info.value.issues
    assert all(issue.path.startswith("weights.transforms.0") and issue.line == 6 for issue in issues), issues


def test_a_long_chain_of_transforms_stays_linear(tmp_path):
    a = _values((2, 4), 60)
    path = _write(tmp_path, {"a": a})
    chain = [{"from": "a", "split": {"axis": 1, "sizes": [2, 2]}, "to": ["p", "q"]},
             {"from": ["p", "q"], "concatenate": {"axis": 1}, "to": "a"}] * (MAX_WEIGHT_TRANSFORMS // 2 - 1)
    out = load_params(path, {"a": ((4, 2), "float32")}, transforms=chain + [{"from": "a", "transpose": True}],
                      layout={"a": "in_out"})      # split parts share their input: the walks visit each node once
    np.testing.assert_array_equal(out["a"], a.astype(np.float64).T)


def test_the_number_of_transforms_is_bounded():
    with pytest.raises(ValueError, match=f"more than the {MAX_WEIGHT_TRANSFORMS} allowed"):
        parse_transforms([{"from": "a", "transpose": True}] * (MAX_WEIGHT_TRANSFORMS + 1))


# --- a built model: a GPT-2-style checkpoint as saved -------------------------------------------------

RECIPE = """
name: conv1d_attn
vars: {hidden: 8, dtype: float32}
model:
  layers:
    q: {type: Linear, in_features: ${hidden}, out_features: ${hidden}}
    k: {type: Linear, in_features: ${hidden}, out_features: ${hidden}}
    v: {type: Linear, in_features: ${hidden}, out_features: ${hidden}}
    c_proj: {type: Linear, in_features: ${hidden}, out_features: ${hidden}}
  forward: |
    return c_proj(q(x) * k(x) + v(x))
functions:
  forward:
    x: {shape: [batch, ${hidden}], dtype: ${dtype}}
dtype: ${dtype}
weights:
  path: gpt2.safetensors
  prefix: "h.0.attn."
  layout: {"h.*.attn.c_*.weight": in_out}      # how GPT-2 stores its weights: checked against the transforms
  transforms:
    # Conv1D stores (in, out): c_attn is the fused q, k, v of 3 * hidden outputs
    - {from: "h.{i}.attn.c_attn.weight", transpose: true}
    - {from: "h.{i}.attn.c_attn.weight", split: {axis: 0, sizes: [8, 8, 8]},
       to: ["h.{i}.attn.q.weight", "h.{i}.attn.k.weight", "h.{i}.attn.v.weight"]}
    - {from: "h.{i}.attn.c_attn.bias", split: {axis: 0, sizes: [8, 8, 8]},
       to: ["h.{i}.attn.q.bias", "h.{i}.attn.k.bias", "h.{i}.attn.v.bias"]}
    - {from: "h.{i}.attn.c_proj.weight", transpose: true}       # square: only this declaration catches it
"""


@pytest.fixture
def gpt2(tmp_path):
    tensors = {"h.0.attn.c_attn.weight": _values((8, 24), 10), "h.0.attn.c_attn.bias": _values((24,), 11),
               "h.0.attn.c_proj.weight": _values((8, 8), 12), "h.0.attn.c_proj.bias": _values((8,), 13)}
    _write(tmp_path, tensors, "gpt2.safetensors")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE)
    return recipe, {k: v.astype(np.float64) for k, v in tensors.items()}


def _conv1d_reference(x, t):
    """GPT-2's computation in float64: Conv1D ``y = x @ W + b`` with W stored (in, out)."""
    qkv = x @ t["h.0.attn.c_attn.weight"] + t["h.0.attn.c_attn.bias"]
    q, k, v = np.split(qkv, 3, axis=-1)
    return (q * k + v) @ t["h.0.attn.c_proj.weight"] + t["h.0.attn.c_proj.bias"]


def test_a_conv1d_checkpoint_builds_as_saved_and_matches_numpy(gpt2, tmp_path):
    recipe, ref = gpt2
    model = build(recipe)
    x = _values((3, 8), 20)
    np.testing.assert_allclose(model(x), _conv1d_reference(x.astype(np.float64), ref), rtol=1e-5, atol=1e-5)
    # saved parameters are in the model's layout: they load back without the transforms
    model.save_params(tmp_path / "saved.safetensors")
    again = build(recipe, weights=tmp_path / "saved.safetensors")
    np.testing.assert_array_equal(again(x), model(x))
    # the recipe prints with its transforms and reads back the same
    assert load_recipe_text(dump_recipe(model.recipe), "again.yaml").weights == model.recipe.weights


def test_the_layout_declaration_catches_a_square_weight_left_transposed(gpt2, tmp_path):
    recipe, _ = gpt2
    text = recipe.read_text()
    forgot = text.replace('    - {from: "h.{i}.attn.c_proj.weight", transpose: true}', "")
    (tmp_path / "forgot.yaml").write_text(forgot)
    with pytest.raises(WeightsError) as info:
        build(tmp_path / "forgot.yaml")
    assert info.value.problems == [
        f"'h.0.attn.c_proj.weight' (8, 8) is stored (in, out) (weights.layout 'h.*.attn.c_*.weight' at "
        f"{tmp_path / 'forgot.yaml'}:19:35: in_out) but no "
        "transform transposes it: add {from: 'h.0.attn.c_proj.weight', transpose: true} to weights.transforms (a "
        "square matrix would load transposed without a word)"]
    # without the declaration the square weight loads transposed: its shape cannot tell
    (tmp_path / "silent.yaml").write_text(forgot.replace("  layout:", "  # layout:"))
    x = _values((3, 8), 20)
    assert not np.allclose(build(tmp_path / "silent.yaml")(x), build(recipe)(x), atol=1e-3)
    # declared out_in but transposed; a glob that matches nothing
    (tmp_path / "other.yaml").write_text(text.replace(
        '"h.*.attn.c_*.weight": in_out',
        '"h.*.attn.c_proj.weight": out_in, "h.*.attn.c_attn.weight": in_out, "nope.*": in_out'))
    with pytest.raises(WeightsError) as info:
        build(tmp_path / "other.yaml")
    assert any("'h.0.attn.c_proj.weight' (8, 8) is stored (out, in)" in p and "a transform transposes it" in p
               for p in info.value.problems), info.value.problems
    nope = f"weights.layout 'nope.*' at {tmp_path / 'other.yaml'}:19:90 matches no tensor of the file"
    assert nope in info.value.problems
    with pytest.raises(RecipeError, match="in_out"):
        load_recipe_text(text.replace(": in_out", ": sideways"), "r.yaml")


def test_without_the_transpose_a_non_square_split_fails_at_the_transform_in_the_recipe(gpt2, tmp_path):
    recipe, _ = gpt2
    (tmp_path / "no_t.yaml").write_text(recipe.read_text().replace(
        '    - {from: "h.{i}.attn.c_attn.weight", transpose: true}\n', ""))
    with pytest.raises(WeightsError) as info:
        build(tmp_path / "no_t.yaml")
    split, layout = info.value.problems        # its outputs are not reported missing, its input not unexpected
    assert split == (f"weights.transforms[0] at {tmp_path / 'no_t.yaml'}:22:7 (split of 'h.{{i}}.attn.c_attn.weight'): "
                     "'h.0.attn.c_attn.weight' has shape (8, 24); split sizes [8, 8, 8] along axis 0 add up to 24, "
                     "not its length 8")
    assert layout.startswith("'h.0.attn.c_attn.weight' (8, 24) is stored (in, out)")


def test_a_cast_build_reads_the_transformed_tensors(gpt2):
    recipe, ref = gpt2
    model = build(recipe, ["dtype=float64"])
    assert model.params["q.weight"].dtype == np.float64
    np.testing.assert_array_equal(model.params["q.weight"], ref["h.0.attn.c_attn.weight"][:, :8].T)
    np.testing.assert_array_equal(model.params["c_proj.weight"], ref["h.0.attn.c_proj.weight"].T)


# --- tiny Hugging Face checkpoints as transformers saves them -------------------------------------------

def _hf_save(model, folder):
    import torch

    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():        # off their init (zero biases, unit norms would hide a mix-up)
            p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(folder, safe_serialization=True)
    return folder / "model.safetensors"


GPT2_RECIPE = """
name: gpt2_block_parts
model:
  layers:
    q: {type: Linear, in_features: 16, out_features: 16}
    k: {type: Linear, in_features: 16, out_features: 16}
    v: {type: Linear, in_features: 16, out_features: 16}
    c_proj: {type: Linear, in_features: 16, out_features: 16}
    c_fc: {type: Linear, in_features: 16, out_features: 64}
    mlp_proj: {type: Linear, in_features: 64, out_features: 16}
  forward: |
    a = c_proj(q(x) * k(x) + v(x))
    return a + mlp_proj(gelu(c_fc(a), approximate="tanh"))
functions:
  forward:
    x: {shape: [batch, 16], dtype: float32}
weights:
  prefix: "h.0.attn."
  map: {"c_fc.": "h.0.mlp.c_fc.", "mlp_proj.": "h.0.mlp.c_proj."}
  layout: {"h.*.c_*.weight": in_out}
  ignore: ["wte.*", "wpe.*", "ln_f.*", "h.*.ln_*", "h.1.*"]
  transforms:
    - {from: "h.{i}.{part}.{proj}.weight", transpose: true}
    - {from: "h.{i}.attn.c_attn.weight", split: {axis: 0, sizes: [16, 16, 16]},
       to: ["h.{i}.attn.q.weight", "h.{i}.attn.k.weight", "h.{i}.attn.v.weight"]}
    - {from: "h.{i}.attn.c_attn.bias", split: {axis: 0, sizes: [16, 16, 16]},
       to: ["h.{i}.attn.q.bias", "h.{i}.attn.k.bias", "h.{i}.attn.v.bias"]}
"""


def test_a_tiny_hf_gpt2_checkpoint_loads_as_saved(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_embd=16, n_layer=2, n_head=2, vocab_size=32, n_positions=8,
                                    bos_token_id=0, eos_token_id=0)
    hf = transformers.GPT2Model(config).eval()
    path = _hf_save(hf, tmp_path / "gpt2")
    (tmp_path / "r.yaml").write_text(GPT2_RECIPE)
    model = build(tmp_path / "r.yaml", weights=path)
    x = _values((3, 16), 30)
    block = hf.h[0]
    with torch.no_grad():
        t = torch.from_numpy(x)
        q, k, v = block.attn.c_attn(t).split(16, dim=-1)
        a = block.attn.c_proj(q * k + v)
        want = (a + block.mlp.c_proj(block.mlp.act(block.mlp.c_fc(a)))).numpy()
    np.testing.assert_allclose(model(x), want, rtol=1e-5, atol=1e-5)


PHI3_RECIPE = """
name: phi3_parts
model:
  layers:
    q_proj: {type: Linear, in_features: 16, out_features: 16, bias: false}
    k_proj: {type: Linear, in_features: 16, out_features: 8, bias: false}
    v_proj: {type: Linear, in_features: 16, out_features: 8, bias: false}
    o_proj: {type: Linear, in_features: 16, out_features: 16, bias: false}
    gate_proj: {type: Linear, in_features: 16, out_features: 24, bias: false}
    up_proj: {type: Linear, in_features: 16, out_features: 24, bias: false}
    down_proj: {type: Linear, in_features: 24, out_features: 16, bias: false}
  forward: |
    a = o_proj(q_proj(x) + concat([k_proj(x), v_proj(x)], -1))
    return a + down_proj(silu(gate_proj(a)) * up_proj(a))
functions:
  forward:
    x: {shape: [batch, 16], dtype: float32}
weights:
  map: {"{p}_proj.": "model.layers.0.self_attn.{p}_proj.", "gate_proj.": "model.layers.0.mlp.gate_proj.",
        "up_proj.": "model.layers.0.mlp.up_proj.", "down_proj.": "model.layers.0.mlp.down_proj."}
  ignore: ["model.embed_tokens.*", "model.norm.*", "lm_head.*", "model.layers.*.*_layernorm.*", "model.layers.1.*"]
  transforms:
    - {from: "model.layers.{i}.self_attn.qkv_proj.weight", split: {axis: 0, sizes: [16, 8, 8]},
       to: ["model.layers.{i}.self_attn.q_proj.weight", "model.layers.{i}.self_attn.k_proj.weight",
            "model.layers.{i}.self_attn.v_proj.weight"]}
    - {from: "model.layers.{i}.mlp.gate_up_proj.weight", split: {axis: 0, sizes: [24, 24]},
       to: ["model.layers.{i}.mlp.gate_proj.weight", "model.layers.{i}.mlp.up_proj.weight"]}
"""


def test_a_tiny_hf_phi3_checkpoint_loads_as_saved(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.Phi3Config(hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2, vocab_size=32, max_position_embeddings=16,
                                     pad_token_id=0, bos_token_id=0, eos_token_id=0)
    hf = transformers.Phi3ForCausalLM(config).eval()
    path = _hf_save(hf, tmp_path / "phi3")
    (tmp_path / "r.yaml").write_text(PHI3_RECIPE)
    model = build(tmp_path / "r.yaml", weights=path)
    x = _values((3, 16), 31)
    layer = hf.model.layers[0]
    with torch.no_grad():
        t = torch.from_numpy(x)
        qkv = layer.self_attn.qkv_proj(t)                               # [q (16) | k (8) | v (8)]
        a = layer.self_attn.o_proj(qkv[:, :16] + qkv[:, 16:])
        want = (a + layer.mlp(a)).numpy()
    np.testing.assert_allclose(model(x), want, rtol=1e-5, atol=1e-5)


def test_a_quantized_build_quantizes_the_split_parts_as_it_would_a_file_saved_split(tmp_path):
    fused = _values((64, 32), 40)
    _write(tmp_path, {"fused.weight": fused}, "fused.safetensors")
    _write(tmp_path, {"a.weight": fused[:32].copy(), "b.weight": fused[32:].copy()}, "split.safetensors")
    text = ("name: two\nmodel:\n  layers:\n    a: {type: Linear, in_features: 32, out_features: 32, bias: false}\n"
            "    b: {type: Linear, in_features: 32, out_features: 32, bias: false}\n"
            "  forward: return a(x) + b(x)\nfunctions: {forward: {x: {shape: [2, 32], dtype: float32}}}\n")
    (tmp_path / "split.yaml").write_text(text)
    (tmp_path / "fused.yaml").write_text(text + "weights:\n  transforms:\n    - {from: fused.weight, split: {axis: 0, "
                                         "sizes: [32, 32]}, to: [a.weight, b.weight]}\n")
    want = build(tmp_path / "split.yaml", ["quantization=q4f32_1"], weights=tmp_path / "split.safetensors")
    got = build(tmp_path / "fused.yaml", ["quantization=q4f32_1"], weights=tmp_path / "fused.safetensors")
    assert "a.q_weight" in got.param_names
    for name in want.param_names:
        np.testing.assert_array_equal(got.params[name], want.params[name])


TP_RECIPE = """
name: tp_parts
model:
  layers:
    q: {type: Linear, in_features: 16, out_features: 16, bias: false, tensor_parallel: column}
    k: {type: Linear, in_features: 16, out_features: 8, bias: false, tensor_parallel: column}
    v: {type: Linear, in_features: 16, out_features: 8, bias: false, tensor_parallel: column}
    o: {type: Linear, in_features: 16, out_features: 16, bias: false, tensor_parallel: row}
  forward: return o(q(x)) + o(concat([k(x), v(x)], -1))
functions:
  forward:
    x: {shape: [2, 16], dtype: float32}
tensor_parallel_shards: 2
weights:
  layout: {"o_stored": in_out}
  transforms:
    - {from: qkv, split: {axis: 0, sizes: [16, 8, 8]}, to: [q.weight, k.weight, v.weight]}
    - {from: o_stored, transpose: true, to: o.weight}
"""


def test_each_tensor_parallel_rank_of_a_recipe_binds_its_slices_of_the_transformed_tensors(tmp_path, monkeypatch):
    import schemas
    from builder.build_model import _export, _param_specs, bind_weights, worker_shards
    from builder.quant import QuantizeMapping

    qkv, o_stored = _values((32, 16), 50), _values((16, 16), 51)
    path = _write(tmp_path, {"qkv": qkv, "o_stored": o_stored})
    (tmp_path / "r.yaml").write_text(TP_RECIPE)
    recipe = schemas.load_recipe(tmp_path / "r.yaml")
    _, params, _, _, strategies = _export(recipe, QuantizeMapping())
    specs = _param_specs(params)
    reads = []
    original = _Checkpoint.read_region
    monkeypatch.setattr(_Checkpoint, "read_region",
                        lambda self, name, region=None: reads.append((name, region)) or original(self, name, region))
    q, k, v = np.split(qkv.astype(np.float64), [16, 24], axis=0)
    o = o_stored.astype(np.float64).T
    for rank in range(2):
        reads.clear()
        out = bind_weights(recipe, specs, path, tmp_path, shards=worker_shards(strategies, rank))
        np.testing.assert_array_equal(out["q.weight"], q[8 * rank:8 * rank + 8])
        np.testing.assert_array_equal(out["k.weight"], k[4 * rank:4 * rank + 4])
        np.testing.assert_array_equal(out["v.weight"], v[4 * rank:4 * rank + 4])
        np.testing.assert_array_equal(out["o.weight"], o[:, 8 * rank:8 * rank + 8])     # row-parallel: columns
        assert sorted(reads) == sorted([("qkv", (0, 8 * rank, 8 * rank + 8)),
                                        ("qkv", (0, 16 + 4 * rank, 20 + 4 * rank)),
                                        ("qkv", (0, 24 + 4 * rank, 28 + 4 * rank)),
                                        ("o_stored", (0, 8 * rank, 8 * rank + 8))])     # only this rank's rows
