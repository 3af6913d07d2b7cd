"""``roofline placements`` (every assignment of stages to devices) and ``roofline pareto`` (frontiers)."""

from __future__ import annotations

import argparse
import math
from typing import Any

import attrs
import numpy as np
from rich.console import Console

from ...errors import RooflineError
from ...physics.speculative import Acceptance
from ...serving.admission import Admission
from ...serving.frontier import compare_frontiers, pareto_frontier
from ...serving.load import Workload
from ...serving.placements import enumerate_placements
from ...serving.serve import Placement, Request
from ...serving.whatif import WhatIf
from ...serving_api import deployment, evaluate_serving  # names resolved at the door
from ...specs.execution import resolve_profile
from ...specs.hf_config import load_model
from ...specs.links import get_link
from ...specs.params import EngineParams
from ...specs.placement import HEAD_KINDS
from ...specs.prices import Prices
from ...specs.resolve import resolve_device, resolve_group
from ..options import (
    MODEL_HELP,
    Adder,
    Engine,
    UsageError,
    acceptance,
    add_acceptance,
    add_formats,
    add_load_options,
    add_prices,
    add_request,
    add_what_if,
    context_note,
    engine,
    formats,
    idle_note,
    load_workload,
    nonnegative,
    number,
    parse_ints,
    positive,
    price_list,
    refuse_rate_options_without_rate,
    refuse_repeats,
    refuse_speculation_without_draft,
    scheduler_note,
    serving_knobs,
    what_if,
)
from ..output import emit
from ..render_common import formats_fields
from ..render_load import with_frontier_load_table, with_load_table
from ..render_serving import pareto_view, serving_point, serving_rows_view

PLACEMENT_KEYS = {"decode", "verify", "prefill", "draft", "draft-kind", "head-layers", "draft-vocab", "kv-link",
                  "draft-link"}
PLACEMENT_SYNTAX = ("'NAME: decode=GROUP[, prefill=GROUP][, draft=GROUP|target][, draft-kind=model|mtp|eagle|eagle3]"
                    "[, head-layers=N][, draft-vocab=N][, kv-link=L][, draft-link=L]'")


def parse_placement(text: str, *, draft_model: str | None, wi: WhatIf) -> Placement:
    """``'NAME: prefill=b200:8, decode=b200:8, draft=corsair:1x2'`` (``draft=target``: on the decode group)."""
    name, sep, body = text.partition(":")
    if not sep or not body.strip() or "=" not in body:
        raise UsageError(f"--placement {text!r}: expected {PLACEMENT_SYNTAX}")
    if "=" in name or "," in name or not name.strip():   # 'prefill=h100-sxm:4, ...': the name was left out
        raise UsageError(f"--placement {text!r}: needs a name first, 'NAME: prefill=..., decode=...' "
                         f"(expected {PLACEMENT_SYNTAX})")
    keys: dict[str, str] = {}
    last = ""
    for item in body.split(","):
        k, eq, v = item.partition("=")
        key = k.strip().lower().replace("_", "-")
        if not eq and last in ("kv-link", "draft-link"):   # a link written BANDWIDTH,LATENCY: the comma is its own
            keys[last] += "," + item.strip()
            continue
        if not eq:
            raise UsageError(f"--placement {text!r}: {item.strip()!r} is not KEY=VALUE")
        last = key
        if key in keys:
            raise UsageError(f"--placement {text!r}: {key} is given twice")
        keys[key] = v.strip()
    unknown = set(keys) - PLACEMENT_KEYS
    if unknown:
        raise UsageError(f"--placement {text!r}: unknown keys {sorted(unknown)} (known: {', '.join(sorted(PLACEMENT_KEYS))})")
    decode = keys.get("decode") or keys.get("verify")
    if not decode:
        raise UsageError(f"--placement {text!r}: needs decode=GROUP (or verify=GROUP)")
    kind = keys.get("draft-kind") or ("model" if "draft" in keys else None)
    if kind == "model" and not draft_model:
        raise UsageError(f"--placement {text!r} has a draft: give the draft model with --draft")
    def whole(key: str) -> int:
        try:
            return positive(keys[key])
        except argparse.ArgumentTypeError as e:
            raise UsageError(f"--placement {text!r}: {key}={keys[key]!r}: {e}") from None
    head_layers = whole("head-layers") if "head-layers" in keys else 1
    vocab = whole("draft-vocab") if "draft-vocab" in keys else None
    if vocab is not None and kind not in HEAD_KINDS:
        raise UsageError(f"--placement {text!r}: draft-vocab={vocab} applies to a head of the target "
                         "(draft-kind=mtp, eagle or eagle3), which scores a vocabulary of its own")
    draft = keys.get("draft")

    def group(g: str) -> Any:
        return wi.apply_group(resolve_group(g))

    return Placement(
        name=name.strip(), decode=group(decode), prefill=group(keys["prefill"]) if "prefill" in keys else None,
        draft=group(draft) if draft and draft != "target" else None,
        draft_model=load_model(draft_model) if draft_model and kind == "model" else None, draft_kind=kind,
        head_layers=head_layers, draft_vocab=vocab, kv_link=get_link(keys.get("kv-link", "nvlink")),
        draft_link=get_link(keys.get("draft-link", "pcie5")))


@attrs.frozen(kw_only=True)
class ServingRun:
    """What every placement of one ``placements`` or ``pareto`` command is evaluated with."""

    request: Request
    batch: Any                      # a batch (placements) or a column of batches (pareto)
    gamma: Any                      # the draft length, or a row of them
    acceptance: Acceptance | None
    engine: Engine
    knobs: dict[str, Any]           # the scheduler's (serving_knobs)
    prices: Prices
    formats: dict[str, Any]         # the target's formats as given (options.formats)
    workload: Workload | None = None   # --rate's (check_rate_options), None without it

    @property
    def params(self) -> EngineParams:
        return self.engine.params


def _groups_devices(p: Placement) -> list[Any]:
    return [g.device for g in (p.decode, p.prefill, p.draft) if g is not None]


def _placement_devices(args: argparse.Namespace, wi: Any) -> list[Any]:
    """--devices as device records (what-ifs applied): ids, each once, no group syntax (placements picks the
    groups)."""
    names = [d.strip() for d in args.devices.split(",") if d.strip()]
    if not names:
        raise UsageError("--devices: give at least one device id")
    refuse_repeats(names, "--devices")
    refuse_speculation_without_draft(args)
    grouped = [n for n in names if ":" in n and not n.endswith(".toml")]
    if grouped:
        raise UsageError(f"--devices {grouped[0]}: placements sizes each stage's group itself (the smallest layout of "
                         f"its family that holds the stage), so it takes device ids such as "
                         f"{grouped[0].partition(':')[0]}; pareto --placement takes explicit groups")
    devices = [resolve_device(n) for n in names]
    wi.check_used(devices)
    return [wi.apply(d) for d in devices]


def _placement_item(args: argparse.Namespace, c: Any, run: ServingRun) -> dict[str, Any]:
    """One candidate placement evaluated at the batch: its serving point, or why it has none."""
    point, reason = None, ""
    if c.placement is not None:
        try:
            r = evaluate_serving(args.target, c.placement, run.request, batch=run.batch,
                                 gamma=run.gamma if c.placement.speculative else 0, acceptance=run.acceptance,
                                 mode=args.mode, target_formats=run.formats, params=run.params,
                                 prices=run.prices, **run.knobs)
            point = serving_point(r, 0)
            reason = r.energy_note or r.why_infeasible(0)
        except RooflineError as e:  # a placement that cannot be evaluated is listed with why
            reason = str(e)
    item = {"name": c.name, "description": c.placement.describe() if c.placement else None,
            "feasible": bool(point and point["fits"]), "reason": reason or None, "metrics": point}
    if c.placement is not None:   # each figure's range: the devices its stages ran on (serving.trust)
        item["stage_devices"] = {s: g.device.id if g is not None else None for s, g in
                                 (("prefill", c.placement.prefill), ("decode", c.placement.decode),
                                  ("draft", c.placement.draft))}
    if run.workload is not None and c.placement is not None:
        item["load"] = load_at_rate(args, run.workload, c.placement, run.formats, run.params)
    return item


def check_rate_options(args: argparse.Namespace) -> Workload | None:
    """--rate's workload, read and checked once before anything is evaluated (a bad --prefix-hit or --lengths
    fails the command once, not in every row); None without --rate, whose workload options are refused."""
    if args.rate is None:
        refuse_rate_options_without_rate(args)
        return None
    if args.mode != "continuous":
        raise UsageError(f"--rate queues arrivals on continuously batched replicas; --mode {args.mode} has no "
                         "arrivals to queue (drop --rate, or use --mode continuous)")
    number(args.rate, "--rate", positive=True)
    return load_workload(args)


def cmd_placements(args: argparse.Namespace, console: Console) -> int:
    workload = check_rate_options(args)
    wi = what_if(args)
    devices = _placement_devices(args, wi)
    gamma = 5 if args.gamma is None else args.gamma
    request = Request(input_tokens=args.isl, output_tokens=args.osl)
    acc = acceptance(args) if args.draft else None
    eng, knobs, prices = engine(args, devices), serving_knobs(args), price_list(args, devices)
    target = load_model(args.target)
    run = ServingRun(request=request, batch=args.batch, gamma=gamma, acceptance=acc, engine=eng, knobs=knobs,
                     prices=prices, formats=formats(args, target), workload=workload)
    cands = enumerate_placements(target, devices, request, batch=args.batch,
                                 draft_model=load_model(args.draft) if args.draft else None, mode=args.mode,
                                 target_formats=run.formats, params=run.params, knobs=run.knobs)
    items: list[dict[str, Any]] = []
    cannot: dict[tuple[str, str], list[str]] = {}
    for c in cands:
        for f in c.failures:   # a stage a device kind cannot run at all: said once, not per placement
            cannot.setdefault((f.device, f.reason), []).append(f.stage)
        if not c.failures:
            items.append(_placement_item(args, c, run))
    title = (f"placements of {args.target}, {args.isl} in / {args.osl} out, batch {args.batch}"
             + (f", gamma {gamma} (speculative)" if args.draft else "") + f", {args.mode}" + scheduler_note(args))
    pools = ("fractional devices are prefill groups counted by the share of time they are busy, so their TTFT is "
             "one prompt's prefill with no wait for prompts ahead of it (a lower bound under load)."
             if args.mode != "waves" else "a wave's prompts are prefilled on the decode group, its TTFT the mean of "
             "theirs (about half the wave's prefill).")
    caption = ("Each stage on the smallest group that holds it, in its device family's layout (--json has the "
               "groups). Throughput, devices and power per replica; " + pools
               + (f" What-if: {', '.join(wi.describe())}." if wi else "")
               + context_note(target, args.isl + args.osl) + idle_note(devices)
               + stream_note([c.placement for c in cands if c.placement is not None and not c.failures], run.params))
    unplaceable = [{"device": dev, "stages": sorted(set(stages)), "reason": reason}
                   for (dev, reason), stages in cannot.items()]
    view = serving_rows_view(title, caption, items, {
        "target": args.target, "request": _request_dict(args), "batch": args.batch,
        "gamma": gamma if args.draft else None, "rate_per_s": number(args.rate, "--rate") if args.rate else None,
        "overrides": wi.describe(), "infeasible_devices": unplaceable})
    if args.rate is not None:
        view = with_load_table(view, items, number(args.rate, "--rate"))
    emit(console, view, args, run.engine)
    return 0


def load_at_rate(args: argparse.Namespace, workload: Workload, placement: Placement, fmt: Any, params: Any,
                 max_slots: int | None = None) -> dict[str, Any]:
    """One replica of ``placement`` at --rate (a disaggregated one with the fewest prefill groups that keep its
    pool below saturation, plus one; ``max_slots``: its scheduler's cap on running requests), as a dict of its
    percentiles, or why none."""
    if placement.speculative:
        return {"reason": "speculative decoding under load is not modelled"}
    rate = number(args.rate, "--rate", positive=True)
    try:
        d = deployment(args.target, placement, workload, token_budget=args.token_budget, params=params,
                       formats=fmt, admission=Admission(poll_steps=args.poll_steps), max_slots=max_slots)
        if placement.prefill is not None:
            d = attrs.evolve(d, prefill_groups=math.floor(rate * d.workload.lengths.mean(d.prefill_s)) + 1)
        r = d.at([rate])
    except RooflineError as e:
        return {"reason": str(e)}
    if not bool(r.stable[0]):
        return {"reason": f"over capacity: one replica sustains {r.capacity_per_s:.3g} requests/s"}
    keys = ("utilisation", "prefill_utilisation", "ttft_p50_s", "ttft_p99_s", "itl_p50_s", "itl_p99_s",
            "tpot_p99_s", "e2e_p99_s")
    return {"prefill_groups": d.prefill_groups if placement.prefill is not None else 0,
            **{k: float(getattr(r, k)[0]) for k in keys}}


def _request_dict(args: argparse.Namespace) -> dict[str, Any]:
    return {"isl": args.isl, "osl": args.osl, "mode": args.mode, "token_budget": args.token_budget,
            "poll_steps": args.poll_steps}


def _comparisons(placements: list[Placement], frontiers: list[Any], axis: str) -> list[dict[str, Any]]:
    """Each placement's frontier against the first's, the efficiency-optimised point named by the axis (energy-
    or cost-optimised) and the efficiency it sits at (tokens/s per kW or tokens per USD)."""
    best, y = ("energy_optimised", "tokens_per_s_per_kw") if axis == "kw" else ("cost_optimised", "tokens_per_usd")
    out = []
    for p, f in zip(placements[1:], frontiers[1:]):
        c = compare_frontiers(frontiers[0], f) if len(f) and len(frontiers[0]) else None
        out.append({"name": p.name, "against": placements[0].name,
                    "interactivity_optimised": c.interactivity_optimised if c else None,
                    best: c.efficiency_optimised if c else None,
                    f"{best}_{y}": c.efficiency_optimised_at if c else None,
                    "max_ratio": c.max_ratio if c else None})
    return out


def _why_empty(r: Any) -> str:
    """Why a placement has no point on its frontier: the model does not fit (bytes needed against usable, as
    `stage` says it), a step's token budget cannot keep up, or no point has a known power."""
    if np.any(r.fits):
        return r.energy_note or "no feasible point has a known power"
    starved = np.flatnonzero(np.ravel(np.broadcast_to(r.budget_starved, r.batch.shape)))
    return r.why_infeasible(int(starved[0]) if starved.size else 0)


def _why_all_empty(configs: list[dict[str, Any]], results: list[Any], token_budget: int) -> str:
    """Why no configuration has a point: each one's reason (one reason shared by all said once), and the flag to
    raise where a step's token budget cannot keep up."""
    reasons = {c["name"]: c["why_empty"] for c in configs}
    said = (next(iter(reasons.values())) if len(set(reasons.values())) == 1
            else "; ".join(f"{name}: {why}" for name, why in reasons.items()))
    starved = any(r is not None and np.any(r.budget_starved) for r in results)
    return ("no configuration has a feasible point with known power: " + said
            + (f"; raise --token-budget (now {token_budget})" if starved else ""))


def _check_pareto(args: argparse.Namespace, placements: list[Placement], acc: Any, prices: Any) -> None:
    """Refuse options the placements cannot use: an acceptance or a gamma with no speculative placement, a wave
    with a separate prefill group, and --axis usd with a device that has no price."""
    drafts = ("draft=GROUP or draft=target with --draft, or draft-kind=mtp, eagle or eagle3); none of these placements "
              "drafts")
    if acc is None and any(x is not None for x in (args.alpha, args.acceptance_length, args.alpha_by_gamma)):
        raise UsageError("an acceptance (--alpha ...) applies to a speculative placement (" + drafts)
    if acc is None and args.gamma is not None:
        raise UsageError("--gamma (a draft length) applies to a speculative placement (" + drafts)
    split = [p.name for p in placements if p.prefill is not None]
    if args.mode == "waves" and split:
        raise UsageError(f"--mode waves prefills a wave on the decode group; {', '.join(split)} has a separate "
                         "prefill group (drop its prefill=, or use --mode continuous)")
    if args.axis == "usd":
        unpriced = sorted({d.id for p in placements for d in _groups_devices(p)} - set(prices.by_device))
        if unpriced:
            raise UsageError(f"--axis usd: no price for {', '.join(unpriced)}; give --usd-per-device-hour ID=USD")


def _frontier_of(args: argparse.Namespace, p: Placement, run: ServingRun) -> tuple[dict[str, Any], Any, Any]:
    """One placement's configuration record, its frontier on the axis and its serving result (None where it
    cannot be evaluated: no format its devices share; said in the record, not fatal)."""
    try:
        r = evaluate_serving(args.target, p, run.request, batch=run.batch,
                             gamma=run.gamma if p.speculative else 0, acceptance=run.acceptance,
                             mode=args.mode, target_formats=run.formats, params=run.params,
                             prices=run.prices, **run.knobs)
    except RooflineError as e:
        config: dict[str, Any] = {"name": p.name, "description": p.describe(), "target_formats": None,
                                  "prefill_formats": None, "draft_formats": None, "energy_note": None, "frontier": [],
                                  "why_empty": str(e)}
        return config, pareto_frontier([], []), None
    efficiency = r.tokens_per_s_per_kw if args.axis == "kw" else 1e6 / r.usd_per_million_output_tokens
    f = pareto_frontier(r.tokens_per_s_per_user, efficiency, r.fits)
    config = {"name": p.name, "description": p.describe(), **formats_fields(r), "energy_note": r.energy_note or None,
              "frontier": [serving_point(r, int(i)) for i in f.index]}
    if not config["frontier"]:   # an empty frontier says why, as the command does when all are empty
        config["why_empty"] = _why_empty(r)
    return config, f, r


def cmd_pareto(args: argparse.Namespace, console: Console) -> int:
    if not args.placement:
        raise UsageError(f"give at least one --placement {PLACEMENT_SYNTAX}")
    workload = check_rate_options(args)
    if args.plot:
        from ..plot import check_plot_path
        check_plot_path(args.plot)
    wi = what_if(args)
    placements = [parse_placement(p, draft_model=args.draft, wi=wi) for p in args.placement]
    refuse_repeats([p.name for p in placements], "--placement names")
    devices = [d for p in placements for d in _groups_devices(p)]
    wi.check_used(devices)
    acc = acceptance(args) if any(p.speculative for p in placements) else None
    prices = price_list(args, devices)
    _check_pareto(args, placements, acc, prices)
    batches = np.array(parse_ints(args.batch, "--batch"))[:, None]
    knobs = serving_knobs(args)
    gammas = np.array(parse_ints(args.gamma or "1..16", "--gamma"))[None, :]
    run = ServingRun(request=Request(input_tokens=args.isl, output_tokens=args.osl), batch=batches, gamma=gammas,
                     acceptance=acc, engine=engine(args, devices), knobs=knobs, prices=prices,
                     formats=formats(args, load_model(args.target)))
    configs, frontiers, results = map(list, zip(*(_frontier_of(args, p, run) for p in placements)))
    if not any(c["frontier"] for c in configs):
        raise RooflineError(_why_all_empty(configs, results, args.token_budget))
    if workload is not None:   # each frontier point's batch as its replica's cap on running requests
        for c, p in zip(configs, placements):
            for point in c["frontier"]:
                point["load"] = load_at_rate(args, workload, p, run.formats, run.params, max_slots=int(point["batch"]))
    if args.plot:
        from ..plot import plot_frontiers
        plot_frontiers(configs, args.plot, title=f"{args.target}, {args.isl} in / {args.osl} out", axis=args.axis)
    note = (context_note(load_model(args.target), args.isl + args.osl) + _pool_note(placements)
            + idle_note(devices) + stream_note(placements, run.params)).strip()
    view = pareto_view(configs, _comparisons(placements, frontiers, args.axis), placements[0].name, {
        "target": args.target, "request": _request_dict(args), "axis": args.axis, "overrides": wi.describe(),
        "rate_per_s": number(args.rate, "--rate") if args.rate is not None else None}, note=note)
    emit(console, with_frontier_load_table(view, configs, number(args.rate, "--rate")) if args.rate is not None
         else view, args, run.engine)
    return 0


def _pool_note(placements: list[Placement]) -> str:
    """Where a configuration prefills on its own group: that pool is counted by its busy share, with no queue."""
    pooled = [p.name for p in placements if p.prefill is not None]
    return (f" {', '.join(pooled)}: the prefill group is counted by the share of time it is busy, so TTFT is one "
            "prompt's prefill with no wait for prompts ahead of it (a lower bound under load)." if pooled else "")


def stream_note(placements: list[Placement], params: Any) -> str:
    """Where a configuration's prompts cross a compiled SRAM pipeline: streamed in chunks, not held whole."""
    kinds = sorted({g.device.id for g in ((p.prefill or p.decode) for p in placements)
                    if g.pp > 1 and resolve_profile(g.device, params).prefill_stream_tokens})
    return (f" Prompts on {', '.join(kinds)} pipelines are streamed through the stages in chunks, each stage holding "
            "one chunk's activations (docs/theory.md §5.3)." if kinds else "")


def _common(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--target", required=True, help="target model: " + MODEL_HELP)
    sp.add_argument("--draft", default=None, help="draft model for speculative placements")
    add_acceptance(sp)
    add_request(sp)
    add_formats(sp)
    add_what_if(sp)


def register(add: Adder) -> None:
    sp = add("placements", cmd_placements, "every assignment of stages to candidate devices, with TTFT, E2E, tok/s/kW",
             profile=True)
    _common(sp)
    sp.add_argument("--devices", required=True, help="candidate device ids, comma-separated (b200,h100-sxm,corsair)")
    sp.add_argument("--batch", type=positive, default=16, help="concurrent sequences per decode group (default 16)")
    sp.add_argument("--gamma", type=nonnegative, default=None,
                    help="draft length for speculative placements (default 5; needs --draft)")
    add_prices(sp)
    sp.add_argument("--rate", default=None, metavar="R",
                    help="also the p50/p99 TTFT, ITL and TPOT of one replica of each placement at R requests/s, "
                         "through queues (docs/load.md)")
    add_load_options(sp)

    sp = add("pareto", cmd_pareto, "tokens/s per kW against tokens/s per user: frontiers and their comparison",
             profile=True)
    _common(sp)
    sp.add_argument("--placement", action="append", default=[], metavar=PLACEMENT_SYNTAX,
                    help="a configuration (repeatable); the first is the baseline")
    sp.add_argument("--batch", default="1,2,4,8,16,32,64,128,256,512", help="batches to sweep (default 1..512, powers of 2)")
    sp.add_argument("--gamma", default=None,
                    help="draft lengths to sweep for speculative placements (default 1..16; needs --draft)")
    sp.add_argument("--axis", choices=["kw", "usd"], default="kw",
                    help="what the frontier trades interactivity against: tokens/s per kW (default) or tokens per USD")
    add_prices(sp)
    sp.add_argument("--plot", default=None, metavar="FILE.png", help="draw the frontiers (needs the plot extra)")
    sp.add_argument("--rate", default=None, metavar="R",
                    help="also the p50/p99 TTFT, ITL and TPOT of one replica at R requests/s for each frontier "
                         "point, its batch the scheduler's cap on running requests, through queues (docs/load.md)")
    add_load_options(sp)
