"""Block arguments: ``blocks: {QKV: {args: {dim: 64}, layers: ..., forward: ...}}`` used as ``{type: QKV, dim: 128}``.

A block that declares ``args:`` is a template. ``args`` is a mapping of names to default values, or a list
whose items are a name (a required argument) or a one-key mapping (an argument with its default):
``args: [heads, {dim: 64}]``. Each use of the block gives argument values as extra keys of its layer entry
(besides ``type`` and ``repeat``); the values, and the defaults, are interpolated against ``vars:`` as any
recipe value is (``dim: ${hidden_size // 2}``). For each distinct set of values, the block's ``layers``,
``inputs`` and ``forward`` are copied with ``${name}`` substituted from the arguments and ``vars:`` (an
argument shadows a variable of the same name inside its block), and the use names that copy: the first
instance of a block keeps its name, later ones are ``Name_1``, ``Name_2``, ... (so ``--print-recipe`` prints
the expanded recipe, which builds the same model). Instances are made per use, so nested templates
receive their arguments from the enclosing instance (``{type: Inner, dim: ${dim}}``).

``per_layer`` gives the copies of a ``repeat`` their own arguments: ``{type: Layer, repeat: 4, per_layer:
{window: [4096, null]}}``; a list of length L gives copy k its item k % L (L must divide ``repeat``: a cycle,
or one value per copy). Copies with different values are different instances, and the entry lists the block
of each copy in ``types`` (``[Layer, Layer_1, Layer, Layer_1]``), which ``builder.recipe`` builds.

Errors (issues at ``file:line:column``): an unknown argument (at its key in the use), a missing required
argument (at the use), a bad ``args`` declaration; problems inside an instance's text are reported at the
template's own text (once per instance that has it, with the instance's path). Bound: at most ``MAX_BLOCK_INSTANCES`` instances (:mod:`core.limits`), and their
copied values count toward ``MAX_VALUES``.
"""
from __future__ import annotations

from typing import Any, Callable

from core.limits import MAX_BLOCK_INSTANCES, MAX_VALUES

from .errors import shorten
from .source import FieldPath, IssueCollector

#: keys of a layer entry that are not block arguments
ENTRY_KEYS = frozenset({"type", "repeat", "per_layer", "types"})

_REQUIRED = object()


def take_templates(data: dict, issues: IssueCollector) -> dict[str, dict]:
    """Remove the blocks that declare ``args:`` from ``data["blocks"]`` (before ``${var}`` interpolation,
    which must not see their bodies) and return them by name. Issues for a malformed ``args``."""
    blocks = data.get("blocks")
    if not isinstance(blocks, dict):
        return {}
    templates = {}
    for name, block in list(blocks.items()):
        if isinstance(block, dict) and "args" in block:
            args = _declared(block["args"], ("blocks", name, "args"), issues)   # None: reported
            templates[name] = {"args": args, "body": {k: v for k, v in block.items() if k != "args"}}
            del blocks[name]
    return templates


def _declared(args: Any, path: FieldPath, issues: IssueCollector) -> dict | None:
    if isinstance(args, dict):
        items = list(args.items())
    elif isinstance(args, list):
        items = []
        for i, item in enumerate(args):
            if isinstance(item, str):
                items.append((item, _REQUIRED))
            elif isinstance(item, dict) and len(item) == 1:
                items.append(next(iter(item.items())))
            else:
                issues.add(path + (i,), "an item of args is a name (a required argument) or a one-key mapping "
                                        "{name: default}")
                return None
    else:
        issues.add(path, "args is a mapping {name: default} or a list of names and {name: default} mappings")
        return None
    out = {}
    for key, default in items:
        if not isinstance(key, str) or not key.isidentifier() or key in ENTRY_KEYS:
            issues.add(path, f"argument name {shorten(key)} must be an identifier other than "
                             f"{', '.join(sorted(ENTRY_KEYS))}")
            return None
        if key in out:
            issues.add(path, f"argument '{key}' is declared twice")
            return None
        out[key] = default
    return out


class Expander:
    """Makes the instances of the templates that ``data``'s layer entries use (see the module docstring).

    ``interpolate(value, path, scope)`` substitutes ``${...}`` in ``value`` with ``scope`` (the resolved
    variables and the arguments) and reports issues at ``path``; ``alias(new, old)`` makes source positions
    of ``new`` paths those of ``old`` ones (:meth:`schemas.source.SourceMap.alias`)."""

    def __init__(self, data: dict, templates: dict[str, dict], variables: dict, issues: IssueCollector,
                 interpolate: Callable[[Any, FieldPath, dict], Any], alias: Callable[[FieldPath, FieldPath], None],
                 values: int) -> None:
        self.data, self.templates, self.variables, self.issues = data, templates, variables, issues
        self.interpolate, self.alias, self.values = interpolate, alias, values
        self.instances: dict[tuple[str, str], str] = {}
        self.defaults: dict[str, dict] = {}
        self.pending: list[str] = []   # instances whose own layers are not expanded yet

    def run(self) -> None:
        """Expand every use in ``model.layers`` and the blocks' layers (instances' layers included)."""
        if not self.templates:
            return
        blocks = self.data.setdefault("blocks", {})
        if not isinstance(blocks, dict):
            return
        model = self.data.get("model")
        if isinstance(model, dict):
            self.table(model.get("layers"), ("model", "layers"))
        self.pending = list(blocks) + self.pending   # the plain blocks, then the instances made so far
        while self.pending:   # a worklist, not recursion: instances nest up to MAX_BLOCK_INSTANCES deep
            name = self.pending.pop()
            if isinstance(blocks.get(name), dict):
                self.table(blocks[name].get("layers"), ("blocks", name, "layers"))

    def table(self, layers: Any, path: FieldPath) -> None:
        """Point each use of a template in ``layers`` at its instance; a use with a problem (reported) is
        removed, so that nothing else is reported about it."""
        for key, entry in list(layers.items() if isinstance(layers, dict) else ()):
            if not isinstance(entry, dict):
                continue
            if entry.get("type") not in self.templates:
                if "per_layer" in entry:
                    self.issues.add(path + (key, "per_layer"), f"per_layer gives the block arguments of each copy; "
                                    f"{shorten(entry.get('type'))} is no block with args")
                    del layers[key]
                continue
            per_layer = entry.pop("per_layer", None)
            per_layer = per_layer if isinstance(per_layer, dict) or per_layer is None else {"": per_layer}
            given = {k: entry.pop(k) for k in list(entry) if k not in ENTRY_KEYS}
            copies = self.copies(per_layer, entry.get("repeat"), path + (key,))
            places = {**{k: path + (key, "per_layer", k) for k in per_layer or ()}, **{k: path + (key, k) for k in given}}
            names = [self.use(entry["type"], {**given, **copy}, path + (key,), places) for copy in copies or [{}]]
            if copies is None or None in names:
                del layers[key]
            elif len(set(names)) == 1:
                entry["type"] = names[0]
            else:
                entry["type"], entry["types"] = names[0], names

    def copies(self, per_layer: Any, repeat: Any, where: FieldPath) -> list[dict] | None:
        """The arguments ``per_layer`` gives each of the ``repeat`` copies (``[{}]`` without it); None after
        reporting a problem. A list of length L gives copy k its item k % L; L must divide ``repeat``."""
        if per_layer is None:
            return [{}]
        at = where + ("per_layer",)
        if type(repeat) is not int or repeat < 1:
            self.issues.add(at, "per_layer needs repeat: N (it gives the arguments of each copy)")
            return None
        if not isinstance(per_layer, dict):
            self.issues.add(at, "per_layer is a mapping {argument: [value per copy, ...]}")
            return None
        for name, values in per_layer.items():
            if not isinstance(values, list) or not values or repeat % len(values):
                self.issues.add(at + (name,), f"per_layer.{shorten(name)} is a list whose length divides repeat "
                                              f"({repeat}): cycled over the copies, or one value per copy")
                return None
        return [{name: values[k % len(values)] for name, values in per_layer.items()} for k in range(repeat)]

    def use(self, name: str, given: dict, path: FieldPath, places: dict[str, FieldPath]) -> str | None:
        """The name of the instance of template ``name`` with the arguments ``given`` by the entry at ``path``,
        or None after reporting a problem (each problem once per entry)."""
        if self.templates[name]["args"] is None:   # its declaration's problem is reported
            return None
        declared = self.defaults.get(name)
        if declared is None:
            declared = self.defaults[name] = {
                k: v if v is _REQUIRED else self.interpolate(v, ("blocks", name, "args", k), self.variables)
                for k, v in self.templates[name]["args"].items()}
        unknown = [k for k in given if k not in declared]
        if self.issues.covers(path):
            return None
        for key in unknown:
                self.issues.add(places[key], f"block '{name}' has no argument '{key}'; its arguments: "
                                               f"{', '.join(declared) or 'none'}", at_key=True)
        missing = [k for k, v in declared.items() if v is _REQUIRED and k not in given]
        if missing:
            self.issues.add(path + ("type",), f"block '{name}' needs argument{'s' if len(missing) > 1 else ''} "
                                              f"{', '.join(map(repr, missing))} (no default)")
        if unknown or missing:
            self.issues.mark(path)   # reported once for all copies of a repeat
        if unknown or missing or any(self.issues.covers(("blocks", name, "args", k)) for k in declared) \
                or any(self.issues.covers(places[k]) for k in given):
            return None
        binding = {**declared, **given}
        key = (name, repr(sorted(binding.items())))
        if key not in self.instances:
            made = self.instance(name, binding, path)
            if made is None:
                return None
            self.instances[key] = made
        return self.instances[key]

    def instance(self, name: str, binding: dict, where: FieldPath) -> str | None:
        blocks = self.data["blocks"]
        if len(self.instances) >= MAX_BLOCK_INSTANCES:
            self.issues.add(where, f"blocks with args would make more than {MAX_BLOCK_INSTANCES} instances "
                                   "(distinct argument values)")
            return None
        count = sum(1 for (n, _) in self.instances if n == name)
        new = name if count == 0 and name not in blocks else f"{name}_{count}"
        while new in blocks or new in self.templates and new != name:
            count += 1
            new = f"{name}_{count}"
        body = self.templates[name]["body"]
        self.values += _count(body)
        if self.values > MAX_VALUES:
            self.issues.add(where, f"the instances of blocks with args expand to more than {MAX_VALUES:,} values")
            return None
        if new != name:
            self.alias(("blocks", new), ("blocks", name))
        blocks[new] = self.interpolate(body, ("blocks", new), {**self.variables, **binding})
        self.pending.append(new)
        return new


def _count(value: Any) -> int:
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        total += 1
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return total
