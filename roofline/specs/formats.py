"""Storage and compute formats.

Bits per element include block-scale overhead (OCP Microscaling Formats (MX)
v1.0, https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf;
NVIDIA's NVFP4 description, https://developer.nvidia.com/blog/introducing-nvfp4-for-efficient-and-accurate-low-precision-inference/;
derivations in ``docs/theory.md`` §formats):

* ``mxfp4``: E2M1 elements + one E8M0 scale per 32 -> 4 + 8/32 = 4.25 bit.
* ``nvfp4``: E2M1 elements + one E4M3 scale per 16 -> 4 + 8/16 = 4.5 bit
  (the per-tensor FP32 scale is negligible).
* ``mxint8`` / ``mxint4``: d-Matrix's MX integer formats, 8-bit shared scale per
  32 elements -> 8.25 / 4.25 bit.
* ``int4-g<g>``: symmetric int4 with one fp16 scale per group of g -> 4 + 16/g bit
  (gpt-fast's int4 groupwise quantisation).
* ``fp8``, ``int8`` per-tensor / per-channel: 8 bit (the scale is negligible).

``compute`` names the class of tensor-core rate a format runs at when the device
supports it natively (the keys of a device's ``[compute.peak]`` table); for plain
MXFP4 only with activations of 4 bits (below). ``stored_as``: the class whose
units read the stored elements, where it differs (``w4a8-mxfp4``: FP4 elements
into an FP8-rate MMA; a device without FP4 units unpacks them).
``weight_only`` formats are dequantised and multiplied at the activation
format's rate (int4/int8 weight-only kernels such as gpt-fast's).
``quantises_activations``: the format's recipes quantise the activations to
match at every matmul (FP8 W8A8, NVFP4 W4A4), so the matmul runs at ``compute``
whatever the activations are stored in. Plain MXFP4 is stored by checkpoints that
pair it with different activations, so its matmuls run at the wider operand's rate
(:func:`roofline.physics.timing.compute_class`); two recipes are named apart:

* ``w4a8-mxfp4``: MXFP4 weights x activations quantised to MXFP8 at the matmul
  (gpt-oss's MoE in TensorRT-LLM on Blackwell, whose deployment guide lists MXFP8
  activations x MXFP4 weights for B200/GB200,
  https://nvidia.github.io/TensorRT-LLM/deployment-guide/deployment-guide-for-gpt-oss-on-trtllm.html):
  FP8 rate.
* ``w4a4-mxfp4``: MXFP4 weights and activations (AMD Quark's ``w_mxfp4_a_mxfp4``,
  e.g. https://huggingface.co/amd/DeepSeek-R1-0528-MXFP4): FP4 rate.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import attrs

from ..errors import NotFoundError, SpecError, UnknownSpecError, WorkloadError, did_you_mean


class ComputeUnits(Protocol):
    """A device as the format defaults see it (:class:`roofline.specs.devices.Device` is one): its id, family,
    the compute classes it multiplies natively, and whether it has units for a class. Formats sit below devices
    and models (a device's file names formats), so this module names what it reads of them, not their modules."""

    @property
    def id(self) -> str: ...

    @property
    def family(self) -> str: ...

    @property
    def native(self) -> tuple[str, ...]: ...

    def supports(self, compute_class: str) -> bool: ...


class Checkpoint(Protocol):
    """A model as the format defaults see it (:class:`roofline.specs.models.ModelSpec` is one): the formats its
    checkpoint stores, whether its quantization was read, and whether it routes experts."""

    @property
    def id(self) -> str: ...

    @property
    def unread_quantization(self) -> str | None: ...

    @property
    def checkpoint_weight_format(self) -> str | None: ...

    @property
    def checkpoint_expert_format(self) -> str | None: ...

    @property
    def is_moe(self) -> bool: ...


@attrs.frozen(kw_only=True)
class Format:
    """One number format: storage bits per element and the rate class it computes at."""

    name: str
    bits_per_element: float = attrs.field(validator=attrs.validators.gt(0))
    compute: str
    weight_only: bool = False
    quantises_activations: bool = True
    stored_as: str | None = None
    description: str = ""

    @property
    def bytes_per_element(self) -> float:
        return self.bits_per_element / 8.0


_FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format(name="fp32", bits_per_element=32, compute="fp32", description="IEEE single"),
        Format(name="tf32", bits_per_element=32, compute="tf32", description="stored fp32, tensor-core tf32"),
        Format(name="bf16", bits_per_element=16, compute="bf16", description="bfloat16"),
        Format(name="fp16", bits_per_element=16, compute="fp16", description="IEEE half"),
        Format(name="fp8", bits_per_element=8, compute="fp8", description="E4M3/E5M2, per-tensor scale"),
        Format(name="mxfp8", bits_per_element=8.25, compute="fp8", description="OCP MXFP8: E8M0 scale per 32"),
        Format(name="int8", bits_per_element=8, compute="bf16", weight_only=True,
               description="int8 weight-only (per-channel scale), bf16 compute"),
        Format(name="w8a8-int8", bits_per_element=8, compute="int8", description="int8 weights and activations"),
        Format(name="mxfp6", bits_per_element=6.25, compute="fp6", description="OCP MXFP6: E8M0 scale per 32"),
        Format(name="mxfp4", bits_per_element=4.25, compute="fp4", quantises_activations=False,
               description="OCP MXFP4: E8M0 scale per 32"),
        Format(name="w4a8-mxfp4", bits_per_element=4.25, compute="fp8", stored_as="fp4",
               description="MXFP4 weights, activations quantised to MXFP8 at the matmul (FP8 rate)"),
        Format(name="w4a4-mxfp4", bits_per_element=4.25, compute="fp4",
               description="MXFP4 weights and activations (AMD Quark w_mxfp4_a_mxfp4)"),
        Format(name="nvfp4", bits_per_element=4.5, compute="fp4", description="NVFP4: E4M3 scale per 16"),
        Format(name="mxint8", bits_per_element=8.25, compute="int8", description="d-Matrix MXINT8: scale per 32"),
        Format(name="mxint4", bits_per_element=4.25, compute="int4", description="d-Matrix MXINT4: scale per 32"),
    )
}

_INT4 = re.compile(r"^int4-g(\d+)$")


def get_format(name: str | Format) -> Format:
    """Look up a format by name (a :class:`Format` is itself); ``int4-g<group>`` is built for any group >= 1."""
    if isinstance(name, Format):
        return name
    if not isinstance(name, str):
        raise NotFoundError(f"a format is named by a string such as 'bf16', got {name!r}")
    return _format_named(name)


@functools.lru_cache(maxsize=256)
def _format_named(name: str) -> Format:
    key = name.strip().lower()
    if key in _FORMATS:
        return _FORMATS[key]
    m = _INT4.match(key)
    if m and int(m.group(1)) >= 1:
        g = int(m.group(1))
        return Format(name=key, bits_per_element=4 + 16 / g, compute="bf16", weight_only=True,
                      description=f"int4 weight-only, one fp16 scale per {g} elements, bf16 compute")
    raise NotFoundError(f"unknown format {name!r}{did_you_mean(key, list(_FORMATS) + ['int4-g32', 'int4-g128'])}; "
                        f"known: {', '.join(list_formats())}")


def list_formats() -> list[str]:
    """Names of the registered formats (``int4-g<g>`` stands for any group size)."""
    return [*_FORMATS, "int4-g32", "int4-g128"]


def _format_name(value: Any) -> Any:
    """A :class:`Format` given where a name is expected, as its name (anything else as it is, for the validator)."""
    return value.name if isinstance(value, Format) else value


def _check_format(_inst: object, attribute: attrs.Attribute, value: str | None) -> None:
    if value is not None:
        get_format(value)  # raises NotFoundError with a suggestion


def _not_weight_only(_inst: object, _a: attrs.Attribute, value: str) -> None:
    fmt = get_format(value)
    if fmt.weight_only:
        raise WorkloadError(f"activations {value!r} is a weight-only format (its weights are unpacked to the "
                            f"activations' format, {fmt.compute}): give activations a format that computes, whichever "
                            "the device runs (bf16, fp16, fp8, w8a8-int8, mxint8)")


@attrs.frozen(kw_only=True)
class Formats:
    """Storage formats: non-expert weights, expert weights (None = same), KV cache, activations, and the
    embedding table with the LM head (``head``; None = as the non-expert weights, or as the serving stack's
    toolchain keeps them: :meth:`with_toolchain_head`)."""

    weights: str = attrs.field(default="bf16", converter=_format_name, validator=_check_format)
    experts: str | None = attrs.field(default=None, converter=_format_name, validator=_check_format)
    kv: str = attrs.field(default="bf16", converter=_format_name, validator=_check_format)
    activations: str = attrs.field(default="bf16", converter=_format_name, validator=[_check_format, _not_weight_only])
    head: str | None = attrs.field(default=None, converter=_format_name, validator=_check_format)

    @property
    def weight(self) -> Format:
        return get_format(self.weights)

    @property
    def expert(self) -> Format:
        return get_format(self.experts or self.weights)

    @property
    def head_format(self) -> Format:
        """The format of the embedding table and the LM head."""
        return get_format(self.head or self.weights)

    def with_toolchain_head(self, head: str | None) -> Formats:
        """These formats with the embedding table and LM head stored in ``head`` where a serving stack's
        toolchain keeps them wider than the other weights (:attr:`EngineParams.head_format
        <roofline.specs.params.EngineParams>`); unchanged when ``head`` is None, the head is already named, or
        ``head`` is no wider than the weights."""
        if head is None or self.head is not None or get_format(head).bits_per_element <= self.weight.bits_per_element:
            return self
        return attrs.evolve(self, head=head)

    def with_stack_experts(self, recipe: str | None, device: ComputeUnits) -> Formats:
        """These formats with MXFP4 routed experts run as a serving stack's ``recipe`` (:attr:`EngineParams.expert_recipe
        <roofline.specs.params.EngineParams>`: ``w4a8-mxfp4``, MXFP8 activations at the expert matmuls) where
        ``device`` has units for both operands and the activations are 16-bit; unchanged otherwise."""
        if (recipe is None or self.expert.name != "mxfp4" or self.activation.bits_per_element < 16
                or not (device.supports("fp4") and device.supports("fp8"))):
            return self
        return attrs.evolve(self, experts=recipe)

    @property
    def kv_format(self) -> Format:
        return get_format(self.kv)

    @property
    def activation(self) -> Format:
        return get_format(self.activations)

    def names(self) -> dict[str, str]:
        """The four format names (experts resolved), as the tables and JSON show them."""
        return {"weights": self.weights, "experts": self.experts or self.weights, "kv": self.kv,
                "activations": self.activations}

    def as_dict(self) -> dict[str, str]:
        """Every format by name, the experts' and the embedding/LM head's resolved: what JSON output says."""
        return {**self.names(), "head": self.head_format.name}

    def brief(self) -> str:
        """The formats in a few words (:func:`brief`): "bf16 (experts mxfp4)"."""
        return brief(self.as_dict())

    def describe(self) -> str:
        """"weights bf16, experts mxfp4, KV bf16, activations bf16" (and the head where it is named apart)."""
        head = f", embedding and LM head {self.head}" if self.head else ""
        return (f"weights {self.weights}, experts {self.experts or self.weights}, KV {self.kv}, "
                f"activations {self.activations}{head}")

    @classmethod
    def for_model(cls, model: Checkpoint, *, weights: str | None = None, experts: str | None = None,
                  kv: str | None = None, activations: str | None = None, head: str | None = None,
                  devices: Iterable[ComputeUnits] = ()) -> Formats:
        """Defaults that follow the checkpoint and the devices: weights (None) as the checkpoint stores them (an
        FP8 checkpoint's fp8) where every one of ``devices`` can run them (multiplies them natively, or is a GPU,
        whose kernels unpack narrower weights: vLLM serves FP8 checkpoints on Ampere with its weight-only FP8
        Marlin kernel, https://docs.vllm.ai/en/latest/features/quantization/fp8.html), else, like KV and activations
        (None), bf16, or on ``devices`` without bf16 units the format they all compute natively
        (:func:`native_default`: fp16 on Groq's LPU, fp8 on Groq 3, mxint8 on Corsair); and gpt-oss's experts MXFP4
        beside 16-bit weights unless told otherwise. A checkpoint's quantized weights come with its 16-bit
        embedding table and LM head (``head`` bf16 where the devices compute bf16): the quantizers leave them out
        (DeepSeek-V3's FP8 checkpoint, transformers' AWQ/GPTQ ``modules_to_not_convert = ["lm_head"]``,
        llm-compressor's ``ignore: ["lm_head"]``; https://huggingface.co/docs/transformers/main/en/quantization/awq).
        A format given is kept as given; a checkpoint whose quantization the config loader did not read
        (``ModelSpec.unread_quantization``) needs its weights given."""
        empty = [k for k, v in (("weights", weights), ("experts", experts), ("kv", kv), ("activations", activations),
                                ("head", head)) if isinstance(v, str) and not v.strip()]
        if empty:   # an unset $FORMAT: not the default, which None asks for
            raise WorkloadError(f"{empty[0]}: an empty format name; give one (`roofline formats` lists them)")
        if weights is None and model.unread_quantization:
            raise SpecError(f"{model.id}: its quantization_config ({model.unread_quantization}) is not one roofline "
                            "reads, so the format its weights are stored in is unknown; give it (--weights, or "
                            "formats={'weights': ...}), e.g. int4-g128 for 4-bit weights with a scale per 128")
        devices = tuple(devices)
        auto = native_default(devices) if devices else "bf16"
        stored = model.checkpoint_weight_format
        if stored and not all(d.supports(get_format(stored).compute) or d.family == "gpu" for d in devices):
            stored = None   # a dataflow chip without those units runs its own format, not a conversion of them
        if weights is None and stored and head is None and all(d.supports("bf16") for d in devices):
            head = "bf16"   # a quantized checkpoint keeps its embedding table and LM head in 16 bits
        weights = weights or stored or auto
        if experts is None and model.checkpoint_expert_format and weights in ("bf16", "fp16"):
            experts = model.checkpoint_expert_format
        if experts is not None and experts != weights and not model.is_moe:
            raise WorkloadError(f"experts={experts!r} (--experts): {model.id} is dense, it has no routed experts")
        return cls(weights=weights, experts=experts, kv=kv or auto, activations=activations or auto, head=head)


#: The formats a caller may give: the weights outside the routed experts, the routed experts, the KV cache, the
#: activations, and the embedding table with the LM head
FORMAT_KEYS = ("weights", "experts", "kv", "activations", "head")


def check_format_keys(given: Mapping[str, Any] | None, what: str = "formats") -> dict[str, Any]:
    """``given`` as a dict, or a WorkloadError naming a key that is not one of :data:`FORMAT_KEYS` (``{"weight":
    "fp8"}`` would otherwise reach a function's keywords as a TypeError)."""
    if given is None:
        return {}
    if isinstance(given, Formats):   # a result's formats passed back: the ones it named
        return {k: v for k, v in attrs.asdict(given).items() if v is not None}
    if not isinstance(given, Mapping):
        raise WorkloadError(f"{what} must be a mapping of {', '.join(FORMAT_KEYS)} to format names, "
                            f"got {type(given).__name__}")
    unknown = [k for k in given if k not in FORMAT_KEYS]
    if unknown:
        raise WorkloadError(f"{what}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
                            f"the keys are {', '.join(FORMAT_KEYS)}")
    return dict(given)


#: The format each native compute class stores in, preferring 16-bit: what a device runs when the user does not say.
NATIVE_DEFAULTS = (("bf16", "bf16"), ("fp16", "fp16"), ("fp8", "fp8"), ("int8", "mxint8"), ("fp4", "mxfp4"))


def native_default(devices: Iterable[ComputeUnits]) -> str:
    """The format to run on ``devices`` when the user does not say: the format of the first compute class in
    :data:`NATIVE_DEFAULTS` (16-bit first) that every one of them computes natively: bf16 on GPUs, fp16 on Groq's
    LPU, mxint8 on Corsair (int8 and int4 units only)."""
    devices = tuple(devices)
    for cls, fmt in NATIVE_DEFAULTS:
        if all(d.supports(cls) for d in devices):
            return fmt
    unique = {d.id: d for d in devices}.values()
    natives = "; ".join(f"{d.id}: {', '.join(d.native) or 'none'}" for d in unique)
    raise UnknownSpecError(f"no native compute format common to the devices ({natives}); give the formats, or "
                           "supply a rate as a what-if (DEVICE.compute.bf16=VALUE)")


#: How :func:`brief` names each component that differs from the weights' format.
_BRIEF_NAMES = {"experts": "experts", "kv": "KV", "activations": "activations", "head": "LM head"}


def brief(names: Mapping[str, str]) -> str:
    """Formats (:meth:`Formats.as_dict`) in a few words: the weights' format, then in brackets each component
    stored or computed otherwise ("bf16 (experts mxfp4)", "fp8 (KV bf16, activations bf16)"), or "mxint8
    throughout"."""
    base = names["weights"]
    other = [f"{label} {names[k]}" for k, label in _BRIEF_NAMES.items() if names.get(k, base) != base]
    return base + (f" ({', '.join(other)})" if other else " throughout")
