"""Metrics: what the cache counts, named after vLLM's habits with a `radixkv_` prefix.

`cache.metrics()` returns a flat dict (counters end in `_total`); `prometheus_text(cache)` renders
it in the Prometheus exposition format through `prometheus-client` (the optional `[metrics]`
extra), with counters as counters and the rest as gauges.

    radixkv_prefix_cache_queries_total        tokens asked for by match_prefix / open
    radixkv_prefix_cache_hits_total           of those, tokens found on the device
    radixkv_prefix_cache_host_hits_total      further tokens found only on the host tier
    radixkv_prefix_cache_hit_rate             hits / queries over the cache's life
    radixkv_kv_cache_usage_perc               device slots in use by requests, as a fraction (vLLM's
                                              meaning: locked cached tokens + private slots; a cached
                                              prefix no request holds is reclaimable, so it is not "used")
    radixkv_cached_tokens                     device tokens the tree caches (locked or not)
    radixkv_evictable_tokens / _protected_tokens / _free_slots
    radixkv_evicted_tokens_total              device tokens evicted
    radixkv_num_requests_running              open Sequences
    radixkv_host_cache_usage_perc, radixkv_host_cached_tokens, radixkv_host_promoted_tokens_total,
    radixkv_host_backed_up_tokens_total, radixkv_host_evicted_tokens_total,
    radixkv_host_bytes_to_host_total, radixkv_host_bytes_to_device_total   (with a host tier)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from radixkv.results import CacheStats

if TYPE_CHECKING:
    from radixkv.host_tier import HostTier
    from radixkv.results import SizeInfo


def collect_metrics(s: SizeInfo, st: CacheStats, running: int, host: HostTier | None,
                    host_cached_tokens: int) -> dict[str, float]:
    """The metrics from what each owner counts (sizes, query stats, open Sequences, host tier)."""
    out: dict[str, float] = {
        "radixkv_prefix_cache_queries_total": st.query_tokens,
        "radixkv_prefix_cache_hits_total": st.hit_tokens,
        "radixkv_prefix_cache_host_hits_total": st.host_hit_tokens,
        "radixkv_prefix_cache_hit_rate": st.hit_tokens / st.query_tokens if st.query_tokens else 0.0,
        "radixkv_kv_cache_usage_perc": (s.protected + s.private) / s.total,
        "radixkv_cached_tokens": s.cached,
        "radixkv_evictable_tokens": s.evictable,
        "radixkv_protected_tokens": s.protected,
        "radixkv_free_slots": s.free,
        "radixkv_evicted_tokens_total": st.evicted_tokens,
        "radixkv_num_requests_running": running,
    }
    if host is not None:
        total = host.allocator.num_pages * host.page_size
        out.update({
            "radixkv_host_cache_usage_perc": (total - host.allocator.num_free_slots) / total,
            "radixkv_host_cached_tokens": host_cached_tokens,
            "radixkv_host_promoted_tokens_total": host.promoted_tokens,
            "radixkv_host_backed_up_tokens_total": host.backed_up_tokens,
            "radixkv_host_evicted_tokens_total": host.host_evicted_tokens,
            "radixkv_host_bytes_to_host_total": host.bytes_to_host,
            "radixkv_host_bytes_to_device_total": host.bytes_to_device,
        })
    return out


def prometheus_text(cache) -> str:  # noqa: ANN001 - a RadixCache (not imported: the cache imports this module)
    """The metrics in Prometheus text format (needs prometheus-client: `pip install radixkv[metrics]`;
    ConfigError saying so without it)."""
    try:
        from prometheus_client import CollectorRegistry, generate_latest
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    except ImportError:
        from radixkv.errors import ConfigError

        raise ConfigError("prometheus_text needs prometheus-client: pip install 'radixkv[metrics]'") from None

    class _Collector:
        def collect(self):  # noqa: ANN202 - prometheus_client's collector protocol
            for name, value in cache.metrics().items():
                if name.endswith("_total"):
                    yield CounterMetricFamily(name[:-len("_total")], name, value=value)
                else:
                    yield GaugeMetricFamily(name, name, value=value)

    registry = CollectorRegistry()
    registry.register(_Collector())
    return generate_latest(registry).decode()


def prometheus_family(name: str, kind: str, help_text: str, samples: list[tuple[dict[str, str], float]]) -> str:
    """One metric family in the Prometheus text exposition format (no client library needed):
    `# HELP`, `# TYPE`, then one line per (labels, value) sample."""
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

    lines = [f"# HELP {name} {help_text.replace(chr(92), chr(92) * 2).replace(chr(10), ' ')}", f"# TYPE {name} {kind}"]
    for labels, value in samples:
        body = ",".join(f'{k}="{esc(str(v))}"' for k, v in labels.items())
        lines.append(f"{name}{{{body}}} {float(value)!r}" if body else f"{name} {float(value)!r}")
    return "\n".join(lines) + "\n"
