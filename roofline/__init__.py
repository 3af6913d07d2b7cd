"""roofline: how fast, and at what energy, an LLM runs on given hardware, stage by stage.

The public API (``import roofline as rl``):

* devices: :func:`load_device`, :func:`list_devices`, :func:`override`
* models: :func:`load_model`, :func:`list_models`, :func:`model_from_hf_config`
* formats and units: :func:`get_format`, :func:`parse_quantity`
* stages: :func:`decode_step`, :func:`prefill`, :func:`verify`, :func:`draft`
  (each returns a frozen :class:`StageResult`)
* speculative decoding: :func:`expected_tokens`, :func:`alpha_from_acceptance_length`,
  :class:`Acceptance`, :func:`speculative_round` (draft and verify on different groups)

Nothing here imports sympy, scipy or matplotlib; those load lazily where used.
"""

from __future__ import annotations

from .configs import list_models, load_model, model_from_hf_config
from .errors import (InfeasibleError, NotFoundError, RooflineError, SpecError, UnitError, UnknownSpecError,
                     WorkloadError)
from .hardware import Device, Link, MemoryTier, list_devices, load_device, override
from .model import ModelSpec
from .params import DEFAULT_PARAMS, EngineParams
from .precision import Format, get_format, list_formats
from .energy import DEFAULT_POWER, PowerModel
from .links import GroupLink, get_link
from .specdecode import SpecResult, optimal_gamma, speculative_round
from .speculative import (Acceptance, acceptance_length_from_rate, acceptance_rate_from_length,
                          alpha_from_acceptance_length, compute_increase_factor, expected_tokens,
                          expected_tokens_positional, optimal_gamma_closed_form, speedup_closed_form)
from .stages import DeviceGroup, StageResult, decode_step, draft, draft_head, max_batch, prefill, verify
from .work import Formats, forward_work
from .units import parse_quantity

__version__ = "0.1.0"

__all__ = [
    "Acceptance", "DEFAULT_POWER", "GroupLink", "PowerModel", "SpecResult", "acceptance_length_from_rate",
    "acceptance_rate_from_length", "alpha_from_acceptance_length", "compute_increase_factor", "expected_tokens",
    "expected_tokens_positional", "get_link", "optimal_gamma", "optimal_gamma_closed_form", "speculative_round",
    "speedup_closed_form",
    "DEFAULT_PARAMS", "Device", "DeviceGroup", "EngineParams", "Format", "Formats", "InfeasibleError", "Link",
    "MemoryTier", "ModelSpec", "NotFoundError", "RooflineError", "SpecError", "StageResult", "UnitError",
    "UnknownSpecError", "WorkloadError", "decode_step", "draft", "draft_head", "forward_work", "get_format",
    "list_devices", "list_formats", "list_models", "load_device", "load_model", "max_batch", "model_from_hf_config",
    "override", "parse_quantity", "prefill", "verify",
]
