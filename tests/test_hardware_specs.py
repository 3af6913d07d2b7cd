"""Spec lint (every shipped file), the loader's errors, and fuzzing of the loader."""

import copy
import math
import tomllib
from pathlib import Path

import attrs
import pytest
from conftest import golden
from hypothesis import given
from hypothesis import strategies as st

import roofline as rl
from roofline.errors import NotFoundError, RooflineError, SpecError, UnknownSpecError
from roofline.specs.devices import device_from_dict, specs_dir

REQUIRED = ["a100-sxm-80gb", "h100-sxm", "h100-pcie", "h200-sxm", "b200", "gb200", "b300", "l40s", "mi300x",
            "mi325x", "mi355x", "tpu-v5e", "tpu-v6e", "tpu-7x", "gaudi3", "trainium2", "trainium3", "corsair",
            "groq-lpu", "groq-3-lpu", "cerebras-wse-3", "sn40l", "rubin", "rubin-cpx", "xeon-6980p", "sohu",
            "majestic-prometheus", "tensordyne-napier"]
SPEC_FILES = sorted(specs_dir().glob("*.toml"))


def test_every_required_device_ships():
    assert set(REQUIRED) <= set(rl.list_devices())


@pytest.mark.parametrize("path", SPEC_FILES, ids=lambda p: p.stem)
def test_spec_file_lint(path: Path):
    dev = rl.load_device(path)
    raw = tomllib.loads(path.read_text())
    assert dev.id == path.stem
    # every known number has a source URL; every compute peak states its basis
    for t in dev.memory:
        for field, value in (("capacity", t.capacity_bytes), ("bandwidth", t.bandwidth_bytes_per_s)):
            if value is not None:
                assert dev.sources[f"{t.name}.{field}"].startswith("http")
    for cls, value in dev.peak_flop_per_s.items():
        if value is not None:
            assert dev.sources[f"compute.{cls}"].startswith("http")
            assert raw["compute"]["peak"][cls]["basis"] in ("dense", "dense-from-sparse", "unstated")
    # plausible ranges (SI units): catches a unit slip of 1000x
    for t in dev.memory:
        if t.bandwidth_bytes_per_s is not None:
            assert 1e10 <= t.bandwidth_bytes_per_s <= 1e17
        if t.capacity_bytes is not None:
            assert 1e7 <= t.capacity_bytes <= 1e15
    for v in dev.peak_flop_per_s.values():
        assert v is None or 1e12 <= v <= 1e18
    assert dev.tdp_w is None or 100 <= dev.tdp_w <= 30000
    assert dev.status in ("shipping", "announced")


def test_aliases_are_unique_and_resolve():
    seen = {}
    for d in rl.list_devices():
        for a in rl.load_device(d).aliases:
            assert a not in seen, f"alias {a} used by {seen.get(a)} and {d}"
            seen[a] = d
            assert rl.load_device(a).id == d


def test_dense_peaks_from_published_sparse():
    # NVIDIA quotes 1,979 TFLOP/s with 2:4 sparsity for H100 BF16; dense is 989.4 (scaling book "Rooflines").
    h100 = rl.load_device("h100-sxm")
    assert h100.get("compute.bf16") == pytest.approx(989.4e12)
    assert h100.get("compute.bf16") / h100.get("hbm.bandwidth") == pytest.approx(295.3, abs=0.1)


def test_capacity_conventions():
    # nvidia-smi's totals (tests/golden/published.toml): 81,559 MiB on H100-80GB, 143,771 MiB on H200
    for row in golden()["nvidia_smi_mib"]:
        assert rl.load_device(row["device"]).get("hbm.capacity") == row["value"] * 2**20, row["source"]
    corsair = rl.load_device("corsair")
    assert [t.name for t in corsair.memory] == ["sram", "lpddr"]
    assert corsair.get("sram.capacity") == 2e9 and corsair.get("sram.bandwidth") == 150e12
    assert rl.load_device("groq-lpu").get("sram.capacity") == 230e6
    assert rl.load_device("groq-3-lpu").get("sram.capacity") == 500e6
    assert [t.name for t in rl.load_device("sn40l").memory] == ["hbm", "ddr"]   # SRAM is a scratchpad there
    assert rl.load_device("majestic-prometheus").get("dram.capacity") == 128e12


def test_unknown_field_raises_with_how_to_supply():
    with pytest.raises(UnknownSpecError, match=r"corsair: compute.bf16 is not published.*--set corsair.compute.bf16"):
        rl.load_device("corsair").get("compute.bf16")
    with pytest.raises(UnknownSpecError, match="sohu: hbm.bandwidth"):
        rl.load_device("sohu").get("hbm.bandwidth")


def test_override_and_evolve():
    c = rl.load_device("corsair")
    fast = rl.override(c, "sram.bandwidth", "300 TB/s")
    assert fast.get("sram.bandwidth") == 300e12 and c.get("sram.bandwidth") == 150e12
    b = rl.override(rl.load_device("b200"), "hbm.capacity", "288GB")
    assert b.get("hbm.capacity") == 288e9
    assert rl.override(c, "compute.bf16", "600 TFLOP/s").compute_rate_flop_per_s("bf16") == 600e12
    with pytest.raises(NotFoundError, match="did you mean"):
        rl.override(c, "sram.bandwith", "1 TB/s")
    with pytest.raises(RooflineError):
        rl.override(c, "sram.bandwidth", "-1 TB/s")
    with pytest.raises(RooflineError):  # the records' validation still applies to evolve
        attrs.evolve(c, tdp_w=-5.0)


# ------------------------------------------------------------ bad spec files
def _good() -> dict:
    return tomllib.loads((specs_dir() / "h100-sxm.toml").read_text())


def _write(tmp_path, text, name="h100-sxm.toml"):
    p = tmp_path / name
    p.write_text(text) if isinstance(text, str) else p.write_bytes(text)
    return p


def _dump(d: dict) -> str:
    import json

    def val(v):
        if isinstance(v, dict):
            return "{ " + ", ".join(f'"{k}" = {val(x)}' for k, x in v.items()) + " }"
        return json.dumps(v)
    lines, tables = [], []
    for k, v in d.items():
        if isinstance(v, list) and v and isinstance(v[0], dict):
            for item in v:
                tables.append(f"[[{k}]]\n" + "\n".join(f'"{a}" = {val(b)}' for a, b in item.items()))
        elif isinstance(v, dict) and k in ("sources", "compute", "power", "links", "floors", "derates"):
            tables.append(f"[{k}]\n" + "\n".join(f'"{a}" = {val(b)}' for a, b in v.items()))
        else:
            lines.append(f'"{k}" = {val(v)}')
    return "\n".join(lines) + "\n\n" + "\n\n".join(tables) + "\n"


@pytest.mark.parametrize("mutate,field", [
    (lambda d: d["memory"][0].pop("bandwidth"), "hbm.bandwidth"),
    (lambda d: d["memory"][0]["bandwidth"].update(value="3.35"), "hbm.bandwidth"),          # no unit
    (lambda d: d["memory"][0]["bandwidth"].update(value="3.35 TB"), "hbm.bandwidth"),       # wrong unit
    (lambda d: d["memory"][0]["capacity"].update(value="0 GB"), "hbm.capacity"),            # zero
    (lambda d: d["power"]["tdp"].update(value="-700 W"), "power.tdp"),                     # negative
    (lambda d: d["power"]["tdp"].update(value="inf W"), "power.tdp"),                       # non-finite
    (lambda d: d["compute"]["peak"].update(fp5={"value": "1 TFLOP/s", "source": "product", "basis": "dense"}),
     "compute.peak.fp5"),                                                                   # unknown dtype
    (lambda d: d["compute"]["peak"]["bf16"].pop("basis"), "compute.bf16.basis"),            # dense/sparse unstated
    (lambda d: d["compute"]["peak"]["bf16"].pop("source"), "compute.bf16"),                 # no source
    (lambda d: d["power"]["tdp"].update(source="a blog"), "power.tdp"),                     # not a URL
    (lambda d: d["compute"]["measured"]["bf16"].update(value="1000 TFLOP/s"), "compute.measured.bf16"),  # > peak
    (lambda d: d["compute"]["measured"]["bf16"].update(basis="dense"), "compute.measured.bf16.basis"),  # a peak?
    (lambda d: d["compute"]["measured"]["bf16"].pop("source"), "compute.measured.bf16"),    # unsourced
    (lambda d: d["compute"]["measured"].update(fp4={"value": "1 PFLOP/s", "source": "mamf", "basis": "measured"}),
     "compute.measured.fp4"),                                                               # no published peak
    (lambda d: d.update(status="rumoured"), "status"),
    (lambda d: d.update(id="H100"), "id"),
    (lambda d: d.pop("links"), "links"),
    (lambda d: d.update(isa="gfx942"), "isa"),                                              # unsourced
    (lambda d: d.update(isa={"value": "", "source": "product"}), "isa"),                    # empty
    (lambda d: d.update(isa={"value": "sm_90", "source": "a blog"}), "isa"),                # not a URL
    (lambda d: d.update(isa={"value": "sm_90", "source": 5}), "isa"),                       # not a string
    (lambda d: d.update(isa={"value": "gfx942:sramecc+:xnack-", "source": "product"}), "isa"),   # target features
    (lambda d: d.update(vendor="AMD"), "isa"),                                              # an AMD GPU needs it
    (lambda d: d["links"].update(scale_out={"latency": {"value": "unknown"}}), "scale_out.bandwidth"),  # given: whole
    (lambda d: d["links"].update(scale_out={"bandwidth": {"value": "400 Gb", "source": "product"}}),
     "scale_out.bandwidth"),                                                                # not a rate
])
def test_bad_spec_file_names_file_field_value(tmp_path, mutate, field):
    d = _good()
    mutate(d)
    p = _write(tmp_path, _dump(d))
    with pytest.raises(SpecError) as e:
        rl.load_device(p)
    msg = str(e.value)
    assert str(p) in msg and field in msg


def test_roundtrip_of_dump_helper(tmp_path):
    assert rl.load_device(_write(tmp_path, _dump(_good()))).get("hbm.bandwidth") == 3.35e12


def test_scale_out_link_is_optional_and_sourced(tmp_path):
    """A spec without [links.scale_out] loads (its collectives stay on the scale-up link); with one, the bandwidth
    is read with its source like any other number."""
    d = _good()
    d["links"].pop("scale_out", None)
    dev = rl.load_device(_write(tmp_path, _dump(d)))
    assert dev.scale_out.bandwidth_bytes_per_s is None
    d["links"]["scale_out"] = {"bandwidth": {"value": "50 GB/s", "source": "product"}}
    (tmp_path / "with").mkdir()
    dev = rl.load_device(_write(tmp_path / "with", _dump(d)))
    assert dev.get("scale_out.bandwidth") == 50e9 and dev.sources["scale_out.bandwidth"].startswith("https://")


@pytest.mark.parametrize("content", ["schema = = 1", b"\xff\xfe\x00binary", "", "schema = 1\n"])
def test_unparseable_or_empty_files(tmp_path, content):
    with pytest.raises(SpecError, match="h100-sxm.toml"):
        rl.load_device(_write(tmp_path, content))


def test_missing_path_and_directory(tmp_path):
    with pytest.raises(SpecError, match="no such file"):
        rl.load_device(tmp_path / "nope.toml")
    d = tmp_path / "dir.toml"
    d.mkdir()
    with pytest.raises(SpecError, match="directory"):
        rl.load_device(d)


def test_unknown_id_suggests():
    with pytest.raises(NotFoundError, match="did you mean 'h100'"):
        rl.load_device("h10O")


_leaves = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=12),
                    st.just("unknown"), st.just("1 TB/s"), st.lists(st.text(max_size=4), max_size=2),
                    st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=2))


def _paths(d, prefix=()):
    for k, v in d.items():
        yield prefix + (k,)
        if isinstance(v, dict):
            yield from _paths(v, prefix + (k,))


@given(st.data())
def test_fuzz_loader_only_raises_spec_errors(data):
    d = _good()
    memory = copy.deepcopy(d["memory"])
    paths = list(_paths(d))
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths))
        target = d
        for k in path[:-1]:
            target = target.get(k) if isinstance(target, dict) else None
            if not isinstance(target, dict):
                break
        else:
            if data.draw(st.booleans()):
                target.pop(path[-1], None)
            else:
                target[path[-1]] = data.draw(_leaves)
    if data.draw(st.booleans()):
        d["memory"] = data.draw(st.one_of(st.just([]), st.lists(_leaves, max_size=2), st.just(memory)))
    try:
        dev = device_from_dict(d, origin="fuzz.toml", stem="h100-sxm")
    except SpecError as e:
        assert "fuzz.toml" in str(e)
        return
    for t in dev.memory:
        assert t.capacity_bytes is None or (math.isfinite(t.capacity_bytes) and t.capacity_bytes > 0)


# ------------------------------------------------------- in-repository measurements
MEASURED_IDLE = {"value": "126 W", "measured": "roofline/validation/h200_microbench.json", "run": 5,
                 "key": "power.idle.power_w"}


def test_a_spec_value_may_cite_our_own_measurement():
    """h200-sxm.toml's idle power cites the run of scripts/measure_h200.py that measured it (file, run, key), not a
    URL; the loader reads the number there (125.6 W, 0.18 of the 700 W TDP) and `show` cites it."""
    import json
    dev = rl.load_device("h200-sxm")
    runs = json.loads((Path(rl.__file__).parent / "validation" / "h200_microbench.json").read_text())["runs"]
    assert dev.idle_w == 126.0 == pytest.approx(runs[4]["power"]["idle"]["power_w"], rel=0.01)
    assert dev.sources["power.idle"] == "roofline/validation/h200_microbench.json, run 5, power.idle.power_w"


@pytest.mark.parametrize("change, why", [
    ({"value": "150 W"}, "agree within 1%"),                              # not what the file says
    ({"run": 99}, "no number at run 99"),
    ({"run": 0}, "counted from 1"),
    ({"key": "power.idle.watts"}, "no number"),
    ({"key": "power.idle"}, "not a number"),                               # a table, not a number
    ({"measured": "../secrets.json"}, "under roofline/"),
    ({"measured": "roofline/validation/missing.json"}, "missing.json"),
    ({"source": "product"}, "not both"),
])
def test_a_bad_measured_citation_names_the_field(tmp_path, change, why):
    d = _good()
    d["power"]["idle"] = {**MEASURED_IDLE, **change}
    with pytest.raises(SpecError) as e:
        rl.load_device(_write(tmp_path, _dump(d)))
    assert "power.idle" in str(e.value) and why in str(e.value)
    d["power"]["idle"] = MEASURED_IDLE
    assert rl.load_device(_write(tmp_path, _dump(d))).idle_w == 126.0


def test_measured_matmul_rates_are_sourced_below_their_peaks_and_reach_diagnose():
    """A spec's [compute.measured] holds the best dense matmul rate a cited microbenchmark reached (AMD's sustained
    MAF figures, Bekman's MAMF table): each below its class's dense peak and sourced; `show` prints its share of the
    peak (the 750 W MI300X at 54% of its bf16 peak where the 1000 W MI325X with the same peak reaches 64%), and
    `diagnose` reports achieved FLOP/s against it beside the peak (the datasheet MFU x peak / measured)."""
    measured = {d.id: d for d in map(rl.load_device, rl.list_devices()) if d.measured_flop_per_s}
    assert {"h100-sxm", "b200", "mi300x", "mi325x", "gaudi2"} <= set(measured)
    for d in measured.values():
        for cls, v in d.measured_flop_per_s.items():
            assert 0 < v <= d.peak_flop_per_s[cls] and d.sources[f"compute.measured.{cls}"].startswith("https://")
    share = {k: measured[k].measured_flop_per_s["bf16"] / measured[k].peak_flop_per_s["bf16"] for k in ("mi300x", "mi325x")}
    assert share["mi300x"] == pytest.approx(708 / 1307.4) and share["mi325x"] == pytest.approx(843 / 1307.4)
    from roofline.evidence.diagnose import Measurement, diagnose
    m = Measurement.from_rates(batch=64, input_tokens=1000, output_tokens=500, tokens_per_s_total=4000.0)
    d = diagnose("llama-3.1-8b", "h100-sxm", m)
    assert d.measured_flop_per_s == pytest.approx(794.5e12)
    assert d.mfu_of_measured == pytest.approx(d.mfu * 989.4e12 / 794.5e12)
    assert diagnose("llama-3.1-8b", "l40s", Measurement.from_rates(batch=1, input_tokens=100, output_tokens=100,
                                                                   tokens_per_s_total=30.0)).mfu_of_measured is None


def test_gpu_matmuls_run_at_their_measured_share_of_the_peak():
    """A GPU's matmuls run at the share of its dense peak its measured rate reaches (times the stack's fitted
    efficiency): at the same 1,307 TFLOP/s peak and the same parameters, a compute-bound MI325X prefill is 843 / 708
    times as fast as an MI300X's (AMD's sustained max-achievable FLOPs, 1447 against 1207 MHz). A class without its
    own figure takes its kin's (B200's FP4 its FP8 share), a GPU without any the shipped GPUs' median (kept equal to
    it here), and other families their peaks; a what-if of a peak keeps the share."""
    import statistics

    from roofline.physics.timing import MEDIAN_MEASURED_SHARE, measured_share
    dev = {n: rl.load_device(n) for n in ("mi300x", "mi325x", "b200", "l40s", "gaudi3", "h100-sxm")}
    t = {n: rl.prefill("llama-3.1-8b", n, prompt=16384).compute_s for n in ("mi300x", "mi325x")}
    assert float(t["mi300x"] / t["mi325x"]) == pytest.approx(843 / 708, rel=1e-9)
    assert measured_share(dev["b200"], "fp4") == pytest.approx(3432.5 / 4500)
    assert measured_share(dev["l40s"], "bf16") == MEDIAN_MEASURED_SHARE["16-bit"]
    assert measured_share(dev["gaudi3"], "bf16") == 1.0
    gpus = [d for d in map(rl.load_device, rl.list_devices()) if d.family == "gpu"]
    for width, cls in (("16-bit", "bf16"), ("8-bit", "fp8")):
        shares = [d.measured_flop_per_s[cls] / d.peak_flop_per_s[cls] for d in gpus if cls in d.measured_flop_per_s]
        assert MEDIAN_MEASURED_SHARE[width] == pytest.approx(statistics.median(shares), abs=5e-4)
    faster = rl.override(dev["h100-sxm"], "compute.bf16", "1978.8 TFLOP/s")
    assert faster.measured_flop_per_s["bf16"] == pytest.approx(2 * 794.5e12)
    with pytest.raises(RooflineError, match="compute.measured.bf16"):
        rl.override(dev["h100-sxm"], "compute.measured.bf16", "1000 TFLOP/s")
