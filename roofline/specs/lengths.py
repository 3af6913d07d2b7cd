"""Request lengths: (input, output) token counts as weighted atoms, fixed, lognormal or read from a histogram
file (the format of ``roofline/validation/lengths/``, where the MLPerf datasets' lengths ship)."""

from __future__ import annotations

import math
from pathlib import Path

import attrs
import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import WorkloadError

Array = NDArray[np.float64]
#: Atoms a lognormal length distribution is cut into, per axis (input and output are independent).
LOGNORMAL_ATOMS = 12
#: Where the shipped length histograms live (one CSV per dataset).
SHIPPED = Path(__file__).resolve().parent.parent / "validation" / "lengths"


def _positive_tokens(name: str, value: ArrayLike) -> Array:
    a = np.atleast_1d(np.asarray(value, dtype=float))
    if a.size == 0 or not np.all(np.isfinite(a)) or np.any(a < 1):
        raise WorkloadError(f"{name} must be token counts >= 1, got {value!r}")
    return a


@attrs.frozen(kw_only=True)
class Lengths:
    """Request lengths as weighted atoms: (input tokens, output tokens, weight), weights summing to 1."""

    input_tokens: Array
    output_tokens: Array
    weights: Array
    name: str = "fixed"

    def __attrs_post_init__(self) -> None:
        n = {np.shape(self.input_tokens), np.shape(self.output_tokens), np.shape(self.weights)}
        if len(n) != 1:
            raise WorkloadError(f"lengths {self.name!r}: inputs, outputs and weights differ in length")
        w = self.weights
        if not np.all(np.isfinite(w)) or np.any(w < 0) or not math.isclose(float(w.sum()), 1.0, rel_tol=1e-9):
            raise WorkloadError(f"lengths {self.name!r}: weights must be >= 0 and sum to 1")

    @classmethod
    def of(cls, input_tokens: ArrayLike, output_tokens: ArrayLike, weights: ArrayLike | None = None,
           name: str = "atoms") -> Lengths:
        """Atoms from arrays (equal weights unless given); counts are rounded to whole tokens."""
        i = np.round(_positive_tokens("input_tokens", input_tokens))
        o = np.round(_positive_tokens("output_tokens", output_tokens))
        w = np.ones(i.shape) if weights is None else np.atleast_1d(np.asarray(weights, dtype=float))
        if w.shape != i.shape or o.shape != i.shape:
            raise WorkloadError(f"lengths {name!r}: inputs, outputs and weights must have one length each")
        if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise WorkloadError(f"lengths {name!r}: weights must be finite, >= 0 and not all 0")
        return cls(input_tokens=i, output_tokens=o, weights=w / w.sum(), name=name)

    @classmethod
    def fixed(cls, input_tokens: int, output_tokens: int) -> Lengths:
        return cls.of([input_tokens], [output_tokens], name="fixed")

    @classmethod
    def lognormal(cls, input_tokens: float, output_tokens: float, cv: float = 1.0,
                  atoms: int = LOGNORMAL_ATOMS) -> Lengths:
        """Independent lognormal input and output lengths with these means and coefficient of variation ``cv``
        (sigma^2 = ln(1 + cv^2), mu = ln(mean) - sigma^2 / 2), each cut into ``atoms`` equal-probability atoms
        placed at their conditional means (so the means are kept exactly before rounding)."""
        if not (isinstance(cv, (int, float)) and math.isfinite(cv) and 0 < cv <= 10):
            raise WorkloadError(f"the lengths' coefficient of variation must be in (0, 10], got {cv!r}")
        ins, outs = (_lognormal_atoms(float(_positive_tokens(n, m)[0]), cv, atoms)
                     for n, m in (("input_tokens", input_tokens), ("output_tokens", output_tokens)))
        i, o = np.meshgrid(ins, outs, indexing="ij")
        return cls.of(i.ravel(), o.ravel(), name=f"lognormal cv {cv:g}")

    @classmethod
    def from_file(cls, path: str | Path) -> Lengths:
        """A histogram file: ``#`` comment lines, then a CSV header ``input_tokens,output_tokens,weight`` and one
        row per atom (the format of ``roofline/validation/lengths/``)."""
        p = Path(path)
        try:
            lines = [ln for ln in p.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
        except OSError as e:
            raise WorkloadError(f"lengths file {p}: {e.strerror or e}") from None
        if not lines or [c.strip() for c in lines[0].split(",")] != ["input_tokens", "output_tokens", "weight"]:
            raise WorkloadError(f"lengths file {p}: the first row must be input_tokens,output_tokens,weight")
        try:
            rows = np.array([[float(c) for c in ln.split(",")] for ln in lines[1:]], dtype=float)
        except ValueError:
            raise WorkloadError(f"lengths file {p}: every row must be three numbers") from None
        if rows.ndim != 2 or rows.shape[1] != 3:
            raise WorkloadError(f"lengths file {p}: needs at least one row of three numbers")
        try:
            return cls.of(rows[:, 0], rows[:, 1], rows[:, 2], name=p.stem)
        except WorkloadError as e:   # which file, and the row, not a numpy repr of a column
            raise WorkloadError(f"lengths file {p}: {_first_bad(rows) or e}") from e

    def mean(self, values: ArrayLike) -> float:
        return float(np.sum(self.weights * np.asarray(values)))

    @property
    def mean_input_tokens(self) -> float:
        return self.mean(self.input_tokens)

    @property
    def mean_output_tokens(self) -> float:
        return self.mean(self.output_tokens)


def _first_bad(rows: Array) -> str:
    """The first data row (1-based after the header) whose tokens are not counts >= 1 or whose weight is not a
    finite number >= 0, said in words ("" where every row is)."""
    for i, (n, o, w) in enumerate(rows, start=1):
        for name, v, least in (("input_tokens", n, 1.0), ("output_tokens", o, 1.0), ("weight", w, 0.0)):
            if not (math.isfinite(v) and v >= least):
                return f"row {i}: {name} must be {'a token count >= 1' if least else 'a number >= 0'}, got {v:g}"
    return ""


def _lognormal_atoms(mean: float, cv: float, n: int) -> Array:
    """Conditional means of a lognormal over n equal-probability slices: for slice (a, b) of the standard normal,
    E[X | slice] = exp(mu + s^2/2) (Phi(b - s) - Phi(a - s)) / (Phi(b) - Phi(a))."""
    from statistics import NormalDist
    s = math.sqrt(math.log1p(cv * cv))
    z = [NormalDist().inv_cdf(k / n) if 0 < k < n else (-math.inf if k == 0 else math.inf) for k in range(n + 1)]
    phi = NormalDist().cdf
    return np.array([mean * (phi(b - s) - phi(a - s)) * n for a, b in zip(z[:-1], z[1:])])


def shipped_lengths(name: str) -> Lengths:
    """A shipped histogram by name (``mlperf-llama2-70b``), or a :class:`WorkloadError` listing them."""
    path = SHIPPED / f"{name}.csv"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in SHIPPED.glob("*.csv")))
        raise WorkloadError(f"no shipped lengths named {name!r}; shipped: {known}")
    return Lengths.from_file(path)
