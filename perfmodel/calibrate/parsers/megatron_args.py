"""Megatron-LM's start-up arguments block in a training log -> ``{name: value}``.

Megatron-LM prints every parsed argument once, on rank 0, before training
(``megatron/training/arguments.py`` ``_print_args``; the same function in Megatron-DeepSpeed and
Megatron-Kwai)::

    ------------------------ arguments ------------------------
      accumulate_allreduce_grads_in_fp32 .............. False
      ...
      tensor_model_parallel_size ...................... 8
    -------------------- end of arguments ---------------------

(dots pad each name to 48 characters; a longer name is followed by two spaces). Values are Python's
``str()`` of the argument: ``None``, ``True``/``False``, numbers, ``torch.bfloat16``, lists.
A launcher label (``parsers.launcher``) is allowed, as in iteration lines; a line inside the block
that is not indented (another process's output, a warning) is skipped.

The padded vocabulary is not an argument at print time: the tokenizer sets it later and prints
`` > padded vocab (size: V) with D dummy tokens (new size: P)`` (``_vocab_size_with_padding``);
that line's P is returned as ``padded_vocab_size``.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from perfmodel.calibrate.parsers.launcher import strip_launcher_prefix
from perfmodel.errors import InputError, read_text_file

_START = re.compile(r"^-{3,} arguments -{3,}$")
_END = re.compile(r"^-{3,} end of arguments -{3,}$")
_ARG = re.compile(r"^\s+([A-Za-z_][A-Za-z0-9_]*) \.* ?(.*?)\s*$")
_PADDED_VOCAB = re.compile(r"> padded vocab \(size: \d+\) with \d+ dummy tokens \(new size: (\d+)\)")
_MAX_BLOCK_LINES = 5000
"""Megatron-LM has about a thousand arguments; a block longer than this never closed."""


class MegatronArguments(dict):
    """name -> printed value (text), with the log line of each: ``where(name)`` is 'file:line'."""

    def __init__(self, path: Path, start: int):
        super().__init__()
        self.path = str(path)
        self.start = start
        self.lines: dict[str, int] = {}
        #: the log's later arguments blocks (a restart, or another run appended): (first line, name -> value)
        self.later: list[tuple[int, dict[str, str]]] = []

    def where(self, name: str) -> str:
        return f"{self.path}:{self.lines.get(name, self.start)}"


def parse_megatron_arguments(path: str | Path) -> MegatronArguments | None:
    """The first arguments block of a Megatron-family log (values as printed), or None when the log
    has none. A block that starts but never ends, holds a line that is not ``name .... value`` or
    names an argument twice is an ``InputError`` naming the file and line."""
    path = Path(path)
    lines = read_text_file(path, "log", errors="replace").splitlines()
    texts = [strip_launcher_prefix(raw) for raw in lines]
    start = next((i for i, t in enumerate(texts, start=1) if _START.match(t.strip())), None)
    if start is None:
        return None
    args = MegatronArguments(path, start)
    for lineno in range(start + 1, min(len(texts), start + _MAX_BLOCK_LINES) + 1):
        text = texts[lineno - 1]
        if _END.match(text.strip()):
            if not args:
                raise InputError("arguments", "the block lists no argument", f"{path}:{lineno}")
            padded = next(((i, m.group(1)) for i, t in enumerate(texts, start=1) if (m := _PADDED_VOCAB.search(t))),
                          None)
            if padded is not None and arg_value(args.get("padded_vocab_size")) is None:
                args["padded_vocab_size"] = padded[1]
                args.lines["padded_vocab_size"] = padded[0]
            args.later = _later_blocks(texts, lineno)
            return args
        if not text.strip():
            continue
        m = _ARG.match(text)
        if m is None and not text[:1].isspace():
            continue  # another process's line printed into the block (a warning): not an argument line
        if m is None:
            raise InputError("arguments", "expected '  name .... value' inside Megatron's arguments block "
                             f"(got {text.strip()[:60]!r})", f"{path}:{lineno}")
        if m.group(1) in args:
            raise InputError(m.group(1), f"printed twice in the arguments block (first on line "
                             f"{args.lines[m.group(1)]})", f"{path}:{lineno}")
        args[m.group(1)] = m.group(2)
        args.lines[m.group(1)] = lineno
    raise InputError("arguments", "the block never ends (no '---- end of arguments ----' line)", f"{path}:{start}")


def _later_blocks(texts: list[str], after: int) -> list[tuple[int, dict[str, str]]]:
    """The arguments blocks that start after line ``after``: (first line, name -> value as printed)."""
    blocks: list[tuple[int, dict[str, str]]] = []
    current: dict[str, str] | None = None
    for lineno in range(after + 1, len(texts) + 1):
        text = texts[lineno - 1]
        if _START.match(text.strip()):
            current = {}
            blocks.append((lineno, current))
        elif current is not None and _END.match(text.strip()):
            current = None
        elif current is not None and (m := _ARG.match(text)):
            current.setdefault(m.group(1), m.group(2))
    return blocks


def arg_value(text: str | None):
    """A printed argument as a Python value: None, bool, int, float, else the text."""
    if text is None:
        return None
    t = text.strip()
    if t in ("None", ""):
        return None
    if t in ("True", "False"):
        return t == "True"
    if t[:1] in "[(":  # nargs='+' arguments print as Python lists (Megatron-DeepSpeed num_experts [1])
        try:
            return ast.literal_eval(t)
        except (ValueError, SyntaxError):
            return t
    for cast in (int, float):
        try:
            return cast(t)
        except ValueError:
            pass
    return t
