"""The stack read, checked and pinned before any resource: a bad value or an AWS refusal stops the program here, in
one line; what is only worth a warning is logged."""

from dataclasses import dataclass

import pulumi

from ray_llm_eks.adapters import environment, registry, stack
from ray_llm_eks.adapters.aws_answers import PulumiAwsAnswers
from ray_llm_eks.domain.checks import known_issues, placeholders, preflight
from ray_llm_eks.domain.core.errors import ConfigError
from ray_llm_eks.domain.core.yaml_files import YamlSyntaxError
from ray_llm_eks.domain.fit import pool_use
from ray_llm_eks.domain.loading import config
from ray_llm_eks.domain.platform import pins
from ray_llm_eks.domain.security import secret_content
from ray_llm_eks.domain.stack import cost
from ray_llm_eks.domain.stack.settings import Settings


@dataclass(frozen=True)
class Start:
    settings: Settings  # typed, validated, the serving image pinned
    checks: list[str]  # the preflight's lines (AWS offerings, quotas, versions): a stack output
    secrets: stack.StackSecrets  # Pulumi secret Outputs, apart from Settings
    sealed: frozenset[str]  # offline, the `secure:` values: their content is checked at deploy time
    deferred: list[str]  # lines of what `make plan` cannot check
    estimate: cost.CostEstimate


def start() -> Start:
    try:
        stack_config = stack.running_stack()
        settings = stack.load_settings(stack_config)
        mode = settings.deploy_mode
        for line in config.secret_checks(settings, deploying=stack.deploying()):
            pulumi.log.warn(line)
        for line in placeholders.check(settings, deploying=stack.deploying()):  # values copied from documentation
            pulumi.log.warn(line)
        for line in known_issues.warnings(settings):  # upstream bugs on this stack's path, warned only
            pulumi.log.warn(line)
        # AWS offerings, quotas, version calendar: only for the cluster this stack builds.
        checks = [] if mode.existing_cluster else preflight.run(settings, PulumiAwsAnswers(), environment.today())
        # The image's digest and the add-ons' versions: kept in the stack file (`make pin`), required outside dev.
        addons = dict(settings.cluster.addon_versions)
        missing = pins.unpinned(settings.serving.image, addons, not mode.existing_cluster)
        for line in pins.require_pinned(settings.hardening.environment, missing) if stack.deploying() else []:
            pulumi.log.warn(line)
        # The serving image by digest (tag kept): looked up in its registry at preview/up, a placeholder offline.
        settings = registry.with_pinned_image(settings, deploying=stack.deploying())
    except (ConfigError, YamlSyntaxError, preflight.PreflightError, registry.DigestLookupFailed) as error:
        if environment.offline_plan_set():  # `make plan` and the tests want the typed error
            raise
        raise pulumi.RunError(str(error)) from None  # the CLI prints it as one line, no stack trace
    sealed = stack.sealed_secrets()
    for warning in pool_use.idle_gpu_warnings(settings, stack.changed_stack_passes(stack_config)):
        pulumi.log.warn(warning)  # GPUs paid for and unused: said at `pulumi up` and in `make plan`
    for line in checks:
        if line.startswith("warning:"):
            pulumi.log.warn(line.removeprefix("warning: "))
    return Start(
        settings,
        checks,
        stack.stack_secrets(),
        sealed,
        secret_content.deferred(sealed, settings.hardening.api_key_check),
        cost.estimate(settings, settings.prices),
    )
