"""``roofline spec``: speculative decoding per draft length, draft and verify on (possibly different) groups."""

from __future__ import annotations

import argparse
import math
from typing import Any

import attrs
import numpy as np
from rich.console import Console

from ...physics.energy import DEFAULT_POWER
from ...physics.speculative import Acceptance
from ...serving.speculation import optimal_gamma
from ...serving_api import speculative_round  # names resolved at the door
from ...specs.hf_config import load_model
from ...specs.resolve import resolve_group
from ..columns import Columns
from ..options import (
    MODEL_HELP,
    Adder,
    UsageError,
    acceptance,
    add_acceptance,
    add_formats,
    add_prices,
    add_what_if,
    context_note,
    engine,
    format_name,
    formats,
    idle_note,
    nonnegative,
    parse_ints,
    positive,
    price_list,
    what_if,
)
from ..output import emit
from ..render_spec import spec_view


def cmd_spec(args: argparse.Namespace, console: Console) -> int:
    if args.draft_kind == "model" and not args.draft:
        raise UsageError("give the draft model with --draft (or draft with the target's own layers: --draft-kind mtp "
                         "or eagle)")
    if args.draft_kind != "model" and args.draft:
        raise UsageError(f"--draft {args.draft} is a draft model, for --draft-kind model; --draft-kind "
                         f"{args.draft_kind} drafts with the target's own layers (--head-layers)")
    if args.draft_vocab is not None and args.draft_kind == "model":
        raise UsageError(f"--draft-vocab {args.draft_vocab} is for a head of the target (--draft-kind mtp, eagle or "
                         "eagle3); "
                         "a draft model scores its own vocabulary")
    gammas = np.array(parse_ints(args.gamma, "--gamma", minimum=0))
    batch = np.array(parse_ints(args.batch, "--batch"))
    wi = what_if(args)
    verify_on = resolve_group(args.verify_on, ep=args.ep)
    draft_on = resolve_group(args.draft_on) if args.draft_on else None
    wi.check_used([verify_on.device, *([draft_on.device] if draft_on else [])])
    if args.link is not None and (draft_on is None or draft_on == verify_on):
        raise UsageError(f"--link {args.link}: the draft runs on the verify devices (no --draft-on, or the same group), "
                         "so no link carries the round; give --draft-on a separate group to use one")
    target = load_model(args.target)   # once: the scan and the context check share it
    draft = target if args.draft == "self" else (load_model(args.draft) if args.draft else None)
    if draft is not None and draft.id == target.id and args.draft_kv_budget is None:
        raise UsageError(f"--draft {args.draft} is the target itself: over the same KV cache it drafts what it "
                         "verifies and gains nothing; give --draft-kv-budget TOKENS (a StreamingLLM cache, as "
                         "MagicDec's self-speculation drafts)")
    idle_budget = args.draft_kv_budget is not None and args.draft_kv_budget >= args.context
    if idle_budget and draft is not None and draft.id == target.id:
        raise UsageError(f"--draft-kv-budget {args.draft_kv_budget:,} holds the whole context ({args.context:,}): "
                         "the target would draft over its own full cache and gain nothing; give a budget below it")
    acc = acceptance(args, several=True)
    if acc.shape:   # several alphas: their own leading axis, before batch and gamma
        acc = Acceptance.geometric(np.reshape(np.asarray(acc.alpha, dtype=float), (-1, 1) if batch.size == 1 else (-1, 1, 1)))
    devices = [verify_on.device, *([draft_on.device] if draft_on else [])]
    target_formats = formats(args, target)
    draft_formats = {"weights": format_name(args.draft_weights, "--draft-weights"),
                     "kv": format_name(args.draft_kv, "--draft-kv"),
                     "activations": format_name(args.draft_activations, "--draft-activations")}
    eng = engine(args, devices)
    r = speculative_round(target, verify_on=wi.apply_group(verify_on), draft=draft,
                          draft_on=wi.apply_group(draft_on) if draft_on else None, draft_kind=args.draft_kind,
                          head_layers=args.head_layers, draft_kv_budget=args.draft_kv_budget,
                          draft_vocab=args.draft_vocab, acceptance=acc,
                          gamma=gammas if batch.size == 1 else gammas[None, :],
                          batch=int(batch[0]) if batch.size == 1 else batch[:, None], context=args.context,
                          link=args.link or "pcie5", sampling=args.sampling, target_formats=target_formats,
                          draft_formats=draft_formats, params=eng.params)
    note = context_note(target, args.context + int(gammas.max())) + idle_note(devices) + (
        f" The draft's KV budget ({args.draft_kv_budget:,} tokens) is at or above the context ({args.context:,}): "
        "it attends to all of it, as without a budget." if idle_budget else "")
    view = spec_view(r, optimal_gamma(r), wi.describe(), note)
    # what the scan assumed beyond its columns, in the JSON and on every CSV row: runs at 8k and 32k differ here
    view.data.update(context=args.context, sampling=args.sampling)
    view = attrs.evolve(view, rows=view.rows.with_column("context", args.context).with_column("sampling", args.sampling))
    view.data["rows"] = view.rows
    # a round's figures come from both groups: their ranges are the wider of the two devices' (serving.trust)
    view.data["stage_devices"] = {"decode": verify_on.device.id, "draft": (draft_on or verify_on).device.id}
    _price_rows(view.data["rows"], [verify_on, *([draft_on] if draft_on and draft_on != verify_on else [])],
                price_list(args, devices))
    emit(console, view, args, eng)
    return 0


def _price_rows(rows: Columns, groups: list[Any], prices: Any) -> None:
    """Each row's USD per million output tokens (JSON and CSV): the groups' hourly prices plus the electricity at
    the row's power (x PUE, as every other command charges it), over its tokens/s (none at 0 tokens/s)."""
    usd_per_h = sum(prices.usd_per_hour(g.device.id) * g.count for g in groups)
    power_w = np.asarray(rows["power_w"], dtype=float)
    rate = np.asarray(rows["tokens_per_s"], dtype=float)
    with np.errstate(all="ignore"):
        power_usd_per_h = np.where(power_w == 0, 0.0, power_w) * DEFAULT_POWER.pue / 1000.0 * prices.usd_per_kwh
        rows.set("usd_per_million_output_tokens",
                 (usd_per_h + power_usd_per_h) / 3600.0 / np.where(rate == 0, math.nan, rate) * 1e6)


def register(add: Adder) -> None:
    sp = add("spec", cmd_spec, "speculative decoding: draft and verify on (possibly different) device groups, per gamma",
             profile=True)
    sp.add_argument("--target", required=True, help="target model: " + MODEL_HELP)
    sp.add_argument("--draft", default=None, help="draft model (for --draft-kind model); self: the target itself "
                                                  "(self-speculation, with --draft-kv-budget)")
    sp.add_argument("--draft-kind", default="model", choices=["model", "mtp", "eagle", "eagle3"],
                    help="a separate draft model, or MTP/EAGLE head layers of the target; eagle3: an EAGLE-3 head, its "
                         "own LM head over 32000 draft tokens and three layers' features (default model)")
    sp.add_argument("--head-layers", type=positive, default=1, help="layers of an MTP/EAGLE head (default 1)")
    sp.add_argument("--draft-vocab", type=positive, default=None, metavar="TOKENS",
                    help="tokens an MTP/EAGLE head's LM head scores (default: the target's whole vocabulary; "
                         "32000 for --draft-kind eagle3, as EAGLE's and SpecForge's configs)")
    sp.add_argument("--draft-kv-budget", type=positive, default=None, metavar="TOKENS",
                    help="the draft attends to at most this many tokens of KV (a StreamingLLM cache: MagicDec's "
                         "drafting for large batches at long context; default: the whole context)")
    sp.add_argument("--verify-on", required=True, metavar="GROUP", help="target group: ID, ID:N or ID:TPxPP, e.g. b200:8")
    sp.add_argument("--draft-on", default=None, metavar="GROUP", help="draft group (default: the target's own devices)")
    add_acceptance(sp, several=True)
    sp.add_argument("--gamma", default="1..8", help="draft lengths (gamma): 1..40 or 1,2,5 (default 1..8)")
    sp.add_argument("--batch", default="1", help="concurrent sequences: 1, or a list/range like 1,8,64 (default 1)")
    sp.add_argument("--context", type=nonnegative, default=8192, help="tokens in the KV cache (default 8192)")
    sp.add_argument("--link", default=None,
                    help="draft<->target link between separate --draft-on and --verify-on groups: pcie5 (default), "
                         "nvlink, ethernet-400g, ... or BANDWIDTH,LATENCY (`roofline formats`)")
    sp.add_argument("--sampling", default="greedy", choices=["greedy", "lossless"],
                    help="greedy ships token ids; lossless also ships the draft's probability rows")
    sp.add_argument("--ep", type=positive, default=None, help="expert-parallel degree of the target group")
    add_formats(sp, activations=False)
    sp.add_argument("--draft-weights", default="auto", help="draft weight format (default: native to the draft device)")
    sp.add_argument("--draft-kv", default="auto", help="draft KV format (default: native to the draft device)")
    sp.add_argument("--draft-activations", default="auto", help="draft activation format (default: native)")
    add_prices(sp)   # the JSON's and CSV's usd_per_million_output_tokens
    add_what_if(sp)
