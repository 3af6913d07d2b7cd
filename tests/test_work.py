"""Work counts (no hardware): closed forms against detailed counts and published worked examples."""

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import roofline as rl
from roofline.physics.work import attended_pairs, expected_experts_touched, forward_work
from roofline.specs.formats import Formats

GPT = rl.load_model("gpt-oss-120b")
LLAMA70 = rl.load_model("llama-3.1-70b")


def test_expected_experts_limits():
    assert expected_experts_touched(128, 4, 1) == pytest.approx(4)
    assert expected_experts_touched(128, 4, 10_000) == pytest.approx(128)
    assert expected_experts_touched(8, 8, 3) == pytest.approx(8)
    n = np.arange(1, 300)
    assert np.all(np.diff(expected_experts_touched(256, 8, n)) >= 0)
    # docs/theory.md §2.7 table, E=128, k=4 and DeepSeek E=256, k=8
    np.testing.assert_allclose(expected_experts_touched(128, 4, [8, 32, 64, 128]), [28.7, 81.7, 111.2, 125.8], atol=0.06)
    np.testing.assert_allclose(expected_experts_touched(256, 8, [8, 32, 64]), [57.4, 163.3, 222.4], atol=0.06)


def test_expected_experts_matches_simulation():
    rng = np.random.default_rng(7)
    E, k, n = 64, 4, 20
    sims = [len({e for _ in range(n) for e in rng.choice(E, size=k, replace=False)}) for _ in range(4000)]
    assert np.mean(sims) == pytest.approx(expected_experts_touched(E, k, n), rel=0.01)


@given(st.integers(0, 60), st.integers(1, 60), st.one_of(st.none(), st.integers(1, 40)))
def test_attended_pairs_equals_brute_force(p, n, w):
    brute = sum(min(p + j, w) if w else p + j for j in range(1, n + 1))
    assert attended_pairs(p, n, w) == brute


@given(st.integers(1, 500), st.integers(1, 200))
def test_chunks_sum_to_causal_total(S, C):
    total = sum(attended_pairs(j * C, min(C, S - j * C)) for j in range(-(-S // C)))
    assert total == attended_pairs(0, S) == S * (S + 1) / 2


def test_prefill_flop_llama70b_matches_worked_example():
    # docs/theory.md §3.2: Llama-70B, S = 2,048: F = 285.9 TFLOP (2 P_mat S - 2dV(S-1) + causal attention)
    w = forward_work(LLAMA70, Formats(), batch=1, new_tokens=2048, prefix_tokens=0, logits_per_seq=1,
                     mla_absorbed=False)
    assert float(w.flop_total) == pytest.approx(285.9e12, rel=2e-3)


def test_decode_flop_is_two_per_active_param_plus_attention():
    m = rl.load_model("llama-3.1-8b")
    B, L = 4, 1000
    w = forward_work(m, Formats(), batch=B, new_tokens=1, prefix_tokens=L)
    matmul = 2 * B * (m.total_params - m.embedding_params() - m.num_layers * m.norm_params_per_layer()
                      - m.hidden_size)
    attention = B * m.num_layers * 4 * m.num_heads * m.head_dim * (L + 1)
    assert float(w.flop_total) == pytest.approx(matmul + attention, rel=1e-9)


def test_gpt_oss_decode_bytes_match_worked_example():
    # docs/theory.md §3.3 worked example 2: bytes per step at L = 8,192 (MXFP4 experts, BF16 rest and KV)
    B = np.array([1, 8, 32, 64, 128, 256])
    w = forward_work(GPT, Formats.for_model(GPT), batch=B, new_tokens=1, prefix_tokens=8192)
    got = (w.weight_bytes_total - w.weight_bytes["embedding"] + w.kv_read_bytes) / 1e9
    np.testing.assert_allclose(got, [5.31, 19.23, 51.82, 75.73, 102.30, 142.59], rtol=3e-3)


def test_verify_reads_more_experts_than_decode():
    # docs/theory.md §3.4: gpt-oss on H200, B = 1, L = 4,096: T_ver/T_dec = 1.36, 1.70, 2.04, 2.37 for gamma = 1..4
    f = Formats.for_model(GPT)

    def step_bytes(n):
        w = forward_work(GPT, f, batch=1, new_tokens=n, prefix_tokens=4096, logits_per_seq=n)
        return w.weight_bytes_total - w.weight_bytes["embedding"] + w.kv_read_bytes + w.kv_write_bytes

    ratios = [float(step_bytes(g + 1) / step_bytes(1)) for g in (1, 2, 3, 4)]
    np.testing.assert_allclose(ratios, [1.36, 1.70, 2.04, 2.37], atol=0.01)


def test_mla_absorbed_intensity():
    # docs/theory.md §2.6: absorbed MLA decode attention does 278,528 FLOP per 1,152 B cached token: 241.8 FLOP/B
    m = rl.load_model("deepseek-r1")
    w1 = forward_work(m, Formats(), batch=1, new_tokens=1, prefix_tokens=1000)
    w2 = forward_work(m, Formats(), batch=1, new_tokens=1, prefix_tokens=2000)
    dflop = float(w2.flop["attention_core"] - w1.flop["attention_core"])
    dbytes = float(w2.kv_read_bytes - w1.kv_read_bytes)
    assert dflop / dbytes == pytest.approx(241.8, abs=0.1)


def test_sliding_layers_read_only_the_window():
    f = Formats.for_model(GPT)
    short = forward_work(GPT, f, batch=1, new_tokens=1, prefix_tokens=100)
    long = forward_work(GPT, f, batch=1, new_tokens=1, prefix_tokens=10_100)
    # only the 18 full layers grow: 18 layers * 2 * 8 heads * 64 * 2 B = 36,864 B per extra token
    assert float(long.kv_read_bytes - short.kv_read_bytes) == pytest.approx(10_000 * 36_864 + 28 * 18 * 2048)


@pytest.mark.parametrize("model", ["llama-3.1-8b", "gpt-oss-120b", "deepseek-r1", "mixtral-8x7b", "falcon-180b"])
def test_components_sum_to_totals(model):
    m = rl.load_model(model)
    w = forward_work(m, Formats.for_model(m), batch=[1, 7], new_tokens=3, prefix_tokens=50, logits_per_seq=3)
    np.testing.assert_allclose(w.flop_total, sum(w.flop.values()))
    np.testing.assert_allclose(w.bytes_total, sum(w.weight_bytes.values()) + w.kv_read_bytes + w.kv_write_bytes
                               + w.activation_bytes)


def test_array_call_equals_stacked_scalar_calls():
    f = Formats.for_model(GPT)
    B, L, n = np.array([1, 4, 32]), np.array([0, 100, 9000]), np.array([1, 2, 6])
    grid = forward_work(GPT, f, batch=B[:, None, None], prefix_tokens=L[None, :, None], new_tokens=n[None, None, :],
                        logits_per_seq=1)
    for (i, b), (j, ctx), (k, nn) in itertools.product(enumerate(B), enumerate(L), enumerate(n)):
        one = forward_work(GPT, f, batch=b, prefix_tokens=ctx, new_tokens=nn, logits_per_seq=1)
        assert grid.bytes_total[i, j, k] == one.bytes_total
        assert grid.flop_total[i, j, k] == one.flop_total


def test_a_pass_counted_again_is_the_same_count():
    """batch_work remembers the context-free counts of a pass of arguments of a few points (a calibration times
    each row hundreds of times under new engine parameters; validation times a row's full and last waves as two
    batches in one call; a decode loop over contexts counts its batch once): pass_work's answer is count_work's
    (with its prompt chunks), the counts are the same record on a repeat, one per shape and values, and never a
    sweep's (a grid of more than 16 points is counted afresh)."""
    from roofline.physics.work import batch_work, count_work, pass_work, with_prompt_chunks
    m, f = rl.load_model("gpt-oss-120b"), Formats(weights="bf16", experts="mxfp4")
    args = dict(batch=48.0, new_tokens=1.0, prefix_tokens=1500.0, logits_per_seq=1.0, mla_absorbed=True)
    chunk = dict(chunks=1.0, chunk_tokens=512.0, chunk_prefix=1024.0)
    got = pass_work(m, f, **args, **chunk)
    want = with_prompt_chunks(m, f, count_work(m, f, **args), **chunk)
    assert got.flop == want.flop and got.weight_bytes == want.weight_bytes and got.tokens == want.tokens
    assert got.kv_read_bytes == want.kv_read_bytes and got.activation_bytes == want.activation_bytes
    free = {k: v for k, v in args.items() if k != "prefix_tokens"}   # what batch_work counts: no context
    assert batch_work(m, f, **free, **chunk) is batch_work(m, f, **free, **chunk)
    assert pass_work(m, f, **args).tokens == count_work(m, f, **args).tokens != got.tokens   # no chunk: another pass
    waves = {**free, "batch": np.array([1.0, 48.0])}
    assert batch_work(m, f, **waves) is batch_work(m, f, **{**waves, "batch": np.array([1.0, 48.0])})
    assert float(pass_work(m, f, **waves, prefix_tokens=1500.0).tokens[1]) == float(count_work(m, f, **args).tokens)
    assert batch_work(m, f, **{**free, "batch": np.array([48.0])}) is not batch_work(m, f, **free)   # shape (1,) vs ()
    assert batch_work(m, f, **{**waves, "batch": np.array([2.0, 48.0])}) is not batch_work(m, f, **waves)
    sweep = {**free, "batch": np.arange(1.0, 18.0)}
    assert batch_work(m, f, **sweep) is not batch_work(m, f, **sweep)
    assert float(pass_work(m, f, **sweep, prefix_tokens=1500.0).tokens[7]) == float(
        count_work(m, f, **{**args, "batch": 8.0}).tokens)


def test_one_points_shard_imbalance_is_the_sweeps_and_stays_put():
    """The remembered busiest-shard imbalance of one point is the array form's, and changing an answer does not
    change the next."""
    from roofline.physics.work import expert_shard_imbalance
    sweep = expert_shard_imbalance(128, 4, np.array([1.0, 7.0, 300.0]), 8)
    one = expert_shard_imbalance(128, 4, 7.0, 8)
    assert np.ndim(one) == 0 and float(one) == sweep[1] > 1
    if isinstance(one, np.ndarray):   # a 0-d array (a numpy scalar cannot be changed)
        one[...] = -1.0
    assert float(expert_shard_imbalance(128, 4, 7.0, 8)) == sweep[1]


def test_adding_numbers_keeps_their_order_and_arrays_go_last():
    """add() sums smallest first; numbers (one size) keep the order given, as the sorted path would."""
    from roofline.physics.work import add
    assert add(1e16, 1.0, -1e16) == (1e16 + 1.0) - 1e16 == 0.0
    assert add(np.float64(1.0), np.asarray(2.0)) == 3.0
    big = np.full(3, 1e16)
    assert np.array_equal(add(big, 1.0, -1e16), (1.0 - 1e16) + big)   # the numbers first, the array last


def test_spread_is_broadcast_to_without_the_copy():
    from roofline.physics.timing import spread
    a = np.arange(3.0)
    for x, shape in ((a, (3,)), (a, (2, 3)), (np.float64(2.0), ()), (2.0, (4,))):
        got = spread(x, shape)
        assert np.array_equal(got, np.broadcast_to(x, shape)) and got.shape == shape and not got.flags.writeable
    assert np.shares_memory(spread(a, (3,)), a)
