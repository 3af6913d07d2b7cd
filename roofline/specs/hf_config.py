"""Building a :class:`ModelSpec` from a Hugging Face ``config.json``, and the presets.

Supported ``model_type`` values: llama, mistral, mixtral, qwen2, qwen3,
qwen3_moe, deepseek_v3, gpt_oss, falcon. Keys follow the transformers
configuration classes of each family; a missing required key, a wrong type or an
unsupported architecture raises :class:`SpecError` naming the file and key.
Presets are config files shipped in ``roofline/presets`` (nothing is downloaded).
"""

from __future__ import annotations

import functools
import json
import os
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


def _common(k: _Keys, *, tie_default: bool) -> dict[str, Any]:
    d = k.integer("hidden_size")
    nh = k.integer("num_attention_heads")
    head_dim = k.integer("head_dim", d // nh if d % nh == 0 else None)
    return dict(num_layers=k.integer("num_hidden_layers"), hidden_size=d, num_heads=nh,
                num_kv_heads=k.integer("num_key_value_heads", nh), head_dim=head_dim,
                vocab_size=k.integer("vocab_size"), tied_embeddings=k.flag("tie_word_embeddings", tie_default))


def _all(n: int, value: Any) -> tuple[Any, ...]:
    return (value,) * n


def _layer_types(k: _Keys, n: int, default: list[str]) -> tuple[str, ...]:
    """Each layer's attention, "sliding" or "full": the config's ``layer_types`` where it lists them
    (sliding_attention/full_attention, as transformers writes them), else ``default`` in those words."""
    types = k.cfg.get("layer_types", default)
    names = {"sliding_attention": "sliding", "full_attention": "full"}
    if not isinstance(types, list) or len(types) != n or any(t not in names for t in types):
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
    uses_window = family == "mistral" or k.flag("use_sliding_window", False)
    sliding = uses_window and k.cfg.get("sliding_window") is not None
    first = k.integer("max_window_layers", QWEN_MAX_WINDOW_LAYERS) if sliding and family.startswith("qwen") else 0
    default = ["sliding_attention" if sliding and i >= first else "full_attention" for i in range(n)]
    types = _layer_types(k, n, default)
    bias = k.flag("attention_bias", family == "qwen2")
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


def _qwen3_moe(k: _Keys) -> dict[str, Any]:
    c = _llama_like(k, "qwen3_moe")
    n = c["num_layers"]
    step = k.integer("decoder_sparse_step", 1)
    only_mlp = k.cfg.get("mlp_only_layers") or []
    if not isinstance(only_mlp, list) or not all(isinstance(i, int) for i in only_mlp):
        raise k.fail("mlp_only_layers", "must be a list of layer indices")
    moe = tuple((i not in only_mlp) and (i + 1) % step == 0 for i in range(n))
    c.update(num_experts=k.integer("num_experts"), experts_per_token=k.integer("num_experts_per_tok"),
             expert_intermediate_size=k.integer("moe_intermediate_size"), moe_layers=moe)
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


_BUILDERS: dict[str, Callable[[_Keys], dict[str, Any]]] = {
    "llama": lambda k: _llama_like(k, "llama"),
    "mistral": lambda k: _llama_like(k, "mistral"),
    "qwen2": lambda k: _llama_like(k, "qwen2"),
    "qwen3": lambda k: _llama_like(k, "qwen3"),
    "mixtral": _mixtral,
    "qwen3_moe": _qwen3_moe,
    "deepseek_v3": _deepseek_v3,
    "gpt_oss": _gpt_oss,
    "falcon": _falcon,
}
_ARCH = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "MixtralForCausalLM": "mixtral",
         "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3", "Qwen3MoeForCausalLM": "qwen3_moe",
         "DeepseekV3ForCausalLM": "deepseek_v3", "GptOssForCausalLM": "gpt_oss", "FalconForCausalLM": "falcon",
         "RWForCausalLM": "falcon"}


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
    k = _Keys(cfg, origin)
    model_type = cfg.get("model_type")
    if model_type is None:
        archs = cfg.get("architectures")
        archs = archs if isinstance(archs, list) else []
        model_type = next((_ARCH[a] for a in archs if isinstance(a, str) and a in _ARCH), None)
    if not isinstance(model_type, str) or model_type not in _BUILDERS:
        raise SpecError(f"{origin}: unsupported architecture {model_type!r} (key 'model_type'); "
                        f"supported: {', '.join(sorted(_BUILDERS))}")
    fields = _BUILDERS[model_type](k)
    if cfg.get("max_position_embeddings") is not None:
        fields["max_context_tokens"] = k.integer("max_position_embeddings")
    stored = checkpoint_formats(cfg.get("quantization_config"), has_experts=bool(fields.get("num_experts")),
                                hidden_size=int(fields.get("hidden_size") or 0))
    fields.update(checkpoint_weight_format=stored.weights, checkpoint_expert_format=stored.experts,
                  unread_quantization=stored.unread)
    try:
        return ModelSpec(id=id or str(cfg.get("_name_or_path") or model_type), source=str(cfg.get("_source", origin)),
                         **fields)
    except (ValueError, TypeError) as e:
        raise SpecError(f"{origin}: {e}") from None


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
    return sorted(p.stem for p in presets_dir().glob("*.json"))


def load_model(id_or_path: str | os.PathLike[str]) -> ModelSpec:
    """Load a preset by id, or build a model from a path to a ``config.json``."""
    if not isinstance(id_or_path, (str, os.PathLike)):
        raise NotFoundError(f"a model is a preset id or the path of a config.json, got {id_or_path!r}")
    text = os.fspath(id_or_path)
    if len(text) > 4096:
        raise NotFoundError(f"{text[:40]}...: a name of {len(text):,} characters is neither a model id nor a path")
    if text.endswith(".json") or os.sep in text or "/" in text or _is_dir(text):
        return model_from_hf_config(Path(text))
    return _load_preset(text.strip(" ").lower())   # 'llama-3.1-8b\n' (a stray newline) is no id


def _is_dir(text: str) -> bool:
    try:
        return Path(text).is_dir()
    except OSError:
        return False


@functools.cache
def _load_preset(key: str) -> ModelSpec:
    path = presets_dir() / f"{key}.json"
    if len(key) > 200 or not key.isprintable() or not path.exists():   # not a file name: no preset
        raise NotFoundError(f"unknown model {key!r}{did_you_mean(key, list_models())}; "
                            "`roofline models` lists them, or give a path to a config.json")
    return model_from_hf_config(path, id=key)
