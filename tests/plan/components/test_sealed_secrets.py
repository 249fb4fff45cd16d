"""A stack after `make stack`: its apiKeys and hfToken are `secure:` values in the stack file, which an
offline plan cannot decrypt (they read as `[secret]`). `make plan` and `make policy` plan it, saying in one
line each what `pulumi up` will check on the decrypted value; `pulumi up` (offline_plan=False, values
handed over in plain text as the engine does) checks them. The real CLI's `secure:` values: .ci/run
(e2e/cli_stack.py)."""

from __future__ import annotations

import pytest

from offline import plan as plan_cli
from offline import policy_check
from offline.plan import root_message, run_program
from ray_llm_eks.adapters.stackfile import SecretValue
from tests.conftest import failing_run

NS = "ray-llm-eks:"
SEALED = "  ray-llm-eks:apiKeys:\n    secure: v1:c2FsdA==:a2V5\n  ray-llm-eks:hfToken:\n    secure: v1:c2FsdA==:dG9r\n"
DEFERRED = [
    "deferred to deploy time: apiKeys: keys separated by commas, spaces or newlines, each at least 16 characters "
    "of letters, digits and - . _ ~ + / (= at the end), e.g. openssl rand -hex 24 (a `secure:` value, which only "
    "`pulumi up` decrypts)",
    "deferred to deploy time: hfToken: a Hugging Face access token (hf_..., one word) (a `secure:` value, which "
    "only `pulumi up` decrypts)",
]


@pytest.fixture
def sealed_stack(project):
    (project / "Pulumi.mine.yaml").write_text((project / "Pulumi.dev.yaml").read_text() + SEALED)
    return project


def test_a_stack_after_make_stack_plans_and_says_what_waits_for_pulumi_up(sealed_stack, capsys):
    out = sealed_stack / "plan-mine"
    assert plan_cli.main(["--stack", "mine", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.count("deferred to deploy time: apiKeys") == 1
    assert [line.strip() for line in printed.splitlines() if "a `secure:` value" in line] == DEFERRED
    plan = run_program("mine", root=sealed_stack)
    assert plan.outputs["deferredChecks"] == DEFERRED
    for name in ("llm-api-keys", "llm-hf-token"):  # both Secrets declared, their content never shown
        assert plan.one("kubernetes:core/v1:Secret", name).inputs["stringData"] == "[secret]"
    assert not [w for w in plan.warnings if "apiKeys is not set" in w or "hfToken is not set" in w]


def test_the_policy_pack_runs_on_it(sealed_stack, monkeypatch, capsys):
    monkeypatch.setattr(policy_check, "ROOT", sealed_stack)
    assert policy_check.main(["--stack", "mine"]) == 0, capsys.readouterr()
    assert "policies passed" in capsys.readouterr().out


def test_shipped_stacks_defer_nothing(dev):
    assert "deferredChecks" not in dev.outputs and "offline plan cannot run" not in dev.summary()


def test_with_the_key_check_off_only_the_token_waits(sealed_stack):
    plan = run_program("mine", {NS + "apiKeyCheck": False}, root=sealed_stack)
    assert plan.outputs["deferredChecks"] == DEFERRED[1:]


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [
        ("apiKeys", "sk-canary", "1 key(s) shorter than 16 characters"),
        ("apiKeys", "sk-canary-0123456789;sk-other-0123456789", "keys separated by commas, spaces or newlines"),
        ("hfToken", "canary-token", "a Hugging Face access token (hf_..., one word)"),
        ("hfToken", "hf_canary token", "a Hugging Face access token"),
        ("hfToken", "hf_canary\n", "a Hugging Face access token"),  # a pasted line break
    ],
)
def test_pulumi_up_checks_the_decrypted_value_without_showing_it(key, value, allowed):
    good = {NS + "apiKeys": SecretValue("k" * 24), NS + "hfToken": SecretValue("hf_" + "x" * 34)}
    error, _ = failing_run({**good, NS + key: SecretValue(value)}, offline_plan=False)
    message = root_message(error)  # the SDK wraps it in a line per enclosing resource
    assert message.startswith(f"invalid config {NS}{key} = '[secret]': {allowed}"), message  # never the value
    assert value.split()[0] not in message


def test_pulumi_up_with_good_values_declares_both_secrets():
    values = {NS + "apiKeys": SecretValue("k" * 24), NS + "hfToken": SecretValue("hf_" + "x" * 34)}
    plan = run_program("dev", values, offline_plan=False)
    assert "deferredChecks" not in plan.outputs
    assert {"llm-api-keys", "llm-hf-token"} <= {r.name for r in plan.of_type("kubernetes:core/v1:Secret")}
