"""Fixtures of the pipeline tests: the ``build`` command run on a recipe text."""
import pytest

from builder.cli import main


@pytest.fixture
def run_cli(tmp_path, capsys):
    """``run_cli(text, *args)``: write ``text`` to ``r.yaml`` (UTF-8, lone surrogates kept), run
    ``build r.yaml --no-ir *args`` and check that nothing printed a traceback; returns
    ``(exit code, stderr, stdout, path of the recipe)``."""

    def run(text: str, *args: str) -> tuple[int, str, str, str]:
        path = tmp_path / "r.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        rc = main([str(path), "--no-ir", *args])
        out = capsys.readouterr()
        assert "Traceback" not in out.err + out.out
        return rc, out.err, out.out, str(path)

    return run
