"""Memory: what a device holds (weights, KV cache, workspace), where it is placed, and the traffic per tier.

Data is placed fastest tier first (weights, then KV, then workspace); bytes
that do not fit a tier spill to the next tier that holds their kind (a tier's
``holds``: GB200's Grace LPDDR takes offloaded weights, never the KV cache) and
are re-read from there every pass (hierarchical roofline, docs/theory.md §1.4).
A point fits when everything is placed within the usable share of the tiers. KV heads split over tensor-parallel
ranks only while tp <= n_kv; MLA's single latent is replicated on every rank
(docs/theory.md §2.9).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..specs.devices import Device
from ..specs.formats import Formats
from ..specs.groups import DeviceGroup
from ..specs.models import ModelSpec

Array = NDArray[np.float64]


def kv_shards(model: ModelSpec, tp: int) -> int:
    """Ranks the KV cache is split over: min(tp, n_kv) for GQA/MQA, 1 for MLA (replicated latent)."""
    return 1 if model.is_mla else min(tp, model.num_kv_heads)


def group_kv_shards(model: ModelSpec, group: DeviceGroup) -> int:
    """Ways one stage's KV cache is divided: dp attention sub-groups (sequences) x each sub-group's head split."""
    return group.dp * kv_shards(model, group.attention_tp)


def attention_replica_bytes(model: ModelSpec, formats: Formats, group: DeviceGroup) -> float:
    """Extra attention weight bytes per device under DP attention: each of the dp sub-groups holds all the
    attention weights split tp/dp ways, instead of tp ways (0 without DP attention)."""
    if group.dp == 1:
        return 0.0
    attention = model.param_breakdown()["attention"] * formats.weight.bytes_per_element
    return attention * (group.dp - 1) / (group.tp * group.pp)


def stored_weight_bytes(model: ModelSpec, formats: Formats) -> float:
    """Bytes of all stored weights (every expert): non-expert weights, experts, and the embedding table with
    the LM head (:attr:`Formats.head_format`) each in their own format."""
    parts = model.param_breakdown()
    experts, head = parts["experts"], parts["embedding"] + parts["lm_head"]
    return ((model.total_params - experts - head) * formats.weight.bytes_per_element
            + experts * formats.expert.bytes_per_element + head * formats.head_format.bytes_per_element)


def workspace_per_sequence_bytes(model: ModelSpec, formats: Formats, tp: int, new_tokens: ArrayLike,
                                 logits_per_seq: ArrayLike) -> Array:
    """Transient activations per sequence and device: the residual stream and the widest MLP
    intermediate for each new token (4d + 2*d_ff_widest elements) plus fp32 logits."""
    widest = max(model.intermediate_size, model.experts_per_token * model.expert_intermediate_size, model.hidden_size)
    n = np.asarray(new_tokens, dtype=float)
    return (formats.activation.bytes_per_element * n * (4 * model.hidden_size + 2 * widest)
            + 4.0 * np.asarray(logits_per_seq, dtype=float) * model.lm_head_vocab) / tp


@attrs.frozen(kw_only=True)
class Residency:
    """What one device of one pipeline stage holds, in factored (unbroadcast) form."""

    weights_bytes: float          # stored weights per device
    workspace_bytes: Any          # batch x workspace per sequence (batch-shaped)
    kv_sequences: Any             # sequences whose KV one device holds: batch / (KV shards x pp)
    kv_sequence_bytes: Any        # KV of one sequence at the pass's context (context-shaped)

    def kv_bytes(self) -> Array:
        return self.kv_sequences * self.kv_sequence_bytes

    def total_bytes(self) -> Array:
        return self.weights_bytes + self.workspace_bytes + self.kv_bytes()


@attrs.frozen(kw_only=True)
class Placement:
    """Traffic time per tier (seconds at the achieved bandwidth), whether it fits, the usable capacity, and
    of the time over all tiers the share of the KV cache's reads and writes (what attention kernels move)."""

    time_by_tier_s: dict[str, Any]
    fits: Any
    usable_bytes: float
    kv_time_s: Any


def place(device: Device, res: Residency, *, weight_read: Any, kv_read: Any, kv_share: float, kv_write: Any,
          activation: Any, pp: int, bandwidth_fraction: Callable[[str], float], usable_fraction: float) -> Placement:
    """Place weights, KV and workspace over ``device``'s tiers and time each tier's traffic.

    Traffic per device: ``weight_read`` (weights the pass touches), ``kv_read`` x ``kv_share`` (the whole
    pass's KV reads, of which this device reads its share), ``kv_write`` (this device's), ``activation``
    (matmul inputs and outputs). A pass crosses ``pp`` stages, so the time is pp stage-times.
    ``bandwidth_fraction(tier)`` is the achieved share of each tier's peak (SRAM and HBM differ).
    """
    first = device.memory[0]
    cap = device.get(f"{first.name}.capacity") * usable_fraction
    if len(device.memory) == 1:   # (its one tier holds every kind: Device checks that some tier holds each)
        # one tier (most GPUs): everything lives there; the comparison builds only a boolean grid
        fits = res.kv_sequence_bytes <= (cap - res.weights_bytes - res.workspace_bytes) / res.kv_sequences
        k = pp / (device.get(f"{first.name}.bandwidth") * bandwidth_fraction(first.name))
        small = weight_read + activation + kv_write
        return Placement(time_by_tier_s={first.name: small * k + kv_read * (k * kv_share)}, fits=fits,
                         usable_bytes=cap, kv_time_s=(kv_read * kv_share + kv_write) * k)
    return _place_tiers(device, res, weight_read=weight_read, kv_traffic=kv_read * kv_share + kv_write,
                        activation=activation,
                        pp=pp, bandwidth_fraction=bandwidth_fraction, usable_fraction=usable_fraction)


def _place_tiers(device: Device, res: Residency, *, weight_read: Any, kv_traffic: Any, activation: Any, pp: int,
                 bandwidth_fraction: Callable[[str], float], usable_fraction: float) -> Placement:
    """Fill the tiers fastest first, each kind only where a tier ``holds`` it. The usable bytes are the tiers'
    that hold the KV cache or workspace, and of a weights-only tier (GB200's LPDDR) the weights placed there:
    the room the point's data has, which the does-not-fit message quotes."""
    kv_held = res.kv_bytes()
    remaining: dict[str, Any] = {"w": res.weights_bytes, "kv": kv_held, "ws": res.workspace_bytes}
    usable_total = 0.0
    by_tier: dict[str, Any] = {}
    kv_time_s: Any = 0.0
    for tier in device.memory:
        per_sequence = "kv" in tier.holds or "workspace" in tier.holds
        if not any(np.any(r > 0) for r in remaining.values()):
            if tier.capacity_bytes is not None and per_sequence:
                usable_total += tier.capacity_bytes * usable_fraction
            continue
        free: Any = device.get(f"{tier.name}.capacity") * usable_fraction
        usable_total += free if per_sequence else float(np.minimum(remaining["w"], free))
        placed = {}
        for key in ("w", "kv", "ws"):
            if _KINDS[key] not in tier.holds:   # engines keep none of this kind here: it may not spill in
                placed[key] = 0.0
                continue
            placed[key] = np.minimum(remaining[key], free)
            free = free - placed[key]
            remaining[key] = remaining[key] - placed[key]
        kv_bytes_here = kv_traffic * _share(placed["kv"], kv_held)
        traffic = (weight_read * placed["w"] / res.weights_bytes + kv_bytes_here
                   + activation * _share(placed["ws"], res.workspace_bytes))
        if np.any(traffic > 0):
            s_per_byte = pp / (device.get(f"{tier.name}.bandwidth") * bandwidth_fraction(tier.name))
            by_tier[tier.name] = traffic * s_per_byte
            kv_time_s = kv_time_s + kv_bytes_here * s_per_byte
    shape = np.broadcast_shapes(*(np.shape(r) for r in remaining.values()))
    fits = np.logical_and.reduce([np.broadcast_to(r <= 0.5, shape) for r in remaining.values()])   # bytes
    return Placement(time_by_tier_s=by_tier, fits=fits, usable_bytes=usable_total, kv_time_s=kv_time_s)


#: The placement's keys to what a memory tier ``holds``.
_KINDS = {"w": "weights", "kv": "kv", "ws": "workspace"}


def _share(part: Any, whole: Any) -> Array:
    part, whole = np.asarray(part, dtype=float), np.asarray(whole, dtype=float)
    shape = np.broadcast_shapes(part.shape, whole.shape)
    return np.divide(part, whole, out=np.zeros(shape), where=whole > 0)


def max_batch(model: ModelSpec, group: DeviceGroup, formats: Formats, *, context: Array, new_tokens: Array,
              usable_fraction: float, windowed_kv: bool = True) -> np.ndarray:
    """Largest batch whose weights, KV at ``context`` + ``new_tokens`` and workspace fit (0 if none).

    B_max = floor((N C u - W) / (KV_seq(L) + A_seq)) per device (docs/theory.md §3.3 "Capacity limit"),
    over the memory tiers that hold KV and workspace, less the weights placed there (weights fill the tiers
    that hold them fastest first, as :func:`place` puts them); ``windowed_kv`` False: sliding-window layers
    hold the whole context.
    """
    per_seq = (model.kv_cache_bytes(context + new_tokens, formats.kv, windowed=windowed_kv)
               / (group_kv_shards(model, group) * group.pp)
               + workspace_per_sequence_bytes(model, formats, group.tp, new_tokens, 1))
    weights = stored_weight_bytes(model, formats) / group.count + attention_replica_bytes(model, formats, group)
    free = 0.0
    for tier in group.device.memory:
        cap = group.device.get(f"{tier.name}.capacity") * usable_fraction
        here = min(weights, cap) if "weights" in tier.holds else 0.0
        weights -= here
        if "kv" in tier.holds and "workspace" in tier.holds:
            free += cap - here
    if weights > 0:   # the weights alone do not fit
        free = -1.0
    return np.maximum(np.floor(free / per_seq), 0).astype(int)
