"""The serving rehearsal: the stack's own serve config, run for real on this machine's CPU (`make rehearse`)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the checkout the rehearsal runs from
