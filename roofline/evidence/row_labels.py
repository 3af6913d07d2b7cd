"""What a measured row is, read from its own columns: the kind of figure it tests and the serving stack's version
(used by ``roofline validate`` to report errors apart by kind and by stack version)."""

from __future__ import annotations

import re
from typing import Protocol


class RowLike(Protocol):
    """A measured row as these functions read it: its columns by name."""

    def get(self, key: str) -> str: ...


#: Metrics of energy (reported apart from time: a different model with different errors).
ENERGY_METRICS = ("energy_per_token_j", "power_w")


def row_kind(row: RowLike) -> str:
    """What a row tests: ``energy``, ``load`` (a latency-bound load: MLPerf Server and Interactive, predicted by
    the queues), ``spec`` (a speculative setup's time or speedup: the draft, the verify pass and the measured
    acceptance, reported apart from plain decoding) or ``time`` (a stated batch or concurrency, or the largest
    that fits)."""
    if row.get("metric") in ENERGY_METRICS:
        return "energy"
    if row.get("batch") == "slo":
        return "load"
    return "spec" if (row.get("spec_method") or "none") != "none" else "time"


_VERSION = re.compile(r"(?<![\w.])v?(\d+\.\d+(?:\.\d+){0,2}(?:[.-]?(?:post|rc|dev|a|b)\d*)?)", re.IGNORECASE)
_ENGINE = re.compile(r"(?:vllm|sglang|tensorrt-llm|trt-llm|tensorrt|nim|habana|neuron sdk|jetstream|gaudi software)\s+",
                     re.IGNORECASE)


def stack_version(row: RowLike) -> str:
    """The serving stack's version a row was measured with: its ``stack_version`` column, else the first version
    number its ``stack`` names, an engine's before any other ("vLLM 0.13.0" -> "0.13.0", "TensorRT-LLM v0.17 (...)"
    -> "0.17", "MLPerf v5.1 AMD vLLM 0.9.0.2" -> "0.9.0.2"); "" when neither gives one."""
    given = row.get("stack_version").strip()
    if given:
        return given
    stack = row.get("stack")
    engines = list(_ENGINE.finditer(stack))   # "MLPerf v5.1 AMD vLLM 0.9.0.2": the engine's, not the round's
    for engine in engines:
        if m := _VERSION.match(stack, engine.end()):
            return m.group(1)
    m = None if engines else _VERSION.search(stack)
    return m.group(1) if m else ""
