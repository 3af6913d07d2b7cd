"""Placements and requests: TTFT, TPOT, end-to-end latency, throughput, power and energy.

A :class:`Placement` maps the stages to device groups: prefill (or ``None``:
prefill shares the decode group), decode/verify (the target's group) and, for
speculative decoding, the draft. A :class:`Request` is (input, output) tokens.

Serving modes (theory.md §6):

* ``continuous`` (steady state): the decode group runs ``batch`` sequences;
  requests finish at batch * tokens_per_step / osl per step. Aggregated, each
  step also carries batch * tokens_per_step * isl / osl prefill tokens (one
  mean-field pass), and a new prompt is prefilled in chunks of ``chunk``
  tokens (TensorRT-LLM's default token budget, 8192) as it arrives, plus one
  step of the running batch. Disaggregated, a prefill group
  (batch ``prefill_batch``) serves prompts and the KV cache moves over
  ``kv_link``; prefill groups are provisioned exactly to the request rate, so
  the fleet holds a fractional number of them.
* ``static``: the whole batch is prefilled, then decoded together.

TPOT is the step (or speculative round) time over tokens per step, E2E =
TTFT + (osl - 1) TPOT, interactivity = 1 / TPOT, and energy follows
:mod:`roofline.energy` for every group (busy while working, idle while waiting).
Decode is timed at the mean context isl + osl/2 and checked for memory at the
final context isl + osl.
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np
from numpy.typing import ArrayLike, NDArray

from .configs import load_model
from .energy import DEFAULT_POWER, PowerModel, idle_w, stage_power_w
from .engine import DeviceGroup, StageResult, evaluate_pass, native_default_format, parse_group
from .errors import broadcast_errors, UnknownSpecError, WorkloadError
from .links import GroupLink, get_link, round_transfer_s
from .model import ModelSpec
from .params import DEFAULT_PARAMS, EngineParams
from .speculative import Acceptance, _gamma
from .stages import draft as draft_stage, draft_head, prefill
from .work import Formats

Array = NDArray[np.float64]
MODES = ("continuous", "static")


@attrs.frozen(kw_only=True)
class Request:
    """One request: input (prompt) and output tokens."""

    input_tokens: int = attrs.field(validator=attrs.validators.ge(1))
    output_tokens: int = attrs.field(validator=attrs.validators.ge(1))


@attrs.frozen(kw_only=True)
class Placement:
    """Stages on device groups. ``draft_kind`` None means no speculation."""

    name: str
    decode: DeviceGroup
    prefill: DeviceGroup | None = None
    draft: DeviceGroup | None = None
    draft_model: ModelSpec | None = None
    draft_kind: str | None = attrs.field(default=None)
    head_layers: int = 1
    kv_link: GroupLink = attrs.field(factory=lambda: get_link("nvlink"))
    draft_link: GroupLink = attrs.field(factory=lambda: get_link("pcie5"))

    @draft_kind.validator
    def _kind(self, _a: attrs.Attribute, v: str | None) -> None:
        if v not in (None, "model", "mtp", "eagle"):
            raise WorkloadError(f"draft_kind must be None, 'model', 'mtp' or 'eagle', got {v!r}")
        if v == "model" and self.draft_model is None:
            raise WorkloadError(f"placement {self.name!r}: draft_kind 'model' needs a draft_model")

    @property
    def speculative(self) -> bool:
        return self.draft_kind is not None

    @property
    def draft_group(self) -> DeviceGroup:
        return self.draft or self.decode

    def describe(self) -> str:
        parts = [f"prefill {self.prefill.describe() if self.prefill else '(on decode group)'}",
                 f"{'verify' if self.speculative else 'decode'} {self.decode.describe()}"]
        if self.speculative:
            parts.append(f"draft {self.draft_group.describe() if self.draft else '(on target group)'}")
        return "; ".join(parts)

    @classmethod
    def build(cls, name: str, *, decode: Any, prefill: Any = None, draft: Any = None,
              draft_model: ModelSpec | str | None = None, draft_kind: str | None = None, head_layers: int = 1,
              kv_link: str | GroupLink = "nvlink", draft_link: str | GroupLink = "pcie5") -> Placement:
        """Convenience constructor taking ``"b200:8"``-style group strings and model ids."""
        dm = load_model(draft_model) if isinstance(draft_model, str) else draft_model
        kind = draft_kind if draft_kind is not None else ("model" if dm is not None else None)
        return cls(name=name, decode=parse_group(decode), prefill=parse_group(prefill) if prefill else None,
                   draft=parse_group(draft) if draft else None, draft_model=dm, draft_kind=kind,
                   head_layers=head_layers, kv_link=get_link(kv_link), draft_link=get_link(draft_link))


@attrs.frozen(kw_only=True)
class ServingResult:
    """Serving metrics of one placement; arrays broadcast over batch and gamma (batch first).

    Throughput, devices and power are per replica: one decode group, its draft
    group, and the (fractional) prefill groups it keeps busy. Infeasible points
    are NaN with ``fits`` False and ``reason`` saying why.
    """

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


def _busy(group: DeviceGroup, r: StageResult, power: PowerModel) -> Array:
    return group.count * stage_power_w(group.device, r, power)


def _idle(group: DeviceGroup, power: PowerModel) -> float:
    return group.count * idle_w(group.device, power)


@broadcast_errors
def evaluate_serving(model: ModelSpec | str, placement: Placement, request: Request, *, batch: ArrayLike,
                     gamma: ArrayLike = 0, acceptance: Acceptance | float | None = None, mode: str = "continuous",
                     prefill_batch: int = 1, chunk: int = 8192, target_formats: dict[str, Any] | None = None,
                     draft_formats: dict[str, Any] | None = None, params: EngineParams = DEFAULT_PARAMS,
                     power: PowerModel = DEFAULT_POWER) -> ServingResult:
    """Serve ``request`` with ``placement``: latency, throughput and energy per batch (and gamma).

    ``batch`` and ``gamma`` broadcast (``batch[:, None]``, ``gamma[None, :]`` sweeps a grid).
    Without speculation gamma must be 0.
    """
    m = model if isinstance(model, ModelSpec) else load_model(model)
    if mode not in MODES:
        raise WorkloadError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if isinstance(prefill_batch, bool) or not isinstance(prefill_batch, int) or prefill_batch < 1:
        raise WorkloadError(f"prefill_batch must be a whole number >= 1, got {prefill_batch!r}")
    G = _gamma(gamma)
    if not placement.speculative and np.any(G != 0):
        raise WorkloadError(f"placement {placement.name!r} does not speculate: gamma must be 0")
    if placement.speculative and acceptance is None:
        raise WorkloadError(f"placement {placement.name!r} speculates: give an acceptance (alpha or Acceptance)")
    acc = acceptance if isinstance(acceptance, Acceptance) or acceptance is None else Acceptance.geometric(acceptance)
    from .work import _validate
    Bv = _validate("batch", batch, minimum=1, integer=True)
    B, G = np.broadcast_arrays(Bv, G)
    isl, osl = request.input_tokens, request.output_tokens
    L_mean, L_end = float(isl + osl // 2), isl + osl   # decode timed at the mean context (whole tokens)
    tf = Formats.for_model(m, **(target_formats or {}))
    tfk = dict(weights=tf.weights, experts=tf.experts, kv=tf.kv, activations=tf.activations)
    dec = placement.decode
    E = acc.expected_tokens(G) if acc is not None else np.ones_like(G)
    if placement.speculative and placement.draft_kind == "model":
        dm = placement.draft_model
        assert dm is not None
        if dm.vocab_size != m.vocab_size:
            raise WorkloadError(f"draft {dm.id} has vocabulary {dm.vocab_size} but target {m.id} has {m.vocab_size}")

    # ---- the decode step or speculative round on the target group
    aggregated = placement.prefill is None
    mixed = aggregated and mode == "continuous"
    per_seq_prefill = E * isl / osl if mixed else 0.0
    new = (G + 1) + per_seq_prefill
    logits = G + 1
    nanq = dict(params=params, on_infeasible="nan")
    v = evaluate_pass(m, dec, tf, batch=B, new_tokens=new, prefix_tokens=L_mean, logits_per_seq=logits,
                      mla_absorbed=True, stage="verify" if placement.speculative else "decode",
                      mean_field=mixed, **nanq)
    at_end = evaluate_pass(m, dec, tf, batch=B, new_tokens=G + 1, prefix_tokens=L_end - 1, logits_per_seq=logits,
                           mla_absorbed=True, stage="decode", **nanq)
    zero = np.zeros(B.shape)
    d_time = zero
    d_res = None
    if placement.speculative:
        dg = placement.draft_group
        df = dict(draft_formats or {})
        if "weights" not in df:
            native = native_default_format(dg.device)
            df = {"weights": native, "kv": native, "activations": native, **df}
        if placement.draft_kind == "model":
            d_res = draft_stage(placement.draft_model, dg, batch=B, context=L_mean, gamma=G, **df, **nanq)
            d_end = draft_stage(placement.draft_model, dg, batch=B, context=L_end - 1, gamma=np.minimum(G, 1), **df,
                                **nanq)
        else:
            d_res = draft_head(m, dg, layers=placement.head_layers, batch=B, context=L_mean, gamma=G, **df, **nanq)
            d_end = d_res
        d_time = np.nan_to_num(d_res.time_s)
        d_fits = d_res.fits & d_end.fits
        if placement.draft is None:  # draft shares the target's devices: both must fit together
            d_fits = d_fits & (at_end.memory_per_device_bytes + d_end.memory_per_device_bytes
                               <= at_end.usable_per_device_bytes)
        xfer = (round_transfer_s(placement.draft_link, B, G) if placement.draft is not None
                else np.zeros(np.broadcast_shapes(np.shape(B), np.shape(G))))
    else:
        d_fits = np.ones(B.shape, dtype=bool)
        xfer = zero
    step = d_time + v.time_s + xfer
    tpot = step / E

    # ---- prefill, TTFT, throughput
    pg = placement.prefill or dec
    p_batch = B if mode == "static" else np.full(B.shape, float(prefill_batch))
    if mixed:
        # the new prompt is prefilled in chunks of up to `chunk` tokens as soon as it arrives; while other
        # sequences are running, it also waits for one of their steps (theory.md §6: TTFT ~ ceil(ISL/C) T_step)
        p_res = None
        alone = prefill(m, dec, prompt=isl, batch=1, chunk=chunk if isl > chunk else None, **tfk, **nanq)
        prefill_s = zero
        ttft = alone.time_s + np.where(B > 1, step, 0.0)
        kv_x = zero
        p_fits = np.broadcast_to(alone.fits, B.shape)
    else:
        p_res = prefill(m, pg, prompt=isl, batch=p_batch, **tfk, **nanq)
        prefill_s = p_res.time_s
        p_fits = p_res.fits
        if aggregated:
            kv_x = zero
        else:
            kv_bytes = p_batch * m.kv_cache_bytes(isl, tf.kv)
            raw = placement.kv_link.latency_s + kv_bytes / placement.kv_link.bandwidth_bytes_per_s
            kv_x = np.maximum(0.0, raw - prefill_s * (1 - 1 / m.num_layers))  # layer-wise streaming (theory.md §5.6)
        ttft = prefill_s + kv_x
    e2e = ttft + (osl - 1) * tpot
    if mode == "continuous":
        tokens_per_s = B * E / step
    elif aggregated:
        tokens_per_s = B * osl / e2e
    else:
        tokens_per_s = B * osl / np.maximum(prefill_s + kv_x, (osl - 1) * tpot)

    fits = v.fits & at_end.fits & d_fits & p_fits
    nan = np.where(fits, 1.0, np.nan)

    # ---- devices and power, per replica
    devices = np.full(B.shape, float(dec.count))
    if placement.speculative and placement.draft is not None:
        devices = devices + placement.draft.count
    note = ""
    groups: dict[str, Any] = {}   # energy per group over one step (continuous) or one batch cycle (static)
    try:
        if mode == "continuous":
            groups["decode"] = _busy(dec, v, power) * v.time_s + _idle(dec, power) * (d_time + xfer)
            if d_res is not None:
                if placement.draft is not None:
                    groups["draft"] = _busy(placement.draft, d_res, power) * d_time \
                        + _idle(placement.draft, power) * (v.time_s + xfer)
                else:  # the draft runs on the decode group's devices
                    groups["decode"] = groups["decode"] + (_busy(dec, d_res, power) - _idle(dec, power)) * d_time
            by_group = {k: e / step for k, e in groups.items()}
            if not aggregated and p_res is not None:
                rate = tokens_per_s / osl                         # requests per second
                n_groups = rate * prefill_s / p_batch             # prefill groups kept busy
                devices = devices + n_groups * pg.count
                by_group["prefill"] = n_groups * _busy(pg, p_res, power)
        else:
            dec_time = (osl - 1) * step / E
            groups["decode"] = (_busy(dec, v, power) * v.time_s + _idle(dec, power) * (d_time + xfer)) * (osl - 1) / E
            if d_res is not None and placement.draft is not None:
                groups["draft"] = (_busy(placement.draft, d_res, power) * d_time
                                   + _idle(placement.draft, power) * (v.time_s + xfer)) * (osl - 1) / E
            elif d_res is not None:
                groups["decode"] = groups["decode"] + (_busy(dec, d_res, power) - _idle(dec, power)) * d_time * (
                    osl - 1) / E
            assert p_res is not None
            if aggregated:
                groups["decode"] = groups["decode"] + _busy(dec, p_res, power) * prefill_s
                cycle = e2e
            else:
                cycle = np.maximum(prefill_s + kv_x, dec_time)
                devices = devices + pg.count
                groups["prefill"] = _busy(pg, p_res, power) * prefill_s + _idle(pg, power) * (cycle - prefill_s)
                groups["decode"] = groups["decode"] + _idle(dec, power) * (cycle - dec_time)
            by_group = {k: e / cycle for k, e in groups.items()}
        by_group = {k: np.broadcast_to(w * power.pue, B.shape) for k, w in by_group.items()}
        power_w = sum(by_group.values())
    except UnknownSpecError as e:
        note = f"power not computed: {e}"
        by_group = {}
        power_w = np.full(B.shape, np.nan)

    def bound(r: StageResult | None) -> NDArray[np.str_]:
        return np.broadcast_to(r.bound, B.shape) if r is not None else np.full(B.shape, "—")

    return ServingResult(
        placement=placement.name, description=placement.describe(), mode=mode, request=request, batch=B, gamma=G,
        expected_tokens=np.broadcast_to(E, B.shape), ttft_s=ttft * nan, tpot_s=tpot * nan, e2e_s=e2e * nan,
        step_s=step * nan, prefill_s=np.broadcast_to(prefill_s, B.shape) * nan, draft_s=d_time * nan,
        verify_s=v.time_s * nan, transfer_s=xfer * nan, kv_transfer_s=np.broadcast_to(kv_x, B.shape) * nan,
        tokens_per_s=tokens_per_s * nan, devices=devices, power_w=np.broadcast_to(power_w, B.shape) * nan,
        memory_per_device_bytes=np.broadcast_to(at_end.memory_per_device_bytes, B.shape),
        power_by_group_w={k: np.where(fits, w, np.nan) for k, w in by_group.items()}, fits=fits,
        prefill_bound=bound(p_res), decode_bound=bound(v), draft_bound=bound(d_res), energy_note=note)
