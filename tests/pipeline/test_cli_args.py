"""Command-line papercuts: a bare ``build`` names the one missing argument, and ``--bench`` followed by an
override leaves the override an override."""
from pathlib import Path

import pytest

from builder.cli import main

SMALL = str(Path(__file__).resolve().parents[2] / "recipes" / "llama_mlp_small.yaml")


def test_bare_build_asks_for_the_recipe(capsys):
    with pytest.raises(SystemExit) as exc:
        main([])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert "required: recipe" in err and "KEY=VALUE," not in err


def test_bench_without_count_before_an_override(capsys):
    rc = main([SMALL, "--no-ir", "--bench", "hidden_size=16", "intermediate_size=24"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "x: [batch_size, 16] float32" in out          # the overrides were applied
    bench = next(line for line in out.splitlines() if "median" in line)
    assert "20 runs" in bench


def test_print_recipe_shows_the_resolved_recipe(capsys):
    import yaml

    from schemas import load_recipe, load_recipe_text

    assert main([SMALL, "--print-recipe", "hidden_size=32", "model.layers.up_proj.bias=true"]) == 0
    text = capsys.readouterr().out
    data = yaml.safe_load(text)
    assert data["model"]["layers"]["gate_proj"]["in_features"] == 32
    assert data["model"]["layers"]["up_proj"]["bias"] is True
    assert data["model"]["forward"].startswith("gate = gate_proj(x)\n")
    expected = load_recipe(SMALL, ["hidden_size=32", "model.layers.up_proj.bias=true"])
    assert load_recipe_text(text).model_dump() == expected.model_dump()


def test_validate_checks_recipe_export_and_weights(tmp_path, capsys):
    weights = str(Path(SMALL).parents[1] / "tests" / "data" / "llama_mlp_layer0.safetensors")
    assert main([SMALL, "--validate", "--weights", weights]) == 0
    out = capsys.readouterr().out
    assert "valid; functions forward(x); 3 parameters; weights file checked" in out
    assert main([SMALL, "--validate", "--weights", weights, "hidden_size=32"]) == 1
    assert "expects (688, 32)" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text(Path(SMALL).read_text().replace("down_proj(silu(gate) * up)", "gate_proj(silu(gate) * up)"))
    assert main([str(bad), "--validate"]) != 0          # the export finds gate_proj fed 688 features
    err = capsys.readouterr().err
    assert "688" in err and "256" in err


def test_build_progress_appears_only_for_a_slow_build(capsys):
    """The progress line of ``build`` (rich, on stderr, transient) starts once a build has taken more than
    its delay and goes away at the end; a quick build shows nothing."""
    from builder.terminal import BuildProgressDisplay
    from builder.compile import BuildProgress

    quick = BuildProgressDisplay(delay=1.0, lines=False)
    for step in [BuildProgress("passes", 0, 4, "", 0.0), BuildProgress("kernels", 3, 10, "matmul", 0.5)]:
        quick(step)
    assert quick.bar is None
    quick(BuildProgress("done", 1, 1, "", 0.6))
    assert capsys.readouterr().err == ""
    slow = BuildProgressDisplay(delay=1.0, lines=False)
    slow(BuildProgress("kernels", 3, 10, "matmul", 0.5))
    assert slow.bar is None
    slow(BuildProgress("llvm", 1, 4, "part 1", 1.5))
    assert slow.bar is not None and slow.bar.tasks[0].completed == 1 and slow.bar.tasks[0].total == 4
    assert slow.bar.tasks[0].fields["phase"].startswith("LLVM")
    slow(BuildProgress("done", 1, 1, "", 2.0))
    assert slow.bar is None
