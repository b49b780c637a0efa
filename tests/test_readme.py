"""README's Python blocks run as pasted: each is extracted and run in a fresh interpreter, as a reader would
paste it (the deploy block in a folder where ``build ... --save-exe llama-art/`` ran, the others where the
README's paths hold). README's links and paths point at files a clone has."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"^```python\n(.*?)^```", README, re.S | re.M)


def _block(first_line: str) -> str:
    found = [b for b in BLOCKS if b.splitlines()[0] == first_line or first_line in b.splitlines()[:3]]
    assert len(found) == 1, f"README has no single python block starting with {first_line!r}"
    return found[0]


def _run(code: str, cwd: Path, *before: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for args in before:
        subprocess.run([sys.executable, *args], cwd=cwd, env=env, check=True, capture_output=True, timeout=600)
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def test_readme_has_the_blocks_these_tests_run():
    assert len(BLOCKS) == 3


def test_deploy_block_runs_on_a_saved_artifact(tmp_path):
    code = _block("import numpy as np, runtime")
    r = _run(code + "\nimport sys; print(sorted(m for m in sys.modules if m.split('.')[0] in "
                    "('builder', 'schemas', 'pydantic')))", tmp_path,
             ["-m", "builder", str(ROOT / "recipes" / "llama.yaml"), "--quiet", "--save-exe", "llama-art"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]"       # the runtime alone


def test_bring_your_own_model_block_runs(tmp_path):
    pytest.importorskip("torch")
    r = _run(_block("import numpy as np, torch"), tmp_path)
    assert r.returncode == 0, r.stderr
    assert 0 < float(r.stdout.split()[-1]) < 0.2           # the 4-bit model's largest difference


def test_from_python_block_runs():
    r = _run(_block("import builder, numpy as np"), ROOT)
    assert r.returncode == 0, r.stderr
    assert "def forward(x: R.Tensor" in r.stdout           # irmod.show()


def test_no_references_to_files_a_clone_lacks():
    """No ``../shared`` (a sibling folder of the author's checkout) or ``DESIGN.md`` in the docs or code, and
    every relative link of README / docs names a file of the repository."""
    skip = {Path(__file__)}
    for folder in ("builder", "runtime", "schemas", "tests", "docs", "recipes"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".md", ".yaml") and path not in skip:
                text = path.read_text(errors="replace")
                assert "../shared" not in text and "DESIGN.md" not in text, path
    for doc in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        prose = re.sub(r"^```.*?^```", "", doc.read_text(), flags=re.S | re.M)       # code is not links
        prose = "\n".join(line for line in prose.splitlines() if not line.startswith("    "))
        for target in re.findall(r"\[[^\]\n]+\]\(([^)\s#:]+)(?:#[^)]*)?\)", prose):
            assert (doc.parent / target).exists(), f"{doc.name} links to {target}, which a clone does not have"
