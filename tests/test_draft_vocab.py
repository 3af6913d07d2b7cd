"""EAGLE-3 heads score a reduced vocabulary (docs/theory.md §3.5): the draft step reads the layer and an LM head
over ``draft_vocab`` tokens, not the target's whole vocabulary."""
import json

import attrs
import pytest

from roofline.errors import RooflineError, WorkloadError
from roofline.evidence.validate import predict_row, read_rows, row_params, shipped_data
from roofline.physics.stages import draft, head_model
from roofline.serving.round import EAGLE3_DRAFT_VOCAB, Drafter
from roofline.specs.params import shipped_profile
from roofline.specs.resolve import resolve_group, resolve_model


def test_a_reduced_vocabulary_reads_exactly_the_lm_head_rows_it_drops():
    """At batch 1 a draft step reads every weight once: 32,000 of Llama-3.1-8B's 128,256 LM-head rows save
    (128,256 - 32,000) x 4,096 x 2 bytes per step in bf16, and nothing else moves but the logits."""
    target, group = resolve_model("llama-3.1-8b"), resolve_group("h100-sxm")
    full = draft(head_model(target, 1), group, batch=1, context=1024, gamma=1)
    small = draft(head_model(target, 1, EAGLE3_DRAFT_VOCAB), group, batch=1, context=1024, gamma=1)
    saved = (target.vocab_size - EAGLE3_DRAFT_VOCAB) * target.hidden_size * 2
    moved = float(full.bytes_per_device - small.bytes_per_device)
    assert saved <= moved < saved * 1.01   # the rest: one logit row per sequence
    assert float(small.time_s) < float(full.time_s)
    assert head_model(target, 1).vocab_size == target.vocab_size   # EAGLE (1, 2): the target's LM head


def test_the_draft_vocabulary_is_checked():
    target = resolve_model("llama-3.1-8b")
    with pytest.raises(WorkloadError, match="draft_vocab"):
        Drafter(kind="model", model=resolve_model("llama-3.2-1b"), vocab=32_000)
    with pytest.raises(WorkloadError, match="draft_vocab .a subset of llama-3.1-8b's vocabulary. must be .* 200000"):
        Drafter(kind="eagle", vocab=200_000).for_target(target)
    with pytest.raises(WorkloadError, match="draft_vocab"):
        Drafter(kind="eagle", vocab=0)
    assert "32,000-token draft vocabulary" in Drafter(kind="eagle", vocab=32_000).describe(target)


def _eagle3_row():
    return next(r for r in read_rows(shipped_data()) if r.get("spec_method") == "eagle3"
                and r.get("model") == "llama-3.1-8b" and r.get("hardware") == "h100-sxm")


def test_eagle3_rows_draft_over_32000_tokens_unless_the_row_says_otherwise():
    row = _eagle3_row()
    params = row_params(shipped_profile(), row)
    default = predict_row(row, params)
    as_eagle = predict_row(attrs.evolve(row, fields={**row.fields, "spec_method": "eagle"}), params)
    full = predict_row(attrs.evolve(row, fields={**row.fields, "draft_vocab": "128256"}), params)
    assert as_eagle == pytest.approx(full) and default > full   # a cheaper draft step: a larger speedup
    with pytest.raises(RooflineError, match="draft_vocab"):
        predict_row(attrs.evolve(row, fields={**row.fields, "draft_vocab": "0"}), params)


def test_spec_and_placements_take_the_draft_vocabulary(run_cli):
    base = ("spec", "--target", "llama-3.1-8b", "--verify-on", "h100-sxm", "--draft-kind", "eagle", "--alpha", "0.7",
            "--gamma", "3", "--json")
    full, small = (json.loads(run_cli(*base, *extra)[1]) for extra in ((), ("--draft-vocab", "32000")))
    assert small["draft_vocab"] == 32000 and full["draft_vocab"] is None
    assert small["rows"][0]["draft_s"] < full["rows"][0]["draft_s"]
    code, _, err = run_cli("spec", "--target", "llama-3.1-8b", "--verify-on", "h100-sxm", "--draft", "llama-3.2-1b",
                           "--draft-vocab", "32000", "--alpha", "0.7")
    assert code == 2 and "--draft-vocab" in err and "Traceback" not in err
    pareto = ("pareto", "--target", "llama-3.1-8b", "--alpha", "0.7", "--batch", "1", "--gamma", "3", "--json")
    runs = [json.loads(run_cli(*pareto, "--placement", f"e: decode=h100-sxm, draft-kind=eagle{extra}")[1])
            for extra in ("", ", draft-vocab=32000")]
    full_tpot, small_tpot = (run["configurations"][0]["frontier"][0]["tpot_s"] for run in runs)
    assert small_tpot < full_tpot
    code, _, err = run_cli(*pareto, "--placement", "e: decode=h100-sxm, draft-kind=eagle, draft-vocab=many")
    assert code == 2 and "draft-vocab" in err and "Traceback" not in err


def test_the_head_keeps_the_targets_embedding_and_ships_rows_of_its_own_vocabulary():
    """Only the LM head shrinks: the embedding stays the target's whole table (EAGLE-3 reads the target's), a tied
    target's head gets an LM head of its own, and lossless sampling across a link ships probability rows over the
    tokens the head scores."""
    target = resolve_model("llama-3.1-8b")
    head = head_model(target, 1, EAGLE3_DRAFT_VOCAB)
    assert head.embedding_params() == target.embedding_params()
    assert head.lm_head_params() == EAGLE3_DRAFT_VOCAB * target.hidden_size
    tied = resolve_model("llama-3.2-1b")
    assert tied.tied_embeddings and head_model(tied, 1, EAGLE3_DRAFT_VOCAB).param_breakdown()["lm_head"] > 0
    assert Drafter(kind="eagle", vocab=EAGLE3_DRAFT_VOCAB).scored_vocab(target) == EAGLE3_DRAFT_VOCAB
    assert Drafter(kind="eagle").scored_vocab(target) == target.vocab_size
    from roofline.serving.speculation import speculative_round
    kw = dict(verify_on=resolve_group("h100-sxm"), draft_on=resolve_group("h200-sxm"), draft_kind="eagle",
              acceptance=0.7, gamma=4, batch=8, sampling="lossless")
    full, small = (speculative_round(target, draft_vocab=v, **kw) for v in (None, EAGLE3_DRAFT_VOCAB))
    assert float(small.transfer_s) < float(full.transfer_s)


def test_a_placement_checks_its_draft_vocabulary():
    from roofline.specs.placement import Placement
    with pytest.raises(WorkloadError, match="draft_vocab"):
        Placement.build("p", decode="h100-sxm", draft_vocab=32_000)   # no head to score it
    with pytest.raises(WorkloadError, match="draft_vocab"):
        Placement.build("p", decode="h100-sxm", draft_kind="eagle", draft_vocab=0)
    placed = Placement.build("p", decode="h100-sxm", draft_kind="eagle", draft_vocab=32_000)
    assert "eagle head over 32,000 tokens" in placed.describe()


def test_placement_strings_refuse_a_bad_draft_vocabulary(run_cli):
    base = ("pareto", "--target", "llama-3.1-8b", "--alpha", "0.7", "--batch", "1")
    for text, said in (("draft-kind=eagle, draft-vocab=0", "draft-vocab='0'"),
                       ("draft-vocab=32000", "applies to a head of the target"),
                       ("draft-kind=eagle, head-layers=x", "head-layers='x'")):
        code, _, err = run_cli(*base, "--placement", f"e: decode=h100-sxm, {text}")
        assert code == 2 and said in err and len(err.strip().splitlines()) == 1


def test_a_misspelt_column_is_refused_with_the_name_it_meant(tmp_path, run_cli):
    """An optional column a CSV misspells would be read as empty (a silently different setup, e.g. a head scoring the
    whole vocabulary): validate names it and the column it resembles, in one line."""
    lines = shipped_data().read_text().splitlines()
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join([lines[0] + ",draft_vocab_size"] + [line + "," for line in lines[1:4]]) + "\n")
    with pytest.raises(RooflineError, match="did you mean 'draft_vocab'"):
        read_rows(bad)
    code, _, err = run_cli("validate", "--data", str(bad))
    assert code != 0 and "draft_vocab_size" in err and len(err.strip().splitlines()) == 1


def test_an_eagle3_head_defaults_to_its_draft_vocabulary_and_reads_three_layers_features():
    """Draft kind ``eagle3``: an EAGLE head over EAGLE3_DRAFT_VOCAB tokens (at most the target's) that reads three
    layers' hidden states per position, so a head on devices of its own receives three times EAGLE's features."""
    from roofline.serving.round import round_transfer_s
    from roofline.specs.links import LINKS
    target = resolve_model("llama-3.1-8b")
    assert Drafter(kind="eagle3").head_vocab(target) == EAGLE3_DRAFT_VOCAB
    assert Drafter(kind="eagle3", vocab=16_000).head_vocab(target) == 16_000
    assert Drafter(kind="eagle").head_vocab(target) is None
    assert Drafter(kind="eagle", vocab=target.vocab_size).head_vocab(target) is None   # the whole vocabulary: no own
    assert Drafter(kind="eagle3").head_vocab(resolve_model("llama-2-7b")) is None      # 32,000 tokens: all of them
    small = resolve_model("llama-2-7b")   # 32,000 tokens: the head scores all of them
    assert head_model(small, 1, Drafter(kind="eagle3").head_vocab(small)).lm_head_params() == small.lm_head_params()
    link, feature_bytes = LINKS["pcie5"], target.hidden_size * 2
    kw = dict(batch=8, gamma=4, feature_bytes=feature_bytes)
    three, one = (float(round_transfer_s(link, draft_kind=k, **kw)) for k in ("eagle3", "eagle"))
    assert three - one == pytest.approx(2 * 8 * 5 * feature_bytes / link.bandwidth_bytes_per_s)


def test_spec_runs_an_eagle3_head(run_cli):
    code, out, err = run_cli("spec", "--target", "llama-3.1-8b", "--verify-on", "h100-sxm", "--draft-kind", "eagle3",
                             "--alpha", "0.7", "--gamma", "3", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["draft_vocab"] == EAGLE3_DRAFT_VOCAB and "eagle3 head" in data["draft"]
