"""TPU ICI is a torus of nearest-neighbour links: a collective's latency counts the hops along each axis of the slice,
not around one ring of every chip (docs/theory.md §5.1)."""

from __future__ import annotations

import itertools
import json
from collections import deque
from pathlib import Path

import attrs
import pytest

import roofline as rl
from roofline.physics.comms import group_communication_s
from roofline.specs.fabric import Link, slice_shape
from roofline.specs.formats import get_format
from roofline.specs.groups import DeviceGroup


def _slice_diameter(shape: tuple[int, ...], closed: tuple[bool, ...]) -> int:
    """The most link hops between two chips of a slice, by breadth-first search over its links (an axis whose ring
    closes links its two ends)."""
    chips = list(itertools.product(*(range(n) for n in shape)))

    def neighbours(c: tuple[int, ...]):
        for axis, (n, wrap) in enumerate(zip(shape, closed)):
            for step in (-1, 1):
                i = c[axis] + step
                if wrap:
                    i %= n
                if 0 <= i < n and i != c[axis]:
                    yield (*c[:axis], i, *c[axis + 1:])

    def farthest(start: tuple[int, ...]) -> int:
        seen, todo = {start: 0}, deque([start])
        while todo:
            c = todo.popleft()
            for d in neighbours(c):
                if d not in seen:
                    seen[d] = seen[c] + 1
                    todo.append(d)
        return max(seen.values())
    return max(farthest(c) for c in chips)


def test_slices_take_the_documented_default_shapes():
    """The default topology of a chip count is the one closest to a square or cube: Google's v6e slices (2D) and
    v5p slices (3D), https://docs.cloud.google.com/tpu/docs/v6e, https://docs.cloud.google.com/tpu/docs/v5p."""
    v6e = {4: (2, 2), 8: (2, 4), 16: (4, 4), 32: (4, 8), 64: (8, 8), 128: (8, 16), 256: (16, 16)}
    v5p = {8: (2, 2, 2), 16: (2, 2, 4), 32: (2, 4, 4), 64: (4, 4, 4), 128: (4, 4, 8), 512: (8, 8, 8)}
    assert {p: slice_shape(p, 2) for p in v6e} == v6e
    assert {p: slice_shape(p, 3) for p in v5p} == v5p
    assert slice_shape(12, 2) == (3, 4) and slice_shape(1, 3) == (1, 1, 1)


@pytest.mark.parametrize("axes,wrap", [(2, 16), (3, 4), (2, 4), (4, None)])
def test_a_collectives_hops_are_the_slices_diameter(axes, wrap):
    """A latency-bound reduce-scatter passes each shard to the farthest chip: the hops the link counts are the
    slice's diameter, counted here over its links (rings closed where the spec's rule says), for every power-of-two
    slice up to 256 chips; a ring of p chips would be p - 1."""
    link = Link(bandwidth_bytes_per_s=4e11, latency_s=None, torus=axes, wraparound=wrap)
    for p in (2 ** k for k in range(1, 9)):
        shape = slice_shape(p, axes)
        closed = ((False,) * axes if wrap is None else tuple(n % wrap == 0 for n in shape) if axes != 3
                  else (all(n % wrap == 0 for n in shape),) * axes)
        assert link.ring_hops(p) == _slice_diameter(shape, closed), p
        assert link.ring_hops(p) <= p - 1
    assert Link(bandwidth_bytes_per_s=1.0, latency_s=None).ring_hops(32) == 31   # a switched fabric's ring
    assert link.ring_hops(1) == 0


def test_the_shipped_tpus_and_trainiums_are_tori():
    """v5e and v6e: 2D tori whose axes close at the pod's 16 chips; TPU7x a 3D torus closing in whole 4x4x4 cubes;
    Trn2 a closed 4 x 4 torus, Trn1 a 4D hypercube; Inferentia2 stays a ring of its chips."""
    shapes = {d: (rl.load_device(d).scale_up.torus, rl.load_device(d).scale_up.wraparound)
              for d in ("tpu-v5e", "tpu-v6e", "tpu-7x", "trainium2", "trainium1", "inferentia2")}
    assert list(shapes.values()) == [(2, 16), (2, 16), (3, 4), (2, 4), (4, None), (None, None)]
    assert rl.load_device("trainium2").scale_up.ring_hops(16) == 2 + 2
    assert rl.load_device("trainium1").scale_up.ring_hops(16) == 4 and rl.load_device("inferentia2").scale_up.ring_hops(12) == 11
    v6e = rl.load_device("tpu-v6e").scale_up
    assert v6e.ring_hops(32) == 3 + 7 and v6e.ring_hops(256) == 8 + 8   # 4x8 open; 16x16 closed both ways


def test_decode_all_reduces_on_a_torus_pay_its_hops_not_a_rings():
    """One token's all-reduces are latency-bound: each costs the family's base plus two passes of the slice's hops at
    the link's hop latency, and the bytes. Counted here from the spec's hops, the profile's base and hop latency;
    the same slice as one ring of 32 chips pays 62 hops per all-reduce instead of 20."""
    model, dev = rl.load_model("glm-4.5-air"), rl.load_device("tpu-v6e")
    prof = rl.family_profile("tpu").profile
    group = DeviceGroup(device=dev, tp=32)
    act = get_format("bf16")
    m = model.hidden_size * act.bytes_per_element
    bw = dev.scale_up.bandwidth_bytes_per_s * prof.allreduce_bandwidth_fraction
    per = prof.collective_base_s + 2 * 10 * prof.link_hop_latency_s + 2 * 31 / 32 * m / bw
    assert group_communication_s(model, group, act, 1, prof) == pytest.approx(2 * model.num_layers * per)
    ring = attrs.evolve(dev, scale_up=attrs.evolve(dev.scale_up, torus=None, wraparound=None))
    longer = group_communication_s(model, DeviceGroup(device=ring, tp=32), act, 1, prof)
    assert longer - 2 * model.num_layers * per == pytest.approx(2 * model.num_layers * 2 * (31 - 10) * prof.link_hop_latency_s)


@pytest.mark.parametrize("extra,field,says", [
    ('wraparound = { value = 16, source = "https://x" }', "wraparound", "needs the torus"),
    ('torus = { value = 5, source = "https://x" }', "torus", "2, 3 or 4 axes"),
    ('torus = { value = 2, source = "https://x" }\npeers = { value = 7, source = "https://x" }', "torus", "not both"),
    ('torus = { value = 2, source = "https://x" }\nwraparound = { value = 1.5, source = "https://x" }', "wraparound",
     "whole number of chips"),
])
def test_a_bad_torus_in_a_spec_file_names_its_field(tmp_path, extra, field, says):
    text = Path(rl.load_device("tpu-v6e").path).read_text()
    text = "\n".join(line for line in text.splitlines() if not line.startswith(("torus =", "wraparound =")))
    text = text.replace("[links.scale_up]\n", f"[links.scale_up]\n{extra}\n")
    path = tmp_path / "odd-tpu.toml"
    path.write_text(text.replace('id = "tpu-v6e"', 'id = "odd-tpu"'))
    with pytest.raises(rl.RooflineError, match=says) as e:
        rl.load_device(str(path))
    assert field in str(e.value) and "odd-tpu.toml" in str(e.value)


def test_a_what_if_can_reshape_the_torus(run_cli):
    """--set reaches the torus like any spec field: eight chips as a 2x2x2 cube (3 hops a pass) instead of a 2x4
    plane (4) shorten one token's all-reduces by one hop each way; `show` lists the field."""
    def comm(*extra: str) -> float:
        code, out, err = run_cli("stage", "llama-3.1-70b", "tpu-v6e:8", "--batch", "1", "--json", *extra)
        assert code == 0, err
        return next(s for s in json.loads(out)["stages"] if s["stage"] == "decode")["rows"][0]["communication_s"]
    plane, cube = comm(), comm("--set", "tpu-v6e.scale_up.torus=3")
    hop = rl.family_profile("tpu").profile.link_hop_latency_s
    layers = rl.load_model("llama-3.1-70b").num_layers
    assert plane - cube == pytest.approx(2 * layers * 2 * (4 - 3) * hop)
    assert "scale_up.torus" in run_cli("show", "tpu-v6e")[1]
