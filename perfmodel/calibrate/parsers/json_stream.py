"""One JSON object read piece by piece: its members, and the elements of one list member as they come.

A profiler trace is one JSON object whose ``traceEvents`` list holds millions of events (hundreds of MB
of text); ``json.load`` would hold all of them as Python objects at once (a 400 MB trace: ~2 GB).
``ObjectStream`` decodes one member value, or one element of the streamed list, at a time with the
standard library's decoder (``json.JSONDecoder.raw_decode``) over a window of the text, so memory is
the window plus what the caller keeps. What it accepts and refuses is what ``json.load`` does (same
decoder, same messages), except that a list member named twice is refused (``json.load`` would keep the
last and drop the first's elements silently).

A decoding error is ``StreamJSONError`` with the 1-based line and column in the whole text.
"""
from __future__ import annotations

import json
import re
from typing import Any, Iterator, TextIO

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER_TAIL = re.compile(r"[0-9.eE+\-]*")
_DECODER = json.JSONDecoder()
#: characters read at a time; a value longer than that is read in growing pieces
CHUNK_CHARS = 1 << 20


class StreamJSONError(ValueError):
    """Not JSON (or not the object expected): ``msg`` at ``lineno``:``colno`` of the whole text."""

    def __init__(self, msg: str, lineno: int, colno: int):
        super().__init__(f"{msg}: line {lineno} column {colno}")
        self.msg, self.lineno, self.colno = msg, lineno, colno


class NotAnObject(StreamJSONError):
    """The text starts with a JSON value that is not an object."""


class ObjectStream:
    """The top-level object of ``fh``: ``members(list_key)`` yields ``(key, value, line)`` for every member
    but ``list_key``'s when it is a list, and ``(None, (index, element), line)`` for each element of that
    list; ``line`` is the 1-based line the value (element) starts on."""

    def __init__(self, fh: TextIO, chunk_chars: int = CHUNK_CHARS):
        self._fh, self._chunk = fh, chunk_chars
        self._buf, self._pos, self._eof = "", 0, False
        self._line0, self._col0 = 1, 0  # line of _buf[0] and characters before it on that line
        self._counted, self._counted_line = 0, 1  # a window position whose line is known, and that line
        #: whether the list member was found (and its elements yielded: none for an empty list)
        self.streamed = False

    # ---- the window over the text ------------------------------------------------------------
    def _more(self, at_least: int) -> bool:
        """Append at least ``at_least`` characters (fewer at the end of the text), dropping what is
        consumed; False at the end of the text."""
        if self._eof:
            return False
        done = self._buf[:self._pos]
        newlines = done.count("\n")
        if newlines:
            self._line0 += newlines
            self._col0 = len(done) - done.rfind("\n") - 1
        else:
            self._col0 += len(done)
        parts, n = [self._buf[self._pos:]], 0
        while n < at_least:
            piece = self._fh.read(max(self._chunk, at_least - n))
            if not piece:
                self._eof = True
                break
            parts.append(piece)
            n += len(piece)
        self._buf, self._pos = "".join(parts), 0
        self._counted, self._counted_line = 0, self._line0
        return n > 0

    def _line(self, index: int) -> int:
        """The line of ``_buf[index]``, counting on from the last position asked (positions only go
        forward): counting from the window's start every time would scan the window once per element."""
        if index < self._counted:
            return self._line0 + self._buf.count("\n", 0, index)
        self._counted_line += self._buf.count("\n", self._counted, index)
        self._counted = index
        return self._counted_line

    def _where(self, index: int) -> tuple[int, int]:
        line = self._line(index)
        last = self._buf.rfind("\n", 0, index)
        return line, (index - last if last >= 0 else self._col0 + index + 1)

    def _error(self, msg: str, index: int) -> StreamJSONError:
        return StreamJSONError(msg, *self._where(index))

    def _peek(self) -> str:
        """The next non-whitespace character ('' at the end of the text), consumed up to it."""
        while True:
            self._pos = _WS.match(self._buf, self._pos).end()
            if self._pos < len(self._buf) or not self._more(self._chunk):
                return self._buf[self._pos:self._pos + 1]

    def _expect(self, chars: str, msg: str) -> str:
        c = self._peek()
        if not c or c not in chars:
            raise self._error(msg, self._pos)
        self._pos += 1
        return c

    def _value(self) -> tuple[Any, int]:
        """The next JSON value and its line; the window grows until the value is whole."""
        self._peek()
        grow = self._chunk
        while True:
            try:
                value, end = _DECODER.raw_decode(self._buf, self._pos)
            except json.JSONDecodeError as e:
                past_start = e.pos - self._pos  # _more moves the value's start to the window's
                if self._more(grow):
                    grow *= 2
                    continue
                raise self._error(e.msg, self._pos + past_start) from None
            except ValueError as e:  # a whole number past Python's 4,300 digits (sys.get_int_max_str_digits)
                raise self._error("a whole number with more than 4,300 digits, too long to read", self._pos) from None
            # a number is whole once a character that cannot go on a number follows it in the window
            # (text read later could make "0" into "0.5"); other values end with their own delimiter
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not number or _NUMBER_TAIL.match(self._buf, end).end() < len(self._buf) or not self._more(grow):
                line = self._line(self._pos)
                self._pos = end
                return value, line
            grow *= 2

    # ---- the object ----------------------------------------------------------------------------
    def members(self, list_key: str) -> Iterator[tuple[str | None, Any, int]]:
        first = self._peek()
        if first != "{":
            if first and first in '["-0123456789tfn':
                raise NotAnObject(f"the text is not a JSON object (it starts with {first!r})", *self._where(self._pos))
            raise self._error("Expecting value", self._pos)
        self._pos += 1
        if self._peek() == "}":
            self._pos += 1
        else:
            while True:
                if self._peek() != '"':
                    raise self._error("Expecting property name enclosed in double quotes", self._pos)
                key, _ = self._value()
                self._expect(":", "Expecting ':' delimiter")
                if key == list_key and self._peek() == "[":
                    if self.streamed:
                        raise self._error(f"{list_key!r} given twice", self._pos)
                    self.streamed = True
                    self._pos += 1
                    for index, element, line in self._elements():
                        yield None, (index, element), line
                else:
                    value, line = self._value()
                    yield key, value, line
                if self._expect(",}", "Expecting ',' delimiter") == "}":
                    break
        if self._peek():
            raise self._error("Extra data", self._pos)

    def _elements(self) -> Iterator[tuple[int, Any, int]]:
        if self._peek() == "]":
            self._pos += 1
            return
        index = 0
        while True:
            value, line = self._value()
            yield index, value, line
            index += 1
            if self._expect(",]", "Expecting ',' delimiter") == "]":
                return
