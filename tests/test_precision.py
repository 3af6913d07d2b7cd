import pytest

from roofline.errors import NotFoundError
from roofline.specs.formats import get_format


@pytest.mark.parametrize("name,bits", [
    ("bf16", 16), ("fp16", 16), ("fp8", 8), ("int8", 8),
    ("mxfp4", 4.25),   # OCP MX: 17 bytes per 32 values
    ("nvfp4", 4.5),    # E4M3 scale per 16
    ("int4-g32", 4.5), ("int4-g128", 4.125),  # fp16 scale per group
    ("mxint8", 8.25),
])
def test_bits_per_element_include_scales(name, bits):
    assert get_format(name).bits_per_element == pytest.approx(bits)


def test_weight_only_formats_compute_at_bf16():
    assert get_format("int4-g32").weight_only and get_format("int4-g32").compute == "bf16"
    assert get_format("int8").weight_only
    assert get_format("mxfp4").compute == "fp4" and not get_format("mxfp4").weight_only


def test_unknown_format_suggests():
    with pytest.raises(NotFoundError, match="did you mean 'mxfp4'"):
        get_format("mxpf4")
    with pytest.raises(NotFoundError):
        get_format("int4-g0")
