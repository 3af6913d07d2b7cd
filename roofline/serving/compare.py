"""Devices (or what-if variants, or group shapes) side by side: decode, prefill, capacity, tokens/s per kW."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np
from numpy.typing import NDArray

from ..errors import RooflineError
from ..physics.energy import DEFAULT_POWER, PowerModel, group_busy_w
from ..physics.stage_result import StageResult
from ..physics.stages import decode_step, max_batch, prefill
from ..specs.groups import DeviceGroup
from ..specs.models import ModelSpec
from ..specs.params import EngineParams
from ..specs.prices import Prices, shipped_prices
from .whatif import elasticities

Array = NDArray[np.float64]


@attrs.frozen(kw_only=True)
class Comparison:
    """One row of a comparison: a named group's decode and prefill, its capacity and efficiency, or why not."""

    name: str
    group: DeviceGroup
    decode: StageResult | None = None
    prefill: StageResult | None = None
    max_batch: int = 0
    tokens_per_s_per_kw: Array | None = None
    #: decode cost: the group's devices at their price over its output tokens (NaN where unpriced)
    usd_per_million_output_tokens: Array | None = None
    power_note: str = ""
    error: str = ""
    elasticity: Mapping[str, float] | None = None


def compare(model: ModelSpec, groups: Sequence[tuple[str, DeviceGroup]], *, batch: Array, context: int, prompt: int,
            formats: Mapping[str, Any], params: EngineParams, with_elasticity: bool = False,
            power: PowerModel = DEFAULT_POWER, prices: Prices | None = None) -> list[Comparison]:
    """Decode at each batch and ``context``, prefill of ``prompt``, max batch, tokens/s per kW and decode cost
    per million output tokens per group: (devices x USD per hour + busy power x PUE x USD per kWh) / 3600 /
    tokens/s x 1e6, as :func:`roofline.serving.serve.evaluate_serving` prices a replica (NaN where electricity is
    priced but the group's power is unknown); a group that cannot run the model gets its error instead."""
    prices = prices if prices is not None else shipped_prices()
    out = []
    kw = dict(params=params, **formats)
    for name, g in groups:
        try:
            dec = decode_step(model, g, batch=batch, context=context, on_infeasible="nan", **kw)
            pre = prefill(model, g, prompt=prompt, on_infeasible="nan", **kw)
            row = Comparison(name=name, group=g, decode=dec, prefill=pre,
                             max_batch=int(max_batch(model, g, context=context, **kw)))
            power_w: Any = np.nan   # unknown power: no electricity cost to add ($/Mtok NaN where one is priced)
            try:
                power_w = group_busy_w(g, dec, power) * power.pue
                row = attrs.evolve(row, tokens_per_s_per_kw=dec.tokens_per_s / (power_w / 1000))
            except RooflineError as e:
                row = attrs.evolve(row, power_note=str(e))
            usd_per_hour = g.count * prices.usd_per_hour(g.device.id) + (
                power_w / 1000 * prices.usd_per_kwh if prices.usd_per_kwh else 0.0)
            row = attrs.evolve(row, usd_per_million_output_tokens=usd_per_hour / 3600 / dec.tokens_per_s * 1e6)
            if with_elasticity:
                first = int(np.ravel(batch)[0])
                row = attrs.evolve(row, elasticity=elasticities(lambda d: float(decode_step(
                    model, attrs.evolve(g, device=d), batch=first, context=context, on_infeasible="nan", **kw).time_s),
                    g.device))
        except RooflineError as e:
            row = Comparison(name=name, group=g, error=str(e))
        out.append(row)
    return out
