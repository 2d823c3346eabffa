"""The streamed JSON object reader (perfmodel/calibrate/parsers/json_stream.py) against the standard
library's json.loads: the same members and elements, the same errors at the same line and column,
whatever the window size; and it reads lazily."""
from __future__ import annotations

import io
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfmodel.calibrate.parsers.json_stream import NotAnObject, ObjectStream, StreamJSONError

LIST_KEY = "traceEvents"

_scalars = (st.none() | st.booleans() | st.integers(-10**12, 10**12)
            | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8))
_values = st.recursive(_scalars, lambda kids: st.lists(kids, max_size=4)
                       | st.dictionaries(st.text(max_size=5), kids, max_size=4), max_leaves=12)
_meta = st.dictionaries(st.text(max_size=6).filter(lambda k: k != LIST_KEY), _values, max_size=4)


def _read(text: str, chunk: int):
    """(members, elements, element lines) as ObjectStream yields them."""
    stream = ObjectStream(io.StringIO(text), chunk_chars=chunk)
    meta, elements, lines = {}, [], []
    for key, value, line in stream.members(LIST_KEY):
        if key is None:
            index, element = value
            assert index == len(elements)
            elements.append(element)
            lines.append(line)
        else:
            meta[key] = value
    return meta, elements, lines, stream.streamed


def _element_lines(text: str) -> list[int]:
    """The line each element of the list member starts on, by decoding the whole text at once."""
    dec, pos, lines = json.JSONDecoder(), 0, []

    def ws(p):
        while p < len(text) and text[p] in " \t\n\r":
            p += 1
        return p

    pos = ws(pos) + 1  # {
    while True:
        key, pos = dec.raw_decode(text, ws(pos))
        pos = ws(pos) + 1  # :
        if key == LIST_KEY:
            break
        _, pos = dec.raw_decode(text, ws(pos))
        pos = ws(pos) + 1  # ,
    pos = ws(ws(pos) + 1)  # [
    while text[pos] != "]":
        lines.append(text.count("\n", 0, pos) + 1)
        _, pos = dec.raw_decode(text, pos)
        pos = ws(pos)
        if text[pos] == "]":
            break
        pos = ws(pos + 1)  # ,
    return lines


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(before=_meta, after=_meta, elements=st.lists(_values, max_size=6),
       indent=st.sampled_from([None, 0, 1, 2]), chunk=st.sampled_from([1, 2, 3, 7, 64, 1 << 20]))
def test_same_members_elements_and_lines_as_json_loads(before, after, elements, indent, chunk):
    doc = {**before, LIST_KEY: elements, **{k: v for k, v in after.items() if k not in before}}
    text = json.dumps(doc, indent=indent)
    meta, got, lines, streamed = _read(text, chunk)
    expected = json.loads(text)
    assert streamed
    assert got == expected.pop(LIST_KEY)
    assert meta == expected
    assert lines == _element_lines(text)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(meta=_meta, elements=st.lists(_values, min_size=1, max_size=5), indent=st.sampled_from([None, 1]),
       cut=st.floats(0.0, 1.0), junk=st.sampled_from(["", "x", ",", "]", "}", ":", "\"", "{", "[", "1", " ,"]),
       chunk=st.sampled_from([1, 3, 16, 1 << 20]))
def test_broken_text_fails_where_json_loads_fails(meta, elements, indent, cut, junk, chunk):
    """A cut or a stray character: the error json.loads gives (message, line, column), or none when it
    accepts the text."""
    text = json.dumps({LIST_KEY: elements, **meta}, indent=indent)
    at = 1 + int(cut * (len(text) - 1))  # keep the opening brace: a text that is no object is another case
    broken = text[:at] + junk + (text[at:] if junk else "")
    try:
        expected = json.loads(broken)
    except json.JSONDecodeError as e:
        with pytest.raises(StreamJSONError) as got:
            _read(broken, chunk)
        assert (got.value.msg, got.value.lineno, got.value.colno) == (e.msg, e.lineno, e.colno)
        return
    if isinstance(expected, dict) and isinstance(expected.get(LIST_KEY), list):
        meta_got, elements_got, _, _ = _read(broken, chunk)
        assert elements_got == expected.pop(LIST_KEY)
        assert meta_got == expected


@pytest.mark.parametrize("text, error", [
    ("", StreamJSONError), ("   ", StreamJSONError), ("x", StreamJSONError),
    ("[1, 2]", NotAnObject), ('"a"', NotAnObject), ("3", NotAnObject),
    ('{"traceEvents": [1], "traceEvents": [2]}', StreamJSONError),  # json.loads would drop [1]
    ('{"a": 1} {"b": 2}', StreamJSONError),  # Extra data
])
def test_what_is_not_one_object_is_refused(text, error):
    with pytest.raises(error):
        _read(text, 4)


def test_a_list_member_that_is_no_list_is_a_plain_member():
    meta, elements, _, streamed = _read('{"traceEvents": {"a": 1}, "b": 2}', 3)
    assert (meta, elements, streamed) == ({"traceEvents": {"a": 1}, "b": 2}, [], False)
    assert _read('{"traceEvents": []}', 2)[1:] == ([], [], True)


class _CountingReader(io.StringIO):
    def __init__(self, text):
        super().__init__(text)
        self.chars_read = 0

    def read(self, n=-1):
        piece = super().read(n)
        self.chars_read += len(piece)
        return piece


def test_elements_come_before_the_whole_text_is_read():
    """Lazy: the first element of a 10,000-element list is yielded after reading one window, and the
    window never holds the whole list."""
    text = json.dumps({"schemaVersion": 1, LIST_KEY: [{"ph": "X", "dur": i} for i in range(10_000)]})
    fh = _CountingReader(text)
    stream = ObjectStream(fh, chunk_chars=4096)
    members = stream.members(LIST_KEY)
    assert next(members) == ("schemaVersion", 1, 1)
    key, (index, element), _ = next(members)
    assert (key, index, element) == (None, 0, {"ph": "X", "dur": 0})
    assert fh.chars_read <= 2 * 4096 < len(text)
    longest = 0
    for _ in members:
        longest = max(longest, len(stream._buf))
    assert fh.chars_read == len(text)
    assert longest <= 3 * 4096
