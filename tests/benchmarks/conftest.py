"""Fixtures of the benchmark-harness tests (defined in ``tests/helpers/fixtures.py``):
``private_object_cache``, ``own_features``."""
from helpers.fixtures import own_features, private_object_cache

__all__ = ["own_features", "private_object_cache"]
