"""Speculative rows: the draft a row's ``spec_method`` and ``draft_model`` name, its acceptance and its placement
(roofline/validation/README.md, columns ``spec_method`` to ``draft_vocab``)."""
from __future__ import annotations

import re

from ..errors import RooflineError
from ..physics.speculative import Acceptance
from ..serving.serve import Placement
from ..specs.groups import DeviceGroup
from ..specs.models import ModelSpec
from ..specs.resolve import resolve_model
from .rows import Row
from .rows import row_int as _int

#: ``spec_method`` values and the draft kind each runs (:data:`roofline.serving.round.DRAFT_KINDS`): EAGLE and
#: EAGLE-3 both draft with one decoder layer on the target's features (Li et al. 2025,
#: https://arxiv.org/abs/2503.01840 §3.1); EAGLE's scores the target's vocabulary with the target's LM head,
#: EAGLE-3's a reduced one with its own (:data:`roofline.serving.round.EAGLE3_DRAFT_VOCAB`) from three layers' features.
SPEC_METHODS = {"none": None, "draft": "model", "eagle": "eagle", "eagle3": "eagle3", "medusa": "medusa", "mtp": "mtp",
                "ngram": "ngram"}


def draft_column(row: Row, method: str) -> tuple[str, ModelSpec | None, int]:
    """(draft kind, draft model, head layers or heads) from ``draft_model``: a preset id or config path for a
    separate draft, or a head ``eagle:1``, ``mtp:1``, ``medusa:4`` (its layers; Medusa's count is its heads, all
    run in one step); empty for a head of one layer (and for n-gram lookup, which drafts with no model)."""
    kind, text = SPEC_METHODS[method], row.get("draft_model")
    if kind is None:   # the caller asks only rows that speculate
        raise RooflineError(f"spec_method {method} drafts nothing")
    if kind == "ngram":
        if text:
            raise RooflineError(f"spec_method ngram drafts with no model: draft_model = {text!r} is not used")
        return kind, None, 1
    head = re.fullmatch(r"(eagle3?|mtp|medusa):(\d+)", text)
    if head:   # an EAGLE-3 head's layers may be written eagle:N
        if (SPEC_METHODS[head.group(1)] or "").rstrip("3") != kind.rstrip("3"):
            raise RooflineError(f"draft_model {text!r} is not a {method} draft")
        return kind, None, int(head.group(2))
    if kind == "model":
        if not text:
            raise RooflineError("a draft-model row needs the draft model in draft_model (a preset id or config path): "
                                "the publication does not name it")
        return kind, resolve_model(row.get("model") if text == "self" else text), 1
    if text:
        raise RooflineError(f"draft_model = {text!r} for spec_method {method}: give its head as {method}:N")
    return kind, None, 1


def draft_vocab(row: Row) -> int | None:
    """Tokens the row's draft head scores where its ``draft_vocab`` column says (else None: the head's default, an
    EAGLE-3 head's reduced vocabulary or the target's whole one)."""
    if not row.get("draft_vocab"):
        return None
    vocab = _int(row, "draft_vocab")
    if vocab < 1:
        raise RooflineError(f"draft_vocab = {vocab}: a draft head scores at least one token")
    return vocab


def row_acceptance(row: Row, gamma: int) -> Acceptance:
    """The row's measured acceptance: ``acceptance_length`` (mean tokens per round, the bonus token included), else
    ``acceptance_rate`` (the per-token alpha, read as i.i.d.: Leviathan et al. 2023, https://arxiv.org/abs/2211.17192
    eq. 1); a tree's rounds need the length (a per-token alpha does not say how a tree's branches accept)."""
    tau, alpha = row.get("acceptance_length"), row.get("acceptance_rate")
    if tau:
        return Acceptance.measured({gamma: float(tau)})
    if alpha and not row.get("tree_tokens"):
        return Acceptance.geometric(float(alpha))
    raise RooflineError("speculative row without a published acceptance (acceptance_length, or acceptance_rate for "
                        "a chain draft): the speed it predicts hangs on it")


def row_placement(row: Row, group: DeviceGroup) -> tuple[Placement, int, Acceptance | None]:
    """The row's placement on ``group`` (its draft on the target's own devices), its draft length and its measured
    acceptance; without speculation a plain placement, gamma 0 and no acceptance."""
    method = row.get("spec_method") or "none"
    if method not in SPEC_METHODS:
        raise RooflineError(f"spec_method {method!r} is not one of {', '.join(SPEC_METHODS)}")
    if method == "none":
        return Placement(name=row.id, decode=group), 0, None
    kind, draft, layers = draft_column(row, method)
    default = layers if kind == "medusa" else None   # Medusa drafts one token per head
    gamma = _int(row, "draft_len", default) if default is not None else _int(row, "draft_len")
    if gamma < 1:
        raise RooflineError(f"draft_len = {gamma}: a speculative row drafts at least one token")
    tree = _int(row, "tree_tokens") if row.get("tree_tokens") else None
    if tree is not None and tree < gamma + 1:
        raise RooflineError(f"tree_tokens {tree} is fewer than a chain of draft_len {gamma} and its bonus token")
    budget = _int(row, "draft_kv_budget") if row.get("draft_kv_budget") else None
    if budget is not None and budget < 1:
        raise RooflineError(f"draft_kv_budget = {budget}: the draft's KV budget is at least one token")
    placement = Placement(name=row.id, decode=group, draft_kind=kind, draft_model=draft,
                          head_layers=1 if kind == "medusa" else layers, tree_tokens=tree, draft_kv_budget=budget,
                          draft_vocab=draft_vocab(row))
    return placement, gamma, row_acceptance(row, gamma)
