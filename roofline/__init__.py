"""roofline: how fast, and at what energy, an LLM runs on given hardware, stage by stage.

The public API (``import roofline as rl``):

* devices: :func:`load_device`, :func:`list_devices`, :func:`override`
* models: :func:`load_model`, :func:`list_models`, :func:`model_from_hf_config`
* device groups: :class:`DeviceGroup`, :func:`resolve_group` (``"b200:8"``, ``"corsair:1x2"``)
* formats and units: :func:`get_format`, :func:`parse_quantity`
* stages: :func:`decode_step`, :func:`prefill`, :func:`verify`, :func:`draft`
  (each returns a frozen :class:`StageResult`)
* speculative decoding: :func:`expected_tokens`, :func:`alpha_from_acceptance_length`,
  :class:`Acceptance`, :func:`speculative_round` (draft and verify on different groups)
* serving: :class:`Request`, :class:`Placement`, :func:`evaluate_serving`, :func:`pareto_frontier`
* planning: :func:`size` (fewest devices for N users at a speed and TTFT), :class:`Target`,
  :func:`launch_command` (vLLM / SGLang / TensorRT-LLM command lines), :func:`sweep` (chunked Pareto
  sweeps on any executor), :class:`Prices` and :func:`shipped_prices` (USD per device-hour)
* served load: :class:`Workload` (arrival burstiness, :class:`Lengths`, prefix hits), :func:`serve_at_rate`
  (p50/p90/p99 TTFT, ITL, TPOT and E2E and each pool's utilisation at request rates), :func:`max_rate` (the
  largest rate meeting percentile limits), :func:`size_at_rate` with a :class:`LoadTarget` (the fewest devices
  whose p99s meet limits at a rate)
* how far to trust a figure: :func:`interval` (split-conformal, from errors on publications the fit never
  saw), :func:`with_intervals` (``<name>_low`` / ``<name>_high`` beside a result's figures); GPUs run
  :data:`DEFAULT_STACK` (vLLM) unless ``params=`` says otherwise

The package is layered (README "How it is built"): errors/units/workload, then
specs, physics, serving, evidence, ui; this module re-exports the public names
of the first five. Nothing here imports sympy, scipy or matplotlib.
"""

from __future__ import annotations

from . import startup

startup.guard()   # first: Ctrl-C while the command is still importing exits 130 with one line, no traceback

import importlib
from typing import TYPE_CHECKING, Any

from . import records  # noqa: F401  (first: lets records with read-only mappings be pickled)
from .api import decode_step, draft, draft_head, max_batch, prefill, verify
from .errors import InfeasibleError, NotFoundError, RooflineError, SpecError, UnitError, UnknownSpecError, WorkloadError
from .physics.energy import DEFAULT_POWER, PowerModel
from .physics.speculative import (
    Acceptance,
    acceptance_length_from_rate,
    acceptance_rate_from_length,
    alpha_from_acceptance_length,
    compute_increase_factor,
    expected_tokens,
    expected_tokens_positional,
    optimal_gamma_closed_form,
    speedup_closed_form,
)
from .physics.stage_result import StageResult
from .physics.work import forward_work
from .specs.devices import Device, Link, MemoryTier, list_devices, load_device, override
from .specs.execution import family_profile, resolve_profile
from .specs.formats import Format, Formats, get_format, list_formats
from .specs.groups import DeviceGroup
from .specs.hf_config import list_models, load_model, model_from_hf_config
from .specs.intervals import Interval
from .specs.lengths import Lengths
from .specs.links import GroupLink, get_link
from .specs.models import ModelSpec
from .specs.params import DEFAULT_STACK, EngineParams, Profile, default_params, load_profile
from .specs.prices import Price, Prices, shipped_prices
from .specs.resolve import resolve_group
from .units import parse_quantity
from .version import __version__

if TYPE_CHECKING:   # imported on first use (:func:`__getattr__`); named here for type checkers
    from .serving.admission import Admission
    from .serving.emit import LaunchCommand, launch_command
    from .serving.frontier import compare_frontiers, pareto_frontier
    from .serving.load import LoadResult, Workload
    from .serving.load_sizing import LoadOption, LoadTarget
    from .serving.serve import Request, ServingResult
    from .serving.sizing import Option, Target
    from .serving.speculation import SpecResult, optimal_gamma
    from .serving.sweep import SweepResult, pareto_mask
    from .serving_api import (
        evaluate_serving,
        interval,
        max_rate,
        serve_at_rate,
        size,
        size_at_rate,
        speculative_round,
        sweep,
        with_intervals,
    )
    from .specs.placement import Placement

#: The serving layer's public names and the module of each, imported on first use: ``import roofline`` for a
#: stage call does not build the serving, planning and load records (issue 51: import within 1.8x of numpy and
#: attrs).
_LAZY: dict[str, str] = {name: module for module, names in {
    "serving.emit": ("LaunchCommand", "launch_command"),
    "serving.frontier": ("compare_frontiers", "pareto_frontier"),
    "serving.load": ("LoadResult", "Workload"),
    "serving.admission": ("Admission",),
    "serving.load_sizing": ("LoadOption", "LoadTarget"),
    "serving.serve": ("Request", "ServingResult"),
    "specs.placement": ("Placement",),
    "serving.sizing": ("Option", "Target"),
    "serving.speculation": ("SpecResult", "optimal_gamma"),
    "serving.sweep": ("SweepResult", "pareto_mask"),
    "serving_api": ("evaluate_serving", "max_rate", "serve_at_rate", "speculative_round", "sweep", "size",   # by name
                    "size_at_rate", "interval", "with_intervals"),
}.items() for name in names}

#: An execution profile (one family's efficiencies and fixed costs); the same record as EngineParams.
ExecutionProfile = EngineParams

__all__ = [
    "Acceptance", "DEFAULT_POWER", "Device", "DeviceGroup", "EngineParams", "Format", "Formats", "GroupLink",
    "InfeasibleError", "Link", "MemoryTier", "ModelSpec", "NotFoundError", "Placement", "PowerModel", "Profile",
    "Request", "RooflineError", "ServingResult", "SpecError", "SpecResult", "StageResult", "UnitError",
    "UnknownSpecError", "WorkloadError", "__version__", "acceptance_length_from_rate", "acceptance_rate_from_length",
    "alpha_from_acceptance_length", "compare_frontiers", "compute_increase_factor", "decode_step", "default_params",
    "draft", "draft_head", "evaluate_serving", "expected_tokens", "expected_tokens_positional", "forward_work",
    "get_format", "get_link", "list_devices", "list_formats", "list_models", "load_device", "load_model",
    "load_profile", "max_batch", "model_from_hf_config", "optimal_gamma", "optimal_gamma_closed_form", "override",
    "pareto_frontier", "parse_quantity", "prefill", "resolve_group", "resolve_profile", "family_profile",
    "ExecutionProfile", "speculative_round", "speedup_closed_form",
    "verify", "LaunchCommand", "launch_command", "Option", "Target", "size", "SweepResult", "pareto_mask", "sweep",
    "Price", "Prices", "shipped_prices", "DEFAULT_STACK", "Interval", "interval", "with_intervals",
    "Lengths", "LoadResult", "Workload", "Admission", "max_rate", "serve_at_rate", "LoadOption", "LoadTarget", "size_at_rate",
]


def __getattr__(name: str) -> Any:
    """The serving layer's names (:data:`_LAZY`), imported on first use and kept; ``rl.DEFAULT_PARAMS``: the
    shipped calibration's parameters, read on first use (not at import)."""
    if name in _LAZY:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    if name == "DEFAULT_PARAMS":
        return default_params()
    raise AttributeError(f"module 'roofline' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
