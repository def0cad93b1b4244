"""Training at cluster scale: systems, collectives, parallel layouts, step composition, planning.

* :mod:`~gpumodel.records.system` — node and cloud-instance records (``gm.system``, ``gm.list_systems``).
* :mod:`~gpumodel.cluster.collectives` — NCCL ring/tree/hierarchical collective times, nccl-tests busbw.
* :mod:`~gpumodel.cluster.nvls` — NVLink SHARP: NCCL's NVLS and NVLS_TREE, reduced in the NVSwitch.
* :mod:`~gpumodel.cluster.parallelism` — ``gm.Parallelism`` (dp, tp, pp, cp, ep, ZeRO, SP, virtual stages).
* :mod:`~gpumodel.cluster.shard` — one GPU's kernel times on its shard of the model.
* :mod:`~gpumodel.cluster.kernelprice` — many kernels priced in one time estimate per family.
* :mod:`~gpumodel.cluster.step` — the step of a layout (``gm.training_step_time(..., parallelism=)``), composed by
  :mod:`~gpumodel.cluster.composition` from the pipeline's stages, schedule and sends
  (:mod:`~gpumodel.cluster.pipeline`) and the data-parallel reduction and ZeRO gathers
  (:mod:`~gpumodel.cluster.dataparallel`).
* :mod:`~gpumodel.cluster.plan` — ``gm.plan_training``, the vectorised layout search: what each engine runs
  (:mod:`~gpumodel.cluster.plansearch`), the layouts priced at once (:mod:`~gpumodel.cluster.planprice`), the
  ranked table (:mod:`~gpumodel.cluster.planresult`).
* :mod:`~gpumodel.cluster.trainingtime` — ``gm.training_time``: days, GPU-hours, energy, cost.

Multi-GPU times are modelled, not measured here; ``bench/published_runs.py`` checks them against
published runs.
"""
