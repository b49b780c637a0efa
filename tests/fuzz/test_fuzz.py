"""Fuzzing in the test suite: a small deterministic budget of each fuzzer (see :mod:`tests.fuzz`).

``MB_FUZZ_SCALE`` multiplies the number of cases; ``MB_FUZZ_RANDOM=1`` draws new cases each run
instead of the same ones.
"""
from __future__ import annotations

import importlib.util
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from . import onnx_diff as D
from . import strategies as S
from . import structures as X
from .cases import Fuzzing

SCALE = float(os.environ.get("MB_FUZZ_SCALE", "1"))
RANDOM = os.environ.get("MB_FUZZ_RANDOM", "") == "1"


def _budget(n: int):
    return settings(max_examples=max(1, int(n * SCALE)), deadline=None, database=None,
                    derandomize=not RANDOM, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def fz(tmp_path_factory):
    fuzzing = Fuzzing(tmp_path_factory.mktemp("fuzz"))
    yield fuzzing
    fuzzing.close()


@_budget(30)
@given(case=S.recipe_mutants())
def test_recipe_mutants(fz, case):
    problems = fz.recipe(*case)
    assert not problems, (problems, case)


@_budget(30)
@given(case=S.overrides())
def test_overrides(fz, case):
    problems = fz.override(*case)
    assert not problems, (problems, case)


@_budget(120)
@given(data=st.data())
def test_damaged_safetensors(fz, data):
    damaged = data.draw(S.damaged_safetensors(fz.good_weights))
    problems = fz.weights(damaged)
    assert not problems, problems


@_budget(80)
@given(data=st.data())
def test_damaged_executable_bytes(fz, data):
    damaged = data.draw(S.raw_damage(fz.good_exe[0]))
    problems = fz.exe(damaged, exact=True)
    assert not problems, problems


@_budget(60)
@given(data=st.data())
def test_changed_and_resaved_executable(fz, data):
    changed, call = data.draw(S.resaved_damage(fz.load_good_exe))
    problems = fz.exe(changed, exact=False, call=call)
    assert not problems, problems


@pytest.mark.skipif(importlib.util.find_spec("onnx") is None, reason="the ONNX fuzzer needs onnx")
@_budget(30)
@given(case=S.damaged_onnx())
def test_damaged_onnx_models(fz, case):
    problems = fz.onnx(*case)
    assert not problems, problems


# --- the classes of issue 40: differential ONNX, structures, output paths, many overrides ----------------------
#: Wall-clock limit of one structural case in the suite (a hang costs this much, once).
STRUCTURE_TIMEOUT = 20.0
_needs_ort = pytest.mark.skipif(importlib.util.find_spec("onnx") is None or importlib.util.find_spec("onnxruntime") is None,
                                reason="the differential ONNX fuzzer needs onnx and onnxruntime")


#: The op specs of the classes issue 40 found get more cases in the suite than the others.
_LISTED_SPECS = {"slice", "softmax", "resize", "reduce", "arg", "pool", "matmul_integer", "qlinear_matmul",
                 "conv_integer", "dynamic_quantize"}


@_needs_ort
@pytest.mark.parametrize("spec", sorted(D.SPECS))
def test_onnx_ops_match_onnxruntime(fz, spec):
    @_budget(8 if spec in _LISTED_SPECS else 2)
    @given(case=D.diff_cases([spec]))
    def run(case):
        problems = fz.onnx_diff(case)
        assert not problems, (problems, case)

    run()


@_budget(8)
@given(case=X.symbolic_recipes())
def test_symbolic_shape_arithmetic(fz, case):
    problems = fz.symbolic_recipe(*case, timeout=STRUCTURE_TIMEOUT)
    assert not problems, (problems, case[0])


@pytest.mark.skipif(importlib.util.find_spec("onnx") is None, reason="the ONNX fuzzer needs onnx")
@_budget(10)
@given(model=X.deep_onnx_models(large=False))
def test_deep_nested_and_wide_onnx_models(fz, model):
    problems = fz.deep_onnx(model, timeout=STRUCTURE_TIMEOUT)
    assert not problems, (problems, model)


@_budget(16)
@given(target=X.output_targets())
def test_output_paths_of_every_file_type(fz, target):
    problems = fz.output_path(target, timeout=STRUCTURE_TIMEOUT)
    assert not problems, (problems, target)


@_budget(4)
@given(case=X.many_overrides())
def test_many_overrides(fz, case):
    problems = fz.many_overrides(*case, timeout=STRUCTURE_TIMEOUT)
    assert not problems, (problems, case[0])
