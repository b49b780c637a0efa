"""``build RECIPE --print-after PASS`` shows the IR after that compiler pass; ``--time-passes`` times
each pass; an unknown pass name is one message listing the valid ones (exit 1)."""
from pathlib import Path

from builder import ir
from builder.cli import main
from builder.transform import PASS_NAMES

SMALL = str(Path(__file__).resolve().parents[2] / "recipes" / "llama_mlp_small.yaml")


def _after(text: str, name: str) -> str:
    """The printed module that follows ``# IR after <name>``: its lines run up to the first line that
    is not part of a module (indented, blank, ``#``, ``@`` or ``class``)."""
    lines = []
    for line in text.split(f"# IR after {name}\n", 1)[1].splitlines():
        if line and not line.startswith((" ", "#", "@", "class ")) or line.startswith("# IR after"):
            break
        lines.append(line)
    return "\n".join(lines)


def test_print_after_shows_each_named_pass(capsys):
    rc = main([SMALL, "--no-ir", "--plain", "--print-after", "select_kernels", "--print-after", "legalize_ops",
               "quantization=q4f16_1"])
    out = capsys.readouterr().out
    assert rc == 0
    assert out.count("# IR after ") == 2 and "# IR after fuse_ops" not in out
    selected = ir.parse(_after(out, "select_kernels"))
    legal = ir.parse(_after(out, "legalize_ops"))
    # kernel selection turned both quantized matmuls (with the gated epilogue) into linear kernels
    kernels = [f for f in selected.functions.values() if not isinstance(f, ir.Function)]
    assert len(kernels) == 2 and all(f.attrs["mb.kernel"].kind == "linear" for f in kernels)
    assert "R.matmul" not in _after(out, "select_kernels")
    # after legalization no graph-level op but call_tir / reshape-like VM builtins is left
    assert "R.nn.silu" not in _after(out, "legalize_ops") and "R.call_tir" in _after(out, "legalize_ops")
    assert set(legal.functions) >= set(selected.functions)


def test_unknown_pass_lists_the_passes(capsys):
    rc = main([SMALL, "--no-ir", "--print-after", "fuse"])
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err
    assert "--print-after fuse: no such pass" in err
    for name in PASS_NAMES:
        assert name in err


def test_time_passes_names_every_pass(capsys):
    assert main([SMALL, "--no-ir", "--time-passes"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("passes: "))
    assert [part.split()[0] for part in line[len("passes: "):].split(", ")] == list(PASS_NAMES)
