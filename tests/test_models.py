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


@given(st.sampled_from(sorted(rl.list_models())), st.dictionaries(st.text(max_size=3), _values, max_size=2), st.data())
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


# ------------------------------------------------------------- issue 52: more architectures, names, windows
NEW_PRESETS = ["gemma-2-9b", "gemma-3-27b", "phi-3-mini", "llama-4-scout", "qwen1.5-moe-a2.7b", "glm-4.5-air",
               "mistral-7b", "ministral-8b"]


def _preset(name: str) -> dict:
    return json.loads((presets_dir() / f"{name}.json").read_text())


def test_new_architecture_presets_ship_with_sources():
    for name in NEW_PRESETS:
        cfg = _preset(name)
        assert cfg["_source"].startswith("https://huggingface.co/") and cfg["_source"].endswith("/config.json")
        assert rl.load_model(name).source == cfg["_source"]


def test_gemma2_alternates_sliding_and_global_layers_and_says_softcapping_changes_no_work():
    m = rl.load_model("gemma-2-9b")
    assert m.layer_types[:4] == ("sliding", "full", "sliding", "full") and m.num_sliding_layers == 21
    assert m.sliding_window == 4096 and m.head_dim == 256 and m.tied_embeddings and m.norms_per_layer == 4
    # 8,324,201,984 non-embedding parameters, Gemma 2 report Table 2 (https://arxiv.org/abs/2408.00118)
    assert m.total_params - m.embedding_params() == 8_324_201_984
    assert any("softcapping" in n and "plain softmax" in n for n in m.notes)


def test_gemma3_reads_its_text_config_five_sliding_to_one_global():
    # Gemma 3 report Table 1 (https://arxiv.org/abs/2503.19786): 27B has 25,600M non-embedding parameters;
    # the vision encoder (417M) is not counted, which the model says
    m = rl.load_model("gemma-3-27b")
    assert m.layer_types[:6] == ("sliding",) * 5 + ("full",) and m.num_sliding_layers == 52
    assert m.sliding_window == 1024 and m.qk_norm and m.vocab_size == 262_208 and m.max_context_tokens == 131_072
    assert (m.total_params - m.embedding_params()) == pytest.approx(25_600e6, rel=0.001)
    assert any("vision encoder" in n for n in m.notes)


def test_phi3_and_phi4_count_as_published():
    assert rl.load_model("phi-3-mini").total_params == pytest.approx(3.82e9, rel=0.005)   # fused qkv: same count
    # microsoft/phi-4 (model_type phi3): 14.7B parameters, https://huggingface.co/microsoft/phi-4
    phi4 = {"model_type": "phi3", "hidden_size": 5120, "num_hidden_layers": 40, "num_attention_heads": 40,
            "num_key_value_heads": 10, "intermediate_size": 17920, "vocab_size": 100352, "sliding_window": None,
            "tie_word_embeddings": False}
    m = rl.model_from_hf_config(phi4)
    assert m.total_params == pytest.approx(14.7e9, rel=0.01) and m.num_sliding_layers == 0


def test_llama4_scout_chunked_layers_shared_expert_and_published_counts():
    m = rl.load_model("llama-4-scout")
    # three of four layers attend in 8,192-token chunks (read as a window of one chunk, said in a note)
    assert m.layer_types[:4] == ("sliding", "sliding", "sliding", "full") and m.sliding_window == 8192
    assert m.num_sliding_layers == 36 and any("chunked attention" in n and "upper bound" in n for n in m.notes)
    assert m.num_shared_experts == 1 and m.shared_intermediate_size == 8192 and m.num_moe_layers == 48
    # 17B active, 109B total (https://huggingface.co/meta-llama/Llama-4-Scout-17B-16E): the 109B checkpoint holds
    # the vision encoder too, which the language model's count leaves out, so ours is 1.1% below
    assert 16.5e9 <= m.active_params < 17.5e9
    assert m.total_params == pytest.approx(109e9, rel=0.015) and m.total_params < 109e9


def test_llama4_maverick_interleaves_dense_and_moe_layers():
    # Maverick: 128 experts on every second layer, 400B total, 17B active
    # (https://huggingface.co/meta-llama/Llama-4-Maverick-17B-128E-Instruct)
    cfg = _preset("llama-4-scout")
    text = cfg["text_config"]
    del text["moe_layers"]
    text.update(num_local_experts=128, interleave_moe_layer_step=2)
    m = rl.model_from_hf_config(cfg)
    assert m.moe_layers[:4] == (False, True, False, True) and m.num_moe_layers == 24
    assert m.intermediate_size == 16384 and m.param_breakdown()["dense_mlp"] == 24 * 3 * 5120 * 16384
    assert m.total_params == pytest.approx(400e9, rel=0.01) and 16.5e9 <= m.active_params < 17.5e9


def test_qwen2_moe_shared_expert_has_its_own_size_and_a_gate():
    m = rl.load_model("qwen1.5-moe-a2.7b")
    assert m.num_shared_experts == 1 and m.shared_intermediate_size == 5632 and m.shared_expert_gate
    assert m.shared_expert_params() == 3 * 2048 * 5632 + 2048 and m.qkv_bias


def test_glm45_first_dense_layers_shared_expert_and_mtp():
    m = rl.load_model("glm-4.5-air")
    assert m.moe_layers[:2] == (False, True) and m.num_moe_layers == 45 and m.num_shared_experts == 1
    assert m.qkv_bias and not m.o_bias and m.router_bias and m.num_mtp_layers == 1
    # GLM-4.5: 355B total (https://huggingface.co/zai-org/GLM-4.5); its published architecture keys
    cfg = _preset("glm-4.5-air") | {"hidden_size": 5120, "num_hidden_layers": 92, "first_k_dense_replace": 3,
                                    "n_routed_experts": 160, "moe_intermediate_size": 1536,
                                    "intermediate_size": 12288, "use_qk_norm": True}
    big = rl.model_from_hf_config(cfg)
    assert big.qk_norm and big.num_moe_layers == 89
    assert big.total_params == pytest.approx(355e9, rel=0.01)


def test_mistral_variants_slide_and_take_an_explicit_head_dim():
    assert rl.load_model("mistral-7b").num_sliding_layers == 32
    m = rl.load_model("ministral-8b")
    assert m.head_dim == 128 and m.total_params == 8_019_808_256
    # Mistral-NeMo: head_dim 128 though hidden_size / heads = 160; "12B" (https://mistral.ai/news/mistral-nemo)
    nemo = {"model_type": "mistral", "hidden_size": 5120, "head_dim": 128, "num_attention_heads": 32,
            "num_key_value_heads": 8, "num_hidden_layers": 40, "intermediate_size": 14336, "vocab_size": 131072,
            "sliding_window": None}
    assert 11.5e9 <= rl.model_from_hf_config(nemo).total_params < 12.5e9
    ministral = {**nemo, "model_type": "ministral", "layer_types": ["sliding_attention", "full_attention"] * 20,
                 "sliding_window": 32768}
    assert rl.model_from_hf_config(ministral).num_sliding_layers == 20


def test_every_architecture_is_listed_in_help_and_docs(run_cli, capsys):
    from roofline.specs.hf_config import ARCHITECTURES
    from roofline.ui.cli import main
    docs = (Path(__file__).resolve().parent.parent / "docs" / "models.md").read_text()
    for command in (["stage"], ["compare"], ["size"], ["spec"], ["placements"], ["show"]):
        with pytest.raises(SystemExit):
            main([*command, "--help"])
        said = " ".join(capsys.readouterr().out.split())
        assert all(a in said for a in ARCHITECTURES), command
    assert all(f"`{a}`" in docs for a in ARCHITECTURES)
    assert {"gemma2", "gemma3", "phi3", "llama4", "qwen2_moe", "glm4_moe", "ministral"} <= set(ARCHITECTURES)


def test_show_gives_the_windowed_kv_of_a_model_that_only_slides(run_cli):
    code, out, _ = run_cli("show", "mistral-7b")
    text = " ".join(out.split())
    assert code == 0 and "KV cache per token (bf16) 0 B" not in text
    # 32 layers x 2 x 8 heads x 128 x 2 B = 131 kB per token until 4,096 tokens: 537 MB once the window is full
    assert "131 kB up to 4,096 tokens" in text and "537 MB" in text and "windowed" in text
    assert rl.load_model("mistral-7b").sliding_window_kv_bytes("bf16") == 32 * 2 * 8 * 128 * 2 * 4096
    code, out, _ = run_cli("models")
    row = next(line for line in out.splitlines() if line.startswith("mistral-7b"))
    assert "537 MB windowed" in row


def test_hf_repo_ids_of_the_presets_resolve_offline(run_cli):
    from roofline.specs.hf_config import preset_repos
    assert rl.load_model("meta-llama/Llama-3.1-70B-Instruct").id == "llama-3.1-70b"
    assert rl.load_model("meta-llama/Llama-3.1-70B").id == "llama-3.1-70b"
    assert rl.load_model("mistralai/Mixtral-8x7B-Instruct-v0.1").id == "mixtral-8x7b"
    for repo, preset in preset_repos().items():
        assert rl.load_model(repo).id == preset
    assert {p for p in rl.list_models() if "huggingface.co" in _preset(p)["_source"]} <= set(preset_repos().values())
    code, out, _ = run_cli("show", "meta-llama/Llama-3.1-70B-Instruct")
    assert code == 0 and "llama-3.1-70b" in out


def test_an_unknown_repo_id_says_it_is_not_shipped(run_cli, monkeypatch):
    code, _, err = run_cli("show", "acme/secret-model-7b")
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "does not ship" in err and "config.json" in err
    with pytest.raises(NotFoundError, match="does not ship"):
        rl.load_model("acme/secret-model-7b")
    monkeypatch.setitem(__import__("sys").modules, "huggingface_hub", None)   # the hub extra not installed
    with pytest.raises(NotFoundError, match=r"roofline\[hub\]"):
        rl.load_model("hf:acme/secret-model-7b")


def test_presets_win_over_a_folder_of_the_same_name(tmp_path, monkeypatch, run_cli):
    folder = tmp_path / "llama-3.1-8b"
    folder.mkdir()
    (folder / "config.json").write_text((presets_dir() / "llama-3.1-70b.json").read_text())
    (tmp_path / "config.json").write_text((presets_dir() / "llama-3.1-70b.json").read_text())
    monkeypatch.chdir(tmp_path)
    assert rl.load_model("llama-3.1-8b").total_params == pytest.approx(8.03e9, rel=0.01)
    assert rl.load_model("./llama-3.1-8b").total_params == pytest.approx(70.6e9, rel=0.01)
    assert rl.load_model(str(folder)).total_params == pytest.approx(70.6e9, rel=0.01)
    code, out, _ = run_cli("show", "llama-3.1-8b")
    assert code == 0 and "llama-3.1-8b" in out and "8.030 B" in out
    for empty in ("", " "):
        with pytest.raises(NotFoundError, match="empty model name"):
            rl.load_model(empty)
    code, _, err = run_cli("stage", "", "h100-sxm")
    assert code == 1 and "empty model name" in err


#: Draft and small-target presets against their model cards, which round to the digits shown: (preset, total
#: parameters, non-embedding parameters or None, the card's last digit, source).
DRAFT_CARDS = [
    ("llama-3.2-1b", 1.23e9, None, 0.01e9, "https://huggingface.co/meta-llama/Llama-3.2-1B"),   # "1.23B"
    ("llama-3.2-3b", 3.21e9, None, 0.01e9, "https://huggingface.co/meta-llama/Llama-3.2-3B"),   # "3.21B"
    ("tinyllama-1.1b", 1.1e9, None, 0.1e9, "https://huggingface.co/TinyLlama/TinyLlama-1.1B-Chat-v1.0"),
    ("qwen3-0.6b", 0.6e9, 0.44e9, 0.01e9, "https://huggingface.co/Qwen/Qwen3-0.6B"),   # 0.6B, 0.44B non-embedding
    ("qwen3-1.7b", 1.7e9, 1.4e9, 0.1e9, "https://huggingface.co/Qwen/Qwen3-1.7B"),     # 1.7B, 1.4B non-embedding
    ("qwen3-8b", 8.2e9, 6.95e9, 0.01e9, "https://huggingface.co/Qwen/Qwen3-8B"),       # 8.2B, 6.95B non-embedding
    ("qwen2.5-0.5b", 0.49e9, 0.36e9, 0.01e9, "https://huggingface.co/Qwen/Qwen2.5-0.5B"),   # 0.49B, 0.36B
    ("qwen2.5-7b", 7.61e9, 6.53e9, 0.01e9, "https://huggingface.co/Qwen/Qwen2.5-7B"),       # 7.61B, 6.53B
    ("vicuna-7b", 6.7e9, None, 0.1e9, "https://arxiv.org/abs/2302.13971"),    # LLaMA-7B's 6.7B (Table 2)
    ("vicuna-13b", 13.0e9, None, 0.1e9, "https://arxiv.org/abs/2302.13971"),  # LLaMA-13B's 13.0B
    ("vicuna-33b", 32.5e9, None, 0.1e9, "https://arxiv.org/abs/2302.13971"),  # LLaMA-33B's 32.5B
    ("vicuna-68m", 68e6, None, 1e6, "https://huggingface.co/double7/vicuna-68m"),
]


@pytest.mark.parametrize("model,total,non_embedding,digit,source", DRAFT_CARDS, ids=lambda v: str(v))
def test_draft_presets_match_their_model_cards(model, total, non_embedding, digit, source):
    """Each draft preset's parameters round to its card's figure (Qwen counts non-embedding parameters without
    either vocabulary table: its untied targets have two)."""
    m = rl.load_model(model)
    assert abs(m.total_params - total) <= digit / 2 + 1e-3 * total, source
    if non_embedding is not None:
        tables = 1 if m.tied_embeddings else 2
        assert abs(m.total_params - tables * m.embedding_params() - non_embedding) <= digit / 2 + 1e-3 * total, source


def test_draft_presets_share_their_targets_tokenizer():
    """The drafts speculative decoding pairs with their targets (Spec-Bench's vicuna-68m for Vicuna, Qwen2.5-0.5B
    for Qwen2.5-7B, Llama-3.2-1B for Llama-3.1-8B) pass the shared-tokenizer check."""
    from roofline.serving.round import Drafter
    for draft, target in (("vicuna-68m", "vicuna-7b"), ("qwen2.5-0.5b", "qwen2.5-7b"), ("qwen3-0.6b", "qwen3-8b"),
                          ("llama-3.2-1b", "llama-3.1-8b"), ("llama-3.2-3b", "llama-3.3-70b")):
        d = rl.load_model(draft)
        assert Drafter(kind="model", model=d).for_target(rl.load_model(target)) is d
