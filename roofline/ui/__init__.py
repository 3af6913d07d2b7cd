"""Layer 5, ui: the ``roofline`` command (parsing and rendering only), tables, JSON, CSV and plots.

May import every layer below; nothing below imports it.
"""
