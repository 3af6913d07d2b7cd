"""The door into the serving layer: :func:`evaluate_serving`, :func:`speculative_round`, :func:`sweep`,
:func:`deployment`, :func:`serve_at_rate` and :func:`max_rate` taking their models, device groups and links by
name (:func:`roofline.api.named_door` resolves them); the functions of :mod:`roofline.serving` below take the
records. Imported on first use: ``import roofline`` does not build the serving layer.
"""

from __future__ import annotations

from .api import named_door
from .serving import load, serve, speculation
from .serving import sweep as sweeping

evaluate_serving = named_door(serve.evaluate_serving, "model")
speculative_round = named_door(speculation.speculative_round, "target", "draft", "verify_on", "draft_on", "link")
sweep = named_door(sweeping.sweep, "model", "devices")
deployment = named_door(load.deployment, "model")
serve_at_rate = named_door(load.serve_at_rate, "model")
max_rate = named_door(load.max_rate, "model")

__all__ = ["deployment", "evaluate_serving", "max_rate", "serve_at_rate", "speculative_round", "sweep"]
