"""``build MODEL --serve``: the flags checked before anything is built, and the command itself serving the small
Llama on 127.0.0.1 (a completion over HTTP equal to ``m.complete``'s), stopped by SIGINT."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from builder.cli import main

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")
ROOT = Path(__file__).resolve().parents[2]
LLAMA = ["recipes/llama.yaml", "--weights", "tests/data/llama_causal_lm.safetensors"]


@pytest.mark.parametrize("extra, message", [
    ([], "--serve needs --tokenizer"),
    (["--tokenizer", "T", "--prompt", "x"], "--serve runs the server"),
    (["--tokenizer", "T", "--port", "70000"], "--port must be in 0..65535"),
    (["--tokenizer", "T", "--kv-cache-tokens", "0"], "--kv-cache-tokens must be positive"),
])
def test_bad_serve_flags_are_refused_before_the_build(extra, message, tok_dir, capsys):
    extra = [str(tok_dir / "tokenizer.json") if a == "T" else a for a in extra]
    rc = main([str(ROOT / LLAMA[0]), LLAMA[1], str(ROOT / LLAMA[2]), "--no-ir", "--serve", *extra])
    err = capsys.readouterr().err
    assert rc != 0 and message in err and "Traceback" not in err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_command_serves_the_model(tok_dir, llama):
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "builder", *LLAMA, "--tokenizer", str(tok_dir / "tokenizer.json"),
                             "--no-ir", "--quiet", "--serve", "--port", str(port), "--served-model-name", "small"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        end = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stdout.read()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < end, "the server did not start"
            time.sleep(0.2)
        r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", timeout=60,
                       json={"model": "small", "prompt": "hello", "max_tokens": 5, "temperature": 0})
        assert r.status_code == 200
        assert r.json()["choices"][0]["text"] == llama.complete("hello", max_tokens=5, temperature=0).text
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    out = proc.stdout.read()
    assert "Traceback" not in out and proc.returncode in (0, 1, -signal.SIGINT), out
