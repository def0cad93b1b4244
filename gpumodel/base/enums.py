"""The base of the package's named choices: enums whose members are the strings users type."""

from __future__ import annotations

import enum

__all__ = ["StrEnum"]


class StrEnum(str, enum.Enum):
    """An enum of strings whose ``str()`` (and so f-strings) is the member's value.

    What :class:`enum.StrEnum` gives from Python 3.11, here for 3.10 too. A member equals its value,
    so it passes wherever the string does.

    Examples
    --------
    >>> class Color(StrEnum):
    ...     RED = "red"
    >>> str(Color.RED), f"{Color.RED}", Color.RED == "red", Color("red")
    ('red', 'red', True, <Color.RED: 'red'>)
    """

    def __str__(self) -> str:
        return self.value
