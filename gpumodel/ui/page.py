"""The HTML of the pages: one document shell, the form with its errors beside the fields, tables and facts.

Plain string templates; every value from a user or the library goes through :func:`esc`. The style sheet and
the one script (it shows that an answer is being computed) are inline, so the pages need no network.

Examples
--------
>>> table(["GPUs", "days"], [["8", "12.5"]])
'<table><thead><tr><th>GPUs</th><th>days</th></tr></thead><tbody><tr><td>8</td><td>12.5</td></tr></tbody></table>'
>>> esc("<b>")
'&lt;b&gt;'
"""

from __future__ import annotations

import html
from typing import Iterable, Mapping, Sequence
from urllib.parse import urlencode

from .forms import Form

__all__ = ["PAGES", "document", "form_block", "upload_block", "table", "facts", "esc", "message", "section"]

#: The pages in the order of the navigation bar: (path, title, what it answers).
PAGES = (
    ("plan", "Plan", "how many GPUs, which parallel layout, how many days and what it costs to train"),
    ("fit", "Fit", "whether a training run fits in one GPU's memory, and the largest batch and sequence that do"),
    ("serve", "Serve", "throughput within latency targets, and the GPUs a traffic level needs"),
)

_STYLE = """
:root { --ink:#1d2330; --muted:#5b6474; --line:#d9dee7; --accent:#1f5fbf; --bad:#b3261e; --bg:#f6f7fa; }
* { box-sizing: border-box; }
body { margin:0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color:var(--ink);
       background:var(--bg); }
header { background:#fff; border-bottom:1px solid var(--line); padding:10px 24px; display:flex; gap:24px;
         align-items:baseline; }
header b { font-size:17px; }
nav a { margin-right:18px; color:var(--muted); text-decoration:none; padding-bottom:8px; }
nav a.on { color:var(--accent); border-bottom:2px solid var(--accent); font-weight:600; }
main { padding:16px 24px 40px; max-width:1280px; }
.lead { color:var(--muted); margin:0 0 12px; }
form.inputs { background:#fff; border:1px solid var(--line); border-radius:6px; padding:14px 16px; }
.grid { display:grid; grid-template-columns:repeat(auto-fill, minmax(190px, 1fr)); gap:10px 16px; }
.field label { display:block; font-weight:600; font-size:12px; margin-bottom:2px; }
.field input, .field select { width:100%; padding:5px 7px; border:1px solid #b9c0cc; border-radius:4px;
                              font:inherit; background:#fff; }
.field small { color:var(--muted); font-size:11px; }
.field.bad input, .field.bad select { border-color:var(--bad); background:#fff6f5; }
.field .err { color:var(--bad); font-size:12px; display:block; }
.actions { margin-top:12px; display:flex; gap:12px; align-items:center; }
button { background:var(--accent); color:#fff; border:0; border-radius:4px; padding:7px 18px; font:inherit;
         font-weight:600; cursor:pointer; }
#busy { display:none; color:var(--muted); }
.busy #busy { display:inline; }
.upload { margin-top:8px; color:var(--muted); font-size:12px; }
.box { border-radius:6px; padding:10px 14px; margin:14px 0; }
.box.bad { background:#fdecea; border:1px solid #f2b8b5; color:var(--bad); }
.box.note { background:#fff; border:1px solid var(--line); }
section { margin-top:18px; }
h2 { font-size:16px; margin:0 0 6px; }
.answer { font-size:15px; margin:4px 0 10px; }
table { border-collapse:collapse; background:#fff; border:1px solid var(--line); font-size:13px;
        font-variant-numeric: tabular-nums; }
th, td { padding:4px 9px; border-bottom:1px solid #eceff4; text-align:right; white-space:nowrap; }
th { background:#eef1f6; font-weight:600; }
td:first-child, th:first-child, .t { text-align:left; }
#plan-table tbody tr:first-child td { font-weight:600; }
dl { display:grid; grid-template-columns:max-content auto; gap:2px 14px; margin:0; }
dt { color:var(--muted); } dd { margin:0; }
.chart svg { max-width:100%; height:auto; background:#fff; border:1px solid var(--line); border-radius:6px; }
details { color:var(--muted); font-size:12px; margin-top:6px; }
"""

_SCRIPT = """
document.querySelectorAll("form.inputs").forEach(function (f) {
  f.addEventListener("submit", function () { document.body.classList.add("busy"); });
});
"""


def esc(value: object) -> str:
    """``value`` as text safe inside HTML (quotes too)."""
    return html.escape(str(value), quote=True)


def document(title: str, active: str, body: str) -> str:
    """The whole page: header, navigation (``active`` underlined), ``body`` (HTML)."""
    nav = "".join(f'<a href="/{path}" class="{"on" if path == active else ""}">{esc(name)}</a>'
                  for path, name, _ in PAGES)
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
            f'content="width=device-width, initial-scale=1"><title>{esc(title)} - gpumodel</title>'
            f'<style>{_STYLE}</style></head><body><header><b>gpumodel</b><nav>{nav}</nav></header>'
            f'<main>{body}</main><script>{_SCRIPT}</script></body></html>')


def _control(f, value: str, bad: bool) -> str:
    attrs = f'id="f-{esc(f.name)}" name="{esc(f.name)}"' + (' aria-invalid="true"' if bad else "")
    if f.choices:
        options = "".join(f'<option value="{esc(c)}"{" selected" if c == value else ""}>{esc(c)}</option>'
                          for c in f.choices)
        return f"<select {attrs}>{options}</select>"
    listed = ""
    if f.suggestions:
        listed = f' list="l-{esc(f.name)}"'
    return f'<input {attrs} value="{esc(value)}"{listed} autocomplete="off">'


def form_block(form: Form, values: Mapping[str, str], errors: Mapping[str, str], hidden: Mapping[str, str] = (),
               locked: Mapping[str, str] = (), button: str = "Answer") -> str:
    """The form of a page: one labelled input per field, its error (if any) under it.

    ``hidden`` are carried along unchanged (an uploaded config); ``locked`` fields show a text in place of the
    input (the model named by an uploaded config, with a link that drops it).
    """
    cells, lists = [], []
    for f in form.fields:
        bad = f.name in errors
        if f.name in dict(locked):
            control = dict(locked)[f.name]
        else:
            control = _control(f, values.get(f.name, f.default), bad)
        err = f'<span class="err" role="alert">{esc(errors[f.name])}</span>' if bad else ""
        helptext = f"<small>{esc(f.help)}</small>" if f.help and not bad else ""
        cells.append(f'<div class="field{" bad" if bad else ""}" id="field-{esc(f.name)}"><label for="f-{esc(f.name)}">'
                     f"{esc(f.label)}</label>{control}{err}{helptext}</div>")
        if f.suggestions:
            opts = "".join(f'<option value="{esc(s)}">' for s in f.suggestions)
            lists.append(f'<datalist id="l-{esc(f.name)}">{opts}</datalist>')
    keep = "".join(f'<input type="hidden" name="{esc(k)}" value="{esc(v)}">' for k, v in dict(hidden).items())
    return (f'<form class="inputs" method="get" action="/{esc(form.page)}" id="form-{esc(form.page)}">'
            f'<div class="grid">{"".join(cells)}</div>{keep}{"".join(lists)}<div class="actions">'
            f'<button type="submit" id="submit">{esc(button)}</button><span id="busy">computing the answer...</span>'
            f"</div></form>")


def upload_block(page: str, query: Mapping[str, str]) -> str:
    """A small form that uploads a Hugging Face ``config.json`` in place of a model name (kept in the link)."""
    rest = urlencode({k: v for k, v in query.items() if k not in ("model", "config")})
    return (f'<form class="upload" method="post" action="/config" enctype="multipart/form-data">'
            f'<input type="hidden" name="page" value="{esc(page)}"><input type="hidden" name="query" '
            f'value="{esc(rest)}">Or a Hugging Face <code>config.json</code>: <input type="file" name="config" '
            f'accept=".json,application/json"> <button type="submit">Use it</button></form>')


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], caption: str | None = None,
          table_id: str | None = None) -> str:
    """An HTML table of text cells (escaped): columns of text left, of numbers right (as their first row)."""
    rows = [list(r) for r in rows]
    align = [_align(c) for c in rows[0]] if rows else []
    head = "".join(f"<th{align[i] if i < len(align) else ''}>{esc(h)}</th>" for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(f"<td{align[i] if i < len(align) else ''}>{esc(c)}</td>" for i, c in enumerate(r))
                   + "</tr>" for r in rows)
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    ident = f' id="{esc(table_id)}"' if table_id else ""
    return f"<table{ident}>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _align(cell: object) -> str:
    """Text cells left, numbers (``1,024``, ``-3.5``, ``58.4%``, ``2x64``) right."""
    text = str(cell).strip()
    return "" if not text or text[0] in "0123456789-+.?" else ' class="t"'


def facts(pairs: Iterable[tuple[str, object]]) -> str:
    """A two-column list of ``name: value`` lines."""
    return "<dl>" + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in pairs) + "</dl>"


def message(text: str, kind: str = "note", ident: str | None = None) -> str:
    """A box of text: ``kind`` "bad" (an error) or "note"."""
    attr = f' id="{esc(ident)}"' if ident else ""
    role = ' role="alert"' if kind == "bad" else ""
    return f'<div class="box {esc(kind)}"{attr}{role}>{esc(text)}</div>'


def section(title: str, inner: str, ident: str | None = None) -> str:
    """A titled part of the answer (``inner`` is HTML)."""
    attr = f' id="{esc(ident)}"' if ident else ""
    return f"<section{attr}><h2>{esc(title)}</h2>{inner}</section>"
