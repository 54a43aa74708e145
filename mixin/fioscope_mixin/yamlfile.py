"""The one YAML loader (safe; a duplicate key is an error, not "the last one wins") and the one
dumper of generated YAML (multi-line PromQL as readable ``|`` blocks).

Files a user hands fioscope (run config, web config, capture plan) are hostile until read:
anchors and aliases are refused (a 40-line "billion laughs" expands to gigabytes), so is nesting
deeper than ``MAX_DEPTH`` (PyYAML composes recursively: 5,000 ``[`` raise RecursionError) and a
file larger than ``MAX_BYTES`` (``/dev/zero``). Only the repository's own ``compose.yaml`` is read
with ``aliases=True`` (its ``<<: *defaults``)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml

__all__ = ["YamlError", "dump_yaml", "load_yaml", "loads_yaml"]


class YamlError(ValueError):
    """A file that cannot be read or is not valid YAML; the message names the file and the line."""


# deeper than any config fioscope reads (the web config: 4 levels), far below Python's recursion limit
MAX_DEPTH = 64
# a config, a web config or a plan is a few KiB; inline certificates a few more
MAX_BYTES = 4 * 2**20


class _UniqueKeyLoader(yaml.SafeLoader):
    allow_aliases = False
    _depth = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        if not self.allow_aliases and (isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None)):
            raise yaml.composer.ComposerError(None, None, "anchors and aliases (&name, *name) are not allowed", event.start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

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


class _AliasLoader(_UniqueKeyLoader):
    allow_aliases = True


def loads_yaml(text: str, source: str = "<string>", aliases: bool = False) -> Any:
    """Parse YAML text; ``YamlError`` names ``source`` and the line. ``aliases``: allow anchors (trusted files only)."""
    try:
        return yaml.load(text, Loader=_AliasLoader if aliases else _UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except RecursionError:
        raise YamlError(f"{source}: not valid YAML: nested too deeply") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise YamlError(f"{source}: not valid YAML{where}: {getattr(exc, 'problem', None) or exc}") from None


def load_yaml(path: str | Path, aliases: bool = False, nofollow: bool = False) -> Any:
    """A YAML file's content; ``YamlError`` (one line naming the file) if unreadable, not a regular file, larger
    than ``MAX_BYTES``, not UTF-8 or not valid YAML. ``aliases``: allow anchors (trusted files only). ``nofollow``:
    a symbolic link is refused (a file whose content is written back elsewhere)."""
    path = Path(path)
    try:
        # O_NONBLOCK: a FIFO never hangs the open; only a regular file is read, and at most MAX_BYTES of it
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_NOFOLLOW if nofollow else 0))
        with os.fdopen(fd, "rb") as stream:
            if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
                raise YamlError(f"{path}: cannot read: not a regular file")
            data = stream.read(MAX_BYTES + 1)
    except OSError as exc:
        raise YamlError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_BYTES:
        raise YamlError(f"{path}: cannot read: larger than {MAX_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise YamlError(f"{path}: not valid YAML: not UTF-8 text") from None
    return loads_yaml(text, str(path), aliases)


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings as ``|`` blocks, the rest as PyYAML writes them."""


_BlockDumper.add_representer(str, lambda dumper, value: dumper.represent_scalar(
    "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None))


def dump_yaml(*documents: Any) -> str:
    """``documents`` as YAML, in their own key order (several: ``---``-separated)."""
    return yaml.dump_all(documents, Dumper=_BlockDumper, sort_keys=False, width=200)
