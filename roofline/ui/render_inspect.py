"""``roofline devices``, ``models``, ``formats``, ``show`` and ``formula``: spec records as tables and dicts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table
from rich.text import Text

from ..specs.devices import Device, fields
from ..specs.execution import family_profile, resolve_profile
from ..specs.formats import Formats
from ..specs.models import ModelSpec
from ..specs.params import PROFILE_FIELDS
from ..units import format_capacity, format_quantity
from .render_common import (
    View,
    house_table,
    shown_path,
)


def _q(value: float | None, kind: str) -> str:
    return "unknown" if value is None else format_quantity(value, kind)


def _cap(value: float | None) -> str:
    """A capacity in decimal GB, as every other size the tool prints (stage, errors), with the binary GiB that
    devices are built in (H100's "80GB" is 80 GiB) beside it."""
    return "unknown" if value is None else f"{format_quantity(value, 'bytes')} ({format_capacity(value)})"


def device_dict(dev: Device) -> dict[str, Any]:
    return {
        "id": dev.id, "name": dev.name, "vendor": dev.vendor, "isa": dev.isa, "status": dev.status,
        "aliases": list(dev.aliases),
        "memory": [{"name": t.name, "capacity_bytes": t.capacity_bytes, "bandwidth_bytes_per_s": t.bandwidth_bytes_per_s}
                   for t in dev.memory],
        "peak_flop_per_s": dict(dev.peak_flop_per_s), "native": list(dev.native),
        "measured_flop_per_s": dict(dev.measured_flop_per_s),
        "tdp_w": dev.tdp_w, "idle_w": dev.idle_w,
        "scale_up": {"bandwidth_bytes_per_s": dev.scale_up.bandwidth_bytes_per_s, "latency_s": dev.scale_up.latency_s,
                     "peers": dev.scale_up.peers, "torus": dev.scale_up.torus, "wraparound": dev.scale_up.wraparound},
        "host": {"bandwidth_bytes_per_s": dev.host.bandwidth_bytes_per_s, "latency_s": dev.host.latency_s},
        "scale_out": {"bandwidth_bytes_per_s": dev.scale_out.bandwidth_bytes_per_s, "latency_s": dev.scale_out.latency_s},
        "family": dev.family, "execution_overrides": {k: v for k, v in dev.execution.items()},
        "execution": profile_dict(dev), "sources": dict(dev.sources), "path": dev.path,
    }


def profile_dict(dev: Device) -> dict[str, Any]:
    """The device's resolved execution profile, by the field names spec files use."""
    prof = resolve_profile(dev)
    out: dict[str, Any] = {"family": prof.family}
    for name, (attr, _kind) in PROFILE_FIELDS.items():
        out[name] = getattr(prof, attr)
    out.update({f"{t}_bandwidth_fraction": v for t, v in prof.tier_bandwidth_fraction.items()})
    return out


def _profile_cell(name: str, value: Any) -> str:
    kind = PROFILE_FIELDS.get(name, ("", "fraction"))[1]
    if value is None:
        return "link latency"
    if kind == "s":
        return format_quantity(value, "s")
    return value if isinstance(value, str) else f"{value:g}"


def profile_table(dev: Device) -> Table:
    """Every field of the device's execution profile with where its value comes from."""
    fam = family_profile(dev.family)
    t = house_table(title=f"execution profile: {fam.name} (family {dev.family})",
              caption=f"Family file: {shown_path(fam.path)}. A device's [execution] table overrides a field; so does "
                      f"--set {dev.id}.execution.FIELD=VALUE.")
    for c in ("field", "value", "provenance"):
        t.add_column(c, justify="right" if c == "value" else "left", overflow="fold")
    values = profile_dict(dev)
    for name, where in profile_provenance(dev, values).items():
        t.add_row(name, _profile_cell(name, values[name]), Text(where))   # Text: no markup ("[params]")
    return t


def profile_provenance(dev: Device, values: dict[str, Any]) -> dict[str, str]:
    """Where each field of the device's execution profile (``values``, :func:`profile_dict`) comes from: the
    device's own file, or the family file's provenance (for a fitted field, with what the shipped calibration
    says of it: :func:`_fitted_how`)."""
    fam = family_profile(dev.family)
    out = {}
    for name, value in values.items():
        if name == "family":
            continue
        attr = PROFILE_FIELDS.get(name, (f"tier:{name.removesuffix('_bandwidth_fraction')}",))[0]
        where = fam.provenance.get(name, "")
        out[name] = (f"this device: {dev.sources.get('execution.' + name, '')}" if attr in dev.execution else
                     _fitted_how(attr, value, where) if dev.family == "gpu" else where)   # the GPU calibration's notes
    return out


def _fitted_how(attr: str, value: Any, provenance: str) -> str:
    """A fitted field's provenance with what the shipped calibration says of it: its standard error, that its
    rows do not identify it, or that the fit stopped at a bound (other provenance unchanged)."""
    if not provenance.startswith("fitted:"):
        return provenance
    from ..evidence.calibrate import bound_side  # lazily: the evidence layer is not needed otherwise
    from ..specs.params import DEFAULT_STACK, shipped_profile
    prof = shipped_profile()   # the values shown are the default stack's; the fit records errors for [params] only
    se, side = None, bound_side(attr, value)
    if attr in prof.not_identified(DEFAULT_STACK):
        how = "not identified by its rows" + (f", at its {side} bound" if side else "") + ": set in place"
    elif side:
        how = f"at its {side} bound"
    elif se is not None:
        how = "+/- " + (format_quantity(se, "s") if attr.endswith("_s") else f"{se:.2g}")
    else:
        return provenance
    return f"fitted ({how}):" + provenance.removeprefix("fitted:")


_WIDTHS = {"16-bit": ("bf16", "fp16"), "8-bit": ("fp8", "int8"), "4-bit": ("fp4", "int4")}


def _peak_cell(d: Device, classes: tuple[str, ...]) -> str:
    """The dense peak of the first native class of one width; the class is named when it is not the first."""
    cls = next((c for c in classes if c in d.native), None)
    if cls is None:
        return "—"
    value = _q(d.peak_flop_per_s.get(cls), "flop_per_s").replace("FLOP/s", "F")
    return value if cls == classes[0] else f"{value}\n{cls}"


def devices_table(devices: list[Device]) -> Table:
    t = house_table(title="Devices", caption="Dense peaks of the native formats of each width (named when not bf16, "
                                        "fp8, fp4), decimal units (TB/s = 1e12 B/s, GB = 1e9 B) as everywhere in the "
                                        "tool, with capacities' binary GiB in parentheses; one "
                                        "line per memory tier; 'unknown' = native but not published, — = none "
                                        "native.")
    for col in ("id", "family", "memory (capacity @ bandwidth)", *_WIDTHS, "TDP"):
        t.add_column(col, justify="left" if col in ("id", "family") or col.startswith("memory") else "right")
    for d in devices:
        tiers = "\n".join(f"{m.name} {_cap(m.capacity_bytes)} @ {_q(m.bandwidth_bytes_per_s, 'bytes_per_s')}"
                          for m in d.memory)
        peaks = [_peak_cell(d, classes) for classes in _WIDTHS.values()]
        t.add_row(d.id + ("" if d.status == "shipping" else "\n(announced)"), d.family, tiers, *peaks, _q(d.tdp_w, "w"))
    return t


def device_table(dev: Device) -> tuple[Table, Text]:
    """The device's spec fields, each source as a note number ([1]), and the notes' URLs, one whole line each (a
    URL folded into a narrow column breaks mid-word and no longer opens)."""
    isa = f", {dev.isa}" if dev.isa else ""
    t = house_table(title=f"{dev.name} ({dev.id}{isa}, {dev.status})", caption=f"Spec file: {shown_path(dev.path)}")
    t.add_column("field")
    t.add_column("value", justify="right")
    t.add_column("source")
    notes: dict[str, int] = {}
    for f in fields(dev):
        value = f.read(dev)
        if f.path.startswith("compute.measured."):
            cls = f.path.rsplit(".", 1)[1]
            if value is None:
                continue
            peak = dev.peak_flop_per_s.get(cls)
            shown = _q(value, "flop_per_s") + (f" ({value / peak:.0%} of peak)" if peak else "")
        elif f.path.startswith("compute."):
            cls = f.path.split(".", 1)[1]
            if cls not in dev.peak_flop_per_s:
                continue
            shown = (_q(value, "flop_per_s") if value is not None or cls in dev.native else "—") + (
                "" if cls in dev.native else " (not native)")
        elif f.path.startswith("execution.") and value is None:
            continue   # the family's value applies: shown in the profile table
        elif f.path in ("scale_up.peers", "scale_up.torus", "scale_up.wraparound") and value is None:
            continue   # a switched fabric (or a mesh, or a torus whose rings never close): nothing to count
        elif f.kind == "choice":
            shown = str(value)
        elif f.kind == "bytes":
            shown = _cap(value)
        elif f.kind in ("fraction", "count"):   # a share, or a plain number (m_tile, max_tp)
            shown = f"{value:.3g}"
        else:
            shown = _q(value, f.kind)
        src = dev.sources.get(f.path, "")
        t.add_row(f.path, shown, f"[{notes.setdefault(src, len(notes) + 1)}]" if src else "")
    urls = Text("\n".join(f"[{n}] {src}" for src, n in notes.items()), no_wrap=True, overflow="ignore")
    return t, urls


def model_dict(m: ModelSpec) -> dict[str, Any]:
    return {
        "id": m.id, "family": m.family, "total_params": m.total_params, "active_params": m.active_params,
        "active_params_without_embedding": m.active_params_without_embedding, "mtp_params": m.mtp_params,
        "num_layers": m.num_layers, "hidden_size": m.hidden_size, "num_heads": m.num_heads,
        "num_kv_heads": m.num_kv_heads, "head_dim": m.head_dim, "vocab_size": m.vocab_size,
        "num_experts": m.num_experts, "experts_per_token": m.experts_per_token,
        "num_sliding_layers": m.num_sliding_layers, "sliding_window": m.sliding_window, "mla": m.is_mla,
        "kv_cache_bytes_per_token_bf16": m.kv_cache_bytes_per_token("bf16"),
        "kv_cache_bytes_sliding_window_bf16": m.sliding_window_kv_bytes("bf16"), "notes": list(m.notes),
        "param_breakdown": m.param_breakdown(), "source": m.source,
        "checkpoint_formats": _checkpoint_formats(m), "unread_quantization": m.unread_quantization,
    }


def _checkpoint_formats(m: ModelSpec) -> dict[str, str]:
    """The formats the commands run a model in by default: as its checkpoint stores them (none where its
    quantization_config was not read: the commands then need the weights' format)."""
    if m.unread_quantization:
        return {}
    f = Formats.for_model(m)
    return {"weights": f.weights, "experts": f.experts or f.weights} if m.num_experts else {"weights": f.weights}


def _b(n: float) -> str:
    return f"{n / 1e9:.3f} B" if n >= 1e8 else f"{n / 1e6:.2f} M"


def models_table(models: list[ModelSpec]) -> Table:
    t = house_table(title="Models", caption="Parameters derived from the architecture (exact counts and the family in "
                                      "`roofline show MODEL` and --json); active = all but unrouted experts (with the "
                                      "embedding table); KV per token for bf16 on full-attention layers, plus what "
                                      "the sliding-window layers hold once their window is full (windowed).")
    for col in ("id", "total", "active", "layers", "attention", "experts\n(k of E)", "KV/token"):
        # ids and numbers stay whole on a narrow terminal; the attention text wraps instead
        t.add_column(col, justify="left" if col in ("id", "attention") else "right", no_wrap=col != "attention")
    for m in models:
        attn = ("MLA" if m.is_mla else f"MHA {m.num_heads}" if m.num_kv_heads == m.num_heads
                else f"MQA {m.num_heads}/1" if m.num_kv_heads == 1 else f"GQA {m.num_heads}/{m.num_kv_heads}")
        if m.num_sliding_layers:
            attn += f", {m.num_sliding_layers} sliding ({m.sliding_window})"
        experts = f"{m.experts_per_token} of {m.num_experts}" if m.is_moe else "dense"
        kv = format_quantity(m.kv_cache_bytes_per_token("bf16"), "bytes")
        if m.num_sliding_layers:
            kv += f" + {format_quantity(m.sliding_window_kv_bytes('bf16'), 'bytes')} windowed"
        t.add_row(m.id, f"{m.total_params / 1e9:.3g} B", f"{m.active_params / 1e9:.3g} B", str(m.num_layers), attn,
                  experts, kv)
    return t


def model_table(m: ModelSpec) -> Table:
    t = house_table(title=f"{m.id} ({m.family})", caption=f"Config: {m.source}")
    t.add_column("component")
    t.add_column("parameters", justify="right")
    for k, v in m.param_breakdown().items():
        if v:
            t.add_row(k, _b(v))
    t.add_row("total", _b(m.total_params), style="bold")
    t.add_row("active per token", _b(m.active_params))
    t.add_row("active, without embedding", _b(m.active_params_without_embedding))
    if m.num_mtp_layers:
        t.add_row(f"MTP modules ({m.num_mtp_layers}, not in total)", _b(m.mtp_params))
    _kv_rows(t, m)
    stored = ", ".join(f"{k} {v}" for k, v in _checkpoint_formats(m).items())
    t.caption = (f"Checkpoint formats (the default unless --weights/--experts say otherwise): {stored}. "
                 if stored else f"Checkpoint formats not read from its quantization_config ({m.unread_quantization}):"
                 " the commands need --weights. ") + f"Config: {m.source}" + "".join(f" Note: {n}." for n in m.notes)
    return t


def _kv_rows(t: Table, m: ModelSpec) -> None:
    """KV cache per token; with sliding-window layers, the per-token figure of the full-attention layers and what
    the sliding layers hold once their window is full, said to be windowed (not 0 B for a model that only slides)."""
    per_token = format_quantity(m.kv_cache_bytes_per_token("bf16"), "bytes")
    if not m.num_sliding_layers:
        t.add_row("KV cache per token (bf16)", per_token)
        return
    full = m.num_layers - m.num_sliding_layers
    window_bytes = m.sliding_window_kv_bytes("bf16")
    t.add_row(f"KV cache per token (bf16), {full} full-attention layers", per_token if full else "0 B (none)")
    t.add_row(f"KV cache per token (bf16), {m.num_sliding_layers} sliding layers, windowed",
              f"{format_quantity(window_bytes / (m.sliding_window or 1), 'bytes')} up to {m.sliding_window:,} tokens")
    t.add_row(f"KV cache of a full window ({m.sliding_window:,} tokens, bf16), windowed",
              format_quantity(window_bytes, "bytes"))


def flat_dict(prefix: str, d: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flat_dict(f"{prefix}{k}.", v))
        else:
            out[f"{prefix}{k}"] = v
    return out


def devices_view(devices: Sequence[Device]) -> View:
    data = [device_dict(d) for d in devices]
    return View(tables=[devices_table(list(devices))], data=data,
                rows=[{k: v for k, v in flat_dict("", d).items() if not k.startswith("sources.")} for d in data])


def device_view(dev: Device) -> View:
    """One device: its spec fields with their sources, then its resolved execution profile (CSV: the profile's
    values and provenance under ``execution.FIELD``, as the table shows them, not the spec's own overrides)."""
    d = device_dict(dev)
    d["execution_provenance"] = profile_provenance(dev, d["execution"])
    spec = [{"field": f.path, "value": f.read(dev), "source": dev.sources.get(f.path, "")} for f in fields(dev)
            if not f.path.startswith("execution.")]
    profile = [{"field": f"execution.{k}", "value": v, "source": d["execution_provenance"].get(k, "")}
               for k, v in d["execution"].items()]
    table, urls = device_table(dev)
    return View(tables=[table, urls, profile_table(dev)], data=d, rows=spec + profile)


def models_view(models: Sequence[ModelSpec]) -> View:
    data = [model_dict(m) for m in models]
    return View(tables=[models_table(list(models))], data=data, rows=[flat_dict("", d) for d in data])


def model_view(m: ModelSpec) -> View:
    d = model_dict(m)
    return View(tables=[model_table(m)], data=d, rows=[flat_dict("", d)])


def formats_view(formats: Sequence[Any], links: Sequence[Any]) -> View:
    t = house_table(title="Number formats", caption="bits per element include block scales; weight-only formats are "
                                              "dequantised and multiplied at the activation format's rate; a format "
                                              "with activations 'as given' multiplies at the wider operand's rate "
                                              "(mxfp4 with bf16 activations: unpacked, bf16 rate; with mxfp8: fp8); "
                                              "int4-g<G> exists for any group size G.")
    for c in ("format", "bits", "compute class", "weight-only", "activations", "description"):
        t.add_column(c, justify="right" if c == "bits" else "left")
    rows = []
    for f in formats:
        acts = "" if f.weight_only else ("quantised to match" if f.quantises_activations else "as given")
        t.add_row(f.name, f"{f.bits_per_element:g}", f.compute, "yes" if f.weight_only else "", acts, f.description)
        rows.append({"format": f.name, "bits_per_element": f.bits_per_element, "compute": f.compute,
                     "weight_only": f.weight_only, "quantises_activations": f.quantises_activations,
                     "description": f.description})
    lt = house_table(title="Named links between device groups", caption="Any link can also be given as BANDWIDTH,LATENCY "
                                                                  "(e.g. 50GB/s,3us). Latencies are estimates.")
    for c in ("link", "bandwidth per direction", "latency"):
        lt.add_column(c, justify="left" if c == "link" else "right")
    links_data = []
    for link in links:
        lt.add_row(link.name, format_quantity(link.bandwidth_bytes_per_s, "bytes_per_s"), format_quantity(link.latency_s, "s"))
        links_data.append({"link": link.name, "bandwidth_bytes_per_s": link.bandwidth_bytes_per_s,
                           "latency_s": link.latency_s})
    return View(tables=[t, lt], data={"formats": rows, "links": links_data}, rows=rows)


def formula_view(name: str, text: str, latex: str, legend: Mapping[str, str] | None = None,
                 meaning: str = "") -> View:
    """The formula, what it is (``meaning``), then what its symbols stand for (``legend``: symbol -> meaning)."""
    where = [f"  {k}: {v}" for k, v in (legend or {}).items()]
    return View(tables=[f"{name}: {text}", *([f"  ({meaning})"] if meaning else []), *(["where"] + where if where else [])],
                data={"name": name, "text": text, "latex": latex, "meaning": meaning, "symbols": dict(legend or {})},
                rows=[{"name": name, "text": text, "latex": latex}])
