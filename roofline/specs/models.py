"""Model architecture records and the counts derived from them.

A :class:`ModelSpec` is the architecture of a decoder-only transformer (dense or
MoE, GQA/MQA or MLA attention, full or sliding-window layers). Counts are pure
functions of it: parameters per component (checked against published counts in
the tests) and KV-cache bytes. Formulas: the scaling book, "All About Transformer Inference"
(https://jax-ml.github.io/scaling-book/inference/); kipply, "Transformer
Inference Arithmetic" (https://kipp.ly/transformer-inference-arithmetic/);
DeepSeek-V2 §2.1 for MLA (https://arxiv.org/abs/2405.04434); the derivations
are restated in ``docs/theory.md``.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs
import numpy as np
from numpy.typing import ArrayLike, NDArray

from .formats import get_format

_pos = attrs.validators.gt(0)
_nonneg = attrs.validators.ge(0)


def _strings(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


def _flags(values: Iterable[bool]) -> tuple[bool, ...]:
    return tuple(values)


@attrs.frozen(kw_only=True)
class ModelSpec:
    """Architecture of a decoder-only LLM; sizes are element counts, not bytes.

    ``layer_types[i]`` is ``"full"`` or ``"sliding"``; ``moe_layers[i]`` says
    whether layer i has routed experts (else a dense MLP of
    ``intermediate_size``). MLA models set ``kv_lora_rank`` (and the other MLA
    ranks); their ``num_kv_heads`` is ignored for the cache.
    """

    id: str
    family: str
    num_layers: int = attrs.field(validator=_pos)
    hidden_size: int = attrs.field(validator=_pos)
    num_heads: int = attrs.field(validator=_pos)
    num_kv_heads: int = attrs.field(validator=_pos)
    head_dim: int = attrs.field(validator=_pos)
    vocab_size: int = attrs.field(validator=_pos)
    tied_embeddings: bool = False
    #: rows of the LM head where they are fewer than the embedding's (an EAGLE-3 head scores a reduced draft
    #: vocabulary, :func:`roofline.physics.stages.head_model`); None: ``vocab_size``
    output_vocab_size: int | None = attrs.field(default=None, validator=attrs.validators.optional(_pos))
    intermediate_size: int = attrs.field(default=0, validator=_nonneg)
    mlp_gated: bool = True
    mlp_bias: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False
    attention_sinks: bool = False
    norms_per_layer: int = 2
    norm_has_bias: bool = False
    layer_types: tuple[str, ...] = attrs.field(converter=_strings)
    sliding_window: int | None = None
    num_experts: int = attrs.field(default=0, validator=_nonneg)
    experts_per_token: int = attrs.field(default=0, validator=_nonneg)
    expert_intermediate_size: int = attrs.field(default=0, validator=_nonneg)
    expert_bias: bool = False
    router_bias: bool = False
    num_shared_experts: int = attrs.field(default=0, validator=_nonneg)
    shared_intermediate_size: int = attrs.field(default=0, validator=_nonneg)
    #: a sigmoid gate (Linear(d, 1)) on the shared expert's output: Qwen2-MoE's ``shared_expert_gate``
    shared_expert_gate: bool = False
    moe_layers: tuple[bool, ...] = attrs.field(converter=_flags)
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    num_mtp_layers: int = attrs.field(default=0, validator=_nonneg)
    checkpoint_expert_format: str | None = None
    #: the format the checkpoint stores its linear layers in where a config's ``quantization_config`` says so
    #: (``fp8``: DeepSeek-V3/R1's and Qwen's block-scaled FP8 checkpoints; ``int4-g128``: AWQ/GPTQ;
    #: :mod:`roofline.specs.quantization`); None: 16-bit
    checkpoint_weight_format: str | None = None
    #: a ``quantization_config`` roofline does not read, described (its weights' format must then be given)
    unread_quantization: str | None = None
    source: str = ""
    #: the Hugging Face repository people serve the model from (a preset's ``_served_checkpoint``: its -Instruct
    #: or chat checkpoint, same architecture as the config's); None: the source's repository, if any
    served_checkpoint: str | None = None
    #: the longest sequence the model was built for (config ``max_position_embeddings``); None where not given.
    #: Longer contexts still compute (the counts do not depend on it) but are flagged by the commands
    max_context_tokens: int | None = None
    #: the probability that a token of a sequence is routed to exactly its predecessor's experts (and otherwise,
    #: independently of it, uniformly): 0 = consecutive tokens route independently, the upper bound on the experts
    #: a sequence's tokens touch together (a verify pass, a prompt). A preset's ``_routing_locality`` where a
    #: publication measured it (:func:`roofline.physics.work.expected_experts_touched`)
    routing_locality: float = attrs.field(default=0.0, validator=[attrs.validators.ge(0), attrs.validators.le(1)])
    #: what the config says that the counts treat in a stated way (logit softcapping, chunked attention read as
    #: a window, an uncounted vision encoder); shown by ``roofline show``
    notes: tuple[str, ...] = attrs.field(default=(), converter=_strings)

    @num_kv_heads.validator
    def _kv_divides(self, _a: attrs.Attribute, v: int) -> None:
        if self.num_heads % v:
            raise ValueError(f"num_attention_heads ({self.num_heads}) must be a multiple of num_key_value_heads ({v})")

    @layer_types.validator
    def _types(self, _a: attrs.Attribute, v: tuple[str, ...]) -> None:
        if len(v) != self.num_layers or not set(v) <= {"full", "sliding"}:
            raise ValueError(f"layer_types must list 'full'/'sliding' for each of {self.num_layers} layers")
        if "sliding" in v and not (self.sliding_window and self.sliding_window > 0):
            raise ValueError("sliding layers need a positive sliding_window")

    @moe_layers.validator
    def _moe(self, _a: attrs.Attribute, v: tuple[bool, ...]) -> None:
        if len(v) != self.num_layers:
            raise ValueError(f"moe_layers must have one entry per layer ({self.num_layers})")
        if any(v) and not (self.num_experts > 0 and 0 < self.experts_per_token <= self.num_experts
                           and self.expert_intermediate_size > 0):
            raise ValueError("MoE layers need num_experts >= experts_per_token > 0 and an expert intermediate size")
        if not all(v) and self.intermediate_size <= 0:
            raise ValueError("dense layers need a positive intermediate_size")

    # ------------------------------------------------------------ structure
    @property
    def is_moe(self) -> bool:
        return any(self.moe_layers)

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def num_moe_layers(self) -> int:
        return sum(self.moe_layers)

    @property
    def num_sliding_layers(self) -> int:
        return self.layer_types.count("sliding")

    @property
    def qk_head_dim(self) -> int:
        return (self.qk_nope_head_dim or 0) + (self.qk_rope_head_dim or 0) if self.is_mla else self.head_dim

    @property
    def attn_v_head_dim(self) -> int:
        return self.v_head_dim if self.is_mla and self.v_head_dim else self.head_dim

    # ---------------------------------------------------- parameter counts
    def attention_params_per_layer(self) -> int:
        """Attention weights of one layer (projections, biases, norms inside attention, sinks).

        GQA: d*d_h*(2*n_h + 2*n_kv) (docs/theory.md §2.2; never assume n_h*d_h = d).
        MLA: W_DQ, W_UQ, W_DKV, W_UK, W_UV, W_O plus the two low-rank norms
        (DeepSeek-V2 §2.1; docs/theory.md §2.6 table).
        """
        d, nh = self.hidden_size, self.num_heads
        if self.is_mla:
            dc, dr = self.kv_lora_rank or 0, self.qk_rope_head_dim or 0
            dn, dv = self.qk_nope_head_dim or 0, self.v_head_dim or 0
            if self.q_lora_rank:
                q = d * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * nh * (dn + dr)
            else:
                q = d * nh * (dn + dr)
            kv = d * (dc + dr) + dc + dc * nh * (dn + dv)
            return q + kv + nh * dv * d
        dh, nkv = self.head_dim, self.num_kv_heads
        p = d * dh * (2 * nh + 2 * nkv)
        if self.qkv_bias:
            p += dh * (nh + 2 * nkv)
        if self.o_bias:
            p += d
        if self.qk_norm:
            p += 2 * dh
        if self.attention_sinks:
            p += nh
        return p

    def dense_mlp_params(self) -> int:
        """A dense MLP: gated 3*d*d_ff, ungated 2*d*d_ff, plus biases (docs/theory.md §2.1)."""
        d, f = self.hidden_size, self.intermediate_size
        if self.mlp_gated:
            return 3 * d * f + (2 * f + d if self.mlp_bias else 0)
        return 2 * d * f + (f + d if self.mlp_bias else 0)

    def expert_params(self) -> int:
        """One routed expert (gated MLP of ``expert_intermediate_size``)."""
        d, f = self.hidden_size, self.expert_intermediate_size
        return 3 * d * f + (2 * f + d if self.expert_bias else 0)

    def shared_expert_params(self) -> int:
        """All shared (always-active) experts of one MoE layer, with their gate where the model has one."""
        gate = self.hidden_size if self.shared_expert_gate and self.num_shared_experts else 0
        return 3 * self.hidden_size * self.shared_intermediate_size * self.num_shared_experts + gate

    def router_params(self) -> int:
        return self.hidden_size * self.num_experts + (self.num_experts if self.router_bias else 0)

    def norm_params_per_layer(self) -> int:
        return self.norms_per_layer * self.hidden_size * (2 if self.norm_has_bias else 1)

    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_vocab(self) -> int:
        """Tokens the LM head scores: ``output_vocab_size`` where given, else the embedding's ``vocab_size``."""
        return self.output_vocab_size if self.output_vocab_size is not None else self.vocab_size

    def lm_head_params(self) -> int:
        """Unembedding weights read per step (the embedding itself when tied)."""
        return self.lm_head_vocab * self.hidden_size

    def param_breakdown(self) -> dict[str, int]:
        """Parameters by component for the main model (MTP modules listed apart)."""
        n_moe = self.num_moe_layers
        n_dense = self.num_layers - n_moe
        final_norm = self.hidden_size * (2 if self.norm_has_bias else 1)
        parts = {
            "embedding": self.embedding_params(),
            "lm_head": 0 if self.tied_embeddings else self.lm_head_params(),
            "attention": self.num_layers * self.attention_params_per_layer(),
            "dense_mlp": n_dense * self.dense_mlp_params(),
            "experts": n_moe * self.num_experts * self.expert_params(),
            "shared_experts": n_moe * self.shared_expert_params(),
            "router": n_moe * self.router_params(),
            "norms": self.num_layers * self.norm_params_per_layer() + final_norm,
        }
        return parts

    @property
    def total_params(self) -> int:
        """Every stored parameter of the main model (MTP modules excluded, as DeepSeek counts 671B)."""
        return sum(self.param_breakdown().values())

    @property
    def mtp_params(self) -> int:
        """Parameters of the multi-token-prediction modules (DeepSeek-V3 §2.2).

        Each module: two RMSNorms (2d), a 2d->d projection, one MoE transformer
        layer and a final norm; embedding and output head are shared.
        """
        d = self.hidden_size
        layer = (self.attention_params_per_layer() + self.norm_params_per_layer() + self.num_experts * self.expert_params()
                 + self.shared_expert_params() + self.router_params()) if self.is_moe else (
            self.attention_params_per_layer() + self.norm_params_per_layer() + self.dense_mlp_params())
        return self.num_mtp_layers * (2 * d + 2 * d * d + layer + d)

    @property
    def inactive_expert_params(self) -> int:
        return self.num_moe_layers * (self.num_experts - self.experts_per_token) * self.expert_params()

    @property
    def active_params(self) -> int:
        """Parameters a token touches: all but unrouted experts, embedding table included.

        This is the convention of Mistral (Mixtral 12.9B) and DeepSeek (37B);
        OpenAI's gpt-oss figures exclude the embedding: see
        :attr:`active_params_without_embedding`.
        """
        return self.total_params - self.inactive_expert_params

    @property
    def active_params_without_embedding(self) -> int:
        """Active parameters without the input embedding table (OpenAI's gpt-oss convention, 5.13B)."""
        return self.active_params - self.embedding_params()

    # ------------------------------------------------------------ KV cache
    def kv_elements_per_token_per_layer(self) -> int:
        """Cached elements per token per layer: 2*n_kv*d_h (GQA) or d_c + d_r (MLA latent)."""
        if self.is_mla:
            return (self.kv_lora_rank or 0) + (self.qk_rope_head_dim or 0)
        return 2 * self.num_kv_heads * self.head_dim

    def kv_cache_bytes_per_token(self, dtype: str = "bf16") -> float:
        """KV bytes each new token adds once every sliding window is full.

        Full-attention layers only: 2*n_kv*d_h*b per layer (MLA: (d_c+d_r)*b);
        sliding layers hold at most ``sliding_window`` tokens, see
        :meth:`kv_cache_bytes` (docs/theory.md §2.9).
        """
        full = self.num_layers - self.num_sliding_layers
        return full * self.kv_elements_per_token_per_layer() * get_format(dtype).bytes_per_element

    def sliding_window_kv_bytes(self, dtype: str = "bf16") -> float:
        """KV bytes the sliding-window layers of one sequence hold once their window is full (0 without any).

        The figure that stays after the window fills: n_sliding * elements_per_token * W * b
        (docs/theory.md §2.4); added to ``context * kv_cache_bytes_per_token`` it gives :meth:`kv_cache_bytes`
        for any context of at least W tokens.
        """
        per = self.kv_elements_per_token_per_layer() * get_format(dtype).bytes_per_element
        return per * self.num_sliding_layers * float(self.sliding_window or 0)

    def kv_cache_bytes(self, context_tokens: ArrayLike, dtype: str = "bf16", *,
                       windowed: bool = True) -> NDArray[np.float64]:
        """KV bytes of one sequence holding ``context_tokens`` (broadcasts).

        Sum over layers of elements_per_token * L_eff, L_eff = L on full layers
        and min(L, W) on sliding layers (ring buffer; docs/theory.md §2.4). ``windowed=False``: an engine
        that keeps the whole context on sliding layers too and masks the window in the attention kernel
        (L_eff = L on every layer).
        """
        L = np.asarray(context_tokens, dtype=float)
        per = self.kv_elements_per_token_per_layer() * get_format(dtype).bytes_per_element
        if not windowed:
            return per * self.num_layers * L
        full = self.num_layers - self.num_sliding_layers
        window = float(self.sliding_window or 0)
        return per * (full * L + self.num_sliding_layers * np.minimum(L, window))
