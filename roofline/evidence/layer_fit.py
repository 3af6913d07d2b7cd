"""A dataflow family's fixed latency per layer (Groq, Cerebras, SambaNova, d-Matrix), fitted in closed form on its
smallest models' batch-1 decode rows and checked on the family's other rows, which the fit never sees."""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from ..errors import RooflineError
from ..specs.execution import family_profile
from ..specs.params import EngineParams, with_values
from ..specs.resolve import resolve_model
from .fit_space import row_family
from .validate import Row, predict_row

#: "Smallest models" for a family fit: the per-layer latency is fitted on these and checked on larger ones.
SMALL_MODEL_PARAMS = 10e9


@attrs.frozen(kw_only=True)
class LayerFit:
    """A dataflow family's per-layer stage latency fitted on its smallest models' batch-1 rows (and the extra
    latency of an MoE layer on its smallest MoE model's rows), and how the fitted values predict the family's
    other rows, which the fit never saw."""

    family: str
    layer_overhead_s: float
    moe_layer_overhead_s: float | None
    fitted_rows: dict[str, float]          # row id -> the per-layer latency that row alone implies
    held_out_errors: dict[str, float]      # row id -> (predicted - measured) / measured with the fitted values


def _tpot_s(row: Row, value: float) -> float:
    metric = row.get("metric")
    if metric == "decode_tokens_per_s_per_user":
        return 1.0 / value
    if metric == "itl_ms":
        return value / 1e3
    raise RooflineError(f"{row.id}: a layer-latency fit needs decode speed or ITL, not {metric}")


def _implied(rows: list[Row], params: EngineParams, layers: Any) -> dict[str, float]:
    """Per row: (measured TPOT - TPOT predicted with ``params``) / layers(model)."""
    out = {}
    for r in rows:
        m = resolve_model(r.get("model"))
        out[r.id] = (_tpot_s(r, float(r.get("value"))) - _tpot_s(r, predict_row(r, params))) / layers(m)
    return out


def fit_layer_overhead(rows: list[Row], family: str) -> LayerFit:
    """Fit ``layer_overhead`` (and ``moe_layer_overhead``) of ``family`` in closed form.

    For each plain batch-1 decode row of a small dense model (<= 10B parameters) the per-layer time left
    after everything else the model predicts is (measured TPOT - predicted TPOT without it) / layers; the fit
    is the median over those rows. The MoE extra is fitted the same way on the rows of the family's smallest
    MoE model, per MoE layer. Every other row of the family is then predicted and reported as held out.
    """
    base = family_profile(family).profile
    mine = [r for r in rows if r.get("spec_method") in ("", "none") and row_family(r) == family
            and r.get("batch") == "1" and r.get("metric") in ("decode_tokens_per_s_per_user", "itl_ms")]
    models = {r.id: resolve_model(r.get("model")) for r in mine}
    small = [r for r in mine if not models[r.id].is_moe and models[r.id].total_params <= SMALL_MODEL_PARAMS]
    if not small:
        raise RooflineError(f"no small-model (<= 10B) batch-1 decode rows of family {family} to fit on")
    zero = with_values(base, {"layer_overhead_s": 0.0, "moe_layer_overhead_s": 0.0}, what=f"{family} fit")
    implied = _implied(small, zero, lambda m: m.num_layers)
    layer = float(np.median(list(implied.values())))
    use = with_values(zero, {"layer_overhead_s": layer}, what=f"{family} fit")
    moe_rows = [r for r in mine if models[r.id].is_moe]
    moe = None
    if moe_rows:
        smallest = min((models[r.id] for r in moe_rows), key=lambda m: m.total_params).id
        extra = _implied([r for r in moe_rows if models[r.id].id == smallest], use, lambda m: m.num_moe_layers)
        implied.update(extra)
        moe = float(np.median(list(extra.values())))
        use = with_values(use, {"moe_layer_overhead_s": moe}, what=f"{family} fit")
    held = {}
    for r in (r for r in rows if row_family(r) == family and r.id not in implied):
        try:
            held[r.id] = predict_row(r, use) / float(r.get("value")) - 1
        except RooflineError:
            continue
    return LayerFit(family=family, layer_overhead_s=layer, moe_layer_overhead_s=moe, fitted_rows=implied,
                    held_out_errors=held)
