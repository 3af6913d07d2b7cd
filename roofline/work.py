"""FLOP and bytes of one forward pass, by component. No hardware involved.

A forward pass processes ``new_tokens`` tokens per sequence for ``batch``
sequences that already hold ``prefix_tokens`` tokens in their KV cache, and
computes logits for ``logits_per_seq`` positions. Every stage is such a pass:

* prefill of S tokens: new = S, prefix = 0 (a chunk: new = c, prefix = p), logits = 1;
* decode step at context L: new = 1, prefix = L, logits = 1;
* verify of gamma drafts: new = logits = gamma + 1, prefix = L.

All workload arguments broadcast (numpy). Formulas: theory.md §2-3
(scaling book "All About Transformer Inference"; LLM-Viewer's per-operator
counts with causal attention halved; DeepSeek-V2 for MLA).
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np
from numpy.typing import ArrayLike, NDArray

from .errors import WorkloadError
from .model import ModelSpec
from .precision import Format, get_format

Array = NDArray[np.float64]

#: FLOP components and the format whose compute rate they run at.
FLOP_COMPONENTS = ("attention_proj", "attention_core", "mlp", "experts", "shared_experts", "router", "lm_head")
#: Weight-byte components.
WEIGHT_COMPONENTS = ("attention", "mlp", "experts", "shared_experts", "router", "norms", "lm_head", "embedding")


def _check_format(_inst: object, attribute: attrs.Attribute, value: str | None) -> None:
    if value is not None:
        get_format(value)  # raises NotFoundError with a suggestion


@attrs.frozen(kw_only=True)
class Formats:
    """Storage formats: non-expert weights, expert weights (None = same), KV cache, activations."""

    weights: str = attrs.field(default="bf16", validator=_check_format)
    experts: str | None = attrs.field(default=None, validator=_check_format)
    kv: str = attrs.field(default="bf16", validator=_check_format)
    activations: str = attrs.field(default="bf16", validator=_check_format)

    @property
    def weight(self) -> Format:
        return get_format(self.weights)

    @property
    def expert(self) -> Format:
        return get_format(self.experts or self.weights)

    @property
    def kv_format(self) -> Format:
        return get_format(self.kv)

    @property
    def activation(self) -> Format:
        return get_format(self.activations)

    @classmethod
    def for_model(cls, model: ModelSpec, *, weights: str = "bf16", experts: str | None = None, kv: str = "bf16",
                  activations: str = "bf16") -> Formats:
        """Defaults that follow the checkpoint: gpt-oss experts are MXFP4 unless told otherwise."""
        if experts is None and model.checkpoint_expert_format and weights in ("bf16", "fp16"):
            experts = model.checkpoint_expert_format
        return cls(weights=weights, experts=experts, kv=kv, activations=activations)


@attrs.frozen(kw_only=True)
class Work:
    """FLOP and bytes of one forward pass over the whole model (all devices together).

    ``flop`` and ``weight_bytes`` map components to arrays that broadcast to
    the workload shape (a component that does not depend on an argument keeps
    that axis at length 1, a constant is a scalar); ``tokens`` = batch * new_tokens.
    """

    flop: dict[str, Array]
    weight_bytes: dict[str, Array]
    kv_read_bytes: Array
    kv_write_bytes: Array
    activation_bytes: Array
    tokens: Array
    experts_touched_per_layer: Array

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
    for t in sorted(terms, key=np.size):
        out = out + t
    return out


def expected_experts_touched(num_experts: int, experts_per_token: int, tokens: ArrayLike) -> Array:
    """Expected distinct experts hit by ``tokens`` tokens under uniform top-k routing.

    E_u(n) = E * (1 - (1 - k/E)^n): a token's k distinct experts miss a given
    expert with probability C(E-1,k)/C(E,k) = 1 - k/E (theory.md §2.7; the
    scaling book's "distinct outcomes in K dice rolls"). n = 1 gives k; n -> inf gives E.
    """
    n = np.asarray(tokens, dtype=float)
    if num_experts == 0:
        return np.zeros_like(n)
    return num_experts * -np.expm1(n * np.log1p(-experts_per_token / num_experts)) if experts_per_token < num_experts \
        else np.where(n > 0, float(num_experts), 0.0)


def attended_pairs(prefix: ArrayLike, new: ArrayLike, window: float | None = None) -> Array:
    """Query-key pairs of causal attention for ``new`` queries after ``prefix`` cached tokens.

    Query j (1-based) at absolute position p + j attends min(p + j, W) keys, so the
    total is S(p + n) - S(p) with S(m) = m(m+1)/2 (full) or, with a window W,
    S(m) = m(m+1)/2 for m <= W and W(W+1)/2 + (m - W) W beyond (theory.md §2.3-2.4).
    """
    p = np.asarray(prefix, dtype=float)
    n = np.asarray(new, dtype=float)

    def s(m: Array) -> Array:
        if window is None:
            return m * (m + 1) / 2
        w = float(window)
        return np.where(m <= w, m * (m + 1) / 2, w * (w + 1) / 2 + (m - w) * w)

    return s(p + n) - s(p)


def show(value: ArrayLike) -> str:
    """A short rendering of a workload value for error messages."""
    a = np.asarray(value)
    return repr(a.item()) if a.ndim == 0 else np.array2string(a.ravel(), threshold=6, separator=", ")


def _validate(name: str, value: ArrayLike, *, minimum: float, integer: bool = False) -> Array:
    try:
        a = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise WorkloadError(f"{name} must be a number or an array of numbers, got {value!r}") from None
    if not np.all(np.isfinite(a)):
        raise WorkloadError(f"{name} must be finite, got {show(a)}")
    if np.any(a < minimum):
        raise WorkloadError(f"{name} must be >= {minimum:g}, got {show(a)}")
    if integer and np.any(a != np.round(a)):
        raise WorkloadError(f"{name} must be a whole number, got {show(a)}")
    return a


def forward_work(model: ModelSpec, formats: Formats, *, batch: ArrayLike, new_tokens: ArrayLike,
                 prefix_tokens: ArrayLike, logits_per_seq: ArrayLike = 1, mla_absorbed: bool = True,
                 mean_field: bool = False) -> Work:
    """Count FLOP and bytes of one forward pass (see the module docstring for the stages).

    * Matmuls: 2 FLOP per multiply-add; projections 2*T*P per layer type.
    * Attention core: 2*n_h*(d_qk + d_v) per attended query-key pair (QK^T and AV),
      causal pairs exact, sliding layers windowed. MLA absorbed (decode, verify):
      2*n_h*(2*d_c + d_r) per pair over the latent cache; non-absorbed (prefill):
      the same core as MHA with d_qk = d_n + d_r plus decompressing the context's
      latent cache, 2*d_c*n_h*(d_n + d_v) per cached token (theory.md §2.6).
    * MoE: routed experts touched per layer E_u(T) for T = batch*new tokens, so
      verifying gamma+1 tokens reads more expert bytes than a decode step;
      shared experts and dense layers always count.
    * Weights are read once per pass; the embedding is a row gather (T*d
      elements); the LM head is read once and costs 2*d*V per logit position.
    * KV: the prefix is read once per sequence (all new queries share it), the
      new tokens' K/V are written once; sliding layers read min(p, W).
    * Activations: every matmul reads its input and writes its output once.

    ``mean_field=True`` admits fractional token counts: a steady-state serving
    step whose sequences carry on average 1 decode token plus isl/osl prefill
    tokens (theory.md §6) is counted as that average pass.
    """
    B = _validate("batch", batch, minimum=1, integer=not mean_field)
    n = _validate("new_tokens", new_tokens, minimum=1, integer=not mean_field)
    p = _validate("prefix_tokens", prefix_tokens, minimum=0, integer=not mean_field)
    logits = _validate("logits_per_seq", logits_per_seq, minimum=0, integer=True)
    # no eager broadcasting: terms that depend only on batch (or only on context) stay small arrays, and only
    # the products that need the full grid (KV reads, attention) are materialised at its shape
    np.broadcast_shapes(B.shape, n.shape, p.shape, logits.shape)  # fail early on incompatible shapes
    T = B * n
    m = model
    d, nh, nL = m.hidden_size, m.num_heads, m.num_layers
    bw, be = formats.weight.bytes_per_element, formats.expert.bytes_per_element
    bkv, ba = formats.kv_format.bytes_per_element, formats.activation.bytes_per_element
    n_moe = m.num_moe_layers
    n_dense = nL - n_moe
    n_full = nL - m.num_sliding_layers

    # ---- attention core
    pairs = n_full * attended_pairs(p, n) + m.num_sliding_layers * attended_pairs(p, n, m.sliding_window)
    if m.is_mla:
        dc, dr = m.kv_lora_rank or 0, m.qk_rope_head_dim or 0
        if mla_absorbed:
            core = (B * (2 * nh * (2 * dc + dr))) * pairs
        else:
            decompress = (B * (nL * 2 * dc * nh * ((m.qk_nope_head_dim or 0) + (m.v_head_dim or 0)))) * (p + n)
            core = (B * (2 * nh * (m.qk_head_dim + m.attn_v_head_dim))) * pairs + decompress
    else:
        core = (B * (2 * nh * (m.qk_head_dim + m.attn_v_head_dim))) * pairs

    touched = expected_experts_touched(m.num_experts, m.experts_per_token, T) if m.is_moe else np.zeros(1)[0] * T
    flop = {
        "attention_proj": 2 * T * nL * m.attention_params_per_layer(),
        "attention_core": core,
        "mlp": 2 * T * n_dense * m.dense_mlp_params(),
        "experts": 2 * T * n_moe * m.experts_per_token * m.expert_params(),
        "shared_experts": 2 * T * n_moe * m.shared_expert_params(),
        "router": 2 * T * n_moe * m.router_params(),
        "lm_head": 2 * B * logits * d * m.vocab_size,
    }
    weight_bytes = {
        "attention": np.float64(nL * m.attention_params_per_layer() * bw),
        "mlp": np.float64(n_dense * m.dense_mlp_params() * bw),
        "experts": n_moe * touched * m.expert_params() * be,
        "shared_experts": np.float64(n_moe * m.shared_expert_params() * bw),
        "router": np.float64(n_moe * m.router_params() * bw),
        "norms": np.float64((nL * m.norm_params_per_layer() + d) * bw),
        "lm_head": np.where(logits > 0, m.lm_head_params() * bw, 0.0),
        "embedding": T * d * bw,
    }
    kv_elems = m.kv_elements_per_token_per_layer()
    window = float(m.sliding_window or 0)
    kv_read = (B * (kv_elems * bkv)) * (n_full * p + m.num_sliding_layers * np.minimum(p, window))
    kv_write = T * nL * kv_elems * bkv

    # activations: each matmul reads its input and writes its output (elements per token)
    if m.is_mla:
        attn_io = 2 * d + 2 * nh * (m.qk_head_dim + m.attn_v_head_dim)
    else:
        attn_io = 2 * d + 2 * m.head_dim * (nh + m.num_kv_heads)
    mlp_io = (2 * d + (3 if m.mlp_gated else 2) * m.intermediate_size) if n_dense else 0
    moe_io = (m.experts_per_token * (2 * d + 3 * m.expert_intermediate_size)
              + m.num_shared_experts * (2 * d + 3 * m.shared_intermediate_size) + d + m.num_experts)
    act = ba * (T * (nL * attn_io + n_dense * mlp_io + n_moe * moe_io) + B * logits * (d + m.vocab_size))
    return Work(flop=flop, weight_bytes=weight_bytes, kv_read_bytes=kv_read, kv_write_bytes=kv_write,
                activation_bytes=act, tokens=T, experts_touched_per_layer=touched)
