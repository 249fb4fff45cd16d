"""The upstream artefacts the checks read, at their pinned versions: a package installed in .venv
(`Installed`), a wheel from PyPI (`Wheel`), a Go module (`GoModule`), each a `Source` of files; the pins they
are fetched at (`pinned`); and cutting one function, method or class's text out of a file (`python_symbol`,
`go_func`, `class_fields`)."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from tools.upstream import ROOT


def cache_dir() -> Path:
    from ray_llm_eks.adapters import environment

    path = environment.cache_dir() / "upstream"
    path.mkdir(parents=True, exist_ok=True)
    return path


def pinned(file: str, package: str) -> str:
    """The version `package==X` pins in a requirements file of ours."""
    found = re.search(rf"^{re.escape(package)}(\[[^\]]*\])?==(\S+)", (ROOT / file).read_text(), re.M | re.I)
    if not found:
        raise Unavailable(f"{file} pins no {package}")
    return found.group(2)


class Unavailable(Exception):
    """The upstream artefact could not be had here (no network, no Go, not installed)."""


class Source:
    """Files of one upstream artefact at one version."""

    name: str
    version: str

    def read(self, path: str) -> str:
        raise NotImplementedError

    def paths(self) -> list[str]:
        """Every file of the artefact, relative to its root."""
        raise NotImplementedError

    def python_sources(self, dirs: tuple[str, ...]) -> dict[str, str]:
        """path -> text of every .py file under `dirs` (tests left out)."""
        wanted = [p for p in self.paths() if p.startswith(dirs) and p.endswith(".py") and "/tests/" not in p]
        return {p: self.read(p) for p in sorted(wanted)}

    def __str__(self) -> str:
        return f"{self.name} {self.version}"


class Installed(Source):
    """A distribution installed in the running venv, which must be the pinned version."""

    def __init__(self, dist: str, version: str):
        self.name, self.version = dist, version
        try:
            found = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            raise Unavailable(f"{dist} is not installed in {sys.prefix}") from None
        if found != version:
            raise Unavailable(f"{sys.prefix} has {dist} {found}, the pin says {version}: run make test to reinstall")
        self.dist = importlib.metadata.distribution(dist)

    def read(self, path: str) -> str:
        return Path(self.dist.locate_file(path)).read_text()

    def paths(self) -> list[str]:
        return [str(f) for f in self.dist.files or ()]


class Wheel(Source):
    """A wheel from PyPI, downloaded once into the cache (pip download, no dependencies)."""

    def __init__(self, project: str, version: str):
        self.name, self.version = project, version
        target = cache_dir() / "wheels"
        stem = project.replace("-", "_").lower()
        found = [p for p in target.glob("*.whl") if p.name.lower().startswith(f"{stem}-{version}-")]
        if not found:
            command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(target)]
            run = subprocess.run([*command, f"{project}=={version}"], capture_output=True, text=True)
            if run.returncode:
                raise Unavailable(f"pip download {project}=={version}: {run.stderr.strip().splitlines()[-1:]}")
            found = [p for p in target.glob("*.whl") if p.name.lower().startswith(f"{stem}-{version}-")]
        self.path = found[0]
        self.zip = zipfile.ZipFile(self.path)

    def read(self, path: str) -> str:
        return self.zip.read(path).decode()

    def paths(self) -> list[str]:
        return self.zip.namelist()


class GoModule(Source):
    """A Go module from the Go module proxy (`go mod download`, into Go's own module cache)."""

    def __init__(self, module: str, version: str):
        self.name, self.version = module, version
        try:
            with tempfile.TemporaryDirectory() as empty:  # outside any go.mod
                run = subprocess.run(
                    ["go", "mod", "download", "-json", f"{module}@{version}"],
                    capture_output=True,
                    text=True,
                    cwd=empty,
                )
        except FileNotFoundError:
            raise Unavailable("no `go` on PATH (Go modules are read with go mod download)") from None
        info = json.loads(run.stdout or "{}")
        if run.returncode or "Dir" not in info:
            raise Unavailable(f"go mod download {module}@{version}: {info.get('Error') or run.stderr.strip()}")
        self.dir = Path(info["Dir"])

    def read(self, path: str) -> str:
        return (self.dir / path).read_text()


def python_symbol(source: str, dotted: str) -> str:
    """The source text of a top-level function or class, or `Class.method`."""
    nodes = ast.parse(source).body
    node = None
    for name in dotted.split("."):
        node = next(
            (
                n
                for n in nodes
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name
            ),
            None,
        )
        if node is None:
            raise LookupError(f"no {dotted}")
        nodes = node.body
    return ast.get_source_segment(source, node)


def go_func(source: str, name: str) -> str:
    """The text of a top-level Go function or method (gofmt'd: it ends at the first `}` in column 0)."""
    found = re.search(rf"^func (\([^)]*\) )?{re.escape(name)}\(.*?^}}$", source, re.M | re.S)
    if not found:
        raise LookupError(f"no func {name}")
    return found.group(0)


def class_fields(source: str, name: str) -> set[str]:
    """Annotated field names of a (pydantic) class."""
    cls = ast.parse(python_symbol(source, name)).body[0]
    return {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
