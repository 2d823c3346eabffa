"""Reading and writing the JSON / YAML documents users hand in (model YAMLs, Hugging Face
config.json, DeepSpeed configs, hardware and calibration profiles), strictly:

* a key given twice in one mapping is an error naming the key and line (json and PyYAML would
  silently keep the last one);
* YAML anchors and aliases (``&name`` / ``*name``) are refused: none of these documents needs them,
  and a few nested aliases expand exponentially ("billion laughs");
* YAML nested deeper than ``MAX_DEPTH`` (100) levels is an error, found while the parser's events stream
  in (before its scanner slows down on deep flow collections); JSON deeper than the recursion limit too.

Every failure is an ``InputError`` naming ``field`` and the file (and line where known).
"""
from __future__ import annotations

import json
import re

import yaml

from perfmodel.errors import TOO_MANY_DIGITS, InputError, too_many_digits

TOO_DEEP = "nested too deeply to be a configuration document"


class _StrictYamlLoader(yaml.SafeLoader):
    """SafeLoader whose mappings refuse a key given twice."""

    field = "yaml"
    where = ""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: let PyYAML give its own error
                break
            if duplicate:
                raise InputError(self.field, f"key {key!r} given twice in one mapping",
                                 f"{self.where}:{key_node.start_mark.line + 1}")
            seen.add(key)
        return super().construct_mapping(node, deep)


    def construct_yaml_int(self, node):
        # YAML 1.1 reads 040 as octal 32, 1:20 as base-60 80 and 0b101 as binary; YAML 1.2 and JSON read none of
        # them so: refused, not silently read as another number
        body = str(node.value).lstrip("+-")
        if ":" in body or body[:2].lower() == "0b" or "_" in body or (
                len(body) > 1 and body[0] == "0" and body[1:2].isdigit()):
            raise InputError(self.field, f"{node.value!r} is a YAML 1.1 number form (octal 0NN, base-60 a:b, binary "
                             "0b, or digits with _) that YAML 1.2 and JSON do not share: write the plain decimal",
                             f"{self.where}:{node.start_mark.line + 1}")
        return super().construct_yaml_int(node)

    def construct_yaml_float(self, node):
        if ":" in str(node.value) or "_" in str(node.value):  # base-60 (1:20.5) or digits with _ (YAML 1.1 only)
            raise InputError(self.field, f"{node.value!r} is a YAML 1.1 number form that YAML 1.2 and JSON do not "
                             "share: write the plain decimal", f"{self.where}:{node.start_mark.line + 1}")
        return super().construct_yaml_float(node)


_StrictYamlLoader.add_constructor("tag:yaml.org,2002:int", _StrictYamlLoader.construct_yaml_int)
_StrictYamlLoader.add_constructor("tag:yaml.org,2002:float", _StrictYamlLoader.construct_yaml_float)


class _NoAliasDumper(yaml.SafeDumper):
    """SafeDumper that writes a repeated object out again instead of as an anchor and alias."""

    def ignore_aliases(self, data):
        return True


# YAML 1.1 (PyYAML) reads a number with an exponent but no dot or no exponent sign (1e3, 2e-05, 1.0e3)
# as text; YAML 1.2 and JSON read it as the number it looks like, and so does perfmodel. The dumper
# knows it too, so text that looks like such a number (a fabric or file named 1e5) is written quoted
# and reads back as text.
_EXPONENT_FLOAT = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+$")
for _cls in (_StrictYamlLoader, _NoAliasDumper):
    _cls.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_FLOAT, list("-+.0123456789"))


def dump_yaml(doc, **kwargs) -> str:
    """``doc`` as YAML without anchors or aliases (readable back by ``load_yaml``)."""
    return yaml.dump(doc, Dumper=_NoAliasDumper, **kwargs)


#: collections nested deeper than this are refused while the events stream in, before any is built: PyYAML's
#: scanner takes time that grows faster than the depth (10,000 flow levels: 10 s), and no document here
#: nests past 10
MAX_DEPTH = 100


def load_yaml(text: str, field: str, where: str):
    """The YAML document in ``text`` (from file ``where``)."""
    try:
        depth = 0
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent):
                raise InputError(field, "YAML anchors and aliases (&name / *name) are not supported",
                                 f"{where}:{event.start_mark.line + 1}")
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise InputError(field, TOO_DEEP, f"{where}:{event.start_mark.line + 1}")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        loader = type("_Loader", (_StrictYamlLoader,), {"field": field, "where": where})
        return yaml.load(text, Loader=loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None)  # PyYAML's own words (a merge key <<: without a mapping, ...)
        raise InputError(field, "not valid YAML" + (f" ({problem})" if problem else ""),
                         where=f"{where}:{mark.line + 1}" if mark else where) from None
    except RecursionError:
        raise InputError(field, TOO_DEEP, where) from None
    except ValueError as exc:
        if too_many_digits(exc) and not isinstance(exc, InputError):
            raise InputError(field, TOO_MANY_DIGITS, where) from None
        raise


def _no_duplicate_keys(field: str, where: str):
    def hook(pairs):
        out = {}
        for key, value in pairs:
            if key in out:
                raise InputError(field, f"key {key!r} given twice in one object", where)
            out[key] = value
        return out

    return hook


def load_json(text: str, field: str, where: str):
    """The JSON document in ``text`` (from file ``where``)."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys(field, where))
    except json.JSONDecodeError as exc:
        raise InputError(field, f"not valid JSON ({exc.msg})", where=f"{where}:{exc.lineno}") from None
    except RecursionError:
        raise InputError(field, TOO_DEEP, where) from None
    except ValueError as exc:
        if too_many_digits(exc) and not isinstance(exc, InputError):
            raise InputError(field, TOO_MANY_DIGITS, where) from None
        raise
