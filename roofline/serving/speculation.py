"""Speculative decoding on devices: one round per gamma, against plain decoding on the target group.

tokens per user per second = E[N] / T_round, speedup = E[N] T_decode / T_round (the roofline-aware form
of Leviathan et al., Thm 3.8, https://arxiv.org/abs/2211.17192; docs/theory.md §4.3). The round itself
is :func:`roofline.serving.round.run_round`, the same one serving uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import attrs
import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import InfeasibleError, WorkloadError, broadcast_errors
from ..physics.energy import DEFAULT_POWER, PowerModel, group_busy_w
from ..physics.speculative import Acceptance
from ..physics.timing import evaluate_pass
from ..records import ArrayRecord
from ..specs.formats import Formats, check_format_keys
from ..specs.groups import DeviceGroup
from ..specs.links import LINKS, GroupLink
from ..specs.models import ModelSpec
from ..specs.params import EngineParams, default_params
from ..workload import check_count, check_gamma, check_grid, check_instance
from .round import Drafter, RoundPlan, energy_or_note, run_round

Array = NDArray[np.float64]


@attrs.frozen(kw_only=True, repr=False)
class SpecResult(ArrayRecord):
    """One speculative round and its comparison with plain decoding on the target group.

    Arrays broadcast over gamma, batch and context. ``*_j`` energies are NaN
    (with ``energy_note`` saying why) when a device's TDP is not published.
    ``draft_step_s`` is the time of one draft step (draft time / gamma).
    """

    headline: ClassVar[tuple[str, ...]] = ("tokens_per_s_per_user", "gamma", "batch", "speedup", "round_s", "draft_s",
                                           "verify_s", "energy_per_token_j", "fits")
    workload: ClassVar[tuple[str, ...]] = ("batch", "context", "gamma", "alpha")

    target: str
    draft: str
    draft_kind: str
    #: tokens of KV cache the draft attends to (a StreamingLLM cache); None: the whole context
    draft_kv_budget: int | None
    #: tokens the head's LM head scores (EAGLE-3's reduced draft vocabulary); None: the target's whole vocabulary
    draft_vocab: int | None
    target_group: str
    draft_group: str
    link: str
    acceptance: str
    gamma: Array
    batch: Array
    context: Array
    expected_tokens: Array
    #: the per-token alpha of each point (geometric acceptance; for a fitted one the i.i.d. alpha giving the same
    #: expected tokens at that gamma; NaN for a positional or measured table, which has none)
    alpha: Array
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
    #: why the scan's first point that does not fit does not ("" where every point fits): the first stage that
    #: does not, as `stage` says it
    infeasible_reason: str = ""
    #: the formats the target (verify and the baseline) and the draft ran in
    target_formats: Formats | None = None
    draft_formats: Formats | None = None

    def why_infeasible(self) -> str:
        """Why the scan's first infeasible point does not fit ("" where every point fits), as
        :meth:`ServingResult.why_infeasible <roofline.serving.serve.ServingResult.why_infeasible>` says it."""
        return self.infeasible_reason

    @property
    def draft_step_s(self) -> Array:
        """Time of one draft step (NaN at gamma = 0, where no step runs)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.gamma > 0, self.draft_s / self.gamma, np.nan)

    @property
    def extra_flop_fraction(self) -> Array:
        """FLOP spent per token beyond plain decoding (rejected drafts, re-verified positions)."""
        return self.flop_per_token / self.baseline_flop_per_token - 1

    @property
    def best_index(self) -> int:
        """Flat index of the feasible point with the most tokens/s per user."""
        v = np.where(self.fits, np.nan_to_num(self.tokens_per_s_per_user, nan=-1.0), -1.0)
        return int(np.argmax(v))


def _acceptance(acceptance: Acceptance | float) -> Acceptance:
    return acceptance if isinstance(acceptance, Acceptance) else Acceptance.geometric(acceptance)


#: Peak memory of a speculative round per grid point: ~940 bytes measured (a batch x gamma grid of 10^5 points
#: to 3x10^5 on gpt-oss-120b with its draft, ru_maxrss), rounded up.
SPEC_BYTES_PER_POINT = 1200.0


@broadcast_errors
def speculative_round(target: ModelSpec, *, verify_on: DeviceGroup, acceptance: Acceptance | float, gamma: ArrayLike,
                      batch: ArrayLike = 1, context: ArrayLike = 8192, draft: ModelSpec | None = None,
                      draft_on: DeviceGroup | None = None, draft_kind: str = "model", head_layers: int = 1,
                      draft_kv_budget: int | None = None, draft_vocab: int | None = None,
                      link: GroupLink = LINKS["pcie5"], sampling: str = "greedy",
                      target_formats: Mapping[str, Any] | None = None, draft_formats: Mapping[str, Any] | None = None,
                      params: EngineParams | None = None, power: PowerModel = DEFAULT_POWER) -> SpecResult:
    """Time, throughput and energy of speculative decoding with the given placement.

    ``draft_kind``: ``model`` (a separate draft model, ``draft``), ``mtp``
    (DeepSeek-style multi-token-prediction layers of the target), ``eagle``
    (an EAGLE-style head) or ``eagle3`` (EAGLE-3: its own LM head over a
    32,000-token draft vocabulary, three layers' features per position); the
    heads run ``head_layers`` of the target's layers plus an LM head. ``sampling="lossless"`` ships the draft's
    probability rows (gamma x vocab fp32) with the tokens, as lossless
    speculative sampling needs (docs/theory.md §5.5); ``greedy`` ships token ids only. ``draft_kv_budget``: the
    draft attends to at most this many tokens of KV (a StreamingLLM cache, MagicDec's large-batch drafting; the
    target itself as ``draft`` is self-speculation, its weights held once). ``draft_vocab``: the tokens a
    head's LM head scores (default: the target's whole vocabulary; an ``eagle3`` head's 32,000;
    :func:`~roofline.physics.stages.head_model`).
    Draft formats default to the draft device's native format.
    """
    tgt = check_instance("target", target, ModelSpec, optional=False)
    if draft_kind not in ("model", "mtp", "eagle", "eagle3"):
        raise WorkloadError(f"draft_kind must be one of model, mtp, eagle, eagle3, got {draft_kind!r}")
    drafter = Drafter(kind=draft_kind, model=check_instance("draft", draft, ModelSpec), head_layers=head_layers,
                      kv_budget=draft_kv_budget, vocab=draft_vocab)
    p = check_instance("params", params, EngineParams) or default_params()
    check_instance("power", power, PowerModel, optional=False)
    tg = check_instance("verify_on", verify_on, DeviceGroup, optional=False)
    dg = check_instance("draft_on", draft_on, DeviceGroup) or tg
    between = check_instance("link", link, GroupLink, optional=False)
    fmt = Formats.for_model(tgt, **check_format_keys(target_formats, "target_formats"), devices=(tg.device,))
    plan = RoundPlan(target=tgt, target_group=tg, target_formats=fmt,
                     drafter=drafter, draft_group=dg, draft_formats=draft_formats, link=between,
                     sampling=sampling, shared=dg == tg)
    acc = _acceptance(acceptance)
    G, B, L = check_gamma(gamma), check_count("batch", batch, minimum=1), check_count("context", context)
    check_grid(G, B, L, np.zeros(acc.shape), names=("gamma", "batch", "context", "alphas"),
               bytes_per_point=SPEC_BYTES_PER_POINT)
    G = G + np.zeros(acc.shape)   # an array of alphas adds its axes to the grid
    rnd = run_round(plan, batch=B, gamma=G, context=L, params=p)
    base = evaluate_pass(tgt, tg, plan.target_formats, batch=B, new_tokens=1.0, prefix_tokens=L, logits_per_seq=1.0,
                         mla_absorbed=True, stage="decode", params=p)
    return _result(plan, drafter, between, rnd, base, acc, G, B, L, power)


def _result(plan: RoundPlan, drafter: Drafter, link: GroupLink, rnd: Any, base: Any, acc: Acceptance, G: Array,
            B: Array, L: Array, power: PowerModel) -> SpecResult:
    shape = rnd.fits.shape
    nan = np.where(rnd.fits, 1.0, np.nan)
    E = np.broadcast_to(acc.expected_tokens(G), shape)
    round_s = rnd.time_s
    dg, tg = rnd.draft_group, rnd.target_group
    flop_round = rnd.draft.flop_per_device * dg.count + rnd.verify.flop_per_device * tg.count
    energy, note = energy_or_note(rnd, power)
    if energy is None:
        energy_tok = power_w = base_energy = np.full(shape, np.nan)
    else:
        total = sum(energy.values()) * power.pue
        power_w, energy_tok = total / round_s, total / (B * E)
        base_energy = group_busy_w(tg, base, power) * base.time_s * power.pue / B   # the target group alone
    full = lambda a: np.broadcast_to(a, shape)  # noqa: E731
    return SpecResult(
        target=plan.target.id, draft=drafter.describe(plan.target), draft_kind=drafter.kind,
        draft_kv_budget=drafter.kv_budget, draft_vocab=drafter.head_vocab(plan.target),
        target_group=tg.describe(), draft_group=dg.describe(),
        link="same devices" if plan.shared else link.name, acceptance=acc.describe(), gamma=full(G),
        batch=full(B), context=full(L), expected_tokens=E, alpha=full(acc.alpha_or_nan(G)), draft_s=rnd.draft_s * nan,
        verify_s=rnd.verify.time_s * nan, transfer_s=rnd.transfer_s * nan, round_s=round_s,
        tokens_per_s_per_user=E / round_s, tokens_per_s=B * E / round_s, baseline_decode_s=full(base.time_s),
        speedup=E * base.time_s / round_s, flop_per_token=full(flop_round / (B * E)),
        baseline_flop_per_token=full(base.flop_per_device * tg.count / B),
        energy_per_token_j=full(energy_tok * nan), baseline_energy_per_token_j=full(base_energy),
        power_w=full(power_w * nan), fits=rnd.fits,
        draft_bound=np.where(full(G) > 0, full(rnd.draft.bound), "none"),   # gamma 0 drafts nothing
        verify_bound=full(rnd.verify.bound),
        energy_note=note, infeasible_reason=rnd.why_infeasible(),
        target_formats=rnd.verify.formats, draft_formats=rnd.draft.formats)


def optimal_gamma(result: SpecResult) -> Any:
    """The gamma with the most tokens/s per user among the feasible points of a scan (integer search).

    A scan over gamma alone gives one int. On a grid whose other inputs vary too (``batch=[[1], [64]]`` against
    ``gamma=range(1, 11)``), each of their points has its own best gamma: an array over the grid without the
    gamma axis, NaN where no gamma of that point fits. Gamma must vary along one axis only."""
    if not isinstance(result, SpecResult):
        raise WorkloadError(f"optimal_gamma takes the SpecResult of speculative_round(...), got {type(result).__name__}")
    if not np.any(result.fits):
        raise InfeasibleError("no gamma in the scan fits in memory" + (f": {result.infeasible_reason}"
                                                                          if result.infeasible_reason else ""))
    tps = np.asarray(result.tokens_per_s_per_user, dtype=float)
    gamma = np.broadcast_to(np.asarray(result.gamma, dtype=float), tps.shape)
    fits = np.broadcast_to(result.fits, tps.shape)
    axes = [a for a in range(tps.ndim) if np.ptp(gamma, axis=a).any()]
    if len(axes) > 1:
        raise WorkloadError(f"gamma varies along {len(axes)} axes of the grid (shape {tps.shape}); give it one axis "
                            "to search along")
    if tps.ndim == 0 or not axes or all(n == 1 for a, n in enumerate(tps.shape) if a != axes[0]):
        return int(np.ravel(gamma)[result.best_index])
    axis = axes[0]
    score = np.where(fits, np.nan_to_num(tps, nan=-1.0), -np.inf)
    best = np.take_along_axis(gamma, np.expand_dims(np.argmax(score, axis=axis), axis), axis=axis)
    return np.where(np.any(fits, axis=axis), np.squeeze(best, axis=axis), np.nan)
