"""Plots (optional ``plot`` extra): roofline chart, Pareto frontiers, validation errors. matplotlib is imported
only here, when a plot is asked for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import RooflineError
from ..specs.files import check_writable, write_atomic

FORMATS = (".png", ".svg", ".pdf")


def check_plot_path(path: str) -> None:
    """Refuse a plot before any computing: the plot extra must be installed and the path name a writable .png,
    .svg or .pdf file."""
    import importlib.util
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise RooflineError(f"{path}: a plot is written as {', '.join(FORMATS)}; name the file with one of them")
    check_writable(path)
    if importlib.util.find_spec("matplotlib") is None:
        raise RooflineError("--plot needs matplotlib: pip install 'roofline[plot]'")


def _pyplot() -> Any:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RooflineError("--plot needs matplotlib: pip install 'roofline[plot]'") from None
    return plt


def _save(fig: Any, path: str) -> None:
    """Save ``fig`` atomically: drawn into a temporary file beside ``path``, renamed over it when whole (a full
    disk leaves the old plot as it was, not a truncated one)."""
    plt = _pyplot()
    fmt = Path(path).suffix.lower().lstrip(".")
    try:
        write_atomic(path, lambda tmp: fig.savefig(tmp, format=fmt, dpi=120, bbox_inches="tight"))
    finally:
        plt.close(fig)


def plot_frontiers(configs: list[dict[str, Any]], path: str, *, title: str = "", axis: str = "kw") -> None:
    """Tokens/s per kW (or $ per million output tokens) against tokens/s per user, one line per configuration."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for cfg in configs:
        pts = cfg["frontier"]
        if not pts:
            ax.plot([], [], label=f"{cfg['name']} (no feasible point)")
        else:
            key = "tokens_per_s_per_kw" if axis == "kw" else "usd_per_million_output_tokens"
            ax.plot([p["tokens_per_s_per_user"] for p in pts], [p[key] for p in pts], marker="o",
                    markersize=3, label=cfg["name"])
    ax.set_xlabel("interactivity (tokens/s per user)")
    ax.set_ylabel("throughput per power (tokens/s per kW)" if axis == "kw" else "USD per million output tokens")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    _save(fig, path)


def plot_validation(rows: list[dict[str, Any]], path: str, *, title: str = "") -> None:
    """Predicted against measured (each row relative to its measurement), by metric, with +/-10% and 25% bands."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    metrics = sorted({r["metric"] for r in rows})
    for i, m in enumerate(metrics):
        pts = [r for r in rows if r["metric"] == m]
        ax.scatter([i + 0.08 * ((j % 5) - 2) for j in range(len(pts))], [100 * r["error"] for r in pts], label=m, s=22)
    for band, alpha in ((10, 0.15), (25, 0.07)):
        ax.axhspan(-band, band, color="tab:green", alpha=alpha)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(range(len(metrics)), [m.replace("_", " ") for m in metrics], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("error, % of measured (predicted - measured)")
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    _save(fig, path)


def _mark_unfit(ax: Any, device: Any, peak: float | None, inten: Any, batch: Any, bad: Any, stage: str) -> None:
    """Batches that do not fit: a red x on the roof at their intensity, named in the legend (not dropped)."""
    import numpy as np
    bw = next((t.bandwidth_bytes_per_s for t in device.memory if t.bandwidth_bytes_per_s), None)
    show = bad & np.isfinite(inten) & (inten > 0)
    if not show.any() or bw is None:
        return
    y = inten[show] * bw if peak is None else np.minimum(peak, inten[show] * bw)
    ax.scatter(inten[show], y, marker="x", color="red", s=30,
               label=f"{stage}: batch {', '.join(f'{b:.0f}' for b in batch[show])} does not fit")


def plot_roofline(device: Any, results: list[Any], path: str, *, compute_class: str = "bf16", title: str = "") -> None:
    """The classic roofline chart of one device (Williams et al. 2009): attainable FLOP/s against arithmetic
    intensity, with one point per stage and batch (its FLOP per device over its time)."""
    import numpy as np

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    peak = device.peak_flop_per_s.get(compute_class)
    x = np.logspace(-1, 5, 200)
    for tier in device.memory:
        if tier.bandwidth_bytes_per_s:
            roof = x * tier.bandwidth_bytes_per_s if peak is None else np.minimum(peak, x * tier.bandwidth_bytes_per_s)
            ax.loglog(x, roof, label=f"{tier.name} {tier.bandwidth_bytes_per_s / 1e12:.3g} TB/s roof")
    if peak:
        ax.axhline(peak, color="grey", ls=":", lw=0.8)
    for r in results:
        flops = np.ravel(np.asarray(r.flop_per_device / r.time_s, dtype=float))
        inten = np.ravel(np.asarray(r.intensity_flop_per_byte, dtype=float))
        batch = np.ravel(np.broadcast_to(np.asarray(r.batch, dtype=float), flops.shape))
        ok = np.isfinite(flops) & (flops > 0) & (inten > 0)
        ax.scatter(inten[ok], flops[ok], s=18, label=f"{r.stage} (batch {', '.join(f'{b:.0f}' for b in batch[ok])})")
        _mark_unfit(ax, device, peak, inten, batch, ~ok, r.stage)
    ax.set_xlabel("arithmetic intensity (FLOP per byte)")
    ax.set_ylabel("FLOP/s per device")
    ax.set_title(title or f"{device.name}: roofline ({compute_class} peak)")
    ax.grid(True, which="both", alpha=0.2)
    ax.legend(fontsize=7)
    _save(fig, path)
