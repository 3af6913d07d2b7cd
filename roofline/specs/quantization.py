"""The formats a Hugging Face checkpoint stores its linear layers in, read from its ``quantization_config``.

Each quantizer writes its own keys; the ones read here, with where they are described:

* ``fp8`` (DeepSeek-V3/R1, Qwen3-FP8: block-scaled FP8, every linear layer, experts included) and
  ``fbgemm_fp8`` (per-channel FP8 weights): fp8.
  https://huggingface.co/docs/transformers/main/en/quantization/finegrained_fp8,
  https://huggingface.co/docs/transformers/main/en/quantization/fbgemm_fp8
* ``mxfp4`` (gpt-oss): the routed experts only; transformers swaps in its MXFP4 kernels for gpt-oss's expert
  modules and nothing else, so on a model without experts the config is not read.
  https://huggingface.co/docs/transformers/main/en/quantization/mxfp4
* ``awq``, ``gptq``, ``auto-round``: ``bits`` (AWQ's older ``w_bit``) and ``group_size`` (``q_group_size``; -1
  per output channel). 4-bit becomes ``int4-g<G>`` (fp16 scale per G weights; the packed 4-bit zero points these
  also store add 4/G bits, 0.8% at G = 128, left out), 8-bit ``int8``.
  https://huggingface.co/docs/transformers/main/en/quantization/awq,
  https://huggingface.co/docs/transformers/main/en/quantization/gptq
* ``bitsandbytes``: ``load_in_8bit`` (LLM.int8, per-row scales) is ``int8``; ``load_in_4bit`` (NF4/FP4 with one
  fp32 absmax per 64 weights: 4.5 bits, or 4.127 with ``bnb_4bit_use_double_quant``) is the int4 format of the
  same bits per weight, ``int4-g32`` (4.5) or ``int4-g128`` (4.125). QLoRA, section 3 (double quantization:
  8/64 + 32/(64 x 256) = 0.127 bits of constants per weight), https://arxiv.org/abs/2305.14314
* ``eetq``: int8 weight-only. https://huggingface.co/docs/transformers/main/en/quantization/eetq
* ``compressed-tensors`` (llm-compressor's checkpoints, e.g. RedHatAI's FP8 and W4A16 models): each of
  ``config_groups`` gives ``weights`` and ``input_activations`` as ``num_bits``, ``type`` (int or float),
  ``strategy`` and ``group_size``; 8-bit float is fp8, 8-bit int ``w8a8-int8`` with int activations else
  ``int8``, 4-bit int ``int4-g<G>``, 4-bit float with groups of 16 ``nvfp4``. Every group must agree.
  https://github.com/neuralmagic/compressed-tensors
* ``modelopt`` (NVIDIA TensorRT Model Optimizer): ``quant_algo`` FP8 or NVFP4.
  https://nvidia.github.io/TensorRT-Model-Optimizer/

Anything else (AMD Quark, HQQ, AQLM, mixed-precision groups, 2- and 3-bit GPTQ, ...) is reported as not read:
the model loads, and a command that needs its weights' format asks for it rather than assuming 16-bit weights
(``Formats.for_model``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs


@attrs.frozen(kw_only=True)
class CheckpointFormats:
    """What a ``quantization_config`` says: the linear layers' format (None: 16-bit), the routed experts' where
    only they differ (gpt-oss's MXFP4), or, where it is not one this module reads, a short description of it."""

    weights: str | None = None
    experts: str | None = None
    unread: str | None = None


#: transformers' AWQConfig and GPTQConfig default ``group_size``, where a config leaves it out
DEFAULT_GROUP = 128


def _num(value: Any) -> int | None:
    """A whole number, also written as a string ("128"); anything else None (the config is then not read)."""
    if isinstance(value, str) and re.fullmatch(r"\s*-?[0-9]+\s*", value):   # ASCII digits: "²" is a digit to isdigit
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _int_bits(bits: int | None, group: int | None, hidden_size: int) -> str | None:
    """GPTQ/AWQ-style integer weights: int4 with a scale per ``group`` (-1: one per output channel, whose row is
    about ``hidden_size`` weights), int8 per channel; other widths, and a group that is not a number, are not
    read."""
    if bits == 8:
        return "int8"
    if bits == 4 and group is not None and (group > 0 or group == -1):
        return f"int4-g{group if group > 0 else hidden_size}"
    return None


def _compressed_scheme(group: Mapping[str, Any], hidden_size: int) -> str | None:
    w = group.get("weights")
    if not isinstance(w, Mapping):
        return None
    a = group.get("input_activations")
    bits, kind, size = _num(w.get("num_bits")), w.get("type"), _num(w.get("group_size"))
    act_int = isinstance(a, Mapping) and a.get("type") == "int" and _num(a.get("num_bits")) == 8
    if kind == "float" and bits == 8:
        return "fp8"
    if kind == "float" and bits == 4 and size == 16:
        return "nvfp4"
    if kind == "int" and bits == 8:
        return "w8a8-int8" if act_int else "int8"
    if kind == "int" and bits == 4 and a is None:
        return _int_bits(4, size if w.get("strategy") == "group" else -1, hidden_size)   # "channel": one per row
    return None


def _compressed_tensors(quant: Mapping[str, Any], hidden_size: int) -> str | None:
    groups = quant.get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        return None
    schemes = {_compressed_scheme(g, hidden_size) if isinstance(g, Mapping) else None for g in groups.values()}
    return schemes.pop() if len(schemes) == 1 else None


def _bitsandbytes(quant: Mapping[str, Any]) -> str | None:
    if quant.get("load_in_8bit") is True:
        return "int8"
    if quant.get("load_in_4bit") is True:
        return "int4-g128" if quant.get("bnb_4bit_use_double_quant") is True else "int4-g32"
    return None


def _modelopt(quant: Mapping[str, Any]) -> str | None:
    algo = str(quant.get("quant_algo", "")).upper()
    return {"FP8": "fp8", "NVFP4": "nvfp4"}.get(algo)


def _describe(quant: Mapping[str, Any]) -> str:
    keys = ("quant_method", "bits", "w_bit", "group_size", "quant_algo", "format", "load_in_4bit", "load_in_8bit")
    return ", ".join(f"{k} {quant[k]!r}" for k in keys if k in quant) or "no quant_method"


def checkpoint_formats(quant: Any, *, has_experts: bool, hidden_size: int) -> CheckpointFormats:
    """The formats a config's ``quantization_config`` stores the model in (the module's docstring gives each
    quantizer's keys and source); no config is a 16-bit checkpoint."""
    if quant is None:
        return CheckpointFormats()
    if not isinstance(quant, Mapping):
        return CheckpointFormats(unread=f"a {type(quant).__name__}, not an object")
    method = str(quant.get("quant_method", "")).lower().replace("_", "-")
    if method == "mxfp4" and has_experts:
        return CheckpointFormats(experts="mxfp4")
    fmt = {
        "fp8": lambda: "fp8", "fbgemm-fp8": lambda: "fp8", "eetq": lambda: "int8",
        "awq": lambda: _int_bits(_num(quant.get("bits", quant.get("w_bit"))),
                                 _num(quant.get("group_size", quant.get("q_group_size", DEFAULT_GROUP))), hidden_size),
        "gptq": lambda: _int_bits(_num(quant.get("bits")), _num(quant.get("group_size", DEFAULT_GROUP)), hidden_size),
        "auto-round": lambda: _int_bits(_num(quant.get("bits")), _num(quant.get("group_size", DEFAULT_GROUP)),
                                        hidden_size),
        "bitsandbytes": lambda: _bitsandbytes(quant),
        "compressed-tensors": lambda: _compressed_tensors(quant, hidden_size),
        "modelopt": lambda: _modelopt(quant),
    }.get(method, lambda: None)()
    return CheckpointFormats(weights=fmt) if fmt else CheckpointFormats(unread=_describe(quant))
