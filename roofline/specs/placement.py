"""A placement: which device groups run a model's stages (prefill, decode or verify, and a speculative draft), and
the links between them. A deployment's description, as a :class:`~roofline.specs.groups.DeviceGroup` is a group's;
:mod:`roofline.serving.serve` evaluates it. :meth:`Placement.build` is its constructor from names
(``"b200:8"``, a model id, a link name), resolved here in specs (:mod:`roofline.specs.resolve`); the layers above
take the record.
"""

from __future__ import annotations

from typing import Any

import attrs

from ..errors import WorkloadError
from ..workload import check_whole, record_of
from .devices import Device
from .groups import DeviceGroup
from .links import LINKS, GroupLink, get_link
from .models import ModelSpec
from .resolve import GroupLike, ModelLike, resolve_group, resolve_model

#: What may draft for a speculative placement: a separate model, the target's own MTP or EAGLE head layers,
#: Medusa heads, or n-gram lookup (:class:`roofline.serving.round.Drafter`).
DRAFT_KINDS = ("model", "mtp", "eagle", "eagle3", "medusa", "ngram")
#: Draft kinds that draft with layers of the target's own (a head), not a separate model.
HEAD_KINDS = ("mtp", "eagle", "eagle3", "medusa")


@attrs.frozen(kw_only=True)
class Placement:
    """Stages on device groups. ``draft_kind`` None means no speculation; ``draft`` None with a draft kind
    means the draft runs on the decode group's own devices."""

    name: str = attrs.field()
    decode: DeviceGroup = attrs.field(validator=record_of(DeviceGroup))
    prefill: DeviceGroup | None = attrs.field(default=None, validator=record_of(DeviceGroup, optional=True))
    draft: DeviceGroup | None = attrs.field(default=None, validator=record_of(DeviceGroup, optional=True))
    draft_model: ModelSpec | None = attrs.field(default=None, validator=record_of(ModelSpec, optional=True))
    draft_kind: str | None = attrs.field(default=None)
    head_layers: int = 1
    #: tokens verified per round when the draft is a tree (:class:`~roofline.serving.round.RoundPlan`); None: a chain
    tree_tokens: int | None = None
    #: tokens of KV cache the draft attends to (a StreamingLLM cache, MagicDec); None: the whole context
    draft_kv_budget: int | None = None
    #: tokens a head's LM head scores (EAGLE-3's reduced draft vocabulary); None: the target's whole vocabulary
    draft_vocab: int | None = attrs.field(default=None)
    kv_link: GroupLink = attrs.field(factory=lambda: LINKS["nvlink"])
    draft_link: GroupLink = attrs.field(factory=lambda: LINKS["pcie5"])

    @name.validator
    def _name(self, _a: attrs.Attribute, v: Any) -> None:   # rows and comparisons are told apart by it
        if not isinstance(v, str) or not v.strip():
            raise WorkloadError(f"a placement needs a name (a non-empty string), got {v!r}")

    @draft_kind.validator
    def _kind(self, _a: attrs.Attribute, v: str | None) -> None:
        if v is not None and v not in DRAFT_KINDS:
            raise WorkloadError(f"draft_kind must be None or one of {', '.join(DRAFT_KINDS)}, got {v!r}")
        if v == "model" and self.draft_model is None:
            raise WorkloadError(f"placement {self.name!r}: draft_kind 'model' needs a draft_model")
        if v is None and self.draft is not None:   # a draft group that would draft nothing
            raise WorkloadError(f"placement {self.name!r}: a draft group needs a draft_model (or draft_kind 'mtp' "
                                "'eagle' or 'eagle3' to draft with the target's own head layers)")

    @draft_vocab.validator
    def _vocab(self, _a: attrs.Attribute, v: int | None) -> None:
        if v is None:
            return
        check_whole("draft_vocab", v, minimum=1)
        if self.draft_kind not in HEAD_KINDS:
            raise WorkloadError(f"placement {self.name!r}: draft_vocab = {v} is for a head of the target (draft_kind "
                                f"{' or '.join(HEAD_KINDS)}), not draft_kind {self.draft_kind!r}")

    @property
    def speculative(self) -> bool:
        return self.draft_kind is not None

    @property
    def draft_group(self) -> DeviceGroup:
        return self.draft or self.decode

    @property
    def target_devices(self) -> tuple[Device, ...]:
        """The devices the target model runs on: the decode (verify) group's, then the prefill group's."""
        return (self.decode.device,) + ((self.prefill.device,) if self.prefill is not None else ())

    def describe(self) -> str:
        parts = [f"prefill {self.prefill.describe() if self.prefill else '(on decode group)'}",
                 f"{'verify' if self.speculative else 'decode'} {self.decode.describe()}"]
        if self.speculative:
            head = (f", {self.draft_kind} head" + (f" over {self.draft_vocab:,} tokens" if self.draft_vocab else "")
                    if self.draft_kind in HEAD_KINDS else "")
            parts.append(f"draft {self.draft_group.describe() if self.draft else '(on target group)'}{head}")
        return "; ".join(parts)

    @classmethod
    def build(cls, name: str, *, decode: GroupLike, prefill: GroupLike | None = None, draft: GroupLike | None = None,
              draft_model: ModelLike | None = None, draft_kind: str | None = None, head_layers: int = 1,
              kv_link: str | GroupLink = "nvlink", draft_link: str | GroupLink = "pcie5",
              draft_kv_budget: int | None = None, draft_vocab: int | None = None) -> Placement:
        """Convenience constructor taking ``"b200:8"``-style group strings and model ids."""
        dm = resolve_model(draft_model) if draft_model is not None else None
        kind = draft_kind if draft_kind is not None else ("model" if dm is not None else None)
        return cls(name=name, decode=resolve_group(decode), prefill=resolve_group(prefill) if prefill else None,
                   draft=resolve_group(draft) if draft else None, draft_model=dm, draft_kind=kind,
                   head_layers=head_layers, kv_link=get_link(kv_link), draft_link=get_link(draft_link),
                   draft_kv_budget=draft_kv_budget, draft_vocab=draft_vocab)
