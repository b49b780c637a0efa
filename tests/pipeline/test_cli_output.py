"""``build``'s output for scripts and pipes: ``--version``, ``--quiet``, ``--json``, no ANSI codes off a
terminal (``NO_COLOR``, a launcher's pseudo-terminal), progress as plain lines when piped, ``--list-ops``
as plain lines."""
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from builder.cli import main
from builder.terminal import use_color

ROOT = Path(__file__).resolve().parents[2]
SMALL = str(ROOT / "recipes" / "llama_mlp_small.yaml")
SIZES = ["hidden_size=16", "intermediate_size=24"]


def run(*args, env=None):
    import os

    return subprocess.run([sys.executable, "-m", "builder", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def test_version(capsys):
    from importlib.metadata import version

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"build (model-builder) {version('model-builder')}\n"


def test_json_is_the_summary_as_data_and_nothing_else(capsys, tmp_path):
    import numpy as np

    np.savez(tmp_path / "x.npz", x=np.ones((2, 16), np.float32))
    assert main([SMALL, *SIZES, "--json", "--bench", "2", "--bench-dim", "batch_size=4",
                 "--input", str(tmp_path / "x.npz")]) == 0
    out = capsys.readouterr().out
    data = json.loads(out)          # the whole of stdout is one JSON object
    assert data["name"] == "llama_mlp_small"
    assert data["functions"] == {"forward": {"inputs": {"x": "[batch_size, 16] float32"},
                                             "output": "(batch_size, 16) float32"}}
    assert data["params"]["count"] == 3 and data["params"]["elements"] == 3 * 16 * 24
    assert data["params"]["tensors"][0] == {"name": "gate_proj.weight", "shape": [24, 16], "dtype": "float32"}
    assert data["quantization"] == "none" and set(data["timings_ms"]) == {"export", "weights", "compile"}
    assert data["bench"]["runs"] == 2 and data["bench"]["inputs"] == {"x": {"shape": [4, 16], "dtype": "float32"}}
    assert data["bench"]["min_ms"] <= data["bench"]["median_ms"] <= data["bench"]["max_ms"]
    assert data["run"]["outputs"] == [{"shape": [2, 16], "dtype": "float32"}]


def test_quiet_prints_only_what_was_asked(capsys):
    assert main([SMALL, *SIZES, "--quiet"]) == 0
    assert capsys.readouterr().out == ""
    assert main([SMALL, *SIZES, "--quiet", "--bench", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("bench forward(x: (1, 16) float32): median")


def test_quiet_and_json_together_are_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        main([SMALL, "--quiet", "--json"])
    assert exc.value.code == 2


def test_prompt_ids_past_the_vocabulary_are_refused_before_compiling(capsys, monkeypatch):
    import builder.build_model

    def no_compile(*args, **kwargs):
        raise AssertionError("compiled")

    monkeypatch.setattr(builder.build_model, "compile_module", no_compile)
    tiny = ["vocab_size=64", "hidden_size=32", "intermediate_size=48", "num_heads=2", "num_kv_heads=1",
            "head_dim=16", "num_layers=1"]
    assert main([str(ROOT / "recipes" / "llama.yaml"), *tiny, "--no-ir", "--prompt-ids", "1,2;3,64"]) == 1
    err = capsys.readouterr().err
    assert "--prompt-ids: id 64 (row 1, position 1) is past the vocabulary" in err
    assert "model.embed_tokens.weight, of 64 rows (ids 0..63)" in err and "compiled" not in err


def test_token_vocab_follows_reshapes_to_the_embedding():
    from builder import nn
    from builder.build_model import token_vocab

    class M(nn.Module):
        def __init__(self):
            self.emb = nn.Embedding(100, 8)
            self.other = nn.Embedding(30, 8)

        def forward(self, ids, h):
            return self.emb(ids), self.other(nn.op.reshape(ids, [-1])), h

    spec = {"forward": {"ids": nn.spec.Tensor(["b", 4], "int64"), "h": nn.spec.Tensor([2], "int64")}}
    mod, params = M().export_tvm(spec)
    assert token_vocab(mod, "forward", "ids", params) == (30, "other.weight")     # the smallest table
    assert token_vocab(mod, "forward", "h", params) is None                       # indexes no table
    assert token_vocab(mod, "nope", "ids", params) is None


@pytest.mark.parametrize("env,tty,launched,expected", [
    ({}, True, False, True), ({}, False, False, False), ({"NO_COLOR": "1"}, True, False, False),
    ({}, True, True, False), ({"FORCE_COLOR": "1"}, True, True, True), ({"FORCE_COLOR": "1"}, False, False, True)])
def test_use_color(monkeypatch, env, tty, launched, expected):
    """ANSI codes only on a terminal, never with NO_COLOR, not in a launcher's rank (Open MPI forwards
    through a pseudo-terminal whatever mpirun's own stdout is) unless FORCE_COLOR."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    stream = io.StringIO()
    stream.isatty = lambda: tty
    assert use_color(stream, launched=launched) is expected


def test_piped_build_writes_no_ansi_codes_even_as_a_launcher_rank():
    """A real process whose stdout and stderr are pipes, once plain and once as Open MPI's rank 0 of 1 (the
    environment mpirun sets): no escape sequence anywhere, the report is there."""
    for env in ({}, {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"}):
        r = run(SMALL, *SIZES, env=env)
        assert r.returncode == 0, r.stderr
        assert "\x1b" not in r.stdout + r.stderr
        assert "def forward(x: R.Tensor((\"batch_size\", 16), dtype=\"float32\")" in r.stdout
        assert "compile:" in r.stdout


def test_list_ops_piped_is_one_plain_line_per_op(tmp_path):
    """One line per op, no markup, no wrap; the second run reads the rows the first kept in the cache
    folder and prints the same, and a damaged cache file is ignored."""
    from builder.recipe import FORWARD_OPS

    env = {"MB_CACHE_DIR": str(tmp_path)}
    r = run("--list-ops", env=env)
    assert r.returncode == 0, r.stderr
    kept = list(tmp_path.glob("list-ops-*.json"))
    assert len(kept) == 1
    assert run("--list-ops", env=env).stdout == r.stdout
    kept[0].write_text('[["\u001b[31mx", "(a)", "b"]]')
    assert run("--list-ops", env=env).stdout == r.stdout
    assert run("--list-ops", env={"MB_CACHE": "0"}).stdout == r.stdout
    lines = r.stdout.splitlines()
    assert len(lines) == len(FORWARD_OPS)
    assert [line.split("(")[0] for line in lines] == sorted(FORWARD_OPS)
    assert not any(mark in r.stdout for mark in ("``", ":func:", ":class:", "\x1b", "│", "┃"))
    assert any(len(line) > 80 for line in lines)          # not wrapped at 80 columns
    assert "silu(x)  " in r.stdout


def test_plain_doc_strips_rest_markup():
    from builder.summary import plain_doc

    assert plain_doc("pool of ``x`` (:func:`builder.te.topi.pool`, :class:`~runtime.VirtualMachine`)") == \
        "pool of x (builder.te.topi.pool, VirtualMachine)"


def test_progress_is_plain_lines_when_piped(capsys):
    """Off a terminal a slow build's progress is a line per phase (and every few seconds), not a bar."""
    from builder.terminal import BuildProgressDisplay, ConversionProgressDisplay
    from builder.compile import BuildProgress

    p = BuildProgressDisplay(delay=1.0, lines=True)
    for step in [BuildProgress("kernels", 1, 10, "matmul", 0.5), BuildProgress("kernels", 2, 10, "add", 1.5),
                 BuildProgress("kernels", 3, 10, "mul", 1.6), BuildProgress("llvm", 1, 4, "part 1", 2.0),
                 BuildProgress("done", 1, 1, "", 2.5)]:
        p(step)
    assert capsys.readouterr().err.splitlines() == ["building: kernels 2/10 (2 s) add",
                                                    "building: LLVM (optimize + object code) 1/4 (2 s) part 1"]
    c = ConversionProgressDisplay(delay=-1.0, lines=True)
    c(0, 2, "a")
    c(1, 2, "a")
    c(2, 2, "b")
    err = capsys.readouterr().err.splitlines()
    assert [e.split(" (")[0] for e in err] == ["converting parameters: 1/2", "converting parameters: 2/2"]
    assert c.bar is None
    quiet = BuildProgressDisplay(delay=0.0, silent=True)
    quiet(BuildProgress("kernels", 2, 10, "add", 5.0))
    assert quiet.bar is None and capsys.readouterr().err == ""


def test_dotted_override_of_an_absent_section(capsys):
    """``weights.prefix=mlp.`` on a recipe without ``weights:`` is ``'weights={prefix: mlp.}'``."""
    from schemas import load_recipe

    dotted = load_recipe(SMALL, ["weights.prefix=mlp."])
    assert dotted.weights.prefix == "mlp."
    assert dotted.model_dump() == load_recipe(SMALL, ["weights={prefix: mlp.}"]).model_dump()
    assert main([SMALL, "--print-recipe", "weights.nope=1"]) == 2
    assert "weights.nope: unknown field 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize("forward,expected", [
    ("return gate_proj(silu(gate_proj(x)) * up_proj(x))",
     ":7:12: model.forward: gate_proj (Linear, in_features=16, out_features=24) on "
     "'silu(gate_proj(x)) * up_proj(x)', (batch_size, 24) float32: relax.matmul"),
    ("a = reshape(gate_proj(x), [batch_size, 4, 6])\n    return a @ reshape(up_proj(x), [batch_size, 4, 6])",
     ":8:12: model.forward: 'a' @ 'reshape(up_proj(x), [batch_size, 4, 6])': 'a' is (batch_size, 4, 6) float32, "
     "'reshape(up_proj(x), [batch_size, 4, 6])' is (batch_size, 4, 6) float32: relax.matmul: R.matmul: "
     "reduction dims differ: lhs (batch_size, 4, 6) has 6, rhs (batch_size, 4, 6) has 4"),
])
def test_a_matmul_mismatch_names_the_layer_and_operands(run_cli, forward, expected):
    text = f"""name: t
model:
  layers:
    gate_proj: {{type: Linear, in_features: 16, out_features: 24, bias: false}}
    up_proj: {{type: Linear, in_features: 16, out_features: 24, bias: false}}
  forward: |
    {forward}
functions:
  forward:
    x: {{shape: [batch_size, 16], dtype: float32}}
"""
    rc, err, _, path = run_cli(text)
    assert rc == 2
    assert path + expected in err, err


@pytest.mark.parametrize("env", [{"MB_CACHE_DIR": "~/x"}, {"XDG_CACHE_HOME": "/tmp/xdg"}, {}])
def test_list_ops_cache_is_in_the_object_cache_folder(monkeypatch, env):
    from builder.cli import _cache_dir
    from builder.codegen.cache import cache_dir

    for k in ("MB_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert _cache_dir() == cache_dir()


@pytest.mark.distributed
def test_json_under_mpirun_is_one_object_without_ansi_codes():
    """Two ranks of ``mpirun`` (which forwards their output through a pseudo-terminal): rank 0 prints the
    one JSON object, rank 1 nothing; no escape sequence in either stream."""
    import os
    import shutil

    pytest.importorskip("mpi4py")
    launcher = Path(sys.executable).parent / "mpirun"
    launcher = str(launcher) if launcher.exists() else shutil.which("mpirun")
    if launcher is None:
        pytest.skip("mpirun is not installed (pip install -e '.[distributed]')")
    tiny = ["vocab_size=64", "hidden_size=32", "intermediate_size=48", "num_heads=2", "num_kv_heads=2",
            "head_dim=16", "num_layers=1", "tensor_parallel_shards=2"]
    cmd = [sys.executable, "-m", "builder", str(ROOT / "recipes" / "llama.yaml"), *tiny, "--json",
           "--prompt-ids", "1,2", "--max-new-tokens", "2"]
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "MB_CCL_TIMEOUT": "60", "PYTHONPATH": str(ROOT)}
    env.pop("NO_COLOR", None)
    env.pop("FORCE_COLOR", None)
    proc = subprocess.run([launcher, "--oversubscribe", "--mca", "btl", "self,sm", "-n", "2", *cmd], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "\x1b" not in proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout
    data = json.loads(lines[0])
    assert len(data["generate"]["ids"]) == 1 and len(data["generate"]["ids"][0]) == 2
