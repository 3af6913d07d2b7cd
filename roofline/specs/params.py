"""Engine parameters, serving stacks and calibration profiles: one place to import them from.

The names live in three modules, one idea each: :mod:`.engine_params` (the :class:`EngineParams` record, how a
device family's software runs a model, and the names files give its fields), :mod:`.stacks` (serving-stack
knowledge: families and their builds, the settings each stack fixes, a :class:`Profile` of parameter sets per
stack) and :mod:`.profiles` (profile files read and written, the shipped calibration and :func:`default_params`).

A :class:`Profile` holds one pooled parameter set (``[params]``, fitted to every stack's rows at once: the
``pooled`` stack) and one per serving-stack family (gpt-fast, TensorRT-LLM/NIM, vLLM, SGLang and their ROCm
builds). GPUs run :data:`DEFAULT_STACK`'s set unless a stack is named.
"""

from __future__ import annotations

from .engine_params import (
    ADMISSIONS,
    CHOICES,
    COLLECTIVES,
    FAMILIES,
    OVERLAPS,
    PROFILE_FIELDS,
    TIER_SUFFIX,
    WEIGHT_ONLY_KERNELS,
    WHOLE_FIELDS,
    EngineParams,
    WeightOnlyKernel,
    profile_value,
    with_values,
)
from .profiles import (
    NOT_IN_PROFILE_FILES,
    POWER_FIELDS,
    default_params,
    default_params_for,
    load_profile,
    profile_toml,
    shipped_profile,
    shipped_profile_path,
    write_profile,
)
from .stacks import (
    DEFAULT_STACK,
    NVIDIA_ONLY_STACKS,
    PLATFORM_OWN,
    POOLED,
    STACK_ADMISSION,
    STACK_CHUNKED_PREFILL,
    STACK_COLLECTIVES,
    STACK_EXPERT_RECIPE,
    STACK_HEAD_FORMAT,
    STACK_NAMES,
    STACK_SET,
    STACK_SETTINGS,
    STACK_WEIGHT_ONLY_KERNEL,
    STACK_WINDOWED_KV,
    Profile,
    StackChoice,
    family_chain,
    parent_family,
    platform_donors,
    platform_of,
    stack_family,
    stack_name,
    with_platform_of,
    with_stack_settings,
)

__all__ = [
    "ADMISSIONS", "CHOICES", "COLLECTIVES", "DEFAULT_STACK", "EngineParams", "FAMILIES", "NOT_IN_PROFILE_FILES",
    "NVIDIA_ONLY_STACKS", "OVERLAPS", "PLATFORM_OWN", "POOLED", "POWER_FIELDS", "PROFILE_FIELDS", "Profile",
    "STACK_ADMISSION", "STACK_CHUNKED_PREFILL", "STACK_COLLECTIVES", "STACK_EXPERT_RECIPE", "STACK_HEAD_FORMAT",
    "STACK_NAMES", "STACK_SET", "STACK_SETTINGS", "STACK_WEIGHT_ONLY_KERNEL", "STACK_WINDOWED_KV", "StackChoice",
    "TIER_SUFFIX", "WEIGHT_ONLY_KERNELS", "WHOLE_FIELDS", "WeightOnlyKernel", "default_params", "default_params_for",
    "family_chain", "load_profile", "parent_family", "platform_donors", "platform_of", "profile_toml",
    "profile_value", "shipped_profile", "shipped_profile_path", "stack_family", "stack_name", "with_platform_of",
    "with_stack_settings", "with_values", "write_profile",
]
