"""What keeps the stack closed: hardening settings, Pod Security levels, NetworkPolicies, the checks of secrets'
contents."""
