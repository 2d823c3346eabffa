"""The one exception type for bad user input.

Every message names the offending field and the rule it breaks, e.g.
``tp: must divide n_heads (tp=3, n_heads=64)``. The CLI prints it as one ``error:`` line
and exits with code 2.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path


class InputError(ValueError):
    """Bad input: ``field`` is the dotted name of what is wrong, ``rule`` says why."""

    def __init__(self, field: str, rule: str, where: str | None = None):
        field, rule, where = (one_line(x) if x is not None else None for x in (field, rule, where))
        rule = _LONG_TOKEN.sub(_shorten, rule)
        self.field = field
        self.rule = rule
        self.where = where
        prefix = f"{where}: " if where else ""
        super().__init__(f"{prefix}{field}: {rule}")


def one_line(text) -> str:
    """``text`` with its line breaks written as escapes: a name or path the user typed with a newline in
    it must not split an error or note line."""
    return str(text).translate(_LINE_BREAK_ESCAPES)


#: a run of text too long to quote whole in a one-line error (a 5,000-digit number in a cell); a path
#: of up to 400 characters stays whole
_LONG_TOKEN = re.compile(r"\S{401,}")


def _shorten(match: "re.Match[str]") -> str:
    text = match.group(0)  # its start and end stay (a long path's file name, a quote's closing mark)
    return f"{text[:40]}...{text[-40:]} ({len(text):,} characters)"


def too_many_digits(exc: BaseException) -> bool:
    """Whether ``exc`` is Python's refusal to read a whole number with more digits than its limit
    (sys.get_int_max_str_digits, 4,300 by default)."""
    return isinstance(exc, ValueError) and "integer string conversion" in str(exc)


#: the rule an input error names for such a number
TOO_MANY_DIGITS = "holds a whole number with more digits than Python reads (4,300); no input value is that long"


#: every character ``str.splitlines`` breaks a line at, written as its escape
_LINE_BREAK_ESCAPES = {ord(c): repr(c)[1:-1] for c in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"}


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
    elif first.get("type") == "missing" and loc:
        msg = f"{msg}{_misspelt_as(exc.errors(), first['loc'])}"
    elif ("input" in first and first.get("type") not in ("missing",) and not isinstance(first["input"], dict)
          and "(got " not in msg):  # a validator of ours that already says what it got
        msg = f"{msg} (got {first['input']!r})"
    return InputError(field, msg, where=where)


def _misspelt_as(errors, missing_loc) -> str:
    """`` (the input has 'ffn_hiden_size': a misspelling?)`` when an unknown key of the same object is
    close to a required one that is missing, so a typo in a required key names the typo too."""
    import difflib

    parent, name = tuple(missing_loc[:-1]), str(missing_loc[-1])
    extras = [str(e["loc"][-1]) for e in errors
              if e.get("type") == "extra_forbidden" and tuple(e.get("loc", ()))[:-1] == parent]
    close = difflib.get_close_matches(name, extras, n=1, cutoff=0.75)
    return f" (the input has {close[0]!r}: a misspelling?)" if close else ""


def read_text_file(path, field: str, errors: str = "strict") -> str:
    """A text file's contents, or InputError naming ``field`` and the file when it is missing, a
    folder, unreadable or not text."""
    from pathlib import Path

    path = Path(path)
    if path.is_dir():
        raise InputError(field, "is a folder, not a file", where=str(path))
    require_regular_file(path, field)
    try:
        if is_gzip(path):
            return _read_gzip_text(path, field, errors)
        # utf-8-sig: a leading byte-order mark (as spreadsheet programs save UTF-8) is not content
        return path.read_text(encoding="utf-8-sig", errors=errors)
    except OSError as exc:
        raise InputError(field, f"cannot read file ({exc.strerror or exc})", where=str(path)) from None
    except UnicodeDecodeError:
        raise InputError(field, "not a text file (not valid UTF-8)", where=str(path)) from None


def require_regular_file(path, field: str, where: str | None = None) -> None:
    """InputError when ``path`` exists and is not a regular file: a FIFO would block the read, a device
    (``/dev/zero``) never end it. A missing path is left to the read, which says so."""
    from pathlib import Path

    path = Path(path)
    if path.exists() and not path.is_file():
        raise InputError(field, "is not a regular file (a device, FIFO or socket)", where=where or str(path))


#: the first two bytes of a gzip stream (RFC 1952): how a compressed log or table is told, whatever its name
GZIP_MAGIC = b"\x1f\x8b"


def file_stamp(path) -> tuple[int, int] | None:
    """(modification time in ns, size) of a file, a cache key that rereads a file edited since; None where it
    cannot be read (the reader then names why)."""
    try:
        st = Path(path).stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def is_gzip(path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == GZIP_MAGIC


def _read_gzip_text(path, field: str, errors: str) -> str:
    """A gzip-compressed text file's text (logs are often kept as ``.log.gz``), read as ``read_text``
    reads a plain one: UTF-8 with an optional byte-order mark, universal newlines."""
    import gzip
    import zlib

    try:
        with gzip.open(path, "rt", encoding="utf-8-sig", errors=errors) as fh:
            return fh.read()
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:  # a cut or corrupt stream
        raise InputError(field, f"gzip-compressed, but cannot be decompressed ({exc})", where=str(path)) from None


def file_path_option(raw: str, kind: str, field: str = "out") -> Path:
    """A file option's path as typed: one that ends in a path separator names a folder (``Path`` would drop
    the separator and a write would make a file of that name)."""
    import os
    from pathlib import Path

    if not raw.strip():
        raise InputError(field, f"must name a {kind} file (got an empty value)")
    if raw.endswith(tuple(sep for sep in (os.sep, os.altsep, "/") if sep)):
        raise InputError(field, f"ends with a path separator: that names a folder; give a {kind} file path",
                         where=raw)
    return Path(raw)


def output_file(path, field: str = "out") -> Path:
    """The file a write to ``path`` lands in: a symbolic link's resolved target (the link stays a link,
    as a shell's ``>`` keeps it), else ``path``. InputError when it exists and is not a regular file
    (a device, FIFO or socket): renaming a file over it would replace the node, and streaming into it
    is not what ``--out`` means. A missing file is fine (it is created)."""
    import os
    import stat
    from pathlib import Path

    path = Path(path)
    try:
        mode = os.stat(path).st_mode  # follows links: what a write would reach
    except (FileNotFoundError, NotADirectoryError):
        mode = None
        _check_parents(path, field)
    if mode is not None and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a special file")
        raise InputError(field, f"not a regular file ({kind}); give a file path", where=str(path))
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _check_parents(path, field: str) -> None:
    """InputError when the nearest existing folder above ``path`` is a file: a mistake in the path
    ("M.csv/p.csv") that mkdir would only report as "File exists" or "Not a directory"."""
    import os
    from pathlib import Path

    path = Path(path)
    parent = next((q for q in path.absolute().parents if os.path.lexists(q)), None)
    if parent is not None and not parent.is_dir():
        shown = next((q for q in path.parents if q.absolute() == parent), parent)
        raise InputError(field, f"{shown} is a file, not a folder", where=str(path)) from None


def output_folder(path, field: str = "out") -> None:
    """InputError when ``path``, a folder to write files into, is a file or lies under one."""
    from pathlib import Path

    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InputError(field, f"{path} is a file, not a folder", where=str(path))
    if not path.exists():
        _check_parents(path, field)


def same_file(a, b) -> bool:
    """Whether ``a`` and ``b`` are one file (through links, hard links and relative spellings); False when
    either does not exist."""
    import os

    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def refuse_replacing_inputs(folder, names, inputs) -> None:
    """InputError("out") when a file ``names`` would write into ``folder`` is one of ``inputs`` (the runs
    CSV, a calibration, a model or GPU file given by path): an output never replaces what it was made from."""
    from pathlib import Path

    for name in names:
        for src in inputs:
            if src and same_file(Path(folder) / name, src):
                raise InputError("out", f"its {name} would replace the input {src}; give another folder",
                                 where=str(folder))


def write_file_atomic(path, content: bytes, mode: int = 0o644) -> None:
    """Write ``content`` through a temporary file in the same folder, then rename: ``path`` holds either
    the whole new content or what it held before. A symbolic link is written through (the temporary file
    is made beside its target, which the rename replaces); a device, FIFO or socket is refused
    (``output_file``), never replaced. ``mode``: mkstemp makes 0600, an output is meant to be read by
    others. OSError propagates (the caller names the field); no temporary file is left."""
    import os
    import tempfile
    from pathlib import Path

    path = output_file(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:  # the folder is what cannot be written, not the temporary name
        raise OSError(exc.errno, exc.strerror, str(path.parent)) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(content)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


#: the ``note:`` lines of a running command, held until it ends (``hold_notes``): a run refused for bad
#: input prints its one ``error:`` line alone, any other prints them; None: said at once (the Python API)
_held_notes: list[str] | None = None


def say_note(text: str) -> None:
    """``note: text`` on stderr: a caveat about an input that does not stop the run."""
    line = f"note: {one_line(text)}"
    if _held_notes is None:
        print(line, file=sys.stderr)
    else:
        _held_notes.append(line)


def hold_notes() -> None:
    """From now on ``say_note`` keeps its lines until ``release_notes``."""
    global _held_notes
    _held_notes = []


def flush_notes() -> None:
    """Print the notes held so far (before a closing line of the run's own), and go on holding."""
    if _held_notes:
        for line in _held_notes:
            print(line, file=sys.stderr)
        _held_notes.clear()


def release_notes(say: bool) -> None:
    """Print the held notes (``say``) or drop them (a refused run), and say notes at once again."""
    global _held_notes
    held, _held_notes = _held_notes or [], None
    for line in held if say else ():
        print(line, file=sys.stderr)
