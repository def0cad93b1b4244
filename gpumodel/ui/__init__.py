"""A local web page over the public API: ``gpumodel ui`` (the ``ui`` extra: ``pip install "gpumodel[ui]"``).

Three pages, their inputs in the URL query so that an answer is a link to share:

* **Plan** (:mod:`~gpumodel.ui.plan`): the ranked parallel layouts of a training run, and a chart of its time
  against the GPU count with the cost front (:func:`gpumodel.plan_training`);
* **Fit** (:mod:`~gpumodel.ui.fit`): the memory breakdown of a training run against the card, the largest batch
  and sequence that fit (:func:`gpumodel.training_memory`, :func:`gpumodel.max_batch_size`);
* **Serve** (:mod:`~gpumodel.ui.serve`): throughput against concurrency within latency targets, and the GPUs a
  traffic level needs (:func:`gpumodel.serving_capacity`).

The pages are HTML written on the server (:mod:`~gpumodel.ui.page`), the charts SVG drawn there by matplotlib
(:mod:`~gpumodel.ui.charts`); nothing is fetched from the network. :mod:`~gpumodel.ui.views` turns a query into a
page (the library's errors beside the field at fault), :mod:`~gpumodel.ui.app` is the Starlette app and its
uvicorn server. Starlette, uvicorn and matplotlib are imported inside the functions that need them.
"""

from __future__ import annotations

from .app import create_app, serve, url
from .views import compute, render

__all__ = ["create_app", "serve", "url", "render", "compute"]
