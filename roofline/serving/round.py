"""One speculative round (or one plain decode step): the only implementation, used by ``roofline spec`` and serving.

A round on a target group and a draft group (docs/theory.md §3.6, §5.5):

    T_round = T_draft(gamma steps on the draft group) + T_verify(gamma + 1 tokens on the target group)
              + T_transfer(draft tokens [+ probability rows] one way, accepted count + bonus token
                           [+ the target's hidden states a head drafts from] back)

With gamma = 0 and no draft it is one decode step. Energy per round: each group
draws its busy power while it works and its idle power while it waits on the
other (:mod:`roofline.physics.energy`); a draft on the target's own devices
adds its busy power there instead and needs to fit in memory beside the target.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np
from numpy.typing import NDArray

from ..errors import InfeasibleError, UnknownSpecError, WorkloadError
from ..physics.energy import PowerModel, group_busy_w, group_idle_w
from ..physics.stages import Setup, draft_steps, head_model
from ..physics.timing import StageResult, evaluate_pass, mix, require_feasible, spread
from ..specs.formats import Formats, check_format_keys, get_format, native_default
from ..specs.groups import DeviceGroup
from ..specs.links import GroupLink
from ..specs.models import ModelSpec
from ..specs.params import EngineParams
from ..specs.placement import DRAFT_KINDS, HEAD_KINDS
from ..workload import check_whole, one_of

Array = NDArray[np.float64]
#: Draft kinds that draft with no model of their own: n-gram (prompt-lookup) drafting copies the tokens that
#: followed the last n tokens' earlier occurrence in the context, a string search on the host with no forward pass
#: (Saxena 2023, https://github.com/apoorvumang/prompt-lookup-decoding; vLLM's ``ngram`` method,
#: https://docs.vllm.ai/en/latest/features/spec_decode.html): its draft costs nothing on the accelerator.
MODEL_FREE_KINDS = ("ngram",)
#: Draft kinds whose heads all run once per round, in parallel, on the verify pass's last hidden state (Medusa's
#: K heads each predict the token K positions ahead: Cai et al. 2024, https://arxiv.org/abs/2401.10774 §2.1):
#: one draft step whatever the draft length, not one per drafted token.
PARALLEL_HEAD_KINDS = ("medusa",)
SAMPLING = ("greedy", "lossless")
TOKEN_ID_BYTES = 4       # int32 token ids, as vLLM and TensorRT-LLM pass them
PROBABILITY_BYTES = 4    # fp32 probabilities for lossless (rejection-sampling) verification
#: Draft kinds that draft from the target's hidden states, so a head on devices of its own needs them shipped from
#: the target every round. EAGLE's head autoregresses on the target's features (its second-to-top layer's hidden
#: state) of the tokens accepted so far (Li et al. 2024, https://arxiv.org/abs/2401.15077 §3.1; vLLM's EAGLE
#: proposer takes ``target_hidden_states`` of every verified position, https://github.com/vllm-project/vllm/blob/
#: main/vllm/v1/spec_decode/eagle.py); an MTP module combines the main model's hidden state at position i with the
#: embedding of token i + 1 (DeepSeek-V3, https://arxiv.org/abs/2412.19437 §2.2); Medusa's heads all read the last
#: hidden state (Cai et al. 2024, https://arxiv.org/abs/2401.10774 §2.1). A draft model runs on token ids alone.
#: Value: positions shipped per sequence per round as a function of gamma (EAGLE and MTP: the accepted tokens and
#: the bonus, at most gamma + 1, charged at that bound; Medusa: the last one).
FEATURE_POSITIONS = {"eagle": lambda g: g + 1, "eagle3": lambda g: g + 1, "mtp": lambda g: g + 1,
                     "medusa": lambda g: np.ones_like(g)}
#: Hidden states a head reads per position where it is not one: EAGLE-3 fuses a low, a middle and a high layer's
#: (Li et al. 2025, https://arxiv.org/abs/2503.01840 §3.2; its fc takes 3h inputs,
#: https://github.com/SafeAILab/EAGLE/blob/cb7e084/eagle/traineagle3/cnets.py).
FEATURE_LAYERS = {"eagle3": 3}
#: Tokens an EAGLE-3 head's LM head scores unless told otherwise: ``draft_vocab_size`` in EAGLE's reference EAGLE-3
#: config (https://github.com/SafeAILab/EAGLE/blob/cb7e084/eagle/traineagle3/config.json) and in SpecForge's, which
#: trained most published EAGLE-3 heads (e.g.
#: https://github.com/sgl-project/SpecForge/blob/581664a/configs/qwen3-30B-A3B-eagle3.1.json,
#: https://github.com/sgl-project/SpecForge/blob/ca803a5/configs/gpt-oss-20B-eagle3.json); a target with a smaller
#: vocabulary drafts over all of it.
EAGLE3_DRAFT_VOCAB = 32_000


#: Families that share one tokenizer lineage (Qwen2 and Qwen3 checkpoints; Mixtral and Mistral).
TOKENIZER_LINEAGE = {"qwen2": "qwen", "qwen3": "qwen", "qwen3_moe": "qwen", "mixtral": "mistral"}
#: How far two checkpoints of one tokenizer may pad its embedding table apart: Qwen2.5-0.5B's has 151,936 rows
#: and Qwen2.5-7B's 152,064 for the same tokenizer (https://huggingface.co/Qwen/Qwen2.5-0.5B/blob/main/config.json,
#: https://huggingface.co/Qwen/Qwen2.5-7B/blob/main/config.json); other tokenizers of a family differ by more
#: (Mistral-7B v0.1's 32,000 and v0.3's 32,768).
VOCAB_PADDING_ROWS = 256


def shares_tokenizer(draft: ModelSpec, target: ModelSpec) -> bool:
    """Whether ``draft`` can draft for ``target``: the same vocabulary, or a tokenizer of the same lineage whose
    embedding table is padded to a different size (config.json carries the padded size, not the tokenizer)."""
    if draft.vocab_size == target.vocab_size:
        return True
    lineage = (TOKENIZER_LINEAGE.get(m.family, m.family) for m in (draft, target))
    return len(set(lineage)) == 1 and abs(draft.vocab_size - target.vocab_size) < VOCAB_PADDING_ROWS


@attrs.frozen(kw_only=True)
class Drafter:
    """What drafts: a separate model (``kind="model"``), ``head_layers`` of the target as an MTP/EAGLE head, Medusa
    heads (one step of a ``head_layers`` head per round: a residual block and an LM head each, as costly to read as
    a one-layer head's LM head and layer), or n-gram lookup (``kind="ngram"``: no model, no draft pass)."""

    kind: str = attrs.field(default="model", validator=attrs.validators.in_(DRAFT_KINDS))
    model: ModelSpec | None = None
    head_layers: int = attrs.field(default=1, converter=lambda v: check_whole("head_layers", v))
    #: tokens of KV cache the draft attends to (a StreamingLLM cache: a few sink tokens and the most recent ones;
    #: MagicDec, https://arxiv.org/abs/2408.11049), None: the whole context
    kv_budget: int | None = attrs.field(default=None, converter=lambda v: None if v is None else check_whole(
        "draft_kv_budget", v, minimum=1))
    #: tokens a head's LM head scores (EAGLE-3's reduced draft vocabulary, :func:`~roofline.physics.stages.head_model`);
    #: None: the target's whole vocabulary
    vocab: int | None = attrs.field(default=None, converter=lambda v: None if v is None else check_whole(
        "draft_vocab", v, minimum=1))

    @vocab.validator
    def _vocab(self, _a: attrs.Attribute, v: int | None) -> None:
        if v is not None and self.kind not in HEAD_KINDS:
            raise WorkloadError(f"draft_vocab = {v}: only a head of the target (draft kind "
                                f"{' or '.join(HEAD_KINDS)}) drafts over a vocabulary of its own; "
                                f"draft kind {self.kind!r} does not")

    @kv_budget.validator
    def _budget(self, _a: attrs.Attribute, v: int | None) -> None:
        if v is not None and self.kind in MODEL_FREE_KINDS:
            raise WorkloadError(f"draft kind {self.kind!r} drafts with no model, so it holds no KV cache to bound "
                                f"(draft_kv_budget = {v})")

    @kind.validator
    def _needs_model(self, _a: attrs.Attribute, kind: str) -> None:
        if kind == "model" and self.model is None:
            raise WorkloadError("draft kind 'model' needs a draft model")
        if kind != "model" and self.model is not None:   # silently drafting with something else is a wrong answer
            raise WorkloadError(f"draft kind {kind!r} drafts with head layers of the target, not with the draft model "
                                f"{self.model.id}: give no draft model, or draft kind 'model'")

    def head_vocab(self, target: ModelSpec) -> int | None:
        """The vocabulary a head's LM head scores where it is not the target's: ``vocab`` where given, else an
        EAGLE-3 head's :data:`EAGLE3_DRAFT_VOCAB`; None where that is the target's whole vocabulary."""
        if self.vocab is not None:   # one larger than the target's is refused by for_target
            return None if self.vocab == target.vocab_size else self.vocab
        return EAGLE3_DRAFT_VOCAB if self.kind == "eagle3" and EAGLE3_DRAFT_VOCAB < target.vocab_size else None

    def scored_vocab(self, target: ModelSpec) -> int:
        """Tokens the draft scores, over which lossless sampling ships its probability rows: a head's own
        vocabulary (:meth:`head_vocab`), a draft model's, else the target's."""
        own = self.head_vocab(target) if self.kind in HEAD_KINDS else None
        if own is not None:
            return own
        return self.model.vocab_size if self.model is not None else target.vocab_size

    def draft_steps(self, gamma: Any) -> Any:
        """Sequential draft passes per round for ``gamma`` drafted tokens (depth): gamma for a draft model and an
        MTP/EAGLE head, one for Medusa's parallel heads, none for n-gram lookup."""
        g = np.asarray(gamma, dtype=float)
        if self.kind in MODEL_FREE_KINDS:
            return np.zeros_like(g)
        return np.minimum(g, 1.0) if self.kind in PARALLEL_HEAD_KINDS else g

    def draft_context(self, context: Any) -> Any:
        """The context each draft step starts from: the sequence's, or at most the KV budget (a StreamingLLM cache
        holds ``kv_budget`` tokens however long the sequence is, so the draft's KV reads stop growing with it)."""
        return context if self.kv_budget is None else np.minimum(context, float(self.kv_budget))

    def shares_weights(self, target: ModelSpec) -> bool:
        """Whether the draft runs the target's own weights (self-speculation: the target drafts for itself through
        a bounded KV cache), so devices that hold both hold those weights once."""
        return self.kind == "model" and self.model is not None and self.model.id == target.id

    def check_self(self, target: ModelSpec, context: Any) -> None:
        """Self-speculation (the target drafting for itself) needs a KV budget below the context: over the same
        whole cache it would draft exactly what it verifies and gain nothing (MagicDec's self-speculation drafts
        through a StreamingLLM cache of a few hundred tokens: https://arxiv.org/abs/2408.11049)."""
        if not self.shares_weights(target):
            return
        if self.kv_budget is None:
            raise WorkloadError("the target drafting for itself (self-speculation) needs draft_kv_budget: over the "
                                "same KV cache it would draft what it verifies")
        if np.all(self.kv_budget >= np.asarray(context, dtype=float)):
            raise WorkloadError(f"draft_kv_budget {self.kv_budget:,} holds the whole context "
                                f"({float(np.max(context)):,.0f} tokens): the target would draft over its own full "
                                "cache and gain nothing; give a budget below it")

    def for_target(self, target: ModelSpec) -> ModelSpec:
        """The model that runs the draft steps; a separate draft must share the target's tokenizer."""
        if self.kind in MODEL_FREE_KINDS:
            raise WorkloadError(f"draft kind {self.kind!r} drafts with no model")
        if self.kind != "model":
            return head_model(target, self.head_layers, self.head_vocab(target))
        if self.model is None:  # excluded by the validator; kept for type checkers
            raise WorkloadError("draft kind 'model' needs a draft model")
        if not shares_tokenizer(self.model, target):
            raise WorkloadError(f"draft {self.model.id} ({self.model.family}, vocabulary {self.model.vocab_size:,}) "
                                f"and target {target.id} ({target.family}, {target.vocab_size:,}) do not share a "
                                "tokenizer, which speculative decoding needs: a draft of the target's family whose "
                                f"vocabulary is within {VOCAB_PADDING_ROWS} padding rows of the target's")
        return self.model

    def describe(self, target: ModelSpec) -> str:
        budget = f", KV budget {self.kv_budget:,} tokens" if self.kv_budget is not None else ""
        if self.shares_weights(target):
            return f"{target.id} itself (self-speculation{budget})"
        if self.kind == "model" and self.model is not None:
            return self.model.id + (f" ({budget[2:]})" if budget else "")
        if self.kind in MODEL_FREE_KINDS:
            return f"{self.kind} lookup (no draft model)"
        s = "s" if self.head_layers > 1 else ""
        absent = ", not in the checkpoint" if self.kind == "mtp" and target.num_mtp_layers == 0 else ""
        own = self.head_vocab(target)
        vocab = f", {own:,}-token draft vocabulary" if own is not None else ""
        return f"{target.id} {self.kind} head ({self.head_layers} layer{s}{absent}{vocab}{budget})"


def draft_formats(group: DeviceGroup, given: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """The draft's formats: each of weights, kv and activations as given, else (missing, None or ``"auto"``)
    the format the draft device computes natively (bf16 on GPUs, mxint8 on Corsair)."""
    given = check_format_keys(given, "draft_formats")
    chosen = {k: v for k, v in given.items() if v not in (None, "auto")}
    if all(k in chosen for k in ("weights", "kv", "activations")):
        return chosen
    native = native_default((group.device,))
    return {"weights": native, "kv": native, "activations": native, **chosen}


def round_transfer_s(link: GroupLink, batch: Any, gamma: Any, *, vocab_size: int = 0,
                     probability_rows: bool = False, draft_kind: str = "model", feature_bytes: float = 0.0) -> Array:
    """Time to move one speculative round between separate draft and target groups.

    Forward: ``gamma`` draft token ids per sequence, plus for lossless verification the draft's
    probability row for each of them (Leviathan et al. 2023, https://arxiv.org/abs/2211.17192,
    Algorithm 1 needs q(x) at the target). Back: the accepted count and the correction/bonus token per
    sequence (two int32), and for a draft that drafts from the target's hidden states (EAGLE, MTP, Medusa:
    :data:`FEATURE_POSITIONS`) those states, ``feature_bytes`` each (hidden size x activation bytes). Each
    direction pays the link latency once (docs/theory.md §5.5). Zero where ``gamma`` is 0 (no speculation,
    nothing to send).
    """
    b, g = np.asarray(batch, dtype=float), np.asarray(gamma, dtype=float)
    forward = b * g * TOKEN_ID_BYTES
    if probability_rows:
        forward = forward + b * g * vocab_size * PROBABILITY_BYTES
    back = b * 2 * TOKEN_ID_BYTES
    if draft_kind in FEATURE_POSITIONS:
        back = back + b * FEATURE_POSITIONS[draft_kind](g) * feature_bytes * FEATURE_LAYERS.get(draft_kind, 1)
    return np.where(g > 0, 2 * link.latency_s + (forward + back) / link.bandwidth_bytes_per_s, 0.0)


@attrs.frozen(kw_only=True)
class Round:
    """The stages of one round and what they add up to; arrays broadcast over the workload.

    ``draft`` is None for plain decoding. ``shared`` says the draft runs on the target's devices.
    Infeasible points have ``fits`` False and NaN times.
    """

    verify: StageResult
    verify_end: StageResult     # the verify pass at the context where memory is checked
    draft: StageResult | None
    transfer_s: Array
    fits: NDArray[np.bool_]
    chunk_s: Array              # the time one prompt chunk adds to the steps on average (0 without chunks)
    shared: bool
    target_group: DeviceGroup
    draft_group: DeviceGroup

    @property
    def draft_s(self) -> Array:
        zero = np.zeros(self.fits.shape)
        return zero if self.draft is None else np.broadcast_to(np.nan_to_num(self.draft.time_s), self.fits.shape)

    @property
    def time_s(self) -> Array:
        """draft + verify + transfer, NaN where the round does not fit."""
        return np.where(self.fits, self.draft_s + self.verify.time_s + self.transfer_s, np.nan)

    def why_infeasible(self) -> str:
        """What does not fit at the first point of the round that does not ("" when every point fits): the verify
        pass (at the context memory is checked at, then at the mean context with the prompt chunks a step carries),
        else the draft, else the two together on shared devices; in
        the words of :func:`~roofline.physics.timing.require_feasible` (bytes needed against bytes usable)."""
        if np.all(self.fits):
            return ""
        for part in (self.verify_end, self.verify, self.draft):
            if part is not None and not np.all(part.fits):
                try:
                    require_feasible(part)
                except InfeasibleError as e:
                    return str(e)
        return f"the draft and the target together do not fit on {self.target_group.describe()}"

    def energy_j(self, power: PowerModel) -> dict[str, Array]:
        """Energy per round by group (``target``; ``draft`` when separate), before PUE.

        Raises :class:`UnknownSpecError` when a device publishes no TDP.
        """
        tg, dg = self.target_group, self.draft_group
        draft_s, verify_s = self.draft_s, np.nan_to_num(self.verify.time_s)
        t_idle = group_idle_w(tg, power)
        out = {"target": group_busy_w(tg, self.verify, power) * verify_s + t_idle * (draft_s + self.transfer_s)}
        if self.draft is not None:
            d_busy = group_busy_w(dg, self.draft, power)
            if self.shared:
                out["target"] = out["target"] + (d_busy - t_idle) * draft_s
            else:
                out["draft"] = d_busy * draft_s + group_idle_w(dg, power) * (verify_s + self.transfer_s)
        return {k: spread(v, self.fits.shape) for k, v in out.items()}


@attrs.frozen(kw_only=True)
class RoundPlan:
    """Where and how a round runs: target (verify/decode) group, optional drafter on its group, the link."""

    target: ModelSpec
    target_group: DeviceGroup
    target_formats: Formats
    drafter: Drafter | None = None
    draft_group: DeviceGroup | None = None
    draft_formats: Mapping[str, str | None] | None = None
    link: GroupLink | None = None
    sampling: str = attrs.field(default="greedy", validator=one_of(SAMPLING))
    #: the draft runs on the target's own devices (no transfer; both must fit in its memory)
    shared: bool = True
    #: tokens the target verifies per round when the draft is a tree (EAGLE's and Medusa's token trees, verified
    #: in one pass under a tree attention mask: Miao et al. 2024, https://arxiv.org/abs/2305.09781); None: a chain
    #: of gamma drafted tokens and the bonus token (gamma + 1)
    tree_tokens: int | None = attrs.field(default=None, validator=attrs.validators.optional(
        lambda _i, _a, v: check_whole("tree_tokens", v, minimum=1)))

    def draft_setup(self, drafter: Drafter, params: EngineParams) -> Setup:
        """The draft's model, devices and formats. A draft on the target's own pipelined devices runs on one stage
        of them (the last, which holds the final hidden states and the LM head an EAGLE or MTP head drafts from:
        EAGLE's code keeps its head beside the LM head, ``device_map="auto"`` spreading only the target's layers,
        https://github.com/SafeAILab/EAGLE/blob/main/eagle/model/ea_model.py); a one-layer head cannot be split
        into stages at all."""
        group = self.target_group if self.shared or self.draft_group is None else self.draft_group
        if group is self.target_group and group.pp > 1:
            group = attrs.evolve(group, pp=1)
        model = drafter.for_target(self.target)
        chosen: Mapping[str, Any] = draft_formats(group, self.draft_formats)
        return Setup(model=model, group=group, formats=Formats.for_model(model, **chosen), params=params)


def mixed_verify(verify_at: Any, context: Any, *, batch: Any, extra_tokens: Any, chunk_tokens: Any,
                 stage: str) -> tuple[StageResult, Array]:
    """The mean verify/decode step when the prompts of arriving requests are prefilled in chunks inside it,
    and the time one chunk adds to the steps on average ((mean step - a step without chunks) / q).

    Each step needs ``batch x extra_tokens`` prompt tokens on average: q = B x extra / C chunks of C tokens.
    A step carries floor(q) chunks, and a share q - floor(q) of the steps one more; ``verify_at(context,
    chunks)`` times a step with that many chunks riding along. The mean step mixes these passes
    (:func:`roofline.physics.timing.mix`): a chunk's tokens route through MoE experts together, touching
    E(1-(1-k/E)^C) of the E experts (k per token) once per chunk rather than in every step, a chunk attends
    to its own prompt in the prefill form, and its compute is paid in full instead of hiding under a
    memory-bound step's time (Sarathi-Serve, Agrawal et al. OSDI 2024, https://arxiv.org/abs/2403.02310;
    docs/theory.md §6).
    """
    B, C = np.asarray(batch, dtype=float), np.asarray(chunk_tokens, dtype=float)
    q = B * np.asarray(extra_tokens, dtype=float) / C
    whole = np.floor(q)
    lo, hi = verify_at(context, whole), verify_at(context, whole + 1)
    mean = mix([lo, hi], [1.0 - (q - whole), q - whole], stage=stage)
    plain = verify_at(context, 0.0) if np.any(whole > 0) else lo   # a step without prompt chunks
    with np.errstate(divide="ignore", invalid="ignore"):
        per_chunk = np.where(q > 0, (mean.time_s - plain.time_s) / q, 0.0)
    return mean, np.nan_to_num(per_chunk)


def run_round(plan: RoundPlan, *, batch: Any, gamma: Any, context: Any, params: EngineParams,
              extra_tokens: Any = 0.0, chunk_tokens: Any = None, chunk_prefix: Any = 0.0,
              fit_context: Any = None) -> Round:
    """Evaluate one round of ``plan`` (checked arrays; ``gamma`` 0 everywhere without a drafter).

    ``extra_tokens`` per sequence ride along the verify pass (the prompt tokens of a mixed continuous-
    batching step, a mean count). Without ``chunk_tokens`` they are spread over every step; with it they
    arrive as prefill chunks of that many tokens (``chunk_prefix``: the mean prompt position a chunk starts
    at), so a share of the steps carry a chunk and the rest decode only (:func:`mixed_verify`).
    ``fit_context``, if given, is where memory is checked (the final context of a request), while time is
    taken at ``context`` (its mean).
    """
    G = np.asarray(gamma, dtype=float)
    tg, fmt = plan.target_group, plan.target_formats
    stage = "verify" if plan.drafter is not None else "decode"
    if plan.drafter is not None:
        plan.drafter.check_self(plan.target, context)

    verified = G + 1 if plan.tree_tokens is None else np.where(G > 0, float(plan.tree_tokens), 1.0)

    def verify_at(ctx: Any, chunks: Any = 0.0, extra: Any = 0.0) -> StageResult:
        return evaluate_pass(plan.target, tg, fmt, batch=batch, new_tokens=verified + extra, prefix_tokens=ctx,
                             logits_per_seq=verified, mla_absorbed=True, stage=stage, params=params, chunks=chunks,
                             chunk_tokens=0.0 if chunk_tokens is None else chunk_tokens, chunk_prefix=chunk_prefix)

    chunk_s: Any = 0.0
    if chunk_tokens is None or not np.any(np.asarray(extra_tokens) > 0):
        v = verify_at(context, extra=extra_tokens)
        v_end = v if fit_context is None else verify_at(fit_context)
    else:   # memory must also hold the workspace of the chunks a step can carry, at the final context
        v, chunk_s = mixed_verify(verify_at, context, batch=batch, extra_tokens=extra_tokens,
                                  chunk_tokens=chunk_tokens, stage=stage)
        most = np.ceil(np.asarray(batch, dtype=float) * np.asarray(extra_tokens, dtype=float) / chunk_tokens)
        v_end = verify_at(context if fit_context is None else fit_context, most)
    shape = np.broadcast_shapes(v.time_s.shape, G.shape)
    fits = v.fits & v_end.fits
    d = None
    if plan.drafter is not None and plan.drafter.kind not in MODEL_FREE_KINDS:
        ds, steps = plan.draft_setup(plan.drafter, params), plan.drafter.draft_steps(G)
        d = draft_steps(ds, batch=batch, context=plan.drafter.draft_context(context), gamma=steps)
        d_end = d if fit_context is None else draft_steps(ds, batch=batch, context=plan.drafter.draft_context(
            fit_context), gamma=np.minimum(steps, 1))
        fits = fits & d.fits & d_end.fits
        if plan.shared:   # draft and target share the devices: both sets of weights, KV and workspace must fit
            own = d_end.memory_per_device_bytes - (d_end.weights_per_device_bytes
                                                   if plan.drafter.shares_weights(plan.target) else 0.0)
            fits = fits & (v_end.memory_per_device_bytes + own <= v_end.usable_per_device_bytes)
    transfer = np.zeros(shape)
    if d is not None and not plan.shared:
        if plan.link is None:
            raise WorkloadError("a draft on separate devices needs a link to the target group")
        transfer = np.broadcast_to(round_transfer_s(
            plan.link, batch, G, probability_rows=plan.sampling == "lossless",
            vocab_size=plan.drafter.scored_vocab(plan.target) if plan.drafter is not None else plan.target.vocab_size,
            draft_kind=plan.drafter.kind if plan.drafter is not None else "model",
            feature_bytes=plan.target.hidden_size * get_format(fmt.activations).bytes_per_element), shape)
    dg = tg if plan.shared or plan.draft_group is None else plan.draft_group
    return Round(verify=v, verify_end=v_end, draft=d, transfer_s=transfer, fits=spread(fits, shape),
                 chunk_s=spread(chunk_s, shape), shared=plan.shared,
                 target_group=tg, draft_group=dg)


def energy_or_note(rnd: Round, power: PowerModel) -> tuple[dict[str, Array] | None, str]:
    """The round's energy by group, or None and why (a device without a published TDP)."""
    try:
        return rnd.energy_j(power), ""
    except UnknownSpecError as e:
        return None, f"energy not computed: {e}"
