"""Ray's config mappings as frozen typed objects that keep what a serve file wrote: which keys are present, in
which order, with which values. The serve document is serialized in that order (the file's, then the order the
stack's transformations added keys in), so one parse and one serialization give back the file's own text.

A `Fields` is also a read-only mapping of Ray's key names to values, for the checks that go over every key
(vLLM's argument table, ray_llm_eks/domain/serving/engine_args.py); the stack's own code reads the typed fields.
Transformations return new objects: `put`, `put_last`, `drop` and `ensure` are the dict edits the render made
in place before (assignment, pop and assign, pop, setdefault), so each keeps the order those edits gave."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from types import MappingProxyType
from typing import Any, ClassVar, TypeVar

from ray_llm_eks.domain.core.errors import NOT_SHOWN, did_you_mean, in_serve_config, mapping_of, yaml_text
from ray_llm_eks.domain.core.facts import COLLOCATED_ROLE, PD_ROLES

# Frozen JSON: None, bool, int, float, str, a tuple of Json, a read-only mapping of str to Json (or a Fields).
Json = Any
EMPTY: Mapping[str, Json] = MappingProxyType({})


def no_extra() -> Mapping[str, Json]:
    """The `extra` of an object that passes no key through."""
    return EMPTY


F = TypeVar("F", bound="Fields")
T = TypeVar("T")
# The JSON type a typed scalar field takes, as a line names it.
SCALAR_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}


def check_scalar(cls: type[Fields], key: str, value: Any, file: str, path: str) -> None:
    """A typed scalar field of the JSON type it is typed with (or null); Ray's and vLLM's own models refuse
    the rest only on the cluster. A whole number is a number, as in JSON; true is no integer, as in Ray's models."""
    kind = cls.scalars().get(key)
    if kind is None or value is None or not cls.CHECKS_TYPES:
        return
    fits = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        fits = True
    if not fits:
        raise in_serve_config(file, child_path(path, key), value, SCALAR_NAMES[kind])


def freeze(value: Any) -> Json:
    """Plain data as frozen JSON: mappings read-only (their order kept), lists tuples."""
    if isinstance(value, Fields):
        return value
    if isinstance(value, Mapping):
        return MappingProxyType({key: freeze(item) for key, item in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(item) for item in value)
    return value


def thaw(value: Json) -> Any:
    """Frozen JSON (or a Fields) as plain data again: dicts and lists, each a new one."""
    if isinstance(value, Fields):
        return to_dict(value)
    if isinstance(value, Mapping):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return [thaw(item) for item in value]
    return value


def child_path(path: str, key: str) -> str:
    """How a line names `key` inside `path`: a role's fields follow it after a space ("prefill engine_kwargs"), as
    the serve-config rules have always named them, the rest after a dot."""
    if not path:
        return key
    return f"{path} {key}" if path in (*PD_ROLES, COLLOCATED_ROLE) else f"{path}.{key}"


@dataclass(frozen=True)
class Fields(Mapping[str, Json]):
    """One mapping of a Ray (or vLLM) config. The typed fields carry Ray's key names; `extra`, in a class that has
    it, the keys passed through unread. A key is present iff it is in `key_order` (an explicit null stays null)."""

    key_order: tuple[str, ...] = field(default=(), kw_only=True, repr=False)

    # "module:Class" of the model this class mirrors (tests/unit/domain/serving/test_ray_mirror.py holds them equal).
    RAY_MODEL: ClassVar[str] = ""
    # The keys a class passes through into `extra`: None any (vLLM's and Ray's open mappings, checked elsewhere);
    # an empty set none, so an unknown key is refused at the parse.
    PASS_THROUGH: ClassVar[frozenset[str] | None] = frozenset()
    # Typed fields that hold a mapping of their own, parsed into this class.
    NESTED: ClassVar[Mapping[str, type[Fields]]] = {}
    # Whether the parse refuses a typed scalar of another JSON type.
    CHECKS_TYPES: ClassVar[bool] = True

    @classmethod
    @cache
    def typed(cls) -> tuple[str, ...]:
        """The typed fields' names (Ray's keys), in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.name not in ("key_order", "extra"))

    @classmethod
    @cache
    def defaults(cls) -> Mapping[str, Any]:
        """Each typed field's value when its key is absent."""
        return MappingProxyType(
            {
                f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
                for f in dataclasses.fields(cls)
                if f.name in cls.typed()
            }
        )

    @classmethod
    @cache
    def scalars(cls) -> Mapping[str, type]:
        """The typed fields that hold one JSON scalar, and its Python type (`int | None`: int)."""
        hints = typing.get_type_hints(cls)
        found = {}
        for name in cls.typed():
            kinds = [kind for kind in typing.get_args(hints[name]) or (hints[name],) if kind is not type(None)]
            if len(kinds) == 1 and kinds[0] in SCALAR_NAMES:
                found[name] = kinds[0]
        return MappingProxyType(found)

    @classmethod
    def passes_through(cls, key: str) -> bool:
        return "extra" in {f.name for f in dataclasses.fields(cls)} and (
            cls.PASS_THROUGH is None or key in cls.PASS_THROUGH
        )

    @classmethod
    def of(cls: type[F], **values: Any) -> F:
        """An object with `values` present, in the order given."""
        return put(cls(), **values)

    @classmethod
    def parse(cls: type[F], raw: Any, file: str, path: str) -> F:
        """`raw` (a mapping of the serve file at `path`) as this class: nested mappings parsed into theirs, values
        frozen; a key the class neither types nor passes through is refused, naming the closest one."""
        if not isinstance(raw, Mapping):
            raise in_serve_config(file, path, raw, mapping_of(cls.known_keys()))
        values: dict[str, Any] = {}
        extra: dict[str, Json] = {}
        for key, value in raw.items():
            if key in cls.NESTED:
                values[key] = cls.NESTED[key].parse(value, file, child_path(path, key))
            elif key in cls.typed():
                check_scalar(cls, key, value, file, path)
                values[key] = freeze(value)
            elif cls.passes_through(key):
                extra[key] = freeze(value)
            else:
                known = cls.known_keys()
                raise in_serve_config(
                    file,
                    child_path(path, str(key)),
                    NOT_SHOWN,
                    f"not a field of {cls.ray_name()};{did_you_mean(str(key), known)} fields: {yaml_text(known)}",
                )
        if extra:
            values["extra"] = MappingProxyType(extra)
        return cls(**values, key_order=tuple(raw))

    @classmethod
    def known_keys(cls) -> list[str]:
        return sorted({*cls.typed(), *(cls.PASS_THROUGH or ())})

    @classmethod
    def ray_name(cls) -> str:
        return cls.RAY_MODEL.rpartition(":")[2] or cls.__name__

    def __getitem__(self, key: str) -> Json:
        if key not in self.key_order:
            raise KeyError(key)
        return getattr(self, key) if key in self.typed() else self.extra[key]  # type: ignore[attr-defined]

    def __iter__(self) -> Iterator[str]:
        return iter(self.key_order)

    def __len__(self) -> int:
        return len(self.key_order)

    def __contains__(self, key: object) -> bool:
        return key in self.key_order


def put(obj: F, **values: Any) -> F:
    """`obj` with `values` assigned: a present key keeps its place, a new one goes last (a dict's assignment).
    A name that is no typed field goes to `extra`."""
    typed, extra = {}, dict(getattr(obj, "extra", EMPTY))
    order = list(obj.key_order)
    for key, value in values.items():
        if key in obj.NESTED and isinstance(value, Mapping) and not isinstance(value, Fields):
            value = obj.NESTED[key].of(**value)  # plain data given for a typed mapping: as the parse would type it
        if key in obj.typed():
            typed[key] = freeze(value)
        elif type(obj).passes_through(key):
            extra[key] = freeze(value)
        else:
            raise TypeError(f"{type(obj).__name__} has no field {key}")
        if key not in order:
            order.append(key)
    if extra:
        typed["extra"] = MappingProxyType(extra)
    return dataclasses.replace(obj, **typed, key_order=tuple(order))


def drop(obj: F, *keys: str) -> F:
    """`obj` without `keys` (a dict's pop; an absent key is no error): a typed field back to its default."""
    typed = {key: obj.defaults()[key] for key in keys if key in obj.typed()}
    extra = {k: v for k, v in getattr(obj, "extra", EMPTY).items() if k not in keys}
    if hasattr(obj, "extra"):
        typed["extra"] = MappingProxyType(extra)
    return dataclasses.replace(obj, **typed, key_order=tuple(k for k in obj.key_order if k not in keys))


def put_last(obj: F, **values: Any) -> F:
    """`obj` with `values` assigned after the other keys (a dict's pop, then assignment)."""
    return put(drop(obj, *values), **values)


def ensure(obj: F, *keys: str) -> F:
    """`obj` with an empty mapping for each of `keys` it lacks (a dict's setdefault(key, {}))."""
    missing = {key: obj.NESTED[key]() for key in keys if key not in obj.key_order}
    return put(obj, **missing) if missing else obj


def given(value: T | None, default: T) -> T:
    """A typed field's value, or the default its reader (Ray, vLLM) takes where the config leaves it out."""
    return default if value is None else value


def to_dict(obj: Fields) -> dict[str, Any]:
    """The plain data of `obj`, keys in its order: the one way back from the model to what Ray reads."""
    return {key: thaw(obj[key]) for key in obj.key_order}
