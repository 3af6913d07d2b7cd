"""FLOP and bytes of one forward pass, by component. No hardware involved.

A forward pass processes ``new_tokens`` tokens per sequence for ``batch``
sequences that already hold ``prefix_tokens`` tokens in their KV cache, and
computes logits for ``logits_per_seq`` positions. Every stage is such a pass:

* prefill of S tokens: new = S, prefix = 0 (a chunk: new = c, prefix = p), logits = 1;
* decode step at context L: new = 1, prefix = L, logits = 1;
* verify of gamma drafts: new = logits = gamma + 1, prefix = L.

All workload arguments broadcast (numpy). Formulas (docs/theory.md §2-3): the
scaling book, "All About Transformer Inference"
(https://jax-ml.github.io/scaling-book/inference/); LLM-Viewer's per-operator
counts with causal attention halved (https://arxiv.org/abs/2402.16363);
DeepSeek-V2 for MLA (https://arxiv.org/abs/2405.04434).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs
import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..memo import MISSING, IdentityMemo
from ..specs.formats import Formats
from ..specs.models import ModelSpec
from ..workload import check_count

Array = NDArray[np.float64]

#: FLOP components and the format whose compute rate they run at.
FLOP_COMPONENTS = ("attention_proj", "attention_core", "mlp", "experts", "shared_experts", "router", "lm_head")
#: Weight-byte components.
WEIGHT_COMPONENTS = ("attention", "mlp", "experts", "shared_experts", "router", "norms", "lm_head", "embedding")


#: Kernels a GPU serving stack launches per layer part in one forward pass, counted from vLLM's model code
#: (collectives are charged apart, :mod:`roofline.physics.comms`): a fused add + RMSNorm per norm; GQA
#: attention = QKV GEMM, rotary, KV-cache write, attention, output GEMM (+1 with per-head q/k norms),
#: https://github.com/vllm-project/vllm/blob/v0.10.1/vllm/model_executor/models/llama.py; MLA (absorbed)
#: = fused q_a/kv_a GEMM, two latent norms, q_b GEMM, W_UK batched GEMM, rotary, cache write, MLA attention,
#: W_UV batched GEMM, output GEMM,
#: https://github.com/vllm-project/vllm/blob/v0.10.1/vllm/model_executor/models/deepseek_v2.py; dense MLP =
#: gate_up GEMM, SiLU-and-mul, down GEMM; routed experts = router GEMM, top-k softmax, align/permute, two
#: grouped GEMMs, activation, weighted combine,
#: https://github.com/vllm-project/vllm/blob/v0.10.1/vllm/model_executor/layers/fused_moe/fused_moe.py;
#: per pass = embedding, final norm, LM head GEMM, sampling (2).
KERNELS = {"norm": 1, "gqa": 5, "qk_norm": 1, "mla": 10, "mlp": 3, "experts": 7, "shared_experts": 3, "pass": 5}


def kernels_per_pass(model: ModelSpec) -> int:
    """GPU kernels in one forward pass of ``model``, by layer kind (:data:`KERNELS`): what a per-kernel fixed
    cost multiplies (launch gaps and tail effects between kernels that CUDA graphs shorten but do not
    remove; docs/theory.md §1.2)."""
    k = KERNELS
    attention = k["mla"] if model.is_mla else k["gqa"] + (k["qk_norm"] if model.qk_norm else 0)
    moe = model.num_moe_layers
    mlp = (model.num_layers - moe) * k["mlp"] + moe * (k["experts"] + (k["shared_experts"] if model.num_shared_experts else 0))
    return k["pass"] + model.num_layers * (attention + model.norms_per_layer * k["norm"]) + mlp


@attrs.frozen(kw_only=True)
class Work:
    """FLOP and bytes of one forward pass over the whole model (all devices together).

    ``flop`` and ``weight_bytes`` map components to arrays that broadcast to
    the workload shape (a component that does not depend on an argument keeps
    that axis at length 1, a constant is a scalar); ``tokens`` = batch * new_tokens.
    """

    flop: Mapping[str, Any]
    weight_bytes: Mapping[str, Any]
    kv_read_bytes: Any
    kv_write_bytes: Array
    activation_bytes: Array
    tokens: Array
    experts_touched_per_layer: Array
    experts_per_token: int = 0
    #: Tokens routed independently that would touch as many experts as the pass's do (:func:`routing_draws`):
    #: ``tokens`` when consecutive tokens of a sequence route independently, fewer when they share experts
    #: (only :func:`count_work` builds a Work, and it always sets this).
    routing_draws: Array = attrs.field(default=0.0)
    #: The part of ``activation_bytes`` that is model-width (d) by layer part ("attention", "mlp", "experts",
    #: "lm_head"): a block's input and output, the norms, the experts' router input and combine, which every
    #: tensor-parallel rank moves whole (:func:`_activation_bytes`, :func:`count_work`).
    activation_ends_bytes: dict[str, Array | float] = attrs.field(factory=dict)
    #: Positions the LM head computes logits for (batch x logits per sequence): the rows its matmul multiplies.
    logit_rows: Array = attrs.field(default=0.0)

    @property
    def flop_total(self) -> Array:
        return add(*self.flop.values())

    @property
    def weight_bytes_total(self) -> Array:
        return add(*self.weight_bytes.values())

    @property
    def bytes_total(self) -> Array:
        return self.weight_bytes_total + self.kv_read_bytes + self.kv_write_bytes + self.activation_bytes


def add(*terms: ArrayLike) -> Array:
    """Sum of broadcastable terms, smallest first, so only the last additions run at the full grid size."""
    out: Any = np.float64(0.0)
    if all(isinstance(t, float) or (isinstance(t, np.ndarray) and t.ndim == 0) for t in terms):
        # numbers (np.float64 and 0-d arrays too): one size each, so sorting by size keeps their order
        for t in terms:
            out = out + t
        return out
    for t in sorted(terms, key=_size):
        out = out + t
    return out


def as_number(a: Any) -> Any:
    """A 0-d array as its numpy scalar, else ``a`` itself: the same doubles, and arithmetic on a numpy scalar costs a
    tenth of a 0-d array's (a scalar decode step does some forty operations per context)."""
    return a[()] if isinstance(a, np.ndarray) and a.ndim == 0 else a


def _size(x: ArrayLike) -> int:
    """``np.size(x)``, read straight off an array or numpy scalar (np.size's dispatch costs more than a sum)."""
    if isinstance(x, np.ndarray | np.generic):
        return x.size
    return 1 if isinstance(x, (int, float)) else int(np.size(x))


def expected_experts_touched(num_experts: int, experts_per_token: int, tokens: ArrayLike) -> Array:
    """Expected distinct experts hit by ``tokens`` tokens under uniform top-k routing.

    E_u(n) = E * (1 - (1 - k/E)^n): a token's k distinct experts miss a given
    expert with probability C(E-1,k)/C(E,k) = 1 - k/E (docs/theory.md §2.7; the
    scaling book's "distinct outcomes in K dice rolls",
    https://jax-ml.github.io/scaling-book/inference/). n = 1 gives k; n -> inf gives E.
    Checked against a Monte-Carlo simulation in the tests.
    """
    n = np.asarray(tokens, dtype=float)
    if num_experts == 0:
        return np.zeros_like(n)
    return num_experts * -np.expm1(n * np.log1p(-experts_per_token / num_experts)) if experts_per_token < num_experts \
        else np.where(n > 0, float(num_experts), 0.0)


def routing_draws(num_experts: int, experts_per_token: int, tokens: ArrayLike, sequences: ArrayLike,
                  locality: float) -> Array:
    """Independently routed tokens that touch as many distinct experts as ``tokens`` tokens of ``sequences``
    sequences whose consecutive tokens share their experts with probability ``locality`` (``lambda``).

    Model: a sequence's first token draws its k experts uniformly; each later token copies its predecessor's
    k experts with probability lambda, else draws afresh. The fresh draws of S sequences of T tokens in all are
    F = S + Binomial(T - S, 1 - lambda), and a given expert is missed by all of them with probability
    E[q^F] = q^S (lambda + (1 - lambda) q)^(T - S), q = 1 - k/E (the binomial's probability generating
    function), so E_u = E (1 - q^n') with n' = S + (T - S) log(lambda + (1 - lambda) q) / log q: exactly
    :func:`expected_experts_touched` of n' tokens. lambda = 0 gives n' = T (independent routing, the upper
    bound), lambda = 1 gives n' = S. The tests check it against a simulation of the copying router.
    lambda relates to a measured repeat rate r (how often consecutive tokens share an expert) by
    r = r0 + (1 - r0) lambda, r0 the rate under independent routing: 1/E for the first choice alone,
    1 - C(E-k, k)/C(E, k) for any of the k (the Mixtral preset's derivation, docs/theory.md §2.7)."""
    t, s = np.asarray(tokens, dtype=float), np.minimum(np.asarray(sequences, dtype=float), tokens)
    if locality == 0.0 or num_experts == 0 or experts_per_token >= num_experts:
        return t
    q = 1.0 - experts_per_token / num_experts
    return s + (t - s) * (math.log(locality + (1.0 - locality) * q) / math.log(q))


@functools.cache
def _log_choose(n: int) -> NDArray[np.float64]:
    """log C(n, k) for k = 0..n."""
    return np.array([math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) for k in range(n + 1)])


def expert_shard_imbalance(num_experts: int, experts_per_token: int, tokens: ArrayLike, ep: int) -> Array:
    """Expected experts touched on the busiest of ``ep`` expert shards over the mean, for ``tokens`` tokens.

    Each of the E/ep experts of a shard is touched with probability p = 1 - (1 - k/E)^n (docs/theory.md §2.7);
    treating the shards' counts as independent Binomial(E/ep, p), E[max] = sum_{m>=0} (1 - F(m)^ep) with F the
    binomial CDF (the expectation of the largest of ep draws), over the mean E/ep * p. 1 without expert
    parallelism, at n = 0 and once every expert is touched. Independence ignores that a token picks exactly
    k experts (which spreads them a little more); the tests check the closed form against a simulation of
    top-k routing within 10%. At batch 1, 4 of 128 experts over 8 shards: about 3x.
    """
    n = np.asarray(tokens, dtype=float)
    if ep <= 1 or num_experts == 0 or experts_per_token >= num_experts:
        return np.ones_like(n)
    if n.ndim == 0:   # one point: remembered (a calibration asks for the same few hundreds of times)
        return _scalar_shard_imbalance(num_experts, experts_per_token, float(n), ep).copy()
    return _shard_imbalance(num_experts, experts_per_token, n, ep)


def expert_load_imbalance(ep: int, slope: float) -> float:
    """Routed tokens the busiest of ``ep`` expert-parallel ranks receives over the mean: 1 + slope x log2(ep)
    (1 without expert parallelism). Real routing is skewed (some experts are popular), more so the fewer experts a
    rank holds: SGLang's simulation of DeepSeek-V3's recorded routing puts the balancedness (mean over max tokens
    per GPU) at about 0.67, 0.61, 0.55 and 0.48 on 8, 16, 32 and 64 GPUs without its load balancer and 0.94, 0.90,
    0.80, 0.81 with it (read from the figure "Effects of Scale and EPLB to Balancedness",
    https://lmsys.org/blog/2025-05-05-large-scale-ep): max/mean 1.49-2.08, a least-squares slope of 0.17 per
    doubling without EPLB and 0.04 with it. TensorRT-LLM measured 2.56 on DeepSeek-R1 at EP32 without EPLB on a
    translation set and 1.11 with 32 redundant experts (slope 0.31 and 0.02;
    https://github.com/NVIDIA/TensorRT-LLM/blob/1d263f15a979ef2902c60de3f6238bcc0952bb29/docs/source/blogs/tech_blog/blog4_Scaling_Expert_Parallelism_in_TensorRT-LLM.md):
    the skew depends on the data, and these are the only published measurements (DeepSeek's)."""
    return 1.0 + slope * math.log2(ep) if ep > 1 else 1.0


#: Chunk counts up to which the busiest rank's load is computed exactly; above it the Poisson form (accurate there).
_EXACT_CHUNKS = 64


def busiest_rank_chunks(chunks: ArrayLike, ranks: int) -> Array:
    """Expected prompt chunks on the busiest of ``ranks`` attention data-parallel ranks when ``chunks`` chunks
    land on them independently and uniformly (balls into bins; Raab and Steger, "Balls into bins - a simple and
    tight analysis", RANDOM 1998, https://doi.org/10.1007/3-540-49543-6_13). Exact for n chunks: with the ranks'
    counts as independent Poisson(n / ranks) conditioned on their sum n,
    P(max <= m) = F_m^ranks P(S_m = n) / P(S = n), F_m the Poisson CDF at m, S_m the sum of ranks draws of the
    Poisson truncated at m, S ~ Poisson(n); E[max] = sum_{m<n} (1 - P(max <= m)). One chunk: 1 (it sits on one
    rank); many: n / ranks. Fractional counts (a mean-field step) interpolate between their neighbours."""
    n = np.asarray(chunks, dtype=float)
    if ranks <= 1:
        return n.copy()
    lo = np.floor(n)
    f_lo = _busiest_of(lo, ranks)
    frac = n - lo
    return f_lo if not np.any(frac > 0) else f_lo + frac * (_busiest_of(lo + 1, ranks) - f_lo)


def _busiest_of(n: Array, ranks: int) -> Array:
    uniq, inverse = np.unique(n, return_inverse=True)
    return np.array([_busiest_exact(int(k), ranks) for k in uniq])[inverse].reshape(n.shape)


@functools.lru_cache(maxsize=4096)
def _busiest_exact(n: int, ranks: int) -> float:
    """E[max load] of ``n`` balls in ``ranks`` bins (:func:`busiest_rank_chunks`)."""
    if n <= 1:
        return float(max(n, 0))
    lam = n / ranks
    k = np.arange(n + 1, dtype=float)
    log_pois = k * math.log(lam) - lam - np.array([math.lgamma(x + 1) for x in k])
    pois = np.exp(log_pois)
    if n > _EXACT_CHUNKS:   # Poissonized: E[max] of ranks independent Poisson(lam) counts
        cdfs = np.cumsum(pois)
        return float(np.sum(1.0 - np.minimum(cdfs, 1.0) ** ranks))
    total = math.exp(n * math.log(n) - n - math.lgamma(n + 1))   # P(S = n), S ~ Poisson(n)
    expected = 0.0
    for m in range(n):
        cdf = float(np.sum(pois[:m + 1]))
        one = pois[:m + 1] / cdf
        expected += 1.0 - cdf ** ranks * _convolution_power(one, ranks, n)[n] / total
    return expected


def _convolution_power(pmf: Array, power: int, length: int) -> Array:
    """The pmf of the sum of ``power`` independent draws of ``pmf``, up to value ``length`` (binary powering)."""
    out = np.zeros(length + 1)
    out[0] = 1.0
    base = np.zeros(length + 1)
    base[:min(len(pmf), length + 1)] = pmf[:length + 1]
    while power:
        if power & 1:
            out = np.convolve(out, base)[:length + 1]
        power >>= 1
        if power:
            base = np.convolve(base, base)[:length + 1]
    return out


def rider_rank_share(chunks: ArrayLike, ranks: int) -> Array:
    """How much more attention work the busiest attention data-parallel rank does for a step's prompt chunks than
    an even split gives it: E[busiest rank's chunks] x ranks / chunks (:func:`busiest_rank_chunks`; 1 without data
    parallelism or chunks). Each arriving prompt lives on one rank, which alone runs its projections and attention,
    and every rank waits for the slowest at the next MoE exchange: "the iteration time is dominated by the slowest
    rank" (TensorRT-LLM's ADP balance study: DeepSeek-V3 on 8 GB200s with attention DP 8 and round-robin placement
    averaged a balance ratio of 54%, and synchronising the ranks' context phases gained 1.31-1.33x,
    https://github.com/NVIDIA/TensorRT-LLM/blob/011cfc2cc18a24a95603f91dc53f8fc60bc80189/docs/source/blogs/tech_blog/blog10_ADP_Balance_Strategy.md).
    One chunk in a step: ``ranks`` times."""
    n = np.asarray(chunks, dtype=float)
    if ranks <= 1:
        return np.ones_like(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = busiest_rank_chunks(n, ranks) * ranks / n
    return np.where(n > 0, share, 1.0)


@functools.lru_cache(maxsize=4096)
def _scalar_shard_imbalance(num_experts: int, experts_per_token: int, tokens: float, ep: int) -> Array:
    return _shard_imbalance(num_experts, experts_per_token, np.asarray(tokens, dtype=float), ep)


def _shard_imbalance(num_experts: int, experts_per_token: int, n: Array, ep: int) -> Array:
    """:func:`expert_shard_imbalance` for ``ep`` > 1 and fewer routed than total experts."""
    per = -(-num_experts // ep)
    uniq, inverse = np.unique(n, return_inverse=True)
    p = -np.expm1(uniq * np.log1p(-experts_per_token / num_experts))[:, None]
    m = np.arange(per + 1, dtype=float)[None, :]
    log_choose = _log_choose(per)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_pmf = log_choose[None, :] + np.where(m > 0, m * np.log(p), 0.0) + np.where(m < per, (per - m) * np.log1p(-p), 0.0)
        cdf = np.minimum(np.cumsum(np.exp(log_pmf), axis=1), 1.0)
        e_max = np.sum(1.0 - cdf[:, :-1] ** ep, axis=1)
        ratio = np.where(p[:, 0] > 0, e_max / (per * p[:, 0]), 1.0)
    return np.maximum(ratio, 1.0)[inverse].reshape(n.shape)


def attended_pairs(prefix: ArrayLike, new: ArrayLike, window: float | None = None) -> Array:
    """Query-key pairs of causal attention for ``new`` queries after ``prefix`` cached tokens.

    Query j (1-based) at absolute position p + j attends min(p + j, W) keys, so the
    total is S(p + n) - S(p) with S(m) = m(m+1)/2 (full) or, with a window W,
    S(m) = m(m+1)/2 for m <= W and W(W+1)/2 + (m - W) W beyond (docs/theory.md §2.3-2.4; checked
    against a brute-force count in the tests).
    """
    p = np.asarray(prefix, dtype=float)
    n = np.asarray(new, dtype=float)

    def s(m: Array) -> Array:
        if window is None:
            return m * (m + 1) / 2
        w = float(window)
        return np.where(m <= w, m * (m + 1) / 2, w * (w + 1) / 2 + (m - w) * w)

    return s(p + n) - s(p)


def forward_work(model: ModelSpec, formats: Formats, *, batch: ArrayLike, new_tokens: ArrayLike,
                 prefix_tokens: ArrayLike, logits_per_seq: ArrayLike = 1, mla_absorbed: bool = True,
                 mean_field: bool = False) -> Work:
    """Count FLOP and bytes of one forward pass, checking the arguments (see :func:`count_work`).

    ``mean_field=True`` admits fractional token counts: a steady-state serving
    step whose sequences carry on average 1 decode token plus isl/osl prefill
    tokens (docs/theory.md §6) is counted as that average pass.
    """
    B = check_count("batch", batch, minimum=1, integer=not mean_field)
    n = check_count("new_tokens", new_tokens, minimum=1, integer=not mean_field)
    p = check_count("prefix_tokens", prefix_tokens, minimum=0, integer=not mean_field)
    logits = check_count("logits_per_seq", logits_per_seq, minimum=0)
    np.broadcast_shapes(B.shape, n.shape, p.shape, logits.shape)  # fail early on incompatible shapes
    return count_work(model, formats, batch=B, new_tokens=n, prefix_tokens=p, logits_per_seq=logits,
                      mla_absorbed=mla_absorbed)


def count_work(model: ModelSpec, formats: Formats, *, batch: Any, new_tokens: Any, prefix_tokens: Any,
               logits_per_seq: Any = 1, mla_absorbed: bool = True) -> Work:
    """Count FLOP and bytes of one forward pass (arguments already checked; see the module docstring).

    * Matmuls: 2 FLOP per multiply-add; projections 2*T*P per layer type.
    * Attention core: 2*n_h*(d_qk + d_v) per attended query-key pair (QK^T and AV),
      causal pairs exact, sliding layers windowed. MLA absorbed (decode, verify):
      2*n_h*(2*d_c + d_r) per pair over the latent cache; non-absorbed (prefill):
      the same core as MHA with d_qk = d_n + d_r plus decompressing the context's
      latent cache, 2*d_c*n_h*(d_n + d_v) per cached token (DeepSeek-V2 §2.1,
      https://arxiv.org/abs/2405.04434; docs/theory.md §2.6).
    * MoE: routed experts touched per layer E_u(T) for T = batch*new tokens, so
      verifying gamma+1 tokens reads more expert bytes than a decode step;
      shared experts and dense layers always count.
    * Weights are read once per pass; the embedding is a row gather (T*d
      elements); the LM head is read once and costs 2*d*V per logit position; both
      in :attr:`Formats.head_format`.
    * KV: the prefix is read once per sequence (all new queries share it), the
      new tokens' K/V are written once; sliding layers read min(p, W).
    * Activations: every kernel of a layer (matmuls, norms, the MLP's activation, the experts' combine)
      reads its input and writes its output once (:func:`_activation_bytes`). The model-width (d) terms
      (``activation_ends_bytes``) are not split by tensor parallelism: Megatron's column-parallel first
      matmul reads the whole replicated input on every rank, the row-parallel last one writes a whole-width
      partial sum before the all-reduce, and norms run on the whole hidden state on every rank (Shoeybi et
      al., https://arxiv.org/abs/1909.08053 §3); only the inner widths (heads, I) are split.

    Terms that depend only on batch (or only on context) stay small arrays; only the products that need
    the full grid (KV reads, attention) are materialised at its shape. The counts that do not depend on the
    context (:func:`count_batch`) and the two that do (:meth:`BatchWork.at`) are counted apart.
    """
    return count_batch(model, formats, batch=batch, new_tokens=new_tokens, logits_per_seq=logits_per_seq,
                       mla_absorbed=mla_absorbed).at(prefix_tokens)


@attrs.frozen(kw_only=True, eq=False)
class BatchWork:
    """The counts of one pass that do not depend on the context already cached (``prefix_tokens``), and what
    :meth:`at` needs to add the two that do: the attention core's FLOP and the KV reads. A decode loop over
    contexts counts the rest once (:func:`batch_work` remembers it) and only these two per context."""

    model: ModelSpec
    #: every count of the pass; its attention-core FLOP and KV reads are 0 (:meth:`at` fills them in)
    work: Work
    batch: Array
    new_tokens: Array
    mla_absorbed: bool
    #: bytes of one KV cache element (the cache's format)
    kv_element_bytes: float
    #: the attention core's FLOP and KV reads of prompt chunks riding along (:func:`with_prompt_chunks`), if any
    rider_core_flop: Any = None
    rider_kv_read_bytes: Any = None
    #: how much of the attention side the busiest attention data-parallel rank carries (:func:`attention_scaled`;
    #: None: its even share)
    attention_scale: Any = None

    def at(self, prefix_tokens: Any) -> Work:
        """The pass's :class:`Work` after ``prefix_tokens`` cached tokens per sequence (read-only, as
        :func:`_sealed` makes it)."""
        m, B, p = self.model, self.batch, as_number(np.asarray(prefix_tokens, dtype=float))
        core = _attention_core_flop(m, B, self.new_tokens, p, self.mla_absorbed)
        window = float(m.sliding_window or 0)
        n_full = m.num_layers - m.num_sliding_layers
        kv_read = (B * (m.kv_elements_per_token_per_layer() * self.kv_element_bytes)) * (
            n_full * p + m.num_sliding_layers * np.minimum(p, window))
        if self.rider_core_flop is not None:
            core, kv_read = core + self.rider_core_flop, kv_read + self.rider_kv_read_bytes
        if self.attention_scale is not None:
            core, kv_read = core * self.attention_scale, kv_read * self.attention_scale
        w = self.work
        return Work(flop=MappingProxyType({**w.flop, "attention_core": _read_only(core)}),
                    weight_bytes=w.weight_bytes, kv_read_bytes=_read_only(kv_read), kv_write_bytes=w.kv_write_bytes,
                    activation_bytes=w.activation_bytes, tokens=w.tokens,
                    experts_touched_per_layer=w.experts_touched_per_layer, experts_per_token=w.experts_per_token,
                    routing_draws=w.routing_draws, activation_ends_bytes=w.activation_ends_bytes,
                    logit_rows=w.logit_rows)

    def busiest_rank(self, factor: Any) -> BatchWork:
        """These counts as the busiest attention data-parallel rank sees them (:func:`attention_scaled` by
        ``factor``)."""
        return attrs.evolve(self, work=_sealed(attention_scaled(self.work, factor)),
                            attention_scale=np.asarray(factor, dtype=float))


def count_batch(model: ModelSpec, formats: Formats, *, batch: Any, new_tokens: Any, logits_per_seq: Any = 1,
                mla_absorbed: bool = True) -> BatchWork:
    """The counts of one pass that do not depend on the cached context (:func:`count_work` documents them)."""
    B, n = np.asarray(batch, dtype=float), np.asarray(new_tokens, dtype=float)
    logits = np.asarray(logits_per_seq, dtype=float)
    T = B * n
    m = model
    d, nL = m.hidden_size, m.num_layers
    bw, bh = formats.weight.bytes_per_element, formats.head_format.bytes_per_element
    bkv, ba = formats.kv_format.bytes_per_element, formats.activation.bytes_per_element
    n_moe = m.num_moe_layers
    n_dense = nL - n_moe

    draws = routing_draws(m.num_experts, m.experts_per_token, T, B, m.routing_locality) if m.is_moe else T
    touched = expected_experts_touched(m.num_experts, m.experts_per_token, draws) if m.is_moe else np.zeros(1)[0] * T
    flop = {
        "attention_proj": 2 * T * nL * m.attention_params_per_layer(),
        "attention_core": 0.0,   # the context's: BatchWork.at
        "mlp": 2 * T * n_dense * m.dense_mlp_params(),
        "experts": 2 * T * n_moe * m.experts_per_token * m.expert_params(),
        "shared_experts": 2 * T * n_moe * m.shared_expert_params(),
        "router": 2 * T * n_moe * m.router_params(),
        "lm_head": 2 * B * logits * d * m.lm_head_vocab,
    }
    weight_bytes = {
        "attention": np.float64(nL * m.attention_params_per_layer() * bw),
        "mlp": np.float64(n_dense * m.dense_mlp_params() * bw),
        "experts": _expert_weight_bytes(m, formats, touched),
        "shared_experts": np.float64(n_moe * m.shared_expert_params() * bw),
        "router": np.float64(n_moe * m.router_params() * bw),
        "norms": np.float64((nL * m.norm_params_per_layer() + d) * bw),
        "lm_head": np.where(logits > 0, m.lm_head_params() * bh, 0.0),
        "embedding": T * d * bh,
    }
    kv_write = T * nL * m.kv_elements_per_token_per_layer() * bkv

    act, ends = _activation_bytes(m, T, B * logits, ba)
    work = Work(flop=flop, weight_bytes=weight_bytes, kv_read_bytes=0.0, kv_write_bytes=kv_write,
                activation_bytes=act, tokens=T, experts_touched_per_layer=touched, routing_draws=draws,
                experts_per_token=m.experts_per_token if m.is_moe else 0, activation_ends_bytes=ends,
                logit_rows=B * logits)
    return BatchWork(model=m, work=work, batch=as_number(B), new_tokens=as_number(n), mla_absorbed=mla_absorbed,
                     kv_element_bytes=bkv)


def _activation_bytes(m: ModelSpec, T: Any, logit_rows: Any, ba: float) -> tuple[Any, dict[str, Any]]:
    """(activation bytes of a pass over T tokens with ``logit_rows`` logit positions, their d-wide ends by
    layer part). Each kernel a layer launches reads its input and writes its output, per token: the matmuls;
    the fused add + RMSNorm before each block (reads the input and the residual, writes both: 4d); the MLP's
    activation (a gated one reads the gate and up outputs and writes their product: 3I, else 2I); the
    experts' weighted combine (reads k expert outputs, writes their sum: (k + 1)d). Sources: vLLM's
    ``fused_add_rms_norm`` updates input and residual in place and ``silu_and_mul`` maps [..., 2I] to [..., I]
    (https://github.com/vllm-project/vllm/blob/v0.10.1/csrc/layernorm_kernels.cu, ``csrc/activation_kernels.cu``),
    the kernel list of :data:`KERNELS`. Not counted: the q and o of fused attention, rotary in place, the
    router's top-k (adding attention's q, o and rotary moved leave-one-out 9.63% to 9.64%: left out). The ends
    are the d-wide terms."""
    d, nh, nL, n_moe, k = m.hidden_size, m.num_heads, m.num_layers, m.num_moe_layers, m.experts_per_token
    n_dense, mlp = nL - n_moe, 3 if m.mlp_gated else 2
    if m.is_mla:
        attention = 2 * nh * (m.qk_head_dim + m.attn_v_head_dim)
    else:
        attention = 2 * m.head_dim * (nh + m.num_kv_heads)
    # inner widths: each matmul's and the activation kernel's (routed and shared experts are gated)
    inner = (nL * attention + n_dense * 2 * mlp * m.intermediate_size
             + n_moe * 6 * (k * m.expert_intermediate_size + m.num_shared_experts * m.shared_intermediate_size))
    ends = {"attention": T * nL * (2 + 4 * m.norms_per_layer) * d, "mlp": T * n_dense * 2 * d,
            # routed and shared experts' inputs and outputs, the router (reads d, writes E logits), the combine
            "experts": T * n_moe * ((k + m.num_shared_experts) * 2 * d + d + m.num_experts + (k + 1) * d) if k else 0.0,
            "lm_head": logit_rows * d}
    ends = {key: ba * v for key, v in ends.items()}
    return ba * (T * inner + logit_rows * m.lm_head_vocab) + add(*ends.values()), ends


def _expert_weight_bytes(model: ModelSpec, formats: Formats, touched: Any) -> Any:
    """Bytes of the routed experts a pass reads: ``touched`` experts per MoE layer."""
    return model.num_moe_layers * touched * model.expert_params() * formats.expert.bytes_per_element


def with_prompt_chunks(model: ModelSpec, formats: Formats, work: Work, *, chunks: Any, chunk_tokens: Any,
                       chunk_prefix: Any, attention_scale: Any = 1.0) -> Work:
    """``work`` (a decode or verify pass) with ``chunks`` prompt chunks of ``chunk_tokens`` tokens riding along
    (continuous batching with chunked prefill, Sarathi-Serve, https://arxiv.org/abs/2403.02310): each chunk
    belongs to one arriving sequence and attends causally to its own prompt's first ``chunk_prefix`` tokens
    plus itself, in the prefill form (MLA not absorbed: a prompt's attention runs as MHA over decompressed
    keys, DeepSeek-V2 §2.1). The pass's matmuls, activations, KV traffic and communication see every token;
    weights are read once for all of them, and routed experts are those the union of tokens touches.
    ``attention_scale`` multiplies the chunks' attention side (projections, attention, KV traffic, the attention
    block's activations): as the busiest attention data-parallel rank sees them (:func:`rider_rank_share`)."""
    c = np.asarray(chunks, dtype=float)
    extra = count_work(model, formats, batch=c, new_tokens=chunk_tokens, prefix_tokens=chunk_prefix,
                       logits_per_seq=0.0, mla_absorbed=False)
    if np.any(np.asarray(attention_scale) != 1.0):
        extra = attention_scaled(extra, attention_scale)
    T = work.tokens + extra.tokens
    draws = work.routing_draws + extra.routing_draws   # independent sequences: their misses multiply
    touched = (expected_experts_touched(model.num_experts, model.experts_per_token, draws) if model.is_moe
               else work.experts_touched_per_layer)
    weights = dict(work.weight_bytes)
    weights["experts"] = _expert_weight_bytes(model, formats, touched)
    weights["embedding"] = work.weight_bytes["embedding"] + extra.weight_bytes["embedding"]
    return attrs.evolve(work, flop={k: work.flop[k] + extra.flop[k] for k in work.flop}, weight_bytes=weights,
                        kv_read_bytes=work.kv_read_bytes + extra.kv_read_bytes,
                        kv_write_bytes=work.kv_write_bytes + extra.kv_write_bytes,
                        activation_bytes=work.activation_bytes + extra.activation_bytes, tokens=T,
                        experts_touched_per_layer=touched, routing_draws=draws, activation_ends_bytes={
                            k: work.activation_ends_bytes.get(k, 0.0) + extra.activation_ends_bytes.get(k, 0.0)
                            for k in sorted(work.activation_ends_bytes.keys() | extra.activation_ends_bytes.keys())})


def attention_scaled(work: Work, factor: Any) -> Work:
    """``work`` with its attention side (the attention projections' and the attention core's FLOP, KV reads and
    writes, the attention block's activations) times ``factor``: what one rank does when it carries ``factor``
    times its even share of the sequences (attention data parallelism puts a sequence's attention on one rank)."""
    f = np.asarray(factor, dtype=float)
    flop = {k: v * f if k in ("attention_proj", "attention_core") else v for k, v in work.flop.items()}
    ends = {k: v * f if k == "attention" else v for k, v in work.activation_ends_bytes.items()}
    extra = (f - 1.0) * work.activation_ends_bytes.get("attention", 0.0)
    return attrs.evolve(work, flop=flop, kv_read_bytes=work.kv_read_bytes * f, kv_write_bytes=work.kv_write_bytes * f,
                        activation_ends_bytes=ends, activation_bytes=work.activation_bytes + extra)


#: batch_work's remembered answers by the model's identity, the formats and the scalar arguments
_BATCH_WORK = IdentityMemo(4096)


#: Arguments of at most this many points are remembered by value (a serving evaluation's few batches); a sweep's
#: grids are counted afresh (their keys would cost as much as the counts).
_REMEMBERED_SIZE = 16


def value_key(a: Any) -> tuple[Any, ...]:
    """An argument by shape and values (a number and a one-element array of it are different shapes)."""
    if isinstance(a, (int, float)):   # a number (np.float64 too): what np.asarray(a, dtype=float) would say
        return ((), float(a))
    arr = np.asarray(a, dtype=float)
    return (arr.shape, *arr.ravel().tolist())


def small(*args: Any) -> bool:
    """Whether every argument has at most :data:`_REMEMBERED_SIZE` points (worth remembering by value)."""
    return all(_size(a) <= _REMEMBERED_SIZE for a in args)


def batch_work(model: ModelSpec, formats: Formats, *, batch: Any, new_tokens: Any, logits_per_seq: Any,
               mla_absorbed: bool, chunks: Any = 0.0, chunk_tokens: Any = 0.0, chunk_prefix: Any = 0.0,
               chunk_attention_scale: Any = 1.0) -> BatchWork:
    """:func:`count_batch` of one pass, with :func:`with_prompt_chunks` when ``chunks`` ride along; for arguments
    of a few points the answer is remembered (a calibration times every row hundreds of times under new engine
    parameters, which never change the counts; a decode loop over contexts counts its batch once). The
    remembered counts are shared: they are read-only (:func:`_sealed`)."""
    args = (batch, new_tokens, logits_per_seq, chunks, chunk_tokens, chunk_prefix, chunk_attention_scale)
    key = (formats, mla_absorbed, *map(value_key, args)) if small(*args) else None
    hit = _BATCH_WORK.get((model,), key) if key is not None else MISSING
    if hit is not MISSING:
        return hit
    counts = count_batch(model, formats, batch=batch, new_tokens=new_tokens, logits_per_seq=logits_per_seq,
                         mla_absorbed=mla_absorbed)
    if np.any(np.asarray(chunks) > 0):
        w = with_prompt_chunks(model, formats, counts.work, chunks=chunks, chunk_tokens=chunk_tokens,
                               chunk_prefix=chunk_prefix, attention_scale=chunk_attention_scale)
        counts = attrs.evolve(counts, work=attrs.evolve(w, flop={**w.flop, "attention_core": 0.0}, kv_read_bytes=0.0),
                              rider_core_flop=w.flop["attention_core"], rider_kv_read_bytes=w.kv_read_bytes)
    counts = attrs.evolve(counts, work=_sealed(counts.work))
    return _BATCH_WORK.put((model,), key, counts) if key is not None else counts


def pass_work(model: ModelSpec, formats: Formats, *, batch: Any, new_tokens: Any, prefix_tokens: Any,
              logits_per_seq: Any, mla_absorbed: bool, chunks: Any = 0.0, chunk_tokens: Any = 0.0,
              chunk_prefix: Any = 0.0, chunk_attention_scale: Any = 1.0) -> Work:
    """:func:`count_work` of one pass, with :func:`with_prompt_chunks` when ``chunks`` ride along (the counts
    that do not depend on the context remembered, :func:`batch_work`); read-only."""
    return batch_work(model, formats, batch=batch, new_tokens=new_tokens, logits_per_seq=logits_per_seq,
                      mla_absorbed=mla_absorbed, chunks=chunks, chunk_tokens=chunk_tokens, chunk_prefix=chunk_prefix,
                      chunk_attention_scale=chunk_attention_scale).at(prefix_tokens)


def _read_only(a: Any) -> Any:
    """An array as a read-only view (the array itself, and whoever else holds it, unchanged); other values as
    they are."""
    if isinstance(a, np.ndarray):
        a = a.view()
        a.flags.writeable = False
    return a


def _sealed(work: Work) -> Work:
    """``work`` with read-only arrays and tables: a remembered Work is handed to every later call with the same
    arguments, so a caller writing into a result's ``footprint.work`` (``w.weight_bytes["mlp"] *= 0``) would
    change every later answer; sealed, the write raises instead."""
    def table(d: Any) -> Any:
        return MappingProxyType({k: _read_only(v) for k, v in d.items()})
    return attrs.evolve(work, flop=table(work.flop), weight_bytes=table(work.weight_bytes),
                        kv_read_bytes=_read_only(work.kv_read_bytes), kv_write_bytes=_read_only(work.kv_write_bytes),
                        activation_bytes=_read_only(work.activation_bytes), tokens=_read_only(work.tokens),
                        experts_touched_per_layer=_read_only(work.experts_touched_per_layer),
                        routing_draws=_read_only(work.routing_draws),
                        activation_ends_bytes=table(work.activation_ends_bytes), logit_rows=_read_only(work.logit_rows))


def _attention_core_flop(m: ModelSpec, B: Any, n: Any, p: Any, mla_absorbed: bool) -> Any:
    """FLOP of QK^T and AV over the attended query-key pairs (full and sliding layers), MLA absorbed or not."""
    nL, nh = m.num_layers, m.num_heads
    n_full = nL - m.num_sliding_layers
    pairs = n_full * attended_pairs(p, n)
    if m.num_sliding_layers:   # without sliding layers the term is 0 (x + 0.0 is x: the same numbers)
        pairs = pairs + m.num_sliding_layers * attended_pairs(p, n, m.sliding_window)
    if m.is_mla:
        dc, dr = m.kv_lora_rank or 0, m.qk_rope_head_dim or 0
        if mla_absorbed:
            return (B * (2 * nh * (2 * dc + dr))) * pairs
        decompress = (B * (nL * 2 * dc * nh * ((m.qk_nope_head_dim or 0) + (m.v_head_dim or 0)))) * (p + n)
        return (B * (2 * nh * (m.qk_head_dim + m.attn_v_head_dim))) * pairs + decompress
    return (B * (2 * nh * (m.qk_head_dim + m.attn_v_head_dim))) * pairs
