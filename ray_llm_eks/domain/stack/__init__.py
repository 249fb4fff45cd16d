"""The stack as one typed value (Settings) and what it costs."""
