"""Engine parameters (achieved fractions of peak and fixed overheads), calibration profiles, and their files.

Pure rooflines land 30-50% off real serving numbers; the difference is mostly
these few physical parameters (docs/theory.md §1.2-1.3, §5.1). The class
defaults are engineering estimates from the sources in :class:`EngineParams`;
:func:`default_params`, which every function uses unless given ``params=``, is
the shipped fit of the same parameters to published measurements
(``roofline/profiles/default.toml``, reproduced by ``roofline calibrate``).

A :class:`Profile` holds one parameter set for any stack and, optionally, one
per serving-stack family (gpt-fast, TensorRT-LLM/NIM); profile files are read
and written here and nowhere else. A broken shipped profile is an error, never
a silent fallback.
"""

from __future__ import annotations

import functools
import math
import re
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import attrs

from ..errors import SpecError
from .files import read_text, write_text_atomic

_frac = [attrs.validators.instance_of(float), attrs.validators.gt(0), attrs.validators.le(1)]
_nonneg = [attrs.validators.instance_of(float), attrs.validators.ge(0)]


def _finite(_inst: object, attribute: attrs.Attribute, value: float) -> None:
    if not math.isfinite(value):
        raise ValueError(f"{attribute.name} must be finite, got {value!r}")


def _float(value: Any) -> Any:
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _p(default: float, validators: list[Any]) -> Any:
    return attrs.field(default=default, converter=_float, validator=[*validators, _finite])


@attrs.frozen(kw_only=True)
class EngineParams:
    """Efficiency and overhead parameters of a software stack (all SI).

    * ``memory_bandwidth_fraction`` (MBU): achieved / peak memory bandwidth.
      0.80 is aiconfigurator's ``mem_bw_empirical_scaling_factor``
      (https://github.com/ai-dynamo/aiconfigurator); tuned CUDA stacks reach
      0.6-0.85 in decode (docs/theory.md §1.3).
    * ``compute_fraction`` (MFU): achieved / peak tensor FLOP/s for large passes;
      0.6 sits in the 0.5-0.7 prefill range of docs/theory.md §1.3 (PaLM reached
      0.76, https://arxiv.org/abs/2204.02311).
    * ``low_precision_compute_scale``: FP8/FP6/FP4/INT8/INT4 tensor-core matmuls
      reach this fraction of the efficiency BF16 ones reach; 1 = same.
    * ``compute_half_tokens``: a pass over T tokens reaches
      compute_fraction * T / (T + compute_half_tokens) of peak: small matmuls
      (short prompts, decode) run below peak (tile quantisation, occupancy). 0 disables it.
    * ``link_bandwidth_fraction``: NCCL reaches ~370 of 450 GB/s on NVLink
      (scaling book, https://jax-ml.github.io/scaling-book/gpus/).
    * ``step_overhead_s`` (T_0): launches, sampling and scheduling per forward
      pass, 0.05-0.3 ms with CUDA graphs (docs/theory.md §1.2).
    * ``layer_overhead_s``: fixed cost per layer per pass (kernel boundaries).
    * ``collective_base_s`` / ``link_hop_latency_s``: all-reduce cost
      t0 + 2(p-1) t_hop + 2(p-1)/p M/W; GenZ's collective model uses a 5 us
      constant and ~1 us per hop (https://github.com/abhibambhaniya/GenZ-LLM-Analyzer);
      a spec file's link latency replaces the hop value.
    * ``dequant_ops_per_element``: vector ops to dequantise one weight element in
      weight-only kernels, executed at the device's fp32 rate.
    * ``usable_memory_fraction``: share of each tier an engine may fill with
      weights, KV and workspace; vLLM's ``gpu_memory_utilization`` defaults to
      0.9 (https://docs.vllm.ai/en/latest/configuration/engine_args.html).
    * ``expert_imbalance``: busiest expert shard / mean under expert parallelism (>= 1).
    """

    memory_bandwidth_fraction: float = _p(0.80, _frac)
    compute_fraction: float = _p(0.60, _frac)
    link_bandwidth_fraction: float = _p(0.80, _frac)
    low_precision_compute_scale: float = _p(1.0, _frac)
    compute_half_tokens: float = _p(0.0, _nonneg)
    step_overhead_s: float = _p(100e-6, _nonneg)
    layer_overhead_s: float = _p(2e-6, _nonneg)
    collective_base_s: float = _p(5e-6, _nonneg)
    link_hop_latency_s: float = _p(1e-6, _nonneg)
    dequant_ops_per_element: float = _p(4.0, _nonneg)
    usable_memory_fraction: float = _p(0.95, _frac)
    expert_imbalance: float = _p(1.0, [attrs.validators.instance_of(float), attrs.validators.ge(1)])


def stack_family(stack: str) -> str:
    """The serving-stack family of a measurement's ``stack`` column: gpt-fast, tensorrt-llm, or other."""
    s = stack.lower()
    if "gpt-fast" in s:
        return "gpt-fast"
    if re.search(r"tensorrt|trt-llm|nim", s):
        return "tensorrt-llm"
    return "other"


@attrs.frozen(kw_only=True)
class Profile:
    """Engine parameters: a default set and, optionally, one per serving-stack family."""

    default: EngineParams = attrs.field(factory=EngineParams)
    families: dict[str, EngineParams] = attrs.field(factory=dict)
    path: str = ""

    def for_stack(self, stack: str) -> EngineParams:
        """The parameters of a stack's family, else the default set."""
        return self.families.get(stack_family(stack), self.default)


def _params_from(table: Any, where: str, base: EngineParams) -> EngineParams:
    if not isinstance(table, dict) or not table:
        raise SpecError(f"{where}: missing or empty table")
    names = {a.name for a in attrs.fields(EngineParams)}
    for k, v in table.items():
        if k not in names:
            raise SpecError(f"{where}: field {k!r} is not an engine parameter ({', '.join(sorted(names))})")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise SpecError(f"{where}: field {k!r} = {v!r}: not a finite number")
    try:
        return attrs.evolve(base, **{k: float(v) for k, v in table.items()})
    except (ValueError, TypeError) as e:
        raise SpecError(f"{where}: {e}") from None


def load_profile(path: str | Path, *, base: EngineParams | None = None) -> Profile:
    """A :class:`Profile` from a TOML file; unknown or out-of-range values raise :class:`SpecError`.

    Fields the file does not set keep the values of ``base`` (default: the shipped fit), so a profile that
    sets one parameter changes only that one.
    """
    p = Path(path)
    try:
        data = tomllib.loads(read_text(p, what="a calibration profile (.toml)", max_bytes=1_000_000))
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{p}: not a profile TOML: {e}") from None
    start = base if base is not None else default_params()
    default = _params_from(data.get("params"), f"{p} [params]", start)
    stacks = data.get("stacks", {})
    if not isinstance(stacks, dict):
        raise SpecError(f"{p}: [stacks] must be a table of tables")
    return Profile(default=default, families={k: _params_from(v, f"{p} [stacks.{k}]", default)
                                              for k, v in stacks.items()}, path=str(p))


def _toml_string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped (a Windows path survives)."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def profile_toml(profile: Profile, *, uncertainty: dict[str, dict[str, str]], fit: dict[str, Any]) -> str:
    """The text of a profile file: ``[params]``, one ``[stacks."<family>"]`` per family, and a ``[fit]`` record.

    ``uncertainty[set][name]`` is a comment written after the parameter (``+/- 0.05``, ``not identified``).
    """
    def block(header: str, p: EngineParams, notes: dict[str, str]) -> list[str]:
        lines = [header]
        for a in attrs.fields(EngineParams):
            note = f"  # {notes[a.name]}" if a.name in notes else ""
            lines.append(f"{a.name} = {getattr(p, a.name)!r}{note}")
        return lines

    lines = ["# roofline calibration profile, written by `roofline calibrate`.",
             "# [params]: one set fitted to all rows, the default for any stack and for the stage commands;",
             "# [stacks.<family>]: a serving-stack family's own efficiencies and fixed costs.", ""]
    lines += block("[params]", profile.default, uncertainty.get("default", {}))
    for fam, p in profile.families.items():
        lines += ["", *block(f"[stacks.{_toml_string(fam)}]", p, uncertainty.get(fam, {}))]
    lines += ["", "[fit]"]
    for k, v in fit.items():
        lines.append(f"{k} = {_toml_string(v) if isinstance(v, str) else repr(v)}")
    return "\n".join(lines) + "\n"


def write_profile(path: str | Path, text: str) -> None:
    """Write a profile atomically after checking that it reads back (never a half-written or unreadable file)."""
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:  # a bug of ours, not the user's: refuse to write it
        raise SpecError(f"refusing to write {path}: the profile text does not parse ({e})") from None
    write_text_atomic(path, text)


def shipped_profile_path() -> Path:
    """The calibration profile that ships inside the package."""
    return Path(str(resources.files("roofline"))) / "profiles" / "default.toml"


@functools.cache
def shipped_profile() -> Profile:
    """The shipped calibration, read on first use (reproduced by
    ``roofline calibrate --out roofline/profiles/default.toml``); a broken file raises :class:`SpecError`."""
    return load_profile(shipped_profile_path(), base=EngineParams())


def default_params() -> EngineParams:
    """What every function uses unless given ``params=``: the shipped fit's ``[params]``."""
    return shipped_profile().default
