"""How far to trust a prediction: split-conformal intervals from errors on publications the fit never saw.

Each shipped calibration comes with the errors its predictions made on rows whose publication the fit had not
seen (``roofline/profiles/intervals.json``, written by ``scripts/refresh_intervals.py``): the GPU stacks' rows
held out by publication in 5 folds, the Gaudi, Trainium and TPU rows held out one publication at a time, the
dataflow chips' rows not used by their per-layer fit, the kept set's rows (``roofline/validation/kept.csv``:
publications no fit has used, predicted as a new user would; the curated rows held out by publication are 9% off,
these 22%, so intervals from the first alone cover 66% of the second at 80%), and, as the evidence for a family with
no fitted rows, the errors the estimated profiles of Gaudi, Trainium and TPU made before any of their rows were
fitted. Each error is
a score ``s = log(measured / predicted)`` in the orientation of time (a rate's score is negated), kept with its
row's group: platform (``gpu-nvidia``, ``gpu-amd``, ``gaudi``, ``tpu``, ...), serving-stack family, metric kind
(:data:`KINDS`) and whether the group's parameters were fitted.

Split conformal prediction (Vovk, Gammerman and Shafer 2005; Lei, G'Sell, Rinaldo, Tibshirani and Wasserman,
"Distribution-free predictive inference for regression", JASA 2018, https://arxiv.org/abs/1604.04173) turns
``n`` such scores into an interval that covers a new measurement with probability at least the level when the
new row is exchangeable with them: with ``alpha = 1 - level``, the ``floor((n + 1) alpha / 2)``-th smallest score
and the ``ceil((n + 1)(1 - alpha / 2))``-th (an equal-tailed, asymmetric version, so a family the model
over-predicts gets an interval that leans that way). A group with too few scores for the level has no finite
quantile; the nearest coarser group answers (:data:`FALLBACK`), and the answer says which group and how many
rows. Rows come in publications, each with its own offset, so the quantiles weigh every publication alike
(:func:`publication_weighted_bounds`). A group with no fitted rows takes the symmetric interval of the scores'
magnitudes instead (:func:`publication_weighted_radius`): its evidence is other families' errors before their
fits, which say how far off a first prediction can be but not which way a new family leans. Exchangeability
across publications is an assumption, checked by
:func:`coverage_by_publication`, which leaves each publication's rows out of the scores and counts how often its
rows fall inside.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import attrs

from ..errors import SpecError, WorkloadError
from .files import read_text

#: Metric kinds an interval is kept for: a decode step's time per output token, a prompt's time to first token,
#: a deployment's throughput, energy per token, a speculative setup's speedup over the same setup without
#: speculation (a ratio of two predictions, never fitted: its errors on the shipped rows are out of sample as
#: they stand), and the TTFT and the time per output token of a deployment served at a request rate (the queue's
#: percentiles at a given rate: MLPerf Server and Interactive runs priced at the rate they were measured at,
#: scripts/served_at_rate.py; no fit uses these scores, though the profile that prices them was fitted on rows that
#: include the same submissions' Offline runs, so they are not held out by publication; near capacity a capacity
#: error is amplified there, so their errors are their own). Each row's metric maps to one of the first five
#: (:data:`METRIC_KINDS`).
KINDS = ("decode", "ttft", "throughput", "energy", "speedup", "load_ttft", "load_tpot")
#: Kinds whose errors stay apart: a group across kinds pools the errors of times only. A speedup's errors partly
#: cancel (a ratio of two predictions); a time at a request rate carries the capacity error amplified by the queue.
APART_KINDS = ("speedup", "load_ttft", "load_tpot")
#: The published metric behind each kind, and whether it is a rate (its score is negated to the time
#: orientation: a throughput 10% high is a time 9% low; a speedup 10% high likewise).
METRIC_KINDS: dict[str, tuple[str, bool]] = {
    "itl_ms": ("decode", False), "decode_tokens_per_s_per_user": ("decode", True), "ttft_ms": ("ttft", False),
    "output_tokens_per_s_per_device": ("throughput", True), "output_tokens_per_s_total": ("throughput", True),
    "total_tokens_per_s_per_device": ("throughput", True), "energy_per_token_j": ("energy", False),
    "power_w": ("energy", False), "speedup": ("speedup", True), "decode_speedup": ("speedup", True)}
#: The default level of an interval.
DEFAULT_LEVEL = 0.8
#: Group keys from the most specific to the coarsest; a level a group cannot give falls back along this list.
#: A platform with no fitted rows falls back to every unfitted score (``("fitted",)``) before any fitted one.
FALLBACK = (("platform", "stack", "kind", "fitted"), ("platform", "kind", "fitted"), ("kind", "fitted"), ("fitted",),
            ("kind",))


def interval_file() -> Path:
    return Path(str(resources.files("roofline"))) / "profiles" / "intervals.json"


@attrs.frozen(kw_only=True)
class Score:
    """One held-out error: its row, publication, group, ``log(measured / predicted)`` (time orientation) and whether
    it comes from the kept set."""

    id: str
    source: str
    platform: str
    stack: str
    kind: str
    fitted: bool
    score: float
    #: from the kept set (roofline/validation/kept.csv): a publication no fit has used, predicted as a new user
    #: would; False: held out of a fit (by publication) or predicted before any fit
    kept: bool = False

    def key(self, fields: Sequence[str]) -> tuple[Any, ...]:
        return tuple(getattr(self, f) for f in fields)


@attrs.frozen(kw_only=True)
class Interval:
    """Multiplicative bounds on a time-oriented prediction at ``level``: measured time within
    [predicted x ``low_factor``, predicted x ``high_factor``]; a rate's bounds are the reciprocals swapped
    (:meth:`bounds`). ``group`` names the scores that answered and ``n`` how many; ``fitted`` is False when no
    row of this platform and stack was fitted (a wide interval, from families predicted before any fit)."""

    level: float
    low_factor: float
    high_factor: float
    group: str
    n: int
    fitted: bool

    def bounds(self, value: Any, *, rate: bool = False) -> tuple[Any, Any]:
        """(low, high) of a predicted ``value`` (a number or an array): a time's, or with ``rate`` a rate's."""
        if rate:
            return value / self.high_factor, value / self.low_factor
        return value * self.low_factor, value * self.high_factor

    def describe(self) -> str:
        basis = "fitted rows" if self.fitted else "NO fitted rows: families predicted before any fit"
        return (f"{self.level:.0%} interval from {self.n} held-out errors ({self.group}; {basis}): "
                f"x{self.low_factor:.2f}..x{self.high_factor:.2f} on times")


def check_level(level: float) -> None:
    """An interval's level: a probability strictly between 0 and 1."""
    if not 0 < level < 1:
        raise WorkloadError(f"an interval's level must be between 0 and 1 (exclusive), got {level!r}")


def conformal_bounds(scores: Sequence[float], level: float) -> tuple[float, float] | None:
    """The equal-tailed split-conformal quantiles of ``scores`` at ``level`` (module docstring); None when there
    are too few scores for a finite one at this level."""
    check_level(level)
    n, alpha = len(scores), 1.0 - level
    eps = 1e-9   # (n + 1) x 0.9 is 9.000000000000002 in floating point for n = 9: the rank is 9, not 10
    lo_k, hi_k = math.floor((n + 1) * alpha / 2 + eps), math.ceil((n + 1) * (1 - alpha / 2) - eps)
    if lo_k < 1 or hi_k > n:
        return None
    s = sorted(scores)
    return s[lo_k - 1], s[hi_k - 1]


#: The fewest publications a group's scores must come from to give an interval; fewer: the next coarser group.
#: Chosen among 3-6 by :func:`coverage_by_publication` on the shipped errors (3: AMD's rows 66% inside their 80%
#: intervals, 4: 81%; 4-6 alike elsewhere): a choice made on the data it is judged by, so said here.
MIN_PUBLICATIONS = 4
#: The fewest scores a kept publication must have in a group to count in it. The held-out evidence holds rows of
#: grade A or B only (setups as published, the rows the calibration fits); the kept set takes every grade, and many of
#: its publications are one comment with one row, which cannot tell the publication's offset from a one-off: the
#: achatbot row (gpt-oss-20b on a serverless H100, a mean TTFT 47x the model's, 25x at the median) set the upper end
#: of every NVIDIA TTFT interval but vLLM's at x47. Checked by :func:`coverage_by_publication`, every score still
#: judged (those rows too): with this rule 83% of the held-out and 72% of the 225 kept rows of the time fell inside
#: their 80% intervals (without it 83% and 75%, and that x47); applied to every publication, 84% and 73%, but AMD's
#: rows 72% and TPU's 71% (77%, 79% with it). With the 48 kept rows added since: 83% and 74% (273 rows).
MIN_SCORES_PER_KEPT_PUBLICATION = 2


def publication_weighted_bounds(scores: Sequence[float], sources: Sequence[str], level: float,
                                thin: Iterable[str] = ()) -> tuple[float, float] | None:
    """:func:`conformal_bounds` with each publication's scores weighing as much as any other's, whatever its row
    count: the "pooled CDF" of Dunn, Wasserman and Ramdas, "Distribution-free prediction sets for two-layer
    hierarchical models", JASA 2022 (https://arxiv.org/abs/1809.07441), for data that come in groups, here the
    publications (a new user's runs are a new publication, with its own offset). The quantile levels keep the
    (n + 1) / n finite-sample inflation; None with scores from fewer than :data:`MIN_PUBLICATIONS` publications or
    too few for the level. Checked on the shipped errors: 81% of rows inside the 80% intervals the other
    publications give, 89% inside the 90% ones (unweighted: 76%, 86%; with every publication inflated as one
    sample, 88%, 96%)."""
    check_level(level)
    n = sum(_counted(sources, thin).values())
    hi_q = (1 - (1 - level) / 2) * (1 + 1 / n) if n else math.inf
    got = _weighted_quantiles(scores, sources, (1 - hi_q, hi_q), thin)
    return None if got is None else (got[0], got[1])


def _counted(sources: Sequence[str], thin: Iterable[str] = ()) -> dict[str, int]:
    """Scores per publication, but for the publications among ``thin`` (the kept set's) with fewer than
    :data:`MIN_SCORES_PER_KEPT_PUBLICATION` of them."""
    counts: dict[str, int] = {}
    for src in sources:
        counts[src] = counts.get(src, 0) + 1
    few = {src for src in thin if counts.get(src, 0) < MIN_SCORES_PER_KEPT_PUBLICATION}
    return {src: n for src, n in counts.items() if src not in few}


def _weighted_quantiles(scores: Sequence[float], sources: Sequence[str], targets: Sequence[float],
                        thin: Iterable[str] = ()) -> list[float] | None:
    """The scores at cumulative levels ``targets`` (ascending) of the distribution that gives each publication
    the same weight, split evenly among its scores (a kept publication, among ``thin``, with fewer than
    :data:`MIN_SCORES_PER_KEPT_PUBLICATION` scores here left out); None with fewer than :data:`MIN_PUBLICATIONS`
    publications or a target above 1 (too few scores for the level)."""
    counts = _counted(sources, thin)
    if len(counts) < MIN_PUBLICATIONS or targets[-1] > 1:
        return None
    order = sorted((i for i in range(len(scores)) if sources[i] in counts), key=lambda i: scores[i])
    cum, total, out, left = 0.0, float(len(counts)), [], list(targets)
    for i in order:
        cum += 1.0 / counts[sources[i]] / total
        while left and cum >= left[0] - 1e-12:
            out.append(scores[i])
            left.pop(0)
    out += [scores[order[-1]]] * len(left)   # rounding: the last score closes what is left
    return out


def publication_weighted_radius(scores: Sequence[float], sources: Sequence[str], level: float,
                                thin: Iterable[str] = ()) -> tuple[float, float] | None:
    """(-r, r): the symmetric split-conformal interval of the absolute scores |s| (Lei et al. 2018, §2.2: the
    residual's magnitude as the conformity score), r their publication-weighted quantile at ``level`` x (n + 1) / n.
    For a group with no fitted rows: the errors of other families before their fits say how far such a prediction may be off, not
    which way a new family will lean (the blind AMD rows were early builds, several times slower than the model;
    ROCm ATOM in 2026 runs faster than it), so the interval always holds the prediction. None as for the bounds."""
    check_level(level)
    n = sum(_counted(sources, thin).values())
    got = _weighted_quantiles([abs(x) for x in scores], sources, (level * (1 + 1 / n),), thin) if n else None
    return None if got is None else (-got[0], got[0])


#: Scores grouped by each fallback's fields, per scores tuple (by identity, the tuple kept alive beside them):
#: every table that leaves one publication out of the same scores shares one grouping.
_GROUPED: dict[int, tuple[tuple[Score, ...], dict[tuple[Any, ...], dict[tuple[Any, ...], list[Score]]]]] = {}


def _grouped(scores: tuple[Score, ...]) -> dict[tuple[Any, ...], dict[tuple[Any, ...], list[Score]]]:
    hit = _GROUPED.get(id(scores))
    if hit is None or hit[0] is not scores:
        out: dict[tuple[Any, ...], dict[tuple[Any, ...], list[Score]]] = {}
        for fields in FALLBACK:
            table: dict[tuple[Any, ...], list[Score]] = {}
            for s in scores:
                table.setdefault(s.key(fields), []).append(s)
            out[fields] = table
        if len(_GROUPED) >= 8:
            _GROUPED.clear()
        _GROUPED[id(scores)] = hit = (scores, out)
    return hit[1]


@attrs.frozen
class IntervalTable:
    """The held-out scores shipped beside the calibration, and the intervals they give; ``exclude``: a source whose
    scores are left out (:meth:`without`)."""

    scores: tuple[Score, ...]
    path: str = ""
    exclude: str | None = None

    def without(self, source: str) -> IntervalTable:
        """These scores but ``source``'s: the intervals a new publication would be given (one grouping shared)."""
        return attrs.evolve(self, exclude=source)

    def _group(self, fields: tuple[str, ...], key: tuple[Any, ...]) -> list[Score]:
        """The scores of one group; a group across kinds pools the errors of times only (:data:`APART_KINDS`): a
        speedup is a ratio of two predictions whose errors partly cancel, a time at a request rate a capacity
        error amplified, neither evidence of how far a time may be off."""
        got = _grouped(self.scores)[fields].get(key, [])
        if "kind" not in fields:
            got = [g for g in got if g.kind not in APART_KINDS]
        return got if self.exclude is None else [g for g in got if g.source != self.exclude]

    def is_fitted(self, platform: str, stack: str, kind: str | None = None) -> bool:
        """Whether any shipped score comes from fitted rows of this platform and stack family (``*``: of any
        stack family on this platform, as the pooled set is fitted on all of them). A time's evidence is times'
        scores only: a stack whose speedups were published (the research harnesses' ``other``) has no fitted times
        for it. A speedup (``kind`` speedup, a ratio of two predictions on the same devices), or a time at a
        request rate, is fitted evidence where either is: its own kind's scores of the stack, or its fitted times
        (an AMD GPU's speedups then take the speedups published on other platforms, not a family's errors before
        any fit)."""
        return any(s.fitted and s.platform == platform and stack in ("*", s.stack) and s.source != self.exclude
                   and (s.kind == kind or s.kind not in APART_KINDS) for s in self.scores)

    def interval(self, platform: str, stack: str, kind: str, level: float = DEFAULT_LEVEL,
                 fitted: bool | None = None) -> Interval:
        """The interval of a prediction of ``kind`` on ``platform`` run by serving-stack family ``stack``; ``fitted``
        (default: whether any shipped score of the platform and stack is) picks fitted or unfitted evidence."""
        if kind not in KINDS:
            raise WorkloadError(f"unknown interval kind {kind!r} (one of {', '.join(KINDS)})")
        if fitted is None:
            fitted = self.is_fitted(platform, stack, kind)
        # a kind kept apart answers from its own scores where the platform is fitted (a pool of times' errors would
        # be no evidence of it); with no fitted rows, from the unfitted times' pool, widened to its own kind's range
        own = kind in APART_KINDS and fitted
        extremes = self._extremes(kind, level) if kind in APART_KINDS else None
        got = self._fallback(platform, stack, kind, level, fitted, FALLBACK if not own else
                             tuple(f for f in FALLBACK if "kind" in f)) or extremes
        if got is None:
            raise WorkloadError(f"too few held-out errors for a {level:.0%} interval of {kind} (level too high)")
        if kind in APART_KINDS and not fitted:
            widest = [self._fallback(p, "*", kind, level, True, (("platform", "kind", "fitted"), ("kind", "fitted")))
                      or extremes for p in sorted({s.platform for s in self.scores if s.kind == kind})]
            got = envelope([got, *(w for w in widest if w is not None)])
        return got

    def _fallback(self, platform: str, stack: str, kind: str, level: float, fitted: bool,
                  fallback: Sequence[tuple[str, ...]]) -> Interval | None:
        """The interval of the first group along ``fallback`` whose scores give one at ``level``, at least as wide
        as the widest errors of the groups before it that had scores but too few for the level (so a higher level
        never gives a narrower range: a coarser pool can be narrower than a thin group's own errors, and a review
        found 314 such narrowings, per-token x0.74..x2.10 at 96% and x0.59..x1.76 at 97% on an H100); None if
        none gives one."""
        probe = {"platform": platform, "stack": stack, "kind": kind, "fitted": fitted}
        thin_groups: list[tuple[float, float, str, int]] = []   # (low, high, group, errors) of each too thin
        for fields in fallback:
            got = self._group(fields, tuple(probe[f] for f in fields))
            thin = {g.source for g in got if g.kept}
            q = (publication_weighted_bounds([g.score for g in got], [g.source for g in got], level, thin) if fitted
                 else publication_weighted_radius([g.score for g in got], [g.source for g in got], level, thin))
            name = ", ".join(f"{f} {probe[f]}" for f in fields if f != "fitted") or "every platform and kind"
            if q is not None:
                lo, hi = min([q[0], *(t[0] for t in thin_groups)]), max([q[1], *(t[1] for t in thin_groups)])
                wider = [f"{t[2]} ({t[3]})" for t in thin_groups if t[0] < q[0] or t[1] > q[1]]
                if wider:
                    name += ", widened to the widest errors of " + "; ".join(wider)
                return Interval(level=level, low_factor=math.exp(lo), high_factor=math.exp(hi), group=name,
                                n=len(got), fitted=fitted)
            if got and (not thin_groups or thin_groups[-1][3] != len(got)):   # a coarser group with more errors
                kept = _counted([g.source for g in got], thin)   # a kept publication's lone outlier: out, as in the quantiles
                if kept:
                    thin_groups.append((*_widest([g.score for g in got if g.source in kept], fitted), name, len(got)))
        return None

    def _extremes(self, kind: str, level: float) -> Interval | None:
        """Where a kind's scores are too few for ``level`` (a conformal bound would be infinite): the widest errors
        it has seen, named as such; None without scores of the kind."""
        got = [g.score for g in self._group(("kind",), (kind,))]
        if not got:
            return None
        return Interval(level=level, low_factor=math.exp(min(min(got), 0.0)), high_factor=math.exp(max(max(got), 0.0)),
                        group=f"kind {kind}: the widest of its {len(got)} errors, too few for a {level:.0%} interval",
                        n=len(got), fitted=True)


def _widest(scores: Sequence[float], fitted: bool) -> tuple[float, float]:
    """The widest errors (log) a group too thin for a level has shown; symmetric where it has no fitted rows, as
    :func:`publication_weighted_radius` is."""
    if not fitted:
        return -max(abs(x) for x in scores), max(abs(x) for x in scores)
    return min(scores), max(scores)


def envelope(intervals: Sequence[Interval]) -> Interval:
    """The lowest low factor and the highest high of several intervals of one figure (at least as uncertain as the
    least known of them)."""
    if len(intervals) == 1:
        return intervals[0]
    return Interval(level=intervals[0].level, low_factor=min(i.low_factor for i in intervals),
                    high_factor=max(i.high_factor for i in intervals),
                    group="the widest of: " + "; ".join(dict.fromkeys(i.group for i in intervals)),
                    n=sum(i.n for i in intervals), fitted=all(i.fitted for i in intervals))


def coverage_by_publication(scores: Iterable[Score], level: float = DEFAULT_LEVEL) -> dict[str, Any]:
    """How often a publication's rows fall inside the intervals the other publications' scores give (each
    publication left out in turn, as a user's new publication would be): the fraction covered, overall, per
    platform, for the unfitted evidence (``unfitted``: the estimated profiles' errors, each publication's checked
    against the other unfitted publications'), and apart for the kept set's rows (``kept``) and the rest
    (``held_out``)."""
    scores = list(scores)
    full = IntervalTable(scores=tuple(scores))
    hits: dict[str, list[bool]] = {}
    for src in sorted({s.source for s in scores}):
        table = full.without(src)
        for s in (x for x in scores if x.source == src):
            try:   # an unfitted score (a family's estimated profile) checks the unfitted evidence
                iv = table.interval(s.platform, s.stack, s.kind, level, fitted=s.fitted)
            except WorkloadError:
                continue
            inside = math.log(iv.low_factor) <= s.score <= math.log(iv.high_factor)
            hits.setdefault("all", []).append(inside)
            hits.setdefault("kept" if s.kept else "held_out", []).append(inside)
            hits.setdefault(s.platform if s.fitted else "unfitted", []).append(inside)
    return {k: {"covered": sum(v) / len(v), "rows": len(v)} for k, v in hits.items()}


def _score(entry: Any, path: Path) -> Score:
    try:
        return Score(id=str(entry["id"]), source=str(entry["source"]), platform=str(entry["platform"]),
                     stack=str(entry["stack"]), kind=str(entry["kind"]), fitted=bool(entry["fitted"]),
                     score=float(entry["score"]), kept=bool(entry.get("kept", False)))
    except (KeyError, TypeError, ValueError) as e:
        raise SpecError(f"{path}: a score entry is malformed ({e}): {entry!r}"[:300]) from None


def load_intervals(path: str | Path | None = None) -> IntervalTable:
    """The interval table of ``path`` (default: the shipped one); a malformed file raises :class:`SpecError`."""
    p = Path(path) if path is not None else interval_file()
    try:
        data = json.loads(read_text(p, what="an interval table (.json)", max_bytes=20_000_000))
    except json.JSONDecodeError as e:
        raise SpecError(f"{p}: not JSON: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("scores"), list) or not data["scores"]:
        raise SpecError(f"{p}: needs a non-empty list 'scores'")
    return IntervalTable(scores=tuple(_score(e, p) for e in data["scores"]), path=str(p))


@functools.cache
def shipped_intervals() -> IntervalTable:
    """The interval table that ships beside the calibration, read on first use."""
    return load_intervals()
