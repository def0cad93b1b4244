"""Loading spec records from YAML: the shipped database, user files and folders.

Shipped specs live in ``specs/<kind>/*.yaml`` (inside the wheel as ``gpumodel/specs``).
Users add records with :func:`load_gpus` (a file or a folder) or by naming extra spec
folders, laid out like ``specs/`` (``gpus/``, ``arch/``, ``models/``...), in the
environment variable ``GPUMODEL_SPEC_PATH`` (``os.pathsep``-separated). Every record, shipped
or not, goes through the same pydantic validation; YAML is read with a safe loader only (``yaml.safe_load``'s),
so loading never executes anything. Nothing is read at import: catalogs load on first use
and cache.
"""

from __future__ import annotations

import difflib
import os
import re
import threading
from pathlib import Path
from typing import Callable, Generic, Iterable, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

__all__ = [
    "SpecError", "RecordError", "UnknownNameError", "UnknownGPUError", "Catalog", "Record", "spec_roots", "read_yaml",
    "load_records", "ENV_VAR", "normalize_name", "describe_errors", "record_error",
]

ENV_VAR = "GPUMODEL_SPEC_PATH"

T = TypeVar("T", bound=BaseModel)


from ..base.arguments import flag, path_argument  # noqa: E402
from ..base.errors import ArgumentTypeError, RecordError, SpecError, UnknownNameError  # noqa: E402  (re-exported)
from .recordlists import split_record_lists  # noqa: E402


class UnknownGPUError(UnknownNameError):
    """No GPU of that name."""


def shipped_root() -> Path | None:
    """The shipped spec folder: ``gpumodel/specs`` in an installed wheel, ``specs/`` beside the package in a checkout."""
    package = Path(__file__).resolve().parents[1]
    for candidate in (package / "specs", package.parent / "specs"):
        if candidate.is_dir():
            return candidate
    return None


def spec_roots() -> list[Path]:
    """Folders searched for specs, shipped first, then ``GPUMODEL_SPEC_PATH`` entries in order."""
    shipped = shipped_root()
    roots: list[Path] = [shipped] if shipped is not None else []
    for entry in os.environ.get(ENV_VAR, "").split(os.pathsep):
        if entry.strip():
            root = Path(entry).expanduser()
            if not root.is_dir():
                raise SpecError(f"{ENV_VAR} names {entry!r}, which is not a folder; fix or unset the variable")
            roots.append(root)
    return roots


#: libyaml's parser under PyYAML's safe constructor where PyYAML was built with it (``yaml.safe_load``'s
#: semantics, several times faster: the shipped calibration's thousands of points), else the pure-Python one
_FAST_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
#: files longer than this [characters] are searched for long lists of flat records to read line by line
_FAST_LISTS_CHARS = 65536


def read_yaml(path: Path) -> object:
    """Parse one YAML file as ``yaml.safe_load`` does; errors name the file.

    The file is parsed by libyaml where PyYAML has it (``yaml.CSafeLoader``: the same safe constructor, no
    tag that runs code); a file libyaml refuses is parsed again by the pure-Python ``SafeLoader``, so that
    what loads and each error's message are ``yaml.safe_load``'s. Long top-level lists of flat records (a
    calibration's measured points) are read line by line where every line is in the plain form
    ``yaml.safe_dump`` writes (:func:`gpumodel.records.recordlists.split_record_lists`), to the same values.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"{path}: cannot read spec file ({exc.strerror or exc})") from exc
    rest, lists = split_record_lists(text) if len(text) > _FAST_LISTS_CHARS else (text, {})
    try:
        data = yaml.load(rest, Loader=_FAST_SAFE_LOADER)  # a safe loader, C or Python
        if not lists:
            return data
        if isinstance(data, dict) and all(k in data and data[k] is None for k in lists):
            return {k: lists.get(k, v) for k, v in data.items()}
    except yaml.YAMLError:
        pass
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError(f"{path}: not valid YAML: {exc}") from exc


def describe_errors(exc: ValidationError) -> str:
    """Each field a validation refused and why, in one line: ``field 'sm_count': Input should be greater than 0``.

    Errors of the record as a whole (its cross-checks) are under ``'(record)'``.
    """
    parts = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]) or "(record)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field (typo?)"
        elif err["type"] == "value_error":  # a record's own check: its message as written, without pydantic's prefix
            msg = msg.removeprefix("Value error, ")
        parts.append(f"field {field!r}: {msg}")
    return "; ".join(parts)


def record_error(record: str, exc: ValidationError) -> RecordError:
    """The :class:`~gpumodel.base.errors.RecordError` for a record ``record`` that ``exc`` refused.

    The message names each bad field and its problem (:func:`describe_errors`); ``argument`` is the first bad
    field (dotted for a nested one: ``"peaks.fp32"``; None where only the record's cross-checks failed),
    ``value`` the value given for it and ``allowed`` what pydantic says it should be, where it says so.
    """
    first = next((err for err in exc.errors() if err["loc"]), None)
    argument = value = allowed = None
    if first is not None:
        argument = ".".join(str(p) for p in first["loc"])
        value = None if first["type"] == "missing" else first.get("input")
        if first["msg"].startswith("Input should be "):
            allowed = first["msg"].removeprefix("Input should be ")
        cause = (first.get("ctx") or {}).get("error")  # a record's own check raised with what it allows
        if getattr(cause, "allowed", None) is not None:
            allowed = cause.allowed
    return RecordError(f"invalid {record}: {describe_errors(exc)}", argument=argument, value=value, allowed=allowed)


class Record(BaseModel):
    """Base class of the spec records (:class:`~gpumodel.records.gpu.GPUSpec`,
    :class:`~gpumodel.records.transformer.TransformerConfig`, ...).

    Building a record in code with an invalid or missing field raises a
    :class:`~gpumodel.base.errors.RecordError` naming each bad field, rather than pydantic's
    ``ValidationError``. ``model_validate``, which the spec loaders call, is pydantic's own and
    raises ``ValidationError`` (:func:`load_records` turns it into a :class:`SpecError` naming the file).

    Examples
    --------
    >>> import gpumodel as gm
    >>> try:
    ...     gm.TransformerConfig(hidden_size=64, num_layers=0, num_heads=4, intermediate_size=64, vocab_size=100)
    ... except gm.RecordError as exc:
    ...     print(exc.argument, exc.value, "|", exc)
    num_layers 0 | invalid TransformerConfig: field 'num_layers': Input should be greater than 0
    """

    def __init__(self, /, **data: object) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise record_error(type(self).__name__, exc) from None

    # marks this __init__ as pydantic's own, so that model_validate (and nested records) do not call it
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]


def load_records(path: Path, model: type[T]) -> list[T]:
    """Validate every record in one YAML file (a mapping, or a list of mappings) as ``model``."""
    data = read_yaml(path)
    if data is None or data == []:
        raise SpecError(f"{path}: the file is empty (no records); write a record as a mapping of fields, or a list "
                        "of them", argument="path", value=str(path), allowed="a YAML file of one or more records")
    items = data if isinstance(data, list) else [data]
    records = []
    for index, item in enumerate(items):
        label = f"record {index}"
        if not isinstance(item, dict):
            raise SpecError(f"{path}: {label} is a {type(item).__name__}, expected a mapping of fields")
        if isinstance(item.get("name"), str):
            label = f"record {item['name']!r}"
        try:
            records.append(model.model_validate(item, context={"units_required": True}))
        except ValidationError as exc:
            first = record_error(label, exc)  # the first bad field, its value and what is allowed
            raise SpecError(f"{path}: {label}: {describe_errors(exc)}", argument=first.argument, value=first.value,
                            allowed=first.allowed) from None
    return records


def normalize_name(name: str) -> str:
    """Lower-case and fold spaces, underscores and slashes to dashes: 'H100 SXM5' -> 'h100-sxm5'."""
    return re.sub(r"[\s_/]+", "-", str(name).strip().lower())


class Catalog(Generic[T]):
    """A lazily loaded, cached set of named records of one kind (``gpus``, ``arch``, ``models``...).

    Parameters
    ----------
    kind : str
        Sub-folder of each spec root.
    model : type
        The pydantic record class.
    key : callable
        Record -> canonical name.
    aliases : callable
        Record -> extra names it answers to.
    error : type
        The :class:`UnknownNameError` subclass raised for an unknown name.
    label : str, optional
        What one record is called in error messages (default: ``kind`` without its plural ``s``).
    """

    def __init__(self, kind: str, model: type[T], key: Callable[[T], str] = lambda r: r.name,
                 aliases: Callable[[T], Iterable[str]] = lambda r: getattr(r, "aliases", ()),
                 error: type[UnknownNameError] = UnknownNameError, label: str | None = None):
        self.kind, self.model, self._key, self._aliases, self._error = kind, model, key, aliases, error
        self.label = label or kind.rstrip("s")
        self._records: dict[str, T] | None = None
        self._index: dict[str, str] = {}
        self._origin: dict[str, Path] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ loading
    def _ensure(self) -> dict[str, T]:
        if self._records is None:
            with self._lock:
                if self._records is None:
                    self._records, self._index, self._origin = {}, {}, {}
                    for root in spec_roots():
                        folder = root / self.kind
                        if folder.is_dir():
                            self._add_paths(sorted(folder.glob("*.yaml")) + sorted(folder.glob("*.yml")), replace=False)
        return self._records

    def _add_paths(self, paths: Iterable[Path], replace: bool) -> list[T]:
        """Validate every record of every path first, then add them all: a bad file adds nothing."""
        assert self._records is not None
        staged = [(record, path) for path in paths for record in load_records(path, self.model)]
        records, index, origin = dict(self._records), dict(self._index), dict(self._origin)
        try:
            for record, path in staged:
                self._add(record, path, replace)
        except SpecError:
            self._records, self._index, self._origin = records, index, origin
            raise
        return [record for record, _ in staged]

    def _add(self, record: T, path: Path, replace: bool) -> None:
        assert self._records is not None
        name = self._key(record)
        if name in self._records and not replace:
            raise SpecError(f"{path}: record {name!r} duplicates the one in {self._origin[name]}; "
                            "pass replace=True to override it")
        names = [name, *self._aliases(record)]
        for alias in names:
            key = normalize_name(alias)
            owner = self._index.get(key)
            if owner is not None and owner != name and not replace:
                raise SpecError(f"{path}: record {name!r}: alias {alias!r} already names {owner!r}")
            self._index[key] = name
        self._records[name] = record
        self._origin[name] = Path(path)

    def load(self, path: str | os.PathLike, replace: bool = False) -> list[T]:
        """Validate and add the records of a YAML file or of every ``*.yaml`` in a folder.

        All or nothing: if any record of any file is invalid or clashes with a known name, nothing is added.
        """
        replace = flag(replace, "replace")
        path = path_argument(path, "path").expanduser()
        self._ensure()
        if path.is_dir():
            paths = sorted(path.glob("*.yaml")) + sorted(path.glob("*.yml"))
            if not paths:
                raise SpecError(f"{path}: folder holds no *.yaml files")
        elif path.is_file():
            paths = [path]
        else:
            raise SpecError(f"{path}: no such file or folder")
        with self._lock:
            return self._add_paths(paths, replace)

    def reset(self) -> None:
        """Forget everything loaded; the next lookup reads the spec folders again."""
        with self._lock:
            self._records = None

    # ------------------------------------------------------------------ lookup
    def names(self) -> list[str]:
        return sorted(self._ensure())

    def records(self) -> list[T]:
        recs = self._ensure()
        return [recs[n] for n in sorted(recs)]

    def origin(self, name: str) -> Path:
        """The file a record was loaded from."""
        name = self._resolve(name)  # loads the catalog on first use
        return self._origin[name]

    def _resolve(self, name: str) -> str:
        records = self._ensure()
        key = normalize_name(name)
        if key in self._index:
            return self._index[key]
        compact = key.replace("-", "")
        for alias, owner in self._index.items():
            if alias.replace("-", "") == compact:
                return owner
        suggestions = self.close_names(name)
        allowed = ", ".join(repr(s) for s in suggestions) if suggestions else ", ".join(sorted(records))
        hint = f"did you mean {allowed}?" if suggestions else f"known: {allowed}"
        raise self._error(f"no {self.label} named {name!r}; {hint}", argument=self.label, value=name, allowed=allowed)

    def close_names(self, name: str, n: int = 4) -> list[str]:
        """The names of at most ``n`` records whose name or an alias is close to ``name`` (closest first).

        The suggestions of the unknown-name error; empty when nothing is close.
        """
        self._ensure()
        key = normalize_name(name)
        close = difflib.get_close_matches(key, list(self._index), n=8, cutoff=0.5)
        close += [a for a in self._index if key and (a.startswith(key) or key in a)]
        return list(dict.fromkeys(self._index[a] for a in close))[:n]

    def get(self, name: str) -> T:
        if isinstance(name, self.model):
            return name
        if not isinstance(name, str):
            raise ArgumentTypeError(f"expected a {self.label} name (str) or record, got {type(name).__name__}",
                                    argument=self.label, value=name,
                                    allowed=f"a {self.label} name (str) or {self.model.__name__}")
        return self._ensure()[self._resolve(name)]

    def __contains__(self, name: str) -> bool:
        try:
            self._resolve(name)
            return True
        except UnknownNameError:
            return False
