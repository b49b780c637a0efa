"""A deployable artifact: one folder holding a compiled model and everything it needs to run, written by
``build MODEL --save-exe DIR`` (:func:`save_artifact`) and loaded by :func:`load_artifact` with the runtime
alone (numpy, llvmlite, safetensors: never ``builder``, ``schemas`` or pydantic).

    DIR/manifest.json          format, version, name, functions (inputs, output), parameters in order
                               (name, shape, dtype, SHA-256 of the bytes), the files (bytes, SHA-256)
    DIR/model.mbx              the Executable (:meth:`runtime.Executable.save`: its own digest)
    DIR/params.safetensors     the converted (quantized / cast) parameters, under the names the
                               Executable's functions take them (``model.embed_tokens.weight``)
    DIR/recipe.yaml            the resolved recipe (variables and overrides applied) when built from one
    DIR/tokenizer.json         the tokenizer, when the build had one (``--tokenizer``)

    art = runtime.load_artifact("out/")
    y = art["forward"](x)                  # the function with its parameters bound; art(x): the first
    art.functions, art.param_names, art.params, art.exe, art.vm, art.tokenizer_path, art.recipe_text

Every file is checked before it is used: the manifest's syntax, format, version and types; each file's
size against the manifest (and the SHA-256 of the recipe and the tokenizer); the Executable's own digest and bytecode
(:meth:`runtime.Executable.load`); the parameters' names, shapes and dtypes against both the manifest and
the Executable's function signatures, and each tensor's bytes against its SHA-256. A missing, damaged or
inconsistent file is one :class:`ArtifactError` (a ValueError) naming the file and what is wrong.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .bytecode import sinfo_text
from .executable import Executable
from .files import atomic_write, read_regular
from .vm import VirtualMachine
from .weights import WeightsError, load_params, save_params

__all__ = ["Artifact", "ArtifactError", "load_artifact", "save_artifact", "ARTIFACT_FORMAT", "ARTIFACT_VERSION",
           "MANIFEST", "EXECUTABLE", "PARAMS", "RECIPE", "TOKENIZER"]

#: The manifest's ``format`` field.
ARTIFACT_FORMAT = "model-builder-artifact"
#: The manifest's ``version`` this runtime writes and reads.
ARTIFACT_VERSION = 1
MANIFEST, EXECUTABLE, PARAMS, RECIPE, TOKENIZER = (
    "manifest.json", "model.mbx", "params.safetensors", "recipe.yaml", "tokenizer.json")
#: The largest manifest read (bytes): it lists every parameter, a few hundred bytes each.
MAX_MANIFEST_BYTES = 64 << 20
_OPTIONAL = (RECIPE, TOKENIZER)


class ArtifactError(ValueError):
    """An artifact folder that cannot be used: a missing, damaged or inconsistent file (the message
    names it)."""


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _sha256_array(a: np.ndarray) -> str:
    """SHA-256 of an array's bytes as safetensors stores them (little-endian, row-major)."""
    a = np.ascontiguousarray(a)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    return hashlib.sha256(a.view(np.uint8).reshape(-1) if a.size else b"").hexdigest()


def save_artifact(folder: str | os.PathLike, exe: Executable, params: Mapping[str, np.ndarray],
                  param_specs: Sequence[tuple[str, Sequence[int], str]], name: str = "",
                  recipe_text: str | None = None, tokenizer: str | os.PathLike | None = None,
                  metadata: Mapping[str, str] | None = None) -> Path:
    """Write the artifact folder ``folder`` (created when missing; the files above replaced when there).

    ``exe``: the Executable; ``param_specs``: ``(name, shape, dtype)`` of the parameters in the order
    every function takes them after its inputs; ``params``: name -> array (bfloat16 as uint16 bits, as
    ``param_specs`` says); ``recipe_text``: the resolved recipe (YAML) or None; ``tokenizer``: a
    ``tokenizer.json`` to copy, or None; ``metadata``: strings for the manifest (quantization, ...). The
    manifest is written last (and an old one removed first), so a folder whose writing failed midway
    does not load. Returns the folder. Raises ArtifactError when ``folder`` exists and is not a directory
    or the parameters do not match ``param_specs``; OSError when it cannot be written.
    """
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ArtifactError(f"--save-exe {folder}: exists and is not a directory")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MANIFEST).unlink(missing_ok=True)
    names = [n for n, _, _ in param_specs]
    if sorted(names) != sorted(params):
        raise ArtifactError(f"save_artifact: the parameters {sorted(set(params) ^ set(names))[:5]} are not in both "
                            "the values and the specs")
    entries = []
    for pname, shape, dtype in param_specs:
        a = np.asarray(params[pname])
        if tuple(a.shape) != tuple(shape):
            raise ArtifactError(f"save_artifact: parameter {pname!r} has shape {a.shape}, its spec {tuple(shape)}")
        entries.append({"name": pname, "shape": [int(d) for d in shape], "dtype": dtype, "sha256": _sha256_array(a)})
    exe.save(folder / EXECUTABLE)
    save_params(folder / PARAMS, {n: params[n] for n in names}, metadata={"format": "model-builder", **(metadata or {})},
                dtypes={n: d for n, _, d in param_specs})
    files = [EXECUTABLE, PARAMS]
    for fname in _OPTIONAL:
        (folder / fname).unlink(missing_ok=True)
    if recipe_text is not None:
        atomic_write(folder / RECIPE, recipe_text.encode("utf-8"))
        files.append(RECIPE)
    if tokenizer is not None:
        atomic_write(folder / TOKENIZER, read_regular(tokenizer, 1 << 30))
        files.append(TOKENIZER)
    functions = {}
    for fname, fn in exe.functions.items():
        n = fn.get("num_input", len(fn["params"]))
        functions[fname] = {"inputs": [{"name": p["name"], "type": sinfo_text(p)} for p in fn["params"][:n]],
                            "output": sinfo_text(fn["ret"]) if "ret" in fn else None}
    manifest = {"format": ARTIFACT_FORMAT, "version": ARTIFACT_VERSION, "name": name,
                "metadata": {str(k): str(v) for k, v in (metadata or {}).items()},
                "functions": functions, "params": entries,
                "files": {f: {"bytes": (folder / f).stat().st_size, "sha256": _sha256_file(folder / f)} for f in files}}
    atomic_write(folder / MANIFEST, (json.dumps(manifest, indent=1) + "\n").encode())
    return folder


class Artifact:
    """A loaded artifact (see the module docstring): ``exe``, ``params`` (name -> array, in
    :attr:`param_names` order), ``manifest`` (the parsed JSON), ``recipe_text`` (or None),
    ``tokenizer_path`` (or None), ``path``. ``art[name](*inputs)`` runs function ``name`` with the
    parameters bound after its inputs; ``art(*inputs)`` runs the first function."""

    def __init__(self, path: Path, manifest: dict, exe: Executable, params: dict[str, np.ndarray],
                 recipe_text: str | None, tokenizer_path: Path | None) -> None:
        self.path = path
        self.manifest = manifest
        self.exe = exe
        self.params = params
        self.recipe_text = recipe_text
        self.tokenizer_path = tokenizer_path
        self._vm: VirtualMachine | None = None

    @property
    def name(self) -> str:
        """The model's name (the recipe's ``name``, or the imported file's)."""
        return self.manifest.get("name", "")

    @property
    def functions(self) -> list[str]:
        """The functions, in the order the build exported them."""
        return list(self.exe.functions)

    @property
    def param_names(self) -> list[str]:
        """Parameter names, in the order every function takes them after its inputs."""
        return [p["name"] for p in self.manifest["params"]]

    @property
    def vm(self) -> VirtualMachine:
        """The VirtualMachine (the native code is loaded on first use)."""
        if self._vm is None:
            self._vm = VirtualMachine(self.exe)
        return self._vm

    def inputs(self, name: str) -> list[str]:
        """Input names of function ``name`` (KeyError naming the functions for an unknown one)."""
        fn = self.exe._function(name)
        return [p["name"] for p in fn["params"][:fn.get("num_input", len(fn["params"]))]]

    def __getitem__(self, name: str):
        inputs = self.inputs(name)
        fn = self.vm[name]
        weights = [self.params[n] for n in self.param_names]

        def call(*args: Any):
            if len(args) != len(inputs):
                raise TypeError(f"{name}() takes inputs {inputs}, got {len(args)} argument(s)")
            return fn(*args, *weights)

        return call

    def __call__(self, *args: Any):
        return self[self.functions[0]](*args)

    def __repr__(self) -> str:
        return f"Artifact({str(self.path)!r}, functions={self.functions}, params={len(self.params)})"


def _fail(path: Path, message: str) -> ArtifactError:
    return ArtifactError(f"{path}: {message}")


def _read_manifest(folder: Path) -> dict:
    path = folder / MANIFEST
    if not folder.is_dir():
        raise ArtifactError(f"{folder}: not an artifact folder (" + ("not a directory" if folder.exists()
                            else "it does not exist") + "); build MODEL --save-exe DIR writes one")
    try:
        data = read_regular(path, MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        raise _fail(path, "missing: not an artifact folder, or its writing did not finish") from None
    except (OSError, ValueError) as exc:
        raise _fail(path, f"cannot read it: {exc}") from None
    try:
        manifest = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise _fail(path, f"not valid JSON ({str(exc)[:120]})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != ARTIFACT_FORMAT:
        raise _fail(path, f"not a model-builder artifact manifest (format is not {ARTIFACT_FORMAT!r})")
    if manifest.get("version") != ARTIFACT_VERSION:
        raise _fail(path, f"artifact version {manifest.get('version')!r} is not supported (this runtime reads "
                          f"version {ARTIFACT_VERSION}): rebuild it with --save-exe")
    files, params = manifest.get("files"), manifest.get("params")
    ok_files = isinstance(files, dict) and all(
        isinstance(v, dict) and isinstance(v.get("bytes"), int) and not isinstance(v.get("bytes"), bool)
        and isinstance(v.get("sha256"), str) for v in files.values())
    ok_params = isinstance(params, list) and all(
        isinstance(p, dict) and isinstance(p.get("name"), str) and isinstance(p.get("dtype"), str)
        and isinstance(p.get("sha256"), str) and isinstance(p.get("shape"), list)
        and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in p["shape"]) for p in params)
    if not ok_files or not ok_params or not isinstance(manifest.get("name", ""), str):
        raise _fail(path, "malformed: 'files' must map names to {bytes, sha256} and 'params' list "
                          "{name, shape, dtype, sha256}")
    unknown = sorted(set(files) - {EXECUTABLE, PARAMS, *_OPTIONAL})
    if unknown or EXECUTABLE not in files or PARAMS not in files:
        raise _fail(path, f"malformed: it lists the files {sorted(files)}; an artifact has {EXECUTABLE}, {PARAMS} "
                          f"and optionally {', '.join(_OPTIONAL)}")
    if len({p["name"] for p in params}) != len(params):
        raise _fail(path, "malformed: a parameter name appears twice")
    return manifest


def _check_file(folder: Path, name: str, entry: dict) -> Path:
    """The path of file ``name``, checked against its manifest ``entry``: its size, and the SHA-256 of the
    recipe and the tokenizer (the Executable checks its own digest when loaded, the parameters are
    checked tensor by tensor as they are read: each file is read once)."""
    path = folder / name
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise _fail(path, "missing (the manifest lists it)") from None
    if not path.is_file():
        raise _fail(path, "not a regular file")
    if size != entry["bytes"]:
        raise _fail(path, f"has {size:,} bytes, the manifest says {entry['bytes']:,}: truncated or replaced")
    if name in _OPTIONAL and _sha256_file(path) != entry["sha256"]:
        raise _fail(path, "damaged: its SHA-256 does not match the manifest's")
    return path


def load_artifact(folder: str | os.PathLike) -> Artifact:
    """Load the artifact folder ``folder`` written by :func:`save_artifact` (``build --save-exe``),
    checking every file before use (module docstring). Raises :class:`ArtifactError` naming the file for
    a missing, damaged or inconsistent one."""
    folder = Path(folder)
    manifest = _read_manifest(folder)
    files = manifest["files"]
    paths = {name: _check_file(folder, name, entry) for name, entry in files.items()}
    try:
        exe = Executable.load(paths[EXECUTABLE])
    except (OSError, ValueError) as exc:
        raise _fail(paths[EXECUTABLE], str(exc)) from None
    specs = manifest["params"]
    want = [(p["name"], p["dtype"], p["shape"]) for p in specs]
    for fname, fn in exe.functions.items():
        taken = fn["params"][fn.get("num_input", len(fn["params"])):]
        got = [(p.get("name"), p.get("dtype"), p.get("shape")) for p in taken]
        if got != want:
            diff = next(((w, g) for w, g in zip(want, got) if w != g), None)
            raise _fail(paths[EXECUTABLE], f"function {fname!r} takes {len(got)} parameter(s) "
                                           f"{'' if diff is None else f'(first difference: {diff[1]} for {diff[0]})'}"
                                           f", the manifest lists {len(want)}: the files are of different builds")
        if fname not in manifest.get("functions", {}):
            raise _fail(folder / MANIFEST, f"does not list the executable's function {fname!r}")
    expected = {p["name"]: (tuple(p["shape"]), p["dtype"]) for p in specs}
    digests: dict = {}
    try:
        values = load_params(paths[PARAMS], expected, digests=digests)
    except (WeightsError, OSError) as exc:
        raise _fail(paths[PARAMS], str(exc)) from None
    for p in specs:
        if digests.get(p["name"], (None, None, None))[2] != p["sha256"]:
            raise _fail(paths[PARAMS], f"tensor {p['name']!r} is damaged: its SHA-256 does not match the manifest's")
    params = {p["name"]: values[p["name"]] for p in specs}
    recipe_text = None
    if RECIPE in paths:
        try:
            recipe_text = paths[RECIPE].read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            raise _fail(paths[RECIPE], "not UTF-8 text") from None
    return Artifact(folder, manifest, exe, params, recipe_text, paths.get(TOKENIZER))
