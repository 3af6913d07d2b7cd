"""Launch command lines for serving engines, from a sized option: predict, deploy, measure, recalibrate.

Flag names are the engines' documented ones:

* vLLM ``vllm serve`` engine arguments, https://docs.vllm.ai/en/latest/configuration/engine_args.html
  (``--tensor-parallel-size``, ``--pipeline-parallel-size``, ``--enable-expert-parallel``, ``--max-num-seqs``,
  ``--max-model-len``, ``--kv-cache-dtype``, ``--gpu-memory-utilization``) and speculative decoding with a
  draft model, https://docs.vllm.ai/en/latest/features/spec_decode.html (``--speculative-config`` with
  ``model`` and ``num_speculative_tokens``).
* SGLang ``python -m sglang.launch_server``, https://docs.sglang.io/advanced_features/server_arguments.html
  (``--model-path``, ``--tp-size``, ``--pp-size``, ``--ep-size``, ``--max-running-requests``,
  ``--context-length``, ``--kv-cache-dtype``, ``--mem-fraction-static``) and
  https://docs.sglang.io/advanced_features/speculative_decoding.html (``--speculative-algorithm STANDALONE``,
  ``--speculative-draft-model-path``, ``--speculative-num-steps``, ``--speculative-eagle-topk``,
  ``--speculative-num-draft-tokens``).
* TensorRT-LLM ``trtllm-serve``, https://nvidia.github.io/TensorRT-LLM/commands/trtllm-serve.html
  (``--tp_size``, ``--pp_size``, ``--ep_size``, ``--max_batch_size``, ``--max_seq_len``,
  ``--kv_cache_free_gpu_memory_fraction``, ``--extra_llm_api_options`` for a YAML of LLM-API options: the
  KV-cache dtype and the draft/target speculative config,
  https://nvidia.github.io/TensorRT-LLM/features/speculative-decoding.html). For a model with sliding-window
  layers the YAML also sets ``kv_cache_config.max_attention_window`` per layer ("only the last tokens will be
  stored in the KV cache", KvCacheConfig in tensorrt_llm/llmapi/llm_args.py): without it TensorRT-LLM keeps the
  whole context on every layer and the sized batch would not fit.

Weights sized in FP8 from a 16-bit checkpoint are quantized on load where the engine does that (vLLM's and
SGLang's ``--quantization fp8``, https://docs.vllm.ai/en/latest/features/quantization/fp8.html,
https://docs.sglang.io/advanced_features/quantization.html); any other sized weight format, and FP8 on
TensorRT-LLM (which serves pre-quantized checkpoints), gets a note to serve a checkpoint in that format.

The numbers come from the sizing: parallel sizes from the group, max concurrent sequences = the batch per
replica, max length = input + output tokens, and the draft length = the best gamma. Memory shares are each engine's
own default unless the sized batch needs more: vLLM's ``--gpu-memory-utilization`` defaults to 0.9 of the GPU
(https://docs.vllm.ai/en/latest/configuration/engine_args.html), TensorRT-LLM's ``--kv_cache_free_gpu_memory_fraction``
to 0.9 of the memory left after the weights (https://nvidia.github.io/TensorRT-LLM/commands/trtllm-serve.html), and
SGLang computes ``--mem-fraction-static`` per GPU, leaving at least 10 GiB on GPUs over 60 GiB and 6 GiB more for a
STANDALONE draft (``_handle_gpu_memory_settings`` in
https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/server_args.py); where the batch needs more than
that, the flag says how much. One command per replica; run ``replicas`` of them behind a router.

The model is named by the checkpoint people serve (a preset's ``_served_checkpoint``, its -Instruct or chat repo),
else its Hugging Face repository, else the folder of the config.json it was read from; where none is known the
command reads ``$MODEL_DIR`` (``$DRAFT_DIR`` for the draft), which the shell refuses to run without.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from ..errors import WorkloadError
from ..physics.memory import stored_weight_bytes
from ..physics.speculative import Acceptance
from ..physics.stages import setup
from ..specs.execution import resolve_profile
from ..specs.models import ModelSpec
from ..specs.params import EngineParams, default_params, with_stack_settings
from .serve import Request, check_context, evaluate_serving

ENGINES = ("vllm", "sglang", "trtllm")
#: Device vendors each engine runs on (vLLM also has TPU, Gaudi and Neuron back-ends, not emitted here).
ENGINE_VENDORS = {"vllm": ("NVIDIA", "AMD"), "sglang": ("NVIDIA", "AMD"), "trtllm": ("NVIDIA",)}
#: Weight formats the checkpoint of a preset can be served in as is (its own 16-bit dtype).
NATIVE_WEIGHTS = ("bf16", "fp16", "auto")
#: Weight formats each engine quantizes a 16-bit checkpoint to on load -> its flag value.
ONLINE_QUANTIZATION = {"vllm": {"fp8": "fp8"}, "sglang": {"fp8": "fp8"}, "trtllm": {}}
#: Our KV-cache format -> each engine's KV dtype value (None: the engine default, the model's dtype).
KV_DTYPES: dict[str, dict[str, str | None]] = {
    "vllm": {"bf16": "auto", "fp16": "auto", "fp8": "fp8"},
    "sglang": {"bf16": "auto", "fp16": "auto", "fp8": "fp8_e4m3"},
    "trtllm": {"bf16": None, "fp16": None, "fp8": "fp8"}}
_HF = re.compile(r"https?://huggingface\.co/([^/\s]+/[^/\s]+)")
#: Each engine's default memory share: vLLM's --gpu-memory-utilization and TensorRT-LLM's
#: --kv_cache_free_gpu_memory_fraction (of the memory the weights leave); SGLang computes its own (see above).
DEFAULT_MEMORY_FRACTION = {"vllm": 0.9, "trtllm": 0.9}
#: What SGLang's default --mem-fraction-static leaves free at least on a GPU over 60 GiB, and more with a
#: STANDALONE draft (binary GiB, as its server_args.py counts MiB).
SGLANG_RESERVE_BYTES, SGLANG_DRAFT_RESERVE_BYTES = 10 * 2**30, 6 * 2**30
#: The variables a command reads where roofline knows no checkpoint to name (target, draft).
PLACEHOLDERS = ("MODEL_DIR", "DRAFT_DIR")
_PLACEHOLDER = re.compile(r"\$(" + "|".join(PLACEHOLDERS) + r")\b")


@attrs.frozen(kw_only=True)
class LaunchCommand:
    """An engine's launch command: argv, files it reads (name -> text) and notes on what it leaves out."""

    engine: str
    argv: tuple[str, ...]
    files: Mapping[str, str] = attrs.field(factory=dict)
    notes: tuple[str, ...] = ()
    #: variable -> what to set it to, for each ``$VARIABLE`` placeholder in argv or files (see PLACEHOLDERS)
    placeholders: Mapping[str, str] = attrs.field(factory=dict)

    @property
    def text(self) -> str:
        """A shell snippet: each file written with a here-document, then the command; a placeholder becomes
        ``${VAR:?...}``, which stops the shell with what to set while the variable is unset (checked first, as a
        failed expansion in a here-document would not stop a script)."""
        parts = [f': "{_required(var, what)}"' for var, what in self.placeholders.items()]
        parts += [_here_document(name, body, self.placeholders) for name, body in self.files.items()]
        lines: list[list[str]] = [[]]
        for word in self.argv:     # one flag (and its value) per line, continued with a backslash
            if word.startswith("--") and lines[-1]:
                lines.append([])
            lines[-1].append(_shell_word(word, self.placeholders))
        return "\n".join(parts + [" \\\n  ".join(" ".join(line) for line in lines)])


def _required(var: str, what: str) -> str:
    """``${VAR:?message}``: the variable, or the shell stops with the message (quote-safe)."""
    return f"${{{var}:?set {var} to {re.sub(r'[^A-Za-z0-9 ._,/@+-]', '', what)}}}"


def _shell_word(word: str, placeholders: Mapping[str, str]) -> str:
    """One argv word quoted for the shell, its placeholders expanded (and required) by the shell."""
    parts = _PLACEHOLDER.split(word) if placeholders else [word]
    out = [f'"{_required(p, placeholders[p])}"' if i % 2 else shlex.quote(p) for i, p in enumerate(parts)
           if i % 2 or p]
    return "".join(out) or "''"


def _here_document(name: str, body: str, placeholders: Mapping[str, str]) -> str:
    """``cat > name`` of ``body``: quoted (nothing expanded) unless it holds a placeholder to expand."""
    if not (placeholders and _PLACEHOLDER.search(body)):
        return f"cat > {shlex.quote(name)} <<'EOF'\n{body}EOF"
    parts = _PLACEHOLDER.split(body)
    text = "".join(_required(p, placeholders[p]) if i % 2 else re.sub(r"([\\$`])", r"\\\1", p)
                   for i, p in enumerate(parts))
    return f"cat > {shlex.quote(name)} <<EOF\n{text}EOF"


def hf_repo(model: ModelSpec) -> str | None:
    """The Hugging Face repository id from the model's source URL (None for invented or local models)."""
    m = _HF.match(model.source or "")
    return m.group(1) if m else None


def checkpoint_folder(model: ModelSpec) -> str | None:
    """The folder of the config.json a model was read from (a checkpoint's own folder), as an absolute path;
    None for a preset, a config dict or a config file not named config.json (no checkpoint beside it)."""
    source = model.source or ""
    if not source or "://" in source or source.startswith("<"):
        return None
    path = Path(source)
    folder = path if path.is_dir() else path.parent if path.name == "config.json" else None
    return os.path.abspath(folder) if folder is not None else None


def _model_ref(model: ModelSpec, var: str, notes: list[str], placeholders: dict[str, str]) -> str:
    """The checkpoint to serve: the one people serve, else the Hugging Face repository, else the config's
    folder, else the ``$var`` placeholder the shell refuses to run without."""
    ref = model.served_checkpoint or hf_repo(model) or checkpoint_folder(model)
    if ref is not None:
        return ref
    placeholders[var] = f"the checkpoint folder of {model.id}"
    notes.append(f"{model.id} names no Hugging Face repository or checkpoint folder: set {var} to its checkpoint "
                 "before running the command (the shell stops until it is set)")
    return f"${var}"


def _needed_fraction(model: ModelSpec, option: Any, request: Request, formats: Mapping[str, Any],
                     params: EngineParams | None) -> float:
    """The smallest share of each decode device's memory that holds the sized batch (weights, KV, workspace and
    the draft's), by bisection on the usable memory fraction the sizing used (at most it)."""
    p = option.placement_record
    base = resolve_profile(p.decode.device, params if params is not None else default_params())
    acc = Acceptance.geometric(0.5) if p.speculative else None   # memory does not depend on the acceptance

    def fits(u: float) -> bool:
        r = evaluate_serving(model, p, request, batch=np.array([float(option.batch_per_replica)]),
                             gamma=option.gamma if p.speculative else 0, acceptance=acc, target_formats=formats,
                             params=attrs.evolve(base, usable_memory_fraction=u))
        return bool(np.all(r.fits_memory))
    low, high = 0.0, base.usable_memory_fraction
    for _ in range(10):   # to 0.1% of the usable share
        mid = (low + high) / 2
        low, high = (low, mid) if fits(mid) else (mid, high)
    return high


def _memory_fraction(engine: str, model: ModelSpec, option: Any, request: Request, formats: Mapping[str, Any],
                     params: EngineParams | None) -> float | None:
    """The engine's memory-share flag value where its default would not hold the sized batch, else None (the
    flag is left out: the engine's own default)."""
    group = option.placement_record.decode
    capacity = float(group.device.memory[0].capacity_bytes or 0)
    need = _needed_fraction(model, option, request, formats, params)
    if engine == "sglang":
        reserve = SGLANG_RESERVE_BYTES + SGLANG_DRAFT_RESERVE_BYTES * option.placement_record.speculative
        default = 1.0 - reserve / capacity if capacity else 0.0
    elif engine == "trtllm":   # a share of what the weights leave, with TensorRT-LLM checkpoints' LM head
        s = setup(model, group, tp=None, ep=None, params=None, **{"experts": None, **formats})
        trt = with_stack_settings(resolve_profile(group.device), "TensorRT-LLM")
        weights = stored_weight_bytes(s.model, s.formats.with_toolchain_head(trt.head_format)) / group.count
        need = (need * capacity - weights) / max(capacity - weights, 1.0)
        default = DEFAULT_MEMORY_FRACTION[engine]
    else:
        default = DEFAULT_MEMORY_FRACTION[engine]
    return None if need <= default else min(math.ceil(need * 100) / 100, 0.99)


def _attention_windows(model: ModelSpec, length: int) -> list[int] | None:
    """Per-layer attention windows of a model with sliding-window layers (the window, else the whole length)."""
    if not model.num_sliding_layers:
        return None
    window = int(model.sliding_window or length)
    return [min(window, length) if kind == "sliding" else length for kind in model.layer_types]


def _weight_quantization(engine: str, model: ModelSpec, weights: str, notes: list[str]) -> str | None:
    """The engine's on-load quantization flag value for the sized weight format (None: none needed or none
    exists, with a note saying which checkpoint to serve instead)."""
    if weights in NATIVE_WEIGHTS:
        return None
    online = ONLINE_QUANTIZATION[engine].get(weights)
    if online is not None and not model.checkpoint_expert_format:
        return online
    experts = f", whose experts are {model.checkpoint_expert_format}" if model.checkpoint_expert_format else ""
    notes.append(f"sized with {weights} weights: serve a checkpoint quantized to {weights} (the command names "
                 f"{model.id}'s own checkpoint{experts})")
    return None


def launch_command(engine: str, model: ModelSpec, option: Any, *, request: Request,
                   formats: Mapping[str, Any] | None = None, params: EngineParams | None = None) -> LaunchCommand:
    """The ``engine`` command line that runs one replica of a feasible sizing ``option`` (``params``: the engine
    parameters it was sized with, for the memory it needs)."""
    if engine not in ENGINES:
        raise WorkloadError(f"unknown engine {engine!r} (known: {', '.join(ENGINES)})")
    p = option.placement_record
    if p is None or not option.feasible:
        raise WorkloadError(f"{option.device} {option.placement}: no feasible option to launch")
    vendor = p.decode.device.vendor
    if vendor not in ENGINE_VENDORS[engine]:
        raise WorkloadError(f"{engine} does not run on {option.device} ({vendor}); it runs on "
                            f"{' and '.join(ENGINE_VENDORS[engine])} GPUs")
    check_context(model, request)   # the engine would refuse to start
    fmt: dict[str, Any] = dict(formats or option.formats)
    notes: list[str] = []
    placeholders: dict[str, str] = {}
    kv = KV_DTYPES[engine].get(fmt.get("kv", "bf16"), "unsupported")
    if kv == "unsupported":
        raise WorkloadError(f"{engine}: no KV-cache dtype for the {fmt.get('kv')} format")
    spec = ({"model": _model_ref(p.draft_model, "DRAFT_DIR", notes, placeholders), "gamma": option.gamma}
            if p.speculative else None)
    quantization = _weight_quantization(engine, model, str(fmt.get("weights") or "bf16"), notes)
    experts = fmt.get("experts")
    if model.checkpoint_expert_format and experts and experts != model.checkpoint_expert_format:
        notes.append(f"sized with {experts} experts: serve a checkpoint whose experts are {experts} (the command "
                     f"names {model.id}'s own checkpoint, whose experts are {model.checkpoint_expert_format})")
    length = request.input_tokens + request.output_tokens
    args = {"model": _model_ref(model, "MODEL_DIR", notes, placeholders), "quantization": quantization,
            "tp": p.decode.tp, "pp": p.decode.pp, "ep": p.decode.ep, "batch": option.batch_per_replica, "kv": kv,
            "length": length, "memory": _memory_fraction(engine, model, option, request, fmt, params), "spec": spec,
            "windows": _attention_windows(model, length),
            "yaml": f"roofline-trtllm-{re.sub(r'[^A-Za-z0-9._-]+', '-', option.group)}-{option.placement}.yaml"}
    if args["memory"] is not None:
        notes.append(f"the sized batch needs more memory than {engine}'s default share leaves, so the command sets "
                     f"{args['memory']:g}; lower the batch if the engine runs out of memory at start-up")
    if p.prefill is not None:
        notes.append(f"disaggregated: the deployment runs {option.prefill_groups} prefill instance(s) of the same "
                     f"command, on {option.group} each, with the engine's KV-transfer settings (the prefill/decode "
                     "wiring is not emitted)")
    argv, files = _BUILDERS[engine](args)
    return LaunchCommand(engine=engine, argv=tuple(argv), files=files, notes=tuple(notes), placeholders=placeholders)


def _vllm(a: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    argv = ["vllm", "serve", a["model"], "--tensor-parallel-size", str(a["tp"]),
            "--pipeline-parallel-size", str(a["pp"])]
    argv += ["--enable-expert-parallel"] if a["ep"] > 1 else []
    argv += ["--quantization", a["quantization"]] if a["quantization"] else []
    argv += ["--max-num-seqs", str(a["batch"]), "--max-model-len", str(a["length"]), "--kv-cache-dtype", a["kv"]]
    argv += ["--gpu-memory-utilization", str(a["memory"])] if a["memory"] is not None else []
    if a["spec"]:
        argv += ["--speculative-config", json.dumps({"method": "draft_model", "model": a["spec"]["model"],
                                                     "num_speculative_tokens": a["spec"]["gamma"]})]
    return argv, {}


def _sglang(a: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    argv = ["python", "-m", "sglang.launch_server", "--model-path", a["model"], "--tp-size", str(a["tp"]),
            "--pp-size", str(a["pp"])]
    argv += ["--ep-size", str(a["ep"])] if a["ep"] > 1 else []
    argv += ["--quantization", a["quantization"]] if a["quantization"] else []
    argv += ["--max-running-requests", str(a["batch"]), "--context-length", str(a["length"]),
             "--kv-cache-dtype", a["kv"]]
    argv += ["--mem-fraction-static", str(a["memory"])] if a["memory"] is not None else []
    if a["spec"]:   # a chain of gamma draft tokens: top-k 1, gamma steps, gamma + 1 tokens verified
        g = a["spec"]["gamma"]
        argv += ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", a["spec"]["model"],
                 "--speculative-num-steps", str(g), "--speculative-eagle-topk", "1",
                 "--speculative-num-draft-tokens", str(g + 1)]
    return argv, {}


def _trtllm(a: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    argv = ["trtllm-serve", a["model"], "--tp_size", str(a["tp"]), "--pp_size", str(a["pp"])]
    argv += ["--ep_size", str(a["ep"])] if a["ep"] > 1 else []
    argv += ["--max_batch_size", str(a["batch"]), "--max_seq_len", str(a["length"])]
    argv += ["--kv_cache_free_gpu_memory_fraction", str(a["memory"])] if a["memory"] is not None else []
    kv_config = ([f"  dtype: {a['kv']}"] if a["kv"] else []) + (
        [f"  max_attention_window: [{', '.join(map(str, a['windows']))}]"] if a["windows"] else [])
    yaml = "kv_cache_config:\n" + "".join(line + "\n" for line in kv_config) if kv_config else ""
    if a["spec"]:
        yaml += (f"speculative_config:\n  decoding_type: DraftTarget\n  max_draft_len: {a['spec']['gamma']}\n"
                 f"  speculative_model: {_yaml_scalar(a['spec']['model'])}\n")
    if not yaml:
        return argv, {}
    return argv + ["--extra_llm_api_options", a["yaml"]], {a["yaml"]: yaml}


def _yaml_scalar(text: str) -> str:
    """``text`` as a YAML scalar: as is where plain (a repository id, a simple path), else JSON-quoted."""
    return text if re.fullmatch(r"[A-Za-z0-9_$./-]+", text) and not text.startswith("-") else json.dumps(text)


_BUILDERS = {"vllm": _vllm, "sglang": _sglang, "trtllm": _trtllm}
