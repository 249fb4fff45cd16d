"""Reading the project's YAML files (stack files, serve files): a syntax error is one line naming
the file, line and column and what is wrong, never a parser traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class YamlSyntaxError(ValueError):
    """A YAML file that does not parse: `file:line:column: what is wrong`."""


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def load(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{_shown(path)}:{mark.line + 1}:{mark.column + 1}" if mark else _shown(path)
        problem = err.problem or "invalid YAML"
        context = f" ({err.context})" if err.context else ""
        raise YamlSyntaxError(f"{where}: invalid YAML: {problem}{context}") from None
    except yaml.YAMLError as err:
        raise YamlSyntaxError(f"{_shown(path)}: invalid YAML: {' '.join(str(err).split())}") from None
