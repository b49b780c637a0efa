"""Fixtures of the code generation tests."""
import os

import pytest


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
