"""Regenerate what the README and docs show: command and example outputs, the accuracy tables, the figures.

Run after anything that changes numbers (a refit of roofline/profiles/default.toml, engine or profile changes):

    python scripts/refresh_docs.py [--heldout] [--loo]  # --heldout also refits on 5 folds of publications (about 35
                                                        # minutes, 2 processes) for docs/heldout_errors.json; --heldout
                                                        # or --loo refits for docs/loo_errors.json (about 10 minutes)

Needs the plot extra (matplotlib) for the figures (skipped if absent); llm-analysis refreshes the peer table's
llm-analysis column (else its saved predictions, docs/llm_analysis_predictions.json, fill it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "COLUMNS": "80"}
RL = [sys.executable, "-m", "roofline"]
MAIN_JOB = ["spec", "--target", "gpt-oss-120b", "--draft", "gpt-oss-draft-1.6b", "--draft-on", "corsair:2",
            "--verify-on", "b200:8", "--alpha", "0.926", "--gamma", "1..8"]
STAGE = ["stage", "gpt-oss-120b", "h200-sxm", "--batch", "1,64,256", "--context", "8192"]
EXAMPLES = [("gimlet_corsair", "Corsair draft against the best GPU-only placement"), ("disaggregated", None),
            ("sram_decode", None), ("formats", None), ("capacity", None), ("diagnose", None)]
METRIC_NAMES = {"decode_tokens_per_s_per_user": "decode tokens/s per user", "itl_ms": "ITL / TPOT",
                "ttft_ms": "TTFT", "output_tokens_per_s_per_device": "output tokens/s per device",
                "output_tokens_per_s_total": "output tokens/s of the deployment"}
ENERGY_NAMES = {"power_w": "power (fits the busy floor)", "energy_per_token_j": "J per output token (not fitted)"}
FAMILY_NAMES = {"groq": "Groq LPU, batch-1 decode", "cerebras": "Cerebras WSE-3, batch-1 decode"}
PROFILE_FAMILY_NAMES = {"gaudi": "Intel Gaudi 2 / 3", "trainium": "AWS Trainium / Inferentia",
                        "tpu": "Google TPU v5e / v6e / 7x"}
FITS_FILE = ROOT / "docs" / "family_fits.json"


#: Held-out rows whose stack build no row outside their fold has (written with docs/heldout_errors.json).
UNSEEN_FILE = ROOT / "docs" / "heldout_unseen_builds.json"
KEPT_FILE = ROOT / "roofline" / "validation" / "kept.csv"   # the kept set: publications no fit reads
KEPT_SPEC_FILE = ROOT / "roofline" / "validation" / "kept_spec.csv"   # its speculative rows
#: The GPU rows held out by device kind and by serving stack (`roofline calibrate --folds 5 --by hardware|stack`).
BY_HARDWARE_FILE = ROOT / "docs" / "heldout_by_hardware.json"
BY_STACK_FILE = ROOT / "docs" / "heldout_by_stack.json"
#: Set for a file that comes from a fit older than the shipped one (its folds not yet rerun): its row says so.
BY_FOLDS_STALE = {"device kind": "", "stack family": ""}


#: Id prefixes of TensorRT-LLM's perf-overview tables (offline maximum throughput, five versions): most of the GPU
#: time rows and the kind the model predicts best, so the accuracy table also reports the rows without them.
PERF_TABLES = ("TL", "TR", "TQ", "TV")


def sh(*cmd: str, env: dict[str, str] = ENV) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=True, env=env, cwd=ROOT).stdout.rstrip()


#: The examples print as they do into a pipe (their own width, wide enough for whole cells), not at 80 columns.
EXAMPLE_ENV = {k: v for k, v in os.environ.items() if k != "COLUMNS"}


def block_after(text: str, marker: str, body: str) -> str:
    """Replace the first code block that follows the code block containing ``marker``."""
    i = text.index(marker)
    j = text.index("```", i)                            # the end of the marker's own block
    k = text.index("```", j + 3)                        # the next block's opening fence
    end = text.index("```", k + 3)
    return text[:k] + "```\n" + body + "\n" + text[end:]


def block_at(text: str, header: str, body: str) -> str:
    """Replace the code block that follows ``header`` (a line of prose)."""
    i = text.index(header)
    j = text.index("```", i)
    k = text.index("```", j + 3)
    return text[:j] + "```\n" + body + "\n" + text[k:]


def tail_from(text: str, marker: str | None) -> str:
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if marker and marker in line:
            return "\n".join(lines[i:])
    return text


def timed(r: dict) -> bool:
    """Whether a result row is a time row of the accuracy tables: plain decoding, or a speculative setup's time
    (kind ``spec``) in a time metric; speculative ``speedup`` ratios are reported in docs/validation.md."""
    return r["kind"] == "time" or (r["kind"] == "spec" and r["metric"] != "speedup")


def accuracy_table(v: dict, held: dict[str, float], family_held: dict[str, dict[str, float]],
                   loo: dict[str, float], fits: dict[str, dict] | None = None, kept: list[dict] | None = None,
                   kept_spec: dict | None = None) -> str:
    """Median |error| per metric: in-sample, leave-one-out (``loo``: one Newton step per row from the shipped
    fit) and held out by publication (``held``: 5 folds of whole publications; ``fits``: the Gaudi, Trainium and
    TPU profile fits, docs/family_fits.json), and how many rows fall inside their 80% interval (made from the other
    publications' held-out errors). ``kept``: the validated rows of the kept set (roofline/validation/kept.csv,
    publications no fit reads), whose errors are all blind; ``kept_spec``: the validation of its speculative rows
    (roofline/validation/kept_spec.csv), with how many it could not predict."""
    rows = ["| rows | n | median abs error | leave-one-out | held out of the fit | held out, in its 80% interval |",
            "|---|---|---|---|---|---|"]
    gpu = [r for r in v["rows"] if r["family"] == "gpu"]

    def med(xs: list[float]) -> str:
        xs = [x for x in xs if x is not None and np.isfinite(x)]
        return f"{np.median(np.abs(xs)):.0%}" if xs else "—"

    def cover(mine: list[dict], held: dict[str, float] = held) -> str:
        """The share of rows whose held-out prediction (else, for a row no fit left out, the shipped one) falls
        inside the row's 80% interval, whose factors are the shipped prediction's: predicted_low / predicted."""
        c = []
        for r in mine:
            if r.get("predicted_low") is None:
                continue
            e = held.get(r["id"])
            ratio = 1.0 + (e if e is not None else r["error"])   # that prediction / measured
            lo, hi = r["predicted_low"] / r["predicted"], r["predicted_high"] / r["predicted"]
            c.append(lo * ratio <= 1.0 <= hi * ratio)
        return f"{np.mean(c):.0%}" if c else "—"

    def three(mine: list[dict], held: dict[str, float] = held) -> str:
        return (f"{len(mine)} | {med([r['error'] for r in mine])} | {med([loo.get(r['id']) for r in mine])} | "
                f"{med([held.get(r['id']) for r in mine])} | {cover(mine, held)} |")
    for key, name in METRIC_NAMES.items():
        mine = [r for r in gpu if r["metric"] == key and timed(r)]
        if mine:
            rows.append(f"| GPU: {name} | {three(mine)}")
    rows.append(f"| **GPU: all time rows** | {three([r for r in gpu if timed(r)])}")
    rest = [r for r in gpu if timed(r) and not r["id"].startswith(PERF_TABLES)]
    rows.append(f"| GPU time rows outside TensorRT-LLM's offline perf tables (TL, TR, TQ, TV) | {three(rest)}")
    left_out = set(json.loads(UNSEEN_FILE.read_text())) if UNSEEN_FILE.exists() else set()
    for name, unseen in (("other publications measured", False), ("only its own publication measured", True)):
        mine = [r for r in gpu if timed(r) and r["id"] in held and (r["id"] in left_out) == unseen]
        rows.append(f"| GPU time rows whose stack build {name} | {three(mine)}")
    for name, path in (("device kind", BY_HARDWARE_FILE), ("stack family", BY_STACK_FILE)):
        other = json.loads(path.read_text()) if path.exists() else {}
        mine = [r for r in gpu if timed(r) and other.get(r["id"]) is not None]
        if mine:
            # in-sample and leave-one-out: the rows above
            rows.append(f"| GPU time rows, whole {name} held out{BY_FOLDS_STALE[name]} | {len(mine)} | — | — | "
                        f"{med([other.get(r['id']) for r in mine])} | {cover(mine, other)} |")
    amd = [r for r in gpu if timed(r) and r["hardware"].startswith("mi")]
    rows.append(f"| GPU time rows on AMD MI300X / MI325X / MI355X | {three(amd)}")
    load = [r for r in v["rows"] if r["kind"] == "load"]
    rows.append(f"| GPU served load: MLPerf Server / Interactive (queues, never fitted) | {len(load)} | "
                f"{med([r['error'] for r in load])} | — | — | {cover(load)} |")
    speedups = [r for r in gpu if r["metric"] in ("speedup", "decode_speedup")]
    rows.append(f"| GPU speculative decoding: speedup over plain decoding (never fitted) | {len(speedups)} | "
                f"{med([r['error'] for r in speedups])} | — | — | {cover(speedups)} |")
    for key, name in ENERGY_NAMES.items():
        mine = [r for r in gpu if r["metric"] == key]
        if mine:
            rows.append(f"| GPU energy: {name} | {len(mine)} | {med([r['error'] for r in mine])} | — | — | "
                        f"{cover(mine)} |")
    rows += kept_rows(kept, kept_spec, med, cover)
    for fam, name in PROFILE_FAMILY_NAMES.items():
        fit = (fits or {}).get(fam)
        if fit:
            mine = [r for r in v["rows"] if r["family"] == fam and r["id"] in fit["in_sample_errors"]]
            blind = med([fit["blind_errors"].get(r["id"]) for r in mine])
            rows.append(f"| {name} (before any fit: {blind}) | {three(mine, fit['held_out_errors'])}")
    for fam, name in FAMILY_NAMES.items():
        mine = [r for r in v["rows"] if r["family"] == fam]
        h = list(family_held[fam].values())
        rows.append(f"| {name} | {len(mine)} | {med([r['error'] for r in mine])} | — | {med(h)} ({len(h)} held-out "
                    f"rows) | {cover(mine)} |")
    return "\n".join(rows)


def kept_rows(kept: list[dict] | None, kept_spec: dict | None, med, cover) -> list[str]:
    """The accuracy table's kept-set rows: the time rows of kept.csv and the speculative rows of kept_spec.csv (with
    how many of them the format and model could predict), every error blind."""
    out = []
    if kept:
        mine = [r for r in kept if timed(r)]
        blind = med([r["error"] for r in mine])
        out.append(f"| Kept set: time rows from publications no fit reads (`kept.csv`) | {len(mine)} | {blind} | — | "
                   f"{blind} | {cover(mine, {})} |")
    if kept_spec:
        mine, blind = kept_spec["rows"], med([r["error"] for r in kept_spec["rows"]])
        total = len(mine) + len(kept_spec["skipped"])
        out.append(f"| Kept set: speculative rows (`kept_spec.csv`; {len(mine)} of {total} predictable) | "
                   f"{len(mine)} | {blind} | — | {blind} | {cover(mine, {})} |")
    return out


#: The stack and device table's rows: a label and the stack families (or device ids) of each part it splits into.
STACK_ROWS = (("TensorRT-LLM (incl. NIM, MLPerf)", (("tensorrt-llm",),)), ("vLLM", (("vllm",),)),
              ("SGLang", (("sglang",),)), ("SGLang on ROCm, gfx942 / gfx950", (("sglang-rocm-gfx942",),
                                                                               ("sglang-rocm-gfx950",))),
              ("vLLM on ROCm", (("vllm-rocm-gfx942", "vllm-rocm-gfx950"),)), ("gpt-fast", (("gpt-fast",),)))
DEVICE_ROWS = (("H100", (("h100-sxm",),)), ("H200", (("h200-sxm",),)), ("B200 / GB200", (("b200",), ("gb200",))),
               ("MI300X / MI325X / MI355X", (("mi300x",), ("mi325x",), ("mi355x",))), ("A100", (("a100-sxm-80gb",),)))


def stack_device_table(v: dict, held: dict[str, float]) -> str:
    """Median |error| in-sample and held out by publication of the GPU time rows, per serving stack and device."""
    gpu = [r for r in v["rows"] if r["family"] == "gpu" and timed(r)]

    def cells(key: str, parts: tuple[tuple[str, ...], ...]) -> list[str]:
        groups = [[r for r in gpu if r[key] in part] for part in parts]
        out = [[str(len(g)) for g in groups],
               [f"{np.median(np.abs([r['error'] for r in g])):.0%}" for g in groups],
               [f"{np.median(np.abs([held[r['id']] for r in g if r['id'] in held])):.0%}" for g in groups]]
        return [" / ".join(c) for c in out]
    stacks = [[name, *cells("stack_family", parts)] for name, parts in STACK_ROWS]
    devices = [[name, *cells("hardware", parts)] for name, parts in DEVICE_ROWS]
    devices += [[""] * 4] * (len(stacks) - len(devices))
    lines = ["| serving stack | rows | median abs error | held out | | device | rows | median abs error | held out |",
             "|---|---|---|---|---|---|---|---|---|"]
    return "\n".join(lines + [f"| {' | '.join(a)} | | {' | '.join(b)} |" for a, b in zip(stacks, devices)])


def refresh_readme(heldout: dict[str, float], loo: dict[str, float]) -> None:
    """The README's outputs and its accuracy table (held-out and leave-one-out errors by row id)."""
    readme = (ROOT / "README.md").read_text()
    readme = block_after(readme, "pip install . && roofline spec", sh(*RL, *MAIN_JOB))
    v = json.loads(sh(*RL, "validate", "--json"))
    held = {f: json.loads(sh(*RL, "calibrate", "--family", f, "--json"))["held_out_errors"] for f in FAMILY_NAMES}
    kept = json.loads(sh(*RL, "validate", "--data", str(KEPT_FILE), "--json"))["rows"]
    kept_spec = json.loads(sh(*RL, "validate", "--data", str(KEPT_SPEC_FILE), "--json"))
    table = accuracy_table(v, heldout, held, loo, json.loads(FITS_FILE.read_text()), kept, kept_spec)
    (ROOT / "README.md").write_text(between_markers(readme, table))
    doc = ROOT / "docs" / "validation.md"
    doc.write_text(between_markers(between_markers(doc.read_text(), stack_device_table(v, heldout), "stack table"),
                                   table))


def between_markers(text: str, table: str, name: str = "accuracy table") -> str:
    """Replace what lies between the ``name`` markers."""
    i = text.index(f"<!-- {name}")
    i = text.index("\n", i) + 1
    j = text.index(f"<!-- end {name} -->")
    return text[:i] + table + "\n" + text[j:]


def refresh_examples() -> None:
    doc = (ROOT / "docs" / "examples.md").read_text()
    stage = sh(*RL, *STAGE).splitlines()   # the stage breakdown the README points to: its decode table
    start = next(i for i, line in enumerate(stage) if "decode:" in line)
    doc = block_after(doc, " ".join(["roofline", *STAGE]), "\n".join(stage[start:]))
    for name, marker in EXAMPLES:
        printed = sh(sys.executable, f"examples/{name}.py", env=EXAMPLE_ENV)
        doc = block_at(doc, f"`python examples/{name}.py`", tail_from(printed, marker))
    (ROOT / "docs" / "examples.md").write_text(doc)


def peer_script():
    import importlib.util
    spec = importlib.util.spec_from_file_location("compare_llm_analysis", ROOT / "scripts" / "compare_llm_analysis.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def peer_section(doc: str, peer: dict, heldout: dict[str, float]) -> str:
    """docs/validation.md with its peer table and summary line rebuilt from ``peer`` (compare_llm_analysis's
    output) and the held-out errors."""
    i = doc.index("| row | metric | measured | roofline |")
    j = doc.index("Median absolute error on these")
    table = ["| row | metric | measured | roofline | roofline, left out of the fit | llm-analysis |",
             "|---|---|---|---|---|---|"]
    table += [f"| {r['id']} | {r['metric']} | {r['measured']:.4g} | {r['roofline_error']:+.0%} | "
              f"{heldout.get(r['id'], float('nan')):+.0%} | {r['llm_analysis_error']:+.0%} |" for r in peer["rows"]]
    m = peer["median_abs_error"]
    left = np.median([abs(heldout[r["id"]]) for r in peer["rows"] if r["id"] in heldout])
    k = doc.index("llm-analysis assumes", j)
    return (doc[:i] + "\n".join(table) + "\n\n" + f"Median absolute error on these {len(peer['rows'])} rows: "
            f"roofline {m['roofline']:.0%} (left out: {left:.0%}), llm-analysis {m['llm_analysis']:.0%}. " + doc[k:])


def refresh_peer(heldout: dict[str, float]) -> None:
    """The peer table: llm-analysis run now where it is installed (its predictions saved), else its saved ones."""
    try:
        import llm_analysis  # noqa: F401
    except ImportError:
        print("llm-analysis not installed: its saved predictions fill the peer table")
        script = peer_script()
        peer = script.run(script.saved_predictions())
    else:
        peer = json.loads(sh(sys.executable, "scripts/compare_llm_analysis.py", "--json", "--save"))
    doc = (ROOT / "docs" / "validation.md").read_text()
    (ROOT / "docs" / "validation.md").write_text(peer_section(doc, peer, heldout))


SIZE = ["size", "gpt-oss-120b", "--devices", "b200,h200-sxm,mi300x,groq-lpu,corsair", "--users", "500",
        "--min-tokens-per-s-per-user", "50", "--ttft-ms", "500"]


def refresh_planning() -> None:
    """docs/planning.md: the sizing transcript and the emitted vLLM command of its first B200 option."""
    doc = (ROOT / "docs" / "planning.md").read_text()
    doc = block_after(doc, "--users 500 --min-tokens-per-s-per-user 50 --ttft-ms 500", sh(*RL, *SIZE))
    out = sh(*RL, *SIZE[:3], "b200", *SIZE[4:], "--emit", "vllm").splitlines()
    start = next(i for i, line in enumerate(out) if line.startswith("# b200"))
    end = next((i for i in range(start + 1, len(out)) if not out[i].strip()), len(out))
    i = doc.index("   ```\n   # b200")
    j = doc.index("   ```", i + 6)
    doc = doc[:i] + "   ```\n" + "\n".join("   " + line for line in out[start:end]) + "\n" + doc[j:]
    (ROOT / "docs" / "planning.md").write_text(doc)


def refresh_figures() -> None:
    try:
        sh(*RL, "validate", "--plot", "docs/validation.png")
        sh(*RL, "pareto", "--target", "gpt-oss-120b", "--draft", "gpt-oss-draft-1.6b", "--alpha-by-gamma",
           "5:0.926,40:0.962", "--placement", "disaggregated GPUs: prefill=b200:8, decode=b200:8",
           "--placement", "GPU-only speculation: prefill=b200:8, verify=b200:8, draft=target",
           "--placement", "draft on 2 Corsair: prefill=b200:8, verify=b200:8, draft=corsair:2",
           "--batch", "1,2,4,8,16,32,64,128,256,512,1024,2048,4096", "--gamma", "1..40",
           "--plot", "docs/gimlet_frontier.png")
    except subprocess.CalledProcessError as e:
        print(f"figures not redrawn: {e.stderr.strip()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heldout", action="store_true")
    ap.add_argument("--loo", action="store_true")
    args = ap.parse_args()
    if args.heldout or args.loo:
        fit = json.loads(sh(*RL, "calibrate", *(("--folds", "5", "--jobs", "2") if args.heldout else ()), "--json"))
        if args.heldout:
            (ROOT / "docs" / "heldout_errors.json").write_text(json.dumps(fit["heldout_errors"], indent=1) + "\n")
            UNSEEN_FILE.write_text(json.dumps(fit["heldout_unseen_builds"], indent=1) + "\n")
        (ROOT / "docs" / "loo_errors.json").write_text(json.dumps(fit["loo_approx_errors"], indent=1) + "\n")
    heldout = json.loads((ROOT / "docs" / "heldout_errors.json").read_text())
    loo = json.loads((ROOT / "docs" / "loo_errors.json").read_text())
    refresh_readme(heldout, loo)
    refresh_examples()
    refresh_planning()
    refresh_peer(heldout)
    refresh_figures()
    print("README.md and docs/ refreshed")


if __name__ == "__main__":
    main()
