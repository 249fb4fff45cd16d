"""An OpenAI-API client that proves (smoke) and measures (bench) an endpoint; needs only `openai`."""
