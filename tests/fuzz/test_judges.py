"""The fuzzers' own judges on hand-made results: what :func:`tests.fuzz.onnx_diff.compare` and
:func:`tests.fuzz.harness.judge_output_path` call a difference (each against numpy / os.stat facts)."""
from __future__ import annotations

import os
import stat

import numpy as np
import pytest

from .harness import Limits, judge_output_path, snapshot
from .onnx_diff import compare


def test_compare_finds_nan_inf_value_shape_and_integer_differences():
    ref = np.array([1.0, np.nan, np.inf, -2.0], np.float32)
    assert compare(ref.copy(), [ref]) == []
    assert compare(ref + np.float32(1e-6), [ref]) == []                     # within float32's tolerance
    assert "NaN" in compare(np.array([1.0, 0.0, np.inf, -2.0], np.float32), [ref])[0]
    assert "inf" in compare(np.array([1.0, np.nan, -np.inf, -2.0], np.float32), [ref])[0]
    assert "value" in compare(np.array([1.0, np.nan, np.inf, -2.1], np.float32), [ref])[0]
    assert "float32[2]" in compare(ref[:2], [ref])[0]
    assert "differ" in compare(np.array([3, 4], np.int32), [np.array([3, 5], np.int32)])[0]
    assert compare((ref, ref), [ref]) == ["2 outputs, onnxruntime has 1"]


def _cli_result(rc: int, err: str = "") -> dict:
    return {"outcome": "done", "rc": rc, "stdout": "", "stderr": err, "peak_kib": 0, "seconds": 0.1}


def test_output_path_judge_flags_a_replaced_device_a_changed_mode_and_a_left_temp_file(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("making a character device needs root")
    os.mknod(tmp_path / "dev", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    (tmp_path / "file").write_bytes(b"old")
    os.chmod(tmp_path / "file", 0o640)
    before = snapshot(tmp_path)
    ok = judge_output_path(_cli_result(1, "error: NotRegularFileError: no\n"), Limits(), before, snapshot(tmp_path),
                           "dev", None, "--output")
    assert ok == []
    os.unlink(tmp_path / "dev")                      # what a rename over the device does
    (tmp_path / "dev").write_bytes(b"x")
    os.chmod(tmp_path / "file", 0o600)
    (tmp_path / ".file.abc.tmp").write_bytes(b"")
    problems = judge_output_path(_cli_result(0), Limits(), before, snapshot(tmp_path), "dev", None, "--output")
    text = "\n".join(problems)
    assert "'dev': its type changed" in text and "'file': its mode changed" in text, text
    assert ".file.abc.tmp" in text and "not a readable .npz" in text, text
