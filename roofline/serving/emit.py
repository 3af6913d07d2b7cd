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
replica, max length = input + output tokens, the memory share = the family's usable memory fraction (for
TensorRT-LLM, the same share expressed as a fraction of the memory left after the weights), and the draft
length = the best gamma. One command per replica; run ``replicas`` of them behind a router.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from typing import Any

import attrs

from ..errors import WorkloadError
from ..physics.memory import stored_weight_bytes
from ..physics.stages import setup
from ..specs.execution import resolve_profile
from ..specs.models import ModelSpec
from ..specs.params import with_stack_settings
from .serve import Request

ENGINES = ("vllm", "sglang", "trtllm")
#: Device vendors each engine runs on (vLLM also has TPU, Gaudi and Neuron back-ends, not emitted here).
ENGINE_VENDORS = {"vllm": ("NVIDIA", "AMD"), "sglang": ("NVIDIA", "AMD"), "trtllm": ("NVIDIA",)}
#: Weight formats the checkpoint of a preset can be served in as is (its own 16-bit dtype).
NATIVE_WEIGHTS = ("bf16", "fp16", "auto")
#: Weight formats each engine quantizes a 16-bit checkpoint to on load -> its flag value.
ONLINE_QUANTIZATION = {"vllm": {"fp8": "fp8"}, "sglang": {"fp8": "fp8"}, "trtllm": {}}
#: Our KV-cache format -> each engine's KV dtype value (None: the engine default, the model's dtype).
KV_DTYPES = {"vllm": {"bf16": "auto", "fp16": "auto", "fp8": "fp8"},
             "sglang": {"bf16": "auto", "fp16": "auto", "fp8": "fp8_e4m3"},
             "trtllm": {"bf16": None, "fp16": None, "fp8": "fp8"}}
_HF = re.compile(r"https?://huggingface\.co/([^/\s]+/[^/\s]+)")


@attrs.frozen(kw_only=True)
class LaunchCommand:
    """An engine's launch command: argv, files it reads (name -> text) and notes on what it leaves out."""

    engine: str
    argv: tuple[str, ...]
    files: Mapping[str, str] = attrs.field(factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """A shell snippet: each file written with a here-document, then the command."""
        parts = [f"cat > {name} <<'EOF'\n{body}EOF" for name, body in self.files.items()]
        lines: list[list[str]] = [[]]
        for word in self.argv:     # one flag (and its value) per line, continued with a backslash
            if word.startswith("--") and lines[-1]:
                lines.append([])
            lines[-1].append(word)
        return "\n".join(parts + [" \\\n  ".join(shlex.join(line) for line in lines)])


def hf_repo(model: ModelSpec) -> str | None:
    """The Hugging Face repository id from the model's source URL (None for invented or local models)."""
    m = _HF.match(model.source or "")
    return m.group(1) if m else None


def _model_ref(model: ModelSpec, notes: list[str]) -> str:
    repo = hf_repo(model)
    if repo is None:
        notes.append(f"{model.id} has no Hugging Face repository in its source; replace the placeholder path")
        return f"/path/to/{model.id}"
    return repo


def _memory_fraction(model: ModelSpec, option: Any, formats: Mapping[str, Any], trtllm: bool) -> float:
    group = option.placement_record.decode
    usable = resolve_profile(group.device).usable_memory_fraction
    if not trtllm:
        return round(usable, 2)
    s = setup(model, group, tp=None, ep=None, params=None, **{"experts": None, **formats})
    capacity = (group.device.memory[0].capacity_bytes or 0) * group.count
    trt = with_stack_settings(resolve_profile(group.device), "TensorRT-LLM")   # its checkpoints' LM head
    weights = stored_weight_bytes(s.model, s.formats.with_toolchain_head(trt.head_format))
    return round(max(0.05, min(0.95, (usable * capacity - weights) / max(capacity - weights, 1.0))), 2)


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
                   formats: Mapping[str, Any] | None = None) -> LaunchCommand:
    """The ``engine`` command line that runs one replica of a feasible sizing ``option``."""
    if engine not in ENGINES:
        raise WorkloadError(f"unknown engine {engine!r} (known: {', '.join(ENGINES)})")
    p = option.placement_record
    if p is None or not option.feasible:
        raise WorkloadError(f"{option.device} {option.placement}: no feasible option to launch")
    vendor = p.decode.device.vendor
    if vendor not in ENGINE_VENDORS[engine]:
        raise WorkloadError(f"{engine} does not run on {option.device} ({vendor}); it runs on "
                            f"{' and '.join(ENGINE_VENDORS[engine])} GPUs")
    length = request.input_tokens + request.output_tokens
    if model.max_context_tokens and length > model.max_context_tokens:   # the engine would refuse to start
        raise WorkloadError(f"{model.id}: a request of {length:,} tokens is beyond its {model.max_context_tokens:,}-"
                            "token context (max_position_embeddings)")
    fmt = dict(formats or option.formats)
    notes: list[str] = []
    kv = KV_DTYPES[engine].get(fmt.get("kv", "bf16"), "unsupported")
    if kv == "unsupported":
        raise WorkloadError(f"{engine}: no KV-cache dtype for the {fmt.get('kv')} format")
    spec = {"model": _model_ref(p.draft_model, notes), "gamma": option.gamma} if p.speculative else None
    quantization = _weight_quantization(engine, model, str(fmt.get("weights") or "bf16"), notes)
    experts = fmt.get("experts")
    if model.checkpoint_expert_format and experts and experts != model.checkpoint_expert_format:
        notes.append(f"sized with {experts} experts: serve a checkpoint whose experts are {experts} (the command "
                     f"names {model.id}'s own checkpoint, whose experts are {model.checkpoint_expert_format})")
    args = {"model": _model_ref(model, notes), "quantization": quantization, "tp": p.decode.tp, "pp": p.decode.pp,
            "ep": p.decode.ep, "batch": option.batch_per_replica, "kv": kv,
            "length": request.input_tokens + request.output_tokens,
            "memory": _memory_fraction(model, option, fmt, engine == "trtllm"), "spec": spec,
            "windows": _attention_windows(model, request.input_tokens + request.output_tokens)}
    if p.prefill is not None:
        notes.append(f"disaggregated: the deployment runs {option.prefill_groups} prefill instance(s) of the same "
                     f"command, on {option.group} each, with the engine's KV-transfer settings (the prefill/decode "
                     "wiring is not emitted)")
    argv, files = _BUILDERS[engine](args)
    return LaunchCommand(engine=engine, argv=tuple(argv), files=files, notes=tuple(notes))


def _vllm(a: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    argv = ["vllm", "serve", a["model"], "--tensor-parallel-size", str(a["tp"]),
            "--pipeline-parallel-size", str(a["pp"])]
    argv += ["--enable-expert-parallel"] if a["ep"] > 1 else []
    argv += ["--quantization", a["quantization"]] if a["quantization"] else []
    argv += ["--max-num-seqs", str(a["batch"]), "--max-model-len", str(a["length"]), "--kv-cache-dtype", a["kv"],
             "--gpu-memory-utilization", str(a["memory"])]
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
             "--kv-cache-dtype", a["kv"], "--mem-fraction-static", str(a["memory"])]
    if a["spec"]:   # a chain of gamma draft tokens: top-k 1, gamma steps, gamma + 1 tokens verified
        g = a["spec"]["gamma"]
        argv += ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", a["spec"]["model"],
                 "--speculative-num-steps", str(g), "--speculative-eagle-topk", "1",
                 "--speculative-num-draft-tokens", str(g + 1)]
    return argv, {}


def _trtllm(a: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    argv = ["trtllm-serve", a["model"], "--tp_size", str(a["tp"]), "--pp_size", str(a["pp"])]
    argv += ["--ep_size", str(a["ep"])] if a["ep"] > 1 else []
    argv += ["--max_batch_size", str(a["batch"]), "--max_seq_len", str(a["length"]),
             "--kv_cache_free_gpu_memory_fraction", str(a["memory"])]
    kv_config = ([f"  dtype: {a['kv']}"] if a["kv"] else []) + (
        [f"  max_attention_window: [{', '.join(map(str, a['windows']))}]"] if a["windows"] else [])
    yaml = "kv_cache_config:\n" + "".join(line + "\n" for line in kv_config) if kv_config else ""
    if a["spec"]:
        yaml += (f"speculative_config:\n  decoding_type: DraftTarget\n  max_draft_len: {a['spec']['gamma']}\n"
                 f"  speculative_model: {a['spec']['model']}\n")
    if not yaml:
        return argv, {}
    return argv + ["--extra_llm_api_options", "roofline-trtllm.yaml"], {"roofline-trtllm.yaml": yaml}


_BUILDERS = {"vllm": _vllm, "sglang": _sglang, "trtllm": _trtllm}
