//! Admission through the API server (`QDR_BENCH_ONLY=apiserver`): create latencies with our
//! webhook, the null webhook and none, what the API server and the handler each time for a
//! review, connection reuse, and the cost of authorizing Secret references as their author.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, PostParams};
use qdr_tests::rbac::Install;
use qdr_tests::{ControlPlane, Process};
use serde_json::json;

use crate::fixtures::{
    client_as, ic_defaulted, ic_obj, ic_with_users, interconnects, kubectl_ok, typed_with_users,
};
use crate::measure::{
    free_port, histogram_means, histogram_sums, means_between, metrics_text, percentile, webhook_connections,
};
use crate::table::Row;

pub(crate) async fn api_server_rows(
    rows: &mut Vec<Row>,
    runs: usize,
    bin_dir: &Path,
    cp: &'static ControlPlane,
) -> Result<(), Box<dyn std::error::Error>> {
    let client = cp.client().await?;
    let with = cp.namespace("bench-webhook").await;
    let without = cp.namespace("bench-plain").await;
    kubectl_ok(cp, &["label", "ns", &with.name, "qdr-operator.test/webhook=bench"]).await;
    let system = cp.namespace("bench-system").await;
    let port = free_port();
    let health = free_port();
    // The null webhook: the same TLS stack, answers `allowed` at once, registered the same
    // way (one validating and one mutating configuration, by URL) for its own namespace.
    let null_ns = cp.namespace("bench-null").await;
    kubectl_ok(cp, &["label", "ns", &null_ns.name, "qdr-operator.test/webhook=null"]).await;
    let null_port = free_port();
    let pair = cp.issue_serving_cert(&["127.0.0.1"])?;
    let (crt, key) = (cp.dir().join("null-webhook.crt"), cp.dir().join("null-webhook.key"));
    std::fs::write(&crt, &pair.cert_pem)?;
    std::fs::write(&key, &pair.key_pem)?;
    let mut cmd = Command::new(bin_dir.join("qdr-null-webhook"));
    cmd.arg(format!("127.0.0.1:{null_port}")).arg(&crt).arg(&key);
    let null = Process::spawn("qdr-null-webhook", cmd, &cp.dir().join("null-webhook.log"))?;
    let rules = json!([{"apiGroups": ["interconnectedcloud.github.io"], "apiVersions": ["v1alpha1"], "operations": ["CREATE", "UPDATE"], "resources": ["interconnects"]}]);
    let entry = |n: &str, label: &str, port: u16, path: &str| {
        json!({"name": n, "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail", "timeoutSeconds": 5,
        "rules": rules, "namespaceSelector": {"matchLabels": {"qdr-operator.test/webhook": label}}, "clientConfig": {"url": format!("https://127.0.0.1:{port}/{path}")}})
    };
    let ca_bundle = base64::engine::Engine::encode(&base64::engine::general_purpose::STANDARD, cp.ca_pem());
    let null_entry = |n: &str, path: &str| {
        let mut e = entry(n, "null", null_port, path);
        e["clientConfig"]["caBundle"] = json!(ca_bundle);
        e
    };
    let configs = [
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "bench-v"}, "webhooks": [entry("v.bench.io", "bench", port, "validate")]}),
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration", "metadata": {"name": "bench-m"}, "webhooks": [entry("m.bench.io", "bench", port, "mutate")]}),
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "bench-null-v"}, "webhooks": [null_entry("v.null.bench.io", "validate")]}),
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration", "metadata": {"name": "bench-null-m"}, "webhooks": [null_entry("m.null.bench.io", "mutate")]}),
    ];
    for o in configs {
        let mut child = cp
            .kubectl()
            .args(["apply", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()?;
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), o.to_string().as_bytes())?;
        child.wait()?;
    }
    // As its ServiceAccount, with `deploy/`'s RBAC for these configurations.
    let install =
        Install { validating: "bench-v".into(), mutating: "bench-m".into(), ..Install::new(&system.name) };
    let ids = cp.install_rbac(&install)?;
    let mut cmd = Command::new(bin_dir.join("qdr-webhook"));
    cmd.env("KUBECONFIG", &ids.webhook).env("RUST_LOG", "warn").args([
        &format!("--listen=127.0.0.1:{port}"),
        &format!("--health-listen=127.0.0.1:{health}"),
        &format!("--namespace={}", system.name),
        "--extra-san=127.0.0.1",
        "--validating-config=bench-v",
        "--mutating-config=bench-m",
        "--check-interval=1s",
    ]);
    let wh = Process::spawn("qdr-webhook-bench", cmd, &cp.dir().join("webhook-bench.log"))?;
    let api_with = interconnects(&client, &with.name);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let probe =
            api_with.create(&PostParams { dry_run: true, ..Default::default() }, &ic_obj("probe")).await;
        if probe.is_ok_and(|o| o.data["spec"]["users"] == "probe-users") {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("webhooks never answered:\n{}", wh.log_tail(20)).into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The API server calls the null webhooks once their configurations reached it: its
    // metrics then name them.
    let api_null = interconnects(&client, &null_ns.name);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let _ = api_null.create(&PostParams { dry_run: true, ..Default::default() }, &ic_obj("probe")).await;
        if metrics_text(&client).await.contains("m.null.bench.io") {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("the null webhooks were never called:\n{}", null.log_tail(20)).into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let api_without = interconnects(&client, &without.name);
    let webhook_metrics = || async move {
        match reqwest::get(format!("http://127.0.0.1:{health}/metrics")).await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    };
    let connections_before = webhook_connections(&webhook_metrics().await);
    let defaulted_ns = cp.namespace("bench-defaulted").await;
    let api_defaulted = interconnects(&client, &defaulted_ns.name);
    // Four variants, interleaved so all see the same machine load: through both webhooks;
    // no webhook, the same request; no webhook, the object the webhooks would store (its
    // defaults written by the client), which isolates the cost of the calls themselves from
    // the cost of storing a larger object; through both null webhooks, the same request.
    let apis = [&api_with, &api_without, &api_defaulted, &api_null];
    let q =
        create_latencies(apis, runs, "c", |name, k| if k == 2 { ic_defaulted(name) } else { ic_obj(name) })
            .await?;
    // The cluster admin's calls (and the probes before them) only: the identities' rows
    // below time theirs apart.
    let apiserver_view = histogram_means(&metrics_text(&client).await, API_SERVER_WEBHOOK_TIME, "name");
    let own_view = histogram_means(&webhook_metrics().await, WEBHOOK_HANDLER_TIME, "operation");
    let identity_rows = identity_rows(
        cp,
        [&with.name, &without.name, &defaulted_ns.name, &null_ns.name],
        runs,
        &format!("http://127.0.0.1:{health}/metrics"),
    )
    .await?;
    let metrics = webhook_metrics().await;
    let connections = webhook_connections(&metrics) - connections_before;
    for line in metrics.lines().filter(|l| l.starts_with("qdr_webhook_connections_total")) {
        eprintln!("webhook connections since it started (probes included): {line}");
    }
    let diff = |x: &[f64], y: &[f64]| x.iter().zip(y).map(|(a, b)| a - b).collect::<Vec<f64>>();
    for (k, label) in [
        "both webhooks",
        "no webhook",
        "no webhook, object with the webhooks' defaults",
        "both null webhooks (allowed at once)",
    ]
    .into_iter()
    .enumerate()
    {
        for (j, p) in ["p50", "p99"].into_iter().enumerate() {
            rows.push(Row {
                what: format!("create through the API server, {label}: {p}"),
                runs: q[k][j].clone(),
                unit: "ms",
                target: String::new(),
            });
        }
    }
    rows.push(Row {
        what: "  added by the webhook calls at p50 (vs the same stored object)".into(),
        runs: diff(&q[0][0], &q[2][0]),
        unit: "ms",
        target: "≤ 1".into(),
    });
    rows.push(Row {
        what: "  added by the webhook calls at p99 (vs the same stored object)".into(),
        runs: diff(&q[0][1], &q[2][1]),
        unit: "ms",
        target: "≤ 3".into(),
    });
    rows.push(Row {
        what: "  added by the webhooks and their defaults at p50 (vs the bare request)".into(),
        runs: diff(&q[0][0], &q[1][0]),
        unit: "ms",
        target: String::new(),
    });
    for (j, p) in ["p50", "p99"].into_iter().enumerate() {
        rows.push(Row {
            what: format!("  added by the null webhook calls at {p} (vs the bare request)"),
            runs: diff(&q[3][j], &q[1][j]),
            unit: "ms",
            target: String::new(),
        });
    }
    for (j, p) in ["p50", "p99"].into_iter().enumerate() {
        let ours = diff(&q[0][j], &q[2][j]);
        let null = diff(&q[3][j], &q[1][j]);
        rows.push(Row {
            what: format!("  added by our webhooks ÷ added by the null webhooks, {p}"),
            runs: ours.iter().zip(&null).map(|(a, b)| a / b).collect(),
            unit: "×",
            target: "≤ 1.15".into(),
        });
    }
    rows.push(Row {
        what: "  ratio with / without (same stored object, p50)".into(),
        runs: q[0][0].iter().zip(&q[2][0]).map(|(a, b)| a / b).collect(),
        unit: "×",
        target: String::new(),
    });
    rows.extend(apiserver_view.into_iter().map(|(name, mean)| {
        Row::mean_ms(format!("  one call of {name} as the API server times it (mean, cluster admin)"), mean)
    }));
    rows.extend(own_view.into_iter().map(|(name, mean)| {
        Row::mean_ms(format!("  one /{name} as the webhook times its handler (mean, cluster admin)"), mean)
    }));
    rows.extend(identity_rows);
    rows.push(Row {
        what: format!(
            "  TLS connections (handshakes) the API server opened for {} reviews",
            runs * creates() * 2
        ),
        runs: vec![connections],
        unit: "",
        target: "≤ 2 (connections reused)".into(),
    });
    wh.stop(Duration::from_secs(2));
    null.stop(Duration::from_secs(2));
    Ok(())
}

/// The API server's histogram of one webhook call (from sending the review to having
/// applied its answer), by webhook `name`.
pub(crate) const API_SERVER_WEBHOOK_TIME: &str = "apiserver_admission_webhook_admission_duration_seconds";

/// Our webhook's histogram of one review as its handler times it, by `operation`.
pub(crate) const WEBHOOK_HANDLER_TIME: &str = "qdr_webhook_request_duration_seconds";

/// Creates into each API per round: 150 (20 in the smoke mode, where the controllers of later
/// groups, dev builds, reconcile every Interconnect left here).
fn creates() -> usize {
    crate::scaled(150, 20)
}

/// `runs` rounds of [`creates`] (150) creates into each of the four `apis`, interleaved so all see the same
/// machine load: object `<prefix>-<run>-<i>` made by `object(name, k)` for `apis[k]`. Per
/// api, each round's p50 and p99 in ms (`[k][0]`, `[k][1]`).
pub(crate) async fn create_latencies(
    apis: [&Api<DynamicObject>; 4],
    runs: usize,
    prefix: &str,
    object: impl Fn(&str, usize) -> DynamicObject,
) -> Result<[[Vec<f64>; 2]; 4], kube::Error> {
    let mut q: [[Vec<f64>; 2]; 4] = Default::default();
    for run in 0..runs {
        let mut lat: [Vec<Duration>; 4] = Default::default();
        for i in 0..creates() {
            let name = format!("{prefix}-{run}-{i}");
            for (k, api) in apis.into_iter().enumerate() {
                let obj = object(&name, k);
                let t = Instant::now();
                api.create(&PostParams::default(), &obj).await?;
                lat[k].push(t.elapsed());
            }
        }
        for (k, l) in lat.iter_mut().enumerate() {
            l.sort();
            q[k][0].push(percentile(l, 0.5).as_secs_f64() * 1000.0);
            q[k][1].push(percentile(l, 0.99).as_secs_f64() * 1000.0);
        }
    }
    Ok(q)
}

/// The SubjectAccessReviews the webhook (`qdr-webhook/` clients) has sent so far.
pub(crate) fn webhook_reviews(cp: &ControlPlane) -> usize {
    cp.requests_by("qdr-webhook/")
        .iter()
        .filter(|e| e.object_ref.as_ref().is_some_and(|o| o.resource == "subjectaccessreviews"))
        .count()
}

/// The creates of [`api_server_rows`] as two users who are not cluster admins, in the same
/// four namespaces (`[ours, none, none with defaults, null]`): a namespace admin (every verb
/// on Interconnects and Secrets) and a user allowed to `get` only the Secrets the objects
/// name. Rows: what our webhooks add ÷ what the null webhooks add, at p50 and p99, and the
/// SubjectAccessReviews per create (the first review for the namespace answers for the
/// admin; the narrow user's is refused, then the named Secret is asked; both answers are
/// reused for `--authorization-cache-*-ttl`).
pub(crate) async fn identity_rows(
    cp: &'static ControlPlane,
    namespaces: [&str; 4],
    runs: usize,
    webhook_metrics_url: &str,
) -> Result<Vec<Row>, Box<dyn std::error::Error>> {
    // Names every object of the loop below refers to, derived ones included.
    let names: std::collections::BTreeSet<String> = (0..runs)
        .flat_map(|run| (0..creates()).map(move |i| format!("n-{run}-{i}")))
        .chain(["probe".to_string()])
        .flat_map(|n| {
            qdr_api::defaults(&typed_with_users(&n)).secret_uses().into_iter().map(|(_, name, _)| name)
        })
        .collect();
    let roles = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "bench-ns-admin"},
         "rules": [{"apiGroups": ["interconnectedcloud.github.io"], "resources": ["interconnects"], "verbs": ["*"]},
                   {"apiGroups": [""], "resources": ["secrets"], "verbs": ["*"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "bench-narrow"},
         "rules": [{"apiGroups": ["interconnectedcloud.github.io"], "resources": ["interconnects"], "verbs": ["create", "get"]},
                   {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": names}]}]});
    let out = qdr_tests::components::kubectl_stdin(cp, &["apply", "-f", "-"], &roles.to_string());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for ns in namespaces {
        for (user, role) in [("bench-ns-admin", "bench-ns-admin"), ("bench-narrow", "bench-narrow")] {
            kubectl_ok(
                cp,
                &[
                    "create",
                    "rolebinding",
                    user,
                    "-n",
                    ns,
                    &format!("--clusterrole={role}"),
                    &format!("--user={user}"),
                ],
            )
            .await;
        }
    }
    let mut rows = Vec::new();
    // Object names: `a-…` for the admin, `n-…` (the names the narrow role lists) for the other.
    for (user, label, prefix) in [
        ("bench-ns-admin", "a namespace admin", "a"),
        ("bench-narrow", "a user allowed only the named Secrets", "n"),
    ] {
        let client = client_as(cp, user).await?;
        let apis: Vec<Api<DynamicObject>> = namespaces.iter().map(|ns| interconnects(&client, ns)).collect();
        // Until the bindings are seen.
        let deadline = Instant::now() + Duration::from_secs(30);
        while apis[0]
            .create(&PostParams { dry_run: true, ..Default::default() }, &ic_with_users("probe", false))
            .await
            .is_err()
        {
            if Instant::now() > deadline {
                return Err(format!("{user} could never create through the webhooks").into());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let reviews_before = webhook_reviews(cp);
        let admin = cp.client().await?;
        let webhook_sums = || async {
            let text = match reqwest::get(webhook_metrics_url).await {
                Ok(r) => r.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            histogram_sums(&text, WEBHOOK_HANDLER_TIME, "operation")
        };
        let (api_before, own_before) = (
            histogram_sums(&metrics_text(&admin).await, API_SERVER_WEBHOOK_TIME, "name"),
            webhook_sums().await,
        );
        let q = create_latencies([&apis[0], &apis[1], &apis[2], &apis[3]], runs, prefix, |name, k| {
            ic_with_users(name, k == 2)
        })
        .await?;
        let (api_after, own_after) = (
            histogram_sums(&metrics_text(&admin).await, API_SERVER_WEBHOOK_TIME, "name"),
            webhook_sums().await,
        );
        tokio::time::sleep(Duration::from_secs(1)).await; // the audit log's last lines
        let reviews = webhook_reviews(cp) - reviews_before;
        for (j, p) in ["p50", "p99"].into_iter().enumerate() {
            let ours: Vec<f64> = q[0][j].iter().zip(&q[2][j]).map(|(a, b)| a - b).collect();
            let null: Vec<f64> = q[3][j].iter().zip(&q[1][j]).map(|(a, b)| a - b).collect();
            rows.push(Row {
                what: format!("  as {label}: added by our webhooks ÷ added by the null webhooks, {p}"),
                runs: ours.iter().zip(&null).map(|(a, b)| a / b).collect(),
                unit: "×",
                target: if j == 0 && user == "bench-ns-admin" { "≤ 1.3".into() } else { String::new() },
            });
        }
        rows.push(Row {
            what: format!(
                "  as {label}: SubjectAccessReviews per create through our webhooks (two calls each)"
            ),
            runs: vec![reviews as f64 / (runs * creates()) as f64],
            unit: "",
            target: String::new(),
        });
        // Where the time goes: each call as the API server times it (its patch applied
        // included) and as our handler does.
        let timed = means_between(&api_before, &api_after)
            .into_iter()
            .map(|(name, mean)| (format!("one call of {name} as the API server times it"), mean))
            .chain(
                means_between(&own_before, &own_after)
                    .into_iter()
                    .map(|(name, mean)| (format!("one /{name} as the webhook times its handler"), mean)),
            );
        rows.extend(timed.map(|(what, mean)| Row::mean_ms(format!("  as {label}: {what} (mean)"), mean)));
    }
    Ok(rows)
}
