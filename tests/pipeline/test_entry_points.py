"""`python -m builder` in a real process: exit codes and no traceback."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(*args):
    return subprocess.run([sys.executable, "-m", "builder", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_module_entry_point_builds_small_recipe():
    r = run("recipes/llama_mlp_small.yaml", "--no-ir", "hidden_size=32", "intermediate_size=48")
    assert r.returncode == 0, r.stderr
    assert "llama_mlp_small" in r.stdout and "compile:" in r.stdout


def test_recipe_error_exit_code_2_without_traceback():
    r = run("recipes/llama_mlp_small.yaml", "model.layers.gate_proj.bias=maybe")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and "model.layers.gate_proj.bias" in r.stderr
