"""Building a :class:`ModelSpec` from a Hugging Face ``config.json``, the presets, and model names.

Supported ``model_type`` values (:data:`ARCHITECTURES`): llama, mistral and ministral, mixtral, qwen2, qwen3,
qwen2_moe, qwen3_moe, deepseek_v3, gpt_oss, falcon, gemma2, gemma3 (and gemma3_text), phi3 (Phi-3 and Phi-4),
llama4 (and llama4_text), glm4_moe (GLM-4.5). Keys follow the transformers configuration classes of each family
(https://github.com/huggingface/transformers/tree/main/src/transformers/models); a missing required key, a wrong
type or an unsupported architecture raises :class:`SpecError` naming the file and key. A multimodal config
(Gemma 3, Llama 4) is read through its ``text_config``: the language model is counted, its vision encoder is not.

Presets are config files shipped in ``roofline/presets`` (nothing is downloaded); a preset's Hugging Face repo id
(its ``_source``) and the ids of the same architecture listed in its ``_hf_repos`` name it too.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import NotFoundError, SpecError, did_you_mean
from .files import read_text
from .models import ModelSpec
from .quantization import checkpoint_formats

Config = dict[str, Any]
#: Larger sizes or counts are not a model (they would overflow the counts, or need exabytes).
MAX_CONFIG_INT = 2**31 - 1


class _Keys:
    """Typed access to config keys, naming the file and key in every error."""

    def __init__(self, cfg: Config, origin: str) -> None:
        self.cfg, self.origin = cfg, origin

    def fail(self, key: str, why: str) -> SpecError:
        value = self.cfg.get(key)
        shown = repr(value) if len(repr(value)) < 60 else repr(value)[:57] + "..."
        return SpecError(f"{self.origin}: key {key!r} = {shown}: {why}")

    def integer(self, key: str, default: int | None = None, *, alt: tuple[str, ...] = (), minimum: int = 1) -> int:
        for k in (key, *alt):
            if k in self.cfg and self.cfg[k] is not None:
                key = k
                break
        else:
            if default is None:
                raise SpecError(f"{self.origin}: missing required key {key!r}")
            return default
        v = self.cfg[key]
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(key, "must be an integer")
        if v < minimum:
            raise self.fail(key, f"must be >= {minimum}")
        if v > MAX_CONFIG_INT:
            raise self.fail(key, f"must be <= {MAX_CONFIG_INT:,} (no transformer is this large)")
        return v

    def opt_int(self, key: str) -> int | None:
        return self.integer(key, 0, minimum=0) or None if self.cfg.get(key) is not None else None

    def flag(self, key: str, default: bool) -> bool:
        v = self.cfg.get(key, default)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise self.fail(key, "must be true or false")
        return v


def _common(k: _Keys, *, tie_default: bool, head_dim: int | None = None, vocab: int | None = None) -> dict[str, Any]:
    """The keys every family shares; ``head_dim`` and ``vocab`` are the family's defaults where it has them
    (else head_dim = hidden_size / heads, and vocab_size is required)."""
    d = k.integer("hidden_size")
    nh = k.integer("num_attention_heads")
    if head_dim is None and d % nh == 0:
        head_dim = d // nh
    return dict(num_layers=k.integer("num_hidden_layers"), hidden_size=d, num_heads=nh,
                num_kv_heads=k.integer("num_key_value_heads", nh), head_dim=k.integer("head_dim", head_dim),
                vocab_size=k.integer("vocab_size", vocab), tied_embeddings=k.flag("tie_word_embeddings", tie_default))


def _all(n: int, value: Any) -> tuple[Any, ...]:
    return (value,) * n


def _layer_types(k: _Keys, n: int, default: list[str]) -> tuple[str, ...]:
    """Each layer's attention, "sliding" or "full": the config's ``layer_types`` where it lists them
    (sliding_attention/full_attention, as transformers writes them; Llama 4's chunked_attention is read as a
    window of one chunk), else ``default`` in those words."""
    types = k.cfg.get("layer_types", default)
    names = {"sliding_attention": "sliding", "full_attention": "full", "chunked_attention": "sliding"}
    if not isinstance(types, list) or len(types) != n or any(not isinstance(t, str) or t not in names for t in types):
        raise k.fail("layer_types", f"must list sliding_attention/full_attention for each of {n} layers")
    return tuple(names[t] for t in types)


#: transformers' Qwen2Config/Qwen3Config default for ``max_window_layers``: the layers below it attend in full
QWEN_MAX_WINDOW_LAYERS = 28


def _llama_like(k: _Keys, family: str) -> dict[str, Any]:
    """Llama, Mistral and Qwen. Sliding windows: every layer of a Mistral with a ``sliding_window``; a Qwen with
    ``use_sliding_window`` slides from layer ``max_window_layers`` on, the ones below attend in full
    (transformers' Qwen2 attention: ``use_sliding_window and layer_idx >= max_window_layers``,
    https://github.com/huggingface/transformers/blob/main/src/transformers/models/qwen2/configuration_qwen2.py)."""
    c = _common(k, tie_default=False)
    n = c["num_layers"]
    uses_window = family in ("mistral", "ministral", "phi3") or k.flag("use_sliding_window", False)
    sliding = uses_window and k.cfg.get("sliding_window") is not None
    first = k.integer("max_window_layers", QWEN_MAX_WINDOW_LAYERS) if sliding and family.startswith("qwen") else 0
    default = ["sliding_attention" if sliding and i >= first else "full_attention" for i in range(n)]
    types = _layer_types(k, n, default)
    bias = k.flag("attention_bias", family in ("qwen2", "qwen2_moe"))
    c.update(family=family, intermediate_size=k.integer("intermediate_size"), mlp_bias=k.flag("mlp_bias", False),
             qkv_bias=bias, o_bias=bias and family == "llama", qk_norm=family in ("qwen3", "qwen3_moe"),
             layer_types=types, sliding_window=k.integer("sliding_window") if "sliding" in types else None,
             moe_layers=_all(n, False))
    return c


def _mixtral(k: _Keys) -> dict[str, Any]:
    c = _llama_like(k, "mistral")
    n = c["num_layers"]
    c.update(family="mixtral", num_experts=k.integer("num_local_experts"), experts_per_token=k.integer("num_experts_per_tok"),
             expert_intermediate_size=c["intermediate_size"], moe_layers=_all(n, True))
    return c


def _qwen_moe(k: _Keys, family: str) -> dict[str, Any]:
    """Qwen2-MoE and Qwen3-MoE: routed experts every ``decoder_sparse_step`` layers but ``mlp_only_layers``;
    Qwen2-MoE adds one shared expert of ``shared_expert_intermediate_size`` behind a sigmoid gate (Linear(d, 1))
    and has q/k/v biases (transformers configuration_qwen2_moe.py / modeling_qwen2_moe.py)."""
    c = _llama_like(k, family)
    n = c["num_layers"]
    step = k.integer("decoder_sparse_step", 1)
    only_mlp = k.cfg.get("mlp_only_layers") or []
    if not isinstance(only_mlp, list) or not all(isinstance(i, int) for i in only_mlp):
        raise k.fail("mlp_only_layers", "must be a list of layer indices")
    moe = tuple((i not in only_mlp) and (i + 1) % step == 0 for i in range(n))
    shared = k.integer("shared_expert_intermediate_size", 0, minimum=0) if family == "qwen2_moe" else 0
    c.update(num_experts=k.integer("num_experts"), experts_per_token=k.integer("num_experts_per_tok"),
             expert_intermediate_size=k.integer("moe_intermediate_size"), moe_layers=moe,
             num_shared_experts=1 if shared else 0, shared_intermediate_size=shared, shared_expert_gate=bool(shared))
    return c


def _deepseek_v3(k: _Keys) -> dict[str, Any]:
    c = _common(k, tie_default=False)
    n = c["num_layers"]
    first_dense = k.integer("first_k_dense_replace", 0, minimum=0)
    if first_dense >= n:
        raise k.fail("first_k_dense_replace", f"leaves no MoE layer of {n} (num_hidden_layers)")
    freq = k.integer("moe_layer_freq", 1)
    moe = tuple(i >= first_dense and i % freq == 0 for i in range(n))
    shared = k.integer("n_shared_experts", 0, minimum=0)
    c.update(family="deepseek_v3", intermediate_size=k.integer("intermediate_size"),
             num_experts=k.integer("n_routed_experts"), experts_per_token=k.integer("num_experts_per_tok"),
             expert_intermediate_size=k.integer("moe_intermediate_size"), num_shared_experts=shared,
             shared_intermediate_size=k.integer("moe_intermediate_size") if shared else 0,
             router_bias=k.cfg.get("topk_method", "noaux_tc") == "noaux_tc",
             moe_layers=moe, layer_types=_all(n, "full"),
             q_lora_rank=k.opt_int("q_lora_rank"), kv_lora_rank=k.integer("kv_lora_rank"),
             qk_rope_head_dim=k.integer("qk_rope_head_dim"), qk_nope_head_dim=k.integer("qk_nope_head_dim"),
             v_head_dim=k.integer("v_head_dim"), num_mtp_layers=k.integer("num_nextn_predict_layers", 0, minimum=0),
             head_dim=k.integer("qk_nope_head_dim") + k.integer("qk_rope_head_dim"))
    c["num_kv_heads"] = c["num_heads"]
    return c


def _gpt_oss(k: _Keys) -> dict[str, Any]:
    c = _common(k, tie_default=False)
    n = c["num_layers"]
    # gpt-oss's default: even layers sliding, odd layers full
    types = _layer_types(k, n, ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)])
    c.update(family="gpt_oss", intermediate_size=k.integer("intermediate_size"),
             num_experts=k.integer("num_local_experts", alt=("num_experts",)),
             experts_per_token=k.integer("num_experts_per_tok", alt=("experts_per_token",)),
             expert_intermediate_size=k.integer("intermediate_size"), expert_bias=True, router_bias=True,
             qkv_bias=k.flag("attention_bias", True), o_bias=k.flag("attention_bias", True), attention_sinks=True,
             layer_types=types, sliding_window=k.integer("sliding_window"),
             moe_layers=_all(n, True))
    return c


def _falcon(k: _Keys) -> dict[str, Any]:
    d = k.integer("hidden_size")
    nh = k.integer("num_attention_heads", alt=("n_head",))
    n = k.integer("num_hidden_layers", alt=("n_layer",))
    new_arch = k.flag("new_decoder_architecture", False)
    if new_arch:
        nkv = k.integer("num_kv_heads", alt=("n_head_kv",))
    else:
        nkv = 1 if k.flag("multi_query", True) else nh
    if k.flag("alibi", False):
        raise k.fail("alibi", "ALiBi Falcon variants are not supported")
    bias = k.flag("bias", False)
    return dict(family="falcon", num_layers=n, hidden_size=d, num_heads=nh, num_kv_heads=nkv, head_dim=d // nh,
                vocab_size=k.integer("vocab_size"), tied_embeddings=k.flag("tie_word_embeddings", True),
                intermediate_size=k.integer("ffn_hidden_size", 4 * d), mlp_gated=False, mlp_bias=bias,
                qkv_bias=bias, o_bias=bias, norms_per_layer=2 if new_arch else 1, norm_has_bias=True,
                layer_types=_all(n, "full"), moe_layers=_all(n, False))


#: Gemma's RMSNorms per layer: input, post-attention, pre- and post-feedforward (transformers Gemma2/Gemma3 layers)
GEMMA_NORMS_PER_LAYER = 4
#: transformers' Gemma2Config/Gemma3TextConfig defaults where a published config leaves the key out
#: (https://github.com/huggingface/transformers/blob/main/src/transformers/models/gemma3/configuration_gemma3.py)
GEMMA_DEFAULTS = {"head_dim": 256, "sliding_window": 4096, "gemma3_vocab_size": 262_208, "gemma3_pattern": 6,
                  "gemma3_max_position_embeddings": 131_072}
SOFTCAP_NOTE = ("logit softcapping (cap * tanh(x / cap) on each attention score and on the final logits) adds no "
                "weights and a few elementwise operations: attention work is counted as for plain softmax")


def _gemma(k: _Keys, family: str) -> dict[str, Any]:
    """Gemma 2 and Gemma 3: GeGLU MLP, four RMSNorms per layer, tied embeddings, head_dim 256 unless given.
    Sliding and global layers alternate: Gemma 2 slides on even layers (transformers: ``(i + 1) % 2``), Gemma 3
    on five of every six (``(i + 1) % sliding_window_pattern``); Gemma 3 adds q/k RMSNorms. Softcapping
    (Gemma 2) does not change the counts: see :data:`SOFTCAP_NOTE`."""
    gemma3 = family == "gemma3"
    c = _common(k, tie_default=True, head_dim=GEMMA_DEFAULTS["head_dim"],
                vocab=GEMMA_DEFAULTS["gemma3_vocab_size"] if gemma3 else None)
    n = c["num_layers"]
    every = (k.integer("sliding_window_pattern", GEMMA_DEFAULTS["gemma3_pattern"], alt=("_sliding_window_pattern",))
             if gemma3 else 2)
    types = _layer_types(k, n, ["sliding_attention" if (i + 1) % every else "full_attention" for i in range(n)])
    softcap = any(k.cfg.get(key) is not None for key in ("attn_logit_softcapping", "final_logit_softcapping"))
    bias = k.flag("attention_bias", False)
    c.update(family=family, intermediate_size=k.integer("intermediate_size"), qkv_bias=bias, o_bias=bias,
             qk_norm=gemma3, norms_per_layer=GEMMA_NORMS_PER_LAYER, layer_types=types, moe_layers=_all(n, False),
             sliding_window=k.integer("sliding_window", GEMMA_DEFAULTS["sliding_window"]) if "sliding" in types
             else None, notes=(SOFTCAP_NOTE,) if softcap else ())
    if gemma3:
        c["max_context_tokens"] = GEMMA_DEFAULTS["gemma3_max_position_embeddings"]
    return c


def _phi3(k: _Keys) -> dict[str, Any]:
    """Phi-3 and Phi-4 (model_type phi3): a Llama-shaped decoder whose checkpoints fuse q/k/v into ``qkv_proj``
    and gate/up into ``gate_up_proj``; fused or apart, the weights count the same. A ``sliding_window`` applies
    to every layer (transformers' Phi3Attention), as for Mistral."""
    return _llama_like(k, "phi3")


#: transformers' Llama4TextConfig defaults: every fourth layer has no RoPE and attends globally, the others
#: attend within chunks; dense layers use ``intermediate_size_mlp``
#: (https://github.com/huggingface/transformers/blob/main/src/transformers/models/llama4/configuration_llama4.py)
LLAMA4_DEFAULTS = {"no_rope_layer_interval": 4, "intermediate_size_mlp": 16384}


def _index_list(k: _Keys, key: str, n: int, *, flags: bool = False) -> list[int] | None:
    """A list of layer indices (or, ``flags``, one 0/1 per layer) from the config; None where it is absent or empty."""
    v = k.cfg.get(key)
    if v is None or v == []:
        return None
    ok = isinstance(v, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in v)
    if not ok or (flags and (len(v) != n or not set(v) <= {0, 1})) or (not flags and not all(0 <= i < n for i in v)):
        raise k.fail(key, f"must list {'0/1 for each of' if flags else 'layer indices below'} {n} layers")
    return v


def _llama4(k: _Keys) -> dict[str, Any]:
    """Llama 4 (Scout, Maverick): MoE layers every ``interleave_moe_layer_step`` (or those ``moe_layers`` lists),
    each with ``num_local_experts`` routed experts of ``intermediate_size`` plus one shared expert of the same
    size; the other layers are dense MLPs of ``intermediate_size_mlp``. RoPE layers (``no_rope_layers`` 1) attend
    within chunks of ``attention_chunk_size``, read here as a window of one chunk (:data:`CHUNK_NOTE`); the NoPE
    layers attend globally. The q/k norm is an L2 norm without weights."""
    c = _common(k, tie_default=False)
    n = c["num_layers"]
    step = k.integer("interleave_moe_layer_step", 1)
    listed = _index_list(k, "moe_layers", n)
    moe_at = set(listed if listed is not None else range(step - 1, n, step))
    every = LLAMA4_DEFAULTS["no_rope_layer_interval"]
    rope = _index_list(k, "no_rope_layers", n, flags=True) or [int((i + 1) % every != 0) for i in range(n)]
    chunk = k.integer("attention_chunk_size", 0, minimum=0)
    types = _layer_types(k, n, ["chunked_attention" if r and chunk else "full_attention" for r in rope])
    bias = k.flag("attention_bias", False)
    c.update(family="llama4", intermediate_size=k.integer("intermediate_size_mlp",
                                                          LLAMA4_DEFAULTS["intermediate_size_mlp"]),
             num_experts=k.integer("num_local_experts"), experts_per_token=k.integer("num_experts_per_tok"),
             expert_intermediate_size=k.integer("intermediate_size"), num_shared_experts=1,
             shared_intermediate_size=k.integer("intermediate_size"), qkv_bias=bias, o_bias=bias,
             moe_layers=tuple(i in moe_at for i in range(n)), layer_types=types,
             sliding_window=chunk if "sliding" in types else None,
             notes=(CHUNK_NOTE.format(chunk=chunk, n=types.count("sliding"), of=n),) if "sliding" in types else ())
    return c


CHUNK_NOTE = ("chunked attention ({chunk:,}-token chunks, {n} of {of} layers) is counted as a {chunk:,}-token "
              "sliding window: a chunked layer's cache holds at most one chunk, as a window's does, but its attention "
              "reads 1 to {chunk:,} tokens (half a chunk on average), so those layers' attention reads are an upper bound")


def _glm4_moe(k: _Keys) -> dict[str, Any]:
    """GLM-4.5 and GLM-4.5-Air (transformers Glm4MoeConfig): the first ``first_k_dense_replace`` layers are dense
    MLPs, the rest MoE with ``n_shared_experts`` shared experts of ``moe_intermediate_size`` and a router with a
    score-correction bias; q/k/v carry biases (``attention_bias``), the output projection none; ``use_qk_norm``
    adds q/k RMSNorms; the ``num_nextn_predict_layers`` MTP layers are listed apart, as DeepSeek's."""
    c = _common(k, tie_default=False)
    n = c["num_layers"]
    first_dense = k.integer("first_k_dense_replace", 1, minimum=0)
    if first_dense >= n:
        raise k.fail("first_k_dense_replace", f"leaves no MoE layer of {n} (num_hidden_layers)")
    shared = k.integer("n_shared_experts", 1, minimum=0)
    c.update(family="glm4_moe", intermediate_size=k.integer("intermediate_size"),
             num_experts=k.integer("n_routed_experts"), experts_per_token=k.integer("num_experts_per_tok"),
             expert_intermediate_size=k.integer("moe_intermediate_size"), num_shared_experts=shared,
             shared_intermediate_size=k.integer("moe_intermediate_size") if shared else 0, router_bias=True,
             qkv_bias=k.flag("attention_bias", False), qk_norm=k.flag("use_qk_norm", False),
             moe_layers=tuple(i >= first_dense for i in range(n)), layer_types=_all(n, "full"),
             num_mtp_layers=k.integer("num_nextn_predict_layers", 0, minimum=0))
    return c


_BUILDERS: dict[str, Callable[[_Keys], dict[str, Any]]] = {
    "llama": lambda k: _llama_like(k, "llama"),
    "mistral": lambda k: _llama_like(k, "mistral"),
    "ministral": lambda k: _llama_like(k, "ministral"),
    "qwen2": lambda k: _llama_like(k, "qwen2"),
    "qwen3": lambda k: _llama_like(k, "qwen3"),
    "mixtral": _mixtral,
    "qwen2_moe": lambda k: _qwen_moe(k, "qwen2_moe"),
    "qwen3_moe": lambda k: _qwen_moe(k, "qwen3_moe"),
    "deepseek_v3": _deepseek_v3,
    "gpt_oss": _gpt_oss,
    "falcon": _falcon,
    "gemma2": lambda k: _gemma(k, "gemma2"),
    "gemma3_text": lambda k: _gemma(k, "gemma3"),
    "phi3": _phi3,
    "llama4_text": _llama4,
    "glm4_moe": _glm4_moe,
}
#: multimodal configs read through their ``text_config`` (model_type -> the text model's); a flat one is read whole
_WRAPPERS = {"gemma3": "gemma3_text", "llama4": "llama4_text"}
#: every ``model_type`` that loads, for the commands' help and the docs
ARCHITECTURES: tuple[str, ...] = tuple(sorted([*_BUILDERS, *_WRAPPERS]))
_ARCH = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "MixtralForCausalLM": "mixtral",
         "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3", "Qwen3MoeForCausalLM": "qwen3_moe",
         "DeepseekV3ForCausalLM": "deepseek_v3", "GptOssForCausalLM": "gpt_oss", "FalconForCausalLM": "falcon",
         "RWForCausalLM": "falcon", "MinistralForCausalLM": "ministral", "Qwen2MoeForCausalLM": "qwen2_moe",
         "Gemma2ForCausalLM": "gemma2", "Gemma3ForCausalLM": "gemma3_text",
         "Gemma3ForConditionalGeneration": "gemma3", "Phi3ForCausalLM": "phi3",
         "Llama4ForConditionalGeneration": "llama4", "Llama4ForCausalLM": "llama4_text",
         "Glm4MoeForCausalLM": "glm4_moe"}
VISION_NOTE = "a multimodal checkpoint: its language model is counted, the vision encoder (vision_config) is not"


def _text_model(cfg: Config, origin: str) -> tuple[Config, str, tuple[str, ...]]:
    """The config of the language model, its model_type and any note: a multimodal wrapper's ``text_config``
    (with the wrapper's own tie and quantization keys where the text part leaves them out), else ``cfg``."""
    model_type = cfg.get("model_type")
    if model_type is None:
        archs = cfg.get("architectures")
        archs = archs if isinstance(archs, list) else []
        model_type = next((_ARCH[a] for a in archs if isinstance(a, str) and a in _ARCH), None)
    if not isinstance(model_type, str) or model_type not in ARCHITECTURES:
        raise SpecError(f"{origin}: unsupported architecture {model_type!r} (key 'model_type'); "
                        f"supported: {', '.join(ARCHITECTURES)}")
    if model_type not in _WRAPPERS:
        return cfg, model_type, ()
    text = cfg.get("text_config")
    if text is None:
        return cfg, _WRAPPERS[model_type], ()
    if not isinstance(text, dict):
        raise SpecError(f"{origin}: key 'text_config' must be an object (the language model's config)")
    inherited = {key: cfg[key] for key in ("tie_word_embeddings", "quantization_config", "_source")
                 if key in cfg and key not in text}
    return {**text, **inherited}, _WRAPPERS[model_type], (VISION_NOTE,)


def model_from_hf_config(config: Config | str | os.PathLike[str], *, id: str | None = None) -> ModelSpec:
    """Build a :class:`ModelSpec` from a Hugging Face ``config.json`` (dict or path)."""
    if isinstance(config, dict):
        cfg, origin = config, "<config dict>"
    elif not isinstance(config, (str, os.PathLike)):
        raise SpecError(f"a config is a dict, or the path of a config.json or its folder; got {type(config).__name__}")
    else:
        path = Path(config)
        origin = str(path)
        cfg = _read_json(path)
        id = id or (path.parent.name if path.name == "config.json" else path.stem)
    if not isinstance(cfg, dict):
        raise SpecError(f"{origin}: expected a JSON object at the top level")
    text, model_type, notes = _text_model(cfg, origin)
    k = _Keys(text, origin)
    fields = _BUILDERS[model_type](k)
    if text.get("max_position_embeddings") is not None:
        fields["max_context_tokens"] = k.integer("max_position_embeddings")
    stored = checkpoint_formats(text.get("quantization_config"), has_experts=bool(fields.get("num_experts")),
                                hidden_size=int(fields.get("hidden_size") or 0))
    fields.update(checkpoint_weight_format=stored.weights, checkpoint_expert_format=stored.experts,
                  unread_quantization=stored.unread, notes=(*fields.get("notes", ()), *notes))
    try:
        return ModelSpec(id=id or str(cfg.get("_name_or_path") or model_type), source=str(cfg.get("_source", origin)),
                         served_checkpoint=_served(cfg.get("_served_checkpoint"), origin),
                         routing_locality=_locality(cfg.get("_routing_locality", 0.0), origin), **fields)
    except (ValueError, TypeError) as e:
        raise SpecError(f"{origin}: {e}") from None


def _locality(value: Any, origin: str) -> float:
    """A config's ``_routing_locality`` (a probability), checked."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise SpecError(f"{origin}: _routing_locality must be a number in [0, 1], got {value!r}")
    return float(value)


def _served(repo: Any, origin: str) -> str | None:
    """A config's ``_served_checkpoint`` (a Hugging Face ``owner/name``), checked."""
    if repo is None:
        return None
    if not isinstance(repo, str) or not re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", repo):
        raise SpecError(f"{origin}: _served_checkpoint must be a Hugging Face repository id (owner/name), got {repo!r}")
    return repo


def _read_json(path: Path) -> Any:
    if path.is_dir():
        if not (path / "config.json").exists():
            raise SpecError(f"{path}: is a directory without a config.json")
        path = path / "config.json"
    text = read_text(path, what="a Hugging Face config.json", max_bytes=10_000_000)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise SpecError(f"{path}: JSON does not parse: {e}") from None
    except RecursionError:
        raise SpecError(f"{path}: JSON nested too deeply to be a config.json") from None


def presets_dir() -> Path:
    return Path(str(resources.files("roofline"))) / "presets"


def list_models() -> list[str]:
    """Ids of the shipped model presets."""
    return list(_preset_ids())


@functools.cache
def _preset_ids() -> tuple[str, ...]:
    """The shipped presets' ids, sorted: the package's own files, listed once per process (a glob of the folder
    was a third of a scalar ``decode_step`` named by id)."""
    return tuple(sorted(p.stem for p in presets_dir().glob("*.json")))


#: a Hugging Face repository id: owner/name, as the hub spells them (https://huggingface.co/docs/hub/repositories)
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_HF_URL = re.compile(r"^https://huggingface\.co/([^/]+/[^/]+)/")
HUB_PREFIX = "hf:"


@functools.cache
def preset_repos() -> dict[str, str]:
    """Hugging Face repo id (lower case) -> preset id: each preset's ``_source`` repository and its ``_hf_repos``
    (the same architecture published under other ids: base and -Instruct checkpoints)."""
    index: dict[str, str] = {}
    for key in list_models():
        cfg = json.loads((presets_dir() / f"{key}.json").read_text())
        m = _HF_URL.match(str(cfg.get("_source", "")))
        for repo in ([m.group(1)] if m else []) + list(cfg.get("_hf_repos", [])):
            index[repo.lower()] = key
    return index


def names_shipped_model(text: str) -> bool:
    """Whether ``text`` names a shipped preset, by id or Hugging Face repo id, and is not written as a path."""
    key = text.strip().lower()
    return not _written_as_path(text) and (key in _preset_ids() or key in preset_repos())


def _written_as_path(text: str) -> bool:
    """A name the user wrote as a path: ./x, ../x, /x, ~/x, x.json, or a relative path that exists."""
    return (text.startswith((".", "/", "~", os.sep)) or text.endswith(".json") or os.path.isabs(text)
            or (("/" in text or os.sep in text) and _exists(text)))


def load_model(id_or_path: str | os.PathLike[str]) -> ModelSpec:
    """Load a preset by id or by its Hugging Face repo id, or build a model from a path to a ``config.json``.

    Presets win over a folder of the same name in the working directory: write ``./name`` for the folder.
    ``hf:owner/name`` fetches the config through ``huggingface_hub`` (the ``hub`` extra) and its cache.
    """
    if not isinstance(id_or_path, (str, os.PathLike)):
        raise NotFoundError(f"a model is a preset id or the path of a config.json, got {id_or_path!r}")
    text = os.fspath(id_or_path)
    if len(text) > 4096:
        raise NotFoundError(f"{text[:40]}...: a name of {len(text):,} characters is neither a model id nor a path")
    if not text.strip():
        raise NotFoundError("an empty model name: give a preset id (`roofline models`), a Hugging Face repo id or "
                            "the path of a config.json")
    if isinstance(id_or_path, str) and not _written_as_path(text):
        key = text.strip(" ").lower()   # 'llama-3.1-8b\n' (a stray newline) is no id
        if key in _preset_ids():
            return _load_preset(key)
        if key in preset_repos():
            return _load_preset(preset_repos()[key])
        if key.startswith(HUB_PREFIX):
            return model_from_hf_config(_hub_config(text.strip()[len(HUB_PREFIX):]))
        if _REPO_ID.match(text.strip()):
            raise NotFoundError(f"{text.strip()!r} is a Hugging Face repo id roofline does not ship (it reads no "
                                "network): pass the path of its config.json, or hf:" + text.strip() +
                                " to fetch it with huggingface_hub (pip install 'roofline[hub]')")
    if text.endswith(".json") or os.sep in text or "/" in text or _is_dir(text):
        return model_from_hf_config(Path(text))
    return _load_preset(text.strip(" ").lower())   # 'llama-3.1-8b\n' (a stray newline) is no id


def _exists(text: str) -> bool:
    try:
        return Path(text).exists()
    except OSError:
        return False


def _is_dir(text: str) -> bool:
    try:
        return Path(text).is_dir()
    except OSError:
        return False


def _hub_config(repo: str) -> Path:
    """The config.json of ``repo`` through huggingface_hub's download cache (the optional ``hub`` extra)."""
    if not _REPO_ID.match(repo):
        raise NotFoundError(f"hf:{repo}: expected hf:owner/name, a Hugging Face repo id")
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise NotFoundError(f"hf:{repo} needs huggingface_hub: pip install 'roofline[hub]', or pass the path of "
                            "the repo's config.json") from None
    try:
        return Path(hf_hub_download(repo, "config.json"))
    except Exception as e:   # the hub client's errors: offline, gated, no such repo
        raise NotFoundError(f"hf:{repo}: could not fetch config.json: {type(e).__name__}: {e}") from None


@functools.cache
def _load_preset(key: str) -> ModelSpec:
    path = presets_dir() / f"{key}.json"
    if len(key) > 200 or not key.isprintable() or not path.exists():   # not a file name: no preset
        raise NotFoundError(f"unknown model {key!r}{did_you_mean(key, list_models())}; "
                            "`roofline models` lists them, or give a path to a config.json")
    return model_from_hf_config(path, id=key)
