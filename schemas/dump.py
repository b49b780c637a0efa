"""A validated recipe as YAML text: :func:`dump_recipe` (what ``build RECIPE --print-recipe`` shows,
as Hydra's ``--cfg job --resolve``): variables interpolated, overrides applied, every default filled
in, multi-line text (``forward:``) as a literal block."""
from __future__ import annotations

import yaml

from .models import Recipe

__all__ = ["dump_recipe"]


class _Dumper(yaml.SafeDumper):
    """The safe dumper, writing multi-line strings as ``|`` literal blocks."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _str)


def dump_recipe(recipe: Recipe) -> str:
    """``recipe`` (a :class:`~schemas.models.Recipe`) as YAML, fields in schema order; loading the text
    gives an equal recipe (unless a string held an escaped ``$${``, which shows unescaped)."""
    return yaml.dump(_layers_first_type(recipe.model_dump(mode="json")), Dumper=_Dumper, sort_keys=False,
                     allow_unicode=True, width=120)


def _layers_first_type(value):
    """Layer entries as people write them: ``type`` first, ``repeat`` last and only when set."""
    if isinstance(value, list):
        return [_layers_first_type(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: _layers_first_type(v) for k, v in value.items()}
    if "type" in out and "repeat" in out:
        repeat = out.pop("repeat")
        out = {"type": out.pop("type"), **out, **({"repeat": repeat} if repeat is not None else {})}
    return out
