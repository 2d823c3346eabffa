"""The one exception type for bad user input.

Every message names the offending field and the rule it breaks, e.g.
``tp: must divide n_heads (tp=3, n_heads=64)``. The CLI prints it as one ``error:`` line
and exits with code 2.
"""
from __future__ import annotations


class InputError(ValueError):
    """Bad input: ``field`` is the dotted name of what is wrong, ``rule`` says why."""

    def __init__(self, field: str, rule: str, where: str | None = None):
        self.field = field
        self.rule = rule
        self.where = where
        prefix = f"{where}: " if where else ""
        super().__init__(f"{prefix}{field}: {rule}")


class UnknownName(InputError):
    """A catalog name the catalog does not hold (a GPU or model it has no profile for), as opposed
    to a file that is there but broken."""


class NothingUsable(Exception):
    """The inputs were valid but yielded nothing to use (exit code 1, one ``error:`` line)."""


def from_validation_error(exc, prefix: str = "", where: str | None = None) -> InputError:
    """Turn a pydantic ``ValidationError`` into one InputError (its first error):
    ``prefix.field.path: message``."""
    first = exc.errors()[0]
    loc = ".".join(str(p) for p in first.get("loc", ()) if p != "__root__")
    field = ".".join(p for p in (prefix, loc) if p) or prefix or "input"
    msg = first.get("msg", str(exc))
    msg = msg.removeprefix("Value error, ")
    if not loc:
        # a cross-field rule: its message starts with the field it is about, e.g. "vpp (2) must ..."
        import re

        head = re.match(r"([a-z_]+) ", msg)
        if head:
            field = ".".join(p for p in (prefix, head.group(1)) if p)
    if first.get("type") == "extra_forbidden":
        msg = "unknown key (not allowed)"
    elif "input" in first and first.get("type") not in ("missing",) and not isinstance(first["input"], dict):
        msg = f"{msg} (got {first['input']!r})"
    return InputError(field, msg, where=where)


def read_text_file(path, field: str, errors: str = "strict") -> str:
    """A text file's contents, or InputError naming ``field`` and the file when it is missing, a
    folder, unreadable or not text."""
    from pathlib import Path

    path = Path(path)
    if path.is_dir():
        raise InputError(field, "is a folder, not a file", where=str(path))
    try:
        # utf-8-sig: a leading byte-order mark (as spreadsheet programs save UTF-8) is not content
        return path.read_text(encoding="utf-8-sig", errors=errors)
    except OSError as exc:
        raise InputError(field, f"cannot read file ({exc.strerror or exc})", where=str(path)) from None
    except UnicodeDecodeError:
        raise InputError(field, "not a text file (not valid UTF-8)", where=str(path)) from None


def write_file_atomic(path, content: bytes, mode: int = 0o644) -> None:
    """Write ``content`` through a temporary file in the same folder, then rename: ``path`` holds either
    the whole new content or what it held before. ``mode``: mkstemp makes 0600, an output is meant to be
    read by others. OSError propagates (the caller names the field); no temporary file is left."""
    import os
    import tempfile
    from pathlib import Path

    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(content)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
