"""A device group: the ``tp x pp`` identical devices that run one model replica."""

from __future__ import annotations

from typing import Any

import attrs

from ..errors import WorkloadError
from ..workload import check_whole
from .devices import Device

#: More devices than this in one group is not a deployment anyone builds (and overflows nothing downstream).
MAX_GROUP_DEVICES = 1_000_000


def _whole(_inst: object, attribute: attrs.Attribute, value: int) -> None:
    check_whole(attribute.name, value, minimum=1, maximum=MAX_GROUP_DEVICES)


@attrs.frozen(kw_only=True)
class DeviceGroup:
    """``tp * pp`` identical devices running one model replica.

    ``tp``: tensor parallelism (weights, KV heads and FLOP split; two
    all-reduces per layer, Megatron-LM, https://arxiv.org/abs/1909.08053).
    ``pp``: pipeline stages of consecutive layers (each device holds 1/pp of
    the layers; a token crosses the stages one after the other, so a pass takes
    the sum of the stage times plus pp - 1 hops: PP adds capacity, not speed).
    ``ep`` > 1: the MoE layers use expert parallelism (all-to-all of token
    activations) over ``ep`` of the tp devices instead of tensor-parallel all-reduce.
    ``dp`` > 1: attention runs data-parallel over ``dp`` sub-groups of tp/dp devices ("DP attention" in
    SGLang and TensorRT-LLM, https://lmsys.org/blog/2024-12-04-sglang-v0-4/#data-parallelism-attention-for-deepseek-models):
    each sub-group holds the attention weights (split tp/dp ways) and the KV of its batch/dp sequences,
    so an MLA cache is no longer replicated on every rank; the other layers still span all tp devices.
    """

    device: Device = attrs.field(validator=attrs.validators.instance_of(Device))
    tp: int = attrs.field(default=1, validator=_whole)
    ep: int = attrs.field(default=1, validator=_whole)
    pp: int = attrs.field(default=1, validator=_whole)
    dp: int = attrs.field(default=1, validator=_whole)

    @dp.validator
    @ep.validator
    def _divides_tp(self, a: attrs.Attribute, v: int) -> None:
        if v > self.tp or self.tp % v:
            why = {"ep": "experts are spread over the tp devices", "dp": "attention runs on tp/dp devices per replica"}
            raise WorkloadError(f"{a.name} ({v}) must divide tp ({self.tp}): {why[a.name]}")

    @property
    def attention_tp(self) -> int:
        """Devices one attention sub-group splits its heads over (tp / dp)."""
        return self.tp // self.dp

    @property
    def count(self) -> int:
        """Devices in the group (tp x pp)."""
        return self.tp * self.pp

    @property
    def shape(self) -> str:
        """The group in the resolver's syntax: ``b200``, ``b200:8``, ``corsair:1x2``."""
        if self.pp > 1:
            return f"{self.device.id}:{self.tp}x{self.pp}"
        return f"{self.device.id}:{self.tp}" if self.tp > 1 else self.device.id

    def describe(self) -> str:
        parts = [f"TP{self.tp}"] if self.tp > 1 else []
        parts += [f"EP{self.ep}"] if self.ep > 1 else []
        parts += [f"DP-attention{self.dp}"] if self.dp > 1 else []
        parts += [f"PP{self.pp}"] if self.pp > 1 else []
        head = f"{self.count}x {self.device.id}" if self.count > 1 else self.device.id
        return head + (f" ({', '.join(parts)})" if parts else "")


def with_layout(group: DeviceGroup, *, tp: int | None = None, ep: int | None = None, pp: int | None = None,
                dp: int | None = None) -> DeviceGroup:
    """``group`` with ``tp``, ``ep``, ``pp`` and ``dp`` (attention data-parallel degree) filled in where the group
    does not say them; a value that contradicts it (``"b200:8"`` with ``tp=2``) is an error rather than a silent
    choice. None leaves a degree as it is."""
    changes: dict[str, Any] = {}
    for key, value in (("tp", tp), ("pp", pp), ("ep", ep), ("dp", dp)):
        if value is None:
            continue
        have = getattr(group, key)
        if key in ("tp", "pp") and have != 1 and value != have:
            raise WorkloadError(f"device group {group.shape!r} has {key} {have} but {key}={value!r} was also given")
        changes[key] = value
    return attrs.evolve(group, **changes) if changes else group
