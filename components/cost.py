"""What a stack costs per hour while it runs, from a dated price table (never a guess: a price we do
not have is reported as unknown, and the total says it is incomplete)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from components.errors import ConfigError

if TYPE_CHECKING:
    from components.config import Settings

HOURS_PER_MONTH = 730  # AWS's convention for monthly prices

# On-demand Linux, USD per hour, by region. Sources: us-east-1 from aws/karpenter-provider-aws
# pkg/providers/pricing/zz_generated.pricing_aws.go (generated 2026-01-19 from the AWS Price List
# API), matching a price book checked against AWS's public price list on 2026-10-08; us-east-2,
# us-west-2 and eu-west-1 from instances.vantage.sh data (2026-08-26). A type or region missing here
# has no price (said, not guessed); prices change: override them with the `prices` stack key.
PRICES_AS_OF = {
    "us-east-1": "2026-10-08",
    "us-east-2": "2026-08-26",
    "us-west-2": "2026-08-26",
    "eu-west-1": "2026-08-26",
}
_GPU_US = {
    "g6.8xlarge": 2.0144,
    "g6.12xlarge": 4.6016,
    "g6.16xlarge": 3.3968,
    "g6.48xlarge": 13.3504,
    "g6e.8xlarge": 4.52856,
    "g6e.12xlarge": 10.49264,
    "g6e.48xlarge": 30.13118,
    "g5.8xlarge": 2.448,
    "g5.12xlarge": 5.672,
    "g5.48xlarge": 16.288,
    "p4d.24xlarge": 21.95764,
    "p5.48xlarge": 55.04,
}
INSTANCE_USD_PER_HOUR: dict[str, dict[str, float]] = {
    "us-east-1": {
        **_GPU_US,
        "g6.xlarge": 0.8048,
        "g6.2xlarge": 0.9776,
        "g6.4xlarge": 1.3232,
        "g6e.xlarge": 1.861,
        "g6e.2xlarge": 2.24208,
        "g6e.4xlarge": 3.00424,
        "g6e.16xlarge": 7.57719,
        "g6e.24xlarge": 15.06559,
        "m7i.large": 0.1008,
        "m7i.xlarge": 0.2016,
        "m7i.2xlarge": 0.4032,
        "m7i.4xlarge": 0.8064,
        "m7i.8xlarge": 1.6128,
    },
    "us-east-2": dict(_GPU_US),
    "us-west-2": dict(_GPU_US),
    "eu-west-1": {
        "g5.8xlarge": 2.73271,
        "g5.12xlarge": 6.33167,
        "g5.48xlarge": 18.18233,
        "p4d.24xlarge": 23.71569,
        "m7i.large": 0.11235,
        "m7i.xlarge": 0.2247,
        "m7i.2xlarge": 0.4494,
        "m7i.4xlarge": 0.8988,
    },
}
# Plus $0.045-0.048 per GB processed, which the hourly figure leaves out.
NAT_GATEWAY_USD_PER_HOUR = {"us-east-1": 0.045, "us-east-2": 0.045, "us-west-2": 0.045, "eu-west-1": 0.048}
EBS_GP3_USD_PER_GB_MONTH = {"us-east-1": 0.08, "eu-west-1": 0.088}
PUBLIC_IPV4_USD_PER_HOUR = 0.005  # every public IPv4 address, the NAT gateways' EIPs included
KMS_KEY_USD_PER_MONTH = 1.0
EKS_USD_PER_HOUR = {"standard": 0.10, "extended": 0.60}


@dataclass(frozen=True)
class CostLine:
    item: str
    quantity: float
    unit_usd_per_hour: float | None  # None: no price known (said, not guessed)

    @property
    def usd_per_hour(self) -> float | None:
        return None if self.unit_usd_per_hour is None else self.quantity * self.unit_usd_per_hour


@dataclass(frozen=True)
class CostEstimate:
    region: str
    lines: tuple[CostLine, ...]

    @property
    def unknown(self) -> list[str]:
        return [line.item for line in self.lines if line.unit_usd_per_hour is None]

    @property
    def usd_per_hour(self) -> float | None:
        """The total, or None when any line has no price."""
        if self.unknown:
            return None
        return round(sum(line.usd_per_hour for line in self.lines), 4)

    def as_output(self) -> dict:
        return {
            "region": self.region,
            "pricesAsOf": PRICES_AS_OF.get(self.region, "no table for this region"),
            "lines": [
                {
                    "item": x.item,
                    "quantity": x.quantity,
                    "unitUsdPerHour": x.unit_usd_per_hour,
                    "usdPerHour": x.usd_per_hour,
                }
                for x in self.lines
            ],
            "usdPerHour": self.usd_per_hour,
            "unknownPrices": self.unknown,
        }


def table(estimate: dict) -> str:
    """The `costEstimate` stack output as a table (printed by `make plan`)."""
    rows = [f"Estimated cost while running, {estimate['region']} on-demand (prices of {estimate['pricesAsOf']}):"]
    for line in estimate["lines"]:
        unit, cost = line["unitUsdPerHour"], line["usdPerHour"]
        priced = "unknown price" if unit is None else f"{unit:>10.6g} = {cost:8.4f} $/h"
        rows.append(f"  {line['item']:<44} {line['quantity']:>5g} x {priced}")
    total = estimate["usdPerHour"]
    if total is None:
        rows.append(
            f"  total: unknown, no price for {', '.join(estimate['unknownPrices'])} (set `prices` in the stack)"
        )
    else:
        rows.append(f"  total: {total:.2f} $/h (~{total * HOURS_PER_MONTH:,.0f} $/month); data transfer not included")
    return "\n".join(rows)


@dataclass(frozen=True)
class PriceOverrides:
    """A stack's own prices (`prices` config), e.g. for a region or instance type not in the table."""

    instances: Mapping[str, float]
    nat_gateway_per_hour: float | None = None
    ebs_gp3_per_gb_month: float | None = None


NO_PRICE_OVERRIDES = PriceOverrides(instances={})


def price_overrides(raw: Mapping | None) -> PriceOverrides:
    raw = raw or {}
    allowed = {"instances", "natGatewayPerHour", "ebsGp3PerGbMonth"}
    for key, value in raw.items():
        if key not in allowed:
            raise ConfigError(f"prices.{key}", value, f"unknown field; fields: {sorted(allowed)}")
    instances = raw.get("instances", {})
    if not isinstance(instances, dict):
        raise ConfigError("prices.instances", instances, "a mapping of instance type to USD per hour")
    for name, value in [
        *(("instances." + k, v) for k, v in instances.items()),
        *((k, raw[k]) for k in ("natGatewayPerHour", "ebsGp3PerGbMonth") if k in raw),
    ]:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ConfigError(f"prices.{name}", value, "a price in USD, 0 or more")
    return PriceOverrides(instances, raw.get("natGatewayPerHour"), raw.get("ebsGp3PerGbMonth"))


def estimate(settings: Settings, overrides: PriceOverrides) -> CostEstimate:
    region = settings.region
    instance_prices = {**INSTANCE_USD_PER_HOUR.get(region, {}), **overrides.instances}
    nat = overrides.nat_gateway_per_hour
    nat = NAT_GATEWAY_USD_PER_HOUR.get(region) if nat is None else nat
    gp3 = overrides.ebs_gp3_per_gb_month
    gp3 = EBS_GP3_USD_PER_GB_MONTH.get(region) if gp3 is None else gp3
    # config.py accepts only versions in standard support; extended support would be $0.60/h.
    lines = [CostLine("EKS control plane (standard support)", 1, EKS_USD_PER_HOUR["standard"])]

    pools = {"system": settings.cluster.system_nodes} | {r: p.nodes for r, p in settings.gpu_pools.items()}
    for role, nodes in pools.items():
        lines.append(
            CostLine(
                f"{role} nodes {nodes.instance_type}", nodes.desired_size, instance_prices.get(nodes.instance_type)
            )
        )
    nat_count = len(settings.network.availability_zones) if settings.network.nat_gateways == "perAz" else 1
    lines.append(CostLine("NAT gateways", nat_count, nat))
    lines.append(CostLine("public IPv4 addresses (NAT EIPs)", nat_count, PUBLIC_IPV4_USD_PER_HOUR))
    disk_gb = sum(nodes.disk_size_gib * nodes.desired_size for nodes in pools.values())
    lines.append(CostLine("EBS gp3 root volumes (GB)", disk_gb, None if gp3 is None else gp3 / HOURS_PER_MONTH))
    lines.append(CostLine("KMS key (secrets encryption)", 1, KMS_KEY_USD_PER_MONTH / HOURS_PER_MONTH))
    return CostEstimate(region, tuple(lines))
