"""Read Pulumi.yaml and Pulumi.<stack>.yaml the way the Pulumi CLI does, and refuse what it refuses
(a project file that breaks Pulumi's project schema, a key the project declares that the stack does
not set) and what the program refuses (a key it does not read, a value of the wrong type: the keys
are in ray_llm_eks/domain/data/config_keys.yaml). `secure:` values are never decrypted: they become `[secret]`."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import jsonschema

from ray_llm_eks.domain.core import config_keys, yaml_files
from ray_llm_eks.domain.core.errors import NOT_SHOWN, PROJECT, UNSET, ConfigError, did_you_mean, yaml_text
from ray_llm_eks.domain.core.facts import SECRET_MARKER
from ray_llm_eks.domain.platform import field_checks

SECRET_TEXT = SECRET_MARKER  # what a secret value reads as anywhere outside Pulumi
# Vendored copy of Pulumi's project-file schema, shipped with the package (`make check-upstream` compares it with the
# pinned SDK's own): a project folder a caller names need not be a checkout.
PROJECT_SCHEMA = Path(__file__).resolve().parent / "data" / "pulumi-project.schema.json"


class StackFileError(ValueError):
    """No such stack file, or a project file the Pulumi CLI would refuse. A bad key or value in a stack file
    is a ConfigError naming the file."""


@dataclass(frozen=True)
class SecretValue:
    """A test override standing for `pulumi config set --secret KEY VALUE`: handed to the program
    as a secret config value, as the CLI does after decrypting it."""

    plaintext: str


@dataclass(frozen=True)
class StackConfig:
    project: str
    stack: str
    values: dict[str, str]  # full key (namespace:name) -> raw string, as the CLI hands it over
    secret_keys: frozenset[str]
    # The stack file the values were read from, for the line refusing one (None where the engine handed them
    # over: at `pulumi up` a value may come from an ESC environment or the CLI's --config-file, not the file)
    file: str | None = None
    # Where a path the stack names (serveConfig: my-serve.yaml) is beside: the stack file's folder, which is the
    # project's; None where the engine handed the values over (the program then runs in the project's folder)
    folder: Path | None = None


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _load_yaml(path: Path):
    return yaml_files.parse_pulumi(path.read_text(encoding="utf-8"), _shown(path))


def provider_namespaces(root: Path) -> list[str]:
    """Config namespaces besides the project's that a stack may set: `pulumi` (the engine's own, e.g.
    pulumi:tags) and one per provider package the program installs (pulumi-aws -> aws)."""
    pins = (root / "requirements.txt").read_text(encoding="utf-8").splitlines()
    providers = {m.group(1) for line in pins if (m := re.match(r"pulumi-([a-z0-9-]+)==", line.strip()))}
    return sorted({"pulumi", *providers})


def project_schema() -> dict:
    return json.loads(PROJECT_SCHEMA.read_text(encoding="utf-8"))


def load_project(root: Path) -> dict:
    project = _load_yaml(root / "Pulumi.yaml")
    errors = sorted(jsonschema.Draft202012Validator(project_schema()).iter_errors(project), key=str)
    if errors:
        where = "/".join(str(p) for p in errors[0].absolute_path)
        raise StackFileError(f"Pulumi.yaml breaks Pulumi's project schema at '{where}': {errors[0].message}")
    return project


def stack_names(root: Path) -> list[str]:
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in root.glob("Pulumi.*.yaml"))


def _stack_hint(stack: str, root: Path) -> str:
    """Why a stack name names no file, where it is one of the usual slips: the file's name for the stack's, a
    `.yml` file (the Pulumi CLI reads only `Pulumi.<stack>.yaml`), a letter's case (stack names are
    case-sensitive), a typo."""
    named = re.fullmatch(r"(?:.*/)?Pulumi\.(.+)\.ya?ml", stack)
    if named:
        return f" (STACK is the name between Pulumi. and .yaml: STACK={named.group(1)})"
    if (root / f"Pulumi.{stack}.yml").exists():
        return f" (Pulumi.{stack}.yml is there: the Pulumi CLI reads only .yaml, rename it Pulumi.{stack}.yaml)"
    same = [name for name in stack_names(root) if name.lower() == stack.lower()]
    if same:
        return f" (stack names are case-sensitive: STACK={same[0]})"
    typo = did_you_mean(stack, {name: f"STACK={name}" for name in stack_names(root)})
    return f" ({typo.strip()})" if typo else ""


def _matches(declared_type: str | None, items: dict | None, value, top: bool = True) -> bool:
    """The CLI's type check of a declared key (Pulumi CLI v3.274.1 pkg/v3 workspace/config.go
    validateStackConfigValue, by sdk/v3 go/common/workspace/project.go ValidateConfigValue). A quoted whole
    number or true/false passes: it is what `pulumi config set KEY VALUE` writes without `--type`, the program
    is handed the same text either way, and the program reads it as the unquoted value. Not inside a list
    (`top` False): the CLI hands a list over as JSON, where a quoted "42" stays a string."""
    if declared_type is None:
        return True
    if declared_type == "string":
        return isinstance(value, str)
    if declared_type == "integer":
        quoted = top and isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]+", value) is not None
        return quoted or (isinstance(value, int) and not isinstance(value, bool))
    if declared_type == "boolean":
        return isinstance(value, bool) or (top and isinstance(value, str) and value.lower() in ("true", "false"))
    if declared_type == "array":
        return isinstance(value, list) and all(
            _matches((items or {}).get("type"), (items or {}).get("items"), v, top=False) for v in value
        )
    return False


_TYPE_TEXT = {"string": "a string", "integer": "a whole number", "boolean": "true or false"}


def _type_text(declared_type: str | None, items: dict | None) -> str:
    """What a declared type allows, in YAML's words."""
    if declared_type == "array":
        of = _type_text((items or {}).get("type"), None) if items else "a value"
        return f"a list of {of.removeprefix('a ')}s"
    return _TYPE_TEXT.get(declared_type or "", f"a {declared_type}")


def _raw_string(value) -> str:
    """How the CLI passes a value to the program: strings as is, booleans/numbers as text,
    lists and mappings as JSON, every mapping's keys sorted (Go's encoding/json sorts map keys: Pulumi
    sdk v3.274.1 go/common/resource/config/plaintext.go Plaintext.marshalText). So `make plan` sees
    gpuPools in the order `pulumi up` does, whatever order the stack file lists them in. A number is
    Go's JSON text of it too (object.go object.MarshalString), so `8.03e9` arrives as `8030000000`."""
    if isinstance(value, str):
        return value
    return _go_json(value)


def _go_json(value) -> str:
    """JSON as json.dumps writes it (the spacing the plans have always had: the program parses it), with
    numbers as Go's encoding/json writes them (encode.go floatEncoder: the shortest digits, no exponent from
    1e-6 to 1e21, `e-7` not `e-07`); NaN and infinities, which Go refuses, are refused before this."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {_go_json(value[k])}" for k in sorted(value)) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_go_json(v) for v in value) + "]"
    if isinstance(value, float):
        if value != 0 and not 1e-6 <= abs(value) < 1e21:
            return re.sub(r"e([-+])0(\d)$", r"e\1\2", repr(value))
        fixed = format(Decimal(repr(value)), "f")
        return fixed.rstrip("0").rstrip(".") if "." in fixed else fixed
    return json.dumps(value)


# What YAML 1.1 (PyYAML, many editors' highlighting) reads as booleans and yaml.v3, the CLI's library, as text.
YAML11_BOOLEANS = frozenset(("yes", "no", "on", "off", "y", "n"))
# The fields of a stack file (Pulumi CLI v3.274.1 sdk/v3 go/common/workspace/project.go ProjectStack's yaml tags).
STACK_FILE_FIELDS = ("config", "encryptedkey", "encryptionsalt", "environment", "secretsprovider")


def _not_finite(value) -> bool:
    if isinstance(value, dict):
        return any(_not_finite(v) for v in value.values())
    if isinstance(value, list):
        return any(_not_finite(v) for v in value)
    return isinstance(value, float) and not math.isfinite(value)


def _check_shape(doc, file: str) -> None:
    """A stack file the CLI reads as no config at all: empty, or keys beside `config:` instead of under it (the
    CLI ignores fields a stack file does not have: sdk/v3 go/common/workspace/project.go ProjectStack)."""
    if not isinstance(doc, (dict, type(None))):
        raise StackFileError(f"{file} holds {yaml_text(doc)}: a stack file is a mapping with a `config:` mapping in it")
    doc = doc or {}
    config = doc.get("config")
    if config is not None and not isinstance(config, dict):
        raise ConfigError("config", config, "a mapping of keys to values, e.g. `config: {aws:region: us-east-1}`", file)
    # A stack file's own fields (ProjectStack's yaml tags): anything else is a key meant for `config:`, or a typo.
    for key in sorted(str(k) for k in doc if k not in STACK_FILE_FIELDS):
        if ":" in key or key in config_keys.declared():
            way = f"config keys go under `config:` (indented beneath it, as {key})"
        else:
            fix = did_you_mean(key, STACK_FILE_FIELDS).strip() or "remove it;"
            way = f"{fix} fields: {yaml_text(STACK_FILE_FIELDS)}"
        raise StackFileError(f"{file}: {key} is not a field of a stack file (the Pulumi CLI ignores it): {way}")


def load_stack(stack: str, root: Path, overrides: dict | None = None) -> StackConfig:
    """Config of one stack, checked against the project's declarations. `overrides` (tests) maps
    keys to YAML-level values and replaces/extends the file's; a None value removes a key."""
    project = load_project(root)
    name = project["name"]
    path = root / f"Pulumi.{stack}.yaml"
    if not stack.strip():
        raise StackFileError(
            f"STACK is empty: STACK=<stack>, the name between Pulumi. and .yaml; stacks: {yaml_text(stack_names(root))}"
        )
    if not path.exists():
        hint = _stack_hint(stack, root)
        raise StackFileError(f"no stack file {path.name}{hint}; stacks: {yaml_text(stack_names(root))}")
    doc = _load_yaml(path)
    _check_shape(doc, path.name)
    config = dict((doc or {}).get("config") or {})
    for key, value in (overrides or {}).items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    if not config and name == PROJECT:  # this program needs aws:region; another project may need nothing
        what = "is empty" if not doc else "has no config"
        raise StackFileError(
            f"{path.name} {what}: it needs a `config:` mapping with at least aws:region (start from a shipped "
            f"stack's: git show HEAD:Pulumi.dev.yaml > {path.name})"
        )
    declared = config_keys.declared()

    values: dict[str, str] = {}
    secrets: set[str] = set()
    namespaces = [name, *provider_namespaces(root)]
    for key, value in config.items():
        namespace, _, short = key.partition(":") if ":" in key else (name, ":", key)
        full = f"{namespace}:{short}"
        if namespace not in namespaces:
            # The CLI would pass a key of an unknown namespace to nobody: a typo that silently does nothing.
            hint = did_you_mean(namespace, {n: f"{n}:{short}" for n in namespaces})
            allowed = f"namespace {namespace} is read by nobody;{hint} namespaces: {yaml_text(namespaces)}"
            raise ConfigError(full, NOT_SHOWN, allowed, path.name)
        config_keys.check_known(full, path.name)
        is_secret = isinstance(value, SecretValue) or (isinstance(value, dict) and set(value) == {"secure"})
        if value is None:
            # No key takes null (the program would read the text "None"); leaving the key out gives its default.
            raise ConfigError(full, None, "a value: leave the key out to get its default", path.name)
        if namespace == name:
            decl = declared[short] if isinstance(declared[short], dict) else {}
            if decl.get("secret") and not is_secret:
                raise ConfigError(
                    full,
                    "(plain text, not shown)",
                    f"a secret: pulumi config set --secret {short} <value> (it encrypts it in the stack file)",
                    path.name,
                )
            if not is_secret and not _matches(decl.get("type"), decl.get("items"), value):
                allowed = _type_text(decl.get("type"), decl.get("items"))
                if decl.get("type") == "string" and isinstance(value, (bool, int, float)):
                    read_as = "boolean" if isinstance(value, bool) else "number"
                    fix, why = field_checks.NUMBER_SLIPS.get(short, (lambda _: None, ""))
                    fixed = fix(yaml_text(value))
                    quote = f"{allowed} (YAML reads {yaml_text(value)} as a {read_as}: quote it)"
                    allowed = f"{fixed} ({why})" if fixed else quote
                elif decl.get("type") == "boolean" and isinstance(value, str) and value.lower() in YAML11_BOOLEANS:
                    allowed += f" (the Pulumi CLI reads {value} as the text {yaml_text(value)}, not a boolean)"
                raise ConfigError(full, value, allowed, path.name)
        if _not_finite(value):
            # Go's encoding/json cannot write them: the CLI fails before the program runs (object.go MarshalJSON).
            raise ConfigError(full, value, "a finite number (the Pulumi CLI cannot pass .nan or .inf)", path.name)
        if is_secret:
            secrets.add(full)
            values[full] = value.plaintext if isinstance(value, SecretValue) else SECRET_TEXT
        else:
            values[full] = _raw_string(value)

    # Keys declared in Pulumi.yaml: the CLI merges their default where the stack sets nothing, and
    # refuses the stack if one has no default (Pulumi CLI v3.274.1 pkg/v3 workspace/config.go mergeConfig).
    missing = []
    for short, decl in (project.get("config") or {}).items():
        full = short if ":" in short else f"{name}:{short}"
        if full in values:
            continue
        decl = decl if isinstance(decl, dict) else {"default": decl}
        if "default" in decl or "value" in decl:
            values[full] = _raw_string(decl.get("default", decl.get("value")))
        elif full.startswith(f"{name}:"):
            missing.append(short)
    if missing:
        short = sorted(missing)[0]
        raise ConfigError(short, UNSET, "required: Pulumi.yaml declares it without a default", path.name)
    return StackConfig(name, stack, values, frozenset(secrets), path.name, root)
