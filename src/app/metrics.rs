//! The service's metrics, exported in the Prometheus text format: calls by tenant and
//! status, a latency histogram, fuel consumed, calls in flight and calls refused by the
//! rate limit.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::outcome::CallResult;
use crate::tenant::TenantId;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabels {
    tenant: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    tenant: String,
    status: String,
}

/// Every metric the service keeps, and the registry that encodes them.
#[derive(Debug)]
pub(super) struct Metrics {
    registry: Registry,
    calls: Family<CallLabels, Counter>,
    latency: Histogram,
    fuel: Family<TenantLabels, Counter>,
    in_flight: Family<TenantLabels, Gauge>,
    rate_limited: Family<TenantLabels, Counter>,
}

impl Metrics {
    pub(super) fn new() -> Metrics {
        let mut registry = Registry::with_prefix("warden");
        let calls = Family::<CallLabels, Counter>::default();
        // 5 ms to about 41 s, doubling.
        let latency = Histogram::new(exponential_buckets(0.005, 2.0, 14));
        let fuel = Family::<TenantLabels, Counter>::default();
        let in_flight = Family::<TenantLabels, Gauge>::default();
        let rate_limited = Family::<TenantLabels, Counter>::default();
        registry.register(
            "calls",
            "Tool calls that ran, by tenant and status",
            calls.clone(),
        );
        registry.register(
            "call_duration_seconds",
            "Wall time of tool calls in the sandbox",
            latency.clone(),
        );
        registry.register(
            "fuel_used",
            "Fuel consumed by tool calls, by tenant",
            fuel.clone(),
        );
        registry.register(
            "calls_in_flight",
            "Tool calls running now, by tenant",
            in_flight.clone(),
        );
        registry.register(
            "rate_limited",
            "Calls refused by the calls-per-minute limit, by tenant",
            rate_limited.clone(),
        );
        Metrics {
            registry,
            calls,
            latency,
            fuel,
            in_flight,
            rate_limited,
        }
    }

    fn tenant(tenant: &TenantId) -> TenantLabels {
        TenantLabels {
            tenant: tenant.to_string(),
        }
    }

    /// Counts a call in flight until the returned guard drops.
    pub(super) fn start(&self, tenant: &TenantId) -> InFlight {
        let gauge = self
            .in_flight
            .get_or_create(&Metrics::tenant(tenant))
            .clone();
        gauge.inc();
        InFlight(gauge)
    }

    pub(super) fn finished(&self, tenant: &TenantId, result: &CallResult) {
        self.calls
            .get_or_create(&CallLabels {
                tenant: tenant.to_string(),
                status: result.status.as_str().to_owned(),
            })
            .inc();
        self.latency.observe(result.wall_time.as_secs_f64());
        self.fuel
            .get_or_create(&Metrics::tenant(tenant))
            .inc_by(result.fuel_used.0);
    }

    pub(super) fn rate_limited(&self, tenant: &TenantId) {
        self.rate_limited
            .get_or_create(&Metrics::tenant(tenant))
            .inc();
    }

    /// The metrics in the Prometheus text format.
    pub(super) fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// Decrements the tenant's in-flight gauge when dropped, however the call ends.
pub(super) struct InFlight(Gauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}
