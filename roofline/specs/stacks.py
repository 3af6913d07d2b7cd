"""Serving stacks: which family a measurement's stack belongs to (gpt-fast, TensorRT-LLM, vLLM, SGLang and their
ROCm builds per ISA), the engine settings each fixes, and a calibration :class:`Profile`: one pooled parameter set
and one per stack family, with what a stack runs a device's GPUs with (:meth:`Profile.for_gpus`)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from ..errors import WorkloadError
from .engine_params import EngineParams


def stack_family(stack: str, vendor: str = "", isa: str = "") -> str:
    """The serving-stack family of a measurement's ``stack`` column: gpt-fast, tensorrt-llm (with NIM and
    MLPerf submissions built on it), vllm, sglang, or other. On an AMD device vLLM and SGLang are their ROCm
    builds (``vllm-rocm``, ``sglang-rocm``): other attention, GEMM and MoE kernels (AITER, hipBLASLt, RCCL;
    https://rocm.docs.amd.com/en/latest/how-to/rocm-for-ai/inference-optimization/workload.html), so they
    carry their own efficiencies and fixed costs. Given the device's ISA they are that ISA's build
    (``sglang-rocm-gfx942``): the images are built per ISA (SGLang's ``-rocm700-mi30x`` and ``-mi35x`` tags)
    and the code picks kernels by it. SGLang gated its fused MLA RoPE-and-cache kernel to gfx950 until
    https://github.com/sgl-project/sglang/pull/18242 (gfx942 ran the unfused fallbacks, ~11% of decode), and
    AITER's FP8 block-scale GEMM ran gfx942 on untuned default tiles for DeepSeek's shapes until
    https://github.com/ROCm/aiter/pull/1930 (median TPOT at 4 concurrent requests 28.8 -> 22.1 ms)."""
    s = stack.lower()
    if "gpt-fast" in s:
        return "gpt-fast"
    if re.search(r"tensorrt|trt-llm|nim", s):
        return "tensorrt-llm"
    for name in ("sglang", "vllm"):
        if name in s:
            if vendor.strip().lower() != "amd":
                return name
            return f"{name}-rocm-{isa.strip().lower()}" if isa.strip() else f"{name}-rocm"
    return "other"


_PLATFORM_BUILD = re.compile(r"^(?P<parent>.+)-(?:rocm|gfx[0-9a-z]+)$")


def parent_family(family: str) -> str | None:
    """The family a platform build specialises (``sglang-rocm-gfx942`` -> ``sglang-rocm`` -> ``sglang``);
    None for a stack's own family."""
    m = _PLATFORM_BUILD.match(family)
    return m.group("parent") if m else None


def family_chain(family: str) -> list[str]:
    """``family`` and the families it specialises, most specific first."""
    chain = [family]
    while (up := parent_family(chain[-1])) is not None:
        chain.append(up)
    return chain


#: What a platform build fits of its own when it has few rows, and what a build no calibration row measured
#: borrows from another stack's build for the same ISA (:func:`platform_donors`): the efficiencies its kernels
#: reach and the gap each kernel leaves. These belong to the platform's launch path and kernel libraries (the HIP
#: runtime and graphs, hipBLASLt, AITER, RCCL on ROCm), which every stack built for that ISA runs; the scheduler
#: and host costs (per request, sequence and step) belong to the stack.
PLATFORM_OWN = ("memory_bandwidth_fraction", "compute_fraction", "kernel_overhead_s")


def platform_of(family: str) -> str | None:
    """The platform and ISA a build is for (``rocm-gfx942`` for ``sglang-rocm-gfx942``); None for a stack's own
    family (its CUDA build)."""
    return family[len(family_chain(family)[-1]) + 1:] or None


def platform_donors(build: str, answered_by: str | None, fitted: Iterable[str],
                    measured: Iterable[str] = ()) -> list[str]:
    """The builds whose platform parameters (:data:`PLATFORM_OWN`) a stack's ``build`` takes: where no calibration
    row measured it (not in ``measured``) and the set that answers for it (``answered_by``; None for the pooled
    default) was not fitted on its platform, the other stacks' builds for the same platform and ISA among
    ``fitted``, sorted. Held out by publication, SGLang's gfx942 rows run 63% off (median) with SGLang's CUDA
    build's kernel gap and efficiencies and 21% with vLLM's gfx942 build's (docs/validation.md); another ISA's
    build of the same stack does worse than either (50%), so a stack's build for another ISA is never a donor."""
    plat = platform_of(build)
    if plat is None or build in set(measured) or (answered_by is not None and parent_family(answered_by)):
        return []
    return sorted(f for f in fitted if f != build and platform_of(f) == plat)


def with_platform_of(params: EngineParams, donors: list[EngineParams]) -> EngineParams:
    """``params`` with each :data:`PLATFORM_OWN` parameter the mean of the ``donors``' (unchanged without any)."""
    if not donors:
        return params
    means: dict[str, Any] = {k: math.fsum(getattr(d, k) for d in donors) / len(donors) for k in PLATFORM_OWN}
    return attrs.evolve(params, **means)


def with_stack_settings(params: EngineParams, stack: str) -> EngineParams:
    """``params`` with the settings of the serving stack that ran a measurement (:data:`STACK_SETTINGS`: its
    all-reduce algorithm, KV admission, prompt chunking, sliding-window KV, LM head format and weight-only
    kernel), each unless already set."""
    family = stack_family(stack)
    fixed = {name: table[family] for name, table in STACK_SETTINGS.items()
             if getattr(params, name) is None and family in table}
    return attrs.evolve(params, **fixed) if fixed else params


#: The all-reduce each serving-stack family runs inside a GPU group: gpt-fast calls torch.distributed's
#: all_reduce, i.e. NCCL's ring/tree (https://github.com/pytorch-labs/gpt-fast/blob/main/tp.py);
#: TensorRT-LLM's custom all-reduce picks one-shot or two-shot per message size
#: (https://github.com/NVIDIA/TensorRT-LLM/blob/main/cpp/tensorrt_llm/kernels/customAllReduceKernels.h), as
#: does vLLM's custom all-reduce, which SGLang reuses
#: (https://github.com/vllm-project/vllm/blob/main/csrc/custom_all_reduce.cuh).
STACK_COLLECTIVES = {"gpt-fast": "ring", "tensorrt-llm": "auto", "vllm": "auto", "sglang": "auto"}

#: How each serving-stack family admits requests against KV memory: TensorRT-LLM's default capacity
#: scheduler policy GUARANTEED_NO_EVICT guarantees "that a started request is never paused", reserving its
#: prompt plus maximum output (https://nvidia.github.io/TensorRT-LLM/performance/performance-tuning-guide/useful-runtime-flags.html);
#: vLLM and SGLang allocate paged blocks as sequences grow and preempt when they run out
#: (https://docs.vllm.ai/en/latest/configuration/optimization.html#preemption). gpt-fast batches statically
#: into a preallocated cache: no admission policy (the default, paged, gives the same numbers there).
STACK_ADMISSION = {"tensorrt-llm": "reserve", "vllm": "paged", "sglang": "paged"}

#: Whether each serving-stack family chunks prompts by default: TensorRT-LLM's LLM API has
#: ``enable_chunked_prefill`` False (https://github.com/NVIDIA/TensorRT-LLM/blob/main/tensorrt_llm/llmapi/llm_args.py)
#: and trtllm-bench, without it, raises max_num_tokens to max_isl + max_batch_size so a whole prompt fits a step
#: (``get_settings``, https://github.com/NVIDIA/TensorRT-LLM/blob/main/tensorrt_llm/bench/benchmark/utils/general.py);
#: vLLM's V1 engine and SGLang always chunk (max_num_batched_tokens, chunked_prefill_size). Every TensorRT-LLM
#: row is taken as not chunking (trtllm-bench, trtllm-serve, NIM, MLPerf's harness); where a run sets its own
#: max_num_tokens (InferenceMAX's gpt-oss trtllm-serve script: 20,000, https://github.com/InferenceMAX/InferenceMAX/
#: blob/f987a94fa670302e7adbd695f43d1dc27a9f888a/benchmarks/gptoss_fp4_b200_trt_docker.sh) that holds them too.
STACK_CHUNKED_PREFILL = {"tensorrt-llm": False, "vllm": True, "sglang": True}

#: Whether each serving-stack family keeps only the window of a sliding-window layer in its KV cache. vLLM's
#: hybrid KV cache manager reserves "slots only for the most recent sliding_window_size tokens" on those
#: layers (https://docs.vllm.ai/en/latest/design/hybrid_kv_cache_manager/). TensorRT-LLM stores the last
#: max_attention_window tokens per layer only when ``kv_cache_config.max_attention_window`` is set ("Only the
#: last tokens will be stored in the KV cache", KvCacheConfig in
#: https://github.com/NVIDIA/TensorRT-LLM/blob/main/tensorrt_llm/llmapi/llm_args.py); its gpt-oss model
#: passes the window to the attention kernel per layer (modeling_gpt_oss.py), which its own later work calls
#: "GPT-OSS-style kernel-masked SWA" (https://github.com/NVIDIA/TensorRT-LLM/pull/16957), and the published
#: gpt-oss configurations set no max_attention_window (perf-overview llm_options), so every layer holds the
#: whole context. SGLang's sliding-window pool is sized as a ratio of the full pool (--swa-full-tokens-ratio),
#: not by the window: left at the default here.
STACK_WINDOWED_KV = {"tensorrt-llm": False, "vllm": True}

#: The format each serving-stack family's checkpoints keep the embedding table and LM head in when the other
#: weights are 8- or 4-bit. NVIDIA's Model Optimizer, which makes the FP8 and NVFP4 checkpoints TensorRT-LLM,
#: vLLM and SGLang serve, leaves the LM head unquantised by default (``"*lm_head*": {"enable": False}`` in
#: ``_default_disabled_quantizer_cfg``, https://github.com/NVIDIA/TensorRT-Model-Optimizer/blob/
#: 09914046803993961dfefe763ba04fffed76aaec/modelopt/torch/quantization/config.py; the FP8 checkpoints' cards
#: say "Only the weights and activations of the linear operators within transformers blocks are quantized",
#: https://huggingface.co/nvidia/Llama-3.1-405B-Instruct-FP8); vLLM's own FP8 quantises only linear layers,
#: experts and the KV cache, so its LM head (a vocabulary-parallel embedding) stays 16-bit
#: (``Fp8Config.get_quant_method``, https://github.com/vllm-project/vllm/blob/
#: 0071b24bf8fe8c3d1bc3516d0ff8477f07964aaf/vllm/model_executor/layers/quantization/fp8.py). No toolchain here
#: quantises the embedding table (a row gather). gpt-fast's quantize.py swaps every nn.Linear, its output head
#: included (https://github.com/pytorch-labs/gpt-fast/blob/main/quantize.py): not listed, so quantised with the
#: weights.
STACK_HEAD_FORMAT = {"tensorrt-llm": "bf16", "vllm": "bf16", "sglang": "bf16"}

#: The recipe each serving-stack family runs MXFP4 routed experts with beside 16-bit activations on devices with
#: FP4 and FP8 units (:meth:`Formats.with_stack_experts <roofline.specs.formats.Formats>`). TensorRT-LLM's
#: default MoE backend on B200/GB200/B300/GB300 multiplies MXFP4 expert weights with MXFP8 activations ("For
#: Blackwell, the default MoE backend is TRTLLM", support matrix: activation MXFP8, MoE weights MXFP4;
#: https://nvidia.github.io/TensorRT-LLM/deployment-guide/deployment-guide-for-gpt-oss-on-trtllm.html). vLLM's
#: default on SM100 is FlashInfer's BF16 x MXFP4 kernel; MXFP8 activations need VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8
#: (``get_mxfp4_backend``, vllm/model_executor/layers/quantization/mxfp4.py): not listed, so the weights unpack.
STACK_EXPERT_RECIPE = {"tensorrt-llm": "w4a8-mxfp4"}

#: The weight-only matmul kernel each serving-stack family runs where it is not its device family's (Marlin's
#: 64-row slices on GPUs): gpt-fast's int4 ``WeightOnlyInt4Linear`` calls ``torch.ops.aten._weight_int4pack_mm``,
#: tinygemm (https://github.com/pytorch-labs/gpt-fast/blob/main/quantize.py), as torchao's int4 weight-only
#: layout does. Its int8 path (``F.linear(x, w.to(dtype)) * scales``, fused by Inductor) keeps the family's.
STACK_WEIGHT_ONLY_KERNEL = {"gpt-fast": "tinygemm"}

#: The engine settings a serving stack fixes, by field: what :func:`with_stack_settings` applies.
STACK_SETTINGS: dict[str, dict[str, Any]] = {
    "collective": STACK_COLLECTIVES, "kv_admission": STACK_ADMISSION, "chunked_prefill": STACK_CHUNKED_PREFILL,
    "windowed_kv": STACK_WINDOWED_KV, "head_format": STACK_HEAD_FORMAT, "expert_recipe": STACK_EXPERT_RECIPE,
    "weight_only_kernel": STACK_WEIGHT_ONLY_KERNEL, "attention_dp_balance": {}, "moe_dispatch": {},
    "allreduce_fusion": {}}


@attrs.frozen(kw_only=True)
class Profile:
    """Engine parameters: a default set and, optionally, one per serving-stack family."""

    default: EngineParams = attrs.field(factory=EngineParams)
    families: dict[str, EngineParams] = attrs.field(factory=dict)
    path: str = ""
    #: the ``[fit]`` record `roofline calibrate` wrote (rows, in-sample, leave-one-out, held-out errors); empty
    #: for a profile written by hand
    fit: Mapping[str, Any] = attrs.field(factory=dict, eq=False, converter=lambda m: MappingProxyType(dict(m)))

    def for_stack(self, stack: str, vendor: str = "", isa: str = "") -> EngineParams:
        """The parameters of a stack's build for a device's platform and ISA, else of the nearest family it
        specialises (:func:`family_chain`: the platform's build, then the stack's), else the default set; with
        the stack's all-reduce algorithm and KV admission."""
        _chain, fitted, donors = self._answer(stack, vendor, isa)
        base = self.families[fitted] if fitted is not None else self.default
        return with_stack_settings(with_platform_of(base, [self.families[d] for d in donors]), stack)

    def _answer(self, stack: str, vendor: str, isa: str) -> tuple[list[str], str | None, list[str]]:
        """A stack's build chain on a platform, the fitted set that answers for it (None: the default) and the
        builds it borrows its platform parameters from (:func:`platform_donors`; the ``[fit]`` record's
        ``builds`` are the builds the calibration measured)."""
        chain = family_chain(stack_family(stack, vendor, isa))
        fitted = next((f for f in chain if f in self.families), None)
        return chain, fitted, platform_donors(chain[0], fitted, self.families, self.fit.get("builds", ()))

    def standard_error(self, name: str) -> float | None:
        """The standard error of the default set's parameter ``name`` (the ``[fit]`` record's ``standard_errors``);
        None where the record gives none (a parameter no row responds to, or a profile written by hand). A parameter
        the fit could not identify has one, larger than its value (:meth:`not_identified` lists those)."""
        return self.fit.get("standard_errors", {}).get(name)

    def not_identified(self, name: str) -> list[str]:
        """The parameters of set ``name`` (``default`` or a stack family) the fit recorded as not identified by
        its data (the ``[fit]`` record's ``not_identified``: set in place, not measured)."""
        return [x.partition(".")[2] for x in self.fit.get("not_identified", []) if x.partition(".")[0] == name]

    def for_gpus(self, stack: str, devices: Iterable[Any]) -> StackChoice:
        """The parameters serving stack ``stack`` (a name of :data:`STACK_NAMES`) runs the GPUs among ``devices``
        with: its build for their platform and ISA (``vllm`` on MI300X: ``vllm-rocm-gfx942``), answered by that
        build's fitted set, else the nearest family it specialises that the profile fits (:meth:`for_stack`), else
        ``default``. Other device families keep their own execution profiles whatever the stack. Raises
        :class:`WorkloadError` for an unknown name, for devices with no GPU among them (the stack would change
        nothing), for GPUs of two platforms or ISAs (each runs its own build of the stack: one parameter set
        cannot describe both) and for a stack that does not run on their platform (TensorRT-LLM: NVIDIA only)."""
        name = stack_name(stack)
        platforms = sorted({(d.vendor, d.isa) for d in devices if d.family == "gpu"})
        if not platforms:
            raise WorkloadError(f"serving stack {name} sets GPU parameters, and no device here is a GPU")
        other = sorted({f"{v} {i}".strip() for v, i in platforms if v != "NVIDIA"})
        if name in NVIDIA_ONLY_STACKS and other:
            raise WorkloadError(f"serving stack {name} runs on NVIDIA GPUs only ({NVIDIA_ONLY_STACKS[name]}), "
                                f"not on {', '.join(other)}")
        if len(platforms) > 1:
            raise WorkloadError(f"serving stack {name}: these GPUs run {len(platforms)} different builds of it "
                                f"({', '.join(f'{v} {i}'.strip() for v, i in platforms)}); give one platform and "
                                "ISA at a time")
        vendor, isa = platforms[0]
        if name == POOLED:
            return StackChoice(name=POOLED, build=POOLED, fitted="default", params=self.default)
        chain, fitted, donors = self._answer(name, vendor, isa)
        return StackChoice(name=name, build=chain[0], fitted=fitted or "default", platform_from=tuple(donors),
                           params=self.for_stack(name, vendor, isa),
                           other_platform=vendor != "NVIDIA" and fitted is not None and parent_family(fitted) is None)


@attrs.frozen(kw_only=True)
class StackChoice:
    """What :meth:`Profile.for_gpus` chose: the stack, the build the GPUs run, the parameter set that answers for
    it and its parameters; ``other_platform`` when that set was fitted on another platform's GPUs (an AMD GPU
    answered by a stack's CUDA build, for want of a fitted ROCm build); ``platform_from``, the same ISA's other
    builds that lent it their efficiencies and kernel gap (:func:`platform_donors`)."""

    name: str
    build: str
    fitted: str
    params: EngineParams
    other_platform: bool = False
    platform_from: tuple[str, ...] = ()


#: The stack GPUs run when none is named: vLLM, the most deployed open-source engine and the one measured on the
#: most device kinds here (NVIDIA and AMD rows from InferenceMAX, ML.ENERGY, MLPerf's AMD submissions and the vLLM
#: blog). The profile's ``[params]`` set, fitted to every stack's rows at once, matches no stack (5.5 us per kernel
#: where each NVIDIA stack's own fit is about 2.4 us): it stays a named choice, ``pooled``.
DEFAULT_STACK = "vllm"
#: The name of the profile's pooled ``[params]`` set as a stack (``--stack pooled``).
POOLED = "pooled"

#: The names ``--stack`` takes for each serving-stack family (case-insensitive).
STACK_NAMES = {"tensorrt-llm": ("tensorrt-llm", "trtllm", "trt-llm", "tensorrt", "nim"), "vllm": ("vllm",),
               "sglang": ("sglang",), "gpt-fast": ("gpt-fast", "gptfast"), POOLED: (POOLED,)}
#: Stacks built for one vendor's GPUs: TensorRT-LLM is "NVIDIA's open-source library for optimizing LLM inference
#: on NVIDIA GPUs" (https://github.com/NVIDIA/TensorRT-LLM), built on CUDA and TensorRT.
NVIDIA_ONLY_STACKS = {"tensorrt-llm": "built on CUDA and TensorRT"}


def stack_name(text: str) -> str:
    """The serving-stack family a user's ``--stack`` names (exact names and aliases of :data:`STACK_NAMES`);
    :class:`WorkloadError` for anything else."""
    key = str(text).strip().lower()
    for family, names in STACK_NAMES.items():
        if key in names:
            return family
    raise WorkloadError(f"unknown serving stack {text!r}: give one of "
                        + ", ".join(f"{f} ({', '.join(n[1:])})" if n[1:] else f for f, n in STACK_NAMES.items()))


#: The settings a serving stack sets (:func:`with_stack_settings`): kept over the family's when set.
STACK_SET = tuple(STACK_SETTINGS)
