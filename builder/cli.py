"""The ``build`` command: a thin layer over :func:`builder.build_model` with rich output.

    build RECIPE|HF_DIR [KEY=VALUE ...] [--plain] [--no-ir] [--weights W.safetensors]
                 [--input X.npz] [--output Y.npz] [--function NAME] [--seed N]
                 [--save-params OUT.safetensors] [--bench [RUNS]] [--bench-dim NAME=VALUE]
                 [--text TEXT ... --tokenizer tokenizer.json] [--prompt-ids 1,2,3 --max-new-tokens N]
                 [--prompt TEXT | --chat] [--tokenizer tokenizer.json] [--temperature T --top-k K --top-p P ...]
                 [--serve [--host 127.0.0.1 --port 8000 --kv-cache-tokens N --max-batch N]]
                 [--save-exe DIR] [--validate] [--print-recipe] [--quiet | --json] [--debug]
    build --list-ops | --schema | --version

``build HF_DIR`` builds a Hugging Face checkpoint folder (``config.json``, ``model.safetensors`` or a sharded
index, optional ``tokenizer.json``) with its family's recipe (:mod:`builder.checkpoint`, docs/models.md).

``--save-exe DIR`` writes one artifact folder (the Executable, the converted parameters, the resolved
recipe, the tokenizer given with ``--tokenizer``, a manifest) that ``runtime.load_artifact(DIR)`` loads and
runs without the compiler (:mod:`runtime.artifact`).

Output for scripts: ``--quiet`` prints only errors and what was asked for (generated ids, embeddings, the
``--bench`` line, ``--print-after`` IR); ``--json`` prints the summary as one JSON object on stdout
(functions with their input and output shapes, parameters, quantization, timings, kernels, and the
results of ``--input`` / ``--text`` / ``--prompt-ids`` / ``--bench``). Colours and other ANSI codes only
on a terminal: never when stdout is piped, when ``NO_COLOR`` is set, or in a process of an ``mpirun`` /
``torchrun`` launch (whose output the launcher forwards through its own pseudo-terminal) unless
``FORCE_COLOR`` is set. Progress of a slow step (a build, a parameter conversion) is a bar on a terminal
and, when stderr is piped, a plain line every few seconds.

``--text`` runs the recipe's ``embed`` function on the tokenized texts (as sentence-transformers
tokenizes: padded to the longest, truncated at 256 tokens) and prints the embeddings and their cosine
similarities; ``--prompt-ids`` generates greedily with the recipe's ``prefill`` / ``decode`` over a KV
cache and prints the new ids; ``--prompt`` streams the completion of a text (:mod:`builder.cli_text`);
``--serve`` starts the OpenAI-compatible server (:mod:`builder.cli_serve`).

``quantization=q4f16_1`` (a preset) or ``quantization.group_size=64`` (a field of it) quantize the
weights; a float ``--weights`` checkpoint is then quantized while it is loaded (with a progress
bar on stderr when that takes more than a moment), and ``--save-params`` writes the quantized
parameters, which load back directly.

``matmul_precision=high`` (or ``medium``; the recipe field, PyTorch's names) lets float32 matmuls run
on AMX tiles with bfloat16 products where the CPU has them.

``--bench`` times the compiled function on random inputs (median, min, max).

Exit codes: 0 success; 2 a recipe or usage error (printed as ``file:line:col: field: message``);
1 any other error (weights, inputs, compilation), printed as one message. ``--debug`` shows the
traceback instead.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

# Only the standard library at the top: ``build --help`` / ``--version`` / ``--list-ops`` must start fast, so
# every heavy module (the compiler, numpy, rich, schemas / pydantic, runtime) is imported inside the function
# that needs it.

from .cli_serve import add_serve_arguments, check_serve_arguments, serve_model
from .cli_text import add_prompt_arguments, chat_loop, check_prompt_arguments, complete_prompt
from .terminal import (BuildProgressDisplay, ConversionProgressDisplay, make_console, printable_lines, use_color,
                       worker_prefix)

__all__ = ["main"]

#: Timed runs of ``--bench`` without a count.
BENCH_RUNS = 20


def _with_bench_count(argv: list[str]) -> list[str]:
    """``argv`` with the default count after a ``--bench`` that is not followed by a number, so that
    ``--bench dtype=float32`` leaves the override an override (argparse would take it as the count)."""
    out: list[str] = []
    for i, arg in enumerate(argv):
        out.append(arg)
        if arg == "--bench" and (i + 1 == len(argv) or not argv[i + 1].isdigit()):
            out.append(str(BENCH_RUNS))
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="build",
        description="Build a YAML model recipe: validate, export to IR, print it, compile to native "
                    "CPU code, and optionally run it.",
        epilog="example: build recipes/llama_mlp.yaml dtype=float32 hidden_size=2048",
    )
    p.add_argument("recipe", nargs="?", help="path to the recipe (YAML), a Hugging Face checkpoint folder "
                                              "(config.json + model.safetensors), or an ONNX model (.onnx) to import")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="override a var (bare key) or a dotted recipe field; values are YAML scalars")
    p.add_argument("--plain", action="store_true",
                   help="plain text on a terminal too: the IR without syntax highlighting, --list-ops as lines")
    p.add_argument("--no-ir", action="store_true", help="do not print the IR")
    p.add_argument("--weights", metavar="PATH", help="safetensors file with the parameters")
    p.add_argument("--input", metavar="FILE.npz", help="run a function on the arrays in this file")
    p.add_argument("--output", metavar="FILE.npz", help="write the result here (key 'output', or "
                                                          "'output0', 'output1', ... for tuples)")
    p.add_argument("--function", metavar="NAME", help="function to run (default: the first)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights and of --prompt's sampling (default 0)")
    p.add_argument("--save-params", metavar="OUT.safetensors",
                   help="write the parameters (quantized / cast as the recipe says) to this file; "
                        "--weights OUT.safetensors loads them back without converting")
    p.add_argument("--bench", nargs="?", type=int, const=BENCH_RUNS, default=None, metavar="RUNS",
                   help="time the function (--function, default the first) on random inputs: "
                        "RUNS runs (default 20) after 3 warm-up runs; prints median, min, max")
    p.add_argument("--bench-dim", action="append", default=[], metavar="NAME=VALUE",
                   help="value of a symbolic input dim for --bench (default 1), e.g. batch_size=8")
    p.add_argument("--validate", action="store_true",
                   help="check the recipe, the export of its functions and the weights file (if any) without "
                        "compiling; exit 0 when all is well")
    p.add_argument("--print-recipe", action="store_true",
                   help="print the resolved recipe (variables and overrides applied, defaults filled in) and exit")
    p.add_argument("--print-after", action="append", default=[], metavar="PASS",
                   help="print the IR after this compiler pass (repeatable; an unknown name lists them)")
    p.add_argument("--time-passes", action="store_true", help="print the time each compiler pass took")
    p.add_argument("--text", action="append", default=None, metavar="TEXT",
                   help="embed this text with the recipe's 'embed' function (repeatable; needs --tokenizer); "
                        "prints the embeddings and their cosine similarities (--output saves them)")
    p.add_argument("--tokenizer", metavar="tokenizer.json", help="tokenizer file (HF tokenizers JSON) for --text and --prompt")
    p.add_argument("--max-length", type=int, default=256, metavar="N",
                   help="truncate --text at N tokens (default 256, sentence-transformers' max_seq_length)")
    p.add_argument("--prompt-ids", metavar="IDS",
                   help="generate from these token ids (comma-separated; ';' separates the rows of a batch) "
                        "with the recipe's prefill / decode functions")
    p.add_argument("--max-new-tokens", type=int, default=20, metavar="N", help="tokens to generate (default 20)")
    p.add_argument("--save-exe", metavar="DIR",
                   help="write the compiled model as one artifact folder (executable, converted parameters, "
                        "resolved recipe, --tokenizer, manifest) that runtime.load_artifact(DIR) runs alone")
    p.add_argument("--quiet", "-q", action="store_true",
                   help="print only errors and what was asked for (generated ids, embeddings, --bench, --print-after)")
    p.add_argument("--json", action="store_true",
                   help="print the summary as one JSON object (functions, shapes, parameters, quantization, "
                        "timings, results) and nothing else on stdout")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    p.add_argument("--list-ops", action="store_true", help="list the ops a recipe's forward may call and exit")
    p.add_argument("--schema", action="store_true", help="print the JSON Schema of recipes (for editors) and exit")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    add_prompt_arguments(p)
    add_serve_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``build`` console script; returns the exit code."""
    for stream in (sys.stdout, sys.stderr):   # user text (paths, names) may not be valid Unicode
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    standalone = {"-h", "--help", "--list-ops", "--schema", "--version"}
    if not any(not a.startswith("-") for a in argv) and not standalone & set(argv):
        parser.error("the following argument is required: recipe (build RECIPE.yaml [KEY=VALUE ...])")
    args = parser.parse_intermixed_args(_with_bench_count(argv))
    if args.version:
        print(f"build (model-builder) {_version()}")
        return 0
    if args.quiet and args.json:
        parser.error("--quiet and --json: give one of them (--json prints only the JSON summary)")
    try:
        return _run(args)
    except Exception as exc:  # noqa: BLE001 - the CLI turns every failure into one message
        if args.debug:
            raise
        from schemas import RecipeError

        err = make_console(stderr=True)
        rank = worker_prefix()
        if isinstance(exc, RecipeError):
            err.print(f"{rank}[bold red]error:[/] recipe has {len(exc.issues)} problem(s):", markup=True)
            for issue in exc.issues:
                err.print(str(issue), markup=False)
            return _end_workers(2)
        err.print(f"{rank}[bold red]error:[/] {type(exc).__name__}: ", markup=True, end="")
        err.print(printable_lines(str(exc)), markup=False)
        return _end_workers(1)


def _version() -> str:
    """The installed package's version (``pyproject.toml``'s), or ``"unknown"`` outside an install."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("model-builder")
    except PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


def _end_workers(code: int) -> int:
    """``code``; in a tensor-parallel run, first end every other rank (``WorkerGroup.abort``): they would
    otherwise wait for this one in their next collective until its timeout."""
    from runtime.distributed import current_group

    group = current_group()
    if group is not None and group.size > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        group.abort(code)
    return code


def _run(args: argparse.Namespace) -> int:
    if args.list_ops or args.schema:
        return _standalone(args)
    if args.recipe is None:
        raise ValueError("a recipe is required (build RECIPE.yaml [KEY=VALUE ...])")
    progress = ConversionProgressDisplay(silent=args.quiet or args.json)
    try:
        return _run_with(args, progress)
    finally:
        progress.close()


def _run_with(args: argparse.Namespace, progress: "ConversionProgressDisplay") -> int:
    import numpy as np
    from rich.markup import escape
    from schemas.errors import printable

    from .build_model import MODEL_FILE_SUFFIXES, build, build_model_file
    from .summary import function_table, kernel_notes, model_summary, module_tree, param_table

    from runtime.distributed import launcher_rank

    # one report for a tensor-parallel run: rank 0 prints, the other ranks compute silently (errors still show)
    other_rank = launcher_rank() not in (None, 0)
    color = use_color(sys.stdout)
    out = make_console(quiet=other_rank or args.quiet or args.json, color=color)    # the report
    asked = make_console(quiet=other_rank or args.json, color=color)                # what a flag asked for
    plain = args.plain or not color
    if args.input is None and args.text is None and args.output is not None:
        raise ValueError("--output needs --input (the arrays to run the function on) or --text")
    if os.path.isdir(args.recipe):    # a Hugging Face checkpoint folder: its family's recipe (docs/models.md)
        from .checkpoint import resolve_checkpoint

        hf = resolve_checkpoint(args.recipe, args.overrides)
        args.checkpoint = f"{args.recipe} ({hf.family} family, {hf.recipe.name})"
        args.recipe, args.overrides = str(hf.recipe), hf.overrides
        args.weights = args.weights or str(hf.weights)
        if args.tokenizer is None and hf.tokenizer is not None:
            args.tokenizer = str(hf.tokenizer)
    for flag, path in (("--input", args.input), ("--weights", args.weights)):
        if path is not None:
            _check_input_file(flag, path)
    for flag, path in (("--output", args.output), ("--save-params", args.save_params)):
        if path is not None:    # refused before the build, not after it (runtime.files.atomic_write's rules)
            from runtime.files import NotRegularFileError, check_writable

            try:
                check_writable(path)
            except NotRegularFileError as exc:
                raise NotRegularFileError(f"{flag} {exc}") from None
    if args.save_exe is not None and os.path.exists(args.save_exe) and not os.path.isdir(args.save_exe):
        raise ValueError(f"--save-exe {args.save_exe}: exists and is not a directory (the artifact is a folder)")
    if args.recipe.lower().endswith((".pt2", ".pt", ".pth")):
        raise ValueError(f"{args.recipe}: PyTorch files are not loaded (torch's loaders may unpickle, which runs code "
                         "the file's author chose); export to ONNX, or import the model from Python with "
                         "builder.frontend.from_exported_program(torch.export.export(...))")
    if (args.print_recipe or args.validate) and args.recipe.lower().endswith(".onnx"):
        raise ValueError("--print-recipe and --validate are for recipes; build imports a model file directly")
    if args.print_recipe or args.validate:
        return _check_only(args, asked)
    if args.text is not None and args.tokenizer is None:
        raise ValueError("--text needs --tokenizer tokenizer.json (the recipe's tokenizer)")
    if args.tokenizer is not None:
        _check_input_file("--tokenizer", args.tokenizer)
    check_prompt_arguments(args)
    check_serve_arguments(args)
    prompt = _parse_prompt_ids(args.prompt_ids) if args.prompt_ids is not None else None
    if args.text is not None and (args.input is not None or prompt is not None):
        raise ValueError("--text, --input and --prompt-ids each run the model; give one of them")
    instruments, timing = _pass_instruments(args, asked, plain)
    building = BuildProgressDisplay(silent=args.quiet or args.json)
    show_ir = None if args.no_ir or out.quiet else (lambda mod: mod.show(plain=plain))
    model_file = args.recipe.lower().endswith(MODEL_FILE_SUFFIXES)
    try:
        if model_file:
            keys = ("quantization", "matmul_precision")
            given = [o.partition("=") for o in args.overrides]
            quant = [v for k, _, v in given if k == "quantization"]
            prec = [v for k, _, v in given if k == "matmul_precision"]
            if any(k not in keys for k, _, _ in given) or len(quant) > 1 or len(prec) > 1 or args.weights \
                    or args.text is not None or prompt is not None or args.save_params:
                raise ValueError("a model file takes no KEY=VALUE overrides but one quantization=PRESET and one "
                                 "matmul_precision=highest|high|medium, no --weights, --text, --prompt-ids or "
                                 "--save-params (its weights are inside it)")
            model = build_model_file(args.recipe, on_ir=show_ir, instruments=instruments, build_progress=building,
                                     quantization=quant[0] if quant else None,
                                     matmul_precision=prec[0] if prec else "highest")
        else:
            model = build(args.recipe, args.overrides, weights=args.weights, seed=args.seed, on_ir=show_ir,
                          progress=progress, instruments=instruments, build_progress=building,
                          check_inputs=_prompt_check(prompt), tokenizer=args.tokenizer)
    finally:
        building.close()
    recipe, spec, exe = model.recipe, model.spec, model.exe
    result_note = ""
    results: dict = {}
    if args.input is not None:
        fname = args.function or model.functions[0]
        if fname not in model.spec:
            raise ValueError(f"--function {fname}: the recipe exports {model.functions}")
        arrays = _load_inputs(args.input)
        names = list(model.spec[fname])
        missing = [n for n in names if n not in arrays]
        if missing:
            raise ValueError(f"{args.input}: missing input(s) {missing} for {fname}({', '.join(names)}); "
                             f"the file has {sorted(arrays)}")
        _ = (model.params, model.vm)   # weights drawn / converted and code loaded before the clock starts
        t2 = time.perf_counter()
        result = model[fname](*[arrays[n] for n in names])
        t_run = time.perf_counter() - t2
        outputs = _flatten(result)
        if args.output is not None and not other_rank:     # one file per run: rank 0 writes it
            from runtime.files import atomic_write

            keys = ["output"] if len(outputs) == 1 else [f"output{i}" for i in range(len(outputs))]
            # an open file, so that numpy writes exactly this name (given a name, it appends .npz)
            atomic_write(args.output, lambda fh: np.savez(fh, **dict(zip(keys, outputs))))
        shapes = ", ".join(f"{tuple(o.shape)} {o.dtype}" for o in outputs)
        result_note = f"ran {fname} in {t_run * 1e3:.2f} ms -> {shapes}" + (
            f", written to {args.output}" if args.output else "")
        results["run"] = {"function": fname, "ms": t_run * 1e3, "output": args.output,
                          "outputs": [{"shape": list(o.shape), "dtype": str(o.dtype)} for o in outputs]}

    out.print(function_table(recipe.name, spec, model.ir))
    if model.module is not None:
        out.print(module_tree(model.module, recipe.name))
    if model.param_specs:
        out.print(param_table(model.param_specs))
    if args.save_params is not None:
        model.save_params(args.save_params)
    if args.save_exe is not None and not other_rank:
        model.save_artifact(args.save_exe, tokenizer=args.tokenizer)
    progress.close()
    source = args.weights or (recipe.weights.path if recipe.weights and recipe.weights.path else None)
    origin = "from " + str(source) if source else f"random, seed {args.seed}"
    if not model.param_specs and model_file:
        origin = "the weights are constants inside the imported module"
    if model.transformed:
        before, after = model.source_param_bytes, model.param_bytes
        ratio = f", {before / after:.2f}x smaller" if after and before > after else ""
        origin += f"; {_bytes(before)} before {model.quantization}{ratio}"
    if model.group is not None:
        origin += f"; rank {model.rank}'s shards of {model.recipe.tensor_parallel_shards}"
    out.print(f"parameters: {len(model.param_specs)} tensors, {model.num_params:,} elements, "
              f"{_bytes(model.param_bytes)} ({escape(printable(origin))})")
    if args.save_params is not None:
        out.print(f"saved parameters to {escape(printable(args.save_params))}")
    if args.save_exe is not None:
        out.print(f"saved the artifact to {escape(printable(args.save_exe))} (runtime.load_artifact loads it)")
    out.print(f"compile: export {model.timings['export'] * 1e3:.1f} ms, "
              f"native code {model.timings['compile'] * 1e3:.1f} ms "
              f"({len(exe.kernels)} kernels for {exe.target.get('cpu', 'host')}: {_kernel_kinds(exe)}; "
              f"{_distinct(exe)})")
    for note in kernel_notes(exe.kernels):   # the kernels' fallbacks (no AMX at matmul_precision=high, ...)
        out.print(escape(printable(note)))
    if timing is not None:
        asked.print("passes: " + ", ".join(f"{name} {sec * 1e3:.1f} ms" for name, sec in timing.timings.items()))
    if result_note:
        out.print(escape(printable_lines(result_note)))
    if args.text is not None:
        results["embed"] = _embed_texts(args, model, asked)
    if prompt is not None:
        results["generate"] = _generate(args, model, prompt, asked)
    if args.prompt is not None:
        results["complete"] = complete_prompt(args, model, not (other_rank or args.json), out)
    if args.chat:
        results["chat"] = chat_loop(args, model, asked)
    if args.serve:
        serve_model(args, model, out)
    if args.bench is not None:
        bench = _bench(model, args.function or model.functions[0], args.bench, args.bench_dim)
        asked.print(escape(printable_lines(bench["line"])))
        results["bench"] = {k: v for k, v in bench.items() if k != "line"}
    if args.json and not other_rank:
        import json

        data = model_summary(model, origin=origin, kinds=_kernel_kinds(exe), version=_version())
        data.update(results)
        if timing is not None:
            data["passes_ms"] = {name: sec * 1e3 for name, sec in timing.timings.items()}
        data["saved"] = {"params": args.save_params, "artifact": args.save_exe}
        sys.stdout.write(json.dumps(data, default=str) + "\n")
        sys.stdout.flush()
    return 0


def _prompt_check(prompt):
    """``check_inputs`` of :func:`builder.build_model.build` for ``--prompt-ids``: refuse ids past the
    vocabulary of the Embedding that ``prefill``'s ``input_ids`` feed, before anything is compiled
    (:func:`builder.build_model.check_token_ids`); None without a prompt."""
    if prompt is None:
        return None

    def check(irmod, params) -> None:
        from .build_model import check_token_ids

        check_token_ids(irmod, params, "prefill", "input_ids", prompt, "--prompt-ids")

    return check


def _parse_prompt_ids(text: str):
    """``"1,2,3"`` -> int64 array (1, 3); ``"1,2;3,4"`` -> (2, 2). Raises ValueError for anything else
    (rows of different lengths, non-integers, an empty prompt)."""
    import numpy as np

    rows = [r.strip() for r in text.split(";")]
    try:
        ids = [[int(t) for t in r.split(",")] for r in rows]
    except ValueError:
        raise ValueError(f"--prompt-ids expects comma-separated integers (';' between rows), got {text[:80]!r}") from None
    if not ids or any(len(r) != len(ids[0]) for r in ids) or not ids[0]:
        raise ValueError("--prompt-ids: every row needs the same number (>= 1) of ids")
    if any(not 0 <= i < 2 ** 63 for r in ids for i in r):
        raise ValueError("--prompt-ids: ids must be non-negative int64 values")
    return np.array(ids, dtype=np.int64)


def _embed_texts(args: argparse.Namespace, model, out) -> dict:
    """``--text``: tokenize as sentence-transformers does, run ``embed``, print the embeddings (first
    values) and the cosine similarities; ``--output`` saves ``embeddings`` (and the token arrays). Returns
    them as data for ``--json`` (``embeddings``: lists of floats, ``similarities``, ``ms``)."""
    import numpy as np
    from rich.markup import escape

    from runtime.distributed import launcher_rank

    from .text import cosine_similarities, format_similarities

    if "embed" not in model.spec:
        raise ValueError(f"--text runs the recipe's 'embed' function; the recipe exports {model.functions}")
    model.tokenizer = args.tokenizer
    t0 = time.perf_counter()
    emb, tokens = model.embed_texts(args.text, max_length=args.max_length)
    ms = (time.perf_counter() - t0) * 1e3
    out.print(f"embed: {len(args.text)} text(s), {tokens['input_ids'].shape[1]} tokens, {ms:.1f} ms -> "
              f"{tuple(emb.shape)} {emb.dtype}")
    for i, (text, row) in enumerate(zip(args.text, emb)):
        head = ", ".join(f"{v:+.4f}" for v in row[:6])
        out.print(escape(printable_lines(f"[{i}] {text[:60]!r}: [{head}, ...] |e| = {np.linalg.norm(row):.4f}")))
    sims = cosine_similarities(emb) if len(args.text) > 1 else None
    if sims is not None:
        out.print("cosine similarities:")
        out.print(escape(printable_lines(format_similarities(sims, args.text))))
    if args.output is not None and launcher_rank() in (None, 0):
        from runtime.files import atomic_write

        atomic_write(args.output, lambda fh: np.savez(fh, embeddings=emb, **tokens))
        out.print(escape(printable_lines(f"embeddings written to {args.output}")))
    return {"texts": len(args.text), "tokens": int(tokens["input_ids"].shape[1]), "ms": ms,
            "embeddings": emb.astype(np.float64).tolist(),
            "similarities": None if sims is None else np.asarray(sims, dtype=np.float64).tolist()}


def _generate(args: argparse.Namespace, model, prompt, out) -> dict:
    """``--prompt-ids``: greedy generation over a KV cache; prints the new ids, one row per prompt, and
    returns them as data for ``--json``."""
    t0 = time.perf_counter()
    ids = model.generate(prompt, args.max_new_tokens)
    sec = time.perf_counter() - t0
    for row in ids:
        out.print(",".join(str(int(i)) for i in row))
    out.print(f"generated {ids.shape[1]} token(s) x {ids.shape[0]} in {sec * 1e3:.1f} ms "
              f"({ids.size / sec:.1f} tokens/s)")
    return {"ids": ids.tolist(), "ms": sec * 1e3, "tokens_per_s": ids.size / sec}


def _standalone(args: argparse.Namespace) -> int:
    """``--list-ops`` (the ops recipes may call: a table on a terminal, one plain line per op when piped)
    and ``--schema`` (the JSON Schema of recipes)."""
    if args.list_ops:
        rows = _ops_rows()
        if use_color(sys.stdout, launched=False) and not args.plain:
            from rich.table import Table
            from rich.text import Text

            table = Table(title="ops callable from forward:", show_header=True, header_style="bold")
            for column in ("op", "signature", "does"):
                table.add_column(column)
            for row in rows:
                table.add_row(*(Text(cell) for cell in row))
            make_console(color=True).print(table)
        else:       # no box drawing, no wrap at 80 columns: one line per op for grep / less / scripts
            sys.stdout.write("".join(f"{name}{sig}  {doc}\n" for name, sig, doc in rows))
    if args.schema:
        import json

        from schemas.json_schema import recipe_json_schema

        sys.stdout.write(json.dumps(recipe_json_schema(), indent=2) + "\n")
    return 0


def _cache_dir():
    """The object cache's folder, as :func:`builder.codegen.cache.cache_dir` finds it (that module imports
    LLVM; ``tests/pipeline/test_cli_output.py`` checks the two agree)."""
    from pathlib import Path

    env = os.environ.get("MB_CACHE_DIR", "").strip()
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "model-builder" / "objects"


def _ops_rows() -> list[tuple[str, str, str]]:
    """``(name, signature, does)`` of every op a recipe's ``forward:`` may call
    (:func:`builder.summary.ops_rows`), kept in the object cache's folder (``list-ops-<key>.json``; not
    with ``MB_CACHE=0``) under a key of the names, sizes and modification times of ``builder``'s source
    files: finding them takes importing the whole op library (seconds), reading them back a few
    milliseconds, so ``build --list-ops`` starts as fast as ``--help``. A cached file that is unreadable,
    oversized or not a list of three printable strings per op is ignored and rewritten."""
    import hashlib
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parent
    key = hashlib.sha256()
    for folder, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                st = os.stat(os.path.join(folder, name))
                key.update(f"{os.path.relpath(folder, root)}/{name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    use_cache = os.environ.get("MB_CACHE", "1").strip() != "0"
    path = _cache_dir() / f"list-ops-{key.hexdigest()[:32]}.json"
    if use_cache:
        try:
            with open(path, "rb") as fh:
                rows = json.loads(fh.read(1 << 22))
            if isinstance(rows, list) and rows and all(
                    isinstance(r, list) and len(r) == 3 and all(isinstance(c, str) and c.isprintable() for c in r)
                    for r in rows):
                return [tuple(r) for r in rows]
        except (OSError, ValueError, RecursionError):
            pass
    from .recipe import FORWARD_OPS
    from .summary import ops_rows

    rows = ops_rows(FORWARD_OPS)
    if use_cache:
        try:
            from runtime.files import atomic_write

            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, json.dumps(rows).encode())
        except (OSError, ValueError):      # a cache that cannot be written is not an error
            pass
    return rows


def _check_only(args: argparse.Namespace, out) -> int:
    """``--print-recipe`` (the resolved recipe as YAML) and ``--validate`` (everything but code
    generation); errors propagate as in a build."""
    from rich.markup import escape
    from schemas import dump_recipe, load_recipe

    from .build_model import validate

    if args.print_recipe:
        out.print(dump_recipe(load_recipe(args.recipe, args.overrides)), markup=False, highlight=False, end="")
        return 0
    for flag, path in (("--weights", args.weights),):
        if path is not None:
            _check_input_file(flag, path)
    report = validate(args.recipe, args.overrides, weights=args.weights)
    functions = ", ".join(f"{name}({', '.join(inputs)})" for name, inputs in report.spec.items())
    weights = "weights file checked" if report.weights_checked else "no weights file (random weights)"
    out.print(escape(printable_lines(f"{getattr(args, 'checkpoint', args.recipe)}: valid; functions {functions}; {len(report.param_specs)} "
                                f"parameters; {weights}")))
    return 0


def _pass_instruments(args: argparse.Namespace, out, plain: bool | None) -> tuple[list, object]:
    """The pass instruments the flags ask for: ``PrintAfter`` for ``--print-after`` (ValueError naming
    the valid passes for an unknown name, before anything is built) and ``PassTiming`` for
    ``--time-passes`` (returned second, else None)."""
    from .transform import PASS_NAMES, PassTiming, PrintAfter

    unknown = [n for n in args.print_after if n not in PASS_NAMES]
    if unknown:
        raise ValueError(f"--print-after {unknown[0]}: no such pass; the passes are {', '.join(PASS_NAMES)}")

    def show(mod, name: str) -> None:
        if out.quiet:       # --json, or a rank other than 0
            return
        out.print(f"# IR after {name}", style="bold", markup=False)
        mod.show(plain=plain)

    instruments: list = [PrintAfter(args.print_after, show)] if args.print_after else []
    timing = PassTiming() if args.time_passes else None
    return instruments + ([timing] if timing else []), timing


def _check_input_file(flag: str, path: str) -> None:
    """Raise FileNotFoundError when ``path`` does not exist, ValueError when it is not a regular file
    (a directory, a FIFO, a device such as /dev/null), naming the flag."""
    import os
    import stat

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise FileNotFoundError(f"{flag} file {path} does not exist") from None
    if not stat.S_ISREG(mode):
        kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
        raise ValueError(f"{flag} {path} is {kind}, not a regular file")


def _distinct(exe) -> str:
    """``"50 distinct, compiled on 4 threads"`` / ``"cached"``: how much code generation the build did."""
    stats = getattr(exe, "build_stats", None) or {}
    if stats.get("cached"):
        return f"{stats.get('distinct', len(exe.kernels))} distinct, object from the cache"
    return f"{stats.get('distinct', len(exe.kernels))} distinct compiled"


def _kernel_kinds(exe) -> str:
    """How the compiled functions were generated, counted: ``"2 linear/avx2+tiles, 1 loops, 2 weight
    transforms"`` (kernel family / vector unit + special instructions, the generic loop code, or
    the weight transforms the VM runs once, :class:`builder.transform.TileWeights`)."""
    from collections import Counter

    kinds = Counter("weight transform" if meta.get("weight_transform")
                    else str(meta.get("kernel", "loops")).split(" (")[0] for meta in exe.kernels.values())
    return ", ".join(f"{n} {kind}" + ("s" if kind == "weight transform" and n > 1 else "")
                     for kind, n in sorted(kinds.items())) or "nothing to compute"


def _bench(model, fname: str, runs: int, dim_args: list[str]) -> dict:
    """Time ``model[fname]`` on seeded random inputs (symbolic dims from ``dim_args``
    ``NAME=VALUE``, default 1); returns ``{"line": one line with the median, min and max in ms, and those
    as data: "function", "inputs", "median_ms", "min_ms", "max_ms", "runs", "threads"}``."""
    import numpy as np

    from runtime.native import float32_to_bfloat16_bits
    from runtime.threadpool import get_num_threads

    if fname not in model.spec:
        raise ValueError(f"--function {fname}: the recipe exports {model.functions}")
    if runs < 1:
        raise ValueError(f"--bench needs at least 1 run, got {runs}")
    dims: dict[str, int] = {}
    for item in dim_args:
        name, sep, value = item.partition("=")
        if not sep or not value.strip().lstrip("-").isdigit() or int(value) < 0:
            raise ValueError(f"--bench-dim expects NAME=VALUE with VALUE >= 0, got {item!r}")
        dims[name.strip()] = int(value)
    symbolic = {str(d) for s in model.spec[fname].values() for d in getattr(s, "shape", ()) or ()
                if not isinstance(d, int)}
    unknown = sorted(set(dims) - symbolic)
    if unknown:
        raise ValueError(f"--bench-dim {', '.join(unknown)}: not a symbolic dim of {fname}'s inputs "
                         f"({', '.join(sorted(symbolic)) or 'it has none'})")
    shapes = []
    for name, s in model.spec[fname].items():
        shape = getattr(s, "shape", None)
        if shape is None:
            raise ValueError(f"--bench: input {name!r} of {fname} is not a tensor; --bench times functions of "
                             "tensor inputs (for prefill / decode over a KV cache, --prompt-ids reports tokens/s)")
        shapes.append((tuple(d if isinstance(d, int) else dims.get(str(d), 1) for d in shape), s.dtype))
    _check_bench_memory(shapes, fname, dims)
    rng = np.random.default_rng(0)
    inputs = []
    for shape, dtype in shapes:
        if dtype == "bfloat16":
            inputs.append(float32_to_bfloat16_bits(rng.standard_normal(shape, dtype=np.float32)))
        elif np.issubdtype(np.dtype(dtype), np.floating):
            inputs.append(rng.standard_normal(shape, dtype=np.float32).astype(dtype))
        elif dtype == "bool":
            inputs.append(rng.integers(0, 2, shape).astype(bool))
        else:
            inputs.append(rng.integers(0, 2, shape).astype(dtype))
    fn = model[fname]
    for _ in range(3):
        fn(*inputs)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn(*inputs)
        times.append(time.perf_counter() - t0)
    ms = np.array(times) * 1e3
    args_text = ", ".join(f"{n}: {a.shape} {a.dtype}" for n, a in zip(model.spec[fname], inputs))
    line = (f"bench {fname}({args_text}): median {np.median(ms):.3f} ms, min {ms.min():.3f} ms, "
            f"max {ms.max():.3f} ms over {runs} runs after 3 warm-up runs ({get_num_threads()} threads)")
    return {"line": line, "function": fname,
            "inputs": {n: {"shape": list(a.shape), "dtype": str(a.dtype)} for n, a in zip(model.spec[fname], inputs)},
            "median_ms": float(np.median(ms)), "min_ms": float(ms.min()), "max_ms": float(ms.max()), "runs": runs,
            "threads": get_num_threads()}


def _check_bench_memory(shapes: list[tuple[tuple[int, ...], str]], fname: str, dims: dict[str, int]) -> None:
    """Refuse (:class:`runtime.memory.MemoryLimitError`, exit 1) ``--bench`` inputs of these ``(shape, dtype)``
    that need more memory than is available, before any is allocated: the inputs themselves plus the
    largest temporary that makes one (``rng.standard_normal`` in float32 for floats, ``rng.integers``'
    int64 otherwise), exact Python ints whatever the dims (``--bench-dim batch_size=10**9``)."""
    import math

    import numpy as np

    from runtime.memory import check_allocation

    total = temporary = 0
    for shape, dtype in shapes:
        count = math.prod(shape)
        total += count * (2 if dtype == "bfloat16" else np.dtype(dtype).itemsize)
        floating = dtype == "bfloat16" or np.issubdtype(np.dtype(dtype), np.floating)
        temporary = max(temporary, count * (4 if floating else 8))
    given = ", ".join(f"{k}={v:,}" for k, v in dims.items())
    check_allocation(total + temporary, f"the --bench inputs of {fname}" + (f" ({given})" if given else ""))


def _load_inputs(path: str) -> dict:
    """The arrays of the ``.npz`` file ``path`` by name (never unpickling). Raises ValueError
    saying what the file is instead when it is a single ``.npy`` array or not a numpy file."""
    import math
    import zipfile

    import numpy as np

    if not zipfile.is_zipfile(path):
        with open(path, "rb") as fh:
            magic = fh.read(6)
        what = "a single .npy array" if magic == b"\x93NUMPY" else "not a numpy file"
        raise ValueError(f"--input {path}: expected an .npz archive of named arrays "
                         f"(np.savez(path, x=...)), but it is {what}")
    from runtime.memory import check_allocation

    try:
        need = 0
        with zipfile.ZipFile(path) as archive:   # the arrays' declared sizes, before any is read
            for info in archive.infolist():
                with archive.open(info) as fh:
                    version = np.lib.format.read_magic(fh)
                    read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                                   else np.lib.format.read_array_header_2_0)
                    shape, _, dtype = read_header(fh)
                    need += math.prod(shape) * dtype.itemsize
        check_allocation(need, f"the arrays of --input {path}")
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as err:
        raise ValueError(f"--input {path}: cannot read it as an .npz archive of numeric arrays "
                         f"({str(err).splitlines()[0][:120]})") from None


def _flatten(value) -> list:
    if isinstance(value, (tuple, list)):
        out = []
        for v in value:
            out.extend(_flatten(v))
        return out
    return [] if value is None else [value]


def _bytes(n: int) -> str:
    from .summary import format_bytes

    return format_bytes(n)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
