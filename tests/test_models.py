"""Model presets against published parameter counts, KV sizes, and HF-config errors."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import golden
from hypothesis import given
from hypothesis import strategies as st

import roofline as rl
from roofline.errors import NotFoundError, RooflineError, SpecError
from roofline.specs.formats import get_format
from roofline.specs.hf_config import presets_dir

REQUIRED = ["llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.3-70b",
            "llama-3.1-405b", "mixtral-8x7b", "falcon-180b", "qwen3-32b", "qwen3-235b-a22b", "deepseek-r1",
            "gpt-oss-20b", "gpt-oss-120b", "gpt-oss-draft-1.6b"]


def test_every_required_preset_ships():
    assert set(REQUIRED) <= set(rl.list_models())


GOLDEN = golden()


@pytest.mark.parametrize("row", GOLDEN["params_total"], ids=lambda r: r["model"])
def test_total_params_match_published_within_1pct(row):
    assert rl.load_model(row["model"]).total_params == pytest.approx(row["value"], rel=0.01), row["source"]


@pytest.mark.parametrize("row", GOLDEN["params_active"], ids=lambda r: r["model"])
def test_active_params_match_published_within_1pct(row):
    m = rl.load_model(row["model"])
    ours = m.active_params if row["with_embedding"] else m.active_params_without_embedding
    assert ours == pytest.approx(row["value"], rel=0.01), row["source"]


def test_deepseek_active_params_within_published_rounding():
    # "37B activated" is given to two digits: [36.5B, 37.5B). Ours: 36.63B without the embedding,
    # 37.55B with it; DeepSeek does not say which, so only the rounding interval is asserted.
    m = rl.load_model("deepseek-r1")
    assert 36.5e9 <= m.active_params_without_embedding < 37.5e9
    assert m.active_params == pytest.approx(37e9, rel=0.015)


def test_component_counts_sum_to_total():
    for mid in rl.list_models():
        m = rl.load_model(mid)
        assert sum(m.param_breakdown().values()) == m.total_params
        assert 0 < m.active_params <= m.total_params


def test_gpt_oss_detailed_count():
    # docs/theory.md §2.7: attention 26,550,144 per layer incl. biases and sinks; one expert 24.89M.
    m = rl.load_model("gpt-oss-120b")
    assert m.attention_params_per_layer() == 26_550_144
    assert m.expert_params() == 24_891_840
    assert m.num_sliding_layers == 18 and m.sliding_window == 128


def test_gpt_oss_checkpoint_size():
    # MXFP4 experts + BF16 rest = 65.25 GB, the published ~60.8 GiB checkpoint (docs/theory.md §2.10).
    m = rl.load_model("gpt-oss-120b")
    parts = m.param_breakdown()
    expert = parts["experts"] * get_format("mxfp4").bytes_per_element
    rest = (m.total_params - parts["experts"]) * get_format("bf16").bytes_per_element
    assert (expert + rest) / 2**30 == pytest.approx(60.8, rel=0.01)


def test_kv_cache_bytes():
    # docs/theory.md §2.9: Llama-70B 327,680 B/token; DeepSeek-V3 MLA 70,272 B/token; gpt-oss full layers 36,864.
    assert rl.load_model("llama-3.1-70b").kv_cache_bytes_per_token("bf16") == 327_680
    assert rl.load_model("deepseek-r1").kv_cache_bytes_per_token("bf16") == 70_272
    g = rl.load_model("gpt-oss-120b")
    assert g.kv_cache_bytes_per_token("bf16") == 36_864
    # sliding layers hold only their window: 9.44 MB at 128 tokens, 306.7 MB at 8,192 (docs/theory.md §2.4 table)
    got = g.kv_cache_bytes([128, 1024, 8192, 131072], "bf16")
    np.testing.assert_allclose(got / 1e6, [9.437, 42.47, 306.7, 4835.0], rtol=2e-3)
    assert g.kv_cache_bytes(8192, "fp8") == pytest.approx(g.kv_cache_bytes(8192, "bf16") / 2)


def test_draft_shares_vocabulary_with_target():
    assert rl.load_model("gpt-oss-draft-1.6b").vocab_size == rl.load_model("gpt-oss-120b").vocab_size
    assert rl.load_model("gpt-oss-draft-1.6b").total_params == pytest.approx(1.6e9, rel=0.03)


def test_config_path_and_dict(tmp_path):
    cfg = json.loads((presets_dir() / "llama-3.1-8b.json").read_text())
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    assert rl.load_model(str(tmp_path / "m" / "config.json")).total_params == rl.load_model("llama-3.1-8b").total_params
    assert rl.model_from_hf_config(cfg).total_params == rl.load_model("llama-3.1-8b").total_params


@pytest.mark.parametrize("edit,match", [
    (lambda c: c.update(model_type="mamba"), "unsupported architecture 'mamba'"),
    (lambda c: c.pop("hidden_size"), "missing required key 'hidden_size'"),
    (lambda c: c.update(num_hidden_layers="32"), "'num_hidden_layers'"),
    (lambda c: c.update(num_hidden_layers=-1), "'num_hidden_layers'"),
    (lambda c: c.update(num_key_value_heads=5), "multiple of num_key_value_heads"),
])
def test_bad_configs_name_file_and_key(tmp_path, edit, match):
    cfg = json.loads((presets_dir() / "llama-3.1-8b.json").read_text())
    edit(cfg)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    with pytest.raises(SpecError, match=match) as e:
        rl.load_model(str(p))
    assert str(p) in str(e.value)


def test_unparseable_config_and_unknown_preset(tmp_path):
    p = tmp_path / "config.json"
    p.write_text("{not json")
    with pytest.raises(SpecError, match="JSON does not parse"):
        rl.load_model(str(p))
    with pytest.raises(NotFoundError, match="did you mean 'llama-3.1-8b'"):
        rl.load_model("llama-3.1-8")


_values = st.one_of(st.none(), st.booleans(), st.integers(-3, 300000), st.floats(allow_nan=True),
                    st.text(max_size=8), st.lists(st.integers(-1, 40), max_size=3))


@given(st.sampled_from(REQUIRED), st.dictionaries(st.text(max_size=3), _values, max_size=2), st.data())
def test_fuzz_configs_only_raise_project_errors(preset, extra, data):
    cfg = json.loads((presets_dir() / f"{preset}.json").read_text())
    for key in data.draw(st.lists(st.sampled_from(sorted(cfg)), max_size=3)):
        if data.draw(st.booleans()):
            cfg.pop(key, None)
        else:
            cfg[key] = data.draw(_values)
    cfg.update(extra)
    try:
        m = rl.model_from_hf_config(cfg)
    except RooflineError:
        return
    assert m.total_params > 0 and math.isfinite(m.kv_cache_bytes_per_token("bf16"))


def test_an_fp8_checkpoint_runs_in_fp8_unless_told_otherwise(tmp_path, run_cli):
    """A config whose quantization_config says fp8 (DeepSeek-V3/R1's and Qwen's block-scaled FP8 checkpoints)
    stores every linear layer in FP8: that is the default weight and expert format, as gpt-oss's MXFP4 experts
    are; a format given explicitly wins, and sizing keeps FP8 only where the device multiplies it."""
    from roofline.serving.sizing import device_formats
    from roofline.specs.formats import Formats
    ds = rl.load_model("deepseek-r1")
    assert ds.checkpoint_weight_format == "fp8"
    assert Formats.for_model(ds).names() == {"weights": "fp8", "experts": "fp8", "kv": "bf16", "activations": "bf16"}
    assert Formats.for_model(ds, weights="bf16").weight.name == "bf16"
    cfg = json.loads((Path(rl.__file__).parent / "presets" / "llama-3.1-8b.json").read_text())
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(cfg))
    fp8 = tmp_path / "fp8.json"
    fp8.write_text(json.dumps({**cfg, "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}))
    assert rl.load_model(str(plain)).checkpoint_weight_format is None
    step = {p: rl.decode_step(str(p), "h100-sxm", batch=1, context=1024) for p in (plain, fp8)}
    assert step[fp8].formats.weights == "fp8" and step[plain].formats.weights == "bf16"
    assert float(step[fp8].weights_per_device_bytes) < 0.6 * float(step[plain].weights_per_device_bytes)
    d = json.loads(run_cli("stage", "deepseek-r1", "b200:8", "--batch", "1", "--json")[1])
    assert d["stages"][0]["formats"]["weights"] == "fp8"
    assert device_formats(rl.load_device("h100-sxm"), None, ds)["weights"] == "fp8"
    # a GPU without FP8 units still runs the checkpoint (weight-only FP8 Marlin on Ampere); a chip without them runs
    # its own format, the same in sizing as in every command
    assert device_formats(rl.load_device("a100-sxm-80gb"), None, ds)["weights"] == "fp8"
    assert device_formats(rl.load_device("corsair"), None, ds)["weights"] == "mxint8"
    assert rl.decode_step(ds, "corsair:2x183", batch=1, context=128).formats.weights == "mxint8"
    assert rl.load_model("gpt-oss-120b").checkpoint_weight_format is None   # MXFP4 experts only
    shown = {m: json.loads(run_cli("show", m, "--json")[1])["checkpoint_formats"] for m in ("deepseek-r1", "gpt-oss-120b")}
    assert shown == {"deepseek-r1": {"weights": "fp8", "experts": "fp8"},
                     "gpt-oss-120b": {"weights": "bf16", "experts": "mxfp4"}}


@pytest.mark.parametrize("quant, weights", [
    ({"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
        "input_activations": {"num_bits": 8, "type": "float", "dynamic": True}}}}, "fp8"),
    ({"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128},
        "input_activations": None}}}, "int4-g128"),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 8, "type": "int", "strategy": "channel"},
        "input_activations": {"num_bits": 8, "type": "int"}}}}, "w8a8-int8"),
    ({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized", "config_groups": {"group_0": {
        "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16},
        "input_activations": {"num_bits": 4, "type": "float", "group_size": 16}}}}, "nvfp4"),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 4, "type": "int", "strategy": "channel"}, "input_activations": None}}},
     "int4-g4096"),   # one scale per output channel: a row of hidden_size
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm", "zero_point": True}, "int4-g128"),
    ({"quant_method": "awq", "w_bit": 4, "q_group_size": 64}, "int4-g64"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": False}, "int4-g32"),
    ({"quant_method": "gptq", "bits": 4, "group_size": -1}, "int4-g4096"),   # per channel: a row of hidden_size
    ({"quant_method": "gptq", "bits": 8, "group_size": 128}, "int8"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}, "int4-g32"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_use_double_quant": True}, "int4-g128"),
    ({"quant_method": "bitsandbytes", "load_in_8bit": True}, "int8"),
    ({"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0}, "fp8"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "nvfp4"),
])
def test_a_quantized_checkpoint_runs_in_the_format_its_config_says(tmp_path, quant, weights):
    """AWQ, GPTQ, bitsandbytes and llm-compressor checkpoints (roofline.specs.quantization) run in the format
    their quantization_config stores, with the bytes that format has, their embedding table and LM head in 16
    bits as the quantizers leave them (an AWQ Llama-3.1-8B is ~5.7 GB, not 4.1); they used to load as 16-bit
    weights."""
    from roofline.specs.formats import get_format
    cfg = json.loads((Path(rl.__file__).parent / "presets" / "llama-3.1-8b.json").read_text())
    path = tmp_path / "q.json"
    path.write_text(json.dumps({**cfg, "quantization_config": quant}))
    step = rl.decode_step(str(path), "h100-sxm", batch=1, context=1024)
    assert step.formats.weights == weights and step.formats.head_format.name == "bf16"
    parts = rl.load_model("llama-3.1-8b").param_breakdown()
    head = parts["embedding"] + parts["lm_head"]
    want = (sum(parts.values()) - head) * get_format(weights).bits_per_element / 8 + 2 * head
    assert float(step.weights_per_device_bytes) == pytest.approx(want, rel=0.01)


@pytest.mark.parametrize("quant", [{"quant_method": "quark"}, {"quant_method": "gptq", "bits": 3, "group_size": 128},
                                   {"quant_method": "mxfp4"}, {"bits": 4}, "fp8",
                                   {"quant_method": "compressed-tensors", "config_groups": {
                                       "a": {"weights": {"num_bits": 8, "type": "float"}},
                                       "b": {"weights": {"num_bits": 4, "type": "int", "group_size": 128}}}}])
def test_a_quantization_it_does_not_read_asks_for_the_weights_format(tmp_path, run_cli, quant):
    """A quantization_config roofline does not read (AMD Quark, 3-bit GPTQ, MXFP4 on a dense model, groups that
    disagree) is not taken for 16-bit weights: the model loads and shows what it could not read, and a command
    asks for the weights' format, then runs with the one given."""
    cfg = json.loads((Path(rl.__file__).parent / "presets" / "llama-3.1-8b.json").read_text())
    path = tmp_path / "q.json"
    path.write_text(json.dumps({**cfg, "quantization_config": quant}))
    m = rl.load_model(str(path))
    assert m.unread_quantization and m.checkpoint_weight_format is None
    with pytest.raises(rl.SpecError, match="quantization_config .* is not one roofline reads.*--weights"):
        rl.decode_step(m, "h100-sxm", batch=1, context=1024)
    code, _, err = run_cli("stage", str(path), "h100-sxm", "--batch", "1")
    assert code == 1 and "--weights" in err and len(err.strip().splitlines()) == 1
    code, out, err = run_cli("stage", str(path), "h100-sxm", "--batch", "1", "--weights", "int4-g128", "--json")
    assert code == 0 and json.loads(out)["stages"][0]["formats"]["weights"] == "int4-g128"
    shown = json.loads(run_cli("show", str(path), "--json")[1])
    assert shown["checkpoint_formats"] == {} and shown["unread_quantization"] == m.unread_quantization


def test_qwen_slides_only_from_max_window_layers_on():
    """transformers' Qwen2: with use_sliding_window, layers from max_window_layers on slide and the ones below
    attend in full (all 28 slid before, halving the KV cache at long context); a config's own layer_types wins."""
    cfg = {"model_type": "qwen2", "hidden_size": 3584, "num_attention_heads": 28, "num_key_value_heads": 4,
           "num_hidden_layers": 28, "intermediate_size": 18944, "vocab_size": 152064, "use_sliding_window": True,
           "sliding_window": 4096, "max_window_layers": 14}
    m = rl.model_from_hf_config(cfg)
    assert m.layer_types == ("full",) * 14 + ("sliding",) * 14 and m.sliding_window == 4096
    assert rl.model_from_hf_config({**cfg, "use_sliding_window": False}).layer_types == ("full",) * 28
    listed = ["sliding_attention", "full_attention"] * 14
    assert rl.model_from_hf_config({**cfg, "layer_types": listed}).layer_types == ("sliding", "full") * 14
    with pytest.raises(SpecError, match="layer_types"):
        rl.model_from_hf_config({**cfg, "layer_types": ["full_attention"] * 3})
