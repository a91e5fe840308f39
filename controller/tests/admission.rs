//! Admission equals the API server for every field the operator passes through to the
//! routers' objects (issue 72): random `deploymentPlan` scheduling and metadata fields
//! (tolerations, node selector, topology spread constraints, priority class, pod labels and
//! annotations, Service annotations, the disruption budget), valid and invalid, are judged by
//! `qdr_api::validate` (what the webhook runs) and rendered by the controller's builders
//! into the Deployment or DaemonSet, the Service and the PodDisruptionBudget, which the real
//! API server judges with `dryRun=All`. The webhook must refuse every spec whose objects the
//! API server refuses, with a cause at the user's field; and refuse no spec the API server
//! admits except by a rule of its own (`Forbidden`: the operator's keys, `Every` with spread
//! constraints or a budget bound; `TooMany`: the schema's item limits; the 4 KiB of pod
//! annotations kept for the operator's), which the API server cannot know.
//!
//! `QDR_ADMISSION_CASES` sets the number of cases (default [`DEFAULT_CASES`]);
//! `QDR_ADMISSION_SEED` replays a run (the seed is printed, and on failure each mismatch
//! names its case).

use std::collections::BTreeMap;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, PostParams};
use qdr_api::{ErrorType, FieldError, Interconnect};
use qdr_controller::builders::{self, Settings, Workload};
use qdr_controller::validated::ValidatedInterconnect;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

/// Cases per run: each is judged by `validate` and sends two or three objects to the API
/// server (about 2 ms each on the 2-core CI machine, 16 at a time).
const DEFAULT_CASES: usize = 3000;

/// One random pick of `items`.
fn pick<T: Clone>(rng: &mut StdRng, items: &[T]) -> T {
    items[rng.random_range(0..items.len())].clone()
}

/// One of `good`, or with chance `bad` one of `worse`.
fn choose<T: Clone>(rng: &mut StdRng, bad: f64, good: &[T], worse: &[T]) -> T {
    if rng.random_bool(bad) { pick(rng, worse) } else { pick(rng, good) }
}

/// Label and annotation keys: mostly qualified names, sometimes the operator's keys or
/// malformed ones.
fn key(rng: &mut StdRng, bad: f64) -> String {
    let good = [
        "app",
        "tier",
        "example.com/tier",
        "a.b-c_d",
        "x",
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
    ];
    if rng.random_bool(1.0 - bad) { pick(rng, &good).to_string() } else { pick(rng, &keys()) }
}

/// A label value: mostly valid, sometimes malformed.
fn value(rng: &mut StdRng, bad: f64) -> String {
    if rng.random_bool(1.0 - bad) {
        pick(rng, &["", "v", "a-b.c_d", "x1"]).to_string()
    } else {
        pick(rng, &values())
    }
}

/// Label and annotation keys that are valid elsewhere or malformed.
fn keys() -> Vec<String> {
    let mut k: Vec<String> = [
        "-bad",
        "bad-",
        "a/b/c",
        "Example.com/x",
        "example.com/",
        "/x",
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
        "application",
        "interconnect_cr",
        "pod-template-hash",
        "a b",
        "prometheus.io/port",
    ]
    .map(String::from)
    .to_vec();
    k.push("k".repeat(63));
    k.push("k".repeat(64));
    k.push(format!("{}/k", "d".repeat(254)));
    k
}

/// Label values: valid ones and malformed ones.
fn values() -> Vec<String> {
    let mut v: Vec<String> = ["", "v", "a-b.c_d", "-v", "v-", "a b", "ü"].map(String::from).to_vec();
    v.push("v".repeat(63));
    v.push("v".repeat(64));
    v
}

/// A map of up to 3 entries; annotations (`labels: false`) sometimes hold a value near the
/// API server's 256 KiB limit for an object's annotations.
fn map(rng: &mut StdRng, bad: f64, labels: bool) -> Option<BTreeMap<String, String>> {
    if rng.random_bool(0.4) {
        return None;
    }
    let mut m = BTreeMap::new();
    for _ in 0..rng.random_range(0..=3) {
        let k = key(rng, bad);
        let v = if !labels && rng.random_bool(bad / 2.0) {
            let limit = 256 * 1024 - k.len();
            "a".repeat(pick(rng, &[limit - 2000, limit - 200, limit - 20, limit, limit + 1]))
        } else {
            value(rng, bad)
        };
        m.insert(k, v);
    }
    Some(m)
}

/// A random deployment plan over the fields the operator passes through: each key and
/// value is a malformed one with a chance drawn per case (none in a quarter of the cases),
/// and each enumeration and number sometimes out of range.
fn plan(rng: &mut StdRng) -> Value {
    let bad = pick(rng, &[0.0, 0.02, 0.1, 0.3]);
    let placement = pick(rng, &["Any", "AntiAffinity", "Every"]);
    let mut p = json!({"placement": placement});
    if placement != "Every" {
        p["size"] = json!(pick(rng, &[1, 2, 3]));
    }
    if rng.random_bool(0.5) {
        let n = rng.random_range(0..=3);
        p["tolerations"] = (0..n)
            .map(|_| {
                let mut t = json!({});
                if rng.random_bool(0.8) {
                    t["key"] = json!(key(rng, bad));
                }
                if let Some(op) =
                    choose(rng, bad, &[None, Some("Equal"), Some("Exists")], &[Some(""), Some("In")])
                {
                    t["operator"] = json!(op);
                }
                if rng.random_bool(0.6) {
                    t["value"] = json!(value(rng, bad));
                }
                if let Some(e) =
                    choose(rng, bad, &[None, Some("NoSchedule"), Some("NoExecute")], &[Some(""), Some("Bad")])
                {
                    t["effect"] = json!(e);
                }
                if let Some(s) = choose(rng, bad, &[None, None, Some(5)], &[Some(-1), Some(5)]) {
                    t["tolerationSeconds"] = json!(s);
                }
                t
            })
            .collect();
    }
    if rng.random_bool(0.5) {
        let n = rng.random_range(0..=3);
        let topology = ["topology.kubernetes.io/zone", "kubernetes.io/hostname", "zone", "", "-bad"];
        p["topologySpreadConstraints"] = (0..n)
            .map(|_| {
                let mut c = json!({
                    "maxSkew": choose(rng, bad, &[1, 2], &[0, -1]),
                    "topologyKey": choose(rng, bad, &topology[..3], &topology[3..]),
                    "whenUnsatisfiable": choose(rng, bad, &["DoNotSchedule", "ScheduleAnyway"], &["Bad"]),
                });
                if let Some(m) = choose(rng, bad, &[None, None, Some(1), Some(3)], &[Some(0)]) {
                    c["minDomains"] = json!(m);
                }
                match rng.random_range(0..5) {
                    0 => c["labelSelector"] = json!({"matchLabels": {key(rng, bad): value(rng, bad)}}),
                    1 => {
                        let op = choose(rng, bad, &["In", "NotIn", "Exists", "DoesNotExist"], &["Bad"]);
                        let mut e = json!({"key": key(rng, bad), "operator": op});
                        match rng.random_range(0..3) {
                            0 => {}
                            1 => e["values"] = json!([]),
                            _ => e["values"] = json!([value(rng, bad), value(rng, bad)]),
                        }
                        c["labelSelector"] = json!({"matchExpressions": [e]});
                    }
                    _ => {}
                }
                if rng.random_bool(0.3) {
                    c["matchLabelKeys"] = json!([key(rng, bad)]);
                }
                for f in ["nodeAffinityPolicy", "nodeTaintsPolicy"] {
                    if let Some(v) =
                        choose(rng, bad, &[None, None, Some("Honor"), Some("Ignore")], &[Some("Bad")])
                    {
                        c[f] = json!(v);
                    }
                }
                c
            })
            .collect();
    }
    if let Some(m) = map(rng, bad, true) {
        p["nodeSelector"] = json!(m);
    }
    if let Some(c) = choose(rng, bad, &[None, None, Some("high-priority"), Some("a.b")], &[Some("Bad_Name")])
    {
        p["priorityClassName"] = json!(c);
    }
    if let Some(m) = map(rng, bad, true) {
        p["podLabels"] = json!(m);
    }
    if let Some(m) = map(rng, bad, false) {
        p["podAnnotations"] = json!(m);
    }
    if let Some(m) = map(rng, bad, false) {
        p["serviceAnnotations"] = json!(m);
    }
    if rng.random_bool(0.4) {
        let (good, worse) =
            ([json!(0), json!(1), json!("25%"), json!("0%")], [json!(-1), json!("101%"), json!("x")]);
        let mut b = json!({});
        if let Some(e) = pick(rng, &[None, Some(true), Some(false)]) {
            b["enabled"] = json!(e);
        }
        for f in ["maxUnavailable", "minAvailable"] {
            if rng.random_bool(0.5) {
                b[f] = choose(rng, bad, &good, &worse);
            }
        }
        p["disruptionBudget"] = b;
    }
    p
}

/// The user's field an API server cause is at, as a path prefix of the webhook's errors:
/// `spec.template.spec.tolerations[1].effect` → `spec.deploymentPlan.tolerations[1]`.
fn user_field(kind: &str, field: &str) -> String {
    let plan = "spec.deploymentPlan";
    let item = |rest: &str, name: &str| {
        let index = rest.split(']').next().unwrap_or_default();
        format!("{plan}.{name}{index}]")
    };
    if kind == "PodDisruptionBudget" {
        return format!("{plan}.disruptionBudget");
    }
    if kind == "Service" {
        return format!("{plan}.serviceAnnotations");
    }
    let Some(rest) = field.strip_prefix("spec.template.") else { return field.to_string() };
    match rest {
        r if r.starts_with("spec.tolerations[") => item(&r["spec.tolerations".len()..], "tolerations"),
        r if r.starts_with("spec.topologySpreadConstraints[") => {
            item(&r["spec.topologySpreadConstraints".len()..], "topologySpreadConstraints")
        }
        r if r.starts_with("spec.nodeSelector") => format!("{plan}.nodeSelector"),
        r if r.starts_with("spec.priorityClassName") => format!("{plan}.priorityClassName"),
        r if r.starts_with("metadata.labels") || r.starts_with("labels") => format!("{plan}.podLabels"),
        r if r.starts_with("metadata.annotations") || r.starts_with("annotations") => {
            format!("{plan}.podAnnotations")
        }
        r => r.to_string(),
    }
}

/// Whether a webhook error is a rule of the operator's own, which the API server cannot
/// know (see the module docs), or the room the pods' annotations keep for the operator's
/// (`qdr_api::owned_keys::POD_ANNOTATION_RESERVE`).
fn own_rule(e: &FieldError) -> bool {
    matches!(e.error_type, ErrorType::Forbidden | ErrorType::TooMany)
        || (e.error_type == ErrorType::TooLong && e.field == "spec.deploymentPlan.podAnnotations")
}

/// What the API server answered a dry-run create: the causes of a 422 (kind, field,
/// message), empty when it admitted the object.
async fn dry_run<K>(api: Api<K>, obj: &K) -> Vec<(String, String, String)>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let pp = PostParams { dry_run: true, ..Default::default() };
    match api.create(&pp, obj).await {
        Ok(_) => Vec::new(),
        Err(kube::Error::Api(s)) if s.code == 422 => {
            let kind = K::kind(&()).to_string();
            let causes = s.details.map(|d| d.causes).unwrap_or_default();
            if causes.is_empty() {
                return vec![(kind, String::new(), s.message)];
            }
            causes.into_iter().map(|c| (kind.clone(), c.field, c.message)).collect()
        }
        Err(e) => panic!("dry run of {} failed: {e}", K::kind(&())),
    }
}

fn settings() -> Settings {
    Settings {
        hash_key: qdr_controller::hash_key::HashKey::from_bytes(&[7; 32]).unwrap(),
        seal_key: qdr_controller::hash_key::HashKey::from_bytes(&[9; 32]).unwrap(),
        default_image: "quay.io/interconnectedcloud/qdrouterd:1.19.0".into(),
        routes: false,
        lifetimes: Default::default(),
        run_as_user: Some(builders::DEFAULT_RUN_AS_USER),
        observe_mesh: false,
        controller_pods: builders::ControllerPods::installed_in("qdr-operator"),
        router_requests: builders::default_requests(),
    }
}

/// One case's outcome.
struct Verdict {
    /// Whether the API server refused an object rendered from the spec.
    api_refused: bool,
    /// Whether the webhook refused the spec.
    webhook_refused: bool,
    /// `None` when the two agree, else why not.
    mismatch: Option<String>,
}

/// Judges one case (see the module docs).
async fn judge(client: kube::Client, ns: String, plan: Value) -> Verdict {
    let ic: Interconnect = serde_json::from_value(json!({
        "apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
        "metadata": {"name": "parity", "namespace": ns, "uid": "0f1e2d3c-aaaa-bbbb-cccc-000000000072"},
        "spec": {"deploymentPlan": plan, "listeners": [{"port": 5672}]},
    }))
    .unwrap();
    let errors = qdr_api::validate(&ic);
    let o = ValidatedInterconnect::unvalidated_for_admission_parity(&ic).unwrap();
    let config = o.rendered_config();
    let mut causes =
        match builders::workload(&o, &settings(), &config, "fp", &Default::default(), &Default::default()) {
            Workload::Deployment(d) => dry_run(Api::<Deployment>::namespaced(client.clone(), &ns), &d).await,
            Workload::DaemonSet(d) => dry_run(Api::<DaemonSet>::namespaced(client.clone(), &ns), &d).await,
        };
    causes.extend(dry_run(Api::<Service>::namespaced(client.clone(), &ns), &builders::service(&o)).await);
    if let Some(pdb) = builders::budget(&o, None, &[]).1 {
        causes.extend(dry_run(Api::<PodDisruptionBudget>::namespaced(client, &ns), &pdb).await);
    }
    let (api_refused, webhook_refused) = (!causes.is_empty(), !errors.is_empty());
    let shown = || errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
    for (kind, field, message) in &causes {
        let at = user_field(kind, field);
        if !errors.iter().any(|e| e.field.starts_with(&at)) {
            return Verdict {
                api_refused,
                webhook_refused,
                mismatch: Some(format!(
                    "the API server refuses {kind} at {field} ({message}), the webhook has no cause at {at} \
                     (its causes: [{}])",
                    shown()
                )),
            };
        }
    }
    // A bound of a budget that is not made (placement `Every`, `enabled: false`) reaches no
    // API server: refusing it is the webhook's own rule.
    let rendered_budget = builders::budget(&o, None, &[]).1.is_some();
    let own = |e: &FieldError| own_rule(e) || (!rendered_budget && e.field.contains(".disruptionBudget"));
    if !api_refused && errors.iter().any(|e| !own(e)) {
        let mismatch = Some(format!("the webhook refuses what the API server admits: {}", shown()));
        return Verdict { api_refused, webhook_refused, mismatch };
    }
    Verdict { api_refused, webhook_refused, mismatch: None }
}

/// See the module docs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_refuses_exactly_what_the_api_server_refuses() {
    let cp = qdr_tests::shared().await;
    let ns = cp.namespace("admission").await;
    let cases: usize =
        std::env::var("QDR_ADMISSION_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_CASES);
    let seed: u64 = std::env::var("QDR_ADMISSION_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    eprintln!("admission parity: {cases} cases, seed {seed} (QDR_ADMISSION_SEED={seed} replays them)");
    let started = std::time::Instant::now();
    let results: Vec<(usize, Value, Verdict)> = futures::stream::iter(0..cases)
        .map(|i| {
            let plan =
                plan(&mut StdRng::seed_from_u64(seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)));
            let (client, ns) = (ns.client.clone(), ns.name.clone());
            async move { (i, plan.clone(), judge(client, ns, plan).await) }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let count = |f: &dyn Fn(&Verdict) -> bool| results.iter().filter(|r| f(&r.2)).count();
    eprintln!(
        "admission parity: {cases} cases in {:.1} s: the API server refused {}, the webhook {} ({} by its own rules \
         only)",
        started.elapsed().as_secs_f64(),
        count(&|r| r.api_refused),
        count(&|r| r.webhook_refused),
        count(&|r| r.webhook_refused && !r.api_refused),
    );
    let mismatches: Vec<String> = results
        .iter()
        .filter_map(|(i, plan, r)| {
            r.mismatch.as_ref().map(|m| format!("case {i} (seed {seed}): {m}\n  deploymentPlan: {plan}"))
        })
        .collect();
    assert!(
        mismatches.is_empty(),
        "{} of {cases} cases disagree (seed {seed}); the first 10:\n{}",
        mismatches.len(),
        mismatches
            .iter()
            .take(10)
            .map(|m| m.chars().take(1500).collect::<String>())
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Both sides refused and admitted a fair share: the generator reaches both.
    assert!(
        count(&|r| r.api_refused) * 10 >= cases
            && count(&|r| !r.api_refused && !r.webhook_refused) * 10 >= cases,
        "a lopsided generator"
    );
}
