"""Strict-number checks shared by the specs and the calibration profile: pydantic's lax mode reads
YAML ``true``/``false`` as 1/0, so a boolean where a number belongs (``n_layers: true``,
``nic_efficiency: true``) would silently become a 1-layer model or a 100% efficiency."""
from __future__ import annotations

import numpy as np


def not_a_boolean(value, kind: str = "number"):
    """``value`` unchanged, or ValueError when it is a boolean (for a ``mode="before"`` validator)."""
    if isinstance(value, bool):
        raise ValueError(f"must be {'an' if kind[0] in 'aeiou' else 'a'} {kind}, not a boolean")
    return value


def whole_number(value):
    """``value`` unchanged, or ValueError when it is a boolean or text: lax mode would read tp=True as 1 and
    tp="8" as 8 (the Python API takes numbers; the CLI and the file readers convert their text themselves)."""
    if isinstance(value, str):
        raise ValueError(f"must be an integer, not text (got {value!r:.40})")
    return not_a_boolean(value, "integer")


def strict_number(value, kind: str = "a number"):
    """``value`` unchanged, or ValueError when it is a boolean or text (a quoted ``'1.2'`` is not read as 1.2)."""
    if isinstance(value, str):
        raise ValueError(f"must be {kind}, not text")
    return not_a_boolean(value)


def strict_boolean(value):
    """``value`` unchanged when it is true or false; ValueError for 0/1, 'yes'/'no' and the like, which
    pydantic's lax mode would read as a switch."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"must be true or false (got {value!r:.40})")
    return value
