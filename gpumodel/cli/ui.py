"""``gpumodel ui [--port 8765] [--host 127.0.0.1]``: the web page of plan, fit and serve answers (the ``ui`` extra).

The page runs on this machine and needs no network: ``pip install "gpumodel[ui]"`` brings Starlette, uvicorn and
matplotlib. Every answer's inputs are in its link.
"""

from __future__ import annotations

import argparse

from ._common import HelpFormatter

EPILOG = """\
Pages: /plan (the ranked parallel layouts of a training run, their time against the GPU count and the cost
front), /fit (a run's memory per GPU against the card, the largest batch and sequence that fit), /serve
(throughput against concurrency within latency targets, and the GPUs a traffic level needs). A model is a
preset or an uploaded Hugging Face config.json. Ctrl+C stops the server.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ui", help="a local web page: plan, fit and serve answers with charts (extra: gpumodel[ui])",
                       epilog=EPILOG, formatter_class=HelpFormatter)
    p.add_argument("--port", type=int, default=8765, help="TCP port to listen on")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (127.0.0.1: this machine only; 0.0.0.0: every interface)")
    p.set_defaults(func=_ui)


def _ui(args: argparse.Namespace) -> int:
    from ..ui.app import require, serve

    require()
    serve(args.host, args.port, announce=lambda url: print(f"gpumodel ui: {url} (Ctrl+C stops it)", flush=True))
    return 0
