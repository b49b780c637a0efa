"""Code that several test files share (importable as ``helpers``: ``tests`` is on the path through
pytest's ``pythonpath`` setting in pyproject.toml)."""
