"""The one YAML loader (safe; a duplicate key is an error, not "the last one wins") and the one
dumper of generated YAML (multi-line PromQL as readable ``|`` blocks).

``strict=True`` is for files a careless or hostile user hands over (a capture plan): a regular file
only (stat first, opened without blocking: a FIFO never hangs), at most ``STRICT_MAX_BYTES``, and no
anchors or aliases (a 44-line alias bomb expands to gigabytes).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml

__all__ = ["YamlError", "dump_yaml", "load_yaml", "loads_yaml"]


class YamlError(ValueError):
    """A file that cannot be read or is not valid YAML; the message names the file and the line."""


class _UniqueKeyLoader(yaml.SafeLoader):
    def construct_mapping(self, node, deep=False):
        seen: set = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` (compose.yaml): explicit keys may override it
                continue
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


class _StrictLoader(_UniqueKeyLoader):
    """No anchors, no aliases: refused where the parser meets them, before anything is expanded."""

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise yaml.composer.ComposerError(None, None, "anchors and aliases are not allowed here", event.start_mark)
        return super().compose_node(parent, index)


STRICT_MAX_BYTES = 1 << 20


def loads_yaml(text: str, source: str = "<string>", *, strict: bool = False) -> Any:
    """Parse YAML text; ``YamlError`` names ``source`` and the line."""
    try:
        return yaml.load(text, Loader=_StrictLoader if strict else _UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise YamlError(f"{source}: not valid YAML{where}: {getattr(exc, 'problem', None) or exc}") from None
    except RecursionError:
        raise YamlError(f"{source}: not valid YAML: nested too deeply") from None


def _read_strict(path: Path) -> bytes:
    """A regular file's bytes, at most STRICT_MAX_BYTES: stat first, open without blocking, check the open file again."""
    info = path.stat()
    if not stat.S_ISREG(info.st_mode):
        raise YamlError(f"{path}: not a regular file")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped for a FIFO or device between stat and open
            raise YamlError(f"{path}: not a regular file")
        data = f.read(STRICT_MAX_BYTES + 1)
    if len(data) > STRICT_MAX_BYTES:
        raise YamlError(f"{path}: larger than {STRICT_MAX_BYTES // 1024} KiB")
    return data


def load_yaml(path: str | Path, *, strict: bool = False) -> Any:
    """A YAML file's content; ``YamlError`` (one line naming the file) if unreadable, not UTF-8 or not valid YAML.
    ``strict``: see the module's docstring."""
    path = Path(path)
    try:
        text = (_read_strict(path) if strict else path.read_bytes()).decode("utf-8")
    except OSError as exc:
        raise YamlError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise YamlError(f"{path}: not valid YAML: not UTF-8 text") from None
    return loads_yaml(text, str(path), strict=strict)


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings as ``|`` blocks, the rest as PyYAML writes them."""


_BlockDumper.add_representer(str, lambda dumper, value: dumper.represent_scalar(
    "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None))


def dump_yaml(*documents: Any) -> str:
    """``documents`` as YAML, in their own key order (several: ``---``-separated)."""
    return yaml.dump_all(documents, Dumper=_BlockDumper, sort_keys=False, width=200)
