//! A pass's status and Events, purely: the condition reasons for conflicts, missing
//! Secrets, rollouts, unschedulable routers and their Events; and the retry backoff.

use std::time::{Duration, SystemTime};

use super::backoff;
use super::build::CredentialsReport;
use super::events::scheduling;
use super::observe::{Observed, Unschedulable};
use super::status::{desired, generation, unschedulable_message};
use super::types::{Applied, Conflict, Generation, Ownership, WorkloadStatus};
use crate::references::{Reference, Unmet};
use crate::validated::ValidatedInterconnect;
use qdr_api::{Interconnect, InterconnectStatus};
use serde_json::json;

fn owner() -> ValidatedInterconnect {
    let ic: Interconnect = serde_json::from_value(json!({
        "metadata": {"name": "mesh", "namespace": "ns", "uid": "u-1", "generation": 3}, "spec": {}}))
    .unwrap();
    ValidatedInterconnect::new(&ic).unwrap()
}

fn observed() -> Observed {
    Observed {
        now: SystemTime::now(),
        secrets: Default::default(),
        workload: Ownership::Free,
        pods: vec![],
        terminating: 0,
        unschedulable: Default::default(),
    }
}

fn cond<'a>(s: &'a InterconnectStatus, t: &str) -> (&'a str, &'a str, &'a str) {
    let c = s.conditions.iter().find(|c| c.type_ == t).unwrap_or_else(|| panic!("no {t}"));
    (c.status.as_str(), c.reason.as_str(), c.message.as_str())
}

fn workload(desired: i32, ready: i32, updated: i32, available: i32) -> WorkloadStatus {
    WorkloadStatus { desired, ready, updated, available, current: true }
}

#[test]
fn a_complete_rollout_is_ready_and_not_progressing() {
    let applied = Applied { workload: workload(2, 2, 2, 2), ..Default::default() };
    let s = desired(&owner(), &observed(), &applied, &CredentialsReport::default());
    assert_eq!(cond(&s, "Ready").0, "True");
    assert_eq!(cond(&s, "Progressing").1, "Complete");
    assert_eq!(cond(&s, "Progressing").0, "False");
    assert_eq!(s.observed_generation, Some(3));
}

#[test]
fn updated_but_unavailable_routers_are_still_progressing() {
    let applied = Applied { workload: workload(1, 0, 1, 0), ..Default::default() };
    let s = desired(&owner(), &observed(), &applied, &CredentialsReport::default());
    assert_eq!(cond(&s, "Progressing").0, "True", "never Complete with 0 available");
    assert_eq!(cond(&s, "Progressing").1, "RollingOut");
    assert_eq!(cond(&s, "Ready").0, "False");
}

#[test]
fn a_missing_secret_is_named_with_its_field() {
    let applied = Applied { workload: workload(1, 1, 1, 1), ..Default::default() };
    let report = CredentialsReport {
        unmet: vec![Unmet {
            reference: Reference {
                secret: "my-tls".into(),
                field: "spec.sslProfiles[0].credentials".into(),
                keys: vec!["tls.crt", "tls.key"],
                mounted: true,
                projected: false,
            },
            missing_keys: vec![],
        }],
        ..Default::default()
    };
    let s = desired(&owner(), &observed(), &applied, &report);
    let (status, reason, message) = cond(&s, "Ready");
    assert_eq!((status, reason), ("False", "MissingSecret"));
    assert!(
        message.starts_with("Secret my-tls (spec.sslProfiles[0].credentials) does not exist"),
        "{message}"
    );
    assert_eq!(cond(&s, "Progressing").0, "True");
    assert_eq!(cond(&s, "Progressing").1, "MissingSecret");
    assert_eq!(cond(&s, "Degraded").0, "False");
    // A pass that held the routers for the missing Secret kept what it would prune: its
    // generation is not done until a pass applies it whole.
    let mut ic = owner().ic().clone();
    ic.status = Some(s);
    assert_eq!(generation(&ic), Generation::New);
    let done = desired(&owner(), &observed(), &applied, &CredentialsReport::default());
    ic.status = Some(done);
    assert_eq!(generation(&ic), Generation::Reconciled);
}

#[test]
fn an_expired_or_invalid_certificate_is_not_ready_with_its_own_reason() {
    use crate::references::{Judged, Problem};
    let reference = Reference {
        secret: "my-tls".into(),
        field: "spec.sslProfiles[0].credentials".into(),
        keys: vec!["tls.crt", "tls.key"],
        mounted: true,
        projected: false,
    };
    let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000);
    let expired = Judged { reference: reference.clone(), problem: Problem::Expired(at) };
    let invalid = Judged { reference, problem: Problem::Invalid("tls.crt is not a PEM certificate".into()) };
    let applied = Applied { workload: workload(1, 1, 1, 1), ..Default::default() };
    let report = CredentialsReport { problems: vec![expired.clone()], ..Default::default() };
    let s = desired(&owner(), &observed(), &applied, &report);
    let (status, reason, message) = cond(&s, "Ready");
    assert_eq!((status, reason), ("False", "CertificateExpired"));
    assert!(
        message.starts_with(
            "the certificate in Secret my-tls (spec.sslProfiles[0].credentials) expired at 2026-11-18T11:06:40Z"
        ),
        "{message}"
    );
    assert!(
        message.contains("replace it (the operator renews only the certificates it generates)"),
        "{message}"
    );
    // Served as it is: nothing waits for it, the rollout is complete.
    assert_eq!(cond(&s, "Progressing").0, "False");
    assert_eq!(cond(&s, "Available").0, "True");
    // Invalid comes first, and holds the routers like a missing Secret.
    let report = CredentialsReport { problems: vec![expired, invalid], ..Default::default() };
    let held = Applied { held: true, ..applied };
    let s = desired(&owner(), &observed(), &held, &report);
    let (status, reason, message) = cond(&s, "Ready");
    assert_eq!((status, reason), ("False", "InvalidSecret"));
    assert!(
        message.starts_with("Secret my-tls (spec.sslProfiles[0].credentials): tls.crt is not a PEM"),
        "{message}"
    );
    assert!(message.contains("running routers are left as they are"), "{message}");
    assert_eq!((cond(&s, "Progressing").0, cond(&s, "Progressing").1), ("True", "InvalidSecret"));
}

#[test]
fn a_conflict_degrades_and_names_every_object() {
    let applied = Applied {
        conflicts: vec![
            Conflict { kind: "ServiceAccount".into(), name: "default".into(), controller: None },
            Conflict {
                kind: "Service".into(),
                name: "mesh".into(),
                controller: Some("Interconnect other".into()),
            },
        ],
        ..Default::default()
    };
    let s = desired(&owner(), &observed(), &applied, &CredentialsReport::default());
    let (status, reason, message) = cond(&s, "Degraded");
    assert_eq!((status, reason), ("True", "ConflictingObject"));
    assert!(message.contains("ServiceAccount default exists and is not controlled by this Interconnect"));
    assert!(message.contains("Service mesh exists and is controlled by Interconnect other"));
    assert_eq!(cond(&s, "Ready"), ("False", "ConflictingObject", message));
}

#[test]
fn retries_back_off_exponentially_up_to_a_cap() {
    let delays: Vec<Duration> = (1..=12).map(backoff).collect();
    assert_eq!(delays[0], Duration::from_secs(1));
    assert!(delays.windows(2).all(|w| w[1] == (w[0] * 2).min(Duration::from_secs(300))), "{delays:?}");
    assert_eq!(backoff(u32::MAX), Duration::from_secs(300));
}

fn pod(name: &str, scheduled: Option<(&str, &str)>, deleting: bool) -> k8s_openapi::api::core::v1::Pod {
    let conditions = match scheduled {
        None => json!([{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]),
        Some((reason, message)) => {
            json!([{"type": "PodScheduled", "status": "False", "reason": reason, "message": message}])
        }
    };
    let mut meta = json!({"name": name});
    if deleting {
        meta["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    }
    serde_json::from_value(json!({"metadata": meta, "status": {"conditions": conditions}})).unwrap()
}

const ANTI_AFFINITY: &str = "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules. \
                             preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.";

#[test]
fn unschedulable_pods_are_collected_with_the_schedulers_distinct_reasons() {
    let pods = [
        pod("mesh-d", Some(("Unschedulable", ANTI_AFFINITY)), false),
        pod("mesh-a", None, false),
        pod("mesh-c", Some(("Unschedulable", ANTI_AFFINITY)), false),
        pod("mesh-b", Some(("SchedulerError", "")), false),
        pod("mesh-old", Some(("Unschedulable", "gone")), true),
    ];
    let u = Unschedulable::of(&pods);
    assert_eq!(u.pods, ["mesh-b", "mesh-c", "mesh-d"], "sorted, scheduled and deleting pods skipped");
    assert_eq!(
        u.reasons,
        [ANTI_AFFINITY, "SchedulerError"],
        "distinct; an empty message counts as its reason"
    );
    assert!(Unschedulable::of(&[pod("x", None, false)]).is_empty());
}

#[test]
fn routers_that_cannot_be_scheduled_are_reported_with_count_and_reason() {
    let mut o = observed();
    o.unschedulable = Unschedulable { pods: vec!["mesh-x".into()], reasons: vec![ANTI_AFFINITY.into()] };
    let applied = Applied { workload: workload(4, 3, 4, 3), ..Default::default() };
    let s = desired(&owner(), &o, &applied, &CredentialsReport::default());
    let want = format!("1 of 4 routers cannot be scheduled: {ANTI_AFFINITY}");
    assert_eq!(cond(&s, "Ready"), ("False", "Unschedulable", want.as_str()));
    assert_eq!(cond(&s, "Available"), ("False", "Unschedulable", want.as_str()));
    assert_eq!(cond(&s, "Degraded").0, "False", "the reconcile itself succeeded");
    assert_eq!(
        unschedulable_message(&o.unschedulable, 1),
        format!("1 of 1 router cannot be scheduled: {ANTI_AFFINITY}")
    );

    // Counts that look complete do not hide an unplaced router.
    let applied = Applied { workload: workload(1, 1, 1, 1), ..Default::default() };
    let s = desired(&owner(), &o, &applied, &CredentialsReport::default());
    assert_eq!(cond(&s, "Ready").0, "False");
    assert_eq!(cond(&s, "Ready").1, "Unschedulable");
}

#[test]
fn one_scheduling_event_per_change_of_that_state() {
    let mut ic: Interconnect = serde_json::from_value(json!({
        "metadata": {"name": "mesh", "namespace": "ns", "uid": "u-1", "generation": 3}, "spec": {}}))
    .unwrap();
    let status = |u: Option<(&str, usize)>| {
        let mut o = observed();
        if let Some((reason, n)) = u {
            o.unschedulable = Unschedulable {
                pods: (0..n).map(|i| format!("p{i}")).collect(),
                reasons: vec![reason.into()],
            };
        }
        desired(
            &owner(),
            &o,
            &Applied { workload: workload(4, 3, 4, 3), ..Default::default() },
            &Default::default(),
        )
    };
    let mut sent = Vec::new();
    for step in
        [None, Some((ANTI_AFFINITY, 1)), Some((ANTI_AFFINITY, 1)), Some((ANTI_AFFINITY, 2)), None, None]
    {
        let new = status(step);
        if let Some(change) = scheduling(&ic, &new) {
            sent.push(change.event().reason);
        }
        ic.status = Some(new);
    }
    assert_eq!(sent, ["Unschedulable", "Unschedulable", "Scheduled"], "first, count changed, cleared");
    let warning = scheduling(&ic, &status(Some((ANTI_AFFINITY, 1)))).unwrap().event();
    assert_eq!(warning.type_, kube::runtime::events::EventType::Warning);
    assert!(warning.note.unwrap().starts_with("1 of 4 routers cannot be scheduled: 0/3 nodes"));
}

/// A DaemonSet on more than 1,024 nodes: the status names the first 1,024 pods and counts
/// them all, within the CRD's `maxItems` (a longer list failed the whole status write).
#[test]
fn more_routers_than_the_pod_list_holds_are_counted() {
    let names: Vec<String> = (0..1500).map(|i| format!("mesh-{i:04}")).collect();
    let o = Observed { pods: names.clone(), ..observed() };
    let applied = Applied { workload: workload(1500, 1500, 1500, 1500), ..Default::default() };
    let s = desired(&owner(), &o, &applied, &CredentialsReport::default());
    assert_eq!(s.pods, names[..1024]);
    assert_eq!(s.pod_count, Some(1500));
    let crd = serde_json::to_value(qdr_api::crd()).unwrap();
    let max = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
        ["pods"]["maxItems"];
    assert_eq!(max.as_u64(), Some(s.pods.len() as u64), "the cap is the schema's maxItems");
    let few = Observed { pods: names[..3].to_vec(), ..observed() };
    let s = desired(&owner(), &few, &applied, &CredentialsReport::default());
    assert_eq!((s.pods.len(), s.pod_count), (3, Some(3)));
}

/// The `use` declarations of a module's source, each on one line.
fn uses(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let line = line.trim();
        if current.is_none() && (line.starts_with("use ") || line.starts_with("pub(crate) use ")) {
            current = Some(String::new());
        }
        if let Some(c) = current.as_mut() {
            c.push_str(line);
            c.push(' ');
            if line.ends_with(';') {
                out.extend(current.take());
            }
        }
    }
    out
}

/// Whether the `use` declaration `u` imports module `m` of `reconcile`.
fn imports(u: &str, m: &str) -> bool {
    let word = |w: &str| w.trim_matches(|c: char| !c.is_alphanumeric() && c != '_') == m;
    u.contains(&format!("super::{m}"))
        || u.contains(&format!("reconcile::{m}"))
        || (u.contains("super::{") && u.split([',', '{', '}', ' ']).any(word))
}

/// Imports flow forward only (observe → build → apply → status → events): no stage module
/// imports a later stage, and the shared types import no stage at all.
#[test]
fn stages_import_only_earlier_stages() {
    let stages = [
        ("observe", include_str!("observe.rs")),
        ("build", include_str!("build.rs")),
        ("apply", include_str!("apply.rs")),
        ("status", include_str!("status.rs")),
        ("events", include_str!("events.rs")),
    ];
    for (i, (stage, text)) in stages.iter().enumerate() {
        for (later, _) in &stages[i + 1..] {
            for u in uses(text) {
                assert!(!imports(&u, later), "stage {stage} imports the later stage {later}: {u}");
            }
        }
    }
    for (stage, _) in &stages {
        for u in uses(include_str!("types.rs")) {
            assert!(!imports(&u, stage), "types.rs imports the stage {stage}: {u}");
        }
    }
    // The check itself sees a backward import.
    assert!(imports("use super::status::DEGRADED;", "status"));
    assert!(imports("use super::{Pass, status};", "status"));
    assert!(!imports("use super::types::{DEGRADED, READY};", "status"));
}

#[test]
fn available_holds_across_a_new_generation_and_ready_waits_for_old_routers() {
    // The workload controller has not yet observed the new generation (a config change):
    // the running routers are still available, so Available stays True, not Ready.
    let mut w = workload(3, 3, 0, 3);
    w.current = false;
    let applied = Applied { workload: w, ..Default::default() };
    let s = desired(&owner(), &observed(), &applied, &CredentialsReport::default());
    assert_eq!(cond(&s, "Available").0, "True", "{s:?}");
    assert_eq!(cond(&s, "Ready").0, "False");
    assert_eq!(cond(&s, "Progressing").1, "RollingOut");
    // Rolled out by the counts, but an old router is still shutting down: not Complete.
    let applied = Applied { workload: workload(2, 3, 2, 2), ..Default::default() };
    let mut seen = observed();
    seen.pods = vec!["mesh-a".into(), "mesh-b".into()];
    seen.terminating = 1;
    let s = desired(&owner(), &seen, &applied, &CredentialsReport::default());
    assert_eq!(cond(&s, "Ready").0, "False");
    assert_eq!(cond(&s, "Progressing").1, "RollingOut");
    assert!(cond(&s, "Ready").2.contains("1 old router still running or shutting down"), "{s:?}");
    // One pod too many (scaled 3 → 2, not yet deleted): not Ready either.
    seen.pods.push("mesh-c".into());
    seen.terminating = 0;
    let s = desired(&owner(), &seen, &applied, &CredentialsReport::default());
    assert_eq!(cond(&s, "Ready").0, "False");
    // Gone from the pod store, but the workload controller still counts 3 ready
    // ("3/2 routers ready"): not Ready yet.
    seen.pods.pop();
    let s = desired(&owner(), &seen, &applied, &CredentialsReport::default());
    assert_eq!(cond(&s, "Ready").0, "False", "{s:?}");
    seen.pods.push("mesh-c".into());
    let applied = Applied { workload: workload(2, 2, 2, 2), ..Default::default() };
    // Gone: Ready, Complete, and the selector for the scale subresource.
    seen.pods.pop();
    let s = desired(&owner(), &seen, &applied, &CredentialsReport::default());
    assert_eq!(cond(&s, "Ready").0, "True");
    assert_eq!(cond(&s, "Progressing").1, "Complete");
    assert_eq!(s.selector.as_deref(), Some("application=mesh,interconnect_cr=mesh"));
}

#[test]
fn an_apply_failure_degrades_with_the_api_message_and_is_not_ready() {
    let before = desired(
        &owner(),
        &observed(),
        &Applied { workload: workload(1, 1, 1, 1), ..Default::default() },
        &CredentialsReport::default(),
    );
    let mut ic = owner().ic().clone();
    ic.status = Some(before);
    ic.metadata.generation = Some(4);
    let status = kube::core::Status::failure(
        r#"Service "mesh" is invalid: spec.ports[1].name: Duplicate value: "5672""#,
        "Invalid",
    )
    .with_code(422);
    let e = super::apply::Error::Apply {
        kind: "Service".into(),
        name: "mesh".into(),
        source: kube::Error::Api(Box::new(status)),
    };
    let message = super::Error::Apply(e).to_string();
    assert_eq!(
        message,
        r#"apply: applying Service mesh: Service "mesh" is invalid: spec.ports[1].name: Duplicate value: "5672" (422 Invalid)"#
    );
    let s = super::status::for_failure(&ic, &message, true);
    assert_eq!(cond(&s, "Degraded"), ("True", "ReconcileFailed", message.as_str()));
    assert_eq!(cond(&s, "Ready").0, "False");
    assert_eq!(cond(&s, "Available").0, "True", "the running routers are still available");
    assert_eq!(s.observed_generation, Some(3), "generation 4 was not applied");
    // One Warning per distinct failure, not one per retry.
    let events = super::events::for_failure(&ic, &message);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event().reason, "ReconcileFailed");
    ic.status = Some(s);
    assert!(super::events::for_failure(&ic, &message).is_empty());
    assert_eq!(super::events::for_failure(&ic, "apply: something else").len(), 1);
}

#[test]
fn a_terminating_namespace_or_a_gone_object_is_not_a_failure() {
    use super::types::is_going_away;
    let api = |code: u16, reason: &str, message: &str, kind: &str| {
        let mut s = kube::core::Status::failure(message, reason).with_code(code);
        s.details = Some(serde_json::from_value(json!({"kind": kind})).unwrap());
        kube::Error::Api(Box::new(s))
    };
    let terminating = api(
        403,
        "Forbidden",
        r#"serviceaccounts "mesh" is forbidden: unable to create new content in namespace t because it is being terminated"#,
        "serviceaccounts",
    );
    assert!(is_going_away(&terminating));
    assert!(is_going_away(&api(404, "NotFound", r#"namespaces "t" not found"#, "namespaces")));
    assert!(is_going_away(&api(404, "NotFound", r#"interconnects "mesh" not found"#, "interconnects")));
    assert!(!is_going_away(&api(404, "NotFound", "the server could not find the requested resource", "")));
    assert!(!is_going_away(&api(403, "Forbidden", "cannot patch services", "services")));
}

#[test]
fn service_ports_are_compared_as_a_whole_without_node_ports() {
    use k8s_openapi::api::core::v1::Service;
    let svc = |ports: serde_json::Value| -> Service {
        serde_json::from_value(json!({"spec": {"ports": ports}})).unwrap()
    };
    let desired = svc(json!([{"name": "5672", "port": 5672, "protocol": "TCP", "targetPort": 5672},
                             {"name": "8080", "port": 8080, "protocol": "TCP", "targetPort": 8080}]));
    let live =
        svc(json!([{"name": "8080", "port": 8080, "protocol": "TCP", "targetPort": 8080, "nodePort": 30001},
                          {"name": "5672", "port": 5672, "protocol": "TCP", "targetPort": 5672}]));
    assert!(crate::builders::same_ports(&desired, &live));
    let extra = svc(json!([{"name": "5672", "port": 5672, "protocol": "TCP", "targetPort": 5672},
                           {"name": "8080", "port": 8080, "protocol": "TCP", "targetPort": 8080},
                           {"name": "extra", "port": 9000, "protocol": "TCP", "targetPort": 9000}]));
    assert!(!crate::builders::same_ports(&desired, &extra));
    let edited = svc(json!([{"name": "5672", "port": 9999, "protocol": "TCP", "targetPort": 5672},
                            {"name": "8080", "port": 8080, "protocol": "TCP", "targetPort": 8080}]));
    assert!(!crate::builders::same_ports(&desired, &edited));
}
