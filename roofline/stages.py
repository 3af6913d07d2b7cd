"""The inference stages: prefill, decode step, speculative verify and draft.

Each function takes a model (preset id, config path or :class:`ModelSpec`), a
device (id, spec path, :class:`Device` or :class:`DeviceGroup`) and workload
arguments that broadcast as numpy arrays, and returns a frozen
:class:`~roofline.engine.StageResult` with ``time_s``, ``compute_s``,
``memory_s``, ``bound`` and the rest. Formats: ``weights`` (non-expert),
``experts`` (default: the checkpoint's, e.g. MXFP4 for gpt-oss, else
``weights``), ``kv``, ``activations``.
"""

from __future__ import annotations

import attrs
import numpy as np
from numpy.typing import ArrayLike

from .engine import (DeviceGroup, StageResult, _check_feasible, _kv_shards, _resolve, combine, evaluate_pass,
                     stored_weight_bytes, workspace_per_sequence_bytes)
from .errors import broadcast_errors, WorkloadError
from .hardware import Device
from .model import ModelSpec
from .params import DEFAULT_PARAMS, EngineParams
from .speculative import _gamma
from .work import Formats, show

__all__ = ["DeviceGroup", "StageResult", "decode_step", "draft", "draft_head", "max_batch", "prefill", "verify"]


def _setup(model: ModelSpec | str, device: Device | DeviceGroup | str, tp: int, ep: int, weights: str,
           experts: str | None, kv: str, activations: str) -> tuple[ModelSpec, DeviceGroup, Formats]:
    m, g = _resolve(model, device, tp, ep)
    return m, g, Formats.for_model(m, weights=weights, experts=experts, kv=kv, activations=activations)


def _whole(name: str, value: ArrayLike, minimum: int) -> np.ndarray:
    try:
        a = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise WorkloadError(f"{name} must be a whole number >= {minimum}, got {value!r}") from None
    if not np.all(np.isfinite(a)) or np.any(a < minimum) or np.any(a != np.round(a)):
        raise WorkloadError(f"{name} must be a whole number >= {minimum}, got {show(a)}")
    return a


@broadcast_errors
def decode_step(model: ModelSpec | str, device: Device | DeviceGroup | str, *, batch: ArrayLike,
                context: ArrayLike, weights: str = "bf16", experts: str | None = None, kv: str = "bf16",
                activations: str = "bf16", tp: int = 1, ep: int = 1, params: EngineParams = DEFAULT_PARAMS,
                on_infeasible: str = "auto") -> StageResult:
    """One decode step: ``batch`` sequences each add one token after ``context`` cached tokens.

    Reads all (touched) weights once and each sequence's KV cache once:
    bytes = Q_w(B) + B * KV_seq(L) (theory.md §3.3; scaling book "(Batch x KV size
    + Parameter size) / Total memory bandwidth").
    """
    m, g, f = _setup(model, device, tp, ep, weights, experts, kv, activations)
    return evaluate_pass(m, g, f, batch=batch, new_tokens=1, prefix_tokens=context, logits_per_seq=1,
                         mla_absorbed=True, stage="decode", params=params, on_infeasible=on_infeasible)


@broadcast_errors
def prefill(model: ModelSpec | str, device: Device | DeviceGroup | str, *, prompt: ArrayLike,
            batch: ArrayLike = 1, prefix: ArrayLike = 0, chunk: int | None = None, weights: str = "bf16",
            experts: str | None = None, kv: str = "bf16", activations: str = "bf16", tp: int = 1, ep: int = 1,
            params: EngineParams = DEFAULT_PARAMS, on_infeasible: str = "auto") -> StageResult:
    """Prefill ``prompt`` tokens per sequence (after ``prefix`` cached ones), logits for the last only.

    FLOP = 2 P_mat S + causal attention (exact) (theory.md §3.2). With ``chunk``
    = C (Sarathi-Serve chunked prefill) the prompt runs as ceil(S/C) passes: the
    FLOP are unchanged, weights are re-read every chunk and each chunk re-reads
    the KV of the chunks before it.
    """
    m, g, f = _setup(model, device, tp, ep, weights, experts, kv, activations)
    S = _whole("prompt", prompt, 1)
    P = _whole("prefix", prefix, 0)
    kw = dict(mla_absorbed=False, params=params, on_infeasible=on_infeasible)
    if chunk is None:
        return evaluate_pass(m, g, f, batch=batch, new_tokens=prompt, prefix_tokens=prefix, logits_per_seq=1,
                             stage="prefill", **kw)
    C = int(_whole("chunk", chunk, 1))
    S, P, Bb = np.broadcast_arrays(S, P, _whole("batch", batch, 1))
    n_chunks = np.ceil(S / C)
    if n_chunks.max() > 100_000:
        raise WorkloadError(f"prompt / chunk gives {n_chunks.max():,.0f} passes; use a chunk of at least "
                            f"{int(np.ceil(S.max() / 100_000))} tokens")
    results, masks = [], []
    for j in range(int(n_chunks.max())):
        c = np.clip(S - j * C, 0, C)
        last = (j == n_chunks - 1).astype(float)
        results.append(evaluate_pass(m, g, f, batch=Bb, new_tokens=np.maximum(c, 1), prefix_tokens=P + j * C,
                                     logits_per_seq=last, stage="prefill", **{**kw, "on_infeasible": "nan"}))
        masks.append(c > 0)
    out = combine(results, masks, stage=f"prefill (chunk {C})")
    return _check_feasible(out, on_infeasible, (batch, prompt, prefix))


@broadcast_errors
def verify(model: ModelSpec | str, device: Device | DeviceGroup | str, *, batch: ArrayLike, context: ArrayLike,
           gamma: ArrayLike, weights: str = "bf16", experts: str | None = None, kv: str = "bf16",
           activations: str = "bf16", tp: int = 1, ep: int = 1, params: EngineParams = DEFAULT_PARAMS,
           on_infeasible: str = "auto") -> StageResult:
    """One target forward over gamma + 1 tokens per sequence (the drafts plus the bonus position).

    The KV cache is read once per sequence, logits are needed at all gamma + 1
    positions, and for MoE the B(gamma+1) tokens touch more experts than one
    decode step (theory.md §3.4).
    """
    m, g, f = _setup(model, device, tp, ep, weights, experts, kv, activations)
    G = _gamma(gamma)
    return evaluate_pass(m, g, f, batch=batch, new_tokens=G + 1, prefix_tokens=context, logits_per_seq=G + 1,
                         mla_absorbed=True, stage="verify", params=params, on_infeasible=on_infeasible)


@broadcast_errors
def draft(model: ModelSpec | str, device: Device | DeviceGroup | str, *, batch: ArrayLike, context: ArrayLike,
          gamma: ArrayLike, weights: str = "bf16", experts: str | None = None, kv: str = "bf16",
          activations: str = "bf16", tp: int = 1, ep: int = 1, params: EngineParams = DEFAULT_PARAMS,
          on_infeasible: str = "auto") -> StageResult:
    """gamma sequential decode steps of a draft model at contexts L, L+1, ..., L+gamma-1 (theory.md §3.5).

    Exact sum over the steps (the draft's context grows by one each step);
    gamma = 0 costs nothing.
    """
    m, g, f = _setup(model, device, tp, ep, weights, experts, kv, activations)
    G = _gamma(gamma)
    G, L, Bb = np.broadcast_arrays(G, _whole("context", context, 0), _whole("batch", batch, 1))
    steps = max(int(G.max()), 1)
    results = [evaluate_pass(m, g, f, batch=Bb, new_tokens=1, prefix_tokens=L + i, logits_per_seq=1,
                             mla_absorbed=True, stage="draft", params=params, on_infeasible="nan")
               for i in range(steps)]
    out = combine(results, [G > i for i in range(steps)], stage="draft")
    return _check_feasible(out, on_infeasible, (batch, context, gamma))


@broadcast_errors
def draft_head(target: ModelSpec | str, device: Device | DeviceGroup | str, *, layers: int = 1,
               batch: ArrayLike, context: ArrayLike, gamma: ArrayLike, **kwargs: object) -> StageResult:
    """gamma steps of an MTP (DeepSeek-style) or EAGLE-style head: ``layers`` of the target's layers.

    The head reuses the target's embedding and full-vocabulary LM head, which it
    pays every step (theory.md §2.8, §3.5: a 1-layer head is not c = 1/n_L).
    The layers are the target's last ``layers`` (their attention and MLP/MoE kind).
    """
    m = target if isinstance(target, ModelSpec) else _resolve(target, "h100-sxm", 1, 1)[0]
    if isinstance(layers, bool) or not isinstance(layers, int) or not 1 <= layers <= m.num_layers:
        raise WorkloadError(f"layers must be a whole number in 1..{m.num_layers}, got {layers!r}")
    head = attrs.evolve(m, id=f"{m.id}-head{layers}", num_layers=layers, layer_types=m.layer_types[-layers:],
                        moe_layers=m.moe_layers[-layers:], num_mtp_layers=0)
    return draft(head, device, batch=batch, context=context, gamma=gamma, **kwargs)  # type: ignore[arg-type]


@broadcast_errors
def max_batch(model: ModelSpec | str, device: Device | DeviceGroup | str, *, context: ArrayLike,
              new_tokens: ArrayLike = 1, weights: str = "bf16", experts: str | None = None, kv: str = "bf16",
              activations: str = "bf16", tp: int = 1, ep: int = 1,
              params: EngineParams = DEFAULT_PARAMS) -> np.ndarray:
    """Largest batch whose weights, KV at ``context`` + ``new_tokens`` and workspace fit (0 if none).

    B_max = floor((N C u - W) / (KV_seq(L) + A_seq)) per device (theory.md §3.3
    "Capacity limit"), over all memory tiers of the device.
    """
    m, g, f = _setup(model, device, tp, ep, weights, experts, kv, activations)
    L = _whole("context", context, 0)
    n = _whole("new_tokens", new_tokens, 1)
    usable = sum(g.device.get(f"{t.name}.capacity") for t in g.device.memory) * params.usable_memory_fraction
    per_seq = (m.kv_cache_bytes(L + n, f.kv) / (_kv_shards(m, g.tp) * g.pp)
               + workspace_per_sequence_bytes(m, f, g.tp, n, 1))
    free = usable - stored_weight_bytes(m, f) / g.count
    return np.maximum(np.floor(free / per_seq), 0).astype(int)
