"""Placements and requests: TTFT, TPOT, end-to-end latency, throughput, power and energy.

A :class:`Placement` maps the stages to device groups: prefill (or ``None``:
prefill shares the decode group), decode/verify (the target's group) and, for
speculative decoding, the draft. A :class:`Request` is (input, output) tokens.

Serving modes (docs/theory.md §6):

* ``continuous`` (steady state): the decode group runs ``batch`` sequences;
  requests finish at batch * tokens_per_step / osl per step. Aggregated, the
  steps also carry batch * tokens_per_step * isl / osl prefill tokens on
  average, as prompt chunks of up to ``chunk`` tokens (TensorRT-LLM's default
  token budget, 8192) in a share of the steps (the mean step mixes the two
  kinds); a new prompt's TTFT is its own chunked prefill, the wait for the
  prompts queued before it (M/D/1) and one step of the running batch.
  Disaggregated, a prefill group
  (batch ``prefill_batch``) serves prompts and the KV cache moves over
  ``kv_link``; prefill groups are provisioned exactly to the request rate, so
  the fleet holds a fractional number of them.
* ``static``: the whole batch is prefilled, then decoded together.
* ``waves``: ``batch`` prompts arrive together and are prefilled in steps of the token budget before the wave
  decodes, as a fixed-length ``--max-concurrency`` benchmark runs on a scheduler that puts prompts before
  decodes: the mean TTFT is about half the wave's prefill (:mod:`roofline.serving.waves`).

TPOT is the step (or speculative round, :mod:`roofline.serving.round`) time over
tokens per step, E2E = TTFT + (osl - 1) TPOT, interactivity = 1 / TPOT, and
energy follows :mod:`roofline.physics.energy` for every group (busy while
working, idle while waiting). Decode is timed at the mean context isl + osl/2. Memory is checked at the
final context isl + osl for static batches, and at the mean context for continuous batching: with a paged KV
cache (vLLM's PagedAttention, https://arxiv.org/abs/2309.06180) sequences at every stage of their output share
the cache, so in steady state the batch holds B x (isl + osl/2) tokens (docs/theory.md §6).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import attrs
import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import InfeasibleError, UnknownSpecError, WorkloadError, broadcast_errors
from ..physics.energy import DEFAULT_POWER, PowerModel, group_busy_w, group_idle_w
from ..physics.speculative import Acceptance
from ..physics.stages import prefill
from ..physics.timing import StageResult, require_feasible, spread
from ..records import ArrayRecord
from ..specs.execution import resolve_profile
from ..specs.formats import Formats, check_format_keys
from ..specs.models import ModelSpec
from ..specs.params import EngineParams, default_params
from ..specs.placement import Placement
from ..specs.prices import Prices, shipped_prices
from ..units import format_quantity
from ..workload import check_count, check_gamma, check_grid, check_instance, check_whole, counts
from .round import Drafter, Round, RoundPlan, run_round
from .waves import wave_prefill

Array = NDArray[np.float64]
MODES = ("continuous", "static", "waves")


def _tokens(name: str, value: Any) -> int:
    """A request's token count, a whole number in [1, 1e9] or a count string (``"8k"``)."""
    return check_whole(name, counts(name, value), minimum=1, maximum=10**9)


def _input_tokens(value: Any) -> int:
    return _tokens("input_tokens", value)


def _output_tokens(value: Any) -> int:
    return _tokens("output_tokens", value)


def _alias(name: str, value: Any, alias: str, other: Any) -> Any:
    """One value given by its name or its alias (``isl`` for ``input_tokens``), not both, not neither."""
    if value is not None and other is not None:
        raise WorkloadError(f"give {name} or its alias {alias}, not both")
    if value is None and other is None:
        raise WorkloadError(f"Request needs {name} (alias {alias})")
    return other if value is None else value


@attrs.frozen(kw_only=True, init=False)
class Request:
    """One request: input (prompt) and output tokens, whole numbers >= 1 (or count strings: ``"8k"``, ``"8Ki"``).

    ``isl`` and ``osl`` (the command line's ``--isl``/``--osl``) are aliases of ``input_tokens`` and
    ``output_tokens``."""

    input_tokens: int = attrs.field(converter=_input_tokens)
    output_tokens: int = attrs.field(converter=_output_tokens)

    def __init__(self, *, input_tokens: int | str | None = None, output_tokens: int | str | None = None,
                 isl: int | str | None = None, osl: int | str | None = None) -> None:
        self.__attrs_init__(input_tokens=_alias("input_tokens", input_tokens, "isl", isl),
                            output_tokens=_alias("output_tokens", output_tokens, "osl", osl))


def _optional_count(name: str, value: Any) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1):
        raise WorkloadError(f"CompiledShapes: {name} must be a whole number >= 1 or None, got {value!r}")
    return None if value is None else int(value)


def _decode_batch(value: Any) -> int | None:
    return _optional_count("decode_batch", value)


def _decode_context(value: Any) -> int | None:
    return _optional_count("decode_context", value)


def _prompt_tokens(value: Any) -> int | None:
    return _optional_count("prompt_tokens", value)


@attrs.frozen(kw_only=True)
class CompiledShapes:
    """The shapes an engine that runs ahead-of-time compiled graphs (AWS Neuron) executes, where they are not the
    request's: every decode step runs ``decode_batch`` sequences (the compiled token-generation batch; the empty
    slots are computed and their KV read like the others) attending ``decode_context`` positions each (the
    compiled length, or the token-generation bucket), and every prompt runs padded to ``prompt_tokens`` (the
    context-encoding bucket). None: the request's own shape. Sources: optimum-neuron traces its token-generation
    graph at ``tkg_batch_size = batch_size`` and, with ``enable_bucketing`` off (its default, never set by its vLLM
    plugin), one bucket of the full ``sequence_length`` for both graphs
    (https://github.com/huggingface/optimum-neuron/blob/b52f1a3a61ef124510170ec154025cc6b72eff61/optimum/neuron/models/inference/backend/modules/decoder/modeling_decoder.py#L363-L405,
    ``config.py`` of the same commit); vllm-neuron's decode graph reads ``ceil(max_model_len / block_size)`` KV
    blocks per request "regardless of the request's actual position in the sequence"
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/vllm-neuron/docs/design/vllm/decode-context-length-bucketing.html)."""

    decode_batch: int | None = attrs.field(default=None, converter=_decode_batch)
    decode_context: int | None = attrs.field(default=None, converter=_decode_context)
    prompt_tokens: int | None = attrs.field(default=None, converter=_prompt_tokens)


def check_context(model: ModelSpec, request: Request) -> None:
    """Refuse a request longer than ``model`` was built for (its config's ``max_position_embeddings``): the check
    every command that plans a deployment shares (size, placements, the emitted launch commands; an engine would
    refuse to start with it)."""
    length = request.input_tokens + request.output_tokens
    if model.max_context_tokens and length > model.max_context_tokens:
        raise WorkloadError(f"{model.id}: a request of {length:,} tokens ({request.input_tokens:,} in + "
                            f"{request.output_tokens:,} out) is beyond its {model.max_context_tokens:,}-token context "
                            "(max_position_embeddings)")


def drafter_of(placement: Placement) -> Drafter | None:
    """What drafts in ``placement``: None without speculation."""
    if placement.draft_kind is None:
        return None
    return Drafter(kind=placement.draft_kind, model=placement.draft_model, head_layers=placement.head_layers,
                   kv_budget=placement.draft_kv_budget, vocab=placement.draft_vocab)


#: Tokens one continuous-batching step may process when nothing else is said: TensorRT-LLM's
#: ``BuildConfig.max_num_tokens`` default (https://github.com/NVIDIA/TensorRT-LLM/blob/main/tensorrt_llm/builder.py);
#: vLLM and SGLang choose theirs per version and GPU (see :func:`_prompt_chunks`).
DEFAULT_TOKEN_BUDGET = 8192


@attrs.frozen(kw_only=True, repr=False)
class ServingResult(ArrayRecord):
    """Serving metrics of one placement; arrays broadcast over batch and gamma (batch first).

    Throughput, devices and power are per replica: one decode group, its draft
    group, and the (fractional) prefill groups it keeps busy. Infeasible points
    are NaN with ``fits`` False.
    """

    headline: ClassVar[tuple[str, ...]] = ("tokens_per_s_per_user", "batch", "gamma", "ttft_s", "e2e_s", "tokens_per_s",
                                           "tokens_per_s_per_kw", "energy_per_token_j", "fits")
    workload: ClassVar[tuple[str, ...]] = ("batch", "gamma", "alpha", "request.input_tokens", "request.output_tokens")

    placement: str
    description: str
    mode: str
    request: Request
    batch: Array
    gamma: Array
    expected_tokens: Array
    ttft_s: Array
    tpot_s: Array
    e2e_s: Array
    step_s: Array
    prefill_s: Array
    draft_s: Array
    verify_s: Array
    transfer_s: Array
    kv_transfer_s: Array
    tokens_per_s: Array
    devices: Array
    power_w: Array
    memory_per_device_bytes: Array
    power_by_group_w: dict[str, Array]
    fits: NDArray[np.bool_]
    prefill_bound: NDArray[np.str_]
    decode_bound: NDArray[np.str_]
    draft_bound: NDArray[np.str_]
    energy_note: str = ""
    #: cost of one replica per hour (NaN where a device has no price), and the prefill groups' share of it
    usd_per_hour: Array = attrs.field(factory=lambda: np.array(np.nan))
    prefill_usd_share: Array = attrs.field(factory=lambda: np.array(np.nan))
    #: whether the step's token budget keeps up with the prompts arriving at this load (False makes ``fits``
    #: False: the batch cannot be sustained, whatever the memory says), whether the weights, KV and workspace
    #: fit in memory, and the smallest budget that keeps up (B (gamma + 1) decode tokens plus B E isl / osl
    #: prompt tokens per step; 0 where prompts do not share the decode steps)
    budget_keeps_up: NDArray[np.bool_] = attrs.field(factory=lambda: np.array(True))
    fits_memory: NDArray[np.bool_] = attrs.field(factory=lambda: np.array(True))
    token_budget_needed: Array = attrs.field(factory=lambda: np.array(0.0))
    #: the step's token budget the result was evaluated with (``chunk`` of :func:`evaluate_serving`)
    token_budget: int = DEFAULT_TOKEN_BUDGET
    #: where no point fits in memory, what does not fit and by how much (bytes needed against usable); else ""
    memory_reason: str = ""
    #: each point's per-token alpha (NaN without speculation or for a positional or measured acceptance table)
    alpha: Array = attrs.field(factory=lambda: np.array(np.nan))
    #: the formats the target ran in (as given, else the checkpoint's and the devices' defaults): the decode
    #: group's; a separate prefill group's where it runs others (else None); the draft's (None without one)
    target_formats: Formats | None = None
    prefill_formats: Formats | None = None
    draft_formats: Formats | None = None

    @property
    def budget_starved(self) -> NDArray[np.bool_]:
        """Points that fit in memory but whose step token budget cannot keep up with the arriving prompts."""
        return np.asarray(self.fits_memory & ~self.budget_keeps_up)

    def why_infeasible(self, index: int | None = None) -> str:
        """Why the point at flat ``index`` is infeasible ("" where it is feasible): memory first, then a token
        budget that cannot keep up with the prompts arriving at that load. Without an index: the first point
        that is infeasible ("" where every point is feasible)."""
        fits = np.broadcast_to(self.fits, self.batch.shape)
        if index is None:
            bad = np.flatnonzero(~fits)
            if not bad.size:
                return ""
            index = int(bad[0])

        def at(a: Any) -> Any:
            return np.broadcast_to(a, self.batch.shape).flat[index]
        if bool(at(fits)):
            return ""
        if not bool(at(self.fits_memory)) or bool(at(self.budget_keeps_up)):
            need = float(at(self.memory_per_device_bytes))
            return self.memory_reason or ("does not fit at this batch: needs "
                                          f"{format_quantity(need, 'bytes')} per device" if math.isfinite(need)
                                          else "does not fit at this batch")
        return (f"a step's token budget ({self.token_budget}) cannot keep up with the prompts arriving at this batch: "
                f"it needs at least {float(at(self.token_budget_needed)):.0f} tokens per step (--token-budget)")

    @property
    def tokens_per_s_per_user(self) -> Array:
        return 1.0 / self.tpot_s

    @property
    def tokens_per_s_per_device(self) -> Array:
        return self.tokens_per_s / self.devices

    @property
    def tokens_per_s_per_kw(self) -> Array:
        return self.tokens_per_s / (self.power_w / 1000.0)

    @property
    def energy_per_token_j(self) -> Array:
        return self.power_w / self.tokens_per_s

    @property
    def energy_per_request_j(self) -> Array:
        return self.energy_per_token_j * self.request.output_tokens

    @property
    def usd_per_million_output_tokens(self) -> Array:
        """Cost of a million generated tokens: USD per hour / output tokens per hour x 1e6."""
        return self.usd_per_hour / 3600 / self.tokens_per_s * 1e6

    @property
    def usd_per_million_total_tokens(self) -> Array:
        """Cost of a million tokens in and out together (input tokens arrive at isl/osl per output token)."""
        ratio = self.request.input_tokens / self.request.output_tokens
        return self.usd_per_hour / 3600 / (self.tokens_per_s * (1 + ratio)) * 1e6

    @property
    def usd_per_million_input_tokens(self) -> Array:
        """Cost of a million prompt tokens: the prefill groups' cost over the input rate (disaggregated
        placements; NaN where prefill shares the decode devices and its cost cannot be split off)."""
        ratio = self.request.input_tokens / self.request.output_tokens
        return self.usd_per_hour * self.prefill_usd_share / 3600 / (self.tokens_per_s * ratio) * 1e6


@attrs.frozen(kw_only=True)
class _Prefill:
    """The prefill side of serving: its stage, TTFT terms, fit. ``mixed``: the prompt rides along the decode
    steps (aggregated continuous batching), so no separate prefill stage runs; ``result`` is then the
    prompt's own chunked prefill, which sets its TTFT."""

    result: StageResult
    mixed: bool
    time_s: Any
    kv_transfer_s: Any
    ttft_s: Any
    fits: Any
    batch: Any


@attrs.frozen(kw_only=True)
class _Chunks:
    """Prompt chunks riding the decode steps: tokens per chunk and the mean prompt position a chunk starts at."""

    tokens: Array
    prefix: Array


@attrs.frozen(kw_only=True)
class _Budget:
    """Where the steps' token budget keeps up with the prompts a batch needs, and the smallest budget that does."""

    keeps_up: NDArray[np.bool_]
    needed: Array


def _prompt_room(budget: int, batch: Any, G: Any, isl: int, whole: bool) -> Any:
    """Prompt tokens a pass of ``batch`` sequences has room for: the budget less their B (gamma + 1) decode
    tokens, at least one whole prompt where the stack does not chunk (``whole``)."""
    room = budget - batch * (G + 1)
    return np.maximum(room, float(isl)) if whole else room


def _token_budget(placement: Placement, request: Request, budget: int, *, B: Array, G: Array, E: Array,
                  whole: bool) -> _Budget:
    """Whether ``budget`` tokens per scheduled pass sustain a batch of B in aggregated continuous batching.

    In steady state requests finish at B E / osl per step, so the steps need B E isl / osl prompt tokens beside
    the B (gamma + 1) decode tokens. A pass holds at most ``budget`` tokens: the decode tokens go first and
    prompts take the room left (at least one whole prompt where the stack does not chunk, ``whole``:
    trtllm-bench sets max_num_tokens >= max_isl + max_batch_size). On a pipeline the batch runs as
    m = min(B, pp) microbatches and each is scheduled against the budget on its own (vLLM's pipeline-parallel
    engine keeps one scheduler per virtual engine, i.e. per microbatch in flight, each with the full
    max_num_batched_tokens: ``LLMEngine.scheduler``, https://github.com/vllm-project/vllm/blob/v0.5.3/vllm/engine/llm_engine.py),
    so each needs B/m of the tokens. Needed: ceil(B/m (gamma + 1) + B/m E isl / osl)."""
    isl, osl = request.input_tokens, request.output_tokens
    pp = placement.decode.pp
    per = B / np.minimum(B, pp) if pp > 1 else B
    room = _prompt_room(budget, per, G, isl, whole)
    prompts = per * E * isl / osl
    return _Budget(keeps_up=np.asarray(room >= prompts), needed=np.ceil(per * (G + 1) + prompts))


def _prompt_chunks(placement: Placement, request: Request, budget: int, *, B: Array, G: Array,
                   whole: bool = False) -> _Chunks | None:
    """How aggregated continuous batching prefills arriving prompts (:class:`_Chunks`), or None on a pipeline.

    A step holds at most ``budget`` tokens (TensorRT-LLM's max_num_tokens, 8192 by default: DEFAULT_TOKEN_BUDGET;
    vLLM's max_num_batched_tokens and SGLang's chunked_prefill_size, whose defaults change with version and GPU:
    pass the run's own value); the B (gamma + 1) decode tokens go first and a prompt
    chunk takes what is left, up to the whole prompt. An engine that does not chunk prompts (``whole``:
    TensorRT-LLM's default) raises the budget to hold a whole prompt beside the batch (trtllm-bench sets
    max_num_tokens >= max_isl + max_batch_size), so at least one whole prompt fits every step. The budget is
    the group's (SGLang divides chunked_prefill_size among attention data-parallel ranks). Whether the budget
    keeps up with the prompts is :func:`_token_budget`'s. On a pipeline (pp > 1) prompt tokens are spread over
    every step instead: its stages take them as extra microbatches, and no separate chunk steps are modelled
    (None). Not modelled: how full the budget runs. Near the smallest budget that keeps up a real queue of
    prompts grows without bound; here the point stays feasible with a finite TTFT up to that budget and is
    infeasible below it."""
    if placement.decode.pp > 1:
        return None
    isl = request.input_tokens
    tokens = np.maximum(np.minimum(float(isl), _prompt_room(budget, B, G, isl, whole)), 1.0)
    return _Chunks(tokens=tokens, prefix=tokens * (np.ceil(isl / tokens) - 1) / 2)


def offline_tokens_per_s(requests: float, batch: float, tpot_full_s: Any, tpot_rest_s: Any) -> Any:
    """Output tokens per second of an offline run on one replica: ``requests`` requests of one length, all
    queued at once, served ``batch`` at a time (trtllm-bench's throughput scenario, whose requests are all
    the same length: https://github.com/NVIDIA/TensorRT-LLM/blob/main/docs/source/developer-guide/perf-overview.md).
    Equal lengths finish together, so the run is a sequence of waves: floor(N / B) of B sequences and one of
    the N mod B left over, each taking osl x TPOT of its own batch. Throughput = N / (floor(N/B) TPOT(B) +
    TPOT(N mod B)): below the steady state B / TPOT(B) when the last wave is small (a half-full wave costs
    nearly a full one's memory-bound steps)."""
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 1
               for v in (requests, batch)):
        raise WorkloadError(f"offline runs need requests and batch numbers >= 1, got {requests!r} and {batch!r}")
    full = math.floor(requests / batch)
    rest = requests - full * batch
    return requests / (full * np.asarray(tpot_full_s) + (np.asarray(tpot_rest_s) if rest > 0 else 0.0))


def prefill_queue_s(arrivals_per_s: Any, service_s: Any) -> Array:
    """Mean wait of a prompt for the prompts ahead of it: M/D/1 (Poisson arrivals, fixed service time s),
    Pollaczek-Khinchine W_q = rho s / (2 (1 - rho)) with rho = lambda s (Kleinrock, Queueing Systems I, 1975,
    §5.7; https://en.wikipedia.org/wiki/M/D/1_queue). In steady-state continuous batching lambda is the
    completion rate B E / (osl T_step) and s the engine time one prompt's chunks add to the steps, so rho is
    the share of step time spent on prompts, below 1 by construction (capped at 0.99 as a guard)."""
    rho = np.minimum(np.asarray(arrivals_per_s, dtype=float) * service_s, 0.99)
    return rho * service_s / (2.0 * (1.0 - rho))


def _compiled(request: Request, shapes: CompiledShapes | None, B: Array) -> tuple[CompiledShapes, Request, Array]:
    """(the shapes, the request as its passes run it, the batch its steps run) under ``shapes``."""
    shapes = check_instance("shapes", shapes, CompiledShapes) or CompiledShapes()
    isl, pad = request.input_tokens, shapes.prompt_tokens
    if pad is not None and isl > pad:
        raise WorkloadError(f"a prompt of {isl:,} tokens does not fit the compiled {pad:,}")
    ran = request if pad is None else Request(input_tokens=pad, output_tokens=request.output_tokens)
    return shapes, ran, B if shapes.decode_batch is None else np.maximum(B, float(shapes.decode_batch))


def _prefill_phase(model: ModelSpec, placement: Placement, request: Request, fmt: Formats, *, mode: str,
                   batch: Array, step_s: Array, queue_s: Array, prefill_batch: int, chunk: int,
                   params: EngineParams) -> _Prefill:
    isl = request.input_tokens
    kw: dict[str, Any] = dict(params=params, on_infeasible="nan", **fmt.names())
    if mode == "waves":   # the wave's prompts arrive together and are prefilled before it decodes (waves.py)
        w = wave_prefill(model, placement.decode, prompt_tokens=isl, batch=batch, budget_tokens=chunk,
                         whole=params.chunked_prefill is False, kw=kw)
        return _Prefill(result=w.step, mixed=False, time_s=w.time_s, kv_transfer_s=np.zeros(batch.shape),
                        ttft_s=w.ttft_s, fits=w.fits, batch=np.minimum(batch, w.prompts_per_step))
    aggregated = placement.prefill is None
    if aggregated and mode == "continuous":
        # the new prompt is prefilled in chunks of up to `chunk` tokens (whole where the stack does not chunk) as
        # soon as it arrives, after the prompts queued before it; while other sequences are running it also
        # waits for one of their steps (§6)
        chunked = isl > chunk and params.chunked_prefill is not False
        alone = prefill(model, placement.decode, prompt=isl, batch=1, chunk=chunk if chunked else None, **kw)
        zero = np.zeros(batch.shape)
        return _Prefill(result=alone, mixed=True, time_s=zero, kv_transfer_s=zero,
                        ttft_s=alone.time_s + np.where(batch > 1, queue_s + step_s, 0.0),
                        fits=spread(alone.fits, batch.shape), batch=zero)
    p_batch = batch if mode == "static" else np.full(batch.shape, float(prefill_batch))
    group = placement.prefill or placement.decode
    r = prefill(model, group, prompt=isl, batch=p_batch, **kw)
    time_s, fits = r.time_s, r.fits
    if mode == "static" and not np.all(r.fits):
        # a batch whose prompts' activations do not fit at once is prefilled one prompt after another (as
        # MagicDec's engine prefills 128 prompts of 32k tokens on 8 A100s): the batch's prefill is `batch` passes
        # of one prompt, and it fits where one prompt's does (the decode checks the batch's KV)
        one = prefill(model, group, prompt=isl, batch=1, **kw)
        time_s = np.where(r.fits, r.time_s, p_batch * one.time_s)
        fits = r.fits | spread(one.fits, np.shape(r.fits))
        r = r if np.any(r.fits) else one
    kv = np.zeros(batch.shape)
    if not aggregated:   # layer-wise streaming hides all but the last layer's transfer (docs/theory.md §5.6)
        kv = kv_transfer_s(model, placement, fmt.kv, isl, time_s, batch=p_batch)
    return _Prefill(result=r, mixed=False, time_s=time_s, kv_transfer_s=kv, ttft_s=time_s + kv, fits=fits,
                    batch=p_batch)


def kv_transfer_s(model: ModelSpec, placement: Placement, kv_format: str, input_tokens: ArrayLike, prefill_s: Any,
                  batch: Any = 1.0) -> Array:
    """Time the KV of ``batch`` prompts of ``input_tokens`` adds on its way to the decode group: the link's latency
    + bytes / bandwidth, all but the last layer's share hidden behind the prefill by layer-wise streaming
    (docs/theory.md §5.6)."""
    tokens = np.asarray(input_tokens)
    kv_bytes = np.reshape([model.kv_cache_bytes(int(n), kv_format) for n in tokens.ravel()], tokens.shape)
    raw = placement.kv_link.latency_s + batch * kv_bytes / placement.kv_link.bandwidth_bytes_per_s
    return np.maximum(0.0, raw - np.asarray(prefill_s) * (1 - 1 / model.num_layers))


def _tokens_per_s(placement: Placement, pre: _Prefill, *, mode: str, B: Array, E: Array, step_s: Array,
                  e2e_s: Array, osl: int) -> Array:
    """Output tokens per second of one replica (docs/theory.md §3.6, §6): the steady state's B E per step; a static
    batch's or a wave's B osl per cycle (its E2E); disaggregated, B osl over the slower of the prefill group's
    batch and the decode's rounds."""
    if mode == "continuous":
        return B * E / step_s
    if placement.prefill is None:
        return B * osl / e2e_s
    return B * osl / np.maximum(pre.time_s + pre.kv_transfer_s, (osl - 1) * step_s / E)


def _devices_by_group(placement: Placement, pre: _Prefill, *, mode: str, tokens_per_s: Array, osl: int,
                      shape: tuple[int, ...]) -> dict[str, Array]:
    """Devices per replica by group: the decode group, a separate draft group, and the prefill groups (in
    continuous disaggregated serving a fractional number, provisioned to the request rate)."""
    out = {"decode": np.full(shape, float(placement.decode.count))}
    if placement.speculative and placement.draft is not None:
        out["draft"] = np.full(shape, float(placement.draft.count))
    if placement.prefill is not None:
        groups = tokens_per_s / osl * pre.time_s / pre.batch if mode == "continuous" else np.ones(shape)
        out["prefill"] = spread(groups * placement.prefill.count, shape)
    return out


def _power_by_group(placement: Placement, rnd: Round, pre: _Prefill, devices: dict[str, Array], *, mode: str,
                    E: Array, step_s: Array, e2e_s: Array, osl: int, power: PowerModel) -> dict[str, Array]:
    """Mean power of each group (decode, draft, prefill) per replica."""
    dec = placement.decode
    per_round = rnd.energy_j(power)
    groups = {"decode": per_round["target"], **({"draft": per_round["draft"]} if "draft" in per_round else {})}
    pg = placement.prefill or dec
    if mode == "continuous":
        by_group = {k: e / step_s for k, e in groups.items()}
        if placement.prefill is not None:
            by_group["prefill"] = devices["prefill"] / pg.count * group_busy_w(pg, pre.result, power)
        return by_group
    rounds = (osl - 1) / E                                              # static: one batch cycle
    energy = {k: e * rounds for k, e in groups.items()}
    decode_s = rounds * step_s
    if placement.prefill is None:
        energy["decode"] = energy["decode"] + group_busy_w(dec, pre.result, power) * pre.time_s
        cycle = e2e_s
    else:
        cycle = np.maximum(pre.time_s + pre.kv_transfer_s, decode_s)
        energy["prefill"] = group_busy_w(pg, pre.result, power) * pre.time_s + group_idle_w(pg, power) * (cycle - pre.time_s)
        energy["decode"] = energy["decode"] + group_idle_w(dec, power) * (cycle - decode_s)
    return {k: e / cycle for k, e in energy.items()}


def _usd_per_hour(placement: Placement, devices: dict[str, Array], power_w: Array, prices: Prices) -> Array:
    """Cost rate of one replica: each group's devices at their price per hour, plus electricity where priced."""
    group_of = {g: d for g, d in (("decode", placement.decode), ("draft", placement.draft),
                                  ("prefill", placement.prefill)) if d is not None}   # devices has these groups only
    usd = sum((n * prices.usd_per_hour(group_of[g].device.id) for g, n in devices.items()), np.zeros(()))
    return usd + (np.nan_to_num(power_w) / 1000 * prices.usd_per_kwh if prices.usd_per_kwh else 0.0)


def _check_scheduler(mode: str, chunk: Any, poll_steps: Any) -> None:
    """The scheduler's settings: whole numbers, and polling only where prompts arrive between polls."""
    for name, v in (("chunk (tokens per step)", chunk), ("poll_steps (decode steps between polls)", poll_steps)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise WorkloadError(f"{name} must be a whole number >= 1, got {v!r}")
    if mode != "continuous" and poll_steps != 1:
        raise WorkloadError(f"poll_steps delays prompts that arrive between a continuous scheduler's polls; mode "
                            f"{mode} has no such arrivals (poll_steps = {poll_steps})")


def _checked(placement: Placement, *, batch: ArrayLike, gamma: ArrayLike, acceptance: Acceptance | float | None,
             mode: str, prefill_batch: int) -> tuple[Array, Array, Acceptance | None]:
    if mode not in MODES:
        raise WorkloadError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "waves" and placement.prefill is not None:
        raise WorkloadError(f"mode waves prefills each wave on the decode group; placement {placement.name!r} has a "
                            "separate prefill group (serve it continuous)")
    check_whole("prefill_batch", prefill_batch)
    G = check_gamma(gamma)
    if not placement.speculative and np.any(G != 0):
        raise WorkloadError(f"placement {placement.name!r} does not speculate: gamma must be 0")
    if placement.speculative and acceptance is None:
        raise WorkloadError(f"placement {placement.name!r} speculates: give an acceptance (alpha or Acceptance)")
    acc = acceptance if isinstance(acceptance, Acceptance) or acceptance is None else Acceptance.geometric(acceptance)
    if not placement.speculative:
        acc = None   # nothing is drafted: an acceptance, or an array of alphas, has no point to change
    B = check_count("batch", batch, minimum=1)
    alphas = np.zeros(acc.shape if acc is not None else ())   # an array of alphas adds its axes to the grid
    check_grid(B, G, alphas, names=("batch", "gamma", "alphas"))
    B, G, _ = np.broadcast_arrays(B, G, alphas)
    return B, G, acc


@broadcast_errors
def evaluate_serving(model: ModelSpec, placement: Placement, request: Request, *, batch: ArrayLike,
                     gamma: ArrayLike = 0, acceptance: Acceptance | float | None = None, mode: str = "continuous",
                     prefill_batch: int = 1, chunk: int = DEFAULT_TOKEN_BUDGET, poll_steps: int = 1,
                     target_formats: Mapping[str, Any] | None = None, draft_formats: Mapping[str, Any] | None = None,
                     params: EngineParams | None = None, power: PowerModel = DEFAULT_POWER,
                     prices: Prices | None = None, shapes: CompiledShapes | None = None) -> ServingResult:
    """Serve ``request`` with ``placement``: latency, throughput, energy and cost per batch (and gamma).

    ``batch`` and ``gamma`` broadcast (``batch[:, None]``, ``gamma[None, :]`` sweeps a grid).
    Without speculation gamma must be 0. Draft formats default to the draft device's native format.
    ``chunk``: the step's token budget; ``poll_steps``: decode steps the scheduler runs between its polls for
    new requests (SGLang's ``--scheduler-recv-interval``; 1: every step).
    ``prices`` (default: the shipped ``hardware_specs/prices/prices.toml``) turn devices into dollars.
    ``shapes``: a static-shape engine's compiled shapes (:class:`CompiledShapes`), at which its passes are timed.
    """
    m = check_instance("model", model, ModelSpec, optional=False)
    if not isinstance(placement, Placement) or not isinstance(request, Request):
        raise WorkloadError("evaluate_serving needs a Placement and a Request")
    B, G, acc = _checked(placement, batch=batch, gamma=gamma, acceptance=acceptance, mode=mode,
                         prefill_batch=prefill_batch)
    p, _, _ = (check_instance("params", params, EngineParams) or default_params(),
               check_instance("power", power, PowerModel, optional=False), check_instance("prices", prices, Prices))
    _check_scheduler(mode, chunk, poll_steps)
    isl, osl = request.input_tokens, request.output_tokens
    shapes, ran, Bd = _compiled(request, shapes, B)   # ran: the request padded to the compiled prompt
    fmt, fmt_prefill = _target_formats(m, placement, check_format_keys(target_formats, "target_formats"))
    E, mixed = acc.expected_tokens(G) if acc is not None else np.ones_like(G), placement.prefill is None and mode == "continuous"
    plan = RoundPlan(target=m, target_group=placement.decode, target_formats=fmt, drafter=drafter_of(placement),
                     draft_group=placement.draft, draft_formats=draft_formats, link=placement.draft_link,
                     shared=placement.draft is None, tree_tokens=placement.tree_tokens if placement.speculative else None)
    chunks = _prompt_chunks(placement, ran, chunk, B=B, G=G, whole=p.chunked_prefill is False) if mixed else None
    budget = _token_budget(placement, ran, chunk, B=B, G=G, E=E, whole=p.chunked_prefill is False) if mixed else None
    end = isl + osl // 2 if mode == "continuous" and p.kv_admission != "reserve" else isl + osl - 1
    rnd = run_round(plan, batch=Bd, gamma=G, context=float(shapes.decode_context or isl + osl // 2), params=p,
                    extra_tokens=E * ran.input_tokens / osl * B / Bd if mixed else 0.0,
                    chunk_tokens=chunks.tokens if chunks else None, chunk_prefix=chunks.prefix if chunks else 0.0,
                    fit_context=float(shapes.decode_context or end))
    step = rnd.draft_s + rnd.verify.time_s + rnd.transfer_s
    service = ran.input_tokens / chunks.tokens * rnd.chunk_s if chunks else None   # step time one prompt adds
    queue = prefill_queue_s(B * E / (osl * step), service) if service is not None else np.zeros(B.shape)
    if mixed:   # a request waits for the scheduler's next poll: (N - 1) / 2 steps more than polling every step
        queue = queue + (poll_steps - 1) / 2 * step
    pre = _prefill_phase(m, placement, ran, fmt_prefill, mode=mode, batch=B, step_s=step, queue_s=queue,
                         prefill_batch=prefill_batch, chunk=chunk, params=p)
    overhead = resolve_profile((placement.prefill or placement.decode).device, p).request_overhead_s
    pre = attrs.evolve(pre, ttft_s=pre.ttft_s + overhead)   # the serving stack's per-request overhead
    # a wave's requests all end on its last step: each one's E2E runs from the wave's start (TPOT then carries the
    # prompts prefilled after its own); elsewhere a request starts decoding at its first token
    e2e = (pre.time_s + overhead if mode == "waves" else pre.ttft_s) + (osl - 1) * step / E
    tpot = step / E
    if mode == "waves":   # one output token: no token after the first, so no time per output token
        tpot = (e2e - pre.ttft_s) / (osl - 1) if osl > 1 else np.full(B.shape, np.nan)
    tokens_per_s = _tokens_per_s(placement, pre, mode=mode, B=B, E=E, step_s=step, e2e_s=e2e, osl=osl)
    fits = rnd.fits & pre.fits & (budget.keeps_up if budget else True)
    note = ""
    devices = _devices_by_group(placement, pre, mode=mode, tokens_per_s=tokens_per_s, osl=osl, shape=B.shape)
    try:
        by_group = _power_by_group(placement, rnd, pre, devices, mode=mode, E=E, step_s=step, e2e_s=e2e, osl=osl,
                                   power=power)
        by_group = {k: np.where(fits, np.broadcast_to(w * power.pue, B.shape), np.nan) for k, w in by_group.items()}
        power_w = sum(by_group.values(), np.zeros(B.shape))
    except UnknownSpecError as e:
        note, by_group = f"power not computed: {e}", {}
        power_w = np.full(B.shape, np.nan)
    prices = prices if prices is not None else shipped_prices()
    usd = _usd_per_hour(placement, devices, power_w, prices)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = (devices["prefill"] * prices.usd_per_hour(placement.prefill.device.id) / usd
                 if placement.prefill is not None else np.full(B.shape, np.nan))
    return attrs.evolve(_result(placement, request, mode, rnd, pre, B=B, G=G, E=E, step=step, e2e=e2e, tpot=tpot,
                                tokens_per_s=tokens_per_s, devices=sum(devices.values(), np.zeros(B.shape)), power_w=power_w,
                                by_group=by_group, fits=fits, note=note, usd_per_hour=usd, prefill_usd_share=share),
                        budget_keeps_up=np.broadcast_to(budget.keeps_up if budget else True, B.shape).copy(),
                        fits_memory=np.broadcast_to(rnd.fits & pre.fits, B.shape).copy(),
                        token_budget_needed=np.broadcast_to(budget.needed if budget else 0.0, B.shape).copy(),
                        token_budget=int(chunk), memory_reason=_memory_reason(rnd, pre),
                        alpha=np.broadcast_to(acc.alpha_or_nan(G) if acc is not None else np.nan, B.shape).copy(),
                        **_formats_ran(rnd, pre))


def _formats_ran(rnd: Round, pre: _Prefill) -> dict[str, Any]:
    """The formats the passes ran in (the stack's LM head applied): the decode group's, the prefill's where they
    differ (a separate group of other devices), the draft's."""
    decode, prompt = rnd.verify.formats, pre.result.formats
    return {"target_formats": decode, "prefill_formats": None if prompt.as_dict() == decode.as_dict() else prompt,
            "draft_formats": rnd.draft.formats if rnd.draft is not None else None}


def _target_formats(model: ModelSpec, placement: Placement, given: Mapping[str, Any]) -> tuple[Formats, Formats]:
    """(decode, prefill) formats of the target: each group in its own devices' defaults (:meth:`Formats.for_model`),
    the formats given kept; a separate prefill group writes the KV cache in the format the decode group reads
    every step (storing it needs no units of that format: attention computes in the activations' format)."""
    decode = Formats.for_model(model, **given, devices=(placement.decode.device,))
    if placement.prefill is None or placement.prefill.device == placement.decode.device:
        return decode, decode
    return decode, Formats.for_model(model, **{**given, "kv": decode.kv}, devices=(placement.prefill.device,))


def _memory_reason(rnd: Round, pre: _Prefill) -> str:
    """Why no point holds the model ("" where one does): the round's stages first, then the prompt's prefill."""
    if np.any(rnd.fits & pre.fits):
        return ""
    if not np.any(rnd.fits):
        return rnd.why_infeasible()
    try:
        require_feasible(pre.result)
    except InfeasibleError as e:
        return str(e)
    return "the decode and prefill stages do not fit at the same batch"


def _result(placement: Placement, request: Request, mode: str, rnd: Round, pre: _Prefill, *, B: Array, G: Array,
            E: Array, step: Array, e2e: Array, tpot: Array, tokens_per_s: Array, devices: Array, power_w: Any,
            by_group: dict[str, Array], fits: NDArray[np.bool_], note: str, usd_per_hour: Array,
            prefill_usd_share: Array) -> ServingResult:
    nan = np.where(fits, 1.0, np.nan)

    def full(a: Any) -> Array:
        return spread(a, B.shape)

    def bound(r: StageResult | None) -> NDArray[np.str_]:
        return spread(r.bound, B.shape) if r is not None else np.full(B.shape, "—")

    return ServingResult(
        placement=placement.name, description=placement.describe(), mode=mode, request=request, batch=B, gamma=G,
        expected_tokens=full(E), ttft_s=pre.ttft_s * nan, tpot_s=tpot * nan, e2e_s=e2e * nan, step_s=step * nan,
        prefill_s=full(pre.time_s) * nan, draft_s=rnd.draft_s * nan, verify_s=rnd.verify.time_s * nan,
        transfer_s=rnd.transfer_s * nan, kv_transfer_s=full(pre.kv_transfer_s) * nan, tokens_per_s=tokens_per_s * nan,
        devices=full(devices), power_w=full(power_w) * nan,
        memory_per_device_bytes=full(rnd.verify_end.memory_per_device_bytes), power_by_group_w=by_group, fits=fits,
        prefill_bound=bound(None if pre.mixed else pre.result), decode_bound=bound(rnd.verify), draft_bound=bound(rnd.draft),
        energy_note=note, usd_per_hour=full(usd_per_hour) * nan,
        prefill_usd_share=full(prefill_usd_share) * nan)

