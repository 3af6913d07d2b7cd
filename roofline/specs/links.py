"""Links between device groups (draft <-> target, prefill -> decode): bandwidth per direction and latency.

Bandwidths are the theoretical per-direction rates; latencies are the
engineering estimates of docs/theory.md §5.5 (NVLink/NCCL p2p 5-10 us, PCIe
cudaMemcpy 5-15 us, RDMA 2-5 us plus software, kernel TCP 20-100 us): they
are estimates, not measurements, and any link can be given explicitly as
``"BANDWIDTH,LATENCY"`` (e.g. ``"50GB/s,3us"``).
"""

from __future__ import annotations

import attrs

from ..errors import NotFoundError, UnitError, WorkloadError, did_you_mean
from ..units import parse_quantity
from ..workload import in_range


@attrs.frozen(kw_only=True)
class GroupLink:
    """A link between two device groups."""

    name: str
    bandwidth_bytes_per_s: float = attrs.field(validator=in_range(0, lo_strict=True))
    latency_s: float = attrs.field(validator=in_range(0))


LINKS: dict[str, GroupLink] = {
    # PCIe Gen5 x16: 32 GT/s x 16 lanes x 128/130 / 8 = 63 GB/s per direction (PCI-SIG Gen5 line rate,
    # 128b/130b encoding; docs/theory.md §0)
    "pcie5": GroupLink(name="pcie5", bandwidth_bytes_per_s=63e9, latency_s=10e-6),
    "pcie4": GroupLink(name="pcie4", bandwidth_bytes_per_s=31.5e9, latency_s=10e-6),
    # NVLink4 per GPU 450 GB/s per direction (scaling book); p2p latency 5-10 us
    "nvlink": GroupLink(name="nvlink", bandwidth_bytes_per_s=450e9, latency_s=5e-6),
    # 400 GbE / 100 GbE with RDMA (RoCE): line rate / 8; 2-5 us network plus software
    "ethernet-400g": GroupLink(name="ethernet-400g", bandwidth_bytes_per_s=50e9, latency_s=5e-6),
    "ethernet-100g": GroupLink(name="ethernet-100g", bandwidth_bytes_per_s=12.5e9, latency_s=5e-6),
    # InfiniBand NDR 400 Gb/s
    "infiniband-ndr": GroupLink(name="infiniband-ndr", bandwidth_bytes_per_s=50e9, latency_s=3e-6),
    # kernel TCP over 100 GbE
    "tcp-100g": GroupLink(name="tcp-100g", bandwidth_bytes_per_s=12.5e9, latency_s=50e-6),
}


def get_link(spec: str | GroupLink) -> GroupLink:
    """A named link (``pcie5``, ``nvlink``, ``ethernet-400g``, ...) or ``"BANDWIDTH,LATENCY"``."""
    if isinstance(spec, GroupLink):
        return spec
    text = str(spec).strip()
    if text.lower() in LINKS:
        return LINKS[text.lower()]
    if "," in text:
        bw, _, lat = text.partition(",")
        try:
            bytes_per_s = parse_quantity(bw, "bytes_per_s", what="link bandwidth")
            latency_s = parse_quantity(lat, "s", what="link latency")
        except (ValueError, UnitError, WorkloadError) as e:
            raise UnitError(f"link {text!r}: {e}") from None
        if not bytes_per_s > 0 or bytes_per_s == float("inf"):
            raise WorkloadError(f"link {text!r}: the bandwidth must be a finite rate > 0, got {bw.strip()}")
        if not latency_s >= 0 or latency_s == float("inf"):
            raise WorkloadError(f"link {text!r}: the latency must be a finite time >= 0, got {lat.strip()}")
        return GroupLink(name=text, bandwidth_bytes_per_s=bytes_per_s, latency_s=latency_s)
    raise NotFoundError(f"unknown link {text!r}{did_you_mean(text, LINKS)}; known: {', '.join(LINKS)}, "
                        "or 'BANDWIDTH,LATENCY' such as '50GB/s,3us'")
