"""The one YAML loader (safe; a duplicate key is an error, not "the last one wins") and the one
dumper of generated YAML (multi-line PromQL as readable ``|`` blocks)."""

from __future__ import annotations

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


def loads_yaml(text: str, source: str = "<string>") -> Any:
    """Parse YAML text; ``YamlError`` names ``source`` and the line."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise YamlError(f"{source}: not valid YAML{where}: {getattr(exc, 'problem', None) or exc}") from None


def load_yaml(path: str | Path) -> Any:
    """A YAML file's content; ``YamlError`` (one line naming the file) if unreadable, not UTF-8 or not valid YAML."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise YamlError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise YamlError(f"{path}: not valid YAML: not UTF-8 text") from None
    return loads_yaml(text, str(path))


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings as ``|`` blocks, the rest as PyYAML writes them."""


_BlockDumper.add_representer(str, lambda dumper, value: dumper.represent_scalar(
    "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None))


def dump_yaml(*documents: Any) -> str:
    """``documents`` as YAML, in their own key order (several: ``---``-separated)."""
    return yaml.dump_all(documents, Dumper=_BlockDumper, sort_keys=False, width=200)
