"""Offline plan: run the real Pulumi program under Pulumi's mocks, with a stack file's config and no
cloud, credentials or Pulumi CLI, and record everything it declares. Used by `make plan` and tests."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the checkout: offline/ is one below it
