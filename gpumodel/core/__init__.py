"""The pure functions: numbers and records in, numbers or small frozen results out, broadcasting over arrays.

Op costs (:mod:`~gpumodel.core.opcost`, :mod:`~gpumodel.core.ops` with :mod:`~gpumodel.core.attention_ops`,
:mod:`~gpumodel.core.row_ops`, :mod:`~gpumodel.core.step_ops`), the roofline (:mod:`~gpumodel.core.roofline`),
occupancy (:mod:`~gpumodel.core.occupancy`, :mod:`~gpumodel.core.occupancy_helpers`, :mod:`~gpumodel.core.warps`),
memory (:mod:`~gpumodel.core.memory`, :mod:`~gpumodel.core.activations`, :mod:`~gpumodel.core.inference`), sizing
(:mod:`~gpumodel.core.margin`: does it fit, by how much; :mod:`~gpumodel.core.sizing`) and GPU comparison (:mod:`~gpumodel.core.comparison`).
"""
