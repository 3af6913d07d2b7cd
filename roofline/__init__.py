"""roofline: how fast, and at what energy, an LLM runs on given hardware, stage by stage.

The public API (``import roofline as rl``):

* devices: :func:`load_device`, :func:`list_devices`, :func:`override`
* models: :func:`load_model`, :func:`list_models`, :func:`model_from_hf_config`
* formats and units: :func:`get_format`, :func:`parse_quantity`
* stages: :func:`decode_step`, :func:`prefill`, :func:`verify`, :func:`draft`
  (each returns a frozen :class:`StageResult`)

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
from .stages import DeviceGroup, StageResult, decode_step, draft, draft_head, max_batch, prefill, verify
from .work import Formats, forward_work
from .units import parse_quantity

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_PARAMS", "Device", "DeviceGroup", "EngineParams", "Format", "Formats", "InfeasibleError", "Link",
    "MemoryTier", "ModelSpec", "NotFoundError", "RooflineError", "SpecError", "StageResult", "UnitError",
    "UnknownSpecError", "WorkloadError", "decode_step", "draft", "draft_head", "forward_work", "get_format",
    "list_devices", "list_formats", "list_models", "load_device", "load_model", "max_batch", "model_from_hf_config",
    "override", "parse_quantity", "prefill", "verify",
]
