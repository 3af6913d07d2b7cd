"""``roofline stage`` (per-stage breakdown on one group) and ``roofline compare`` (groups side by side)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence

import numpy as np
from rich.console import Console

from ...errors import InfeasibleError
from ...physics import stages
from ...physics.timing import StageResult, datasheet_ridge, main_compute_class, require_feasible
from ...serving.compare import compare
from ...serving.whatif import WhatIf
from ...specs.execution import resolve_profile
from ...specs.groups import DeviceGroup
from ...specs.hf_config import load_model
from ...specs.params import EngineParams
from ...specs.resolve import resolve_group
from ...units import format_quantity
from ..options import (
    MODEL_HELP,
    Adder,
    UsageError,
    add_formats,
    add_prices,
    add_what_if,
    context_note,
    engine,
    formats,
    nonnegative,
    parse_ints,
    positive,
    price_list,
    refuse_repeats,
    what_if,
)
from ..output import emit
from ..render_common import shown_path
from ..render_stage import compare_view, stage_rows, stage_view


def _fixed_costs(params: EngineParams) -> str:
    """The profile's fixed costs that are not zero, e.g. ``30 µs/pass + 3.5 µs/kernel``."""
    parts = [(params.step_overhead_s, "pass"), (params.layer_overhead_s, "layer"),
             (params.moe_layer_overhead_s, "MoE layer"), (params.kernel_overhead_s, "kernel")]
    shown = [f"{format_quantity(v, 's')}/{what}" for v, what in parts if v > 0]
    return " + ".join(shown) or "no fixed costs"


def _beyond_domain(group: DeviceGroup, params: EngineParams) -> str:
    """How collectives leave the family's scale-up domain (``max_tp`` devices, one NVLink domain on GPUs): over
    the spec's scale-out link, or, where it has none, charged at the scale-up link's speed (said as a caveat)."""
    max_tp = resolve_profile(group.device, params).max_tp
    if group.tp * group.pp <= max_tp:
        return ""
    out = group.device.scale_out.bandwidth_bytes_per_s
    if out is not None:
        return (f" {group.tp * group.pp} devices span scale-up domains of {max_tp:.0f} (max_tp): collectives and "
                f"stage hops between domains run on the scale-out network ({out / 1e9:.0f} GB/s per device).")
    up = group.device.scale_up
    if up.torus is not None:   # a torus (TPU ICI, NeuronLink) joins the whole slice: max_tp is only a layout default
        if group.tp <= 1:      # pipeline stages only: their hops run on the torus too, and no collective crosses it
            return ""
        hops = up.ring_hops(group.tp)
        return (f" {group.tp * group.pp} devices, more than the {group.device.family} profile's default tensor-parallel "
                f"width ({max_tp:.0f}, max_tp): the scale-up link's {up.torus}-axis torus joins the whole slice, so a "
                f"reduce-scatter or all-gather over the {group.tp} tensor-parallel devices crosses {hops} hops (an "
                f"all-reduce, both: {2 * hops}) at that link's bandwidth (a slice beyond one pod would also cross the "
                "data-centre network, which the spec does not give).")
    return (f" {group.tp * group.pp} devices are more than the {group.device.family} profile's {max_tp:.0f}-device "
            f"scale-up domain (max_tp) and {group.device.id} has no scale-out link in its spec: everything is charged "
            f"at the scale-up link's bandwidth, so comm is understated (--set {group.device.id}.scale_out.bandwidth=...).")


def _tiers(params: EngineParams) -> str:
    """The memory tiers whose achieved fraction of peak differs from the profile's one (``(sram 90%)``)."""
    own = [f"{t} {v:.0%}" for t, v in sorted(params.tier_bandwidth_fraction.items())
           if abs(v - params.memory_bandwidth_fraction) > 1e-9]
    return f" ({', '.join(own)})" if own else ""


def _overlap(params: EngineParams) -> str:
    """How the profile overlaps compute and memory traffic, as the caption's formula."""
    roof = "max" if params.overlap_efficiency >= 1 else "R"
    if params.overlap == "kernel":
        return f"{roof}(matmul compute, weight reads) + {roof}(attention compute, KV reads)"
    return f"{roof}(compute, memory)"


def _roof(params: EngineParams) -> str:
    """The partial-overlap roofline R the formula uses, where the profile does not overlap fully."""
    if params.overlap_efficiency >= 1:
        return ""
    if params.overlap_efficiency < 0.005:   # the shipped GPU fit: nothing of the shorter hides under the longer
        return ", R(c, m) = c + m (within a kernel group nothing of the shorter hides under the longer)"
    return f", R(c, m) = max(c, m) + {1 - params.overlap_efficiency:.2f} min(c, m)"


def _prefill_share(params: EngineParams) -> str:
    """Prefill's share of peak FLOP/s where it reads differently from the decode share at the caption's precision."""
    prefill = f"{params.compute_fraction * params.prefill_compute_scale:.0%}"
    return f" (prefill {prefill})" if prefill != f"{params.compute_fraction:.0%}" else ""


def _caption(results: list[StageResult], params: EngineParams, device_path: str, ridge_moved: bool,
             notes: Sequence[str] = ()) -> str:
    f, family = results[0].formats, params.family
    ridge = "what-if" if ridge_moved else "datasheet"
    return (f"Formats: {f.brief()}.\n"
            f"time = {_overlap(params)} + comm + overhead{_roof(params)}; overhead = per-pass, per-layer and "
            "per-kernel fixed costs; unpacking weight-only formats (dequant) runs in the weight stream, m = the longer "
            "of the two (--json: overhead_s, dequant_s; bound mem:, comm there: memory:, communication; "
            "the serial upper bound is time_serial_s).\n"
            f"{family} profile: {params.memory_bandwidth_fraction:.0%} of peak bandwidth{_tiers(params)}, "
            f"{params.compute_fraction:.0%} of peak FLOP/s"
            + _prefill_share(params)
            + (f", times T / (T + {params.compute_half_tokens:.0f}) for a matmul over T tokens"
               if params.compute_half_tokens >= 0.5 else "")
            + (f", matmuls in tiles of {params.m_tile:.0f} token rows (a pass over fewer tokens computes a whole "
               "tile: small-batch decode can be compute-bound)" if params.m_tile > 1 else "")
            + f", {_fixed_costs(params)}; "
            f"ridge {results[0].ridge_flop_per_byte:.0f} FLOP/B ({ridge}); uniform expert routing; "
            f"{params.usable_memory_fraction:.0%} of memory usable."
            + "".join("\n" + n for n in notes) + f"\nSpec: {device_path}")


def cmd_stage(args: argparse.Namespace, console: Console) -> int:
    batch = np.array(parse_ints(args.batch, "--batch"))
    model = load_model(args.model)
    wi = what_if(args)
    group = resolve_group(args.device, tp=args.tp, ep=args.ep, dp=args.dp)
    wi.check_used([group.device])
    sheet, group = group, wi.apply_group(group)
    eng = engine(args, [group.device])
    params = eng.params
    kw = dict(params=params, **formats(args, model))
    if args.prompt is None and args.context < 1:
        raise UsageError("--context 0 leaves no prompt to prefill (--prompt defaults to --context); give --prompt N")
    prompt = args.prompt if args.prompt is not None else args.context
    results = [stages.prefill(model, group, prompt=prompt, batch=batch, chunk=args.chunk, **kw),
               stages.decode_step(model, group, batch=batch, context=args.context, **kw)]
    if args.gamma is not None:
        results.append(stages.verify(model, group, batch=batch, context=args.context, gamma=args.gamma, **kw))
    empty = [r for r in results if not np.any(r.fits)]
    if len(empty) == len(results):
        require_feasible(empty[0])  # nothing fits: one clear error instead of a table of OOM rows
    notes = []
    for r in empty:   # a stage that fits at no batch while another does: shown as "no fit", said why below
        try:
            require_feasible(r)
        except InfeasibleError as e:
            notes.append(str(e) + ".")
    if args.plot:
        from ..plot import check_plot_path, plot_roofline
        check_plot_path(args.plot)
        w = main_compute_class(model, group.device, results[0].formats)
        plot_roofline(group.device, results, args.plot, compute_class=w if w in group.device.peak_flop_per_s else "bf16",
                      title=f"{model.id} on {group.describe()}")
    if args.gamma is not None:
        checked = "the 1 token" if args.gamma == 0 else f"the {args.gamma + 1} tokens"
        notes.append(f"verify: tok/s counts {checked} a pass checks per sequence; how many it "
                     "keeps depends on the acceptance (roofline spec).")
    if wi:
        notes.append("What-if: " + ", ".join(wi.describe()) + ".")
    if group.pp > 1:
        notes.append(f"Pipeline (PP{group.pp}): the batch runs as min(batch, {group.pp}) microbatches that keep the "
                     f"stages busy, and a step takes {group.pp} stage-times of one microbatch, so comp, mem and FLOP/B "
                     "are one microbatch's and do not grow with the batch until it exceeds the stages.")
    if prompt > args.context:
        notes.append(f"Decode runs at context {args.context:,}, shorter than the {prompt:,}-token prompt prefilled: the "
                     "two are separate points, not one request (a request's decode context is at least its prompt).")
    notes += [n.strip() for n in (_beyond_domain(group, params), context_note(
        model, max(float(prompt), float(args.context) + (args.gamma or 0)))) if n.strip()]
    f = results[0].formats   # the ridge is the what-if's only where the what-if moved it
    ridge_moved = datasheet_ridge(model, sheet, f) != datasheet_ridge(model, group, f)
    caption = _caption(results, resolve_profile(group.device, params), shown_path(group.device.path), ridge_moved,
                       notes)
    emit(console, stage_view(model.id, group, results, caption, wi.describe(), notes), args, eng)
    return 0


#: a variant's group given with its shape: ``h200-sxm:8.hbm.bandwidth=...`` (head ``h200-sxm:8.``)
_VARIANT_GROUP = re.compile(r"^(?P<head>(?P<id>[^:;=.]+(?:\.[^:;=.]+)*):(?P<shape>\d+(?:[xX]\d+)?)\.)")


def _semicolon_parts(expr: str) -> list[str]:
    return [p.strip() for p in expr.split(";")]


def _variants(args: argparse.Namespace) -> tuple[list[tuple[str, DeviceGroup]], dict[str, list[str]]]:
    """``GROUP`` (``b200``, ``h100-sxm:2``, ``groq-lpu:8x8``) labelled with its shape, or
    ``NAME=ID.FIELD=VALUE[;ID.FIELD=VALUE]`` (a what-if variant of ``ID`` at ``--tp``), or
    ``NAME=ID:N.FIELD=VALUE[;...]`` (the variant on that group); with what each named variant changed (its
    overrides, described). Two entries with one name are a usage error."""
    out, changed = [], {}
    wi = what_if(args)
    for item in args.devices:
        name, eq, expr = item.partition("=")
        if eq and "=" not in expr and "." not in name and "." in expr:   # NAME=ID.FIELD: the value is missing
            raise UsageError(f"compare {item!r}: variant {name!r} gives no value, NAME=ID[:N].FIELD=VALUE "
                             f"(e.g. {item}=VALUE)")
        if eq and "=" not in expr:   # ID.FIELD=VALUE without a name: the field would be taken for the name
            raise UsageError(f"compare {item!r}: a what-if variant needs a name, NAME=ID[:N].FIELD=VALUE "
                             f"(e.g. fast={item})")
        if eq:
            shaped = _VARIANT_GROUP.match(expr)   # NAME=ID:N.FIELD=VALUE: the variant on that group
            if shaped:
                expr = ";".join(f"{shaped['id']}.{part[len(shaped['head']):]}" if part.startswith(shaped["head"]) else part
                                for part in _semicolon_parts(expr))
            sets = WhatIf.parse(expr.split(";"))
            group = resolve_group(f"{shaped['id']}:{shaped['shape']}" if shaped else sets.overrides[0].device_id,
                                  tp=None if shaped else args.tp)
            stray = [str(o) for o in sets.overrides if not o.names(group.device)]
            if stray:
                raise UsageError(f"compare variant {name!r}: each ';' part changes the variant's own device, "
                                 f"{group.device.id}.FIELD=VALUE; {stray[0]} names another")
            out.append((name, sets.apply_group(wi.apply_group(group))))
            changed[name] = sets.describe()
        else:   # --tp shapes only the groups given without their own :N (or a spec path)
            group = resolve_group(item, tp=None if ":" in item else args.tp)
            out.append((group.shape, group))
    refuse_repeats([n for n, _ in out], "compare (name variants apart: NAME=ID.FIELD=VALUE)")
    wi.check_used([g.device for _, g in out])
    return [(name, wi.apply_group(g)) for name, g in out], changed


def cmd_compare(args: argparse.Namespace, console: Console) -> int:
    model = load_model(args.model)
    batch = np.array(parse_ints(args.batch, "--batch"))
    variants, changed = _variants(args)
    fmt = formats(args, model)
    eng = engine(args, [g.device for _, g in variants])
    rows = compare(model, variants, batch=batch, context=args.context, prompt=args.prompt, formats=fmt,
                   params=eng.params, with_elasticity=args.elasticity,
                   prices=price_list(args, [g.device for _, g in variants]))
    data = []
    for r in rows:
        d: dict = {"name": r.name, "device": r.group.device.id, "group": r.group.shape,
                   **({"variant": changed[r.name]} if r.name in changed else {})}
        if r.decode is None or r.prefill is None:
            d["error"] = r.error
        elif not np.any(r.decode.fits) and not np.any(r.prefill.fits):   # no batch asked for fits: said, not a table
            d["error"] = r.decode.why_infeasible() or r.prefill.why_infeasible()
        else:
            d.update(formats=r.decode.formats.as_dict(),
                     decode=stage_rows(r.decode), prefill=stage_rows(r.prefill)[0], max_batch=r.max_batch,
                     tokens_per_s_per_kw=None if r.tokens_per_s_per_kw is None else np.ravel(r.tokens_per_s_per_kw).tolist(),
                     usd_per_million_output_tokens=np.ravel(np.asarray(r.usd_per_million_output_tokens, float)).tolist(),
                     power_note=r.power_note or None, elasticity=dict(r.elasticity) if r.elasticity else None)
        data.append(d)
    if all("error" in d for d in data):
        reasons = list(dict.fromkeys(d["error"] for d in data))   # one reason shared by every group is said once
        raise InfeasibleError(f"no group runs {model.id}: " + ("; ".join(f"{d['name']}: {d['error']}" for d in data)
                                                              if len(reasons) > 1 else reasons[0]))
    note = context_note(model, max(args.context, args.prompt))
    emit(console, compare_view(model.id, batch, data, args.context, args.prompt, what_if(args).describe(),
                               note=note), args, eng)
    return 0


def register(add: Adder) -> None:
    sp = add("stage", cmd_stage, "per-stage time, bounds, binding resource and memory of a model on a device group",
             profile=True)
    sp.add_argument("model", help="model: " + MODEL_HELP)
    sp.add_argument("device", help="device group: ID, ID:N (N in tensor parallel) or ID:TPxPP, or a .toml path")
    sp.add_argument("--batch", default="1", help="batch sizes: 1,8,64 or 1..8 (default 1)")
    sp.add_argument("--context", type=nonnegative, default=8192,
                    help="tokens in the KV cache at decode (default 8192; 128k works)")
    sp.add_argument("--prompt", type=positive, default=None, help="prefill length (default: --context)")
    sp.add_argument("--chunk", type=positive, default=None, help="chunked-prefill chunk size")
    sp.add_argument("--gamma", type=nonnegative, default=None, help="also show verify of gamma+1 tokens")
    sp.add_argument("--tp", type=positive, default=None, help="tensor-parallel devices (or write ID:N)")
    sp.add_argument("--ep", type=positive, default=None, help="expert-parallel degree (divides the TP degree)")
    sp.add_argument("--dp", type=positive, default=None,
                    help="attention data-parallel degree (divides the TP degree; DeepSeek-style DP attention)")
    add_formats(sp)
    add_what_if(sp)
    sp.add_argument("--plot", default=None, metavar="FILE.png", help="draw the roofline chart (needs the plot extra)")

    sp = add("compare", cmd_compare, "device groups or what-if variants side by side (decode, prefill, memory, tok/s/kW)",
             profile=True)
    sp.add_argument("model", help="model: " + MODEL_HELP)
    sp.add_argument("devices", nargs="+", metavar="GROUP|NAME=ID[:N].FIELD=VALUE[;...]",
                    help="device groups (h100-sxm:2 b200), or what-if variants (fast=h200-sxm.hbm.bandwidth=9.6TB/s)")
    sp.add_argument("--batch", default="1,64", help="decode batch sizes (default 1,64)")
    sp.add_argument("--context", type=nonnegative, default=8192, help="decode context (default 8192)")
    sp.add_argument("--prompt", type=positive, default=8192, help="prefill length (default 8192)")
    sp.add_argument("--tp", type=positive, default=None, help="TP for groups given without :N")
    add_formats(sp)
    sp.add_argument("--elasticity", action="store_true", help="d ln(decode time) / d ln(spec field), first batch")
    add_prices(sp)
    add_what_if(sp)

