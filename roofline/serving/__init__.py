"""Layer 3, serving: the speculative round, requests and placements, frontiers, what-ifs.

One speculative round (:mod:`roofline.serving.round`) serves both
``roofline spec`` (:mod:`roofline.serving.speculation`) and request-level
serving (:mod:`roofline.serving.serve`); placements are enumerated in
:mod:`roofline.serving.placements`, Pareto frontiers in
:mod:`roofline.serving.frontier`, what-ifs in :mod:`roofline.serving.whatif`.
Imports only :mod:`roofline.physics`, :mod:`roofline.specs` and the base modules.
"""
