"""What a GPU calibration says of itself: each fitted parameter's note (standard error, bound, not identified),
the profile file with its ``[fit]`` record, and what ``--stack`` chose (:func:`stack_record`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..specs.params import PLATFORM_OWN, STACK_SET, Profile, StackChoice, family_chain, profile_toml, write_profile
from .fit_space import BOUNDS, FITTED_GRADES, PER_FAMILY, PLATFORM_FULL, Fit, bound_side


def stack_record(choice: StackChoice, prof: Profile) -> dict[str, Any]:
    """What ``--stack`` chose, for the JSON ``stack`` record and the line under the tables: the stack, the build
    the GPUs run, the fitted set that answers for it, and that set's parameters its rows do not pin down (with
    the value used and whether it sits at a bound of the fit); ``at_bound``, its identified parameters the fit
    stopped at a bound of their physical range (:data:`BOUNDS`: its rows would push them further, so the model
    misses something there); ``settings``, the engine settings the stack fixes (:data:`STACK_SETTINGS
    <roofline.specs.params.STACK_SETTINGS>`: all-reduce, KV admission, prompt chunking, ...);
    ``platform_parameters_from``, the same ISA's builds whose efficiencies and kernel gap it borrowed
    (:func:`roofline.specs.params.platform_donors`), whose own loose ends then count for those parameters."""
    names = set(prof.not_identified(choice.fitted))
    if choice.platform_from:
        names = (names - set(PLATFORM_OWN)) | {k for d in choice.platform_from for k in prof.not_identified(d)
                                                if k in PLATFORM_OWN}
    values = {name: getattr(choice.params, name) for name in sorted(names)}
    loose = {name: {"value": v, "at_bound": bound_side(name, v)} for name, v in values.items()}
    at_bound = {k: {"value": getattr(choice.params, k), "bound": side} for k in BOUNDS
                if k not in names and (side := bound_side(k, getattr(choice.params, k)))}
    settings = {k: getattr(choice.params, k) for k in STACK_SET if getattr(choice.params, k) is not None}
    return {"name": choice.name, "build": choice.build, "parameters": choice.fitted,
            "fitted_on_other_platform": choice.other_platform,
            "platform_parameters_from": list(choice.platform_from), "not_identified": loose, "at_bound": at_bound,
            "settings": settings}


#: Kinds of note on a fitted parameter (:func:`assessment`) that say the data do not identify it.
UNIDENTIFIED = ("not identified", "hidden")


def _note(name: str, value: float, se: float | None) -> tuple[str, str]:
    """(kind, text) of a fitted parameter's note from its value and standard error."""
    if se is None:
        return "", ""
    side = bound_side(name, value)
    if not math.isfinite(se) or se > max(abs(value), 1e-300):
        return "not identified", f"not identified by this data (+/- {se:.2g})" + (f", at its {side} bound" if side else "")
    if side:
        return "bound", f"at its {side} bound (its standard error does not apply)"
    return "se", f"+/- {se:.3g}"


def _blind_note(name: str, value: float, pooled: bool) -> tuple[str, str]:
    """(kind, text) of a parameter no row of its stack responds to at the optimum: ``pooled`` when it took the
    pooled value (the calibration's ``_unseen_by_rows``), else hidden under a longer cost and kept as fitted."""
    if pooled:
        return "pooled", "no row of this stack responds to it: the pooled value"
    side = bound_side(name, value)
    return "hidden", ("hidden under a longer cost in every row of this stack (no row responds to a small change, "
                      "the pooled value would move them): kept where the fit left it"
                      + (f", at its {side} bound" if side else ""))


def assessment(fit: Fit) -> dict[str, dict[str, tuple[str, str]]]:
    """Per parameter set and name, (kind, text): ``se`` (``+/- se``); ``not identified`` where the standard
    error exceeds the value itself (the data cannot tell the parameter from zero); ``bound`` where the fit stopped
    at a physical bound of :data:`BOUNDS` (a standard error there means nothing); ``tied`` for a platform build's
    parameter taken from the family it specialises; ``pooled`` or ``hidden`` for one no row of its stack
    responds to (:func:`_blind_note`)."""
    out: dict[str, dict[str, tuple[str, str]]] = {"default": {}}
    for k, se in fit.standard_errors.get("default", {}).items():
        out["default"][k] = _note(k, getattr(fit.profile.default, k), se)
    full = {f for f in fit.profile.families if set(PER_FAMILY) <= set(fit.standard_errors.get(f, {}))}
    for fam, p in fit.profile.families.items():
        up = next((f for f in family_chain(fam)[1:] if f in full), None) if fam not in full else None
        tied = {k: ("tied", f"as {up} (too few rows to fit it apart)") for k in PER_FAMILY if k not in PLATFORM_OWN} if up else {}
        ses = {**fit.standard_errors.get("*", {}), **fit.standard_errors.get(fam, {})}
        pooled = fit.pooled_params.get(fam, frozenset())
        blind = {k: _blind_note(k, getattr(p, k), k in pooled) for k, se in
                 fit.standard_errors.get(fam, {}).items() if not math.isfinite(se) and k in PLATFORM_FULL}
        out[fam] = {**{k: _note(k, getattr(p, k), se) for k, se in ses.items()}, **tied, **blind}
    return out


def uncertainty(fit: Fit) -> dict[str, dict[str, str]]:
    """Per parameter set and name, the text of its note (:func:`assessment`), as the profile's comments say it."""
    return {name: {k: text for k, (_kind, text) in notes.items()} for name, notes in assessment(fit).items()}


def fit_record(fit: Fit, *, data: str) -> dict[str, Any]:
    """What a fit says of itself (a profile's ``[fit]`` table): the data, rows and median |error| in-sample,
    estimated leave-one-out and held out, and the parameters its data do not identify (``set.name``)."""
    # five decimals: a percentage printed to one decimal from the record is not rounded twice (0.09548 -> 9.5%)
    record: dict[str, Any] = {"data": data, "rows": len(fit.rows), "median_abs_error": round(fit.median_abs_error, 5)}
    if fit.checked_rows:
        record["checked_rows"] = len(fit.checked_rows)
        record["checked"] = (f"rows of grade other than {' or '.join(FITTED_GRADES)} or of an early build "
                             f"(EARLY_BUILDS): predicted by this fit, not "
                             "fitted; every median of this record counts them as predicted")
    if fit.shrink:
        record["shrink"] = fit.shrink
    if fit.approx_loo_median_abs_error is not None:
        record["loo_approx_median_abs_error"] = round(fit.approx_loo_median_abs_error, 5)
        unestimated = sum(1 for e in fit.approx_loo_errors.values() if not math.isfinite(e))
        record["loo_approx"] = "one Newton step per row from this fit" + (
            f"; {unestimated} rows too influential to estimate, left out of the median" if unestimated else "")
    if fit.loo_median_abs_error is not None:
        record["heldout_median_abs_error"] = round(fit.loo_median_abs_error, 5)
        record["heldout"] = fit.holdout
        for name, part in fit.heldout_split().items():
            record[f"heldout_{name}_build_median_abs_error"] = round(part["median_abs_error"], 5)
            record[f"heldout_{name}_build_rows"] = part["rows"]
    missing = sorted(f"{name}.{k}" for name, notes in assessment(fit).items() for k, (kind, _text) in notes.items()
                     if kind in UNIDENTIFIED)
    if missing:
        record["not_identified"] = missing
    if fit.builds:
        record["builds"] = list(fit.builds)
    record["standard_errors"] = standard_error_record(fit.standard_errors.get("default", {}))
    return record


def standard_error_record(errors: Mapping[str, float]) -> dict[str, float]:
    """The default set's finite standard errors, to three significant figures (the ``[fit]`` record's
    ``standard_errors``, what `roofline show` prints beside a fitted value)."""
    return {k: float(f"{se:.3g}") for k, se in sorted(errors.items()) if math.isfinite(se)}


def profile_text(fit: Fit, *, data: str) -> str:
    """The profile file of a fit, with each parameter's uncertainty and the fit's record."""
    return profile_toml(fit.profile, uncertainty=uncertainty(fit), fit=fit_record(fit, data=data))


def save_profile(fit: Fit, path: str, *, data: str) -> None:
    """Write ``fit`` as a profile every command accepts with ``--profile`` (atomically)."""
    write_profile(path, profile_text(fit, data=data))
