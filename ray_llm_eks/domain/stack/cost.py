"""What a stack costs per hour while it runs, from the dated price table in ray_llm_eks/domain/platform/prices.py (a
price we do not have is reported as unknown, and the total says it is incomplete)."""

from __future__ import annotations

from dataclasses import dataclass

from ray_llm_eks.domain.cluster import node_provisioning
from ray_llm_eks.domain.platform.prices import (
    AMP_STORAGE_USD_PER_GB_MONTH,
    AMP_USD_PER_10M_SAMPLES,
    AUTO_MODE_FEE_USD_PER_HOUR,
    EBS_GP3_USD_PER_GB_MONTH,
    EKS_USD_PER_HOUR,
    ELASTICACHE_VALKEY_USD_PER_HOUR_ESTIMATE,
    HOURS_PER_MONTH,
    INSTANCE_USD_PER_HOUR,
    KMS_KEY_USD_PER_MONTH,
    NAT_GATEWAY_USD_PER_HOUR,
    NLB_LCU_USD_PER_HOUR,
    NLB_USD_PER_HOUR,
    PRICES_AS_OF,
    PUBLIC_IPV4_USD_PER_HOUR,
    PriceOverrides,
)
from ray_llm_eks.domain.stack.settings import Settings
from ray_llm_eks.domain.telemetry import observability


@dataclass(frozen=True)
class CostLine:
    item: str
    quantity: float
    unit_usd_per_hour: float | None  # None: no price known (said, not guessed)
    estimated: bool = False  # a price of ours that AWS's price list did not give (said in the table)
    price_key: str = ""  # the stack's `prices` field that sets this line's unit price, named when it is missing

    @property
    def usd_per_hour(self) -> float | None:
        return None if self.unit_usd_per_hour is None else self.quantity * self.unit_usd_per_hour


# On a cluster this stack did not create: what it does not buy, so does not price (docs/architecture.md).
NOT_PRICED_ON_AN_EXISTING_CLUSTER = (
    "EKS control plane",
    "NAT gateways and their IPv4 addresses",
    "system nodes (the Ray head takes part of one)",
    "EBS root volumes",
    "KMS key",
)


@dataclass(frozen=True)
class CostEstimate:
    region: str
    lines: tuple[CostLine, ...]
    scope: str = "everything this stack creates"
    not_priced: tuple[str, ...] = ()  # said by name, never guessed

    @property
    def unknown(self) -> list[str]:
        return [line.item for line in self.lines if line.unit_usd_per_hour is None]

    @property
    def estimated(self) -> list[str]:
        return [line.item for line in self.lines if line.estimated and line.unit_usd_per_hour is not None]

    @property
    def usd_per_hour(self) -> float | None:
        """The total, or None when any line has no price."""
        if self.unknown:
            return None
        return self.known_usd_per_hour

    @property
    def known_usd_per_hour(self) -> float:
        """The sum of the lines that have a price: the whole total, or a floor under it."""
        return round(sum(line.usd_per_hour for line in self.lines if line.usd_per_hour is not None), 4)

    def as_output(self) -> dict:
        return {
            "region": self.region,
            "pricesAsOf": PRICES_AS_OF.get(self.region),  # None: no table for the region
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
            "estimatedPrices": self.estimated,
            "scope": self.scope,
            "notPriced": list(self.not_priced),
            # Only when a price is missing, so a fully priced stack's output is the same as without it.
            **({"pricesToSet": self.keys_to_set, "knownUsdPerHour": self.known_usd_per_hour} if self.unknown else {}),
        }

    @property
    def keys_to_set(self) -> list[str]:
        """The `prices` fields that would price every unknown line, each once, in the lines' order."""
        return list(dict.fromkeys(line.price_key for line in self.lines if line.unit_usd_per_hour is None))


def table(estimate: dict) -> str:
    """The `costEstimate` stack output as a table (printed by `make plan`)."""
    region, dated = estimate["region"], estimate["pricesAsOf"]
    of = f"prices of {dated}" if dated else f"no price table for {region}: only prices the same in every region"
    rows = [f"Estimated cost while running, {region} on-demand ({of}):"]
    rows.append(f"  prices: {estimate['scope']}")
    if estimate["notPriced"]:
        rows.append(f"  not priced (the existing cluster's own): {', '.join(estimate['notPriced'])}")
    for line in estimate["lines"]:
        unit, cost = line["unitUsdPerHour"], line["usdPerHour"]
        priced = "unknown price" if unit is None else f"{unit:>10.6g} = {cost:8.4f} $/h"
        if line["item"] in estimate["estimatedPrices"]:
            priced += " (estimate)"
        rows.append(f"  {line['item']:<44} {line['quantity']:>5g} x {priced}")
    total = estimate["usdPerHour"]
    if total is None:
        known, missing = estimate["knownUsdPerHour"], estimate["unknownPrices"]
        rows.append(
            f"  total: unknown; at least {_hourly(known)} without the {len(missing)} missing "
            f"price{'s' if len(missing) > 1 else ''}: {', '.join(missing)} (set {', '.join(estimate['pricesToSet'])}"
            " in the stack); data transfer not included"
        )
    else:
        rows.append(f"  total: {_hourly(total)}; data transfer not included")
    if estimate["estimatedPrices"]:
        estimated = ", ".join(estimate["estimatedPrices"])
        rows.append(f"  estimated, not from AWS's price list: {estimated} (set `prices` to replace)")
    return "\n".join(rows)


def _hourly(usd: float) -> str:
    return f"{usd:.2f} $/h (~{usd * HOURS_PER_MONTH:,.0f} $/month)"


GP3_PRICE_KEY = "prices.ebsGp3PerGbMonth"


def _instance_key(instance_type: str) -> str:
    return f"prices.instances.{instance_type}"


SIZES = ("min", "desired", "max")  # node counts of every pool: minSize, desiredSize, maxSize


def _count(nodes, size: str) -> int:
    return {"min": nodes.min_size, "desired": nodes.desired_size, "max": nodes.max_size}[size]


def cost_range(settings: Settings, overrides: PriceOverrides) -> dict[str, float | None]:
    """$/h with every pool at its minSize, desiredSize and maxSize: what autoscaling can cost."""
    return {size: estimate(settings, overrides, size).usd_per_hour for size in SIZES}


def range_line(usd: dict[str, float | None]) -> str:
    """One line for `make plan` under the table."""
    if any(v is None for v in usd.values()):
        return "  range: unknown while a price is missing (the total above is a floor)"
    return "  range: " + ", ".join(f"at {size} {usd[size]:.2f} $/h" for size in SIZES) + " (every pool at that size)"


def instance_prices(region: str, overrides: PriceOverrides) -> dict[str, float]:
    """On-demand $/h per instance type in this region: the table's, then the stack's `prices.instances`."""
    return {**INSTANCE_USD_PER_HOUR.get(region, {}), **overrides.instances}


def estimate(settings: Settings, overrides: PriceOverrides, size: str = "desired") -> CostEstimate:
    """What the stack's cluster costs; on an existing cluster only the GPU nodes its Ray workers occupy
    (one worker per node, sized to it), naming what it leaves out."""
    region = settings.region
    prices = instance_prices(region, overrides)
    if settings.deploy_mode.existing_cluster:
        lines = [
            CostLine(
                f"{role} nodes {p.nodes.instance_type}",
                _count(p.nodes, size),
                prices.get(p.nodes.instance_type),
                price_key=_instance_key(p.nodes.instance_type),
            )
            for role, p in settings.gpu_pools.items()
        ]
        scope = "the existing cluster's GPU nodes that the Ray workers occupy (one worker per node)"
        return CostEstimate(region, tuple(lines), scope, NOT_PRICED_ON_AN_EXISTING_CLUSTER)
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
                f"{role} nodes {nodes.instance_type}{bought_by(settings, role)}",
                _count(nodes, size),
                prices.get(nodes.instance_type),
                price_key=_instance_key(nodes.instance_type),
            )
        )
    if settings.node_provisioning.by_auto_mode:  # on top of each instance Auto Mode launches
        fees = {**AUTO_MODE_FEE_USD_PER_HOUR.get(region, {}), **overrides.auto_mode_fees}
        for role, pool in settings.gpu_pools.items():
            instance_type = pool.nodes.instance_type
            lines.append(
                CostLine(
                    f"EKS Auto Mode fee, {role} nodes {instance_type}",
                    _count(pool.nodes, size),
                    fees.get(instance_type),
                    price_key=f"prices.autoModeFees.{instance_type}",
                )
            )
    nat_count = len(settings.network.availability_zones) if settings.network.nat_gateways == "perAz" else 1
    lines.append(CostLine("NAT gateways", nat_count, nat, price_key="prices.natGatewayPerHour"))
    lines.append(CostLine("public IPv4 addresses (NAT EIPs)", nat_count, PUBLIC_IPV4_USD_PER_HOUR))
    disk_gb = sum(nodes.disk_size_gib * _count(nodes, size) for nodes in pools.values())
    lines.append(
        CostLine(
            "EBS gp3 root volumes (GB)",
            disk_gb,
            None if gp3 is None else gp3 / HOURS_PER_MONTH,
            price_key=GP3_PRICE_KEY,
        )
    )
    lines.append(CostLine("KMS key (secrets encryption)", 1, KMS_KEY_USD_PER_MONTH / HOURS_PER_MONTH))
    if settings.hardening.internal_endpoint:
        lines += _load_balancer_lines(region, overrides)
    lines += _observability_lines(settings.serving.observability, region, overrides, gp3)
    if settings.gcs_ft.redis:  # the head's GCS store (ray_llm_eks/domain/cluster/gcs_ft.py): a primary and its replicas
        ft = settings.gcs_ft
        estimate = ELASTICACHE_VALKEY_USD_PER_HOUR_ESTIMATE.get(region, {}).get(ft.redis_node_type)
        node_price = overrides.instances.get(ft.redis_node_type, estimate)
        item = f"GCS store ElastiCache Valkey {ft.redis_node_type}"
        lines.append(
            CostLine(
                item,
                1 + ft.redis_replicas,
                node_price,
                estimated=ft.redis_node_type not in overrides.instances,
                price_key=_instance_key(ft.redis_node_type),
            )
        )
    return CostEstimate(region, tuple(lines))


def bought_by(settings: Settings, pool: str) -> str:
    """How a GPU pool's nodes are bought, where Karpenter makes them (nothing for node groups and system nodes)."""
    gpu_pool = settings.gpu_pools.get(pool)
    return "" if gpu_pool is None else node_provisioning.node_line(settings.node_provisioning, gpu_pool.app_role)


def _chosen(override: float | None, table: dict[str, float], region: str) -> float | None:
    return table.get(region) if override is None else override


# An internal endpoint's traffic (a few requests per second, kilobytes each) stays under one NLB
# capacity unit; a busy one pays per unit used (ray_llm_eks/domain/platform/prices.py says what one unit is).
NLB_CAPACITY_UNITS = 1


def _load_balancer_lines(region: str, overrides: PriceOverrides) -> list[CostLine]:
    hourly = _chosen(overrides.load_balancer_per_hour, NLB_USD_PER_HOUR, region)
    lcu = _chosen(overrides.load_balancer_lcu_per_hour, NLB_LCU_USD_PER_HOUR, region)
    return [
        CostLine("internal load balancer (NLB)", 1, hourly, price_key="prices.loadBalancerPerHour"),
        CostLine("NLB capacity units (budget)", NLB_CAPACITY_UNITS, lcu, price_key="prices.loadBalancerLcuPerHour"),
    ]


# What AMP keeps by default (AMP user guide: metrics are stored for 150 days unless the workspace
# sets another retention).
AMP_RETENTION_DAYS = 150


def _observability_lines(
    obs: observability.ObservabilitySettings, region: str, overrides: PriceOverrides, gp3: float | None
) -> list[CostLine]:
    """Prometheus's own volume (embedded), or AMP's ingestion and storage at the series budget (amp).
    The monitoring pods fit the system node (ray_llm_eks/domain/telemetry/observability.py system_pods): no node is
    added."""
    if obs.mode == "embedded":
        return [
            CostLine(
                "EBS gp3 Prometheus volume (GB)",
                obs.storage_gib,
                None if gp3 is None else gp3 / HOURS_PER_MONTH,
                price_key=GP3_PRICE_KEY,
            )
        ]
    if obs.mode != "amp":
        return []
    samples_per_hour = observability.SERIES_BUDGET / observability.SCRAPE_INTERVAL_S * 3600
    per_10m = _chosen(overrides.amp_per_10m_samples, AMP_USD_PER_10M_SAMPLES, region)
    per_gb = _chosen(overrides.amp_storage_per_gb_month, AMP_STORAGE_USD_PER_GB_MONTH, region)
    stored_gb = samples_per_hour * 24 * AMP_RETENTION_DAYS * observability.BYTES_PER_SAMPLE / 2**30
    return [
        CostLine(
            "AMP samples ingested (10M/h, series budget)",
            samples_per_hour / 1e7,
            per_10m,
            price_key="prices.ampPer10MSamples",
        ),
        CostLine(
            f"AMP storage after {AMP_RETENTION_DAYS} days (GB)",
            round(stored_gb, 1),
            None if per_gb is None else per_gb / HOURS_PER_MONTH,
            price_key="prices.ampStoragePerGbMonth",
        ),
    ]
