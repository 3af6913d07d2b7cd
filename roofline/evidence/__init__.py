"""Layer 4, evidence: validation against published measurements, calibration, diagnosis of measured runs.

Imports :mod:`roofline.serving`, :mod:`roofline.physics`, :mod:`roofline.specs`
and the base modules; scipy is imported lazily by the calibration only.
"""
