"""Fixtures the code generation tests and the benchmark-harness tests share; the directories' conftest.py
files import them (``from helpers.fixtures import ...``)."""
import os

import pytest

__all__ = ["SIMD_HOOKS", "own_features", "private_object_cache"]

#: The environment's testing hooks of :class:`SimdInfo` (they cap or emulate the vector unit of every target).
SIMD_HOOKS = ("MB_SIMD_EMULATE", "MB_SIMD_SHAPE", "MB_SIMD", "MB_SIMD_OFF")


@pytest.fixture(scope="module")
def private_object_cache(tmp_path_factory):
    """``$MB_CACHE_DIR`` set to an empty directory for the module's tests (kernels compiled afresh,
    not taken from objects other tests or runs left), restored afterwards."""
    old = os.environ.get("MB_CACHE_DIR")
    os.environ["MB_CACHE_DIR"] = str(tmp_path_factory.mktemp("objcache"))
    yield
    if old is None:
        os.environ.pop("MB_CACHE_DIR", None)
    else:
        os.environ["MB_CACHE_DIR"] = old


@pytest.fixture
def own_features(monkeypatch):
    """The targets' own features: the SIMD testing hooks unset (a test that builds for a named
    target, or asserts the host's vector width, runs the same under ``MB_SIMD=avx2``)."""
    for hook in SIMD_HOOKS:
        monkeypatch.delenv(hook, raising=False)
