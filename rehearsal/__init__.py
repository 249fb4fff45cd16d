"""The serving rehearsal: the stack's own serve config, run for real on this machine's CPU (`make rehearse`)."""
