"""Metamorphic properties over every shipped device (multi-tier ones included) and every execution family:
more bandwidth, FLOP/s, link bandwidth or fast memory is never slower; a longer context is never faster; a
model that does not fit never gets a finite speed."""

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import roofline as rl
from roofline.errors import RooflineError
from roofline.serving.placements import smallest_group
from roofline.specs.formats import native_default

MODEL = "llama-3.1-8b"


def _setup(device_id):
    """A group of the family's layout holding the model at batch 1, with formats the device runs natively."""
    dev = rl.load_device(device_id)
    try:
        fmt = native_default((dev,))
        kw = dict(weights=fmt, kv=fmt, activations=fmt)
        group = smallest_group(lambda g: bool(rl.decode_step(MODEL, g, batch=1, context=1024, on_infeasible="nan",
                                                             **kw).fits), dev)
        rl.decode_step(MODEL, group, batch=1, context=1024, **kw)
    except RooflineError:
        return None
    return group, kw


CASES = {d: c for d in rl.list_devices() if (c := _setup(d)) is not None}


def test_most_devices_are_covered():
    assert len(CASES) >= 20 and {"groq-lpu", "cerebras-wse-3", "corsair", "gb200", "h100-sxm"} <= set(CASES)


def _time(group, kw, batch, context):
    return float(rl.decode_step(MODEL, group, batch=batch, context=context, on_infeasible="nan", **kw).time_s)


def _scaled(group, path, k):
    dev = group.device
    return rl.DeviceGroup(device=rl.override(dev, path, dev.get(path) * k), tp=group.tp, pp=group.pp)


device = st.sampled_from(sorted(CASES))
batch = st.integers(1, 64)
context = st.integers(0, 32_768)
factor = st.floats(1.01, 8)


@settings(max_examples=60, deadline=None)
@given(device, batch, context, factor)
def test_more_bandwidth_or_flops_never_slower(d, b, ctx, k):
    group, kw = CASES[d]
    base = _time(group, kw, b, ctx)
    assume(np.isfinite(base))
    for tier in group.device.memory:
        assert _time(_scaled(group, f"{tier.name}.bandwidth", k), kw, b, ctx) <= base * (1 + 1e-12)
    for cls in group.device.native:
        if group.device.peak_flop_per_s.get(cls):
            assert _time(_scaled(group, f"compute.{cls}", k), kw, b, ctx) <= base * (1 + 1e-12)
    if group.count > 1 and group.device.scale_up.bandwidth_bytes_per_s:
        assert _time(_scaled(group, "scale_up.bandwidth", k), kw, b, ctx) <= base * (1 + 1e-12)


@settings(max_examples=60, deadline=None)
@given(device, batch, context, factor)
def test_more_fast_memory_never_slower(d, b, ctx, k):
    group, kw = CASES[d]
    base = _time(group, kw, b, ctx)
    first = group.device.memory[0].name
    bigger = _time(_scaled(group, f"{first}.capacity", k), kw, b, ctx)
    if np.isfinite(base):
        assert bigger <= base * (1 + 1e-12)     # spilled bytes come back to the fast tier, never slower
    else:
        assume(np.isfinite(bigger))             # more memory may make an infeasible point fit


@settings(max_examples=60, deadline=None)
@given(device, batch, context, context)
def test_longer_context_never_faster(d, b, c1, c2):
    group, kw = CASES[d]
    lo, hi = sorted((c1, c2))
    t_hi = _time(group, kw, b, hi)
    assume(np.isfinite(t_hi))
    assert t_hi >= _time(group, kw, b, lo) * (1 - 1e-12)


@pytest.mark.parametrize("d", sorted(CASES))
def test_a_model_that_does_not_fit_has_no_finite_speed(d):
    group, kw = CASES[d]
    r = rl.decode_step(MODEL, group, batch=np.array([1, 10**7]), context=10**6, on_infeasible="nan", **kw)
    assert not r.fits[1] and np.isnan(r.time_s[1]) and np.isnan(r.tokens_per_s[1])
