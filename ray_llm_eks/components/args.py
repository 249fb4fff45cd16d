"""What every component's Args share. A field with a default is annotated `X | None`: the component
provider host marks a field optional in the schema only where its type admits None (pulumi/provider/
experimental/analyzer.py, is_optional), so a YAML program may leave it out; None then reads as the default."""

import dataclasses


def fill_defaults(args: object) -> None:
    """Replace each None of a frozen Args dataclass by its field's default (a field without one keeps None)."""
    for field in dataclasses.fields(args):
        if getattr(args, field.name) is None and field.default not in (None, dataclasses.MISSING):
            object.__setattr__(args, field.name, field.default)


def present(*resources: object) -> list:
    """The resources given, for `depends_on`: a component handed one only to wait for it takes None where its hosted
    caller orders it with dependsOn instead."""
    return [r for r in resources if r is not None]
