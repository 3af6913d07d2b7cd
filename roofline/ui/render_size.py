"""``roofline size``: the fewest devices per device kind and placement, and the launch commands."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import attrs
from rich.text import Text

from ..specs.formats import brief
from .render_common import (
    View,
    house_table,
    ms_cell,
    rate_cell,
    usd_cell,
)

SIZE_FIELDS = ("device", "placement", "feasible", "replicas", "group", "devices", "prefill_groups", "batch_per_replica", "gamma",
               "tokens_per_s_per_user", "ttft_s", "tokens_per_s_per_kw", "usd_per_million_output_tokens", "reason")


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
               + ("Prices (a hyperscaler's on-demand list per device, hardware_specs/prices/prices.toml, unless given "
                  "with --usd-per-device-hour): " + "; ".join(f"{d} ${prices.by_device[d].usd_per_hour:.3g}/h"
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
