"""Power and energy of device groups.

Linear utilisation model (docs/theory.md §7, model 1; the utilisation-based power model of
ML.ENERGY's Zeus and of GenZ's energy estimates):

    P = P_idle + (P_TDP - P_idle) * min(1, w_c * T_compute / T + w_m * T_memory / T)

for the time a group works; a group that waits on another draws P_idle. Energy = P * T * devices, times the
facility PUE. The weights are the execution family's (``compute_power_weight``, ``memory_power_weight``): what
saturated compute units and a saturated memory stream each draw of the range from idle to TDP. They need not
sum to 1: on an H200 a copy at full bandwidth draws 0.76 of the range and a saturated GEMM reaches the 700 W cap
(roofline/validation/h200_microbench.json, ``power``), and the same weights give the board's power along a GEMM
from 1 to 4,096 token rows within 2% (docs/validation.md).

Busy power never drops below a floor set by what bounds each part of the stage's time (:func:`busy_floor_w`):
a serving step draws more than its bytes and FLOP per second account for (our H200's graph-replayed decode
step: 0.92-0.99 of TDP at batch 64-256 where the linear model gives 0.67-0.74), but only while it works: the
same board waiting on host launches draws its idle power (``power_wait``). So the step's time is split into
fixed costs (launches, host scheduling: the fixed floor, at least idle), collectives (the communication
floor) and work, whose floor rises from the bandwidth-bound floor to the compute-bound one as compute's share
of the work grows (a GEMM's power climbs from 0.71 to 0.98 of TDP by the time a third of its time is in
tensor cores: ``power_gemm``).
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..specs.devices import Device
from ..specs.execution import resolve_profile
from ..specs.groups import DeviceGroup
from ..workload import in_range
from .stage_result import StageResult

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
    """Idle power per device: the spec's value, else the documented fraction of TDP. Most spec values are an idle
    board's reading with no process on it (nvidia-smi, rocm-smi, hl-smi printouts; each note says); a serving GPU
    that waits holds a context and its KV cache, which can draw more (our H200 with a context held: 126 W, 0.18 of
    TDP), so a wait is priced at or a little under its power."""
    tdp = device.get("power.tdp")
    return device.idle_w if device.idle_w is not None else power.idle_fraction_of_tdp * tdp


def busy_floor_w(device: Device, *, time_s: ArrayLike, compute_s: ArrayLike, memory_s: ArrayLike,
                 communication_s: ArrayLike = 0.0, overhead_s: ArrayLike = 0.0, floor_fraction: float = 0.0,
                 compute_floor_fraction: float | None = None, compute_floor_share: float = 1.0,
                 communication_floor_fraction: float | None = None, fixed_floor_fraction: float | None = None,
                 power: PowerModel = DEFAULT_POWER) -> Array:
    """The busy floor of one device over a stage, in watts: the time-weighted mean of each share's floor,

        floor = TDP x (s_w x f_work + s_x x f_comm) + s_o x max(f_fixed x TDP, P_idle),
        f_work = f_mem + (f_comp - f_mem) x min(1, r / r_sat),   r = T_compute / (T_compute + T_memory),

    with s_o = T_overhead / T (fixed costs), s_x = T_communication / T and s_w = 1 - s_o - s_x (work, of which
    r is compute's share and r_sat = ``compute_floor_share``). ``floor_fraction`` is f_mem; the other floors
    default to it (one floor for all busy time, as families without a measured split have)."""
    t = np.asarray(time_s, dtype=float)
    tdp, idle = device.get("power.tdp"), idle_w(device, power)
    f_mem = floor_fraction
    f_comp = f_mem if compute_floor_fraction is None else compute_floor_fraction
    f_comm = f_mem if communication_floor_fraction is None else communication_floor_fraction
    f_fixed = f_mem if fixed_floor_fraction is None else fixed_floor_fraction
    c, m = np.asarray(compute_s, dtype=float), np.asarray(memory_s, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        s_o = np.clip(np.nan_to_num(np.asarray(overhead_s, dtype=float) / t), 0.0, 1.0)
        s_x = np.clip(np.nan_to_num(np.asarray(communication_s, dtype=float) / t), 0.0, 1.0 - s_o)
        r = np.nan_to_num(c / (c + m))
    f_work = f_mem + (f_comp - f_mem) * np.minimum(1.0, r / compute_floor_share)
    return tdp * ((1.0 - s_o - s_x) * f_work + s_x * f_comm) + s_o * max(f_fixed * tdp, idle)


def busy_power_w(device: Device, *, time_s: ArrayLike, compute_s: ArrayLike, memory_s: ArrayLike,
                 compute_weight: float, memory_weight: float, power: PowerModel = DEFAULT_POWER,
                 floor_fraction: float = 0.0, **floors: Any) -> Array:
    """Power of one device while it runs a stage: idle + (TDP - idle) x utilisation, utilisation =
    ``compute_weight`` x compute_s / time_s + ``memory_weight`` x memory_s / time_s clipped to [0, 1], and never
    below the busy floor (:func:`busy_floor_w`; ``floors`` are its other arguments: the time shares
    ``communication_s`` and ``overhead_s`` and the per-bound floors; with ``floor_fraction`` alone, one floor of
    that fraction of TDP: a clocked pipeline is not at idle power)."""
    t = np.asarray(time_s, dtype=float)
    tdp, idle = device.get("power.tdp"), idle_w(device, power)
    with np.errstate(divide="ignore", invalid="ignore"):
        u = (compute_weight * np.asarray(compute_s) + memory_weight * np.asarray(memory_s)) / t
    u = np.clip(np.nan_to_num(u, nan=0.0), 0.0, 1.0)
    busy = idle + (tdp - idle) * u
    floor = busy_floor_w(device, time_s=t, compute_s=compute_s, memory_s=memory_s, floor_fraction=floor_fraction,
                         power=power, **floors)
    return np.maximum(busy, floor)


def stage_power_w(device: Device, stage: StageResult, power: PowerModel = DEFAULT_POWER) -> Array:
    """:func:`busy_power_w` of one device while it runs ``stage``, with the stage's family's power weights and
    busy floors (the per-bound floors are family fields, resolved from the device like every family field)."""
    prof = resolve_profile(device)
    return busy_power_w(device, time_s=stage.time_s, compute_s=stage.compute_s, memory_s=stage.memory_s, power=power,
                        floor_fraction=stage.busy_floor_fraction, compute_weight=stage.compute_power_weight,
                        memory_weight=stage.memory_power_weight, communication_s=stage.communication_s,
                        overhead_s=stage.overhead_s, compute_floor_fraction=prof.compute_floor_fraction,
                        compute_floor_share=prof.compute_floor_share,
                        communication_floor_fraction=prof.communication_floor_fraction,
                        fixed_floor_fraction=prof.fixed_floor_fraction)


def group_busy_w(group: DeviceGroup, stage: StageResult, power: PowerModel = DEFAULT_POWER) -> Array:
    """Power of a whole group while it runs ``stage`` (every device of the tp x pp group draws it)."""
    return group.count * stage_power_w(group.device, stage, power)


def group_idle_w(group: DeviceGroup, power: PowerModel = DEFAULT_POWER) -> float:
    """Power of a whole group while it waits."""
    return group.count * idle_w(group.device, power)
