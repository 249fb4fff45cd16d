"""`make model-spec CONFIG=path/to/config.json`: the modelSpec YAML to paste into Pulumi.<stack>.yaml,
from a Hugging Face config.json on disk (nothing is downloaded; measure/hf_model_spec.py derives it)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from measure.hf_model_spec import FIELD_ORDER, as_yaml, spec_from_hf_config


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: make model-spec CONFIG=path/to/config.json", file=sys.stderr)
        return 2
    path = Path(args[0])
    index = path.parent / "model.safetensors.index.json"  # its total_size gives the parameter count
    try:
        spec, missing = spec_from_hf_config(
            json.loads(path.read_text()), json.loads(index.read_text()) if index.exists() else None
        )
    except (OSError, ValueError, KeyError, TypeError) as err:
        print(f"error: {path}: cannot read a Hugging Face config.json ({type(err).__name__}: {err})", file=sys.stderr)
        return 2
    print(as_yaml(spec, missing, str(path)), end="")
    if missing:
        print(f"still to give by hand: {', '.join(f for f in FIELD_ORDER if f in missing)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
