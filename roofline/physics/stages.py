"""The inference stages: prefill, decode step, speculative verify and draft.

Each function takes a :class:`ModelSpec`, a :class:`DeviceGroup` and workload arguments that broadcast as
numpy arrays, and returns a frozen :class:`StageResult` with ``time_s``, ``compute_s``, ``memory_s``, ``bound``
and the rest. Formats: ``weights`` (non-expert), ``experts`` (default: the checkpoint's, e.g. MXFP4 for gpt-oss,
else ``weights``), ``kv``, ``activations``. Names (a preset id, a config path, ``"b200:8"``) are resolved to
records at the door, :mod:`roofline.api` (``roofline.decode_step`` and the rest) and the command line, never
here.
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np
from numpy.typing import ArrayLike

from ..errors import WorkloadError, broadcast_errors
from ..memo import MISSING, IdentityMemo
from ..specs.devices import Device
from ..specs.execution import resolve_profile
from ..specs.formats import Formats
from ..specs.groups import DeviceGroup, with_layout
from ..specs.models import ModelSpec
from ..specs.params import EngineParams, default_params
from ..workload import check_count, check_gamma, check_grid, check_whole
from . import memory
from .timing import StageResult, accumulate, check_feasible, combine, evaluate_pass, finite, pass_plan, time_pass

__all__ = ["StageResult", "decode_step", "draft", "draft_head", "max_batch", "prefill", "verify"]

#: A stage evaluated pass by pass (chunked prefill, gamma draft steps) is refused beyond this many passes.
MAX_PASSES = 100_000


@attrs.frozen(kw_only=True)
class Setup:
    """The records one stage call runs on, resolved once at the public boundary."""

    model: ModelSpec
    group: DeviceGroup
    formats: Formats
    params: EngineParams


def records(model: ModelSpec, device: DeviceGroup) -> None:
    """Refuse anything but the records (a name is resolved at the door: :mod:`roofline.api`, the command line)."""
    for name, value, kind in (("model", model, ModelSpec), ("device", device, DeviceGroup)):
        if not isinstance(value, kind):
            raise WorkloadError(f"{name} must be a {kind.__name__} here, got {value!r}: roofline.physics takes "
                                "records; roofline.decode_step and the other public stage functions resolve ids")


def setup(model: ModelSpec, device: DeviceGroup, *, tp: int | None, ep: int | None, weights: str | None,
          experts: str | None, kv: str | None, activations: str | None, params: EngineParams | None,
          head: str | None = None) -> Setup:
    """The records one stage runs on: the group with ``tp`` and ``ep`` filled in, and the formats (the
    checkpoint's weight and expert formats by default)."""
    records(model, device)
    m, g = model, with_layout(device, tp=tp, ep=ep)
    if g.ep > 1 and not m.is_moe:   # it would change nothing, and look as if it had been modelled
        raise WorkloadError(f"ep={g.ep} spreads routed experts over devices, and {m.id} has none")
    if params is not None and not isinstance(params, EngineParams):
        raise WorkloadError(f"params must be an EngineParams, got {type(params).__name__}")
    names = (weights, experts, kv, activations, head)
    return Setup(model=m, group=g, formats=_formats(m, g.device, names),
                 params=params if params is not None else default_params())


#: setup's formats by the identity of the model and the device and the format names given
_FORMATS = IdentityMemo(1024)


def _formats(model: ModelSpec, device: Device, names: tuple[str | None, ...]) -> Formats:
    """:meth:`Formats.for_model` of ``model`` on ``device`` with the formats ``names`` (weights, experts, kv,
    activations, head), remembered when they are names."""
    remember = all(n is None or isinstance(n, str) for n in names)
    hit = _FORMATS.get((model, device), names) if remember else MISSING
    if hit is not MISSING:
        return hit
    weights, experts, kv, activations, head = names
    f = Formats.for_model(model, weights=weights, experts=experts, kv=kv, activations=activations, head=head,
                          devices=(device,))
    return _FORMATS.put((model, device), names, f) if remember else f


def _scalar(*values: ArrayLike) -> bool:
    return all(np.ndim(v) == 0 for v in values)


@broadcast_errors
def decode_step(model: ModelSpec, device: DeviceGroup, *, batch: ArrayLike, context: ArrayLike, weights: str | None = None,
                experts: str | None = None, kv: str | None = None, activations: str | None = None, head: str | None = None,
                tp: int | None = None, ep: int | None = None, params: EngineParams | None = None,
                on_infeasible: str = "auto") -> StageResult:
    """One decode step: ``batch`` sequences each add one token after ``context`` cached tokens.

    Reads all (touched) weights once and each sequence's KV cache once:
    bytes = Q_w(B) + B * KV_seq(L) (docs/theory.md §3.3; the scaling book, "(Batch x KV size
    + Parameter size) / Total memory bandwidth", https://jax-ml.github.io/scaling-book/inference/).
    """
    s = setup(model, device, tp=tp, ep=ep, weights=weights, experts=experts, kv=kv, activations=activations,
              params=params, head=head)
    B, L = check_count("batch", batch, minimum=1), check_count("context", context)
    check_grid(B, L)
    r = evaluate_pass(s.model, s.group, s.formats, batch=B, new_tokens=1.0, prefix_tokens=L, logits_per_seq=1.0,
                      mla_absorbed=True, stage="decode", params=s.params)
    return check_feasible(r, on_infeasible, _scalar(batch, context))


@broadcast_errors
def prefill(model: ModelSpec, device: DeviceGroup, *, prompt: ArrayLike, batch: ArrayLike = 1, prefix: ArrayLike = 0,
            chunk: int | None = None, weights: str | None = None, experts: str | None = None, kv: str | None = None,
            activations: str | None = None, head: str | None = None, tp: int | None = None, ep: int | None = None,
            params: EngineParams | None = None, on_infeasible: str = "auto") -> StageResult:
    """Prefill ``prompt`` tokens per sequence (after ``prefix`` cached ones), logits for the last only.

    FLOP = 2 P_mat S + causal attention (exact) (docs/theory.md §3.2). With ``chunk``
    = C (Sarathi-Serve chunked prefill, https://arxiv.org/abs/2403.02310) the prompt runs as
    ceil(S/C) passes: the FLOP are unchanged, weights are re-read every chunk and each chunk
    re-reads the KV of the chunks before it.
    """
    s = setup(model, device, tp=tp, ep=ep, weights=weights, experts=experts, kv=kv, activations=activations,
              params=params, head=head)
    S, P = check_count("prompt", prompt, minimum=1), check_count("prefix", prefix)
    Bb = check_count("batch", batch, minimum=1)
    check_grid(S, P, Bb)
    stream = _stream_tokens(s)
    if chunk is None and not stream:
        r = evaluate_pass(s.model, s.group, s.formats, batch=Bb, new_tokens=S, prefix_tokens=P, logits_per_seq=1.0,
                          mla_absorbed=False, params=s.params, stage="prefill")
        return check_feasible(r, on_infeasible, _scalar(batch, prompt, prefix))
    S, P, Bb = np.broadcast_arrays(S, P, Bb)
    C = check_whole("chunk", chunk) if chunk is not None else _stream_chunk(s, S, P, Bb, stream)
    n_chunks = np.ceil(S / C)
    if n_chunks.max() > MAX_PASSES:
        raise WorkloadError(f"prompt / chunk gives {n_chunks.max():,.0f} passes; use a chunk of at least "
                            f"{int(np.ceil(S.max() / MAX_PASSES))} tokens")
    results, masks = [], []
    for j in range(int(n_chunks.max())):
        c = np.clip(S - j * C, 0, C)
        last = np.asarray(j == n_chunks - 1).astype(float)
        results.append(evaluate_pass(s.model, s.group, s.formats, batch=Bb, new_tokens=np.maximum(c, 1),
                                     prefix_tokens=P + j * C, logits_per_seq=last, mla_absorbed=False,
                                     params=s.params, stage="prefill"))
        masks.append(c > 0)
    if len(results) == 1:   # one chunk: the prompt's own pass
        return check_feasible(attrs.evolve(results[0], stage="prefill"), on_infeasible, _scalar(batch, prompt, prefix))
    out = combine(results, masks, stage=f"prefill (chunk {C})")
    if stream:
        out = _streamed(out, results, masks, pp=s.group.pp, micro=np.minimum(Bb, s.group.pp), chunk=C)
    return check_feasible(out, on_infeasible, _scalar(batch, prompt, prefix))


#: A streamed prefill is cut into at most this many chunks (the flow shop's optimum is far below it).
MAX_STREAM_CHUNKS = 512


def _stream_tokens(s: Setup) -> int:
    """The smallest chunk a compiled pipeline streams a prompt in (its profile's ``prefill_stream_tokens``), or 0
    where nothing streams: a family that does not, or a group of one stage, where chunks would only follow one
    another (each re-reading the weights and paying the fixed costs) with nothing to overlap."""
    return int(resolve_profile(s.group.device, s.params).prefill_stream_tokens) if s.group.pp > 1 else 0


def _stream_chunk(s: Setup, S: Any, P: Any, B: Any, smallest: int) -> int:
    """The chunk a streamed prompt is cut into: the count n that minimises the flow shop's makespan.

    With the prompt's traversal work W (its one pass less a one-token pass) in n chunks each paying the fixed
    traversal cost O (the one-token pass: fixed costs and the weight stream), the makespan of m microbatches on pp
    stages is (m (W + n O) + (pp - 1)(W / n + O)) / pp, least at n* = sqrt((pp - 1) W / (m O)) (d/dn = 0). Taken at
    the longest prompt of the grid, rounded to a multiple of ``smallest`` tokens (the profile's granularity),
    between one chunk and :data:`MAX_STREAM_CHUNKS`."""
    i = np.unravel_index(int(np.argmax(S)), S.shape) if S.shape else ()
    n_tok, pre, b = float(S[i]), float(P[i]), float(B[i])
    m = min(b, float(s.group.pp))

    def traversal(tokens: float) -> float:
        r = evaluate_pass(s.model, s.group, s.formats, batch=b, new_tokens=tokens, prefix_tokens=pre,
                          logits_per_seq=1.0, mla_absorbed=False, params=s.params, stage="prefill")
        t = np.maximum(r.compute_s, r.memory_s) + r.communication_s + r.overhead_s
        return float(np.ravel(t)[0]) * s.group.pp / (m + s.group.pp - 1)   # one microbatch's, without the fill
    fixed = max(traversal(1.0), 1e-15)
    work = max(traversal(n_tok) - fixed, 0.0)
    n = min(max(round(float(np.sqrt((s.group.pp - 1) * work / (m * fixed)))), 1), MAX_STREAM_CHUNKS)
    chunk = int(np.ceil(n_tok / n / smallest) * smallest)
    return max(min(chunk, int(np.ceil(n_tok / smallest) * smallest)), int(np.ceil(n_tok / MAX_STREAM_CHUNKS)), 1)


def _streamed(out: StageResult, chunks: list[StageResult], masks: list[Any], *, pp: int, micro: Any,
              chunk: int) -> StageResult:
    """A prompt streamed through a compiled pipeline of ``pp`` stages chunk by chunk: chunk j+1 enters the first
    stage while chunk j is in the second, so the passes overlap instead of following one another.

    Every stage spends the same time on one microbatch of a chunk (s_j: 1/pp of the chunk's traversal T_j), so
    the stages form a proportionate flow shop, whose makespan for jobs in order is sum_j s_j + (pp - 1) max_j s_j
    (Pinedo, "Scheduling: Theory, Algorithms, and Systems", 5th ed., §6.1, proportionate flow shop,
    https://doi.org/10.1007/978-3-319-26580-3; GPipe's fill and drain is the case of equal jobs,
    https://arxiv.org/abs/1811.06965 §2.2). With m microbatches of prompts per chunk: (m sum_j T_j + (pp - 1)
    max_j T_j) / pp. ``chunks`` come timed with one chunk's fill and drain, (m + pp - 1) / pp T_j
    (:func:`~roofline.physics.timing.time_pass`). Each time term (compute, memory, fixed costs, ...) is the same
    form over that term, taken at the chunk whose traversal is longest, so the terms keep their meaning."""
    fill = (micro + pp - 1) / pp
    on = [np.asarray(w) > 0 for w in masks]

    def flow_shop(values: list[Any], longest: Any) -> Any:
        bare = np.stack([np.where(w, finite(v), 0.0) / fill for v, w in zip(values, on)])
        return (micro * bare.sum(axis=0) + (pp - 1) * np.take_along_axis(bare, longest[None], axis=0)[0]) / pp
    times = np.stack([np.where(w, finite(r.time_s), 0.0) for r, w in zip(chunks, on)])
    longest = np.argmax(times, axis=0)
    terms = ("compute_s", "memory_s", "memory_serial_s", "communication_s", "overhead_s", "attention_compute_s",
             "kv_memory_s", "dequant_s")
    tiers = {t: flow_shop([r.memory_by_tier_s.get(t, 0.0) for r in chunks], longest) for t in out.memory_by_tier_s}
    return attrs.evolve(out, stage=f"prefill (streamed in chunks of {chunk})", memory_by_tier_s=tiers,
                        time_s=np.where(out.fits, flow_shop([r.time_s for r in chunks], longest), np.nan),
                        **{name: flow_shop([getattr(r, name) for r in chunks], longest) for name in terms})


@broadcast_errors
def verify(model: ModelSpec, device: DeviceGroup, *, batch: ArrayLike, context: ArrayLike, gamma: ArrayLike,
           weights: str | None = None, experts: str | None = None, kv: str | None = None, activations: str | None = None,
           head: str | None = None, tp: int | None = None, ep: int | None = None, params: EngineParams | None = None,
           on_infeasible: str = "auto") -> StageResult:
    """One target forward over gamma + 1 tokens per sequence (the drafts plus the bonus position).

    The KV cache is read once per sequence, logits are needed at all gamma + 1
    positions, and for MoE the B(gamma+1) tokens touch more experts than one
    decode step (docs/theory.md §3.4).
    """
    s = setup(model, device, tp=tp, ep=ep, weights=weights, experts=experts, kv=kv, activations=activations,
              params=params, head=head)
    G = check_gamma(gamma)
    B, L = check_count("batch", batch, minimum=1), check_count("context", context)
    check_grid(G, B, L)
    r = evaluate_pass(s.model, s.group, s.formats, batch=B, new_tokens=G + 1, prefix_tokens=L, logits_per_seq=G + 1,
                      mla_absorbed=True, stage="verify", params=s.params)
    return check_feasible(r, on_infeasible, _scalar(batch, context, gamma))


def draft_steps(s: Setup, *, batch: np.ndarray, context: np.ndarray, gamma: np.ndarray) -> StageResult:
    """gamma sequential decode steps of ``s.model`` at contexts L, L+1, ..., L+gamma-1 (checked arrays).

    Step i is evaluated once over batch x context (it does not depend on gamma) and the steps are summed
    up to each point's gamma, so a batch x gamma sweep stays O(batch x gamma) in memory. The steps differ only in
    their context: the batch is planned once (:func:`pass_plan`) and each step timed at its context.
    """
    steps = max(int(np.max(gamma)), 1)
    plan = pass_plan(s.model, s.group, s.formats, batch=batch, new_tokens=1.0, logits_per_seq=1.0, mla_absorbed=True,
                     stage="draft", params=s.params)
    results = [time_pass(plan, context + i) for i in range(steps)]
    return accumulate(results, gamma, stage="draft")


@broadcast_errors
def draft(model: ModelSpec, device: DeviceGroup, *, batch: ArrayLike, context: ArrayLike, gamma: ArrayLike,
          weights: str | None = None, experts: str | None = None, kv: str | None = None, activations: str | None = None,
          head: str | None = None, tp: int | None = None, ep: int | None = None, params: EngineParams | None = None,
          on_infeasible: str = "auto") -> StageResult:
    """gamma sequential decode steps of a draft model at contexts L, L+1, ..., L+gamma-1 (docs/theory.md §3.5).

    Exact sum over the steps (the draft's context grows by one each step); gamma = 0 costs nothing.
    """
    s = setup(model, device, tp=tp, ep=ep, weights=weights, experts=experts, kv=kv, activations=activations,
              params=params, head=head)
    G, B, L = check_gamma(gamma), check_count("batch", batch, minimum=1), check_count("context", context)
    check_grid(G, B, L)
    out = draft_steps(s, batch=B, context=L, gamma=G)
    return check_feasible(out, on_infeasible, _scalar(batch, context, gamma))


def head_model(target: ModelSpec, layers: int, vocab: int | None = None) -> ModelSpec:
    """An MTP (DeepSeek-style) or EAGLE-style head: the target's last ``layers`` layers with its embedding and
    LM head, which the head pays every step (docs/theory.md §2.8, §3.5: a 1-layer head is not c = 1/n_L). The LM
    head scores the target's whole vocabulary unless ``vocab`` says fewer tokens: EAGLE-3 drafts over a reduced
    vocabulary mapped onto the target's (``draft_vocab_size`` 32,000 of Llama 3's 128,256 in its reference
    config, https://github.com/SafeAILab/EAGLE/blob/cb7e084/eagle/traineagle3/config.json; Li et al. 2025,
    https://arxiv.org/abs/2503.01840). Its feature fusion (a 3h x h matrix, once per round) and its attention's
    2h-wide input are not counted: 18% of an EAGLE-3 Llama-3.1-8B head's bytes, where the smaller LM head saves 53%
    of a full-vocabulary head's (docs/theory.md §3.5)."""
    n = check_whole("layers", layers, minimum=1, maximum=target.num_layers)
    v = target.vocab_size if vocab is None else check_whole(f"draft_vocab (a subset of {target.id}'s vocabulary)",
                                                             vocab, minimum=1, maximum=target.vocab_size)
    if v == target.vocab_size:
        return attrs.evolve(target, id=f"{target.id}-head{n}", num_layers=n, layer_types=target.layer_types[-n:],
                            moe_layers=target.moe_layers[-n:], num_mtp_layers=0)
    # its own LM head over v rows (never tied to the embedding, which stays the target's whole table)
    return attrs.evolve(target, id=f"{target.id}-head{n}-v{v}", num_layers=n, layer_types=target.layer_types[-n:],
                        moe_layers=target.moe_layers[-n:], num_mtp_layers=0, output_vocab_size=v,
                        tied_embeddings=False)


@broadcast_errors
def draft_head(target: ModelSpec, device: DeviceGroup, *, layers: int = 1, batch: ArrayLike, context: ArrayLike,
               gamma: ArrayLike, vocab: int | None = None, **kwargs: Any) -> StageResult:
    """gamma steps of an MTP or EAGLE-style head of ``layers`` of the target's layers, its LM head over ``vocab``
    tokens (EAGLE-3's draft vocabulary; default the target's: see :func:`head_model`)."""
    records(target, device)
    return draft(head_model(target, layers, vocab), device, batch=batch, context=context, gamma=gamma, **kwargs)


@broadcast_errors
def max_batch(model: ModelSpec, device: DeviceGroup, *, context: ArrayLike, new_tokens: ArrayLike = 1,
              weights: str | None = None, experts: str | None = None, kv: str | None = None, activations: str | None = None,
              head: str | None = None, tp: int | None = None, ep: int | None = None,
              params: EngineParams | None = None) -> np.ndarray:
    """Largest batch whose weights, KV at ``context`` + ``new_tokens`` and workspace fit (0 if none).

    B_max = floor((N C u - W) / (KV_seq(L) + A_seq)) per device (docs/theory.md §3.3 "Capacity limit"),
    over all memory tiers of the device.
    """
    s = setup(model, device, tp=tp, ep=ep, weights=weights, experts=experts, kv=kv, activations=activations,
              params=params, head=head)
    profile = resolve_profile(s.group.device, s.params)
    return memory.max_batch(s.model, s.group, s.formats.with_toolchain_head(profile.head_format),
                            context=check_count("context", context),
                            new_tokens=check_count("new_tokens", new_tokens, minimum=1),
                            usable_fraction=profile.usable_memory_fraction,
                            windowed_kv=profile.windowed_kv is not False)
