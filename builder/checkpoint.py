"""A Hugging Face checkpoint folder as a recipe: ``build DIR`` / ``builder.build(DIR)``.

The folder holds ``config.json``, the weights (``model.safetensors``, or ``model.safetensors.index.json`` and its
shards), optionally ``tokenizer.json`` and ``generation_config.json``. The family serving the config's
``architectures`` (else its ``model_type``) is looked up in ``recipes/hf/families.yaml`` (schema:
:mod:`schemas.hf_families`); its mapping turns config fields into the family recipe's variables, given as
``KEY=VALUE`` overrides before the user's own, so ``build DIR quantization=q4f16_1`` works as on a recipe.
No per-architecture Python: a family is a recipe and a mapping entry (docs/models.md).

Policy for what the config says (every top-level field is accounted for): a field read by a variable is used; a
field under ``checks`` must have a value the recipe computes exactly (``hidden_act: silu``, Qwen2's
``use_sliding_window: false``); a ``harmless`` field (token ids, dropout, ``transformers_version``, ...) is ignored; any
other field is an error naming it and its value, since it may change the computation.

Files read are untrusted: ``config.json`` / ``generation_config.json`` at most
:data:`~core.limits.MAX_HF_CONFIG_BYTES` (regular files, JSON without NaN / Infinity); a sharded index is read
and bounded by :mod:`runtime.sharded_weights`. Only the safetensors header(s) are read here, once, when a tie
rule or an ``if_tensor`` var asks which tensors the checkpoint holds.
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from core.limits import MAX_HF_CONFIG_BYTES, MAX_RECIPE_BYTES

__all__ = ["FAMILIES_FILE", "HFCheckpoint", "HFCheckpointError", "load_families", "resolve_checkpoint"]

#: The mapping file of the families ``build DIR`` knows.
FAMILIES_FILE = Path(__file__).resolve().parent.parent / "recipes" / "hf" / "families.yaml"

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Top-level config fields every family reads itself (to choose the family); ``tie_word_embeddings`` is read by a
#: family with a ``tie_word_embeddings`` entry (else it must be declared harmless).
_ALWAYS_READ = ("architectures", "model_type")


class HFCheckpointError(ValueError):
    """A checkpoint folder ``build`` cannot turn into a model: no ``config.json``, a malformed one, an
    architecture no family serves, a config field the family refuses, a missing weights file. One message."""


@dataclass
class HFCheckpoint:
    """What :func:`resolve_checkpoint` made of a folder: the ``family`` name, its ``recipe`` file, the
    ``overrides`` (config-derived first, then the family's fixed ones, then the caller's), the ``weights`` file
    (``model.safetensors`` or the shards' index), the ``tokenizer`` (``tokenizer.json`` or None) and the
    ``generation`` defaults of ``generation_config.json`` (``eos_token_id`` as a list of ints, ...)."""

    folder: Path
    family: str
    recipe: Path
    overrides: list[str]
    weights: Path
    tokenizer: Path | None = None
    generation: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)


def _read_json(path: Path, limit: int, what: str) -> Any:
    """The JSON value of the regular file ``path`` of at most ``limit`` bytes (no NaN / Infinity constants)."""
    from runtime.files import open_regular

    try:
        with open_regular(path, max_bytes=limit) as (fh, _):
            data = fh.read(limit + 1)
    except FileNotFoundError:
        raise HFCheckpointError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise HFCheckpointError(f"{path}: cannot read {what}: {exc}") from None

    def constant(name: str):
        raise ValueError(f"{name} is not a number JSON allows")

    try:
        return json.loads(data.decode("utf-8"), parse_constant=constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise HFCheckpointError(f"{path}: {what} is not valid JSON: {str(exc)[:200]}") from None


def load_families(path: str | os.PathLike = FAMILIES_FILE):
    """The families mapping (:class:`schemas.hf_families.HFFamilies`) of ``path`` (YAML, safe_load, at most
    :data:`~core.limits.MAX_RECIPE_BYTES`). Raises HFCheckpointError naming what is wrong with the file."""
    import yaml
    from pydantic import ValidationError
    from schemas.hf_families import HFFamilies

    path = Path(path)
    try:
        if path.stat().st_size > MAX_RECIPE_BYTES:
            raise ValueError(f"more than {MAX_RECIPE_BYTES} bytes")
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        return HFFamilies.model_validate(data)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        if isinstance(exc, ValidationError):
            lines = [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:20]]
            raise HFCheckpointError(f"{path}: invalid families file:\n  " + "\n  ".join(lines)) from None
        raise HFCheckpointError(f"{path}: cannot read the families file: {exc}") from None


def _lookup(config: dict, dotted: str) -> Any:
    """The value at the dotted path of ``config``, None when a part is missing."""
    value: Any = config
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _same(a: Any, b: Any) -> bool:
    """Equal values of the same JSON kind (``true`` is not ``1``, ``1`` equals ``1.0``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return type(a) is type(b) and a == b or (isinstance(a, (int, float)) and isinstance(b, (int, float)) and a == b)


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _var_value(cfg: Path, family: str, name: str, rule, config: dict, tensors) -> Any:
    """Recipe variable ``name``'s value from ``config`` by its :class:`~schemas.hf_families.ConfigVar` rule;
    ``tensors()`` is the set of the checkpoint's tensor names (for ``if_tensor``, read only when asked)."""
    from schemas.expressions import ExpressionError, evaluate

    if rule.if_tensor is not None:
        return rule.then if rule.if_tensor in tensors() else rule.else_
    for path in rule.from_:
        value = _lookup(config, path)
        if value is not None:
            return _mapped(cfg, path, rule, _object_value(cfg, path, rule, value))
    if rule.value is not None:
        text = rule.value.strip()
        if not (text.startswith("${") and text.endswith("}")):
            raise HFCheckpointError(f"families.yaml: {family}.vars.{name}.value must be one ${{...}} expression")

        def lookup(var: str, offset: int):
            v = config.get(var)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ExpressionError(f"config field {var!r} is {'missing' if v is None else _shown(v)}, not a number",
                                      offset)
            return v

        try:
            return evaluate(text[2:-1], lookup)
        except ExpressionError as exc:
            raise HFCheckpointError(f"{cfg}: recipe variable {name} = {text}: {exc.message}") from None
    if not rule.required:
        return rule.default
    raise HFCheckpointError(f"{cfg}: field {' or '.join(rule.from_) or name!r} is missing (the {family} family "
                            f"reads it into the recipe variable {name})")


def _mapped(cfg: Path, path: str, rule, value: Any) -> Any:
    """The recipe value ``value`` of config field ``path`` chooses in the rule's value map (``value`` itself
    without one). A value the map lacks is an HFCheckpointError naming the field, the value and the known ones."""
    if rule.values is None:
        return value
    for key, chosen in rule.values.items():
        if _same(value, key):
            return chosen
    raise HFCheckpointError(f"{cfg}: {path} = {_shown(value)} is not supported (known values: "
                            f"{', '.join(map(_shown, rule.values))})")


def _object_value(cfg: Path, path: str, rule, value: Any) -> Any:
    """``value`` of config field ``path`` with the rule's object options applied (renamed / dropped keys,
    allowed values, the values that mean none)."""
    if not (rule.rename_keys or rule.drop_keys or rule.allow or rule.null_if):
        return value
    if not isinstance(value, dict):
        raise HFCheckpointError(f"{cfg}: {path} = {_shown(value)}: expected an object")
    value = {rule.rename_keys.get(k, k): v for k, v in value.items()}
    for key, allowed in rule.allow.items():
        if key in value and not any(_same(value[key], a) for a in allowed):
            raise HFCheckpointError(f"{cfg}: {path}.{key} = {_shown(value[key])} is not supported (the recipe "
                                    f"computes {', '.join(map(_shown, allowed))})")
    for key, none in rule.null_if.items():
        if key in value and any(_same(value[key], n) for n in none):
            return None
    return {k: v for k, v in value.items() if k not in rule.drop_keys}


def _check_field(cfg: Path, family: str, name: str, check, config: dict) -> None:
    """Refuse ``config[name]`` unless ``check`` (:class:`~schemas.hf_families.ConfigCheck`) allows it."""
    value = config[name]
    if check.cycle and not any(_same(value, a) for a in check.allow):
        n = len(check.cycle)
        if not (isinstance(value, list) and all(_same(v, check.cycle[k % n]) for k, v in enumerate(value))):
            raise HFCheckpointError(f"{cfg}: {name} = {_shown(value)}: {check.reason} (the {family} family accepts "
                                    f"the repeating pattern {_shown(check.cycle)})")
        return
    if check.each and not isinstance(value, list):
        raise HFCheckpointError(f"{cfg}: {name} = {_shown(value)}: expected a list")
    bound = config.get(check.at_least) if check.at_least else None
    allowed = list(check.allow)
    if check.given is not None:
        other = config.get(check.given)
        allowed += next((v for k, v in check.allow_given.items() if _same(other, k)), [])
    for item in value if check.each else [value]:
        if any(_same(item, a) for a in allowed):
            continue
        if (isinstance(bound, (int, float)) and not isinstance(bound, bool) and isinstance(item, (int, float))
                and not isinstance(item, bool) and item >= bound):
            continue
        accepted = (", ".join(map(_shown, allowed)) or "no value") + (
            f" or at least {check.at_least} ({_shown(bound)})" if check.at_least else "") + (
            f" with {check.given} = {_shown(config.get(check.given))}" if check.given else "")
        raise HFCheckpointError(f"{cfg}: {name} = {_shown(value)}: {check.reason} (the {family} family accepts "
                                f"{accepted})")


def _yaml(value: Any) -> str:
    """``value`` as the text of a ``KEY=VALUE`` override (JSON is YAML flow syntax)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise HFCheckpointError(f"a config value {value} is not finite")
    return json.dumps(value)


def _choose(cfg: Path, families, config: dict) -> tuple[str, Any]:
    archs = config.get("architectures") or []
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise HFCheckpointError(f"{cfg}: architectures = {_shown(archs)}: expected a list of class names")
    model_type = config.get("model_type")
    for arch in archs:
        for name, fam in families.families.items():
            if arch in fam.architectures:
                return name, fam
    for name, fam in families.families.items():   # model_type only without architectures: a model with a head
        if not archs and isinstance(model_type, str) and model_type in fam.model_types:   # is not its base model
            return name, fam
    known = sorted({a for f in families.families.values() for a in f.architectures})
    types = sorted({t for f in families.families.values() for t in f.model_types})
    raise HFCheckpointError(f"{cfg}: no family serves architectures {_shown(archs)} / model_type "
                            f"{_shown(model_type)}; known architectures: {', '.join(known)}; model types: "
                            f"{', '.join(types)} (add one: docs/models.md)")


def _weights_file(folder: Path) -> Path:
    single, index = folder / "model.safetensors", folder / "model.safetensors.index.json"
    if single.is_file():
        return single
    if index.is_file():
        return index
    extra = [p.name for p in folder.glob("*.bin")][:3] + [p.name for p in folder.glob("*.pt*")][:3]
    raise HFCheckpointError(f"{folder}: no model.safetensors or model.safetensors.index.json" + (
        f" (found {', '.join(extra)}: PyTorch pickles are not read, since unpickling runs code the file's "
        "author chose; convert them to safetensors)" if extra else ""))


def _recipe_weights(recipe: Path) -> dict:
    """The ``map`` (a dict) and ``ignore`` (a list) of the family recipe's own ``weights:`` section, as written
    (``${...}`` still unsubstituted: the recipe's interpolation runs after the overrides), so that the tie
    rule's and ``ignore_weights``' overrides add to them instead of replacing them. Parsed as the recipe loader
    parses (:func:`schemas.source.parse_yaml`, bounded); a recipe that does not parse, or whose values have
    other shapes, gives ``{}`` here and its error when it is loaded."""
    from schemas.errors import RecipeError
    from schemas.source import IssueCollector, SourceMap, parse_yaml

    try:
        if recipe.stat().st_size > MAX_RECIPE_BYTES:
            return {}
        text = recipe.read_text(encoding="utf-8")
        issues = IssueCollector(SourceMap(str(recipe), text))
        data = parse_yaml(text, issues)
    except (OSError, ValueError, RecipeError):
        return {}
    section = data.get("weights") if isinstance(data, dict) and not issues.issues else None
    if not isinstance(section, dict):
        return {}
    found = {}
    if isinstance(section.get("map"), dict):
        found["map"] = section["map"]
    if isinstance(section.get("ignore"), list):
        found["ignore"] = section["ignore"]
    return found


def weight_names(weights: Path) -> set[str]:
    """The tensor names of a ``model.safetensors``, or of every file of a sharded checkpoint's index (their
    headers, checked against the index: :mod:`runtime.sharded_weights`)."""
    from runtime.weights import read_safetensors_header

    return set(read_safetensors_header(weights))


def resolve_checkpoint(folder: str | os.PathLike, overrides: Sequence[str] = (),
                       families_file: str | os.PathLike = FAMILIES_FILE) -> HFCheckpoint:
    """The recipe, overrides and files that build the checkpoint folder ``folder``; ``overrides``
    (``KEY=VALUE``) come after the config's, so they win. Raises HFCheckpointError (see the module docstring
    for what is refused)."""
    folder = Path(folder)
    cfg = folder / "config.json"
    if not folder.is_dir():
        raise HFCheckpointError(f"{folder}: not a folder")
    if not cfg.is_file():
        raise HFCheckpointError(f"{folder}: no config.json (a Hugging Face checkpoint folder has config.json and "
                                "model.safetensors)")
    config = _read_json(cfg, MAX_HF_CONFIG_BYTES, "config.json")
    if not isinstance(config, dict):
        raise HFCheckpointError(f"{cfg}: expected a JSON object, got {type(config).__name__}")
    families = load_families(families_file)
    name, fam = _choose(cfg, families, config)
    known = set(_ALWAYS_READ) | set(families.harmless) | set(fam.harmless) | set(fam.checks)
    if fam.tie_word_embeddings is not None:
        known.add("tie_word_embeddings")
    for rule in fam.vars.values():
        known.update(p.split(".", 1)[0] for p in rule.from_)
        known.update(_NAME.findall(rule.value or ""))
    known.update(c.at_least for c in fam.checks.values() if c.at_least)
    known.update(c.given for c in fam.checks.values() if c.given)
    unknown = [k for k in config if k not in known]
    if unknown:
        shown = ", ".join(f"{k} = {_shown(config[k])}" for k in unknown[:10])
        raise HFCheckpointError(f"{cfg}: field(s) the {name} family does not know, which may change the "
                                f"computation: {shown}{' ...' if len(unknown) > 10 else ''} (a field known not to "
                                f"change it goes under 'harmless' in {FAMILIES_FILE.name})")
    weights = _weights_file(folder)
    names: list[set[str]] = []

    def tensors() -> set[str]:   # the header(s) read once, the first time a rule asks
        if not names:
            names.append(weight_names(weights))
        return names[0]

    out = [f"{var}={_yaml(_var_value(cfg, name, var, rule, config, tensors))}" for var, rule in fam.vars.items()]
    for field_name, check in fam.checks.items():   # after the vars: a value map's error names its own field
        if field_name in config:
            _check_field(cfg, name, field_name, check, config)
    out += list(fam.overrides)
    recipe = (Path(families_file).parent / fam.recipe).resolve()
    rules: dict = {}
    if fam.tie_word_embeddings is not None:
        tied = config.get("tie_word_embeddings", fam.tie_word_embeddings.default)
        if not isinstance(tied, bool):
            raise HFCheckpointError(f"{cfg}: tie_word_embeddings = {_shown(tied)}: expected true or false")
        if tied:
            rules = {k: v for k, v in fam.tie_word_embeddings.map.items() if k not in tensors()}
    if rules or fam.ignore_weights:   # merged into the recipe's own map / ignore list, which an override replaces
        own = _recipe_weights(recipe)
        if rules:
            out.append(f"weights.map={_yaml({**own.get('map', {}), **rules})}")
        if fam.ignore_weights:
            out.append(f"weights.ignore={_yaml(own.get('ignore', []) + list(fam.ignore_weights))}")
    tokenizer = folder / "tokenizer.json"
    generation = {}
    if (folder / "generation_config.json").is_file():
        gen = _read_json(folder / "generation_config.json", MAX_HF_CONFIG_BYTES, "generation_config.json")
        generation = gen if isinstance(gen, dict) else {}
    return HFCheckpoint(folder, name, recipe, out + list(overrides), weights,
                        tokenizer if tokenizer.is_file() else None, generation, config)
