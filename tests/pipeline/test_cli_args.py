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
