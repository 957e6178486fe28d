"""Analysis: reading logged runs back (:mod:`~attnsim.analysis.runs`), comparing them side by side
(:mod:`~attnsim.analysis.compare`) and the reproduction report (:mod:`~attnsim.analysis.report`).

Metric keys are read with :class:`attnsim.keys.MetricKey` and tags with :class:`attnsim.keys.Tag`,
in :mod:`~attnsim.analysis.runs` only; the analyses never parse argument lists or print (``attnsim.cli`` does).
"""
