"""Layer 1, specs: the only layer that reads files.

Devices (``hardware_specs/*.toml``), models (presets and Hugging Face
``config.json``), number formats, links between groups, engine parameters and
calibration profiles, and the one resolver that turns ids, paths and group
strings (``"b200:8"``, ``"corsair:1x2"``) into records. Imports only
:mod:`roofline.errors`, :mod:`roofline.units` and :mod:`roofline.workload`.
"""
