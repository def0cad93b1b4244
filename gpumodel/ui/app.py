"""The web app: Starlette routes over :mod:`gpumodel.ui.views`, served by uvicorn (the ``ui`` extra).

Starlette, uvicorn and python-multipart are imported inside the functions, so that the package imports
without them; :func:`require` says what to install when they are missing.
"""

from __future__ import annotations

import contextlib
import importlib.util
import socket
import threading
from typing import Callable

from ..base.errors import ArgumentError, UnsupportedError
from .views import VIEWS, render, upload, warm_up

__all__ = ["create_app", "serve", "url", "require", "EXTRA"]

#: The modules the ``ui`` extra brings (import name -> distribution).
EXTRA = {"starlette": "starlette", "uvicorn": "uvicorn", "multipart": "python-multipart", "matplotlib": "matplotlib"}


def require() -> None:
    """Raise an :class:`~gpumodel.base.errors.UnsupportedError` naming what to install if a module of the ``ui``
    extra is missing."""
    missing = [dist for module, dist in EXTRA.items() if importlib.util.find_spec(module) is None]
    if missing:
        raise UnsupportedError(f"the web page needs {', '.join(missing)}: pip install \"gpumodel[ui]\"",
                               argument="ui", value=missing, allowed='pip install "gpumodel[ui]"')


def create_app(*, warm: bool = False):
    """The ASGI app: ``/plan``, ``/fit``, ``/serve`` (inputs in the query), ``POST /config`` (an upload).

    Parameters
    ----------
    warm : bool
        Answer each page's default form in a background thread at start-up, so that the first request finds the
        library's caches filled (the command line does; tests leave it off).

    Returns
    -------
    starlette.applications.Starlette
    """
    require()
    from starlette.applications import Starlette
    from starlette.responses import HTMLResponse, RedirectResponse, Response
    from starlette.routing import Route

    def page(name: str) -> Route:
        def endpoint(request):  # a plain function: Starlette runs it in a worker thread
            status, body = render(name, request.query_params)
            return HTMLResponse(body, status_code=status)

        return Route(f"/{name}", endpoint, methods=["GET"], name=name)

    async def config(request):
        form = await request.form()
        sent = form.get("config")
        data = await sent.read() if hasattr(sent, "read") else (sent or "").encode()
        status, location, body = upload(str(form.get("page", "plan")), str(form.get("query", "")), data)
        if location is not None:
            return RedirectResponse(location, status_code=status)
        return HTMLResponse(body, status_code=status)

    async def home(request):
        return RedirectResponse("/plan", status_code=307)

    async def favicon(request):
        return Response(status_code=204)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        if warm:
            threading.Thread(target=warm_up, name="gpumodel-ui-warm-up", daemon=True).start()
        yield

    routes = [Route("/", home), Route("/favicon.ico", favicon), Route("/config", config, methods=["POST"])]
    routes += [page(name) for name in VIEWS]
    return Starlette(routes=routes, lifespan=lifespan)


def url(host: str, port: int) -> str:
    """The page's address for a host and port (IPv6 hosts in brackets; 0.0.0.0 shown as the local host)."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    shown = f"[{shown}]" if ":" in shown else shown
    return f"http://{shown}:{port}/"


def _check_port(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise ArgumentError(f"cannot listen on {host}:{port}: {exc.strerror or exc} (another --port?)",
                                argument="port", value=port, allowed="a free port") from None


def serve(host: str = "127.0.0.1", port: int = 8765, *, announce: Callable[[str], None] | None = None,
          warm: bool = True, log_level: str = "warning") -> None:
    """Serve the pages until interrupted (Ctrl+C).

    Parameters
    ----------
    host : str
        The address to listen on (127.0.0.1: this machine only; 0.0.0.0: every interface).
    port : int
        The TCP port.
    announce : callable, optional
        Called with the page's address once the port is known to be free (the command line prints it).
    warm : bool
        Fill the caches with each page's default answer at start-up (see :func:`create_app`).
    log_level : str
        uvicorn's log level.

    Returns
    -------
    None
    """
    require()
    import uvicorn

    _check_port(host, port)
    app = create_app(warm=warm)
    if announce is not None:
        announce(url(host, port))
    uvicorn.run(app, host=host, port=port, log_level=log_level)
