"""Prices: a dated on-demand table per region (never a guess: a price we do not have is missing,
and the estimate says so) and the stack's own overrides (`prices`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ray_llm_eks.domain.core.errors import ConfigError, mapping_of, unknown_field
from ray_llm_eks.domain.core.raw_config import RawConfig

HOURS_PER_MONTH = 730  # AWS's convention for monthly prices

# On-demand Linux, USD per hour, by region. Sources:
# - us-east-1: aws/karpenter-provider-aws pkg/providers/pricing/zz_generated.pricing_aws.go (generated
#   2026-07-20 from the AWS Price List API, commit 6fc13b523; still us-east-1 only in v1.15.2), every type
#   of ray_llm_eks/domain/platform/aws_facts.py, matching a price book checked against AWS's public price list
# (PRICES_AS_OF);
# - us-east-2, us-west-2: the same prices as us-east-1 for every type of ray_llm_eks/domain/platform/aws_facts.py in
#   cristim/ec2-instances-info data/instances.json (ec2instances.info data, Go module
#   v0.0.0-20250528091325-32acf84f42eb), except p4d/p5, which AWS cut in June 2025 (that data predates
#   it): those from instances.vantage.sh (dated in PRICES_AS_OF), which agrees with Karpenter's us-east-1 table;
# - eu-west-1: the same ec2instances.info data; instances.vantage.sh for p4d. That data lists
#   no g6, g6e or p5 in eu-west-1 (not offered there then): they have no price here, and the deploy-time
#   offering check names the zones that do offer a type.
# A type or region missing here has no price (said, not guessed); prices change: override them with the
# `prices` stack key.
PRICES_AS_OF = {
    "us-east-1": "2026-10-08",
    "us-east-2": "2025-05-28",  # p4d/p5: 2026-08-26
    "us-west-2": "2025-05-28",  # p4d/p5: 2026-08-26
    "eu-west-1": "2025-05-28",  # p4d: 2026-08-26
}
_US_EAST_1 = {
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
    "g5.xlarge": 1.006,
    "g6.24xlarge": 6.6752,
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
    # Other system-node types of ray_llm_eks/domain/platform/aws_facts.py (same Karpenter table, commit 6fc13b523).
    "t3.small": 0.0208,
    "t3.medium": 0.0416,
    "t3.large": 0.0832,
    "t3.xlarge": 0.1664,
    "t3.2xlarge": 0.3328,
    "m5.large": 0.096,
    "m5.xlarge": 0.192,
    "m5.2xlarge": 0.384,
    "m6i.large": 0.096,
    "m6i.xlarge": 0.192,
    "m6i.2xlarge": 0.384,
}
INSTANCE_USD_PER_HOUR: dict[str, dict[str, float]] = {
    "us-east-1": _US_EAST_1,
    "us-east-2": dict(_US_EAST_1),
    "us-west-2": dict(_US_EAST_1),
    "eu-west-1": {
        "g5.xlarge": 1.123,
        "g5.8xlarge": 2.73271,
        "g5.12xlarge": 6.33167,
        "g5.48xlarge": 18.18233,
        "p4d.24xlarge": 23.71569,
        "m7i.large": 0.11235,
        "m7i.xlarge": 0.2247,
        "m7i.2xlarge": 0.4494,
        "m7i.4xlarge": 0.8988,
        "m7i.8xlarge": 1.7976,
        "t3.small": 0.0228,
        "t3.medium": 0.0456,
        "t3.large": 0.0912,
        "t3.xlarge": 0.1824,
        "t3.2xlarge": 0.3648,
        "m5.large": 0.107,
        "m5.xlarge": 0.214,
        "m5.2xlarge": 0.428,
        "m6i.large": 0.107,
        "m6i.xlarge": 0.214,
        "m6i.2xlarge": 0.428,
    },
}
# Regions whose table prices a whole copy of dev (every instance type of ray_llm_eks/domain/platform/aws_facts.py, the
# NAT gateway, gp3, the internal NLB and its capacity units), at one date (docs/architecture.md lists these
# and what the other documented regions lack; a test holds both). us-east-2 and us-west-2 lack only the
# NLB: neither the Go module's data (still v0.0.0-20250528091325-32acf84f42eb, its newest on the Go module
# proxy) nor Karpenter's generated pricing (us-east-1 only) has it, and no dated source was found.
COMPLETE_REGIONS = ("us-east-1",)
# Plus $0.045-0.048 per GB processed, which the hourly figure leaves out.
NAT_GATEWAY_USD_PER_HOUR = {"us-east-1": 0.045, "us-east-2": 0.045, "us-west-2": 0.045, "eu-west-1": 0.048}
# gp3 storage, USD per GB-month. us-east-2: AWS's price list (AmazonEC2 offer, USE2-EBS:VolumeUsage.gp3,
# "$0.08 per GB-month ... US East (Ohio)", effective 2023-03-01) as quoted in opencost/opencost
# pkg/cloud/aws/provider_test.go; us-west-2: USW2-EBS:VolumeUsage.gp3 from AWS's us-west-2 price-list file,
# as a public EKS lab cost guide quotes it; us-east-1 and eu-west-1: checked with the instance prices (PRICES_AS_OF).
EBS_GP3_USD_PER_GB_MONTH = {"us-east-1": 0.08, "us-east-2": 0.08, "us-west-2": 0.08, "eu-west-1": 0.088}
PUBLIC_IPV4_USD_PER_HOUR = 0.005  # every public IPv4 address, the NAT gateways' EIPs included
KMS_KEY_USD_PER_MONTH = 1.0
# The internal Network Load Balancer (internalEndpoint): per hour, and per NLB capacity unit-hour (an
# NLCU is 800 new TCP flows/s, 100,000 active flows or 1 GB/h processed, whichever is highest). us-east-1:
# sst/sst platform/src/components/aws/service.ts (its cost notes, "$0.0225 per hour and $0.006 per
# NLCU-hour", from aws.amazon.com/elasticloadbalancing/pricing). No nameable source for other regions
# here: unknown there until the stack sets `prices`.
NLB_USD_PER_HOUR = {"us-east-1": 0.0225}
NLB_LCU_USD_PER_HOUR = {"us-east-1": 0.006}
# Amazon Managed Service for Prometheus (observability mode amp), US East (N. Virginia) list prices:
# $0.90 per 10 million samples ingested (the first 2 billion a month; cheaper tiers above) and $0.03 per
# GB-month stored, from aws.amazon.com/prometheus/pricing as quoted in a 2025 survey of managed metrics
# services (a public repository; AWS's page itself renders its table in the browser). Queries ($0.10 per
# billion samples processed) depend on who looks, and are not priced.
AMP_USD_PER_10M_SAMPLES = {"us-east-1": 0.90}
AMP_STORAGE_USD_PER_GB_MONTH = {"us-east-1": 0.03}
# ElastiCache for Valkey on-demand nodes, USD per hour (the GCS store, ray_llm_eks/domain/cluster/gcs_ft.py): ESTIMATES,
# not read from AWS's price list (its pricing page renders the node table in the browser): Redis OSS's us-east-1 prices
# for cache.t4g.small ($0.032/h) and cache.t4g.medium ($0.065/h) less the 20% AWS announced for Valkey nodes,
# both remembered, not re-read.
# `make plan` marks them as estimates; the `prices` key replaces them.
ELASTICACHE_VALKEY_USD_PER_HOUR_ESTIMATE = {"us-east-1": {"cache.t4g.small": 0.0256, "cache.t4g.medium": 0.052}}
EKS_USD_PER_HOUR = {"standard": 0.10, "extended": 0.60}
# EKS Auto Mode's management fee, USD per hour per instance it manages, by instance type: none here. AWS
# publishes it per type on aws.amazon.com/eks/pricing (a table its page renders in the browser); neither
# botocore nor Karpenter's generated pricing carries it, and no dated public copy was found. Unknown,
# said in the cost table, until the stack sets `prices.autoModeFees`.
AUTO_MODE_FEE_USD_PER_HOUR: dict[str, dict[str, float]] = {}


@dataclass(frozen=True)
class PriceOverrides:
    """A stack's own prices (`prices` config), e.g. for a region or instance type not in the table."""

    instances: Mapping[str, float]
    nat_gateway_per_hour: float | None = None
    ebs_gp3_per_gb_month: float | None = None
    load_balancer_per_hour: float | None = None
    load_balancer_lcu_per_hour: float | None = None
    amp_per_10m_samples: float | None = None
    amp_storage_per_gb_month: float | None = None
    auto_mode_fees: Mapping[str, float] = field(default_factory=dict)  # EKS Auto Mode's fee per instance type


NO_PRICE_OVERRIDES = PriceOverrides(instances={})
# `prices` stack fields -> PriceOverrides fields
_SCALARS = {
    "natGatewayPerHour": "nat_gateway_per_hour",
    "ebsGp3PerGbMonth": "ebs_gp3_per_gb_month",
    "loadBalancerPerHour": "load_balancer_per_hour",
    "loadBalancerLcuPerHour": "load_balancer_lcu_per_hour",
    "ampPer10MSamples": "amp_per_10m_samples",
    "ampStoragePerGbMonth": "amp_storage_per_gb_month",
}


_MAPPINGS = ("instances", "autoModeFees")  # instance type -> USD per hour
SHAPE = mapping_of({*_MAPPINGS, *_SCALARS})


def load(raw: RawConfig) -> PriceOverrides:
    """The stack's `prices` section."""
    return price_overrides(raw.mapping("prices", SHAPE))


def price_overrides(raw: Mapping | None) -> PriceOverrides:
    raw = {} if raw is None else raw
    if not isinstance(raw, Mapping):
        raise ConfigError("prices", raw, SHAPE)
    for key, value in raw.items():
        if key not in {*_MAPPINGS, *_SCALARS}:
            raise unknown_field("prices", key, value, {*_MAPPINGS, *_SCALARS})
    mappings = {key: raw.get(key, {}) for key in _MAPPINGS}
    for key, mapping in mappings.items():
        if not isinstance(mapping, dict):
            raise ConfigError(f"prices.{key}", mapping, "a mapping of instance type to USD per hour")
    for name, value in [
        *((f"{key}.{k}", v) for key, mapping in mappings.items() for k, v in mapping.items()),
        *((k, raw[k]) for k in _SCALARS if k in raw),
    ]:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ConfigError(f"prices.{name}", value, "a price in USD, 0 or more")
    scalars = {name: raw.get(key) for key, name in _SCALARS.items()}
    return PriceOverrides(mappings["instances"], **scalars, auto_mode_fees=mappings["autoModeFees"])
