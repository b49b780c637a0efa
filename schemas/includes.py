"""``include:``: a recipe reads ``vars`` and ``blocks`` from other YAML files.

``include: [common/llama_blocks.yaml, sizes.yaml]`` lists paths relative to the including file's directory
(the current directory for recipe text without a file). An included file is a mapping of ``vars``,
``blocks`` and its own ``include`` only, read with the recipe's safe YAML loader and value budget. Merging:
a var of the including file wins over an included one of the same name (included files give defaults);
among included files the first to define a var wins (depth first, each file before its own includes); a block
name defined twice (in any two files) is an error at the second definition. Errors in an included file,
including those found later in its vars and blocks, are reported at that file's own line and column.

Refused (errors at the ``include`` item): a path that is not a relative string, one with a ``..``
segment, one whose real path (symlinks followed) is outside the directory of the top recipe, a file that
includes itself (directly or through others), more than ``MAX_INCLUDES`` files in all and chains deeper than
``MAX_INCLUDE_DEPTH`` (:mod:`core.limits`). A file included twice elsewhere (a diamond) is read once.
"""
from __future__ import annotations

import os
from typing import Any, Callable

from core.limits import MAX_INCLUDE_DEPTH, MAX_INCLUDES

from .errors import RecipeError, RecipeIssue, shorten
from .source import IssueCollector, SourceMap, ValueBudget, parse_yaml

#: the fields an included file may have
INCLUDED_FIELDS = ("vars", "blocks", "include")


def merge_includes(data: dict, filename: str, issues: IssueCollector, budget: ValueBudget,
                   read: Callable[[str], str]) -> None:
    """Merge the files ``data["include"]`` names (recursively) into ``data`` and remove the key; issues go to
    ``issues`` (positions in the file they concern); ``read(path)`` returns a file's text (bounded, regular
    files only) or raises OSError / ValueError."""
    if "include" not in data:
        return
    top = os.path.realpath(filename) if os.path.isfile(filename) else None
    root = os.path.dirname(top) if top else os.path.realpath(os.getcwd())
    includer = _Includer(data, issues, budget, read, root, top)
    includer.shown = os.path.dirname(filename) if top else ""
    includer.file(data, issues, root, [top] if top else [])


class _Includer:
    def __init__(self, data: dict, issues: IssueCollector, budget: ValueBudget, read: Callable[[str], str],
                 root: str, top: str | None) -> None:
        self.data, self.issues, self.budget, self.read, self.root = data, issues, budget, read, root
        self.top = top
        self.seen: set[str] = {top} if top else set()
        self.count = 0
        self.shown = ""   # the top recipe's directory as its name gives it
        self.block_files: dict[str, str] = {}   # block name -> the file that defined it
        if isinstance(data.get("blocks"), dict):
            self.block_files = {name: issues.source.file for name in data["blocks"]}

    def file(self, node: dict, issues: IssueCollector, base: str, stack: list[str]) -> None:
        """Merge the includes of ``node`` (a file's data whose issues go to ``issues``), then remove the key."""
        entries = node.pop("include")
        if entries is None:
            return
        if not isinstance(entries, list):
            issues.add(("include",), "include is a list of YAML file paths (relative to this file)")
            return
        for index, entry in enumerate(entries):
            where = ("include", index)
            path = self.check(entry, where, issues, base, stack)
            if path is None or path in self.seen:
                continue
            self.seen.add(path)
            self.count += 1
            if self.count > MAX_INCLUDES:
                issues.add(where, f"a recipe may include at most {MAX_INCLUDES} files in all")
                return
            try:
                text = self.read(path)
            except (OSError, ValueError) as exc:
                issues.add(where, f"cannot read included file {shorten(entry)}: {exc}")
                continue
            display = self.display(path)
            sub = IssueCollector(SourceMap(display, text))
            try:
                included = parse_yaml(text, sub, self.budget)
            except RecipeError as exc:
                self.issues.issues.extend(exc.issues)
                continue
            if not isinstance(included, dict):
                sub.issues.append(RecipeIssue(display, 1, 1, "", "an included file is a mapping of vars, blocks "
                                                                 "and include"))
            else:
                self.merge(included, sub)
                if "include" in included:
                    self.file(included, sub, os.path.dirname(path), [*stack, path])
            self.issues.issues.extend(sub.issues)

    def display(self, path: str) -> str:
        """``path`` as errors name it: relative to the top recipe's directory, as the recipe was named."""
        return os.path.join(self.shown, os.path.relpath(path, self.root))

    def check(self, entry: Any, where: tuple, issues: IssueCollector, base: str, stack: list[str]) -> str | None:
        """The real path of include item ``entry``, or None after reporting why it is refused."""
        if not isinstance(entry, str) or not entry:
            issues.add(where, f"an include item is a relative file path, got {shorten(entry)}")
            return None
        if os.path.isabs(entry) or entry.startswith("~"):
            issues.add(where, f"include paths are relative to the including file, got the absolute {shorten(entry)}")
            return None
        if ".." in entry.replace("\\", "/").split("/"):
            issues.add(where, f"include path {shorten(entry)} has a '..' segment: included files are in the "
                              "recipe's directory or below it")
            return None
        path = os.path.realpath(os.path.join(base, entry))
        if os.path.commonpath([path, self.root]) != self.root:
            issues.add(where, f"include path {shorten(entry)} leads outside the recipe's directory (a symlink)")
            return None
        if path in stack:
            chain = " -> ".join(self.display(p) for p in [*stack[stack.index(path):], path])
            issues.add(where, f"include cycle: {chain}")
            return None
        if len(stack) - (1 if self.top else 0) >= MAX_INCLUDE_DEPTH:   # this item would be one level deeper
            issues.add(where, f"includes nest more than {MAX_INCLUDE_DEPTH} deep")
            return None
        return path

    def merge(self, included: dict, sub: IssueCollector) -> None:
        """Merge one included file's vars and blocks into the recipe (see the module docstring)."""
        for key in included:
            if key not in INCLUDED_FIELDS:
                sub.add((key,), f"an included file gives only {', '.join(INCLUDED_FIELDS)}; '{shorten(key)}' "
                                "belongs in the recipe", at_key=True)
        for field in ("vars", "blocks"):
            values = included.get(field)
            if values is None:
                continue
            if not isinstance(values, dict):
                sub.add((field,), f"{field} of an included file is a mapping")
                continue
            target = self.data.setdefault(field, {})
            if not isinstance(target, dict):
                return   # the recipe's own field is invalid: reported when it is validated
            for name, value in values.items():
                if field == "blocks" and name in self.block_files:
                    sub.add((field, name), f"block '{name}' is already defined in {self.block_files[name]}",
                            at_key=True)
                    continue
                if name in target:
                    continue   # the including file's (or an earlier include's) var wins
                target[name] = value
                self.issues.source.adopt((field, name), sub.source)
                if field == "blocks":
                    self.block_files[name] = sub.source.file
