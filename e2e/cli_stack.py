"""`make cli-stack`: a stack whose apiKeys and hfToken the real Pulumi CLI set, planned and checked by the
policy pack the way a user's stack is after `make stack`.

    python -m e2e.cli_stack [--stack dev]

The CLI is the e2e build's (go_binaries/build.py, PULUMI_VERSION). In a temporary folder it gets its own home, a
local file backend and the passphrase secrets provider (a random passphrase, as `make stack` sets up a
local stack); `pulumi stack init`, then `pulumi config set --secret` for both keys, each value on the CLI's
standard input (never on a command line, never printed). The stack file it wrote, with the shipped stack's
config beside the two `secure:` values, goes into the checkout as Pulumi.<name>.yaml for `make plan` and
`make policy` (python -m offline.plan / offline.policy_check), and is removed again whatever happens. The
plan must pass, say that both checks wait for `pulumi up`, and show neither value anywhere; and the CLI's own
reading of the file (`pulumi config --json`) must equal ray_llm_eks/adapters/stackfile.py's, value for value.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from go_binaries.build import bin_dirs
from ray_llm_eks.adapters.stackfile import load_stack

ROOT = Path(__file__).resolve().parent.parent
STACK = "ci-cli-secrets"  # the checkout's Pulumi.<STACK>.yaml exists only while this runs
SECRET_KEYS = ("apiKeys", "hfToken")
# ray_llm_eks/domain/security/secret_content.py deferred
DEFERRED = tuple(f"deferred to deploy time: {key}: " for key in SECRET_KEYS)


class Failed(RuntimeError):
    """One line saying which step failed (never a secret)."""


def pulumi_cli() -> Path:
    return bin_dirs()["pulumi"] / "pulumi"


def _run(argv: list[str], what: str, cwd: Path, env: dict[str, str] | None = None, stdin: str | None = None) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise Failed(f"{what} exited {done.returncode}: {tail[0]}")
    return done.stdout + done.stderr


def cli_stack_file(cli: Path, base: str, values: dict[str, str], tmp: Path) -> str:
    """The text of a stack file the CLI wrote: `base` (a shipped stack file) and `values` set as secrets."""
    project, state = tmp / "project", tmp / "state"
    project.mkdir()
    state.mkdir()
    for name in ("Pulumi.yaml", "requirements.txt"):  # the project, and the providers whose namespaces it reads
        shutil.copy(ROOT / name, project / name)
    env = os.environ | {
        "PULUMI_HOME": str(tmp / "home"),
        "PULUMI_BACKEND_URL": f"file://{state}",
        "PULUMI_CONFIG_PASSPHRASE": secrets.token_hex(16),
        "PULUMI_SKIP_UPDATE_CHECK": "true",
    }
    env.pop("PULUMI_CONFIG_PASSPHRASE_FILE", None)
    _run([str(cli), "stack", "init", STACK, "--secrets-provider", "passphrase", "--non-interactive"],
         "pulumi stack init", project, env)  # fmt: skip
    path = project / f"Pulumi.{STACK}.yaml"
    path.write_text(path.read_text() + (ROOT / f"Pulumi.{base}.yaml").read_text())  # its salt, then the config
    # Before `config set`, which rewrites the file in the CLI's own spelling (`1e0` becomes `1`).
    listed = _run([str(cli), "config", "--stack", STACK, "--json"], "pulumi config --json", project, env)
    try:
        ours = load_stack(STACK, project).values
    except ValueError as err:  # the CLI took the file, ray_llm_eks/adapters/stackfile.py did not
        raise Failed(f"ray_llm_eks/adapters/stackfile.py refuses a stack file the CLI reads: {err}") from None
    same_reading(json.loads(listed), ours)
    for key, value in values.items():
        _run([str(cli), "config", "set", "--secret", key, "--stack", STACK, "--non-interactive"],
             f"pulumi config set --secret {key}", project, env, stdin=value)  # fmt: skip
    return path.read_text()


def same_reading(cli: dict, ours: dict[str, str]) -> None:
    """Every plain value as the CLI hands it to the program (`pulumi config --json`: mappings and lists as JSON
    text) equals what ray_llm_eks/adapters/stackfile.py makes of the same file; secrets are listed without a value."""
    for key, entry in sorted(cli.items()):
        if entry.get("secret"):
            continue
        theirs, mine = entry["value"], ours.get(key)
        if mine is None or (theirs != mine and not ("objectValue" in entry and _canonical(mine) == _canonical(theirs))):
            raise Failed(f"{key}: the Pulumi CLI reads {theirs!r}, ray_llm_eks/adapters/stackfile.py {mine!r}")


def _canonical(text: str) -> str:
    """JSON text without its spacing (the CLI's is Go's compact form); 2 and 2.0 stay apart."""
    return json.dumps(json.loads(text), sort_keys=True)


def check(cli: Path, base: str, checkov: Path | None = None) -> str:
    """Set, plan and check the stack; the summary line, or Failed."""
    values = {"apiKeys": secrets.token_hex(24), "hfToken": "hf_" + secrets.token_hex(17)}
    target = ROOT / f"Pulumi.{STACK}.yaml"
    if target.exists():
        raise Failed(f"{target.name} exists already: a stack of that name is this check's own")
    with tempfile.TemporaryDirectory(prefix="ray-llm-eks-cli-stack-") as folder:
        tmp = Path(folder)
        text = cli_stack_file(cli, base, values, tmp)
        for key, value in values.items():
            if value in text or f"ray-llm-eks:{key}:\n    secure: v1:" not in text:
                raise Failed(f"the CLI did not store {key} as a secure: value")
        try:
            target.write_text(text)
            out = tmp / "plan"
            python = sys.executable
            shown = _run([python, "-m", "offline.plan", "--stack", STACK, "--out", str(out)], "make plan", ROOT)
            policy = [python, "-m", "offline.policy_check", "--stack", STACK]
            shown += _run([*policy, *(["--checkov", str(checkov)] if checkov else [])], "make policy", ROOT)
            written = "".join(p.read_text() for p in out.rglob("*") if p.is_file())
        finally:
            target.unlink(missing_ok=True)
    for key, value in values.items():
        if value in shown or value in written:
            raise Failed(f"the plan shows {key}'s value")
    missing = [line for line in DEFERRED if line not in shown]
    if missing:
        raise Failed(f"the plan does not say {missing[0]!r}...")
    return (f"cli-stack: {base} with apiKeys and hfToken set by {cli.parent.name} (passphrase, local backend): "
            f"planned, policy pack{' and checkov' if checkov else ''} passed, "
            "both checks deferred to pulumi up")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", default="dev", help="the shipped stack whose config the CLI's stack copies")
    parser.add_argument("--checkov", type=Path, help="checkov, run over the plan as make policy runs it")
    args = parser.parse_args(argv)
    cli = pulumi_cli()
    if not cli.is_file():
        print(f"cli-stack: no Pulumi CLI at {cli}: build it first (python -m go_binaries.build)", file=sys.stderr)
        return 2
    try:
        print(check(cli, args.stack, args.checkov))
    except (Failed, subprocess.TimeoutExpired) as err:
        print(f"cli-stack FAILED: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
