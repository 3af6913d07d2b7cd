"""Communication inside a device group: tensor-parallel all-reduce, expert all-to-all, pipeline hops.

Collective cost = latency terms + bytes over the achieved link bandwidth
(docs/theory.md §5.1-5.4). Ring all-reduce: t0 + 2(p-1) t_hop + 2(p-1)/p M/W
(Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
workstations", https://doi.org/10.1016/j.jpdc.2008.09.002; GenZ's
collective_times.py, https://github.com/abhibambhaniya/GenZ-LLM-Analyzer).
Tensor parallelism pays two all-reduces per layer (Megatron-LM,
https://arxiv.org/abs/1909.08053); expert parallelism replaces the MoE
layers' all-reduce by two all-to-alls of the routed tokens' activations.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..specs.formats import Format
from ..specs.groups import DeviceGroup
from ..specs.models import ModelSpec
from ..specs.params import EngineParams

Array = NDArray[np.float64]


def allreduce_s(message_bytes: Any, p: int, bandwidth_bytes_per_s: float, hop_s: float, base_s: float) -> Any:
    """Ring all-reduce of ``message_bytes`` over ``p`` ranks: t0 + 2(p-1) t_hop + 2(p-1)/p M/W."""
    return base_s + 2 * (p - 1) * hop_s + 2 * (p - 1) / p * message_bytes / bandwidth_bytes_per_s


def alltoall_s(message_bytes: Any, p: int, bandwidth_bytes_per_s: float, hop_s: float, base_s: float) -> Any:
    """All-to-all sending (p-1)/p of ``message_bytes`` off each rank: t0 + (p-1) t_hop + (p-1)/p M/W."""
    return base_s + (p - 1) * hop_s + (p - 1) / p * message_bytes / bandwidth_bytes_per_s


def group_communication_s(model: ModelSpec, group: DeviceGroup, activation: Format, tokens: Any,
                          params: EngineParams) -> Any:
    """Exposed communication of one pass over ``tokens`` tokens: TP collectives and PP stage crossings."""
    tp, pp, dev = group.tp, group.pp, group.device
    if tp == 1 and pp == 1:
        return 0.0
    bw = dev.get("scale_up.bandwidth") * params.link_bandwidth_fraction
    hop = dev.scale_up.latency_s if dev.scale_up.latency_s is not None else params.link_hop_latency_s
    hidden_bytes = tokens * model.hidden_size * activation.bytes_per_element
    comm: Any = 0.0
    if tp > 1:
        n_ar = 2 * model.num_layers - (model.num_moe_layers if group.ep > 1 else 0)
        comm = n_ar * allreduce_s(hidden_bytes, tp, bw, hop, params.collective_base_s)
        if group.ep > 1:
            routed = hidden_bytes * model.experts_per_token
            comm = comm + 2 * model.num_moe_layers * alltoall_s(routed, group.ep, bw, hop, params.collective_base_s)
    if pp > 1:  # each pass crosses pp - 1 stage boundaries with the tokens' activations
        comm = comm + (pp - 1) * (hop + hidden_bytes / bw)
    return comm
