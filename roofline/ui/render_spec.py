"""``roofline spec``: a speculative scan per draft length (and acceptance, and batch)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from rich.table import Table

from ..serving.speculation import SpecResult
from .render_common import (
    View,
    formats_json,
    house_table,
    ms_cell,
    rate_cell,
    short_bound,
)

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


def spec_view(r: SpecResult, best_gamma: Any, overrides: Sequence[str] = (), note: str = "") -> View:
    """A speculative scan; ``note``: a caveat for the caption and the JSON's ``notes``."""
    d = spec_dict(r, best_gamma)
    d["overrides"] = list(overrides)
    d["notes"] = note.strip()
    return View(tables=[spec_table(r, best_gamma, overrides, note)], data=d, rows=d["rows"])
