"""One rank of a tensor-parallel test run (started by ``tests/distributed/test_tensor_parallel.py`` under
``mpirun -n N``): builds a recipe with ``tensor_parallel_shards=N`` through the Python API, runs it and
writes what this rank computed to ``OUT/rank{R}.npz`` (every rank returns the full result).

    python tests/distributed/_tp_worker.py OUT llama WEIGHTS [KEY=VALUE ...]
    python tests/distributed/_tp_worker.py OUT minilm WEIGHTS [KEY=VALUE ...]
    python tests/distributed/_tp_worker.py OUT exit-early - [KEY=VALUE ...]   # rank 1 stops after building

Cases: ``llama`` (``recipes/llama.yaml``: ``forward`` logits of ``tests/data/llama_causal_lm.npz``'s ids
and greedy generation of 6 tokens from two prompts), ``minilm`` (``recipes/minilm_l6.yaml``: hidden states
and sentence embeddings of set A's tokens), ``exit-early`` (rank 1 returns without running: the others must end with a collective
timeout, not hang). ``WEIGHTS`` ``-`` means seeded random weights.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import builder  # noqa: E402

DATA = ROOT / "tests" / "data"


def main(out: str, case: str, weights: str, *overrides: str) -> None:
    recipe = ROOT / "recipes" / ("minilm_l6.yaml" if case == "minilm" else "llama.yaml")
    m = builder.build(recipe, overrides=overrides, weights=None if weights == "-" else weights)
    rank = m.rank
    result: dict[str, np.ndarray] = {"rss_kib": np.array(_rss_kib()),
                                     "param_bytes": np.array(sum(a.nbytes for a in m.params.values()))}
    if case == "exit-early" and rank == 1:
        return
    if case in ("llama", "exit-early"):
        ref = np.load(DATA / "llama_causal_lm.npz")
        result["logits"] = m["forward"](ref["input_ids"])
        prompt = np.array([[1, 5, 9, 2], [7, 3, 3, 8]], dtype=np.int64)
        result["ids"] = m.generate(prompt, 6)
    elif case == "minilm":
        tokens = np.load(DATA / "minilm_setA_tokens.npz")
        inputs = [tokens[k] for k in ("input_ids", "attention_mask", "token_type_ids")]
        result["hidden"] = m["forward"](*inputs)
        result["embedding"] = m.embed(*inputs)
    np.savez(Path(out) / f"rank{rank}.npz", **result)


def _rss_kib() -> int:
    """This process's peak resident set size (KiB), from /proc (0 where it is not available)."""
    try:
        for line in Path(f"/proc/{os.getpid()}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


if __name__ == "__main__":
    main(*sys.argv[1:])
