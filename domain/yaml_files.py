"""Parsing the project's YAML (stack files, serve files, the config-key table): a syntax error is one
line naming the file, line and column and what is wrong, never a parser traceback. Reading the
files is the caller's: domain/packaged.py for what ships with the code, adapters/ for the rest."""

from __future__ import annotations

from typing import Any

import yaml


class YamlSyntaxError(ValueError):
    """A YAML file that does not parse: `file:line:column: what is wrong`."""


def parse(text: str, shown: str) -> Any:
    """`shown`: the file's name as the error line gives it."""
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{shown}:{mark.line + 1}:{mark.column + 1}" if mark else shown
        problem = err.problem or "invalid YAML"
        context = f" ({err.context})" if err.context else ""
        raise YamlSyntaxError(f"{where}: invalid YAML: {problem}{context}") from None
    except yaml.YAMLError as err:
        raise YamlSyntaxError(f"{shown}: invalid YAML: {' '.join(str(err).split())}") from None
