"""How wide a list of public address ranges may reach: one rule for the program's check of
`endpointPublicAccessCidrs` (ray_llm_eks/domain/security/hardening.py) and the policy pack's
`api-endpoint-restricted` (policy/rules.py). Standard library only, like facts.py: the pack imports it in its
own venv."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

# The most addresses the public Kubernetes API endpoint may admit outside dev: one /8 (16,777,216). The list
# names networks (an office, a VPN's or CI's egress); 0.0.0.0/0 cut into parts (0.0.0.0/1 and 128.0.0.0/1, or
# 256 /8s) is still the internet, and no single organisation's egress needs more than a /8. Counted over the
# union of the blocks, so neither one wide block nor many narrower ones get past it.
WIDEST_PUBLIC_ADDRESSES = 2**24


def reach(cidrs: Iterable[str]) -> int:
    """How many IPv4 addresses the blocks admit together (overlaps counted once; unreadable blocks skipped,
    their own check names them)."""
    networks = []
    for block in cidrs:
        try:
            networks.append(ipaddress.IPv4Network(str(block), strict=False))
        except ValueError:
            continue
    return sum(n.num_addresses for n in ipaddress.collapse_addresses(networks))


def too_wide(cidrs: Iterable[str]) -> bool:
    return reach(cidrs) > WIDEST_PUBLIC_ADDRESSES
