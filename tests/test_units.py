import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roofline.errors import RooflineError, UnitError
from roofline.units import GB, GiB, parse_quantity


@pytest.mark.parametrize("text,kind,expected", [
    ("3.35 TB/s", "bytes_per_s", 3.35e12),
    ("141 GB", "bytes", 141e9),
    ("80 GiB", "bytes", 80 * 2**30),
    ("143,771 MiB", "bytes", 143771 * 2**20),
    ("700 W", "w", 700.0),
    ("1.2 kW", "w", 1200.0),
    ("989.4 TFLOP/s", "flop_per_s", 989.4e12),
    ("400 Gb/s", "bytes_per_s", 50e9),   # bits, not bytes
    ("5 us", "s", 5e-6),
    ("2 ms", "s", 2e-3),
])
def test_parse(text, kind, expected):
    assert parse_quantity(text, kind) == pytest.approx(expected, rel=1e-12)


def test_gb_and_gib_are_kept_apart():
    # 80 GiB is 7.4% more than 80 GB: mixing them is the peer bug STYLE.md warns about.
    assert parse_quantity("80 GiB", "bytes") / parse_quantity("80 GB", "bytes") == pytest.approx(GiB / GB)
    assert GiB / GB == pytest.approx(1.073741824)


@pytest.mark.parametrize("text,kind", [
    ("3.35", "bytes_per_s"),      # no unit
    ("3.35 TB", "bytes_per_s"),   # wrong kind
    ("700", "w"),
    ("nan GB", "bytes"),
    ("1e999 GB", "bytes"),
    ("fast", "bytes_per_s"),
    ("3 GiFLOP/s", "flop_per_s"),
    ("5 parsecs", "s"),
])
def test_bad_quantities_raise_unit_error(text, kind):
    with pytest.raises(UnitError):
        parse_quantity(text, kind)


@given(st.one_of(st.text(max_size=30), st.floats(allow_nan=True), st.integers(), st.booleans()),
       st.sampled_from(["bytes", "bytes_per_s", "flop_per_s", "w", "s", "count"]))
def test_parser_raises_only_project_errors(text, kind):
    try:
        v = parse_quantity(text, kind)
    except RooflineError:
        return
    assert math.isfinite(v)


def test_capacities_render_binary():
    from roofline.units import format_capacity
    assert format_capacity(80 * 2**30) == "80 GiB"
    assert format_capacity(230e6) == "219 MiB"
    assert format_capacity(128e12) == "116 TiB"
    assert format_capacity(float("nan")) == "n/a"


def test_identity_memo_answers_only_for_the_very_same_objects():
    from roofline.memo import MISSING, IdentityMemo
    memo = IdentityMemo(2)
    a, b = [1], [1]   # equal, not identical: a memo by identity must tell them apart
    assert memo.put((a,), ("x",), "A") == "A"
    assert memo.get((a,), ("x",)) == "A"
    assert memo.get((b,), ("x",)) is MISSING and memo.get((a,), ("y",)) is MISSING
    memo.put((a, None), (), None)   # None is an answer like any other
    assert memo.get((a, None)) is None and len(memo) == 2
    memo.put((b,), ("x",), "B")   # full: emptied before the third answer goes in
    assert len(memo) == 1 and memo.get((a,), ("x",)) is MISSING and memo.get((b,), ("x",)) == "B"
    with pytest.raises(ValueError):
        IdentityMemo(0)


def test_identity_memo_holds_its_objects_so_an_id_is_never_reused():
    import gc

    from roofline.memo import MISSING, IdentityMemo
    memo = IdentityMemo(8)
    memo.put((object(),), (), "first")   # the memo holds the only reference: the object stays alive
    gc.collect()
    fresh = [object() for _ in range(1000)]   # none of these can take the remembered object's id
    assert all(memo.get((o,)) is MISSING for o in fresh)
