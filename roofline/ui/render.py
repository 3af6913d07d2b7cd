"""Results to rich tables, JSON-ready dicts and CSV rows. The only module that formats numbers for people.

Each result type has one formatter that returns a :class:`View`: the tables a
person reads, the dict ``--json`` prints and the flat rows ``--csv`` prints, so
the three never disagree.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np
from rich import box
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from ..evidence.diagnose import Diagnosis
from ..evidence.validate import Validation
from ..physics.timing import StageResult
from ..serving.serve import ServingResult
from ..serving.speculation import SpecResult
from ..specs.devices import Device, fields
from ..specs.execution import family_profile, resolve_profile
from ..specs.formats import Formats, brief
from ..specs.groups import DeviceGroup
from ..specs.models import ModelSpec
from ..specs.params import NOT_IN_PROFILE_FILES, PROFILE_FIELDS, EngineParams
from ..units import format_capacity, format_quantity

#: Control characters (an ANSI escape's ESC, a carriage return, C1 codes): shown escaped, never sent to a terminal.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def safe(text: str) -> str:
    """``text`` with its control characters written out (``\\x1b``): a spec's name or a CSV id carrying an ANSI
    escape must not reach the terminal or a pipe (tabs and line breaks stay)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def cell(value: Any, style: str = "") -> Any:
    """A table cell that shows ``value`` as it is: a string becomes a Text (rich would read ``[/bold]`` in a
    placement name or a CSV id as markup, and fail on it), control characters escaped; other renderables pass."""
    if isinstance(value, str):
        return Text(safe(value), style=style)
    if isinstance(value, Text) and _CONTROL.search(value.plain):
        return Text(safe(value.plain), style=value.style)
    return value


#: Columns of names (row ids, model and device ids, groups, placements, fields): never wrapped; the other
#: columns give way first (rich shrinks the wrappable ones), so at 80 columns ``qwen3-235b-a22b`` stays whole.
NAME_COLUMNS = frozenset({"id", "model", "device", "group", "placement", "configuration", "hardware", "stack",
                          "field", "spec field", "parameter", "family", "target", "draft"})


class _Table(Table):
    """Columns wrap long words instead of cropping them (rich's default is an ellipsis); every string a row, a
    header, the title or the caption holds is shown as written (:func:`cell`), never read as markup."""

    def __init__(self, *args: Any, title: Any = None, caption: Any = None, **kw: Any) -> None:
        super().__init__(*args, title=cell(title, "table.title"), caption=cell(caption, "table.caption"), **kw)

    def add_column(self, header: Any = "", *args: Any, **kw: Any) -> None:  # type: ignore[override]
        kw.setdefault("overflow", "fold")
        if str(header).strip().lower() in NAME_COLUMNS:   # an id broken over two lines reads as two ids
            kw.setdefault("no_wrap", True)
        super().add_column(cell(header), *args, **kw)

    def add_row(self, *renderables: Any, **kw: Any) -> None:  # type: ignore[override]
        super().add_row(*(cell(r) for r in renderables), **kw)


def house_table(title: str | None = None, caption: str | None = None, **kw: Any) -> Table:
    """The house style: compact borders and padding, so tables fit an 80-column terminal."""
    return _Table(title=title, caption=caption, box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False,
                  show_edge=False, **kw)


_BOUND = {"communication": "comm", "does not fit": "no fit"}


def short_bound(bound: Any) -> str:
    """A binding term as a table shows it: ``memory:hbm`` -> ``mem:hbm``, ``communication`` -> ``comm``; ``compute``,
    ``overhead`` and ``dequant`` as :attr:`StageResult.bound` names them (docs/design.md, "One vocabulary")."""
    text = str(bound)
    return _BOUND.get(text, text.replace("memory:", "mem:"))


@attrs.frozen(kw_only=True)
class View:
    """One result, ready for output: rich renderables, the JSON dict, and flat rows for CSV. A ``script`` view
    prints as a shell script: its Text items verbatim (commands), everything else as ``#`` comments."""

    tables: list[RenderableType]
    data: Any
    rows: list[dict[str, Any]]
    script: bool = False


def _q(value: float | None, kind: str) -> str:
    return "unknown" if value is None else format_quantity(value, kind)


def _cap(value: float | None) -> str:
    """A capacity in decimal GB, as every other size the tool prints (stage, errors), with the binary GiB that
    devices are built in (H100's "80GB" is 80 GiB) beside it."""
    return "unknown" if value is None else f"{format_quantity(value, 'bytes')} ({format_capacity(value)})"


# ------------------------------------------------------------------ devices
def device_dict(dev: Device) -> dict[str, Any]:
    return {
        "id": dev.id, "name": dev.name, "vendor": dev.vendor, "isa": dev.isa, "status": dev.status,
        "aliases": list(dev.aliases),
        "memory": [{"name": t.name, "capacity_bytes": t.capacity_bytes, "bandwidth_bytes_per_s": t.bandwidth_bytes_per_s}
                   for t in dev.memory],
        "peak_flop_per_s": dict(dev.peak_flop_per_s), "native": list(dev.native),
        "tdp_w": dev.tdp_w, "idle_w": dev.idle_w,
        "scale_up": {"bandwidth_bytes_per_s": dev.scale_up.bandwidth_bytes_per_s, "latency_s": dev.scale_up.latency_s,
                     "peers": dev.scale_up.peers},
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


def shown_path(path: str) -> str:
    """A file path as a table caption shows it: relative to the working directory when the file lies under it
    (``hardware_specs/h200-sxm.toml`` in a checkout), else whole (an installed package's copy); JSON keeps it
    whole."""
    try:
        rel = os.path.relpath(path)
    except ValueError:   # another drive (Windows)
        return path
    return path if rel == ".." or rel.startswith(".." + os.sep) else rel


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
        if f.path.startswith("compute."):
            cls = f.path.split(".", 1)[1]
            if cls not in dev.peak_flop_per_s:
                continue
            shown = (_q(value, "flop_per_s") if value is not None or cls in dev.native else "—") + (
                "" if cls in dev.native else " (not native)")
        elif f.path.startswith("execution.") and value is None:
            continue   # the family's value applies: shown in the profile table
        elif f.path == "scale_up.peers" and value is None:
            continue   # a switched fabric: no per-peer links to count
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


# ------------------------------------------------------------------- models
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


# ------------------------------------------------------------------- stages
STAGE_FIELDS = ("batch", "new_tokens", "context", "time_s", "time_serial_s", "compute_s", "memory_s",
                "attention_compute_s", "kv_memory_s", "communication_s", "overhead_s", "dequant_s", "bound",
                "intensity_flop_per_byte", "memory_per_device_bytes", "weights_per_device_bytes",
                "kv_per_device_bytes", "fits", "flop_per_device", "bytes_per_device")


def stage_rows(r: StageResult) -> list[dict[str, Any]]:
    """One dict per workload point (arrays flattened in C order)."""
    cols = {f: np.asarray(getattr(r, f)) for f in STAGE_FIELDS}
    cols["tokens_per_s"] = np.asarray(r.tokens_per_s)
    cols["per_sequence_tokens_per_s"] = np.asarray(r.per_sequence_tokens_per_s)
    shape = np.broadcast_shapes(*(c.shape for c in cols.values()))
    flat = {k: np.broadcast_to(v, shape).ravel() for k, v in cols.items()}
    rows = []
    for i in range(int(np.prod(shape)) if shape else 1):
        rows.append({k: (v[i].item() if hasattr(v[i], "item") else v[i]) for k, v in flat.items()})
    return rows


def stage_dict(r: StageResult) -> dict[str, Any]:
    return {"stage": r.stage, "model": r.model_id, "group": r.group, "passes": r.passes,
            "formats": r.formats.as_dict(),
            "ridge_flop_per_byte": r.ridge_flop_per_byte, "usable_per_device_bytes": r.usable_per_device_bytes,
            "memory_by_tier_s": {k: v for k, v in r.memory_by_tier_s.items()}, "rows": stage_rows(r)}


def ms_cell(v: float) -> str:
    return "—" if not math.isfinite(v) else (f"{v * 1e3:.3g}" if v * 1e3 < 1000 else f"{v * 1e3:,.0f}")


def _value(v: float) -> str:
    """A measured or predicted value with four significant figures and thousands separators, never an exponent
    (18,890 / 245.3 / 0.6802)."""
    if not math.isfinite(v):
        return "—"
    digits = max(0, 3 - int(math.floor(math.log10(abs(v))))) if v else 0
    return f"{v:,.{digits}f}"


def rate_cell(v: float) -> str:
    """A rate in at most 7 characters: 2,205 / 34.4 / 349k / 1.38M (exact values are in --json and --csv)."""
    if not math.isfinite(v):
        return "—"
    if v >= 1e6:
        return f"{v / 1e6:.3g}M"
    return f"{v / 1e3:.0f}k" if v >= 1e5 else f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def _intensity(v: float) -> str:
    return "—" if not math.isfinite(v) else f"{v:,.0f}" if v >= 1000 else f"{v:.3g}"


def _gb(v: float) -> str:
    if not math.isfinite(v):
        return "—"
    return f"{v / 1e6:.0f} MB" if v < 1e9 else f"{v / 1e9:.1f} GB" if v < 10e9 else f"{v / 1e9:,.0f} GB"


def stage_table(r: StageResult, caption: str | None) -> Table:
    """One stage, a row per batch; the communication column only where the group communicates."""
    per_user = r.stage.startswith(("decode", "draft", "verify"))
    rows = stage_rows(r)
    n, ctx = rows[0]["new_tokens"], rows[0]["context"]
    where = f"{n:.0f} new tokens/seq after {ctx:.0f} cached" if r.stage != "decode" else f"context {ctx:.0f}"
    t = house_table(title=f"{r.stage}: {r.model_id} on {r.group}, {where} (times in ms)", caption=caption,
               caption_justify="left")
    comm = any(row["communication_s"] for row in rows if row["fits"])
    deq = any(row["dequant_s"] for row in rows if row["fits"])
    cols = ["batch", "time", "comp", "mem", *(["dequant"] if deq else []), *(["comm"] if comm else []), "over\nhead",
            "bound", "FLOP\n/B",
            "mem/\ndev", "tok/s\n/user" if per_user else "tok/s\n/seq", "tok/s"]
    for c in cols:
        t.add_column(c, justify="left" if c == "bound" else "right", overflow="fold")
    for row in rows:
        part = ms_cell if row["fits"] else (lambda v: "—")  # components of a point that does not fit: not shown
        t.add_row(f"{row['batch']:.0f}", ms_cell(row["time_s"]), part(row["compute_s"]),
                  part(row["memory_s"]), *([part(row["dequant_s"])] if deq else []),
                  *([part(row["communication_s"])] if comm else []), part(row["overhead_s"]),
                  short_bound(row["bound"]), _intensity(row["intensity_flop_per_byte"]),
                  _gb(row["memory_per_device_bytes"]), rate_cell(row["per_sequence_tokens_per_s"]),
                  rate_cell(row["tokens_per_s"]))
    return t


# ------------------------------------------------------------- speculative
SPEC_FIELDS = ("gamma", "expected_tokens", "draft_s", "verify_s", "transfer_s", "round_s", "tokens_per_s_per_user",
               "tokens_per_s", "speedup", "energy_per_token_j", "power_w", "flop_per_token", "fits", "draft_bound",
               "verify_bound")


def alpha_sweeps(cols: Mapping[str, Any]) -> bool:
    """Whether a scan's points (columns gamma, batch, alpha) hold several alphas at one gamma and batch."""
    points = list(zip(cols["gamma"], cols["batch"]))
    return len(set(zip(points, np.nan_to_num(cols["alpha"], nan=-1.0)))) > len(set(points))


def spec_dict(r: SpecResult, best_gamma: Any) -> dict[str, Any]:
    """A scan as JSON-ready rows (one per alpha, batch and gamma, each with its batch's plain-decode baseline), the
    fastest gamma of each batch (and of each alpha where alphas sweep: ``alpha_sweep``) marked ``best``; the
    top-level ``baseline_*`` are the first batch's (every batch's in ``baseline_by_batch``)."""
    rows = []
    shape = np.broadcast_shapes(np.shape(r.gamma), np.shape(r.batch), np.shape(r.tokens_per_s_per_user))
    cols = {f: np.ravel(np.broadcast_to(np.asarray(getattr(r, f)), shape))
            for f in (*SPEC_FIELDS, "batch", "alpha", "baseline_decode_s", "baseline_energy_per_token_j",
                      "extra_flop_fraction", "draft_step_s")}
    speed = np.where(cols["fits"], cols["tokens_per_s_per_user"], -np.inf)
    # the best gamma of each batch and, where several alphas meet one gamma and batch (an alpha sweep, not an
    # alpha that follows gamma), of each alpha
    sweep = alpha_sweeps(cols)
    key = [(b, a if sweep else 0.0) for b, a in zip(cols["batch"], cols["alpha"])]
    best = {k: int(np.argmax([s if kk == k else -np.inf for kk, s in zip(key, speed)])) for k in set(key)}
    for i in range(cols["gamma"].size):
        row = {k: (v[i].item() if hasattr(v[i], "item") else v[i]) for k, v in cols.items()}
        row["best"] = bool(best[key[i]] == i and np.isfinite(speed[i]))
        row["baseline_tokens_per_s_per_user"] = 1 / row.pop("baseline_decode_s")
        rows.append(row)
    by_batch = {row["batch"]: {"batch": row["batch"], "tokens_per_s_per_user": row["baseline_tokens_per_s_per_user"],
                               "energy_per_token_j": row["baseline_energy_per_token_j"]} for row in rows}
    return {"target": r.target, "draft": r.draft, "draft_kind": r.draft_kind, "target_group": r.target_group,
            "draft_group": r.draft_group, "link": r.link, "acceptance": r.acceptance,
            "best_gamma": best_gamma if np.ndim(best_gamma) == 0 else   # one per alpha and batch when they vary
            [int(g) if math.isfinite(g) else None for g in np.ravel(best_gamma)],
            "baseline_decode_s": float(np.ravel(r.baseline_decode_s)[0]),
            "baseline_tokens_per_s_per_user": float(1 / np.ravel(r.baseline_decode_s)[0]),
            "baseline_energy_per_token_j": float(np.ravel(r.baseline_energy_per_token_j)[0]),
            "baseline_by_batch": list(by_batch.values()), "energy_note": r.energy_note,
            "target_formats": formats_json(r.target_formats), "draft_formats": formats_json(r.draft_formats),
            "alpha_sweep": sweep, "best": [{"alpha": row["alpha"] if sweep else None, "batch": int(row["batch"]),
                                            "gamma": int(row["gamma"])} for row in rows if row["best"]],
            "rows": rows}


def _at(points: Sequence[str]) -> str:
    """" at alpha 0.1, batch 8; ..." for the points a caption remark holds at ("" for a scan of one point)."""
    return f" at {'; '.join(points)}" if any(points) else ""


def _sig3(v: float) -> str:
    """Three significant digits, trailing zeros kept (1.10 beside 2.34, not 1.1)."""
    return f"{v:#.3g}".rstrip(".")


def spec_table(r: SpecResult, best_gamma: Any, overrides: Sequence[str] = (), note: str = "") -> Table:
    d = spec_dict(r, best_gamma)
    batches = sorted({int(row["batch"]) for row in d["rows"]})
    several = len(batches) > 1
    base_e = d["baseline_energy_per_token_j"]
    def joule(e: Any) -> str:
        return f", {e:.3g} J/token" if e is not None and math.isfinite(e) else ""
    base = (f"{rate_cell(d['baseline_tokens_per_s_per_user'])} tok/s/user" + joule(base_e) if not several else "; ".join(
        f"batch {b['batch']:.0f}: {rate_cell(b['tokens_per_s_per_user'])} tok/s/user{joule(b['energy_per_token_j'])}"
        for b in d["baseline_by_batch"]))
    sweep = d["alpha_sweep"]

    def point(row: Mapping[str, Any]) -> str:   # where a row is, in the words of the table's leading columns
        return ", ".join([f"alpha {row['alpha']:g}"] * sweep + [f"batch {row['batch']:.0f}"] * several)
    spec_rows = [row for row in d["rows"] if row["gamma"]]
    points = list(dict.fromkeys(point(row) for row in spec_rows))
    fitting = {p: [row for row in spec_rows if point(row) == p and row["fits"]] for p in points}
    slower = [p for p in points if fitting[p] and not any(row["speedup"] > 1 for row in fitting[p])]
    unfit = [p for p in points if not fitting[p]]
    formats = (f"Formats: target {r.target_formats.brief()}; draft {r.draft_formats.brief()}. "
               if r.target_formats and r.draft_formats else "")
    cap = (f"Acceptance: {r.acceptance}. Draft on {r.draft_group}, verify on {r.target_group}, link {r.link}. "
           + formats + f"Baseline: plain decode on {r.target_group} at {base}"
           + (". * = most tok/s/user" + (" at that " + " and ".join(
               ["alpha"] * sweep + ["batch"] * several) if several or sweep else "") + ".")
           + (f" No γ here is faster than plain decode (speed-up < 1{_at(slower)}): speculation does not pay."
              if slower else "")
           + (f" Nothing speculative fits{_at(unfit)} (—)." if unfit else "")
           + (" γ 0 is plain decode with the draft's devices idle but powered (their idle power in J/token)."
              if r.draft_group != r.target_group and any(row["gamma"] == 0 for row in d["rows"]) else "")
           + (f" What-if: {', '.join(overrides)}." if overrides else "")
           + (f" {r.energy_note}" if r.energy_note else "") + note)
    t = house_table(title=f"speculative decoding: {r.target} with {r.draft}, batch {','.join(map(str, batches))}",
               caption=cap)
    lead = ("alpha",) * sweep + ("batch",) * several   # the rows' order
    for c in (*lead, "gamma", "draft\nms", "verify\nms", "xfer\nus", "tok/\nround", "tok/s\n/user", "speed-\nup",
              "J/\ntoken", "bound\ndraft/verify"):
        t.add_column(c, justify="left" if "bound" in c else "right", overflow="fold")
    for row in d["rows"]:
        mark = "*" if row["best"] else ""
        ok = row["fits"]
        t.add_row(*({"alpha": f"{row['alpha']:g}", "batch": f"{row['batch']:.0f}"}[c] for c in lead),
                  f"{row['gamma']:.0f}{mark}", ms_cell(row["draft_s"]),
                  ms_cell(row["verify_s"]), ms_cell(row["transfer_s"] * 1e3) if ok else "—",
                  _sig3(row["expected_tokens"]) if ok else "—",
                  rate_cell(row["tokens_per_s_per_user"]), f"{row['speedup']:.2f}" if ok else "—",
                  _sig3(row["energy_per_token_j"]) if ok and math.isfinite(row["energy_per_token_j"] or math.nan) else "—",
                  f"{short_bound(row['draft_bound'])}/{short_bound(row['verify_bound'])}",
                  style="bold" if mark else None)
    return t


# ----------------------------------------------------------------- serving
def _s(v: float) -> str:
    return "—" if not math.isfinite(v) else (f"{v:.3g}" if v < 100 else f"{v:,.0f}")


def serving_point(r: ServingResult, i: int) -> dict[str, Any]:
    """One point of a ServingResult (flat index i) as a JSON-ready dict."""
    def at(a: Any) -> Any:
        v = np.ravel(np.asarray(a))[i]
        return v.item() if hasattr(v, "item") else v
    return {"batch": at(r.batch), "gamma": at(r.gamma), "expected_tokens": at(r.expected_tokens),
            "ttft_s": at(r.ttft_s), "tpot_s": at(r.tpot_s), "e2e_s": at(r.e2e_s),
            "tokens_per_s_per_user": at(r.tokens_per_s_per_user), "tokens_per_s": at(r.tokens_per_s),
            "tokens_per_s_per_device": at(r.tokens_per_s_per_device), "tokens_per_s_per_kw": at(r.tokens_per_s_per_kw),
            "energy_per_token_j": at(r.energy_per_token_j), "energy_per_request_j": at(r.energy_per_request_j),
            "power_w": at(r.power_w), "power_by_group_w": {k: at(v) for k, v in r.power_by_group_w.items()},
            "devices": at(r.devices), "memory_per_device_bytes": at(r.memory_per_device_bytes),
            **{f"{k}_bound": None if b == "—" else b   # no such stage (prefill on the decode group, no draft): null
               for k, b in (("prefill", at(r.prefill_bound)), ("decode", at(r.decode_bound)),
                            ("draft", at(r.draft_bound)))},
            "usd_per_hour": at(r.usd_per_hour), "usd_per_million_output_tokens": at(r.usd_per_million_output_tokens),
            "usd_per_million_input_tokens": at(r.usd_per_million_input_tokens),
            "usd_per_million_total_tokens": at(r.usd_per_million_total_tokens),
            "fits": bool(at(r.fits)), "fits_memory": bool(at(r.fits_memory)),
            "budget_keeps_up": bool(at(r.budget_keeps_up)), "token_budget_needed": at(r.token_budget_needed),
            **formats_fields(r)}


def formats_json(f: Formats | None) -> dict[str, str] | None:
    """Formats as JSON says them everywhere (:meth:`Formats.as_dict`); None where there are none."""
    return None if f is None else f.as_dict()


def formats_fields(r: ServingResult) -> dict[str, dict[str, str] | None]:
    """A serving result's formats as JSON fields: the target's (its decode group's), a separate prefill group's
    where it runs others (else null), the draft's (null without one)."""
    return {"target_formats": formats_json(r.target_formats), "prefill_formats": formats_json(r.prefill_formats),
            "draft_formats": formats_json(r.draft_formats)}


def formats_text(fields: Mapping[str, Any]) -> str:
    """The formats of :func:`formats_fields` in a few words (:func:`brief`): the target's ("decode ...; prefill ..."
    where a separate prefill group runs others), then the draft's; "" without any."""
    target, pre, draft = fields.get("target_formats"), fields.get("prefill_formats"), fields.get("draft_formats")
    if not target:
        return ""
    text = brief(target) if not pre else f"decode {brief(target)}; prefill {brief(pre)}"
    return text + (f"; draft {brief(draft)}" if draft else "")


def formats_lines(by_name: Mapping[str, str], kind: str) -> list[str]:
    """The formats each named row ran in (:func:`formats_text`): one line where all agree, else one line per
    set with the rows that ran it (a chip without bf16 units runs, unless told, in its native format)."""
    groups: dict[str, list[str]] = {}
    for name, fmt in by_name.items():
        if fmt:
            groups.setdefault(fmt, []).append(name)
    if len(groups) < 2:
        return [f"Formats: {fmt}." for fmt in groups]
    return ([f"The formats differ by {kind} (unless given: bf16, or the native format every device of the {kind} "
             "computes):"] + [f"  {fmt}: {'; '.join(names)}" for fmt, names in groups.items()])


def serving_table(rows: list[tuple[str, str, dict[str, Any] | None, str]], title: str, caption: str) -> list[Any]:
    """Feasible placements as a table, then one line per infeasible one with its reason (a footnote, not a
    one-word-wide cell). rows: (name, description, point or None, reason)."""
    t = house_table(title=title, caption=caption)
    # several sets of formats: a key per row and each set said once under the table
    keys = {text: str(i) for i, text in enumerate(dict.fromkeys(
        formats_text(p) for _n, _d, p, _r in rows if p and p["fits"]), start=1)}
    for c in ("placement", *(("fmt",) if len(keys) > 1 else ()), "devices", "TTFT\nms", "TPOT\nms", "E2E\ns",
              "tok/s\n/user", "tok/s\n/kW", "J/\ntoken"):
        t.add_column(c, justify="left" if c in ("placement", "fmt") else "right")
    failed: dict[str, list[str]] = {}
    for name, _desc, p, reason in rows:
        if p is None or not p["fits"]:
            failed.setdefault(reason or "does not fit", []).append(name)
            continue
        t.add_row(name, *((keys[formats_text(p)],) if len(keys) > 1 else ()), f"{p['devices']:.3g}",
                  ms_cell(p["ttft_s"]), ms_cell(p["tpot_s"]), _s(p["e2e_s"]), rate_cell(p["tokens_per_s_per_user"]),
                  rate_cell(p["tokens_per_s_per_kw"]), _s(p["energy_per_token_j"]))
    out: list[Any] = [t] if t.row_count else [f"{title}: no placement is feasible."]
    if len(keys) > 1:
        out += ["Formats (fmt; unless given: bf16, or the native format every device of a group computes):"] + [
            f"  {key}: {text}" for text, key in keys.items()]
    else:
        out += [f"Formats: {text}." for text in keys if text]
    for reason, names in failed.items():
        shown = "; ".join(names[:3]) + (f"; and {len(names) - 3} more" if len(names) > 3 else "")
        out.append(f"not feasible ({shown}): {reason}")
    return out


def frontier_table(name: str, points: list[dict[str, Any]], caption: str = "", workload: str = "") -> Table:
    t = house_table(title=f"frontier: {name}" + (f" ({workload})" if workload else ""), caption=caption or None)
    for c in ("tok/s\n/user", "tok/s\n/kW", "$/Mtok\nout", "E2E\ns", "TTFT\nms", "J/\ntoken", "batch", "gamma"):
        t.add_column(c, justify="right")
    for p in points:
        t.add_row(rate_cell(p["tokens_per_s_per_user"]), rate_cell(p["tokens_per_s_per_kw"]),
                  usd_cell(p.get("usd_per_million_output_tokens", math.nan)), _s(p["e2e_s"]), ms_cell(p["ttft_s"]),
                  _s(p["energy_per_token_j"]), f"{p['batch']:.0f}", f"{p['gamma']:.0f}")
    return t


def comparison_table(rows: list[dict[str, Any]], baseline: str, axis: str = "kw") -> Table:
    y = "tokens/s per kW" if axis == "kw" else "tokens per USD"
    best = "energy-optimised" if axis == "kw" else "cost-optimised"
    t = house_table(title=f"interactivity at equal {y}, against {baseline}",
               caption=f"interactivity-optimised: at the {y} of the baseline's most interactive point; "
                       f"{best}: at the baseline's highest {y} (— when the configuration cannot reach it).")
    for c in ("configuration", "interactivity-\noptimised", best.replace("-", "-\n"), "best ratio\non shared\nrange"):
        t.add_column(c, justify="left" if c == "configuration" else "right")
    for r in rows:
        fmt = [f"{v:.2f}x" if v is not None and math.isfinite(v) else "—"
               for v in (r["interactivity_optimised"], r[best.replace("-", "_")], r["max_ratio"])]
        t.add_row(r["name"], *fmt)
    return t


def compare_table(model_id: str, batch: Any, rows: list[dict[str, Any]], context: int, prompt: int,
                  overrides: Sequence[str] = (), note: str = "") -> list[Any]:
    """One row per group and batch; groups that cannot run the model get one line each below the table. The
    caption names the what-ifs applied to every group and what each named variant changed."""
    t = house_table(title=f"{model_id}: side by side (decode at context {context}, prefill of {prompt})",
               caption="tok/s/kW from the linear utilisation power model; $/Mtok: the group's devices at their "
                       "price per hour (plus its power at the electricity price, where one is set) over its decode "
                       "tokens; max batch at this context." + (f" What-if: {', '.join(overrides)}." if overrides else "")
                       + "".join(f" {r['name']} = {r['group']} with {'; '.join(r['variant'])}." for r in rows if r.get("variant"))
                       + note)
    for c in ("group", "batch", "decode\nms", "tok/s\n/user", "tok/s\n/kW", "$/Mtok\nout", "bound", "prefill\nms",
              "max\nbatch"):
        t.add_column(c, justify="left" if c in ("group", "bound") else "right")
    errors = []
    for r in rows:
        if "error" in r:
            errors.append(f"{r['name']}: {r['error']}")
            continue
        kw = r.get("tokens_per_s_per_kw") or [math.nan] * len(r["decode"])
        usd = r.get("usd_per_million_output_tokens") or [math.nan] * len(r["decode"])
        for i, d in enumerate(r["decode"]):
            first = i == 0
            t.add_row(r["name"] if first else "", f"{d['batch']:.0f}", ms_cell(d["time_s"]),
                      rate_cell(d["per_sequence_tokens_per_s"]), rate_cell(kw[i] if kw[i] is not None else math.nan),
                      usd_cell(usd[i] if usd[i] is not None else math.nan),
                      short_bound(d["bound"]),
                      ms_cell(r["prefill"]["time_s"] if r["prefill"]["fits"] else math.nan) if first else "",
                      str(r["max_batch"]) if first else "")
    return [t, *errors]


def elasticity_table(name: str, el: dict[str, float], batch: int, context: int) -> Table:
    shown = {k: v for k, v in el.items() if round(v, 2) != 0}   # a field that moves nothing at the precision shown
    idle = len(el) - len(shown)
    t = house_table(title=f"{name}: elasticity of decode time (batch {batch}, context {context})",
              caption="d ln(time) / d ln(field): -1 = time inversely proportional to the field, 0 = irrelevant here."
                      + (f" {idle} field{'s' if idle != 1 else ''} with no effect here (|elasticity| < 0.005) left "
                         "out; --json lists every field." if idle else ""))
    t.add_column("spec field")
    t.add_column("elasticity", justify="right")
    for k, v in sorted(shown.items(), key=lambda kv: kv[1]):
        t.add_row(k, f"{v:+.2f}")
    return t


def _share(x: float) -> str:
    """A ratio as a percentage with three significant figures (0.36%, 47.4%, 112%)."""
    return f"{x * 100:.3g}%"


def diagnosis_table(d: dict[str, Any]) -> Table:
    t = house_table(title=f"diagnosis: {d['model']} on {d['group']}, batch {d['batch']:.0f}, "
                    f"{d['isl']:.0f} in / {d['osl']:.0f} out ({d['serving']})",
              caption=d["advice"] + (f". What-if: {', '.join(d['overrides'])}" if d.get("overrides") else ""))
    peak = "what-if" if d.get("overrides") else "datasheet"
    t.add_column("quantity")
    t.add_column("value", justify="right")
    rows = [("measured time per output token", f"{d['measured_tpot_s'] * 1e3:.3g} ms"),
            ("measured tokens/s per user", f"{d['measured_tokens_per_s_per_user']:.4g}"),
            ("roofline prediction", f"{d['predicted_tpot_s'] * 1e3:.3g} ms"),
            ("bytes read per step, per device", format_quantity(d["bytes_per_step_per_device"], "bytes")),
            ("FLOP per step, per device", f"{d['flop_per_step_per_device']:.3g}"),
            ("achieved bandwidth", format_quantity(d["achieved_bytes_per_s"], "bytes_per_s")),
            ("achieved FLOP/s", format_quantity(d["achieved_flop_per_s"], "flop_per_s")),
            (f"peak bandwidth ({peak})", format_quantity(d["peak_bytes_per_s"], "bytes_per_s")),
            (f"peak {d['compute_class']} FLOP/s ({peak}, dense)", format_quantity(d["peak_flop_per_s"], "flop_per_s")),
            ("MBU (achieved / peak bandwidth)", _share(d["mbu"])),
            ("MFU (achieved / peak FLOP/s)", _share(d["mfu"])),
            ("modelled compute time / measured time", _share(d["modelled_compute_share"])),
            ("binding resource", d["binding"])]
    for k, v in rows:
        t.add_row(k, v)
    return t


# -------------------------------------------------------------- validation
#: Rows `roofline validate` lists in the terminal unless told (--rows): those with the largest errors.
VALIDATE_ROWS_SHOWN = 25


def validation_table(v: Validation, path: str, shown: int | None = VALIDATE_ROWS_SHOWN) -> Table:
    """The rows with the ``shown`` largest errors, largest first (every row in the file's order for None)."""
    o = v.summary["overall"]
    n = o.get("n", 0)
    cap = (f"Median |error| {o.get('median_abs_error', math.nan):.1%}, mean {o.get('mean_abs_error', math.nan):.1%} over "
           f"{n} row{'s' * (n != 1)}; by group in the next table"
           + (f", {len(v.skipped)} rows not predicted after it" if v.skipped else "") + ". " + GRADES_CAPTION)
    rows = v.rows if shown is None else sorted(v.rows, key=lambda r: -abs(r["error"]))[:shown]
    title = f"validation against {path}" + ("" if shown is None else (
        f": no row listed (--rows N lists the N of {len(v.rows)} with the largest errors)" if shown == 0 else
        f": the {shown} of {len(v.rows)} rows with the largest errors (--rows all lists every one)"
        if shown < len(v.rows) else ": largest errors first (--rows all: the file's order)"))
    t = house_table(title=title, caption=cap)
    for c in ("id", "metric", "device", "model", "g", "predicted", "measured", "error"):
        t.add_column(c, justify="right" if c in ("predicted", "measured", "error") else "left")
    for r in rows:
        t.add_row(r["id"], METRIC_SHORT.get(r["metric"], r["metric"]), r["hardware"], r["model"], r.get("grade", ""),
                  _value(r["predicted"]), _value(r["measured"]), f"{r['error']:+.0%}")
    return t


#: What a row's grade (the ``g`` column; the data README's ``grade``) says, and what calibration does with it.
GRADES_CAPTION = ("g = grade: A a first-party table with its setup, B one or two details inferred, C a setup partly "
                  "assumed, D second-hand; the GPU time calibration fits A and B rows and only predicts C and D.")


#: The validation summary's groupings as the terminal shows them.
SUMMARY_GROUPS = (("by_kind", "kind"), ("by_family", "family"), ("by_metric", "metric"), ("by_hardware", "device"),
                  ("by_stack_family", "stack"), ("by_stack_version", "stack version"))


def fit_errors(fit: Mapping[str, Any]) -> str:
    """A fit record's errors in a phrase: in-sample, leave-one-out, held out ("" when it has none)."""
    parts = [f"in-sample {fit['median_abs_error']:.1%}" if "median_abs_error" in fit else "",
             f"leave-one-out {fit['loo_approx_median_abs_error']:.1%} ({fit.get('loo_approx', 'approximate')})"
             if "loo_approx_median_abs_error" in fit else "",
             f"held out ({fit.get('heldout', '?')}) {fit['heldout_median_abs_error']:.1%}{_build_split(fit)}"
             if "heldout_median_abs_error" in fit else ""]
    return ", ".join(p for p in parts if p)


def _build_split(fit: Mapping[str, Any]) -> str:
    """The held-out error split by whether other publications measured the row's stack build ("" if no split)."""
    if "heldout_unseen_build_median_abs_error" not in fit or "heldout_seen_build_median_abs_error" not in fit:
        return ""
    return (f" ({fit['heldout_seen_build_median_abs_error']:.1%} on {fit['heldout_seen_build_rows']} rows of stack "
            f"builds other publications measured, {fit['heldout_unseen_build_median_abs_error']:.1%} on "
            f"{fit['heldout_unseen_build_rows']} of builds only their own publication measured)")


def calibration_record(fit: Mapping[str, Any], same_data: bool = True) -> str:
    """A profile's ``[fit]`` record in a sentence (empty for a profile without one); ``same_data`` False: the rows
    validated are another file's, which the sentence says (its figures are the fit's own data's, not theirs)."""
    if not fit.get("rows") or not fit_errors(fit):
        return ""
    other = "" if same_data else ", not on the file validated here"
    checked = int(fit.get("checked_rows") or 0)
    rows = (f"{fit['rows'] - checked} of the {fit['rows']} GPU time rows (the other {checked}, of a grade it does "
            "not fit, predicted)" if checked else f"{fit['rows']} GPU time rows")
    return f" The calibration was fitted on {rows} of {fit.get('data', '?')}{other}: {fit_errors(fit)}."


def repeat_record(repeats: Mapping[str, Any] | None) -> str:
    """The data's repeated measurements in a sentence (empty without a pair)."""
    if not repeats or not repeats.get("pairs"):
        return ""
    return (f" {repeats['pairs']} pairs of rows from different publications measured one configuration on one "
            f"stack family; they differ by {repeats['median_difference']:.1%} (median): a spread that adds, on "
            f"average, to the error of predicting a publication not fitted (--json: repeats).")


def validation_summary_table(v: Validation, fit: Mapping[str, Any] | None = None, same_data: bool = True,
                             repeats: Mapping[str, Any] | None = None) -> Table:
    """Median |error|, median signed error and row count per kind, family, metric, device and stack, the
    calibration's own record (``fit``: the profile's ``[fit]`` table; ``same_data``: whether it was fitted on the
    rows validated) and how far the data's repeated measurements agree (``repeats``: :func:`repeat_summary`)."""
    t = house_table(title="errors by group", caption="error = predicted / measured - 1: + is a throughput, power or "
                                                "energy above the measured one, or a TTFT / ITL longer than measured. "
                                                "in 80% = the rows whose shipped prediction's 80% interval (made from "
                                                "the other publications' held-out errors) holds the measurement: "
                                                "optimistic for fitted rows, which the README's table checks with "
                                                "their held-out predictions; cliff = rows whose prediction moves "
                                                ">20% for 5% less usable memory."
                                                + calibration_record(fit or {}, same_data) + repeat_record(repeats),
               caption_justify="left")
    for c in ("group", "value", "n", "median |error|", "median error", "in 80%", "cliff"):
        t.add_column(c, justify="left" if c in ("group", "value") else "right")
    for key, name in SUMMARY_GROUPS:
        for value, x in v.summary.get(key, {}).items():
            cov = x.get("interval_coverage")
            t.add_row(name, METRIC_SHORT.get(value, value), str(x["n"]), f"{x['median_abs_error']:.0%}",
                      f"{round(x['median_error'], 2) + 0.0:+.0%}" if "median_error" in x else "",
                      f"{cov:.0%}" if cov is not None else "—", str(x.get("memory_cliff_rows") or ""))
    return t


def skipped_table(skipped: Sequence[dict[str, str]]) -> Table:
    """Rows not predicted, one line per reason with its count and first ids (all ids are in --json)."""
    by_reason: dict[str, list[str]] = {}
    for x in skipped:
        by_reason.setdefault(x["reason"], []).append(x["id"])
    t = house_table(title=f"{len(skipped)} rows not predicted", caption="--json lists every row with its reason",
               caption_justify="left")
    for c in ("rows", "ids", "reason"):
        t.add_column(c, justify="right" if c == "rows" else "left")
    for reason, ids in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        t.add_row(str(len(ids)), ", ".join(ids[:3]) + (", ..." if len(ids) > 3 else ""), Text(reason))
    return t


METRIC_SHORT = {"decode_tokens_per_s_per_user": "tok/s/user", "itl_ms": "ITL ms", "ttft_ms": "TTFT ms",
                "output_tokens_per_s_per_device": "tok/s/device", "output_tokens_per_s_total": "tok/s total",
                "power_w": "power W", "energy_per_token_j": "J/token"}


def params_dict(p: EngineParams) -> dict[str, float]:
    """The calibratable (numeric, per-stack) parameters of a profile."""
    return {k: v for k, v in attrs.asdict(p).items() if k not in NOT_IN_PROFILE_FILES}


def calibration_table(d: dict[str, Any]) -> Table:
    fams = list(d["families"])
    checked = len(d.get("checked_rows") or ())
    t = house_table(title=f"calibration on {len(d['rows'])} rows of {d['data']}"
                     + (f" ({checked} of grade C or D predicted, not fitted)" if checked else ""),
              caption=f"Median |error|: {fit_errors(d['record'])}"
                      + (f". Profile written to {d['profile']}." if d["profile"] else "."))
    t.add_column("parameter")
    for f in ("default", *fams):
        t.add_column(f, justify="right")
    notes = d["uncertainty"]

    def cell(value: float, note: str | None) -> str:
        if note and note.startswith("not identified"):
            return f"{value:.4g} (not identified)"
        return f"{value:.4g}" + (f" {note.replace('+/-', '±')}" if note else "")

    for k, v in d["default"].items():
        t.add_row(k, cell(v, notes.get("default", {}).get(k)),
                  *(cell(d["families"][f][k], notes.get(f, {}).get(k)) for f in fams))
    return t


# -------------------------------------------------------------------- views
def _flat(prefix: str, d: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(f"{prefix}{k}.", v))
        else:
            out[f"{prefix}{k}"] = v
    return out


def devices_view(devices: Sequence[Device]) -> View:
    data = [device_dict(d) for d in devices]
    return View(tables=[devices_table(list(devices))], data=data,
                rows=[{k: v for k, v in _flat("", d).items() if not k.startswith("sources.")} for d in data])


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
    return View(tables=[models_table(list(models))], data=data, rows=[_flat("", d) for d in data])


def model_view(m: ModelSpec) -> View:
    d = model_dict(m)
    return View(tables=[model_table(m)], data=d, rows=[_flat("", d)])


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


def stage_view(model: str, group: DeviceGroup, results: Sequence[StageResult], caption: str,
               overrides: Sequence[str] = (), notes: Sequence[str] = ()) -> View:
    """Stages' tables; ``notes`` (why a stage fits at no batch, a context beyond the model, ...) go to the
    caption and the JSON's ``notes``."""
    data = {"model": model, "device": group.device.id, "group": group.shape, "overrides": list(overrides),
            "notes": list(notes), "stages": [stage_dict(r) for r in results]}
    rows = [{"stage": r.stage, **row} for r in results for row in stage_rows(r)]
    # the caption (formats, formula, profile) holds for every stage: said once, under the last table
    return View(tables=[stage_table(r, caption if i == len(results) - 1 else None) for i, r in enumerate(results)],
                data=data, rows=rows)


def spec_view(r: SpecResult, best_gamma: Any, overrides: Sequence[str] = (), note: str = "") -> View:
    """A speculative scan; ``note``: a caveat for the caption and the JSON's ``notes``."""
    d = spec_dict(r, best_gamma)
    d["overrides"] = list(overrides)
    d["notes"] = note.strip()
    return View(tables=[spec_table(r, best_gamma, overrides, note)], data=d, rows=d["rows"])


def serving_rows_view(title: str, caption: str, items: list[dict[str, Any]], extra: dict[str, Any]) -> View:
    """Placements: ``items`` of {name, description, feasible, reason, metrics}."""
    rows = [(i["name"], i["description"] or "", i["metrics"], i["reason"] or "") for i in items]
    csv_rows = [{"name": i["name"], "feasible": i["feasible"], "reason": i["reason"], **(i["metrics"] or {})}
                for i in items]
    tables = serving_table(rows, title, caption)
    tables += [f"{u['device']} cannot run {', '.join(u['stages'])}: {u['reason']}"
               for u in extra.get("infeasible_devices", [])]
    return View(tables=tables, data={**extra, "placements": items}, rows=csv_rows)


def pareto_view(configs: list[dict[str, Any]], comparisons: list[dict[str, Any]], baseline: str,
                extra: dict[str, Any], note: str = "") -> View:
    req = extra.get("request") or {}
    workload = (f"{extra['target']}, {req['isl']} in / {req['osl']} out, {req['mode']}"
                if extra.get("target") and req else "")
    tables: list[RenderableType] = [frontier_table(c["name"], c["frontier"], c["description"] + (
        f"; formats {formats_text(c)}" if c.get("target_formats") else "") + (
        f"; no point: {c['why_empty']}" if c.get("why_empty") else ""), workload) for c in configs]
    if comparisons:
        tables.append(comparison_table(comparisons, baseline, extra.get("axis", "kw")))
        if configs and not configs[0]["frontier"]:
            tables.append(f"The baseline {baseline} has no point, so no ratio can be taken: give a --placement with "
                          "points first.")
    if extra.get("overrides"):
        tables.append(f"What-if (every configuration): {', '.join(extra['overrides'])}.")
    if note:
        tables.append(note)
    rows = [{"configuration": c["name"], **p} for c in configs for p in c["frontier"]]
    return View(tables=tables, data={**extra, "configurations": configs, "comparisons": comparisons}, rows=rows)


def compare_view(model_id: str, batch: Any, rows: list[dict[str, Any]], context: int, prompt: int,
                 overrides: Sequence[str] = (), note: str = "") -> View:
    tables: list[RenderableType] = list(compare_table(model_id, batch, rows, context, prompt, overrides, note))
    tables += formats_lines({r["name"]: brief(r["formats"]) for r in rows if r.get("formats")}, "group")
    for row in rows:
        if row.get("elasticity"):
            tables.append(elasticity_table(row["name"], row["elasticity"], int(np.ravel(batch)[0]), context))
    csv_rows = []
    for row in rows:
        for i, d in enumerate(row.get("decode") or []):
            kw = row.get("tokens_per_s_per_kw")
            csv_rows.append({"name": row["name"], "group": row["group"], **{f"decode_{k}": v for k, v in d.items()},
                             "prefill_time_s": row["prefill"]["time_s"], "max_batch": row["max_batch"],
                             "tokens_per_s_per_kw": kw[i] if kw else None,
                             "usd_per_million_output_tokens": row["usd_per_million_output_tokens"][i]})
        if "error" in row:
            csv_rows.append({"name": row["name"], "group": row["group"], "error": row["error"]})
    return View(tables=tables, data={"model": model_id, "context": context, "prompt": prompt,
                                     "overrides": list(overrides), "rows": rows}, rows=csv_rows)


def diagnosis_dict(d: Diagnosis) -> dict[str, Any]:
    m = d.measurement
    return {"model": d.model, "group": d.group, "batch": m.batch, "isl": m.input_tokens, "osl": m.output_tokens,
            "serving": m.serving, "measured_tpot_s": m.tpot_s, "measured_tokens_per_s_per_user": 1 / m.tpot_s,
            "predicted_tpot_s": d.predicted_tpot_s, "bytes_per_step_per_device": d.bytes_per_step,
            "flop_per_step_per_device": d.flop_per_step, "achieved_bytes_per_s": d.achieved_bytes_per_s,
            "achieved_flop_per_s": d.achieved_flop_per_s, "peak_bytes_per_s": d.peak_bytes_per_s,
            "peak_flop_per_s": d.peak_flop_per_s, "compute_class": d.compute_class, "mbu": d.mbu, "mfu": d.mfu,
            "modelled_compute_share": d.modelled_compute_share, "binding": d.binding, "advice": d.advice,
            "source": m.source}


def diagnosis_view(d: Diagnosis, overrides: Sequence[str] = ()) -> View:
    data = {**diagnosis_dict(d), "overrides": list(overrides)}
    return View(tables=[diagnosis_table(data)], data=data, rows=[data])


def validation_view(v: Validation, path: str, fit: Mapping[str, Any] | None = None, same_data: bool = True,
                    repeats: Mapping[str, Any] | None = None, shown: int | None = VALIDATE_ROWS_SHOWN) -> View:
    """Rows (in the terminal the ``shown`` worst, None: all; JSON and CSV carry every one), errors by group and
    rows not predicted; ``fit``: the profile's calibration record; ``same_data``: whether the profile was fitted
    on these rows; ``repeats``: the data's repeated measurements (:func:`roofline.evidence.repeats.repeat_summary`)."""
    data = {"data": path, "rows": v.rows, "summary": v.summary, "skipped": v.skipped, "calibration": dict(fit or {}),
            "calibrated_on_this_data": same_data, "repeats": dict(repeats or {"pairs": 0})}
    tables: list[RenderableType] = [validation_table(v, path, shown), validation_summary_table(v, fit, same_data, repeats)]
    if v.skipped:
        tables.append(skipped_table(v.skipped))
    return View(tables=tables, data=data, rows=v.rows)


def calibration_view(d: dict[str, Any]) -> View:
    rows = [{"parameter": k, "default": v, **{f: d["families"][f][k] for f in d["families"]}}
            for k, v in d["default"].items()]
    return View(tables=[calibration_table(d)], data=d, rows=rows)


def layer_fit_view(fit: Any, path: str) -> View:
    """A family's fitted per-layer latencies, the rows they come from and the held-out errors."""
    t = house_table(title=f"{fit.family}: per-layer stage latency fitted on its smallest models ({path})",
              caption=f"layer_overhead = {fit.layer_overhead_s * 1e6:.1f} us"
                      + (f", moe_layer_overhead = {fit.moe_layer_overhead_s * 1e6:.1f} us"
                         if fit.moe_layer_overhead_s is not None else "")
                      + f" (write these into hardware_specs/execution/{fit.family}.toml). Held-out rows were not fitted.")
    for c in ("row", "role", "value"):
        t.add_column(c, justify="right" if c == "value" else "left")
    rows = []
    for rid, v in fit.fitted_rows.items():
        t.add_row(rid, "fitted: implied per-layer latency", f"{v * 1e6:.1f} us")
        rows.append({"id": rid, "role": "fitted", "implied_layer_s": v})
    for rid, e in fit.held_out_errors.items():
        t.add_row(rid, "held out: error", f"{e:+.0%}")
        rows.append({"id": rid, "role": "held out", "error": e})
    data = {"family": fit.family, "layer_overhead_s": fit.layer_overhead_s,
            "moe_layer_overhead_s": fit.moe_layer_overhead_s, "fitted_rows": fit.fitted_rows,
            "held_out_errors": fit.held_out_errors, "data": path}
    return View(tables=[t], data=data, rows=rows)


def family_fit_view(fit: Any, path: str) -> View:
    """A non-GPU family's fitted profile fields and its errors: blind (the estimates), in-sample, held out."""
    t = house_table(title=f"{fit.family}: execution profile fitted on {fit.rows} rows of {fit.sources} publications ({path})",
               caption=f"Held out: each publication predicted by a fit on the others. scripts/fit_families.py writes "
                       f"the values into hardware_specs/execution/{fit.family}.toml.")
    for c in ("field", "estimate", "fitted"):
        t.add_column(c, justify="left" if c == "field" else "right")
    for k, v in fit.values.items():
        t.add_row(k, f"{fit.estimates[k]:.4g}", f"{v:.4g}")
    blind = np.abs(list(fit.blind_errors.values()))
    t.add_row("median |error|: estimates / in-sample / held out",
              f"{np.median(blind):.0%}" if blind.size else "—",
              f"{fit.median_abs_error:.0%} / {fit.held_out_median_abs_error:.0%}")
    rows = [{"id": k, "in_sample_error": e, "held_out_error": fit.held_out_errors.get(k),
             "blind_error": fit.blind_errors.get(k)} for k, e in fit.in_sample_errors.items()]
    return View(tables=[t], data={**fit.to_dict(), "data": path}, rows=rows)


def power_fit_view(fit: Any, path: str) -> View:
    """The GPU family's fitted busy-power floor: power rows before and after, J-per-token rows as a check."""
    after = np.abs(list(fit.fitted_rows.values()))
    check = np.abs(list(fit.checked_rows.values()))
    t = house_table(title=f"gpu: busy-power floor fitted on measured power ({path})",
               caption=", ".join(f"{k} = {v:.2f}" for k, v in fit.floors.items()) + " of TDP (write them into "
                       "hardware_specs/execution/gpu.toml). Power rows were fitted; J-per-token rows were not.")
    for c in ("rows", "n", "median abs error"):
        t.add_column(c, justify="left" if c == "rows" else "right")
    t.add_row("power, linear utilisation alone (floor 0)", str(after.size), f"{fit.median_abs_error_before:.0%}")
    t.add_row("power, floors by bound", str(after.size), f"{np.median(after):.0%}" if after.size else "—")
    t.add_row("J per output token (check)", str(check.size), f"{np.median(check):.0%}" if check.size else "—")
    data = {"family": "gpu", **fit.floors, "fitted_rows": fit.fitted_rows,
            "checked_rows": fit.checked_rows, "median_abs_error_before": fit.median_abs_error_before, "data": path}
    rows = [{"id": k, "role": "fitted", "error": v} for k, v in fit.fitted_rows.items()]
    rows += [{"id": k, "role": "check", "error": v} for k, v in fit.checked_rows.items()]
    return View(tables=[t], data=data, rows=rows)


# ------------------------------------------------------------------- sizing
SIZE_FIELDS = ("device", "placement", "feasible", "replicas", "group", "devices", "prefill_groups", "batch_per_replica", "gamma",
               "tokens_per_s_per_user", "ttft_s", "tokens_per_s_per_kw", "usd_per_million_output_tokens", "reason")


def usd_cell(v: float) -> str:
    return "—" if not math.isfinite(v) else f"{v:.3g}" if v < 10 else f"{v:,.1f}" if v < 1000 else f"{v:,.0f}"


def size_option_dict(o: Any) -> dict[str, Any]:
    d = {k: getattr(o, k) for k in SIZE_FIELDS if k != "feasible"}
    return {"feasible": o.feasible, **d, "formats": dict(o.target_formats or o.formats) or None,
            "draft_formats": dict(o.draft_formats) or None, "reason": o.reason or None}


def _formats_used(options: Sequence[Any]) -> str:
    """What each device kind was sized with ("b200: fp8 (KV bf16, activations bf16)", :func:`brief`): the
    defaults differ by device (bf16 where native), so the caption says which applied."""
    seen: dict[str, str] = {}
    for o in options:
        if (o.target_formats or o.formats) and o.device not in seen:
            seen[o.device] = brief(o.target_formats or o.formats)
    for o in options:   # a speculative option's draft, once per device kind
        if o.draft_formats and f"{o.device} draft" not in seen:
            seen[f"{o.device} draft"] = brief(o.draft_formats)
    return "; ".join(f"{dev}: {text}" for dev, text in seen.items())


def size_table(title: str, options: Sequence[Any], caption: str) -> list[Any]:
    """Feasible options, best first, then one line per device kind that cannot meet the target."""
    t = house_table(title=title, caption=caption)
    for c in ("group", "placement", "reps", "devices", "batch", "tok/s\n/user", "TTFT\nms", "tok/s\n/kW",
              "$/Mtok\nout"):
        t.add_column(c, justify="left" if c in ("group", "placement") else "right", no_wrap=c in ("group", "placement"))
    for o in options:
        if o.feasible:
            t.add_row(o.group, o.placement + (f" γ{o.gamma}" if o.gamma else ""), f"{o.replicas:,}", f"{o.devices:,}",
                      f"{o.batch_per_replica:,}", rate_cell(o.tokens_per_s_per_user), ms_cell(o.ttft_s),
                      rate_cell(o.tokens_per_s_per_kw), usd_cell(o.usd_per_million_output_tokens))
    out: list[Any] = [t] if t.row_count else [f"{title}: no option meets the target."]
    failed: dict[tuple[str, str], list[str]] = {}
    for o in options:
        if not o.feasible:
            failed.setdefault((o.device, o.reason), []).append(o.placement)
    return out + [f"{dev} ({', '.join(kinds)}): {reason}" for (dev, reason), kinds in failed.items()]


def _copies(item: dict[str, Any]) -> str:
    """How many copies of one replica's command the sized deployment runs (and its whole prefill groups)."""
    n, pre = item.get("replicas", 1), item.get("prefill_groups", 0)
    text = f"run {n} replica{'s' if n != 1 else ''} of this command (the users spread evenly over them)"
    return text + (f", beside {pre} prefill group{'s' if pre != 1 else ''} of the same shape" if pre else "")


def _launch_dict(item: dict[str, Any]) -> dict[str, Any]:
    cmd = item.get("launch")
    where = {"device": item["device"], "placement": item["placement"], "replicas": item.get("replicas"),
             "prefill_groups": item.get("prefill_groups")}
    if cmd is None:
        return {**where, "error": item["error"]}
    return {**where, "engine": cmd.engine, "argv": list(cmd.argv), "files": dict(cmd.files), "notes": list(cmd.notes),
            "command": cmd.text}


def size_view(model_id: str, target: Any, options: Sequence[Any], prices: Any, launches: Sequence[dict[str, Any]],
              overrides: Sequence[str] = (), note: str = "") -> View:
    """Sizing: the fewest devices per device kind and placement, infeasible kinds with their reason, prices
    used, and any emitted launch commands; ``note``: a caveat for the caption."""
    req = target.request
    ttft = f", TTFT <= {target.max_ttft_s * 1e3:g} ms" if math.isfinite(target.max_ttft_s) else ""
    title = (f"{model_id}: {target.users:,} users at >= {target.min_tokens_per_s_per_user:g} tok/s each{ttft}, "
             f"{req.input_tokens} in / {req.output_tokens} out")
    priced = sorted({o.device for o in options} & set(prices.by_device))
    used = _formats_used(options)
    caption = ("A lower bound: steady-state continuous batching with every user active, no queueing or arrival "
               "bursts (size --rate sizes a request rate through queues). devices = replicas x group (+ whole "
               "prefill groups of the same shape, shared by the replicas, when disaggregated); tok/s/kW and $/Mtok "
               "are the whole deployment's. "
               + (f"Formats: {used}. " if used else "")
               + ("Prices: " + "; ".join(f"{d} ${prices.by_device[d].usd_per_hour:.3g}/h"
                                          + (f" ({prices.by_device[d].date})" if prices.by_device[d].date else " (given)")
                                          for d in priced) + "." if priced else "No device here has a price: "
                  "give --usd-per-device-hour ID=USD.")
               + (f" Electricity ${prices.usd_per_kwh:g}/kWh." if prices.usd_per_kwh else "")
               + (f" What-if: {', '.join(overrides)}." if overrides else "") + note)
    tables: list[Any] = size_table(title, options, caption)
    for item in launches:   # shell lines, printed as they are: a comment's every line starts with #
        cmd = item.get("launch")
        if cmd is None:
            tables.append(Text("\n" + _comment(f"{item['device']} {item['placement']}: {item['error']}")))
            continue
        tables.append(Text("\n" + _comment(f"{item['device']} {item['placement']}: {cmd.engine}; {_copies(item)}")
                           + f"\n{cmd.text}" + "".join("\n" + _comment(f"note: {n}") for n in cmd.notes)))
    data = {"model": model_id, "users": target.users, "min_tokens_per_s_per_user": target.min_tokens_per_s_per_user,
            "max_ttft_s": target.max_ttft_s if math.isfinite(target.max_ttft_s) else None,
            "request": {"isl": req.input_tokens, "osl": req.output_tokens}, "lower_bound": True,
            "options": [size_option_dict(o) for o in options],
            "prices": {d: attrs.asdict(prices.by_device[d]) for d in priced}, "overrides": list(overrides),
            "launch": [_launch_dict(i) for i in launches]}
    return View(tables=tables, data=data, rows=[size_option_dict(o) for o in options], script=bool(launches))


def _comment(text: str) -> str:
    """``text`` as shell comment lines (each of its lines behind ``# ``)."""
    return "\n".join(f"# {line}" for line in text.splitlines() or [""])
