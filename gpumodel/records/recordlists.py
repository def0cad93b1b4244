"""A fast path for YAML files that hold long lists of flat records (a calibration's measured points).

PyYAML's safe constructor builds every scalar node in Python: the shipped calibration's 2,605 points
(13,000 lines) take about 0.4 s to load, which is most of a cold start of the layout planner. The
points are written by ``yaml.safe_dump`` in one plain form::

    points:
    - op: matmul
      dtype: bf16
      shape: {m: 128.0, n: 128.0, k: 128.0}
      time_s: 6.496e-06

:func:`split_record_lists` reads such top-level lists line by line (about 20 times faster) and leaves
the rest of the document to PyYAML. It accepts only what it can read exactly as ``yaml.safe_load``
does: plain scalars that PyYAML resolves to a string, a decimal integer, a float, a boolean or null,
and flow mappings of them; anything else (quotes, comments, anchors, nested blocks, another tag) makes
it give up on that list, which PyYAML then reads. ``tests/test_specs_loading.py`` checks the result
against ``yaml.safe_load`` on the shipped files.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

__all__ = ["split_record_lists", "plain_scalar"]

#: PyYAML's implicit resolvers (what tag a plain scalar gets), keyed by first character
_RESOLVERS = yaml.SafeLoader.yaml_implicit_resolvers
_KEY = r"[A-Za-z_][A-Za-z0-9_]*"
_ENTRY = re.compile(rf"^(- |  )({_KEY}): (.+)$")
_TOP_KEY = re.compile(rf"^({_KEY}):\s*$")
_INT = re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$")
_FLOAT = re.compile(r"^[-+]?(?:[0-9]+\.[0-9]*(?:[eE][-+][0-9]+)?|\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")
_BOOLS = yaml.constructor.SafeConstructor.bool_values
_PLAIN_STR = re.compile(r"^[A-Za-z_][A-Za-z0-9_.+\-/]*$")


class _Unreadable(Exception):
    """A line the fast path does not read exactly as PyYAML; the caller hands the list to PyYAML."""


def plain_scalar(text: str) -> Any:
    """The value ``yaml.safe_load`` gives a plain scalar ``text``, for the forms read here; else raises.

    >>> plain_scalar("6.496e-06"), plain_scalar("128.0"), plain_scalar("true"), plain_scalar("bf16")
    (6.496e-06, 128.0, True, 'bf16')
    """
    tag = "tag:yaml.org,2002:str"
    for candidate, pattern in _RESOLVERS.get(text[:1], []) + _RESOLVERS.get(None, []):
        if pattern.match(text):
            tag = candidate
            break
    kind = tag.rsplit(":", 1)[-1]
    if kind == "float" and _FLOAT.match(text):
        return float(text.replace(".inf", "inf").replace(".Inf", "inf").replace(".INF", "inf")
                     .replace(".nan", "nan").replace(".NaN", "nan").replace(".NAN", "nan"))
    if kind == "int" and _INT.match(text):
        return int(text)
    if kind == "bool":
        return _BOOLS[text.lower()]
    if kind == "null" and text in ("null", "Null", "NULL", "~"):
        return None
    if kind == "str" and _PLAIN_STR.match(text):
        return text
    raise _Unreadable(text)


def _value(text: str) -> Any:
    if text.startswith("{"):
        if not text.endswith("}"):
            raise _Unreadable(text)
        inner = text[1:-1].strip()
        out = {}
        for item in (inner.split(", ") if inner else []):
            key, sep, value = item.partition(": ")
            if not sep or not re.fullmatch(_KEY, key) or key in out:
                raise _Unreadable(item)
            out[key] = plain_scalar(value)
        return out
    return plain_scalar(text)


def _records(lines: list[str]) -> list[dict]:
    records: list[dict] = []
    seen: dict[str, Any] = {}       # values recur (dtypes, op names, sizes): each text read once
    match = _ENTRY.match
    for line in lines:
        m = match(line)
        if m is None:
            raise _Unreadable(line)
        lead, key, value = m.groups()
        if lead == "- ":
            records.append({})
        elif not records or key in records[-1]:
            raise _Unreadable(line)
        if value not in seen:
            seen[value] = _value(value)
        v = seen[value]
        records[-1][key] = dict(v) if isinstance(v, dict) else v
    return records


def split_record_lists(text: str, min_lines: int = 200) -> tuple[str, dict[str, list]]:
    """The document without its long top-level lists of flat records, and those lists read.

    Parameters
    ----------
    text : str
        A YAML document whose top level is a mapping.
    min_lines : int
        Lists shorter than this stay in the document (PyYAML reads them fast enough).

    Returns
    -------
    (str, dict)
        The rest of the document (for PyYAML; each list read here leaves its key, empty) and
        ``{key: list of dicts}`` for each list read here; a list with any line the fast path cannot read
        exactly stays in the document.

    Examples
    --------
    >>> rest, lists = split_record_lists("a: 1\\npoints:\\n- op: mm\\n  t: 1.0e-06\\nb: x\\n", min_lines=1)
    >>> rest, lists
    ('a: 1\\npoints:\\nb: x\\n', {'points': [{'op': 'mm', 't': 1e-06}]})
    """
    if text.startswith(("---", "%")) or "\n---" in text or "\n..." in text:
        return text, {}
    lines = text.split("\n")
    keep: list[str] = []
    lists: dict[str, list] = {}
    i = 0
    while i < len(lines):
        m = _TOP_KEY.match(lines[i])
        j = i + 1
        while m and j < len(lines) and lines[j].startswith(("- ", "  ")):
            j += 1
        if m and j - i - 1 >= min_lines and m.group(1) not in lists:
            try:
                lists[m.group(1)] = _records(lines[i + 1:j])
                keep.append(lines[i])         # the key stays, empty (null), where the list was
                i = j
                continue
            except _Unreadable:
                pass
        keep.append(lines[i])
        i += 1
    return "\n".join(keep), lists
