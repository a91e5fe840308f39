//! Prometheus metrics of the webhook (text exposition at `/metrics`).

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::admission::{Outcome, Webhook};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    operation: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConnectionLabels {
    protocol: &'static str,
    handshake: &'static str,
}

/// The webhook's metrics:
/// * `qdr_webhook_requests_total{operation, result}`: reviews by webhook (`mutate`,
///   `validate`) and outcome (`allowed`, `denied`, `bad_request`);
/// * `qdr_webhook_request_duration_seconds{operation}`: handling time, 50 µs to ~1.6 s buckets;
/// * `qdr_webhook_certificate_expiry_seconds`: seconds until the served certificate expires;
/// * `qdr_webhook_connections_total{protocol, handshake}`: TLS connections accepted on the
///   admission port, by negotiated protocol (`h2`, `http/1.1`) and TLS handshake kind
///   (`full`, `resumed`). Each is one TLS handshake: a client that reuses its connections
///   (the API server's webhook client over HTTP/2) keeps this near its connection count,
///   while one that reconnects per request raises it with every review.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    connections: Family<ConnectionLabels, Counter>,
    latency: Family<OperationLabels, Histogram, fn() -> Histogram>,
    expiry: Gauge<f64, AtomicU64>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let latency: Family<OperationLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.00005, 2.0, 16)));
        let expiry = Gauge::<f64, AtomicU64>::default();
        let connections = Family::<ConnectionLabels, Counter>::default();
        // Every (operation, result) series exists from the start at 0, so rates and alerts
        // on them have a series before the first review of that kind (Prometheus guidance).
        for op in [Webhook::Mutate, Webhook::Validate] {
            let _ = latency.get_or_create(&OperationLabels { operation: op.as_str() });
            for outcome in [Outcome::Allowed, Outcome::Denied, Outcome::BadRequest] {
                let _ = requests
                    .get_or_create(&RequestLabels { operation: op.as_str(), result: outcome.as_str() });
            }
        }
        registry.register(
            "qdr_webhook_connections",
            "TLS connections accepted on the admission port, by protocol and handshake kind",
            connections.clone(),
        );
        registry.register(
            "qdr_webhook_requests",
            "Admission reviews by webhook and outcome",
            requests.clone(),
        );
        registry.register(
            "qdr_webhook_request_duration_seconds",
            "Time to handle one admission review",
            latency.clone(),
        );
        registry.register(
            "qdr_webhook_certificate_expiry_seconds",
            "Seconds until the served certificate expires",
            expiry.clone(),
        );
        Metrics { registry, requests, connections, latency, expiry }
    }
}

impl Metrics {
    /// Records one handled review.
    pub fn observe(&self, op: Webhook, outcome: Outcome, elapsed: Duration) {
        self.requests
            .get_or_create(&RequestLabels { operation: op.as_str(), result: outcome.as_str() })
            .inc();
        self.latency
            .get_or_create(&OperationLabels { operation: op.as_str() })
            .observe(elapsed.as_secs_f64());
    }

    /// Records one accepted TLS connection: `protocol` is the ALPN protocol (`None`:
    /// HTTP/1.1 without ALPN), `resumed` whether the TLS session was resumed.
    pub fn connection(&self, protocol: Option<&[u8]>, resumed: bool) {
        let protocol = match protocol {
            Some(b"h2") => "h2",
            _ => "http/1.1",
        };
        let handshake = if resumed { "resumed" } else { "full" };
        self.connections.get_or_create(&ConnectionLabels { protocol, handshake }).inc();
    }

    /// The text exposition, after setting the expiry gauge to `expiry_secs`.
    pub fn encode(&self, expiry_secs: Option<f64>) -> String {
        self.expiry.set(expiry_secs.unwrap_or(0.0));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("writing to a String");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every (operation, result) series is served from the start at 0.
    #[test]
    fn every_request_series_starts_at_zero() {
        let text = Metrics::default().encode(None);
        for op in ["mutate", "validate"] {
            for result in ["allowed", "denied", "bad_request"] {
                let line = format!("qdr_webhook_requests_total{{operation=\"{op}\",result=\"{result}\"}} 0");
                assert!(text.contains(&line), "{line} in\n{text}");
            }
            assert!(
                text.contains(&format!("qdr_webhook_request_duration_seconds_count{{operation=\"{op}\"}} 0"))
            );
        }
    }
}
