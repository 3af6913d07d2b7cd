"""Prices as data, like specs: ``hardware_specs/prices/prices.toml`` gives $ per device-hour with a source and a date.

A device without a shipped price has none (its costs come out NaN with a note) until the user gives one
(``--usd-per-device-hour b200=6.5``, ``Prices.with_overrides``). An hourly price can also be built from a
purchase price spread over its life (``capex_usd`` / ``lifetime_years``). The shipped prices are rental prices,
which include power; for a purchase price, give an electricity price (``--usd-per-kwh``) and the power model's
draw at the operating point (times PUE) is added.
"""

from __future__ import annotations

import functools
import math
import tomllib
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import attrs

from ..errors import SpecError, WorkloadError
from .devices import specs_dir
from .files import loads_toml, read_text

HOURS_PER_YEAR = 8766.0   # 365.25 days


@attrs.frozen(kw_only=True)
class Price:
    """One device's price per hour, where it comes from and when it was read."""

    device: str
    usd_per_hour: float
    source: str
    date: str = ""
    note: str = ""


#: Prices beyond these are unit mistakes, not prices: retail electricity costs well under 1 USD per kWh, and a
#: device-hour of the largest accelerators rents for hundreds of USD.
MAX_USD_PER_KWH = 10.0
MAX_USD_PER_DEVICE_HOUR = 10_000.0


@attrs.frozen(kw_only=True)
class Prices:
    """Prices by device id, and an optional electricity price (USD per kWh, applied to modelled power)."""

    by_device: Mapping[str, Price] = attrs.field(factory=dict, converter=lambda m: MappingProxyType(dict(m)))
    usd_per_kwh: float = 0.0
    usd_per_kwh_source: str = ""

    def usd_per_hour(self, device_id: str) -> float:
        """The device's price per hour, NaN where none is known."""
        p = self.by_device.get(device_id)
        return p.usd_per_hour if p is not None else math.nan

    def with_overrides(self, prices: Mapping[str, float], *, usd_per_kwh: float | None = None) -> Prices:
        """These prices with user-given ``{device id: USD per hour}`` (and electricity) replacing the shipped ones."""
        out = dict(self.by_device)
        for dev, usd in prices.items():
            if isinstance(usd, bool) or not isinstance(usd, (int, float)) or not (
                    math.isfinite(usd) and 0 <= usd <= MAX_USD_PER_DEVICE_HOUR):
                raise WorkloadError(f"price of {dev}: expected USD per device-hour in [0, "
                                    f"{MAX_USD_PER_DEVICE_HOUR:,g}], got {usd!r}")
            out[dev] = Price(device=dev, usd_per_hour=float(usd), source="given by the user")
        kwh = self.usd_per_kwh if usd_per_kwh is None else usd_per_kwh
        if isinstance(kwh, bool) or not isinstance(kwh, (int, float)) or not (
                math.isfinite(kwh) and 0 <= kwh <= MAX_USD_PER_KWH):
            raise WorkloadError(f"electricity price must be USD per kWh in [0, {MAX_USD_PER_KWH:g}] (retail "
                                f"electricity costs well under 1), got {kwh!r}")
        return attrs.evolve(self, by_device=out, usd_per_kwh=float(kwh),
                            usd_per_kwh_source=self.usd_per_kwh_source if usd_per_kwh is None else "given by the user")


def _price(dev: str, entry: Any, refs: dict[str, str], where: str) -> Price:
    if not isinstance(entry, dict):
        raise SpecError(f"{where}: must be a table")
    source = refs.get(entry.get("source", ""), entry.get("source", ""))
    if not isinstance(source, str) or not source.startswith(("http://", "https://")):
        raise SpecError(f"{where}: needs a source URL (or a key of [sources])")
    if "usd_per_hour" in entry:
        usd = entry["usd_per_hour"]
    elif "capex_usd" in entry and "lifetime_years" in entry:
        usd = entry["capex_usd"] / (entry["lifetime_years"] * HOURS_PER_YEAR)
    else:
        raise SpecError(f"{where}: give usd_per_hour, or capex_usd and lifetime_years")
    if isinstance(usd, bool) or not isinstance(usd, (int, float)) or not (math.isfinite(usd) and usd > 0):
        raise SpecError(f"{where}: the price must be a positive number of USD per hour, got {usd!r}")
    return Price(device=dev, usd_per_hour=float(usd), source=source, date=str(entry.get("date", "")),
                 note=str(entry.get("note", "")))


def load_prices(path: str | Path) -> Prices:
    """Prices from a TOML file: ``[sources]`` (key = URL) and ``[device.<id>]`` tables, each with
    ``usd_per_hour`` (or ``capex_usd`` and ``lifetime_years``), a ``source`` (URL or key) and a ``date``."""
    path = Path(path)
    try:
        data = loads_toml(read_text(path, what="a price file (.toml)", max_bytes=200_000))
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{path}: TOML does not parse: {e}") from None
    refs = data.get("sources", {})
    table = data.get("device", {})
    if not isinstance(table, dict) or not isinstance(refs, dict):
        raise SpecError(f"{path}: needs [sources] and [device.<id>] tables")
    return Prices(by_device={dev: _price(dev, entry, refs, f"{path} [device.{dev}]") for dev, entry in table.items()})


@functools.cache
def shipped_prices() -> Prices:
    """The prices that ship with the package (``hardware_specs/prices/prices.toml``)."""
    return load_prices(specs_dir() / "prices" / "prices.toml")
