"""A tensor-parallel all-reduce fused into its GEMM's epilogue and reduced in the NVSwitch (TensorRT-LLM's
gemm_allreduce_plugin, NVIDIA's MLPerf engines): the data crosses once each way whatever p is, and only what
outlasts the fused GEMMs is exposed."""

import attrs
import numpy as np
import pytest

import roofline as rl
from roofline import api as stages
from roofline.evidence.validate import predict_row, read_rows, row_params, shipped_data, shipped_profile
from roofline.physics.comms import allreduce_s, fused_gemm_share, switch_allreduce_s
from roofline.specs.params import default_params


def test_the_switch_moves_each_ranks_data_once_each_way():
    """Against a ring's 2(p - 1)/p M over p - 1 double hops: M and two hops, whatever p is."""
    m, w = 64e6, 400e9
    for p in (2, 4, 8):
        assert switch_allreduce_s(m, p, w, 1e-6, 5e-6) == pytest.approx(5e-6 + 2e-6 + m / w)
        ring = allreduce_s(m, p, w, 1e-6, 5e-6)
        assert ring - (5e-6 + 2 * (p - 1) * 1e-6) == pytest.approx(2 * (p - 1) / p * m / w)


def test_fused_share_is_the_output_and_down_projections_of_a_layer():
    """Llama-3.1-405B, counted layer by layer: (o_proj + down_proj) / (q, k, v, o + gate, up, down)."""
    d, q, kv, ff = 16384, 128 * 128, 8 * 128, 53248
    layer = d * (q + 2 * kv) + q * d + 3 * d * ff
    assert fused_gemm_share(rl.load_model("llama-3.1-405b")) == pytest.approx((q * d + ff * d) / layer, rel=1e-6)


def test_fusion_exposes_only_what_outlasts_the_fused_gemms():
    """An 8k-token prefill of Llama-3.1-405B on 8 H200s: fused, the all-reduces (reduced in the switch) are
    exposed only beyond fused_gemm_share of the matmuls' time; the matmuls themselves do not change."""
    model, group = rl.load_model("llama-3.1-405b"), rl.resolve_group("h200-sxm:8")
    plain_p = default_params()
    fused_p = attrs.evolve(plain_p, allreduce_fusion=True)
    plain = stages.prefill(model, group, prompt=8192, weights="fp8", params=plain_p)
    fused = stages.prefill(model, group, prompt=8192, weights="fp8", params=fused_p)
    assert fused.compute_s.item() == pytest.approx(plain.compute_s.item())
    assert fused.communication_s.item() < plain.communication_s.item() / 3
    assert fused.time_s.item() < plain.time_s.item()
    one = stages.prefill("llama-3.1-8b", "h200-sxm", prompt=64, params=fused_p)
    assert one.communication_s.item() == 0.0   # nothing to reduce on one device


def test_a_row_built_with_the_fused_plugin_predicts_its_engine():
    """MLPerf v5.0 H200 TP8 Server (ML044) is built with gemm_allreduce_plugin; predicted with it the row's
    capacity rises (it was 48% low as separate ring all-reduces)."""
    prof = shipped_profile()
    row = next(r for r in read_rows(shipped_data()) if r.id == "ML044")
    assert row.get("allreduce_fusion") == "yes"
    plain = attrs.evolve(row, fields={**row.fields, "allreduce_fusion": "no"})
    fused_v, plain_v = (predict_row(r, row_params(prof, r)) for r in (row, plain))
    assert fused_v > 1.3 * plain_v and np.isfinite(fused_v)
