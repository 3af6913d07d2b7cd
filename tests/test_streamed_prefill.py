"""A compiled SRAM pipeline streams a prompt through its stages in chunks (``prefill_stream_tokens``): a stage
holds one chunk's activations, not the whole prompt's, and the chunks overlap across the stages as a
proportionate flow shop (checked here against a step-by-step simulation of the stages)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import roofline as rl
from roofline import api as stages
from roofline.errors import SpecError
from roofline.serving.placements import smallest_group
from roofline.specs.devices import override
from roofline.specs.execution import resolve_profile


def _flow_shop_makespan(stage_s: list[float], pp: int, micro: int) -> float:
    """Simulate jobs (each chunk's ``micro`` microbatches, in order) through ``pp`` stages in series, each stage
    taking the job's stage time and serving one job at a time: done[k] = max(done[k] of the job before,
    done[k - 1] of this job) + its time."""
    done = [0.0] * pp
    for s in stage_s:
        for _ in range(micro):
            prev = 0.0
            for k in range(pp):
                done[k] = max(done[k], prev) + s
                prev = done[k]
    return done[-1]


@given(st.lists(st.floats(0.01, 5.0), min_size=1, max_size=12), st.integers(1, 9), st.integers(1, 4))
def test_makespan_closed_form_matches_a_simulated_pipeline(traversal_s, pp, micro):
    """(m sum T_j + (pp - 1) max T_j) / pp, the form the prefill uses, is the simulated pipeline's makespan."""
    closed = (micro * sum(traversal_s) + (pp - 1) * max(traversal_s)) / pp
    assert closed == pytest.approx(_flow_shop_makespan([t / pp for t in traversal_s], pp, micro), rel=1e-9)


def _groq(stream=None):
    dev = rl.load_device("groq-lpu")
    return dev if stream is None else override(dev, "execution.prefill_stream_tokens", stream)


def test_streamed_prefill_is_the_flow_shop_of_its_chunks():
    """On groq-lpu (TP8, PP85) an 8k prompt in 256-token chunks takes the flow shop's makespan of those chunks:
    far less than the same chunks one after another, more than their work spread over every stage; each term
    (compute, fixed costs, ...) is the same form over that term."""
    model = rl.load_model("llama-3.1-70b")
    group = rl.DeviceGroup(device=_groq(), tp=8, pp=85)
    streamed = stages.prefill(model, group, prompt=8000, chunk=256, weights="fp16")
    serial = stages.prefill(model, rl.DeviceGroup(device=_groq(0), tp=8, pp=85), prompt=8000, chunk=256,
                            weights="fp16")   # the same chunks, each crossing the whole pipeline in turn
    assert streamed.passes == serial.passes == 32
    parts = serial.footprint.parts
    chunk_s = [p.time_s.item() for p in parts]
    assert streamed.time_s.item() == pytest.approx((sum(chunk_s) + 84 * max(chunk_s)) / 85, rel=1e-9)
    assert streamed.time_s.item() < serial.time_s.item() / 5
    j = int(np.argmax(chunk_s))
    for term in ("compute_s", "overhead_s", "communication_s"):
        each = [getattr(p, term).item() for p in parts]
        assert getattr(streamed, term).item() == pytest.approx((sum(each) + 84 * each[j]) / 85, rel=1e-9)


def test_the_chunk_is_the_flow_shops_optimum():
    """Without a chunk given, the prompt is cut into n* = sqrt((pp - 1) W / (m O)) chunks: no slower than any
    power-of-two chunk from 16 to 256 tokens (larger ones do not fit) by more than 3% (the form takes every chunk
    alike; the later ones read more KV), and the caption names the chunk."""
    model = rl.load_model("llama-3.1-70b")
    group = rl.DeviceGroup(device=_groq(), tp=8, pp=85)
    best = stages.prefill(model, group, prompt=8000, weights="fp16")
    tried = [stages.prefill(model, group, prompt=8000, chunk=c, weights="fp16").time_s.item()
             for c in (16, 32, 64, 128, 256)]
    assert best.time_s.item() <= 1.03 * min(tried)
    assert best.stage.startswith("prefill (streamed in chunks of ")


def test_one_stage_does_not_stream():
    """A group of one pipeline stage (a Corsair pair, one Cerebras wafer) has nothing to overlap chunks with: its
    prompt runs as one pass, as with streaming off (chunks there would only re-read the weights)."""
    for model, group in (("llama-3.1-8b", "cerebras-wse-3"), ("llama-3.1-70b", "corsair")):
        on = stages.prefill(model, group, prompt=8000)
        dev = rl.resolve_group(group).device
        off = stages.prefill(model, rl.DeviceGroup(device=override(dev, "execution.prefill_stream_tokens", 0)),
                             prompt=8000)
        assert on.passes == 1 and on.stage == "prefill"
        assert on.time_s.item() == pytest.approx(off.time_s.item(), rel=1e-12)


def test_a_prompt_of_one_granule_streams_as_its_own_pass():
    """A prompt no longer than the smallest chunk is one pass on a pipeline: the same time as with streaming off."""
    model = rl.load_model("llama-3.1-8b")
    kw = dict(prompt=16, weights="int8", kv="fp16", activations="fp16")
    on = stages.prefill(model, rl.DeviceGroup(device=_groq(), tp=8, pp=12), **kw)
    off = stages.prefill(model, rl.DeviceGroup(device=_groq(0), tp=8, pp=12), **kw)
    assert on.passes == 1 and on.stage == "prefill"
    assert on.time_s.item() == pytest.approx(off.time_s.item(), rel=1e-12)


def test_streaming_sizes_a_prefill_group_by_weights_and_kv_not_the_prompts_activations():
    """Llama-3.1-70B, an 8k prompt on Groq: streamed, the prefill needs about the chips that hold the weights
    and the prompt's KV (within 5% of a batch-1 decode at 8k); with the whole prompt's activations on every
    chip (streaming off) it needs many times more."""
    model = rl.load_model("llama-3.1-70b")

    def prefill_fits(g):
        return bool(stages.prefill(model, g, prompt=8000, weights="fp16", on_infeasible="nan").fits)

    streamed = smallest_group(prefill_fits, _groq())
    whole = smallest_group(prefill_fits, _groq(0))
    decode = smallest_group(lambda g: bool(stages.decode_step(model, g, batch=1, context=8000, weights="fp16",
                                                              on_infeasible="nan").fits), _groq())
    assert streamed.count <= 1.05 * decode.count
    assert whole.count > 5 * streamed.count


def test_gpus_do_not_stream_a_lone_prompt():
    """The GPU profile leaves a lone prompt as one pass (engines chunk by their token budget in serving)."""
    assert resolve_profile(rl.load_device("h100-sxm")).prefill_stream_tokens == 0
    r = stages.prefill("llama-3.1-8b", "h100-sxm", prompt=4000)
    assert r.passes == 1 and r.stage == "prefill"


@pytest.mark.parametrize("bad", ["-1", "2.5"])
def test_stream_tokens_must_be_a_whole_count(bad):
    with pytest.raises(SpecError, match="prefill_stream_tokens"):
        override(rl.load_device("groq-lpu"), "execution.prefill_stream_tokens", bad)


def test_a_prompt_riding_a_streaming_pipeline_waits_at_least_its_own_prefill():
    """Under load, prompts riding a pipeline's steps add 1/pp of their serial cost to a step (the pp microbatches'
    chunks overlap), but one prompt's own chunks still cross every stage: its TTFT is never below its prefill
    alone. The floor is for streaming pipelines only: a GPU engine's load model keeps its own TTFT law."""
    from roofline.serving.load import Workload, engine_for, serve_at_rate
    from roofline.serving.serve import Placement
    from roofline.specs.formats import Formats
    from roofline.specs.lengths import Lengths
    from roofline.specs.params import default_params

    model, lengths = rl.load_model("llama-3.1-70b"), Lengths.fixed(8000, 512)
    group = rl.DeviceGroup(device=_groq(), tp=8, pp=125)
    alone = stages.prefill(model, group, prompt=8000).time_s.item()
    r = serve_at_rate(model, Placement(name="g", decode=group), Workload(lengths=lengths), np.array([1.0, 5.0]))
    assert np.all(r.ttft_p50_s >= alone * (1 - 1e-9))
    gpu = rl.resolve_group("h100-sxm:8")
    fmt = Formats.for_model(model, devices=(gpu.device,))
    assert engine_for(model, gpu, lengths, params=default_params(), formats=fmt).prompt_floor_s is None


def test_an_aggregated_placement_sizes_its_group_for_the_riding_prompts():
    """Prompts riding the decode steps need their chunks' workspace beside the batch: the aggregated Groq group is
    sized for both (a feasible placement, larger than decode alone), not rejected on the decode-only group."""
    from roofline.serving.placements import enumerate_placements
    from roofline.serving.serve import Request
    from roofline.serving_api import evaluate_serving

    model, req = rl.load_model("llama-3.1-70b"), Request(input_tokens=8000, output_tokens=512)
    cands = {c.name: c for c in enumerate_placements(model, [_groq()], req, batch=16)}
    agg = cands["decode groq-lpu, prefill on the decode group"]
    split = cands["decode groq-lpu, prefill groq-lpu"]
    assert not agg.failures and agg.placement.decode.count > split.placement.decode.count
    assert bool(np.all(evaluate_serving(model, agg.placement, req, batch=16).fits_memory))


def test_the_ridge_is_a_what_if_only_where_the_what_if_moves_it(run_cli):
    """Setting the streamed chunk (an execution field) leaves the datasheet's ridge; a bandwidth what-if moves it."""
    base = ("stage", "llama-3.1-8b", "groq-lpu:32x4", "--context", "1024", "--set")
    _, out, _ = run_cli(*base, "groq-lpu.execution.prefill_stream_tokens=32")
    assert "(datasheet)" in " ".join(out.split())
    _, out, _ = run_cli(*base, "groq-lpu.sram.bandwidth=100 TB/s")
    assert "FLOP/B (what-if)" in " ".join(out.split())
    # a peak the model's weights do not compute in leaves the ridge where the datasheet put it
    _, out, _ = run_cli("stage", "llama-3.1-8b", "h100-sxm", "--context", "1024", "--set", "h100-sxm.compute.fp4=5 PFLOP/s")
    assert "FLOP/B (datasheet)" in " ".join(out.split())
