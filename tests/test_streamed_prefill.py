"""A compiled SRAM pipeline streams a prompt through its stages in chunks (``prefill_stream_tokens``): a stage
holds one chunk's activations, not the whole prompt's, and the chunks overlap across the stages as a
proportionate flow shop (checked here against a step-by-step simulation of the stages)."""

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
    """On groq-lpu (TP8, PP85) an 8k prompt's prefill takes the flow shop's makespan of its 256-token chunks:
    far less than the same chunks one after another, more than their work spread over every stage."""
    model = rl.load_model("llama-3.1-70b")
    dev = _groq()
    assert resolve_profile(dev).prefill_stream_tokens == 256
    group = rl.DeviceGroup(device=dev, tp=8, pp=85)
    streamed = stages.prefill(model, group, prompt=8000, weights="fp16")
    serial = stages.prefill(model, rl.DeviceGroup(device=_groq(0), tp=8, pp=85), prompt=8000, chunk=256,
                            weights="fp16")   # the same chunks, each crossing the whole pipeline in turn
    assert streamed.passes == serial.passes == 32
    chunk_s = [p.time_s.item() for p in serial.footprint.parts]
    expected = (sum(chunk_s) + 84 * max(chunk_s)) / 85
    assert streamed.time_s.item() == pytest.approx(expected, rel=1e-9)
    assert streamed.time_s.item() < serial.time_s.item() / 5
    assert streamed.compute_s.item() / streamed.time_s.item() == pytest.approx(
        serial.compute_s.item() / serial.time_s.item(), rel=1e-9)   # every term scales alike


def test_one_chunk_streams_as_the_unchunked_pass():
    """A prompt no longer than a chunk is one pass: the same time as with streaming off."""
    model, group = rl.load_model("llama-3.1-8b"), "groq-lpu:8x12"
    on = stages.prefill(model, group, prompt=200, weights="int8", kv="fp16", activations="fp16")
    off = stages.prefill(model, rl.DeviceGroup(device=_groq(0), tp=8, pp=12), prompt=200, weights="int8",
                         kv="fp16", activations="fp16")
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
