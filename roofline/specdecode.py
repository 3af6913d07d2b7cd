"""Speculative decoding on devices: draft and verify on (possibly different) device groups.

One round (theory.md §3.6, §5.5):

    T_round = T_draft(gamma steps on the draft group) + T_verify(gamma + 1 tokens on the target group)
              + T_transfer(draft tokens [+ probability rows] one way, accepted count + bonus token back)

tokens per user per second = E[N] / T_round, speedup = E[N] T_decode / T_round
(the roofline-aware form of Leviathan Thm 3.8, theory.md §4.3). Energy: each
group draws its busy power while it works and idle power while it waits on the
other (:mod:`roofline.energy`).
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np
from numpy.typing import ArrayLike, NDArray

from .configs import load_model
from .energy import DEFAULT_POWER, PowerModel, idle_w, stage_power_w
from .engine import DeviceGroup, native_default_format, parse_group
from .errors import broadcast_errors, UnknownSpecError, WorkloadError
from .hardware import Device
from .links import GroupLink, get_link, round_transfer_s
from .model import ModelSpec
from .params import DEFAULT_PARAMS, EngineParams
from .speculative import Acceptance, _gamma
from .stages import decode_step, draft as draft_stage, draft_head, verify

Array = NDArray[np.float64]
DRAFT_KINDS = ("model", "mtp", "eagle")


@attrs.frozen(kw_only=True)
class SpecResult:
    """One speculative round and its comparison with plain decoding on the target group.

    Arrays broadcast over gamma, batch and context. ``*_j`` energies are NaN
    (with ``energy_note`` saying why) when a device's TDP is not published.
    """

    target: str
    draft: str
    draft_kind: str
    target_group: str
    draft_group: str
    link: str
    acceptance: str
    gamma: Array
    batch: Array
    context: Array
    expected_tokens: Array
    draft_s: Array
    verify_s: Array
    transfer_s: Array
    round_s: Array
    tokens_per_s_per_user: Array
    tokens_per_s: Array
    baseline_decode_s: Array
    speedup: Array
    flop_per_token: Array
    baseline_flop_per_token: Array
    energy_per_token_j: Array
    baseline_energy_per_token_j: Array
    power_w: Array
    fits: NDArray[np.bool_]
    draft_bound: NDArray[np.str_]
    verify_bound: NDArray[np.str_]
    energy_note: str = ""

    @property
    def extra_flop_fraction(self) -> Array:
        """FLOP spent per token beyond plain decoding (rejected drafts, re-verified positions)."""
        return self.flop_per_token / self.baseline_flop_per_token - 1

    @property
    def best_index(self) -> int:
        """Flat index of the feasible point with the most tokens/s per user."""
        v = np.where(self.fits, np.nan_to_num(self.tokens_per_s_per_user, nan=-1.0), -1.0)
        return int(np.argmax(v))


def _same(a: DeviceGroup, b: DeviceGroup) -> bool:
    return a == b   # same device spec and the same tp, ep and pp


@broadcast_errors
def speculative_round(target: ModelSpec | str, *, verify_on: str | Device | DeviceGroup,
                      acceptance: Acceptance | float, gamma: ArrayLike, batch: ArrayLike = 1,
                      context: ArrayLike = 8192, draft: ModelSpec | str | None = None,
                      draft_on: str | Device | DeviceGroup | None = None, draft_kind: str = "model",
                      head_layers: int = 1, link: str | GroupLink = "pcie5", sampling: str = "greedy",
                      target_formats: dict[str, Any] | None = None, draft_formats: dict[str, Any] | None = None,
                      params: EngineParams = DEFAULT_PARAMS, power: PowerModel = DEFAULT_POWER) -> SpecResult:
    """Time, throughput and energy of speculative decoding with the given placement.

    ``draft_kind``: ``model`` (a separate draft model, ``draft``), ``mtp``
    (DeepSeek-style multi-token-prediction layers of the target) or ``eagle``
    (an EAGLE-style head); the last two run ``head_layers`` of the target's
    layers plus its LM head. ``sampling="lossless"`` ships the draft's
    probability rows (gamma x vocab fp32) with the tokens, as lossless
    speculative sampling needs (theory.md §5.5); ``greedy`` ships token ids only.
    """
    tgt = target if isinstance(target, ModelSpec) else load_model(target)
    if draft_kind not in DRAFT_KINDS:
        raise WorkloadError(f"draft_kind must be one of {', '.join(DRAFT_KINDS)}, got {draft_kind!r}")
    if sampling not in ("greedy", "lossless"):
        raise WorkloadError(f"sampling must be 'greedy' or 'lossless', got {sampling!r}")
    acc = acceptance if isinstance(acceptance, Acceptance) else Acceptance.geometric(acceptance)
    tg = parse_group(verify_on)
    dg = parse_group(draft_on) if draft_on is not None else tg
    lk = get_link(link)
    G = _gamma(gamma)
    tf = dict(target_formats or {})
    df = dict(draft_formats or {})
    if "weights" not in df or df["weights"] == "auto":
        native = native_default_format(dg.device)
        df = {**{k: native for k in ("weights", "kv", "activations")}, **{k: v for k, v in df.items() if v != "auto"}}
    common = dict(params=params, on_infeasible="nan")

    if draft_kind == "model":
        if draft is None:
            raise WorkloadError("draft_kind 'model' needs a draft model")
        dm = draft if isinstance(draft, ModelSpec) else load_model(draft)
        if dm.vocab_size != tgt.vocab_size:
            raise WorkloadError(f"draft {dm.id} has vocabulary {dm.vocab_size} but target {tgt.id} has "
                                f"{tgt.vocab_size}: speculative decoding needs the same tokenizer")
        d = draft_stage(dm, dg, batch=batch, context=context, gamma=G, **df, **common)
        draft_name = dm.id
    else:
        d = draft_head(tgt, dg, layers=head_layers, batch=batch, context=context, gamma=G, **df, **common)
        draft_name = f"{tgt.id} {draft_kind} head ({head_layers} layer{'s' if head_layers > 1 else ''})"
    v = verify(tgt, tg, batch=batch, context=context, gamma=G, **tf, **common)
    base = decode_step(tgt, tg, batch=batch, context=context, **tf, **common)

    shape = np.broadcast_shapes(d.time_s.shape, v.time_s.shape, G.shape)
    B = np.broadcast_to(np.asarray(batch, dtype=float), shape)
    if _same(dg, tg):
        transfer = np.zeros(shape)
        # draft and target share the devices: both sets of weights, KV and workspace must fit together
        fits = v.fits & d.fits & (v.memory_per_device_bytes + d.memory_per_device_bytes <= v.usable_per_device_bytes)
    else:
        transfer = round_transfer_s(lk, B, G, vocab_size=tgt.vocab_size, probability_rows=sampling == "lossless")
        fits = v.fits & d.fits
    fits = np.broadcast_to(fits, shape)
    nan = np.where(fits, 1.0, np.nan)
    E = np.broadcast_to(acc.expected_tokens(G), shape)
    draft_s = np.nan_to_num(d.time_s) * nan
    round_s = (draft_s + v.time_s + transfer) * nan
    per_user = E / round_s
    flop_round = d.flop_per_device * dg.count + v.flop_per_device * tg.count
    base_flop = base.flop_per_device * tg.count / np.asarray(batch, dtype=float)

    note = ""
    try:
        t_busy = stage_power_w(tg.device, v, power)
        t_idle = idle_w(tg.device, power)
        energy = tg.count * (t_busy * v.time_s + t_idle * (draft_s + transfer))
        if _same(dg, tg):
            energy = energy + tg.count * (stage_power_w(dg.device, d, power) - t_idle) * draft_s
        else:
            d_busy = stage_power_w(dg.device, d, power)
            energy = energy + dg.count * (np.where(G > 0, d_busy, 0) * draft_s
                                          + idle_w(dg.device, power) * (v.time_s + transfer + np.where(G > 0, 0, draft_s)))
        energy = energy * power.pue
        b_busy = stage_power_w(tg.device, base, power)
        # plain decoding on the target group alone (no draft devices)
        base_energy = tg.count * b_busy * base.time_s * power.pue / np.asarray(batch, dtype=float)
        power_w = energy / round_s
        energy_tok = energy / (B * E)
    except UnknownSpecError as e:
        note = f"energy not computed: {e}"
        energy_tok = power_w = base_energy = np.full(shape, np.nan)
    return SpecResult(
        target=tgt.id, draft=draft_name, draft_kind=draft_kind, target_group=tg.describe(),
        draft_group=dg.describe(), link="same devices" if _same(dg, tg) else lk.name, acceptance=acc.describe(),
        gamma=np.broadcast_to(G, shape), batch=B, context=np.broadcast_to(np.asarray(context, dtype=float), shape),
        expected_tokens=E, draft_s=draft_s, verify_s=v.time_s * nan, transfer_s=transfer * nan, round_s=round_s,
        tokens_per_s_per_user=per_user, tokens_per_s=B * per_user,
        baseline_decode_s=np.broadcast_to(base.time_s, shape), speedup=E * base.time_s / round_s,
        flop_per_token=np.broadcast_to(flop_round / (B * E), shape),
        baseline_flop_per_token=np.broadcast_to(base_flop, shape),
        energy_per_token_j=np.broadcast_to(energy_tok * nan, shape),
        baseline_energy_per_token_j=np.broadcast_to(base_energy, shape), power_w=np.broadcast_to(power_w * nan, shape),
        fits=fits, draft_bound=np.broadcast_to(d.bound, shape), verify_bound=np.broadcast_to(v.bound, shape),
        energy_note=note)


def optimal_gamma(result: SpecResult) -> int:
    """The gamma with the most tokens/s per user among the feasible points of a scan (integer search)."""
    if not np.any(result.fits):
        raise WorkloadError("no gamma in the scan fits in memory")
    return int(np.ravel(result.gamma)[result.best_index])
