"""Layer 2, physics: pure functions on records and broadcasting arrays.

Work counts (FLOP and bytes), memory residency and placement over tiers,
communication, pass timing, the stage functions, the speculative-decoding
closed forms and the power model. Nothing here reads a file, prints or holds
state; names are resolved to records by :mod:`roofline.specs.resolve` at the
public boundary. Imports only :mod:`roofline.specs` and the base modules.
"""
