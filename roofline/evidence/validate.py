"""Predict published measurements (the CSV format of ``roofline/validation/README.md``) and report errors.

Each row is served as the publication describes it: ``tp`` devices in one
group (``ep`` expert-parallel), ``static`` or ``continuous`` batching
(:mod:`roofline.serving.serve`), ``batch = max`` meaning the largest batch that fits
at isl + osl, speculation (a named draft model, an EAGLE/MTP/Medusa head, n-gram
lookup; a chain or a tree) with the published acceptance, a ``speedup`` as the ratio
of two predictions. A row the model cannot express is skipped with the reason, never
dropped.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
from importlib import resources
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from ..errors import RooflineError, SpecError, UnknownSpecError
from ..memo import MISSING, IdentityMemo
from ..physics.stages import max_batch, prefill
from ..serving.admission import TRTLLM_BALANCE_TIMEOUT_STEPS, TRTLLM_BALANCE_WAIT_STEPS, Admission
from ..serving.load import Workload, max_rate
from ..serving.placements import smallest_group
from ..serving.serve import CompiledShapes, Placement, Request, evaluate_serving, offline_tokens_per_s
from ..specs.devices import Device, override
from ..specs.execution import family_profile, resolve_profile
from ..specs.files import read_text
from ..specs.formats import get_format
from ..specs.groups import DeviceGroup
from ..specs.lengths import Lengths, shipped_lengths
from ..specs.models import ModelSpec
from ..specs.params import (
    STACK_SET,
    EngineParams,
    Profile,
    shipped_profile,
    stack_family,
    with_stack_settings,
)
from ..specs.resolve import resolve_device, resolve_model
from .row_intervals import with_row_intervals
from .row_labels import ENERGY_METRICS, row_kind, stack_version
from .rows import Row
from .rows import row_int as _int
from .spec_rows import row_placement
from .workers import check_jobs, workers

COLUMNS = ("id", "source", "stack", "stack_version", "hardware", "n_devices", "tp", "pp", "ep", "dp", "model",
           "weight_dtype", "expert_dtype", "kv_dtype", "batch", "serving", "requests", "poll_steps", "token_budget",
           "max_batch", "kv_memory_fraction", "isl", "osl", "spec_method", "draft_len", "acceptance_length", "metric",
           "value", "grade", "notes", "lengths", "p99_ttft_ms", "p99_tpot_ms", "chunked_prefill", "draft_model",
           "tree_tokens", "acceptance_rate", "compiled_batch", "compiled_context", "compiled_prompt", "dp_balance",
           "draft_kv_budget", "allreduce_fusion", "prefill_tp", "prefill_groups", "draft_vocab")
#: Optional columns that pass a run's own serving setting to evaluate_serving (empty: its defaults).
SERVING_COLUMNS = {"poll_steps": "poll_steps", "token_budget": "chunk"}
#: Optional columns giving the shapes a static-shape engine (AWS Neuron) compiled, which its passes run in place of
#: the request's (:class:`~roofline.serving.serve.CompiledShapes`; empty: the request's own).
COMPILED_COLUMNS = {"compiled_batch": "decode_batch", "compiled_context": "decode_context",
                    "compiled_prompt": "prompt_tokens"}
METRICS = ("decode_tokens_per_s_per_user", "itl_ms", "ttft_ms", "output_tokens_per_s_per_device",
           "output_tokens_per_s_total", "total_tokens_per_s_per_device", "energy_per_token_j", "power_w", "speedup",
           "decode_speedup")
#: The metric a ``speedup`` row's two predictions (with and without speculation) are taken in: the whole run's
#: output tokens per second, or for ``decode_speedup`` (papers that time only the decoding loop, e.g. MagicDec's
#: long-prompt runs, where the prefill is left out) the decode rate per sequence, 1 / TPOT.
SPEEDUP_BASIS = {"speedup": "output_tokens_per_s_total", "decode_speedup": "decode_tokens_per_s_per_user"}
#: How sure a row's setup is (roofline/validation/README.md): A first-party with its setup, B one or two details
#: inferred, C partly assumed (predicted, not fitted), D second-hand.
GRADES = ("A", "B", "C", "D")
#: Tensor-parallel degrees a layout is chosen from.
TP_CHOICES = (1, 2, 4, 8, 16, 32)
#: Stacks timed in-process (an offline benchmark or harness, no HTTP server): their TTFT has no request overhead.
IN_PROCESS = re.compile(r"bench|gptsession|mlperf|gpt-fast|torchao", re.IGNORECASE)


def timed_in_process(row: Row) -> bool:
    """Whether a row was timed inside the engine, with no API server before its first token: a stack named as an
    offline benchmark or harness (:data:`IN_PROCESS`), or a static batch, which an engine's own benchmark runs
    as one session of ``batch`` sequences timed together (TensorRT-LLM's blogs of v0.5-0.7 give
    ``out_tps=output_seqlen*batch_size/total_latency/tp``, https://github.com/NVIDIA/TensorRT-LLM/blob/
    3c44cb974badec8966108b16054a99c0923e410d/docs/source/blogs/Falcon180B-H200.md): a serving API admits requests
    one by one and batches them continuously."""
    return bool(IN_PROCESS.search(row.get("stack"))) or row.get("serving") == "static"


#: Metrics some publications give that the model does not predict, with why.
UNMODELLED = {"system_power_w": "whole-system wall power (CPUs, fans, power supplies) is not modelled: only the "
                                "accelerators' power is"}


def shipped_data() -> Path:
    """The copy of the published measurements that ships with the package."""
    return Path(str(resources.files("roofline"))) / "validation" / "measurements.csv"



def read_rows(path: str | os.PathLike[str]) -> list[Row]:
    """Read a measurements CSV, checking the header; raises :class:`SpecError` naming the file."""
    p = Path(path)
    text = read_text(p, what="a measurements CSV", max_bytes=100_000_000)
    reader = csv.DictReader(io.StringIO(text, newline=None))   # universal newlines: \r\n, \n, and a lone \r
    try:
        header = reader.fieldnames or []
    except csv.Error as e:
        raise SpecError(f"{p}: CSV does not parse: {e}") from None
    missing = [c for c in ("id", "hardware", "model", "metric", "value", "batch", "isl", "osl") if c not in header]
    if missing:
        raise SpecError(f"{p}: missing columns {missing} (expected the columns of roofline/validation/README.md)")
    unknown = [c for c in header if c and c.strip() not in COLUMNS]
    if unknown:   # a misspelt optional column would be read as empty: a silently different setup
        import difflib
        near = {c: difflib.get_close_matches(c.strip(), COLUMNS, n=1) for c in unknown}
        hints = "; ".join(f"{c!r}" + (f" (did you mean {m[0]!r}?)" if m else "") for c, m in near.items())
        raise SpecError(f"{p}: unknown columns {hints}: the columns are those of roofline/validation/README.md")
    rows = []
    try:
        for i, rec in enumerate(reader, start=2):
            if rec.get(None):
                raise SpecError(f"{p}: line {i}: more fields than columns")
            rows.append(Row(id=(rec.get("id") or f"line{i}").strip(), fields={k: v or "" for k, v in rec.items() if k}))
    except csv.Error as e:
        raise SpecError(f"{p}: CSV does not parse: {e}") from None
    if not rows:
        raise SpecError(f"{p}: no rows")
    seen: dict[str, int] = {}
    for i, r in enumerate(rows, start=2):
        if r.id in seen:   # ids key the errors, the folds and the docs: two rows under one id would merge
            raise SpecError(f"{p}: line {i}: id {r.id!r} repeats line {seen[r.id]}'s (ids must be unique)")
        seen[r.id] = i
    return rows


def _formats(row: Row, device: Device) -> dict[str, str | None]:
    w = row.get("weight_dtype") or "bf16"
    e = row.get("expert_dtype") or None
    kv = row.get("kv_dtype") or "bf16"
    # FP8 / FP4 checkpoints in these stacks quantise activations too (FP8 GEMMs); weight-only int4/int8 keep
    # 16-bit activations: bf16, or fp16 where the device has no bf16 units (Groq). A checkpoint whose experts
    # alone are low precision (gpt-oss: MXFP4 experts, BF16 attention) keeps 16-bit activations: its expert
    # matmuls are dequantised to BF16 (W4A16) unless the row names the recipe (w4a8-mxfp4: MXFP8 x MXFP4)
    wf = get_format(w)
    low = not wf.weight_only and wf.compute in ("fp8", "fp6", "fp4")
    sixteen = "fp16" if w == "fp16" or (not device.supports("bf16") and device.supports("fp16")) else "bf16"
    return {"weights": w, "experts": e, "kv": kv, "activations": "fp8" if low and device.supports("fp8") else sixteen}


def _layout(row: Row, model: ModelSpec, device: Device, fmt: dict[str, Any], batch: int | None,
            context: int, params: EngineParams) -> tuple[DeviceGroup, int]:
    """The row's device group and how many data-parallel replicas of it run: its tp x pp (x ep), with
    n_devices = replicas x tp x pp; or from n_devices alone the family's layout (TP up to the family's
    max_tp, then pipeline stages); or with nothing given the family's layout at the fewest devices that hold
    the batch at this context."""
    ep, dp = _int(row, "ep", 1), _int(row, "dp", 1)
    n_text, tp_text, pp_text = row.get("n_devices"), row.get("tp"), row.get("pp")
    max_tp = int(resolve_profile(device, params).max_tp)
    if tp_text or pp_text:
        tp, pp = _int(row, "tp", 1), _int(row, "pp", 1)
        pool = _prefill_pool_devices(row)
        n = _int(row, "n_devices") - pool if n_text else tp * pp
        beside = f" (n_devices {n_text} less the prefill pool's {pool})" if pool else ""
        if n < tp * pp or n % (tp * pp):
            raise RooflineError(f"{n} devices{beside} are not a whole number of tp {tp} x pp {pp} replicas")
        return DeviceGroup(device=device, tp=tp, ep=ep, pp=pp, dp=dp), n // (tp * pp)
    if n_text:
        n = _int(row, "n_devices")
        tp = max(t for t in TP_CHOICES if t <= max_tp and n % t == 0)
        return DeviceGroup(device=device, tp=tp, ep=ep, pp=n // tp, dp=dp), 1
    if batch is None:
        raise RooflineError("batch = max needs the device count (n_devices or tp/pp)")
    isl = _int(row, "isl")

    def fits(g: DeviceGroup) -> bool:   # the batch at its final context, and its prompts' prefill
        return bool(max_batch(model, g, context=context, params=params, **fmt) >= batch) and bool(
            prefill(model, g, prompt=isl, batch=batch, params=params, on_infeasible="nan", **fmt).fits)
    return smallest_group(fits, device, max_tp=max_tp), 1


def _prefill_pool_devices(row: Row) -> int:
    """Devices of a disaggregated row's prefill pool (``prefill_groups`` groups of ``prefill_tp``), 0 without one."""
    if not (row.get("prefill_tp") or row.get("prefill_groups")):
        return 0
    if not (row.get("prefill_tp") and row.get("prefill_groups")):
        raise RooflineError("a prefill pool needs both prefill_tp and prefill_groups")
    if row.get("batch") != "slo":
        raise RooflineError("a separate prefill pool (prefill_tp, prefill_groups) is predicted for batch = slo rows "
                            "(the served-load queues); give it there or leave the columns empty")
    if not row.get("tp"):
        raise RooflineError("a prefill pool needs the decode groups' tp (the pool's devices are not a layout to search)")
    tp, groups = _int(row, "prefill_tp"), _int(row, "prefill_groups")
    if tp < 1 or groups < 1:
        raise RooflineError(f"prefill_tp {tp} and prefill_groups {groups} must be whole numbers >= 1")
    return tp * groups


def _pool_group(row: Row, model: ModelSpec, decode: DeviceGroup, fmt: dict[str, Any], params: EngineParams) -> DeviceGroup:
    """One group of a row's prefill pool: ``prefill_tp`` devices of the decode group's kind in tensor parallelism
    (the columns give no pipeline, expert or attention data parallelism), which must hold one prompt's prefill."""
    tp = _int(row, "prefill_tp")
    try:
        group = DeviceGroup(device=decode.device, tp=tp)
        fits = prefill(model, group, prompt=_int(row, "isl"), params=params, on_infeasible="nan", **fmt).fits
    except RooflineError as e:
        raise RooflineError(f"prefill_tp {tp}: {e}") from None
    if not np.all(fits):
        raise RooflineError(f"prefill_tp {tp}: one prompt's prefill does not fit a prefill group of {tp} "
                            f"{decode.device.id}")
    return group


#: Batches of ``batch = max`` rows (the largest that fits, at most the scheduler's cap), by (row, usable memory,
#: group): fitting depends on memory only.
_MAX_BATCH: dict[Any, int] = {}
#: Entries each of the run-level tables here keeps (the shipped file's ~2,000 rows under a calibration's few memory
#: settings fit many times over); the oldest go first.
_TABLE_LIMIT = 20_000


def _bounded(table: dict[Any, Any], key: Any, value: Any) -> Any:
    """Remember ``value`` under ``key`` in ``table``, dropping its oldest entries beyond :data:`_TABLE_LIMIT`."""
    table[key] = value
    while len(table) > _TABLE_LIMIT:
        del table[next(iter(table))]
    return value


#: Batches the first pass of the largest-batch search tries (spread evenly from 1 to the KV-cache bound).
_COARSE_BATCHES = 96


def _largest_fitting(row: Row, model: ModelSpec, group: DeviceGroup, fmt: dict[str, Any], params: EngineParams,
                     serve: Any) -> int:
    isl, osl = _int(row, "isl"), _int(row, "osl")
    paged = (row.get("serving") or "static") == "continuous" and params.kv_admission != "reserve"
    context = isl + osl // 2 if paged else isl + osl - 1   # as evaluate_serving checks memory
    kv_bound = int(max_batch(model, group, context=context, params=params, **fmt))
    if kv_bound < 1:
        raise RooflineError("the model does not fit at batch 1")
    # Memory grows with the batch, so what fits is a prefix of 1..kv_bound: a coarse grid finds the cell where it
    # ends and one more evaluation finds the batch inside it (two calls of ~100 batches instead of kv_bound).
    grid = np.unique(np.linspace(1.0, kv_bound, min(kv_bound, _COARSE_BATCHES)).round())
    fits = np.flatnonzero(serve(grid).fits)
    if not fits.size:
        raise RooflineError("the model does not fit at batch 1 with its serving workspace")
    last = int(fits[-1])
    if last + 1 == grid.size:
        return int(grid[last])
    inside = np.arange(grid[last] + 1.0, grid[last + 1])
    fine = np.flatnonzero(serve(inside).fits) if inside.size else np.empty(0, dtype=int)
    return int(inside[fine[-1]]) if fine.size else int(grid[last])


def _batch(row: Row, model: ModelSpec, group: DeviceGroup, replicas: int, fmt: dict[str, Any],
           params: EngineParams, serve: Any) -> int:
    """Sequences per replica: ``max`` = the largest batch the serving model holds (continuous batching: at the
    steady-state mean context isl + osl/2 of a paged KV cache, with the step's prefill workspace; static: at
    the final context) and its schedulers admit (``max_batch`` per scheduler, one per attention data-parallel
    rank: vLLM's ``max_num_seqs``, TensorRT-LLM's
    ``max_batch_size``, SGLang's ``--max-running-requests``: "maximum number of sequences per iteration",
    256 by default in vLLM 0.6, https://docs.vllm.ai/en/v0.6.3.post1/models/engine_args.html; the scheduler
    admits no more whatever KV memory is left), else the row's batch (the concurrency of the whole deployment)
    over the replicas; a batch above the cap raises (the rest would queue, which is not timed)."""
    cap = _int(row, "max_batch") if row.get("max_batch") else None
    if cap is not None and cap < 1:
        raise RooflineError(f"column max_batch = {cap} is not a whole number >= 1")
    if cap is not None:   # the cap is each scheduler's: one per attention data-parallel rank
        cap *= group.dp
    if row.get("batch") == "max":
        key = (tuple(sorted(row.fields.items())), params.usable_memory_fraction,
               tuple(getattr(params, f) for f in STACK_SET), group.tp, group.pp, group.ep, group.dp,
               tuple(t.capacity_bytes for t in group.device.memory))
        batch = _MAX_BATCH.get(key)
        if batch is None:    # memory only: the same for every efficiency a calibration tries
            # memory grows with the batch, so a cap that fits is the answer without the search for the largest
            if cap is not None and bool(np.all(serve(np.array([float(cap)])).fits)):
                batch = _bounded(_MAX_BATCH, key, cap)
            else:
                largest = _largest_fitting(row, model, group, fmt, params, serve)
                batch = _bounded(_MAX_BATCH, key, min(largest, cap) if cap is not None else largest)
        return batch
    total = _int(row, "batch")
    if total % replicas:
        raise RooflineError(f"batch {total} does not spread evenly over {replicas} replicas")
    if cap is not None and total // replicas > cap:
        raise RooflineError(f"batch {total // replicas} per replica is above the scheduler's cap (max_batch {cap}): "
                            "the rest wait in a queue, which the model does not time")
    return total // replicas


def _device_memory(device: Device) -> Device:
    """The memory a serving engine uses: a GPU's own memory only. GB200's Grace LPDDR is host memory that
    TensorRT-LLM, vLLM and SGLang leave out of their weight and KV pools unless told to offload, so a GPU's
    second tier is dropped here (the physics can still spill to it when asked: ``roofline stage gb200``)."""
    if device.family == "gpu" and len(device.memory) > 1:
        return attrs.evolve(device, memory=device.memory[:1])
    return device


def row_stack_family(row: Row) -> str:
    """The serving-stack family of a row on its device's platform and ISA (``sglang-rocm-gfx942`` on MI300X)."""
    dev = resolve_device(row.get("hardware"))
    return stack_family(row.get("stack"), dev.vendor, dev.isa)


def row_params(profile: Profile, row: Row) -> EngineParams:
    """The parameters a profile gives a row: its stack family on its device's platform and ISA."""
    dev = resolve_device(row.get("hardware"))
    return profile.for_stack(row.get("stack"), dev.vendor, dev.isa)


def _offline_rest(row: Row, batch: int, replicas: int) -> tuple[float, float]:
    """(requests per replica, sequences in its last, partly full wave: 0 where the waves come out even) of an
    offline run of the row's ``requests``."""
    per = _int(row, "requests") / replicas
    if per < 1:
        raise RooflineError(f"requests {row.get('requests')} do not give every one of {replicas} replicas one")
    return per, float(math.ceil(per - math.floor(per / batch) * batch))


#: _row_engine's recent answers by the parameters' identity: a calibration gives every row of a stack family one
#: parameter object per evaluation
_ENGINES = IdentityMemo(256)


def _family_params(params: EngineParams, device: Device) -> EngineParams:
    """The parameters a row's device runs with before its row's settings: ``params`` on a GPU or where they
    describe the device's family (a family fit), else the family's own profile, which
    :func:`~roofline.specs.execution.resolve_profile` would swap in anyway; taking it here lets the row's settings
    (no request overhead when timed in-process, its memory fraction, its chunking) reach a Trainium, TPU or Gaudi
    row as they reach a GPU row, and makes ``validate`` predict a family's rows as its fit does."""
    if device.family == "gpu" or params.family == device.family:
        return params
    return family_profile(device.family).profile


def _row_engine(params: EngineParams, stack: str, in_process: bool, gpu: bool = True) -> EngineParams:
    """``params`` with the settings of the row's serving stack (:func:`with_stack_settings`; on a GPU only: they
    are the CUDA and ROCm builds' collectives, kernels and schedulers, which a Neuron, XLA or HPU backend replaces
    with its compiled program's) and, for a run timed in-process, no request overhead (no API server before the
    first token)."""
    hit = _ENGINES.get((params,), (stack, in_process, gpu))
    if hit is not MISSING:
        return hit
    out = with_stack_settings(params, stack) if gpu else params
    if in_process:
        out = attrs.evolve(out, request_overhead_s=0.0)
    return _ENGINES.put((params,), (stack, in_process, gpu), out)


#: Stack families whose KV memory setting is a share of the device's whole memory (vLLM's
#: ``gpu_memory_utilization``: "the fraction of GPU memory to be used for the model executor",
#: https://docs.vllm.ai/en/v0.6.3.post1/models/engine_args.html; SGLang's ``mem_fraction_static``: "the fraction of
#: the memory used for static allocation (model weights and KV cache memory pool)",
#: https://docs.sglang.ai/backend/server_arguments.html). TensorRT-LLM's ``free_gpu_memory_fraction`` is a share of
#: the memory left after the weights and activations ("fraction of free GPU memory ... after model load",
#: https://nvidia.github.io/TensorRT-LLM/performance/performance-tuning-guide/useful-runtime-flags.html): a row's
#: value for it is recorded, not applied (the activations' share is not modelled).
KV_FRACTION_OF_TOTAL = ("vllm", "sglang", "other")
#: How much less usable memory the memory-cliff check tries (validate's ``memory_sensitivity``).
CLIFF_MEMORY_CHANGE = 0.05
#: A row whose prediction moves more than this for :data:`CLIFF_MEMORY_CHANGE` less usable memory sits on the
#: memory cliff: its prediction hangs on the engine's memory setting more than on the model.
CLIFF_THRESHOLD = 0.20


def row_memory_fraction(row: Row, params: EngineParams) -> EngineParams:
    """``params`` with the row's ``kv_memory_fraction`` as the usable share of device memory, where its stack sets
    that share of the whole memory (:data:`KV_FRACTION_OF_TOTAL`); unchanged otherwise."""
    text = row.get("kv_memory_fraction").strip()
    if not text:
        return params
    try:
        value = float(text)
    except ValueError:
        raise RooflineError(f"column kv_memory_fraction = {text!r} is not a number") from None
    if not 0 < value <= 1:
        raise RooflineError(f"column kv_memory_fraction = {text!r} is not in (0, 1]")
    if stack_family(row.get("stack")) not in KV_FRACTION_OF_TOTAL:
        return params
    return attrs.evolve(params, usable_memory_fraction=value)


#: Optional yes/no columns and the engine setting each sets (empty: the stack's own default): ``chunked_prefill``,
#: whether the run split prompts over steps (TensorRT-LLM's ``enable_chunked_context``); ``dp_balance``, whether its
#: attention data-parallel ranks synchronised their prompt phases (TensorRT-LLM's
#: ``attention_dp_config.enable_balance``).
SWITCH_COLUMNS = {"chunked_prefill": "chunked_prefill", "dp_balance": "attention_dp_balance",
                  "allreduce_fusion": "allreduce_fusion"}


def row_chunking(row: Row, params: EngineParams) -> EngineParams:
    """``params`` with the row's yes/no engine settings (:data:`SWITCH_COLUMNS`) where it gives them."""
    for column, field in SWITCH_COLUMNS.items():
        text = row.get(column).lower()
        if column == "dp_balance":
            text = text.partition(":")[0]   # yes:TIMEOUT:WAIT sets the balance's iterations (_admission)
        if not text:
            continue
        if text not in ("yes", "no"):
            raise RooflineError(f"column {column} = {text!r} is not yes or no")
        params = attrs.evolve(params, **{field: text == "yes"})  # type: ignore[arg-type]  # bool fields only
    return params


def predict_row(row: Row, params: EngineParams, what_if: dict[str, Any] | None = None,
                memory_scale: float = 1.0) -> float:
    """The model's value for a row's metric; raises RooflineError when the row cannot be expressed.
    ``what_if`` overrides fields of the row's device (``{"execution.busy_floor_fraction": 0.3}``);
    ``memory_scale`` scales the usable share of device memory (the memory-cliff check)."""
    metric = row.get("metric")
    if metric in UNMODELLED:
        raise RooflineError(f"{metric}: {UNMODELLED[metric]}")
    if metric not in METRICS:
        raise RooflineError(f"unknown metric {metric!r}")
    if metric in SPEEDUP_BASIS:
        return _predict_speedup(row, params, what_if, memory_scale)
    _prefill_pool_devices(row)   # a prefill pool is checked, and refused off the served-load rows, before any layout
    slo = row.get("batch") == "slo"
    if slo and not (row.get("p99_ttft_ms") and row.get("p99_tpot_ms")):
        raise RooflineError("the load is the largest that meets the publication's latency limits: give them in "
                            "p99_ttft_ms and p99_tpot_ms")
    dev = _device_memory(resolve_device(row.get("hardware")))
    params = row_chunking(row, row_memory_fraction(row, _row_engine(_family_params(params, dev), row.get("stack"),
                                                                    timed_in_process(row), dev.family == "gpu")))
    if memory_scale != 1.0:
        params = attrs.evolve(params, usable_memory_fraction=params.usable_memory_fraction * memory_scale)
    model = resolve_model(row.get("model"))
    for path, value in (what_if or {}).items():
        dev = override(dev, path, value)
    fmt = _formats(row, dev)
    layouts = _submitter_layouts(row, model, dev, params)
    if not layouts:
        layouts = [_layout(row, model, dev, fmt, None if row.get("batch") in ("max", "slo") else _int(row, "batch"),
                           _int(row, "isl") + _int(row, "osl"), params)]
    results, last = [], None
    for group, replicas in layouts:
        try:
            results.append(_predict_on(row, model, fmt, params, group, replicas) if not slo else
                           _predict_slo(row, model, fmt, params, group, replicas))
        except RooflineError as e:   # a layout that does not hold the model
            last = e
    if not results:
        raise last or RooflineError("no layout holds the model")
    return max(results)[1]


def _predict_speedup(row: Row, params: EngineParams, what_if: dict[str, Any] | None, memory_scale: float) -> float:
    """A ``speedup`` row: the throughput of its setup with speculation over the same setup without (the ratio of two
    predictions of :data:`SPEEDUP_BASIS`, at the row's batch, lengths and devices)."""
    if (row.get("spec_method") or "none") == "none":
        raise RooflineError("a speedup row needs a spec_method: it is the speculative setup over the plain one")
    spec = attrs.evolve(row, fields={**row.fields, "metric": SPEEDUP_BASIS[row.get("metric")]})
    plain = attrs.evolve(spec, fields={**spec.fields, "spec_method": "none", "draft_len": "", "draft_model": "",
                                       "tree_tokens": "", "acceptance_length": "", "acceptance_rate": "",
                                       "draft_kv_budget": ""})
    return (predict_row(spec, params, what_if, memory_scale) / predict_row(plain, params, what_if, memory_scale))


def _submitter_layouts(row: Row, model: ModelSpec, device: Device, params: EngineParams) -> list[tuple[DeviceGroup, int]]:
    """For a max-throughput row that gives only its device count (MLPerf Offline submissions whose per-replica
    tensor parallelism is not stated): every split into data-parallel replicas of TP 1..max_tp; the prediction
    is the layout with the highest throughput, the one a submitter tuning for throughput would choose."""
    if (row.get("batch") not in ("max", "slo") or not row.get("n_devices") or row.get("tp") or row.get("pp")
            or device.family != "gpu"):
        return []
    n, max_tp = _int(row, "n_devices"), int(resolve_profile(device, params).max_tp)
    ep, dp = _int(row, "ep", 1), _int(row, "dp", 1)
    return [(DeviceGroup(device=device, tp=t, ep=ep, dp=dp), n // t) for t in TP_CHOICES
            if t <= max_tp and n % t == 0 and model.num_heads % t == 0 and t % ep == 0 and t % dp == 0]


def _predict_on(row: Row, model: ModelSpec, fmt: dict[str, Any], params: EngineParams, group: DeviceGroup,
                replicas: int) -> tuple[float, float]:
    """(total output tokens/s, the row's metric) on ``replicas`` copies of ``group``."""
    metric, isl, osl = row.get("metric"), _int(row, "isl"), _int(row, "osl")
    placement, gamma, acceptance = row_placement(row, group)

    settings: dict[str, Any] = {arg: _int(row, col) for col, arg in SERVING_COLUMNS.items() if row.get(col)}
    shapes = CompiledShapes(**{arg: _int(row, col) for col, arg in COMPILED_COLUMNS.items() if row.get(col)})

    def serve(batch: Any) -> Any:
        return evaluate_serving(model, placement, Request(input_tokens=isl, output_tokens=osl), batch=batch,
                                gamma=gamma, acceptance=acceptance, mode=row.get("serving") or "static",
                                target_formats=fmt, params=params, shapes=shapes, **settings)
    b = _batch(row, model, group, replicas, fmt, params, serve)
    per, rest = _offline_rest(row, b, replicas) if row.get("requests") else (0.0, 0.0)
    r = serve(np.array([float(b), rest]) if rest else float(b))   # the last wave in the same call: one evaluation
    if not np.ravel(r.fits)[0] and _admits_what_fits(row):
        b = min(b, _largest_fitting(row, model, group, fmt, params, serve))
        per, rest = _offline_rest(row, b, replicas) if row.get("requests") else (0.0, 0.0)
        r = serve(np.array([float(b), rest]) if rest else float(b))

    def at(name: str, i: int = 0) -> float:
        return float(np.ravel(getattr(r, name))[i])
    if not np.ravel(r.fits)[0]:
        raise RooflineError(f"does not fit in memory at batch {b}")
    if metric in ENERGY_METRICS and r.energy_note:
        raise RooflineError(r.energy_note)
    n = group.count * replicas
    # an offline run's waves each take osl x TPOT, or a lock-step wave's whole E2E (its prefill stalls included)
    per_token, scale = ("e2e_s", 1.0 / osl) if row.get("serving") == "waves" else ("tpot_s", 1.0)
    total = (float(offline_tokens_per_s(per, float(b), at(per_token) * scale, at(per_token, 1) * scale if rest else 0.0))
             * replicas if row.get("requests") else at("tokens_per_s") * replicas)
    value = {"decode_tokens_per_s_per_user": at("tokens_per_s_per_user"), "itl_ms": at("tpot_s") * 1e3,
             "ttft_ms": at("ttft_s") * 1e3, "output_tokens_per_s_per_device": total / n,
             "output_tokens_per_s_total": total, "total_tokens_per_s_per_device": total * (isl + osl) / osl / n,
             "energy_per_token_j": at("energy_per_token_j"), "power_w": at("power_w") * replicas}[metric]
    return total, float(value)


#: Latency-bound searches by run (the params kept alive beside their id, which keys them).
_SLO_RATES: dict[Any, Any] = {}


def _row_lengths(row: Row) -> Lengths:
    """The row's request lengths: its dataset's shipped histogram (``lengths``) with each axis scaled so its mean
    is the row's isl and osl (a dataset's reference outputs are not the served model's: the MLPerf Llama-2 set's
    GPT-4 answers average 219 tokens where Llama-2-70B writes 293), else fixed at isl and osl."""
    isl, osl = _int(row, "isl"), _int(row, "osl")
    if not row.get("lengths"):
        return Lengths.fixed(isl, osl)
    h = shipped_lengths(row.get("lengths"))
    return Lengths.of(np.maximum(h.input_tokens * isl / h.mean_input_tokens, 1.0),
                      np.maximum(h.output_tokens * osl / h.mean_output_tokens, 1.0), h.weights, name=h.name)


def _predict_slo(row: Row, model: ModelSpec, fmt: dict[str, Any], params: EngineParams, group: DeviceGroup,
                 replicas: int) -> tuple[float, float]:
    """(total output tokens/s, the row's metric) at the largest Poisson rate whose p99 TTFT and p99 TPOT meet the
    row's limits (MLPerf Server and Interactive, whose LoadGen sends queries as a Poisson process:
    https://github.com/mlcommons/inference_policies/blob/c7dc5ea53dbf8a3de304531a803d2327ae46bc60/inference_rules.adoc#L141),
    requests spread over the replicas. Its mean TTFT and TPOT are predicted at that rate too. A disaggregated
    deployment (``prefill_tp``, ``prefill_groups``: NVIDIA's v5.1 GB200 NVL72 Interactive run, 14 context servers at
    TP4 in front of 2 generation servers at TP8) prefills in that pool and decodes on the row's tp x pp replicas."""
    if (row.get("spec_method") or "none") != "none":
        raise RooflineError("speculative decoding under load is not modelled")
    limits = {"ttft_p99_s": float(row.get("p99_ttft_ms")) / 1e3, "tpot_p99_s": float(row.get("p99_tpot_ms")) / 1e3}
    settings: dict[str, Any] = {"token_budget": _int(row, "token_budget")} if row.get("token_budget") else {}
    if row.get("max_batch"):   # the cap is each scheduler's: one per attention data-parallel rank (as in _batch)
        settings["max_slots"] = _int(row, "max_batch") * group.dp
    settings["admission"] = _admission(row, group)
    pool = _prefill_pool_devices(row)
    placement = Placement(name=row.id, decode=group, prefill=_pool_group(row, model, group, fmt, params) if pool else None)
    if pool:   # a disaggregated deployment: its prefill groups form one pool in front of the decode replicas
        settings["prefill_groups"] = _int(row, "prefill_groups")
    key = (row.get("model"), group.describe(), repr(group.device), replicas, row.get("lengths"), row.get("isl"),
           row.get("osl"), tuple(limits.values()), row.get("prefill_tp"), row.get("prefill_groups"),
           repr(params), tuple(sorted(fmt.items())), tuple(sorted(settings.items())))
    hit = _SLO_RATES.get(key)
    if hit is None:   # a run's throughput, TTFT and TPOT rows share one search
        hit = _bounded(_SLO_RATES, key, (params, max_rate(model, placement,
                                                          Workload(lengths=_row_lengths(row)), limits,
                                                          replicas=replicas, params=params, formats=fmt, **settings)))
    rate, r = hit[1]
    if rate <= 0:
        raise RooflineError("no load meets the latency limits")
    total = float(r.output_tokens_per_s[0])
    value = {"output_tokens_per_s_total": total, "output_tokens_per_s_per_device": total / (group.count * replicas + pool),
             "ttft_ms": float(r.ttft_mean_s[0]) * 1e3, "itl_ms": float(r.tpot_mean_s[0]) * 1e3}
    if row.get("metric") not in value:
        raise RooflineError(f"{row.get('metric')} is not predicted at a latency-bound load")
    return total, value[row.get("metric")]


def _admission(row: Row, group: DeviceGroup) -> Admission:
    """When the run's scheduler let waiting prompts in (:mod:`roofline.serving.admission`): every ``poll_steps``
    steps (vLLM's V0 ``num_scheduler_steps``), and under TensorRT-LLM's attention-DP balance (``dp_balance`` yes,
    or yes:TIMEOUT:WAIT for its ``timeout_iters`` and ``batching_wait_iters``; yes alone: its defaults) once
    every one of the group's ``dp`` ranks has a prompt, or at the timeout."""
    poll = _int(row, "poll_steps") if row.get("poll_steps") else 1
    parts = row.get("dp_balance").lower().split(":")
    if parts[0] not in ("yes", "no", "") or (parts[0] != "yes" and len(parts) > 1) or len(parts) not in (1, 3) \
            or not all(p.isdigit() for p in parts[1:]):
        raise RooflineError(f"column dp_balance = {row.get('dp_balance')!r} is not yes, no or yes:TIMEOUT:WAIT")
    if parts[0] != "yes" or group.dp < 2:
        return Admission(poll_steps=poll)
    steps = [int(p) for p in parts[1:]] or [TRTLLM_BALANCE_TIMEOUT_STEPS, TRTLLM_BALANCE_WAIT_STEPS]
    return Admission(poll_steps=poll, balance_ranks=group.dp, balance_timeout_steps=steps[0],
                     balance_wait_steps=steps[1])


def _admits_what_fits(row: Row) -> bool:
    """Whether a row's engine, at a concurrency its KV memory cannot hold, runs as many sequences as fit while the
    rest wait (a continuous-batching server: vLLM's scheduler admits a request only when its blocks can be
    allocated, https://docs.vllm.ai/en/latest/design/arch_overview.html): its throughput and per-token times are
    then those of the batch that fits. A TTFT there includes the wait in the queue, which is not modelled, and a
    static batch runs all of its sequences or none."""
    return (row.get("serving") == "continuous" and row.get("batch") not in ("max", "slo")
            and row.get("metric") != "ttft_ms")


@attrs.frozen(kw_only=True)
class Validation:
    """Per-row results, skipped rows with reasons, and a summary by metric and by device."""

    rows: list[dict[str, Any]]
    skipped: list[dict[str, str]]

    @property
    def summary(self) -> dict[str, Any]:
        def stats(items: list[dict[str, Any]]) -> dict[str, float | None]:
            errs = np.abs([r["error"] for r in items])
            covered = [r["covered"] for r in items if r.get("covered") is not None]
            return {"n": int(errs.size), "median_abs_error": float(np.median(errs)),
                    "mean_abs_error": float(np.mean(errs)), "median_error": float(np.median([r["error"] for r in items])),
                    "interval_coverage": float(np.mean(covered)) if covered else None,
                    "memory_cliff_rows": sum(bool(r.get("memory_cliff")) for r in items)}
        out: dict[str, Any] = {"overall": stats(self.rows) if self.rows else {"n": 0}}
        for key in ("kind", "family", "metric", "hardware", "stack_family", "stack_version"):
            groups: dict[str, list[dict[str, Any]]] = {}
            for r in self.rows:
                label = (f"{r['stack_family']}{'' if r['family'] == 'gpu' else ' on ' + r['family']} "   # a Neuron
                         f"{r[key] or '(version not stated)'}" if key == "stack_version" else r[key])  # SDK's version
                groups.setdefault(label, []).append(r)
            out[f"by_{key}"] = {k: stats(v) for k, v in sorted(groups.items())}
        return out


#: validate's last answers (the least recently used dropped first) by the profile object (held here, so its id
#: is not reused while its entry lives) and the rows' contents: in one process (a notebook, the test suite, a
#: command that reports twice) the shipped data under the shipped calibration is predicted once. Profiles are
#: frozen records (their ``families`` table is a plain dict: change it in place and the old answers come back;
#: make a new Profile instead) and the specs they name are read once per process. A bare EngineParams is wrapped
#: anew on every call and never remembered. What it holds is bounded by rows (a row's answer is one small dict):
#: the shipped file five times over, so many small validations do not push out the big one.
_VALIDATED: dict[tuple[int, tuple[Any, ...]], tuple[Profile, Validation]] = {}
_VALIDATED_MAX_ROWS = 8_000


def validate(rows: list[Row], profile: Profile | EngineParams | None = None, jobs: int = 1) -> Validation:
    """Predict every row with the parameters of its serving stack's family (``profile``, default: the shipped
    calibration); one :class:`EngineParams` applies to every row. ``jobs`` > 1 processes share the rows (the same
    numbers in any number; ``roofline validate`` uses one per usable core, at most one per 200 rows)."""
    check_jobs(jobs)
    if profile is not None and not isinstance(profile, Profile):
        profile = Profile(default=profile)
        return _validate(rows, profile, jobs)
    prof = profile if profile is not None else shipped_profile()
    key = (id(prof), tuple((r.id, tuple(sorted(r.fields.items()))) for r in rows))
    hit = _VALIDATED.pop(key, None)
    if hit is None or hit[0] is not prof:
        hit = (prof, _validate(rows, prof, jobs))
    _VALIDATED[key] = hit   # the most recently used last; the least recently used goes first
    while len(_VALIDATED) > 1 and sum(len(k[1]) for k in _VALIDATED) > _VALIDATED_MAX_ROWS:
        del _VALIDATED[next(iter(_VALIDATED))]
    return Validation(rows=[dict(r) for r in hit[1].rows], skipped=[dict(s) for s in hit[1].skipped])


def _validate(rows: list[Row], prof: Profile, jobs: int) -> Validation:
    with workers(jobs) as pool:
        outcomes = _validate_share(rows, prof) if pool is None else pool.map_rows(_validate_share, rows, prof)
    done = with_row_intervals([o for o in outcomes if "error" in o], {r.id: r for r in rows})
    return Validation(rows=done, skipped=[o for o in outcomes if "reason" in o])


def _validate_share(rows: list[Row], prof: Profile) -> list[dict[str, Any]]:
    """Each row's prediction (a result record) or the reason it cannot be predicted (a skipped record)."""
    out: list[dict[str, Any]] = []
    for row in rows:
        try:
            try:
                measured = float(row.get("value"))
            except ValueError:
                raise RooflineError(f"column value = {row.get('value')!r} is not a number") from None
            if not math.isfinite(measured) or measured <= 0:
                raise RooflineError(f"measured value {row.get('value')!r} is not a positive number")
            if (row.get("grade") or "") not in ("", *GRADES):
                raise RooflineError(f"column grade = {row.get('grade')!r} is not one of {', '.join(GRADES)} "
                                    "(roofline/validation/README.md)")
            params = row_params(prof, row)
            predicted = predict_row(row, params)
            moved = _memory_sensitivity(row, params, predicted)
        except UnknownSpecError as e:   # the stage commands' --set advice is not validate's to take
            out.append({"id": row.id, "reason": f"{e.device}: {e.field} is not published for this device (a spec "
                        "file that gives it would let these rows be predicted)" if e.field else str(e)})
            continue
        except (RooflineError, ValueError) as e:
            out.append({"id": row.id, "reason": str(e)})
            continue
        out.append({"id": row.id, "metric": row.get("metric"), "hardware": row.get("hardware"),
                    "kind": row_kind(row),
                    "family": resolve_device(row.get("hardware")).family, "stack": row.get("stack"),
                    "stack_family": row_stack_family(row),
                    "model": row.get("model"), "grade": row.get("grade") or "", "predicted": predicted,
                    "measured": measured, "error": (predicted - measured) / measured,
                    "stack_version": stack_version(row), "memory_sensitivity": moved,
                    "memory_cliff": moved is not None and abs(moved) > CLIFF_THRESHOLD})
    return out


def _memory_sensitivity(row: Row, params: EngineParams, predicted: float) -> float | None:
    """How far a ``batch = max`` row's prediction moves for :data:`CLIFF_MEMORY_CHANGE` less usable memory (a
    relative change); None for a row whose batch memory does not set, or that no longer fits."""
    if row.get("batch") != "max":
        return None
    try:
        tight = predict_row(row, params, memory_scale=1.0 - CLIFF_MEMORY_CHANGE)
    except RooflineError:
        return None
    return (tight - predicted) / predicted
