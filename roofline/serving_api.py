"""The door into the serving layer: :func:`evaluate_serving`, :func:`speculative_round`, :func:`sweep`,
:func:`deployment`, :func:`serve_at_rate`, :func:`max_rate`, the sizings :func:`size` and :func:`size_at_rate`,
:func:`enumerate_placements`, and the intervals :func:`interval` and :func:`with_intervals` taking their models,
devices, device groups and links by name (:func:`roofline.api.named_door` resolves them); the functions of
:mod:`roofline.serving` below take the records. Imported on first use: ``import roofline`` does not build the
serving layer.
"""

from __future__ import annotations

import functools
from typing import Any

from .api import device_kinds, devices_or_groups, named_door
from .serving import load, load_sizing, placements, serve, sizing, speculation, trust
from .serving import sweep as sweeping

evaluate_serving = named_door(serve.evaluate_serving, "model")
speculative_round = named_door(speculation.speculative_round, "target", "draft", "verify_on", "draft_on", "link")


def _self_draft(door: Any) -> Any:
    """``door`` taking ``draft="self"``: the target drafting for itself (self-speculation, with a KV budget)."""
    @functools.wraps(door)
    def with_self(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("draft") == "self":
            kwargs["draft"] = kwargs["target"] if "target" in kwargs else args[0]
        return door(*args, **kwargs)
    return with_self


speculative_round = _self_draft(speculative_round)
sweep = named_door(sweeping.sweep, "model", "devices")
deployment = named_door(load.deployment, "model")
serve_at_rate = named_door(load.serve_at_rate, "model")
max_rate = named_door(load.max_rate, "model")
#: a sizing's devices: an ID is searched over its family's group shapes, ``ID:N`` (or a DeviceGroup) is one shape
_SIZED = (devices_or_groups, "Sequence[DeviceLike | GroupLike] | str")
size = named_door(sizing.size, "model", "draft", devices=_SIZED)
size_at_rate = named_door(load_sizing.size_at_rate, "model", devices=_SIZED)
enumerate_placements = named_door(placements.enumerate_placements, "model", "draft_model", "kv_link", "draft_link",
                                  devices=(device_kinds, "Sequence[DeviceLike] | str"))
interval = named_door(trust.interval, "device")
with_intervals = named_door(trust.with_intervals, "device")

__all__ = ["deployment", "enumerate_placements", "evaluate_serving", "interval", "max_rate", "serve_at_rate",
           "size", "size_at_rate", "speculative_round", "sweep", "with_intervals"]
