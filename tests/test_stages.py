"""Stage engine: hypothesis properties, published golden values, infeasibility and errors."""

import itertools

import attrs
import numpy as np
import pytest
from conftest import golden
from hypothesis import assume, given
from hypothesis import strategies as st

import roofline as rl
from roofline import api as stages  # the public stage functions: names resolved at the door
from roofline.errors import InfeasibleError, NotFoundError, UnknownSpecError, WorkloadError

DEFAULT_PARAMS = rl.default_params()

H100 = rl.load_device("h100-sxm")
H200 = rl.load_device("h200-sxm")
A100 = rl.load_device("a100-sxm-80gb")
PURE = attrs.evolve(DEFAULT_PARAMS, memory_bandwidth_fraction=1.0, compute_fraction=1.0, step_overhead_s=0.0,
                    layer_overhead_s=0.0, collective_base_s=0.0, link_hop_latency_s=0.0, dequant_ops_per_element=0.0)

CASES = [("llama-3.1-8b", "h100-sxm", {}), ("gpt-oss-120b", "h200-sxm", {}), ("mixtral-8x7b", "h100-sxm", {"tp": 2}),
         ("deepseek-r1", "b200", {"tp": 8, "ep": 4, "experts": "nvfp4"}), ("gpt-oss-draft-1.6b", "l40s", {})]
case = st.sampled_from(CASES)
batch = st.integers(1, 96)
context = st.integers(0, 16_384)


def _decode(c, **kw):
    model, dev, extra = c
    return stages.decode_step(model, kw.pop("device", dev), **{**extra, **kw}, on_infeasible="nan")


@given(case, batch, batch, context)
def test_time_non_decreasing_in_batch(c, b1, b2, L):
    lo, hi = sorted((b1, b2))
    t1, t2 = _decode(c, batch=lo, context=L), _decode(c, batch=hi, context=L)
    assume(bool(t2.fits))
    assert t2.time_s >= t1.time_s * (1 - 1e-12)


@given(case, batch, context, context)
def test_time_non_decreasing_in_context(c, b, L1, L2):
    lo, hi = sorted((L1, L2))
    t1, t2 = _decode(c, batch=b, context=lo), _decode(c, batch=b, context=hi)
    assume(bool(t2.fits))
    assert t2.time_s >= t1.time_s * (1 - 1e-12)


@given(case, batch, context, st.floats(1.01, 10))
def test_faster_memory_and_compute_never_slower(c, b, L, k):
    dev = rl.load_device(c[1])
    base = _decode(c, batch=b, context=L)
    assume(bool(base.fits))
    faster_mem = rl.override(dev, "hbm.bandwidth" if dev.memory[0].name == "hbm" else f"{dev.memory[0].name}.bandwidth",
                             dev.memory[0].bandwidth_bytes_per_s * k)
    assert _decode(c, batch=b, context=L, device=faster_mem).time_s <= base.time_s * (1 + 1e-12)
    cls = "fp4" if c[2].get("experts") == "nvfp4" else "bf16"
    faster_fpu = rl.override(dev, f"compute.{cls}", dev.get(f"compute.{cls}") * k)
    assert _decode(c, batch=b, context=L, device=faster_fpu).time_s <= base.time_s * (1 + 1e-12)


@given(case, batch, context)
def test_doubling_bandwidth_halves_memory_time(c, b, L):
    dev = rl.load_device(c[1])
    base = _decode(c, batch=b, context=L)
    assume(bool(base.fits))
    fast = dev
    for t in dev.memory:
        fast = rl.override(fast, f"{t.name}.bandwidth", t.bandwidth_bytes_per_s * 2)
    assert _decode(c, batch=b, context=L, device=fast).memory_s == pytest.approx(base.memory_s / 2, rel=1e-12)


@given(case, batch, context)
def test_bounds_ordered(c, b, L):
    r = _decode(c, batch=b, context=L)
    assume(bool(r.fits))
    assert r.time_s <= r.time_serial_s * (1 + 1e-12) <= 2 * r.time_s * (1 + 1e-12)
    assert r.time_s >= max(r.compute_s, r.memory_s)


def test_memory_time_non_decreasing_in_bytes_per_parameter():
    ts = [stages.decode_step("llama-3.1-8b", H100, batch=8, context=2048, weights=w).memory_s
          for w in ("int4-g128", "int4-g32", "fp8", "bf16", "fp32")]
    assert all(a <= b for a, b in zip(ts, ts[1:]))
    assert stages.decode_step("llama-3.1-8b", H100, batch=8, context=2048, weights="fp32").time_s >= \
        stages.decode_step("llama-3.1-8b", H100, batch=8, context=2048, weights="bf16").time_s


def test_memory_bound_time_ignores_flops():
    """With full overlap (eta = 1) a memory-bound step's time does not see the FLOP rate; with the GPU profile's
    partial overlap it sees only the exposed share (1 - eta) of the compute it saves."""
    from roofline.specs.params import shipped_profile
    full = attrs.evolve(shipped_profile().default, overlap_efficiency=1.0)
    r = stages.decode_step("llama-3.1-8b", H100, batch=1, context=1024, params=full)
    assert r.bound == "memory:hbm"
    fast = rl.override(H100, "compute.bf16", 10 * H100.get("compute.bf16"))
    assert stages.decode_step("llama-3.1-8b", fast, batch=1, context=1024, params=full).time_s == r.time_s
    part = attrs.evolve(full, overlap_efficiency=0.25)
    slow, quick = (stages.decode_step("llama-3.1-8b", d, batch=1, context=1024, params=part) for d in (H100, fast))
    assert float(slow.time_s - quick.time_s) == pytest.approx(0.75 * 0.9 * float(slow.compute_s), rel=1e-9)


def test_array_call_equals_stacked_scalar_calls():
    B, L = np.array([1, 16, 64]), np.array([0, 2048, 30000])
    for fn, kw in ((stages.decode_step, {}), (stages.verify, {"gamma": 3}), (stages.draft, {"gamma": 4})):
        grid = fn("gpt-oss-120b", H200, batch=B[:, None], context=L[None, :], on_infeasible="nan", **kw)
        for (i, b), (j, ctx) in itertools.product(enumerate(B), enumerate(L)):
            one = fn("gpt-oss-120b", H200, batch=int(b), context=int(ctx), on_infeasible="nan", **kw)
            np.testing.assert_equal(grid.time_s[i, j], one.time_s)
            assert grid.bound[i, j] == one.bound
    S = np.array([100, 5000])
    grid = stages.prefill("llama-3.1-8b", H100, prompt=S, chunk=2048)
    for i, s in enumerate(S):
        assert grid.time_s[i] == stages.prefill("llama-3.1-8b", H100, prompt=int(s), chunk=2048).time_s


# ----------------------------------------------------------- golden values
def test_h100_bf16_ridge():
    # scaling book "Rooflines": 989.4e12 / 3.35e12 = 295 FLOP/B (B_crit ~ 298 with 1e15)
    r = stages.decode_step("llama-3.1-8b", H100, batch=1, context=1)
    assert r.ridge_flop_per_byte == pytest.approx(295.3, abs=0.1)


def test_decode_turns_compute_bound_past_the_ridge_batch():
    # docs/theory.md §3.3: with BF16 weights decode becomes compute-bound near B* ~ pi/beta ~ 295 at short context
    lo = stages.decode_step("llama-3.1-8b", H100, batch=200, context=1, params=PURE)
    hi = stages.decode_step("llama-3.1-8b", H100, batch=400, context=1, params=PURE)
    assert lo.bound == "memory:hbm" and hi.bound == "compute"


def test_llama70b_bf16_does_not_fit_one_h100_but_fits_h200():
    # docs/theory.md §1.4: 141.1 GB of BF16 weights against 85.5 GB of HBM; one H200 (150.75 GB) holds it
    with pytest.raises(InfeasibleError, match="does not fit on h100-sxm"):
        stages.decode_step("llama-3.1-70b", H100, batch=1, context=1024)
    r = stages.decode_step("llama-3.1-70b", H200, batch=1, context=1024)
    assert r.fits and r.weights_per_device_bytes == pytest.approx(141.1e9, rel=1e-3)
    assert stages.decode_step("llama-3.1-70b", H100, batch=1, context=1024, tp=2).fits
    # docs/theory.md §3.3 worked example 1: TP2 on 2 x H100 at L = 2,048 and u = 0.95 holds B_max = 31
    assert stages.max_batch("llama-3.1-70b", H100, context=2048, tp=2) == 31


def test_sweep_marks_infeasible_points_with_nan():
    r = stages.decode_step("gpt-oss-120b", H200, batch=np.array([1, 64, 4096]), context=8192)
    assert list(r.fits) == [True, True, False]
    assert np.isnan(r.time_s[2]) and r.bound[2] == "does not fit" and np.isfinite(r.time_s[:2]).all()
    assert stages.max_batch("gpt-oss-120b", H200, context=8192) > 64


# gpt-fast README (tests/golden/published.toml): measured tokens/s never exceed our bandwidth bound
# (peak HBM bandwidth, no overheads).
GPT_FAST = [tuple(r) for r in golden()["gpt_fast"][0]["rows"]]


@pytest.mark.parametrize("model,weights,tp,measured", GPT_FAST)
def test_gpt_fast_batch1_never_faster_than_bandwidth_bound(model, weights, tp, measured):
    r = stages.decode_step(model, A100, batch=1, context=205, weights=weights, tp=tp, params=PURE)
    assert measured <= float(r.per_sequence_tokens_per_s)
    assert np.array_equal(r.tokens_per_s_per_user, r.per_sequence_tokens_per_s)   # the name the other results use


def test_prefill_8k_is_compute_bound_on_h100():
    r = stages.prefill("llama-3.1-8b", H100, prompt=8192)
    assert r.bound == "compute" and r.intensity_flop_per_byte > r.ridge_flop_per_byte


def test_tensor_parallel_small_model_is_latency_bound():
    # docs/design.md: TP over 8 GPUs on a small model is bound by per-layer all-reduce latency, not bandwidth
    # (at NCCL's small-message latency, docs/theory.md §5.1: 5-20 us per collective)
    p = rl.EngineParams(collective_base_s=10e-6)
    r = stages.decode_step("llama-3.1-8b", A100, batch=1, context=205, tp=8, params=p)
    assert r.communication_s > 0.3 * r.memory_s
    wide = stages.decode_step("llama-3.1-8b", A100, batch=1, context=205, tp=8,
                              params=attrs.evolve(p, allreduce_bandwidth_fraction=1.0))
    assert float(wide.communication_s) == pytest.approx(float(r.communication_s), rel=0.05)   # not bandwidth


def test_spill_to_slower_tier_is_reread_every_step():
    corsair = rl.load_device("corsair")
    fmt = dict(weights="mxint8", kv="mxint8", activations="mxint8")
    small = stages.decode_step("gpt-oss-draft-1.6b", corsair, batch=1, context=1024, **fmt)
    assert small.bound == "memory:sram" or small.bound == "overhead"
    big = stages.decode_step("llama-3.1-8b", corsair, batch=1, context=1024, **fmt)  # 8.3 GB > 1.8 GB usable SRAM
    assert big.bound == "memory:lpddr" and big.time_s > 10 * small.time_s


# ---------------------------------------------------------------- errors
@pytest.mark.parametrize("kw,err", [
    ({"batch": -1}, WorkloadError), ({"batch": 0}, WorkloadError), ({"batch": float("nan")}, WorkloadError),
    ({"batch": 2.5}, WorkloadError), ({"context": -5}, WorkloadError), ({"context": float("inf")}, WorkloadError),
    ({"weights": "fp9"}, NotFoundError), ({"kv": "nope"}, NotFoundError), ({"tp": 0}, WorkloadError),
    ({"tp": 1.5}, WorkloadError), ({"tp": 4, "ep": 3}, WorkloadError), ({"batch": "x"}, WorkloadError),
])
def test_bad_arguments(kw, err):
    args = {"batch": 1, "context": 128, **kw}
    with pytest.raises(err):
        stages.decode_step("llama-3.1-8b", H100, **args)


def test_unknown_device_and_unsupported_compute():
    with pytest.raises(NotFoundError):
        stages.decode_step("llama-3.1-8b", "h1000", batch=1, context=1)
    with pytest.raises(UnknownSpecError, match="corsair has no native bf16.*mxint8"):   # bf16 asked for: refused
        stages.decode_step("gpt-oss-draft-1.6b", "corsair", batch=1, context=1, activations="bf16")
    with pytest.raises(UnknownSpecError, match="sohu: compute.fp8 is not published.*--set sohu.compute.fp8"):
        stages.decode_step("llama-3.1-8b", "sohu", batch=1, context=1, weights="fp8", activations="fp8")
    sohu = rl.override(rl.load_device("sohu"), "compute.fp8", "2 PFLOP/s")
    with pytest.raises(UnknownSpecError, match="sohu: hbm.bandwidth"):
        stages.decode_step("llama-3.1-8b", sohu, batch=1, context=1, weights="fp8", activations="fp8")
    with pytest.raises(UnknownSpecError, match="l40s: scale_up.bandwidth"):
        stages.decode_step("llama-3.1-8b", "l40s", batch=1, context=1, tp=2)
    with pytest.raises(WorkloadError, match="gamma"):
        stages.verify("llama-3.1-8b", H100, batch=1, context=1, gamma=-1)


def test_formats_not_given_follow_the_device():
    """Weights, KV and activations not given run in bf16, or on a device without bf16 units in the format it
    computes natively (fp16 on Groq's LPU, mxint8 on Corsair, fp8 on Groq 3); a placement over several devices
    takes the first format all of them compute; a format given is kept, and one a device lacks is refused."""
    from roofline.specs.formats import Formats, native_default
    r = stages.decode_step("llama-3.1-8b", "corsair:4", batch=1, context=128)
    assert (r.formats.weights, r.formats.kv, r.formats.activations) == ("mxint8", "mxint8", "mxint8")
    groq = Formats.for_model(rl.load_model("llama-3.1-8b"), devices=[rl.load_device("groq-lpu")])
    assert (groq.weights, groq.kv, groq.activations) == ("fp16", "fp16", "fp16")
    assert stages.decode_step("llama-3.1-8b", "h100-sxm", batch=1, context=128).formats.weights == "bf16"
    assert stages.decode_step("llama-3.1-8b", "corsair:4", batch=1, context=128, kv="mxint4").formats.kv == "mxint4"
    dev = rl.load_device
    assert native_default([dev("groq-3-lpu")]) == "fp8" and native_default([dev("rubin-cpx")]) == "mxfp4"
    assert native_default([dev("h100-sxm"), dev("corsair")]) == "mxint8"
    mixed = Formats.for_model(rl.load_model("gpt-oss-120b"), devices=[dev("b200"), dev("groq-lpu")])
    assert (mixed.weights, mixed.experts, mixed.kv) == ("fp16", "mxfp4", "fp16")   # the checkpoint's experts stay
    with pytest.raises(UnknownSpecError, match="no native compute format common.*corsair: int8, int4; sohu: bf16, fp8"):
        native_default([dev("corsair"), dev("sohu")])


def test_a_batch_of_prompts_fills_and_drains_a_pipeline():
    """Prefill of m prompts on pp stages takes m + pp - 1 stage-times (GPipe's fill and drain), a decode step pp:
    four prompts on four stages take 7/4 of one prompt's time; four decode steps' sequences take the same as one."""
    one, four = (stages.prefill("llama-3.1-8b", "h100-sxm:1x4", prompt=1024, batch=b) for b in (1, 4))
    assert float(four.time_s) == pytest.approx(7 / 4 * float(one.time_s), rel=1e-3)   # + 3 sequences of host cost
    d1, d4 = (stages.decode_step("llama-3.1-8b", "h100-sxm:1x4", batch=b, context=1024) for b in (1, 4))
    assert float(d4.time_s) < 1.1 * float(d1.time_s)


def test_names_are_resolved_at_the_door_only():
    """roofline.decode_step (the door, roofline.api) takes ids and gives what the physics gives on the records;
    roofline.physics.stages takes records only and says where names are taken (issue 51)."""
    from roofline.physics import stages as physics
    model, group = rl.load_model("llama-3.1-8b"), rl.resolve_group("h100-sxm:2")
    by_name = stages.decode_step("llama-3.1-8b", "h100-sxm:2", batch=4, context=1024)
    assert by_name.time_s == physics.decode_step(model, group, batch=4, context=1024).time_s
    assert stages.max_batch("llama-3.1-70b", H100, context=2048, tp=2) == physics.max_batch(
        rl.load_model("llama-3.1-70b"), rl.resolve_group(H100), context=2048, tp=2)
    with pytest.raises(WorkloadError, match="resolve ids"):
        physics.decode_step("llama-3.1-8b", group, batch=1, context=1)
    with pytest.raises(WorkloadError, match="DeviceGroup"):
        physics.prefill(model, "h100-sxm", prompt=128)


def test_a_decode_loop_plans_its_batch_once():
    """A scalar decode step at a new context reuses the plan of its batch (what does not depend on the context:
    profile, formats, counts, matmul, memory, communication and fixed terms; issue 51: under 0.1 ms a call) and
    gives, context by context, what one array call over the contexts gives."""
    from roofline.physics.timing import pass_plan
    model, group = rl.load_model("llama-3.1-8b"), rl.resolve_group("h200-sxm")
    assert rl.resolve_group("h200-sxm") is group   # a name gives the same record: the plan is found again
    f = rl.Formats.for_model(model, devices=(group.device,))
    plans = [pass_plan(model, group, f, batch=np.array(2.0), new_tokens=1.0, logits_per_seq=1.0, mla_absorbed=True,
                       stage="decode", params=None) for _ in range(2)]
    assert plans[0] is plans[1]
    contexts = np.array([1.0, 4096.0, 100_000.0])
    grid = rl.decode_step(model, group, batch=2, context=contexts)
    for i, c in enumerate(contexts):
        one = rl.decode_step("llama-3.1-8b", "h200-sxm", batch=2, context=c)
        assert float(one.time_s) == grid.time_s[i] and float(one.kv_memory_s) == grid.kv_memory_s[i]


def test_a_stage_result_says_why_a_point_does_not_fit():
    """The README promises `why_infeasible()` on results: a stage sweep's says the first point that does not fit
    in bytes needed against usable, and nothing where every point fits (a review found stage results lacked it)."""
    import numpy as np

    import roofline as rl
    swept = rl.decode_step("llama-3.1-8b", "h100-sxm", batch=np.array([1, 1000]), context=8192)
    assert list(swept.fits) == [True, False]
    said = swept.why_infeasible()
    assert "does not fit on h100-sxm" in said and "usable" in said
    assert rl.decode_step("llama-3.1-8b", "h100-sxm", batch=1, context=8192).why_infeasible() == ""
