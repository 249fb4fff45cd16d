"""An OpenAI-API client that proves (smoke) and measures (bench) an endpoint; needs only `openai`."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the checkout: its stack files, its AIPerf plots
