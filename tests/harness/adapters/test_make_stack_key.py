"""`make stack` gives a stack without apiKeys one random key, through stdin into `pulumi config set
--secret`, and prints it nowhere. Run against a stand-in `pulumi` on PATH that records its calls and
answers `config get` as the real CLI does (pulumi v3.274.1 pkg/cmd/pulumi/config/config.go: "configuration
key '...' not found for stack '...'" on stderr, exit 255)."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

FAKE = r"""#!/bin/bash
echo "$*" >> "$FAKE_DIR/calls"
case "$1 $2" in
  "whoami --verbose") echo "Backend URL: file://$FAKE_DIR/state";;
  "stack select") ;;
  "config get")
    if [[ -f "$FAKE_DIR/$3" ]]; then cat "$FAKE_DIR/$3"; exit 0; fi
    if [[ -f "$FAKE_DIR/broken" ]]; then
      echo "error: could not decrypt configuration value: bad passphrase" >&2; exit 255
    fi
    echo "error: configuration key '$3' not found for stack 'mine'" >&2; exit 255;;
  "config set") cat > "$FAKE_DIR/$4.stdin";;
esac
"""


@pytest.fixture
def fake(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pulumi = bin_dir / "pulumi"
    pulumi.write_text(FAKE)
    pulumi.chmod(pulumi.stat().st_mode | stat.S_IEXEC)
    return tmp_path


def _make_stack(fake: Path, **changes: str | None) -> subprocess.CompletedProcess:
    """`make stack STACK=mine`; `changes`: environment variables to set (a value) or take out (None)."""
    env = {
        **os.environ,
        "PATH": f"{fake / 'bin'}:{os.environ['PATH']}",
        "FAKE_DIR": str(fake),
        "PULUMI_BACKEND_URL": f"file://{fake / 'state'}",
        "PULUMI_CONFIG_PASSPHRASE": "x",
    }
    for name, value in changes.items():
        env.pop(name, None)
        if value is not None:
            env[name] = value
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), "stack", "STACK=mine"],
        env=env,
        capture_output=True,
        text=True,
    )


def _calls(fake: Path) -> list[str]:
    return (fake / "calls").read_text().splitlines()


def test_a_stack_without_keys_gets_one_random_key_through_stdin_only(fake):
    run = _make_stack(fake)
    assert run.returncode == 0, run.stderr
    key = (fake / "apiKeys.stdin").read_text().strip()
    assert re.fullmatch(r"[0-9a-f]{48}", key)
    assert "config set --secret apiKeys --stack mine" in _calls(fake)
    assert key not in run.stdout + run.stderr + "".join(_calls(fake))
    assert "pulumi config get apiKeys --stack mine" in run.stdout
    (fake / "apiKeys.stdin").unlink()
    _make_stack(fake)
    assert (fake / "apiKeys.stdin").read_text().strip() != key  # another stack, another key


def test_a_stack_with_keys_keeps_them(fake):
    (fake / "apiKeys").write_text("sk-users-own-key-0123456789\n")
    run = _make_stack(fake)
    assert run.returncode == 0 and not (fake / "apiKeys.stdin").exists()
    assert "sk-users-own-key" not in run.stdout + run.stderr


def test_a_config_that_cannot_be_read_stops_make_stack_and_is_not_overwritten(fake):
    (fake / "broken").write_text("")
    run = _make_stack(fake)
    assert run.returncode != 0 and "could not decrypt" in run.stderr
    assert not (fake / "apiKeys.stdin").exists()


def test_no_key_where_the_stack_turns_the_check_off(fake):
    (fake / "apiKeyCheck").write_text("false\n")
    run = _make_stack(fake)
    assert run.returncode == 0 and not (fake / "apiKeys.stdin").exists()


def test_the_logged_in_local_backend_is_read_from_whoami_whole(fake):
    """Without PULUMI_BACKEND_URL the backend is the one `pulumi whoami --verbose` names ("Backend URL:
    file:///..."): the colon inside the URL must not cut it, or the passphrase check and provider are skipped."""
    run = _make_stack(fake, PULUMI_BACKEND_URL=None, PULUMI_CONFIG_PASSPHRASE=None, PULUMI_CONFIG_PASSPHRASE_FILE=None)
    assert run.returncode != 0 and "Set PULUMI_CONFIG_PASSPHRASE" in run.stdout + run.stderr
    assert not any(c.startswith("stack select") for c in _calls(fake))
    run = _make_stack(fake, PULUMI_BACKEND_URL=None)
    assert run.returncode == 0, run.stderr
    assert "stack select --create --secrets-provider passphrase mine" in _calls(fake)
