"""The pages' forms: their fields, the values a URL query gives them, and the errors shown beside each field.

A page's inputs live in the URL query (``/plan?model=llama-3-8b&gpus=8-64``), so that an answer is a link to
share. Every value arrives as text; :func:`count`, :func:`number`, :func:`seconds` and :func:`gpu_counts` read
it with the package's own readers (:mod:`gpumodel.base.readable`), whose
:class:`~gpumodel.base.errors.ArgumentError` names the field. An error the library raises further in names
its own argument (``seq_len``, ``gpu_or_system``); :meth:`Form.field_for` maps it to the field it came from,
and :func:`blame` ties any error raised in a block to one field (a model that does not resolve, a GPU name).

Examples
--------
>>> form = Form("demo", (Field("seq", "sequence", "4096", arguments=("seq_len",)),))
>>> form.values({"seq": " 8Ki ", "other": "x"})
{'seq': '8Ki'}
>>> count(form.values({"seq": "8Ki"}), "seq")
8192
>>> form.field_for("seq_len")
'seq'
>>> gpu_counts("8-64")
[8, 16, 32, 64]
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from ..base import readable
from ..base.errors import ArgumentError, GpumodelError

__all__ = ["Field", "Form", "FieldError", "blame", "count", "number", "seconds", "optional", "gpu_counts",
           "read_config", "compact", "CONFIG_LIMIT"]

#: The longest uploaded ``config.json`` kept in a URL [characters of compact JSON] (a Hugging Face config is
#: 1-3 thousand; browsers and servers take URLs of 8 thousand and more).
CONFIG_LIMIT = 6000
#: Keys of a Hugging Face config that describe no size (labels of classification heads, task presets): left out
#: of the URL.
_BULKY_KEYS = ("id2label", "label2id", "task_specific_params", "auto_map")


@dataclass(frozen=True)
class Field:
    """One input of a form.

    Attributes
    ----------
    name : str
        The query key (``seq``).
    label : str
        What the page shows above the input.
    default : str
        The value of an empty or missing query key.
    help : str
        One line under the input: units, accepted forms.
    choices : tuple of str
        A drop-down of exactly these values (empty: free text).
    suggestions : tuple of str
        Values the free-text input proposes (a ``datalist``), e.g. the model presets.
    arguments : tuple of str
        The library's argument names whose errors belong beside this field (``seq_len``).
    """

    name: str
    label: str
    default: str = ""
    help: str = ""
    choices: tuple = ()
    suggestions: tuple = ()
    arguments: tuple = ()


@dataclass(frozen=True)
class Form:
    """The inputs of one page, in the order shown."""

    page: str
    fields: tuple = field(default_factory=tuple)

    def values(self, query: Mapping[str, str]) -> dict[str, str]:
        """The text of each field: the query's value stripped, or the field's default where it is empty.

        Keys of the query that are no field are left out.
        """
        out = {}
        for f in self.fields:
            text = str(query.get(f.name, "") or "").strip()
            out[f.name] = text if text else f.default
        return out

    def field_for(self, argument: str | None) -> str | None:
        """The field an error about the library's ``argument`` belongs beside (None: no field; shown on top)."""
        if not argument:
            return None
        key = str(argument).lstrip("-").replace("-", "_")
        for f in self.fields:
            if key == f.name or key in f.arguments:
                return f.name
        return None


class FieldError(Exception):
    """An error of the library tied to one field of a form (see :func:`blame`)."""

    def __init__(self, field_name: str, error: GpumodelError):
        super().__init__(str(error))
        self.field = field_name
        self.error = error


@contextlib.contextmanager
def blame(field_name: str) -> Iterator[None]:
    """Tie every :class:`~gpumodel.base.errors.GpumodelError` raised in the block to ``field_name``.

    >>> try:
    ...     with blame("gpu"):
    ...         raise ArgumentError("no such GPU", argument="gpu_name")
    ... except FieldError as exc:
    ...     exc.field, str(exc)
    ('gpu', 'no such GPU')
    """
    try:
        yield
    except GpumodelError as exc:
        raise FieldError(field_name, exc) from exc


def count(values: Mapping[str, str], name: str, minimum: int = 1) -> int:
    """The field ``name`` read as a whole count >= ``minimum`` (``4096``, ``8Ki``, ``1T``)."""
    return readable.parse_count(values[name], name, minimum=minimum)


def number(values: Mapping[str, str], name: str, minimum: float = 0.0) -> float:
    """The field ``name`` read as a plain finite number >= ``minimum``."""
    return readable.parse_number(values[name], name, minimum=minimum)


def seconds(values: Mapping[str, str], name: str) -> float:
    """The field ``name`` read as a duration [s] (``50ms``, ``1s``, ``0.2``)."""
    return readable.parse_seconds(values[name], name)


def optional(values: Mapping[str, str], name: str) -> str | None:
    """The field's text, or None where it is empty or ``none``."""
    text = values.get(name, "")
    return None if text.lower() in ("", "none", "-") else text


def gpu_counts(text: str, name: str = "gpus") -> list[int]:
    """The GPU counts a field names, to plan each of them.

    ``"64"`` is 64 alone; ``"8-64"`` the powers of two from 8 to 64 and both ends (as ``gpumodel plan
    --max-gpus`` searches from 1; ``"-64"`` is ``"1-64"``); and as ``gpumodel plan --gpus`` reads them,
    ``"8,24,64"`` those counts and ``"64:512:64"`` every 64 GPUs from 64 to 512.

    >>> gpu_counts("64"), gpu_counts("6-40"), gpu_counts("8, 24"), gpu_counts("64:256:64")
    ([64], [6, 8, 16, 32, 40], [8, 24], [64, 128, 192, 256])
    """
    text = text.replace(" ", "").replace("..", "-")
    allowed = "a count (64), a range (8-64: powers of two), counts (8,24,64) or START:STOP:STEP (64:512:64)"
    if ":" in text:
        parts = [readable.parse_count(t, name, minimum=1) for t in text.split(":")]
        if len(parts) != 3 or parts[1] < parts[0]:
            raise ArgumentError(f"{name}={text!r}: give START:STOP:STEP with START <= STOP, e.g. 64:512:64",
                                argument=name, value=text, allowed=allowed)
        return list(range(parts[0], parts[1] + 1, parts[2]))
    if "-" not in text:
        return sorted({readable.parse_count(t, name, minimum=1) for t in text.split(",")})
    low, _, high = text.partition("-")
    least = readable.parse_count(low, name, minimum=1) if low else 1
    most = readable.parse_count(high, name, minimum=1)
    if least > most:
        raise ArgumentError(f"{name}={text!r}: the range runs from the smaller count to the larger, e.g. 8-64",
                            argument=name, value=text, allowed=allowed)
    return sorted({least, most} | {2 ** k for k in range(most.bit_length()) if least <= 2 ** k <= most})


def read_config(text: str | bytes, name: str = "config") -> dict:
    """A Hugging Face ``config.json``'s text as a dict, without the keys that describe no size.

    Raises an :class:`~gpumodel.base.errors.ArgumentError` naming ``name`` where the text is no JSON object or
    is too long to keep in a link (:data:`CONFIG_LIMIT`).
    """
    try:
        data = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ArgumentError(f"{name}: not a JSON file ({exc})", argument=name, value=None,
                            allowed="a Hugging Face config.json") from None
    if not isinstance(data, dict):
        raise ArgumentError(f"{name}: a config.json holds one JSON object, got {type(data).__name__}", argument=name,
                            value=None, allowed="a Hugging Face config.json")
    data = {k: v for k, v in data.items() if k not in _BULKY_KEYS}
    if len(compact(data)) > CONFIG_LIMIT:
        raise ArgumentError(f"{name}: the config is over {CONFIG_LIMIT:,} characters, too long for a link",
                            argument=name, value=None, allowed=f"a config.json of at most {CONFIG_LIMIT:,} characters")
    return data


def compact(data: Any) -> str:
    """``data`` as JSON without spaces (the form a link carries)."""
    return json.dumps(data, separators=(",", ":"), sort_keys=True)
