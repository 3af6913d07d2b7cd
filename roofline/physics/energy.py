"""Power and energy of device groups.

Linear utilisation model (docs/theory.md §7, model 1; the utilisation-based power model of
ML.ENERGY's Zeus and of GenZ's energy estimates):

    P = P_idle + (P_TDP - P_idle) * min(1, w_c * T_compute / T + w_m * T_memory / T)

clipped below at P_idle, for the time a group works; a group that waits on another draws P_idle. Energy =
P * T * devices, times the facility PUE. The weights are the execution family's (``compute_power_weight``,
``memory_power_weight``): what saturated compute units and a saturated memory stream each draw of the range
from idle to TDP. They need not sum to 1: on an H200 a copy at full bandwidth draws 0.76 of the range and a
saturated GEMM reaches the 700 W cap (roofline/validation/h200_microbench.json, ``power``), and the same
weights give the board's power along a GEMM from 1 to 4,096 token rows within 2% (docs/validation.md).
"""

from __future__ import annotations

import attrs
import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..specs.devices import Device
from ..specs.groups import DeviceGroup
from ..workload import in_range
from .timing import StageResult

Array = NDArray[np.float64]


@attrs.frozen(kw_only=True)
class PowerModel:
    """Parameters of the power model that are not an execution family's (its weights and busy floor are).

    * ``idle_fraction_of_tdp``: used only when a spec file does not publish idle
      power: 0.12 = the measured 85 W of 700 W on H100 SXM (hardware_specs/h100-sxm.toml).
    * ``pue``: facility power usage effectiveness (1.0 = chip power only).
    """

    idle_fraction_of_tdp: float = attrs.field(default=0.12, validator=in_range(0, 1))
    pue: float = attrs.field(default=1.0, validator=in_range(1))


DEFAULT_POWER = PowerModel()


def idle_w(device: Device, power: PowerModel = DEFAULT_POWER) -> float:
    """Idle power per device: the spec's value, else the documented fraction of TDP."""
    tdp = device.get("power.tdp")
    return device.idle_w if device.idle_w is not None else power.idle_fraction_of_tdp * tdp


def busy_power_w(device: Device, *, time_s: ArrayLike, compute_s: ArrayLike, memory_s: ArrayLike,
                 compute_weight: float, memory_weight: float, power: PowerModel = DEFAULT_POWER,
                 floor_fraction: float = 0.0) -> Array:
    """Power of one device while it runs a stage: idle + (TDP - idle) x utilisation, utilisation =
    ``compute_weight`` x compute_s / time_s + ``memory_weight`` x memory_s / time_s clipped to [0, 1], and never
    below ``floor_fraction`` x TDP (the execution profile's busy floor: a clocked pipeline is not at idle power;
    the GPU family's is fitted to serving power, see ``EngineParams``)."""
    t = np.asarray(time_s, dtype=float)
    tdp, idle = device.get("power.tdp"), idle_w(device, power)
    with np.errstate(divide="ignore", invalid="ignore"):
        u = (compute_weight * np.asarray(compute_s) + memory_weight * np.asarray(memory_s)) / t
    u = np.clip(np.nan_to_num(u, nan=0.0), 0.0, 1.0)
    busy = idle + (tdp - idle) * u
    return np.maximum(busy, floor_fraction * tdp) if floor_fraction > 0 else busy


def stage_power_w(device: Device, stage: StageResult, power: PowerModel = DEFAULT_POWER) -> Array:
    """:func:`busy_power_w` of one device while it runs ``stage`` (with the stage's family's busy floor and
    power weights)."""
    return busy_power_w(device, time_s=stage.time_s, compute_s=stage.compute_s, memory_s=stage.memory_s, power=power,
                        floor_fraction=stage.busy_floor_fraction, compute_weight=stage.compute_power_weight,
                        memory_weight=stage.memory_power_weight)


def group_busy_w(group: DeviceGroup, stage: StageResult, power: PowerModel = DEFAULT_POWER) -> Array:
    """Power of a whole group while it runs ``stage`` (every device of the tp x pp group draws it)."""
    return group.count * stage_power_w(group.device, stage, power)


def group_idle_w(group: DeviceGroup, power: PowerModel = DEFAULT_POWER) -> float:
    """Power of a whole group while it waits."""
    return group.count * idle_w(group.device, power)
