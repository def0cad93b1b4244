"""One GPU's training step as eager PyTorch and Hugging Face run it.

:mod:`~gpumodel.training.layer` (the building blocks of a layer's kernels), :mod:`~gpumodel.training.stepkernels`
(the dense decoder layer), :mod:`~gpumodel.training.moe` (mixture-of-experts and MLA layers),
:mod:`~gpumodel.training.stepplan` (the step as the host dispatches it), :mod:`~gpumodel.training.hostcost` and
:mod:`~gpumodel.training.hostfit` (host costs and their measurement), :mod:`~gpumodel.training.steptime`
(:func:`~gpumodel.training.steptime.single_gpu_step_time`). ``gm.training_step_time``, which also takes parallel
layouts, lives a layer above, in :mod:`gpumodel.cluster.step`.
"""
