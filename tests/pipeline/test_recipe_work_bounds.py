"""The work a recipe can make the builder do is bounded (issue 40 item 12): at most ``MAX_MODULES`` layers
instantiated (counted before any is built) and at most ``MAX_TRACED_CALLS`` layer, block and op calls
traced by its functions together (counted as they run: a block that calls its child twice, nested, doubles
the calls per level with one more layer). Both bounds are set to what builds in seconds (core/limits.py)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import builder
from builder.build_model import export_recipe
from builder.recipe import instantiate
from schemas import RecipeError, load_recipe_text
from core.limits import MAX_MODULES, MAX_TRACED_CALLS

ROOT = Path(__file__).resolve().parents[2]


def doubling(depth: int) -> str:
    """Blocks A0 (one ReLU) .. A<depth>, each A<i> calling its A<i-1> twice; the model calls A<depth>
    once. ``depth + 2`` layers, ``3 * 2**depth - 1`` calls: the model's block call, two block calls per
    run of each A<i> (A<i> runs ``2**(depth - i)`` times) and one ReLU per run of A0."""
    lines = ["name: doubling", "blocks:", "  A0:", "    inputs: [x]", "    layers:", "      r: {type: ReLU}",
             "    forward: |", "      return r(x)"]
    for i in range(1, depth + 1):
        lines += [f"  A{i}:", "    inputs: [x]", "    layers:", f"      a: {{type: A{i - 1}}}", "    forward: |",
                  "      h = a(x)", "      return a(h)"]
    lines += ["model:", "  layers:", f"    top: {{type: A{depth}}}", "  forward: |", "    return top(x)",
              "functions:", "  forward:", "    x: {shape: [2, 4], dtype: float32}"]
    return "\n".join(lines) + "\n"


def _calls(depth: int) -> int:
    return 1 + sum(2 * 2 ** (depth - i) for i in range(1, depth + 1)) + 2 ** depth


def _run_cli(tmp_path: Path, text: str, timeout: float = 240) -> subprocess.CompletedProcess:
    path = tmp_path / "r.yaml"
    path.write_text(text)
    return subprocess.run([sys.executable, "-m", "builder", str(path), "--no-ir", "--validate"], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_calls_multiplied_through_nested_blocks_are_a_recipe_error_not_a_hang(tmp_path):
    """30 nested doublings: 2**30 ReLU calls from 32 layers (the old interpreter ran until killed)."""
    proc = _run_cli(tmp_path, doubling(30))
    assert proc.returncode == 2, proc.stderr
    assert f"r.yaml:8:14: blocks.A0.forward: the recipe's functions would trace more than {MAX_TRACED_CALLS:,} " \
           "layer, block and op calls in all" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("depth", [3, 11])
def test_calls_are_counted_exactly_and_a_recipe_within_the_budget_exports(depth):
    assert _calls(depth) == 3 * 2 ** depth - 1 <= MAX_TRACED_CALLS
    recipe = load_recipe_text(doubling(depth), "r.yaml")
    module, spec = instantiate(recipe)
    module.export_tvm(spec)
    assert module.__dict__["_recipe_budget"][0].used == _calls(depth)
    module.export_tvm(spec)                        # each export has its own budget
    assert module.__dict__["_recipe_budget"][0].used == _calls(depth)


def test_one_doubling_past_the_budget_is_refused():
    depth = next(d for d in range(1, 40) if _calls(d) > MAX_TRACED_CALLS)
    with pytest.raises(RecipeError, match=f"more than {MAX_TRACED_CALLS:,} layer, block and op calls"):
        export_recipe(load_recipe_text(doubling(depth), "r.yaml"))


def test_a_doubling_recipe_computes_relu(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(doubling(4))
    x = np.array([[-1.5, 0.0, 2.0, -0.25], [3.0, -4.0, 0.5, 1.0]], np.float32)
    np.testing.assert_array_equal(builder.build(path)(x), np.maximum(x.astype(np.float64), 0))


def test_the_65536_layer_chain_is_refused_before_anything_is_built(tmp_path):
    text = """\
name: big
blocks:
  B:
    inputs: [x]
    layers:
      l: {type: Linear, in_features: 4, out_features: 4, repeat: 256}
    forward: |
      return l(x)
model:
  layers:
    b: {type: B, repeat: 256}
  forward: |
    return b(x)
functions:
  forward:
    x: {shape: [batch, 4], dtype: float32}
"""
    proc = _run_cli(tmp_path, text, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"r.yaml:11:8: model.layers.b: the recipe would build more than {MAX_MODULES:,} layers" in proc.stderr, \
        proc.stderr
