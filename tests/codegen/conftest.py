"""Fixtures of the code generation tests (defined in ``tests/helpers/fixtures.py``, which the
benchmark-harness tests share): ``private_object_cache``, ``own_features``."""
from helpers.fixtures import own_features, private_object_cache

__all__ = ["own_features", "private_object_cache"]
