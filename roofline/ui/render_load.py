"""Tables and JSON of sizing for a request rate (``roofline size --rate``): percentiles and utilisation per option."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .render_common import View, house_table, ms_cell, usd_cell
from .render_size import size_option_dict

#: The figures a rate-sized option adds to a sized option's (JSON and CSV).
LOAD_FIELDS = ("rate_per_s", "utilisation", "decode_utilisation", "prefill_utilisation", "batch_mean",
               "slot_wait_share", *(f"{m}_p{q}_s" for m in ("ttft", "itl", "tpot", "e2e") for q in (50, 90, 99)))


def load_option_dict(o: Any) -> dict[str, Any]:
    """A sized option as JSON, with its percentiles and utilisation where it was sized for a rate."""
    return {**size_option_dict(o), **{k: getattr(o, k, None) for k in LOAD_FIELDS}}


def _limits_text(limits: dict[str, float]) -> str:
    return ", ".join(f"{k[:-2].replace('_', ' ')} <= {v * 1e3:g} ms" for k, v in limits.items())


def size_load_view(model_id: str, target: Any, options: Sequence[Any], note: str = "", poll_steps: int = 1,
                   sized: dict[str, Any] | None = None) -> View:
    """Sizing for a rate: the fewest devices per device kind and placement whose percentiles meet the limits
    (``poll_steps``: the scheduler lets waiting prompts in every this many steps; ``sized``: at a confidence, the
    confidence and each device kind's lowered limits, for the JSON)."""
    L = target.workload.lengths
    title = (f"{model_id}: {target.rate_per_s:g} requests/s, {_limits_text(dict(target.limits))}; lengths "
             f"{L.name} (mean {L.mean_input_tokens:,.0f} in / {L.mean_output_tokens:,.0f} out)")
    t = house_table(title=title, caption=(
        "Queues in closed form (docs/load.md): " + (
            f"arrivals with Gamma gaps of CV^2 {target.workload.arrival_cv2:g} ("
            + ("burstier" if target.workload.arrival_cv2 > 1 else "steadier") + " than Poisson)"
            if target.workload.arrival_cv2 != 1 else "Poisson arrivals")
        + (f", {target.workload.prefix_hit:.0%} of each prompt cached" if target.workload.prefix_hit else "")
        + "; util = the busier pool's share of what it sustains (decode replicas, or the prefill pool when "
        "disaggregated); ITL = gaps between tokens, TPOT = a request's mean gap. "
        "devices = replicas x group (+ prefill groups of the same shape when disaggregated)." + note))
    for c in ("group", "placement", "reps", "+prefill", "devices", "util", "TTFT\np50 ms", "TTFT\np99 ms",
              "ITL\np99 ms", "TPOT\np99 ms", "$/Mtok\nout"):
        t.add_column(c, justify="left" if c in ("group", "placement") else "right", no_wrap=c in ("group", "placement"))
    for o in options:
        if o.feasible:
            t.add_row(o.group, o.placement, f"{o.replicas:,}", f"{o.prefill_groups:,}" if o.prefill_groups else "—",
                      f"{o.devices:,}", f"{o.utilisation:.0%}" if math.isfinite(o.utilisation) else "—",
                      ms_cell(o.ttft_p50_s), ms_cell(o.ttft_p99_s), ms_cell(o.itl_p99_s), ms_cell(o.tpot_p99_s),
                      usd_cell(o.usd_per_million_output_tokens))
    out: list[Any] = [t] if t.row_count else [f"{title}: no option meets the limits."]
    failed: dict[tuple[str, str], list[str]] = {}
    for o in options:
        if not o.feasible:
            failed.setdefault((o.device, o.reason), []).append(o.placement)
    out += [f"{dev} ({', '.join(kinds)}): {reason}" for (dev, reason), kinds in failed.items()]
    rows = [load_option_dict(o) for o in options]
    data = {"model": model_id, "rate_per_s": target.rate_per_s, "limits": dict(target.limits),
            "lengths": {"name": L.name, "mean_input_tokens": L.mean_input_tokens,
                        "mean_output_tokens": L.mean_output_tokens},
            "arrival_cv2": target.workload.arrival_cv2, "prefix_hit": target.workload.prefix_hit,
            "poll_steps": poll_steps, "options": rows, "tokens_per_s": target.rate_per_s * L.mean_output_tokens,
            **(sized or {})}
    return View(tables=out, data=data, rows=rows)


def _load_tables(title: str, caption: str, labels: tuple[str, ...],
                 entries: list[tuple[tuple[str, ...], dict[str, Any]]]) -> list[Any]:
    """A table of percentiles at a rate, one row per entry (its label cells, then its load's figures), and one line
    under it per entry that has none, with why (a reason in a figure's column would widen it past its numbers)."""
    t = house_table(title=title, caption=caption)
    for col in (*labels, "+prefill", "util", "TTFT\np50 ms", "TTFT\np99 ms", "ITL\np99 ms", "TPOT\np99 ms"):
        t.add_column(col, justify="left" if col == labels[0] else "right", no_wrap=col == labels[0])
    notes = []
    for cells, load in entries:
        if "reason" in load:
            notes.append(f"{' at batch '.join(cells)}: {load['reason']}")
        elif load:
            t.add_row(*cells, str(load["prefill_groups"] or "—"), f"{load['utilisation']:.0%}",
                      ms_cell(load["ttft_p50_s"]), ms_cell(load["ttft_p99_s"]), ms_cell(load["itl_p99_s"]),
                      ms_cell(load["tpot_p99_s"]))
    return ([t] if t.row_count else [f"{title}: no row carries the rate."]) + notes


def with_load_table(view: View, items: list[dict[str, Any]], rate_per_s: float) -> View:
    """A placements view with a second table: each placement's percentiles at ``rate_per_s`` (one replica)."""
    tables = _load_tables(
        f"one replica of each placement at {rate_per_s:g} requests/s, at most --batch running",
        "Queues in closed form (docs/load.md); a disaggregated placement with the fewest prefill groups that keep its "
        "pool below saturation, plus one.", ("placement",), [((i["name"],), i.get("load") or {}) for i in items])
    rows = [{**r, **{f"load_{k}": v for k, v in (i.get("load") or {}).items()}} for r, i in zip(view.rows, items)]
    return View(tables=[*view.table_list(), *tables], data=view.data, rows=rows, script=view.script)


def with_frontier_load_table(view: View, configs: list[dict[str, Any]], rate_per_s: float) -> View:
    """A pareto view with a table of each frontier point's percentiles at ``rate_per_s`` (one replica whose
    scheduler runs at most the point's batch), and the same figures as ``load_*`` columns of its CSV rows."""
    points = [(c["name"], p) for c in configs for p in c["frontier"]]
    tables = _load_tables(
        f"one replica at {rate_per_s:g} requests/s, at most each frontier point's batch running",
        "Queues in closed form (docs/load.md); a smaller cap than the load needs is over capacity; a disaggregated "
        "configuration with the fewest prefill groups that keep its pool below saturation, plus one.",
        ("configuration", "batch"), [((name, f"{int(p['batch']):,}"), p.get("load") or {}) for name, p in points])
    rows = [{"configuration": name, **{k: v for k, v in p.items() if k != "load"}, "load_rate_per_s": rate_per_s,
             **{f"load_{k}": v for k, v in (p.get("load") or {}).items()}} for name, p in points]
    return View(tables=[*view.table_list(), *tables], data=view.data, rows=rows, script=view.script)
