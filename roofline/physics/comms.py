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

from ..specs.fabric import Link
from ..specs.formats import Format
from ..specs.groups import DeviceGroup
from ..specs.models import ModelSpec
from ..specs.params import EngineParams
from .work import expert_load_imbalance

Array = NDArray[np.float64]


def allreduce_s(message_bytes: Any, p: int, bandwidth_bytes_per_s: float, hop_s: float, base_s: float,
                hops: int | None = None) -> Any:
    """Ring all-reduce of ``message_bytes`` over ``p`` ranks: t0 + 2(p-1) t_hop + 2(p-1)/p M/W. ``hops``: the
    link hops of its reduce-scatter where they are not p - 1 (a torus's rings along each axis,
    :meth:`~roofline.specs.fabric.Link.ring_hops`): t0 + 2 hops t_hop + 2(p-1)/p M/W."""
    return base_s + 2 * (p - 1 if hops is None else hops) * hop_s + 2 * (p - 1) / p * message_bytes / bandwidth_bytes_per_s


def alltoall_s(message_bytes: Any, p: int, bandwidth_bytes_per_s: float, hop_s: float, base_s: float,
               hops: int | None = None) -> Any:
    """All-to-all sending (p-1)/p of ``message_bytes`` off each rank: t0 + (p-1) t_hop + (p-1)/p M/W (``hops``
    for p - 1 on a torus, as :func:`allreduce_s`)."""
    return base_s + (p - 1 if hops is None else hops) * hop_s + (p - 1) / p * message_bytes / bandwidth_bytes_per_s


def scheduled_allreduce_s(message_bytes: Any, p: int, bandwidth_bytes_per_s: float, hop_s: float,
                          base_s: float) -> Any:
    """A compiler-scheduled (or one-shot) all-reduce: every rank exchanges directly, so the latency is two
    hops (reduce-scatter, all-gather) whatever p is; the data volume stays 2(p-1)/p M (Groq's
    software-scheduled network, https://groq.com/groq-at-isca-2022; one-shot NVLink kernels)."""
    return base_s + 2 * hop_s + 2 * (p - 1) / p * message_bytes / bandwidth_bytes_per_s


def oneshot_allreduce_s(message_bytes: Any, p: int, bandwidth_bytes_per_s: float, hop_s: float,
                        base_s: float) -> Any:
    """One-shot all-reduce: every rank reads the other p-1 ranks' whole message over the fabric and reduces
    locally, t0 + t_hop + (p-1) M/W: one hop of latency, (p-1) M of traffic per rank (TensorRT-LLM's custom
    all-reduce ``ONESHOT`` strategy for small messages, https://github.com/NVIDIA/TensorRT-LLM/blob/main/cpp/
    tensorrt_llm/kernels/customAllReduceKernels.h; NCCL's LL protocol plays the same role)."""
    return base_s + hop_s + (p - 1) * message_bytes / bandwidth_bytes_per_s


def auto_allreduce_s(message_bytes: Any, p: int, bandwidth_bytes_per_s: float, hop_s: float, base_s: float) -> Any:
    """The faster of the one-shot and the ring all-reduce at this message size, as serving stacks pick per
    call: one-shot wins for decode's few-KB messages (latency), the ring for prefill's megabytes (bandwidth)."""
    return np.minimum(oneshot_allreduce_s(message_bytes, p, bandwidth_bytes_per_s, hop_s, base_s),
                      allreduce_s(message_bytes, p, bandwidth_bytes_per_s, hop_s, base_s))


def switch_allreduce_s(message_bytes: Any, p: int, bandwidth_bytes_per_s: float, hop_s: float,
                       base_s: float) -> Any:
    """All-reduce reduced in the switch (NVLink SHARP, NVLS: "collectives such as ncclAllReduce ... offloaded to the
    NVSwitch domain", https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-nvls-enable): each rank
    writes its partial M to the switch once and reads the sum once, t0 + 2 t_hop + M/W whatever p is. TensorRT-LLM's
    ``gemm_allreduce_plugin`` issues it from the GEMM's epilogue (multimem stores), as NVIDIA's MLPerf engines build it."""
    return base_s + 2 * hop_s + message_bytes / bandwidth_bytes_per_s


def fused_gemm_share(model: ModelSpec) -> float:
    """Share of a pass's weight matmuls (FLOP and weight bytes alike) in the GEMMs whose outputs the tensor-parallel
    all-reduces sum: the attention output projection (heads x head_dim x hidden per layer) and the MLP's, the shared
    experts' and the active routed experts' down projections (a third of each gated MLP) [derived from the
    parameter counts; MLA's output projection is counted as heads x head_dim x hidden, an approximation]."""
    parts = model.param_breakdown()
    active = parts["experts"] * (model.experts_per_token / model.num_experts if model.num_experts else 0.0)
    mlp = parts["dense_mlp"] + parts["shared_experts"] + active
    o_proj = min(model.num_layers * model.num_heads * model.head_dim * model.hidden_size, parts["attention"])
    total = parts["attention"] + mlp + parts["router"]
    return float((o_proj + mlp / 3) / total) if total > 0 else 0.0


def hierarchical_allreduce_s(message_bytes: Any, p: int, domain: int, intra: Any, inner: tuple[float, float],
                             outer: tuple[float, float], base_s: float) -> Any:
    """All-reduce over ``p`` ranks in p/domain scale-up domains (nodes) of ``domain`` ranks: a reduce-scatter
    and an all-gather inside each domain, which together cost the domain's own all-reduce of M (``intra``, the
    family's algorithm over ``inner`` = (bandwidth, hop)), and between them a ring all-reduce of each rank's M /
    domain shard across the n = p / domain domains over its own NIC (``outer``): intra(M, domain) +
    2(n-1) t_out + 2(n-1)/n (M/domain)/W_out. Hierarchical all-reduce as in Jia et al., "Highly Scalable Deep
    Learning Training System with Mixed-Precision", https://arxiv.org/abs/1807.11205 (intra-node reduce,
    inter-node all-reduce, intra-node broadcast), with the reduce-scatter form NCCL's hierarchical rings use
    (https://developer.nvidia.com/blog/massively-scale-deep-learning-training-nccl-2-4/). One domain: intra."""
    n = -(-p // domain)
    return intra(message_bytes, domain, inner[0], inner[1], base_s) + allreduce_s(
        message_bytes / domain, n, outer[0], outer[1], 0.0) if n > 1 else intra(message_bytes, p, *inner, base_s)


def wide_alltoall_s(message_bytes: Any, p: int, domain: int, inner: tuple[float, float], outer: tuple[float, float],
                    base_s: float) -> Any:
    """All-to-all over ``p`` ranks in scale-up domains of ``domain`` ranks, each rank sending (p-1)/p of
    ``message_bytes``: (domain-1)/p of it to its own domain's ranks over the scale-up links (``inner`` = (bandwidth,
    hop)) while (p-domain)/p leaves on its own NIC (``outer``), both at once, every destination written directly
    (one hop of latency, not p - 1): t0 + max(t_in, t_out) + max((domain-1)/p M/W_in, (p-domain)/p M/W_out).
    DeepEP's expert dispatch and combine work this way (NVLink inside a node, RDMA between nodes), and its published
    low-latency kernels follow this form: flat in p once the NIC bounds them (dispatch 173-194 us at EP 64-256 for
    128 tokens x 7168 x top-8 in FP8, combine in BF16 314-369 us, H800 with 400 Gb/s CX7;
    https://github.com/deepseek-ai/DeepEP/blob/dd758caf451848bd150e1046af3d0a73e5fff38d/docs/legacy.md), which a
    latency of p - 1 hops would not be (the tests hold the form to that table)."""
    (w_in, t_in), (w_out, t_out) = inner, outer
    return base_s + max(t_in, t_out) + np.maximum((domain - 1) / p * message_bytes / w_in,
                                                  (p - domain) / p * message_bytes / w_out)


def _collectives(profile: EngineParams, link: Link) -> tuple[Any, Any]:
    """(all-reduce, all-to-all) cost functions of the family's collective algorithm; rings on a torus (TPU ICI)
    run along the slice's axes, so their latency counts the link's :meth:`~roofline.specs.fabric.Link.ring_hops`."""
    if profile.collective in ("ring", None):
        if link.torus:
            return (lambda m, p, bw, hop, base: allreduce_s(m, p, bw, hop, base, hops=link.ring_hops(p)),
                    lambda m, p, bw, hop, base: alltoall_s(m, p, bw, hop, base, hops=link.ring_hops(p)))
        return allreduce_s, alltoall_s
    if profile.collective == "auto":
        return auto_allreduce_s, alltoall_s
    if profile.collective == "scheduled":
        return scheduled_allreduce_s, lambda m, p, bw, hop, base: base + 2 * hop + (p - 1) / p * m / bw
    # "none": the data stays on one device's fabric (a wafer): only the bytes cost time
    return (lambda m, p, bw, hop, base: 2 * (p - 1) / p * m / bw), (lambda m, p, bw, hop, base: (p - 1) / p * m / bw)


def group_communication_s(model: ModelSpec, group: DeviceGroup, activation: Format, tokens: Any,
                          profile: EngineParams) -> Any:
    """Exposed communication of one pass over ``tokens`` tokens: TP collectives (with the family's
    algorithm; the all-reduce at ``allreduce_bandwidth_fraction`` of the link, the all-to-all at
    ``link_bandwidth_fraction``) and PP stage crossings (one hop each, ``pipeline_hop_s`` or the link's latency). On a full mesh
    (a scale-up link with ``peers``: every MI300X links to its seven peers directly, 64 GB/s per link,
    https://rocm.blogs.amd.com/software-tools-optimization/mi300x-rccl-xgmi/README.html) a collective over p
    devices moves its data over p - 1 links at once, so W = (p - 1) x the link's bandwidth; a stage crossing
    uses one link."""
    tp, pp, dev = group.tp, group.pp, group.device
    if tp == 1 and pp == 1:
        return 0.0
    link = dev.get("scale_up.bandwidth")
    bw, ar_bw = link * profile.link_bandwidth_fraction, link * profile.allreduce_bandwidth_fraction   # a2a, hops; TP all-reduce
    hop = dev.scale_up.latency_s if dev.scale_up.latency_s is not None else profile.link_hop_latency_s
    hidden_bytes = tokens * model.hidden_size * activation.bytes_per_element
    allreduce, alltoall = _collectives(profile, dev.scale_up)
    if profile.allreduce_fusion:   # fused into the GEMMs' epilogues and reduced in the switch (exposed: timing)
        allreduce, ar_bw = switch_allreduce_s, bw
    out, domain = _scale_out(dev, profile)
    if out is not None:   # collectives wider than a scale-up domain cross the scale-out network between domains
        intra, intra_a2a = allreduce, alltoall

        def allreduce(m: Any, p: int, bw: float, hop: float, base: float) -> Any:
            return hierarchical_allreduce_s(m, p, domain, intra, (bw, hop), out, base) if p > domain \
                else intra(m, p, bw, hop, base)

        def alltoall(m: Any, p: int, bw: float, hop: float, base: float) -> Any:
            return intra_a2a(m, p, bw, hop, base) if p <= domain else wide_alltoall_s(m, p, domain, (bw, hop), out, base)
    comm: Any = 0.0
    if tp > 1:
        # one all-reduce per layer after attention (over the tp/dp devices of a DP-attention sub-group, on its
        # batch/dp tokens), one after each dense MLP over all tp devices. MoE layers: with attention tensor-parallel
        # (dp = 1) every rank already holds every token, so expert parallelism only changes which experts a rank
        # computes and their outputs combine in one all-reduce, as tensor-parallel experts do ("EP is a logical
        # remapping of the TP group for MoE layers ... each rank processes all tokens against only its local
        # experts", https://awsdocs-neuron.readthedocs-hosted.com/en/latest/vllm-neuron/docs/design/parallelism/expert_parallelism.html;
        # TensorRT-LLM: https://nvidia.github.io/TensorRT-LLM/advanced/expert-parallelism.html); with attention
        # data-parallel (dp > 1) tokens live on their own ranks. The default engines hand them to the experts by
        # an all-gather of every rank's tokens and a reduce-scatter of the outputs (``moe_dispatch`` "gather":
        # vLLM's allgather_reducescatter, TensorRT-LLM's CUTLASS MoE; the two move a ring all-reduce's data, so
        # a MoE layer costs the all-reduce over its ranks that tensor-parallel experts pay); with "alltoall"
        # (DeepEP, NVLink all-to-all) each rank sends its tokens' top-k copies to the experts' ranks and back
        att_tp = group.attention_tp
        links = dev.scale_up.links_used   # a mesh (AMD Infinity Fabric) drives p - 1 direct links at once
        att = model.num_layers * allreduce(hidden_bytes / group.dp, att_tp, ar_bw * links(att_tp), hop,
                                           profile.collective_base_s) if att_tp > 1 else 0.0
        dispatch = group.ep > 1 and group.dp > 1 and profile.moe_dispatch == "alltoall"
        n_mlp = model.num_layers - (model.num_moe_layers if dispatch else 0)
        comm = att + n_mlp * allreduce(hidden_bytes, tp, ar_bw * links(tp), hop, profile.collective_base_s)
        if dispatch:   # each rank sends its own tokens' top-k copies; the busiest receives its skewed share
            routed = (hidden_bytes / group.dp * model.experts_per_token
                      * expert_load_imbalance(group.ep, profile.expert_load_slope))
            comm = comm + 2 * model.num_moe_layers * alltoall(routed, group.ep, bw * links(group.ep), hop,
                                                              profile.collective_base_s)
    if pp > 1:  # each pass crosses pp - 1 stage boundaries with the tokens' activations
        stage_hop = profile.pipeline_hop_s if profile.pipeline_hop_s is not None else hop
        crossing = _domain_crossings(tp, pp, domain) if out is not None else 0
        comm = comm + (pp - 1 - crossing) * (stage_hop + hidden_bytes / bw)
        if crossing and out is not None:   # crossings only where a scale-out network joins the domains
            comm = comm + crossing * (out[1] + hidden_bytes / out[0])
    return comm


def _scale_out(dev: Any, profile: EngineParams) -> tuple[tuple[float, float] | None, int]:
    """((achieved bandwidth, hop latency) of the scale-out network, scale-up domain size): the family's ``max_tp``
    devices share a scale-up domain (one NVLink domain on GPUs); None where the spec gives no scale-out link."""
    domain = max(1, int(profile.max_tp))
    if dev.scale_out.bandwidth_bytes_per_s is None:
        return None, domain
    hop = dev.scale_out.latency_s if dev.scale_out.latency_s is not None else profile.link_hop_latency_s
    return (dev.scale_out.bandwidth_bytes_per_s * profile.link_bandwidth_fraction, hop), domain


def _domain_crossings(tp: int, pp: int, domain: int) -> int:
    """Pipeline stage boundaries that leave a scale-up domain: stages of ``tp`` devices fill domains of ``domain``
    in order, domain // tp stages each (every boundary crosses when a stage is wider than a domain)."""
    per = domain // tp
    return pp - 1 if per < 1 else -(-pp // per) - 1
