"""``roofline spec``: a speculative scan per draft length (and acceptance, and batch)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from rich.table import Table

from ..serving.speculation import SpecResult
from .columns import Columns
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
    points = np.stack([np.asarray(cols["gamma"], dtype=float), np.asarray(cols["batch"], dtype=float)], axis=1)
    with_alpha = np.column_stack([points, np.nan_to_num(np.asarray(cols["alpha"], dtype=float), nan=-1.0)])
    return len(np.unique(with_alpha, axis=0)) > len(np.unique(points, axis=0))


def best_rows(speed: np.ndarray, *keys: np.ndarray) -> np.ndarray:
    """Which rows hold the most ``speed`` among the rows sharing their ``keys`` (the first of equals; none in a
    group whose best is not finite, or that holds a NaN, as ``np.argmax`` would pick it)."""
    _, group = np.unique(np.stack(keys, axis=1), axis=0, return_inverse=True)
    group = group.ravel()
    order = np.lexsort((np.arange(speed.size), -np.nan_to_num(speed, nan=np.inf), group))
    first = order[np.r_[True, group[order][1:] != group[order][:-1]]]
    best = np.zeros(speed.size, dtype=bool)
    best[first] = np.isfinite(speed[first])
    return best


def spec_columns(r: SpecResult) -> tuple[Columns, bool]:
    """A scan's rows by column (one row per alpha, batch and gamma, each with its batch's plain-decode
    baseline), the fastest gamma of each batch (and of each alpha where alphas sweep) marked ``best``; and
    whether alphas sweep (several alphas at one gamma and batch, not an alpha that follows gamma)."""
    shape = np.broadcast_shapes(np.shape(r.gamma), np.shape(r.batch), np.shape(r.tokens_per_s_per_user))
    cols = {f: np.ravel(np.broadcast_to(np.asarray(getattr(r, f)), shape))
            for f in (*SPEC_FIELDS, "batch", "alpha", "baseline_decode_s", "baseline_energy_per_token_j",
                      "extra_flop_fraction", "draft_step_s")}
    for k in ("gamma", "batch"):   # counts: whole numbers in JSON and CSV (the arrays broadcast as floats)
        cols[k] = np.rint(np.asarray(cols[k], dtype=float)).astype(int)
    speed = np.where(cols["fits"], cols["tokens_per_s_per_user"], -np.inf)
    sweep = alpha_sweeps(cols)
    alpha = np.nan_to_num(np.asarray(cols["alpha"], dtype=float), nan=-1.0) if sweep else np.zeros(speed.size)
    cols["best"] = best_rows(speed, np.asarray(cols["batch"], dtype=float), alpha)
    cols["baseline_tokens_per_s_per_user"] = 1 / np.asarray(cols.pop("baseline_decode_s"), dtype=float)
    return Columns(cols), sweep


def spec_dict(r: SpecResult, best_gamma: Any) -> dict[str, Any]:
    """A scan as JSON-ready data: its rows (:func:`spec_columns`), the best gamma of each point, and the
    baselines: the top-level ``baseline_*`` are the first batch's (every batch's in ``baseline_by_batch``)."""
    rows, sweep = spec_columns(r)
    batch, alpha, gamma = rows["batch"].tolist(), rows["alpha"].tolist(), rows["gamma"].tolist()
    speed, energy = rows["baseline_tokens_per_s_per_user"].tolist(), rows["baseline_energy_per_token_j"].tolist()
    last = {b: i for i, b in enumerate(batch)}   # each batch's baseline (its last row's), in first-seen order
    by_batch = [{"batch": b, "tokens_per_s_per_user": speed[i], "energy_per_token_j": energy[i]}
                for b, i in last.items()]
    return {"target": r.target, "draft": r.draft, "draft_kind": r.draft_kind, "draft_kv_budget": r.draft_kv_budget,
            "draft_vocab": r.draft_vocab,
            "target_group": r.target_group,
            "draft_group": r.draft_group, "link": r.link, "acceptance": r.acceptance,
            "best_gamma": best_gamma if np.ndim(best_gamma) == 0 else   # one per alpha and batch when they vary
            [int(g) if math.isfinite(g) else None for g in np.ravel(best_gamma)],
            "baseline_decode_s": float(np.ravel(r.baseline_decode_s)[0]),
            "baseline_tokens_per_s_per_user": float(1 / np.ravel(r.baseline_decode_s)[0]),
            "baseline_energy_per_token_j": float(np.ravel(r.baseline_energy_per_token_j)[0]),
            "baseline_by_batch": by_batch, "energy_note": r.energy_note,
            "target_formats": formats_json(r.target_formats), "draft_formats": formats_json(r.draft_formats),
            "alpha_sweep": sweep, "best": [{"alpha": alpha[i] if sweep else None, "batch": int(batch[i]),
                                            "gamma": int(gamma[i])} for i in np.flatnonzero(rows["best"])],
            "rows": rows}


def _at(points: Sequence[str]) -> str:
    """" at alpha 0.1, batch 8; ..." for the points a caption remark holds at ("" for a scan of one point)."""
    return f" at {'; '.join(points)}" if any(points) else ""


def _sig3(v: float) -> str:
    """Three significant digits, trailing zeros kept (1.10 beside 2.34, not 1.1)."""
    return f"{v:#.3g}".rstrip(".")


def _joule(e: Any) -> str:
    return f", {e:.3g} J/token" if e is not None and math.isfinite(e) else ""


def _baseline_text(d: Mapping[str, Any], several: bool) -> str:
    """Plain decode's speed (and energy): the scan's one batch's, or each batch's."""
    if not several:
        return f"{rate_cell(d['baseline_tokens_per_s_per_user'])} tok/s/user" + _joule(d["baseline_energy_per_token_j"])
    return "; ".join(f"batch {b['batch']:.0f}: {rate_cell(b['tokens_per_s_per_user'])} tok/s/user"
                     f"{_joule(b['energy_per_token_j'])}" for b in d["baseline_by_batch"])


def _point_names(rows: Columns, sweep: bool, several: bool) -> list[str]:
    """Where each row is, in the words of the table's leading columns ("alpha 0.8, batch 8"; "" for one point)."""
    alpha, batch = rows["alpha"].tolist(), rows["batch"].tolist()
    return [", ".join([f"alpha {a:g}"] * sweep + [f"batch {b:.0f}"] * several) for a, b in zip(alpha, batch)]


def _unpaying(rows: Columns, sweep: bool, several: bool) -> tuple[list[str], list[str]]:
    """The points (alpha, batch) where no speculative gamma beats plain decode, and those where none fits."""
    fits: dict[str, bool] = {}
    pays: dict[str, bool] = {}
    for p, g, ok, speedup in zip(_point_names(rows, sweep, several), rows["gamma"].tolist(), rows["fits"].tolist(),
                                 rows["speedup"].tolist()):
        if g:
            fits[p] = fits.get(p, False) or bool(ok)
            pays[p] = pays.get(p, False) or bool(ok and speedup > 1)
    return [p for p in fits if fits[p] and not pays[p]], [p for p in fits if not fits[p]]


def _spec_caption(r: SpecResult, d: Mapping[str, Any], several: bool, overrides: Sequence[str], note: str) -> str:
    sweep = d["alpha_sweep"]
    slower, unfit = _unpaying(d["rows"], sweep, several)
    formats = (f"Formats: target {r.target_formats.brief()}; draft {r.draft_formats.brief()}. "
               if r.target_formats and r.draft_formats else "")
    return (f"Acceptance: {r.acceptance}. Draft on {r.draft_group}, verify on {r.target_group}, link {r.link}. "
            + formats + f"Baseline: plain decode on {r.target_group} at {_baseline_text(d, several)}"
            + (". * = most tok/s/user" + (" at that " + " and ".join(
                ["alpha"] * sweep + ["batch"] * several) if several or sweep else "") + ".")
            + (f" No γ here is faster than plain decode (speed-up < 1{_at(slower)}): speculation does not pay."
               if slower else "")
            + (f" Nothing speculative fits{_at(unfit)} (—)." if unfit else "")
            + (" γ 0 is plain decode with the draft's devices idle but powered (their idle power in J/token)."
               if r.draft_group != r.target_group and (d["rows"]["gamma"] == 0).any() else "")
            + (f" What-if: {', '.join(overrides)}." if overrides else "")
            + (f" {r.energy_note}" if r.energy_note else "") + note)


def _spec_cells(row: Mapping[str, Any]) -> list[str]:
    """A row's cells from gamma on ("—" for what a point that does not fit cannot say)."""
    ok = row["fits"]
    return [f"{row['gamma']:.0f}" + ("*" if row["best"] else ""), ms_cell(row["draft_s"]), ms_cell(row["verify_s"]),
            ms_cell(row["transfer_s"] * 1e3) if ok else "—", _sig3(row["expected_tokens"]) if ok else "—",
            rate_cell(row["tokens_per_s_per_user"]), f"{row['speedup']:.2f}" if ok else "—",
            _sig3(row["energy_per_token_j"]) if ok and math.isfinite(row["energy_per_token_j"] or math.nan) else "—",
            f"{short_bound(row['draft_bound'])}/{short_bound(row['verify_bound'])}"]


def spec_table(r: SpecResult, d: Mapping[str, Any], overrides: Sequence[str] = (), note: str = "") -> Table:
    """The scan ``d`` (:func:`spec_dict` of ``r``) as a table, a row per alpha, batch and gamma."""
    rows: Columns = d["rows"]
    batches = sorted({int(b) for b in rows["batch"].tolist()})
    several, sweep = len(batches) > 1, d["alpha_sweep"]
    t = house_table(title=f"speculative decoding: {r.target} with {r.draft}, batch {','.join(map(str, batches))}",
                    caption=_spec_caption(r, d, several, overrides, note))
    lead = ("alpha",) * sweep + ("batch",) * several   # the rows' order
    for c in (*lead, "gamma", "draft\nms", "verify\nms", "xfer\nus", "tok/\nround", "tok/s\n/user", "speed-\nup",
              "J/\ntoken", "bound\ndraft/verify"):
        t.add_column(c, justify="left" if "bound" in c else "right", overflow="fold")
    for row in rows.raw_rows():
        t.add_row(*({"alpha": f"{row['alpha']:g}", "batch": f"{row['batch']:.0f}"}[c] for c in lead),
                  *_spec_cells(row), style="bold" if row["best"] else None)
    return t


def spec_view(r: SpecResult, best_gamma: Any, overrides: Sequence[str] = (), note: str = "") -> View:
    """A speculative scan; ``note``: a caveat for the caption and the JSON's ``notes``."""
    d = spec_dict(r, best_gamma)
    d["overrides"] = list(overrides)
    d["notes"] = note.strip()
    return View(tables=lambda: [spec_table(r, d, overrides, note)], data=d, rows=d["rows"])
