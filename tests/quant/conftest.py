"""Shared helpers of the quantization tests: export a recipe without compiling it."""
from pathlib import Path

import pytest

import schemas
from builder.build_model import _param_specs, bind_weights, export_recipe, random_params
from builder.quant import QuantizeMapping


class Exported:
    """A recipe transformed and exported (no native code): ``ir``, ``param_specs``, ``mapping``."""

    def __init__(self, path, overrides=()):
        self.path = Path(path)
        self.recipe = schemas.load_recipe(path, overrides)
        self.mapping = QuantizeMapping()
        self.ir, params, self.spec = export_recipe(self.recipe, self.mapping)
        self.param_specs = _param_specs(params)

    def random(self, seed=0):
        """The parameters ``build(..., seed=seed).params`` would draw."""
        if self.mapping.param_map:
            return self.mapping.apply(random_params(self.mapping.float_specs, seed), self.param_specs)
        return random_params(self.param_specs, seed)

    def load(self, weights, progress=None):
        """The parameters ``build(..., weights=weights)`` would bind."""
        return bind_weights(self.recipe, self.param_specs, weights, self.path.parent, self.mapping, progress)


@pytest.fixture
def exported():
    """``exported(recipe_path, overrides)`` -> :class:`Exported`."""
    return Exported
