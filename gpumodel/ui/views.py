"""A page from its URL query: the form, the library's answer or its error beside the field at fault.

:func:`render` and :func:`upload` are plain functions of text (no web framework), which the app
(:mod:`gpumodel.ui.app`) calls from its routes. Nothing a user types stops the server: a
:class:`~gpumodel.base.errors.GpumodelError` is shown beside its field (or above the form when it concerns
none), anything else as an internal error on the page (status 500) and in the server's log.

Examples
--------
>>> status, body = render("fit", {"batch": "0"})
>>> status, 'id="field-batch"' in body, "must be &gt;= 1" in body
(400, True, True)
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from types import ModuleType
from typing import Mapping
from urllib.parse import parse_qsl, urlencode

from ..base.errors import ArgumentError, GpumodelError
from . import fit, plan, serve
from .forms import FieldError, compact, read_config
from .page import PAGES, document, esc, form_block, message, upload_block

__all__ = ["render", "upload", "compute", "warm_up", "VIEWS", "Outcome", "UPLOAD_LIMIT"]

#: page name -> its module (``form()`` and ``answer(values, config)``)
VIEWS: dict[str, ModuleType] = {"plan": plan, "fit": fit, "serve": serve}

#: One answer at a time: matplotlib, the warning filters and the library's caches are shared by the threads
#: that serve requests; a local page has one user, so answers wait for each other instead.
_COMPUTE = threading.Lock()
_LOG = logging.getLogger("gpumodel.ui")
#: The largest upload read [bytes]: a Hugging Face config.json is a few kilobytes.
UPLOAD_LIMIT = 1 << 20


class Outcome(dict):
    """What :func:`compute` found: ``status``, ``html`` (the answer), ``errors`` (field -> text), ``general``
    (errors of no field), ``numbers`` (the answer's objects, for tests), ``seconds``."""


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def compute(page: str, query: Mapping[str, str]) -> Outcome:
    """The answer of ``page`` to ``query``, or the errors that stopped it (never raises for a user's input)."""
    view = VIEWS[page]
    values = view.form().values(query)
    out = Outcome(status=200, html="", errors={}, general=[], numbers={}, notes=[], seconds=0.0)
    t0 = time.perf_counter()
    with _COMPUTE, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            config = read_config(query["config"]) if query.get("config") else None
            out["html"], out["numbers"] = view.answer(values, config)
        except FieldError as exc:
            out.update(status=400)
            out["errors"][exc.field] = _describe(exc.error)
        except GpumodelError as exc:
            out.update(status=400)
            where = view.form().field_for(exc.argument)
            if where is None:
                out["general"].append(_describe(exc))
            else:
                out["errors"][where] = _describe(exc)
        except Exception as exc:  # a bug: shown, logged, and the server goes on
            _LOG.exception("internal error on /%s?%s", page, urlencode(dict(query)))
            out.update(status=500)
            out["general"].append(f"internal error ({_describe(exc)}): a bug in gpumodel; please report it with "
                                  "this page's link")
    out["notes"] = list(dict.fromkeys(" ".join(str(w.message).split()) for w in caught))
    out["seconds"] = time.perf_counter() - t0
    return out


def render(page: str, query: Mapping[str, str], errors: Mapping[str, str] | None = None) -> tuple[int, str]:
    """The status and HTML of ``page`` for ``query`` (``errors``: shown without computing, e.g. a bad upload)."""
    view = VIEWS[page]
    query = {k: v for k, v in dict(query).items() if isinstance(v, str)}
    form = view.form()
    values = form.values(query)
    if errors:
        out = Outcome(status=400, html="", errors=dict(errors), general=[], notes=[])
    else:
        out = compute(page, query)
    hidden, locked = {}, {}
    if query.get("config") and "model" not in out["errors"]:
        hidden["config"] = query["config"]
        name = out.get("numbers", {}).get("model_name") or "an uploaded config.json"
        drop = urlencode({k: v for k, v in query.items() if k != "config"})
        locked["model"] = (f'<input id="f-model" value="{esc(name)}" disabled><small>from config.json; '
                           f'<a href="/{page}?{esc(drop)}">use a preset</a></small>')
    elif query.get("config"):
        hidden["config"] = query["config"]
    title, lead = next((t, lead) for p, t, lead in PAGES if p == page)
    body = [f'<p class="lead">{esc(title)}: {esc(lead)}. Every input is in the link: share it.</p>',
            "".join(message(g, "bad", "error") for g in out["general"]),
            form_block(form, values, out["errors"], hidden=hidden, locked=locked), upload_block(page, query),
            out["html"], "".join(message(f"Warning: {n}") for n in out["notes"])]
    return out["status"], document(title, page, "".join(body))


def upload(page: str, query_text: str, data: bytes | None) -> tuple[int, str | None, str | None]:
    """An uploaded ``config.json``: ``(303, location, None)`` to the page with the config in its link, or
    ``(400, None, html)``: the page with the error beside the model field."""
    page = page if page in VIEWS else "plan"
    query = dict(parse_qsl(query_text or "", keep_blank_values=False))
    query.pop("config", None)
    try:
        if not data:
            raise ArgumentError("choose a config.json file to upload", argument="config")
        if len(data) > UPLOAD_LIMIT:
            raise ArgumentError(f"config: {len(data):,} bytes is no config.json (at most {UPLOAD_LIMIT:,})",
                                argument="config", value=None, allowed=f"at most {UPLOAD_LIMIT:,} bytes")
        config = read_config(data)
    except GpumodelError as exc:
        status, html = render(page, query, errors={"model": _describe(exc)})
        return status, None, html
    return 303, f"/{page}?" + urlencode({**query, "config": compact(config)}), None


def warm_up() -> None:
    """Answer each page's default form once, so that the first request finds the library's caches filled."""
    for page in VIEWS:
        compute(page, {})

