//! A pass's status and Events, purely: the condition reasons for conflicts, missing
//! Secrets, rollouts, unschedulable routers and their Events; and the retry backoff.

use std::time::{Duration, SystemTime};

use super::backoff;
use super::build::CredentialsReport;
use super::events::scheduling;
use super::observe::{Observed, Unschedulable};
use super::status::{desired, generation, unschedulable_message};
use super::types::{Applied, Conflict, Generation, Ownership, PLACEMENT_DEADLINE, Previous, WorkloadStatus};
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
        shutting_down: vec![],
        unschedulable: Default::default(),
        routers: vec![],
        live_tries: None,
        links: Default::default(),
        site_awaited: false,
        admin_budgets: Vec::new(),
        admin_policies: Vec::new(),
        retiring: None,
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

/// Make before break: while the workload a placement change replaces still runs, the change
/// is in progress even when the new routers are all up (the old one is deleted by the next
/// pass), and past the deadline Progressing turns False with the Deployment controller's
/// reason while both keep running.
#[test]
fn a_placement_change_is_in_progress_while_the_replaced_workload_runs() {
    let previous =
        Previous { kind: "Deployment", name: "mesh".into(), ready: 3, waiting: Duration::from_secs(65) };
    let applied =
        Applied { workload: workload(1, 0, 1, 0), previous: Some(previous.clone()), ..Default::default() };
    let s = desired(&owner(), &observed(), &applied, &CredentialsReport::default());
    let (status, reason, message) = cond(&s, "Progressing");
    assert_eq!((status, reason), ("True", "RollingOut"));
    assert!(
        message.contains(
            "placement change: Deployment mesh keeps its 3 ready routers until DaemonSet mesh has all its routers ready (waiting 1m 5s)"
        ),
        "{message}"
    );
    assert_eq!(cond(&s, "Ready").0, "False");

    let whole = Applied { workload: workload(1, 1, 1, 1), ..applied.clone() };
    let s = desired(&owner(), &observed(), &whole, &CredentialsReport::default());
    assert_eq!(cond(&s, "Progressing").0, "True", "not Complete while the old routers run");
    assert_eq!(cond(&s, "Ready").0, "False");

    let late = Previous { waiting: PLACEMENT_DEADLINE, ..previous };
    let stalled = Applied { previous: Some(late), ..applied };
    let s = desired(&owner(), &observed(), &stalled, &CredentialsReport::default());
    let (status, reason, message) = cond(&s, "Progressing");
    assert_eq!((status, reason), ("False", "ProgressDeadlineExceeded"));
    assert!(message.contains("the deadline of 10m passed"), "{message}");
}

#[test]
fn a_workload_is_complete_only_with_every_router_ready_on_the_current_template() {
    assert!(workload(3, 3, 3, 3).complete());
    assert!(!workload(3, 2, 3, 2).complete(), "a router not ready");
    assert!(!workload(3, 3, 2, 3).complete(), "a router on the old template");
    assert!(!workload(0, 0, 0, 0).complete(), "a DaemonSet no node takes");
    assert!(!WorkloadStatus { current: false, ..workload(1, 1, 1, 1) }.complete(), "not observed yet");
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
fn a_half_applied_visit_is_followed_by_a_read_at_the_first_recheck() {
    use crate::reconcile::read::{MESH_RECHECK, MESH_RESYNC, recheck, unsettled_after};
    let resync = MESH_RESYNC;
    // Six unsettled reads in a row: the next one would wait the resync.
    assert_eq!(recheck(unsettled_after(6, false, false, true), resync), MESH_RESYNC);
    assert_eq!(recheck(unsettled_after(6, false, true, true), resync), MESH_RECHECK);
    assert_eq!(unsettled_after(6, true, true, true), 0, "connected");
    assert_eq!(unsettled_after(6, false, false, false), 1, "the pods changed");
    assert_eq!(unsettled_after(u32::MAX, false, false, true), u32::MAX);
}

#[test]
fn a_router_waiting_for_its_gate_is_read_again_quickly_for_a_while() {
    use crate::reconcile::read::{GATE_RECHECK, GATE_RECHECKS, MESH_RECHECK, MESH_RESYNC, due};
    assert_eq!(due(0, 0, MESH_RESYNC), MESH_RESYNC, "a connected mesh, no router waiting");
    assert_eq!(due(1, 0, MESH_RESYNC), MESH_RECHECK, "not connected, no router waiting");
    assert_eq!(due(1, 1, MESH_RESYNC), GATE_RECHECK, "the first read after a router started");
    assert_eq!(due(5, GATE_RECHECKS, MESH_RESYNC), GATE_RECHECK);
    assert_eq!(due(5, GATE_RECHECKS + 1, MESH_RESYNC), MESH_RECHECK * 16, "then the usual schedule");
    assert!(GATE_RECHECK * GATE_RECHECKS <= MESH_RECHECK * 2, "bounded: a few seconds of quick reads");
}

#[test]
fn a_mesh_rests_until_its_pods_change_or_a_site_is_awaited() {
    use crate::grants::SITE_RECHECK;
    use crate::reconcile::read::{ReadPlan, rest_or_read};
    let soon = Some(Duration::from_secs(7));
    // (same pods, left, reading, resting, site awaited)
    let plan = |same, left, reading, resting, site| rest_or_read(same, left, reading, resting, site);
    let rests = ReadPlan { start: false, resting: true, next: None };
    assert_eq!(plan(true, None, false, true, false), rests, "due: the reader reads, not the pass");
    assert_eq!(plan(true, soon, false, true, false), rests, "not due: the pass need not come back");
    let starts = ReadPlan { start: true, resting: false, next: None };
    assert_eq!(plan(false, None, false, true, false), starts, "the pods changed: read now");
    let site = ReadPlan { start: true, resting: false, next: Some(SITE_RECHECK) };
    assert_eq!(plan(true, None, false, true, true), site, "a site awaited: the passes read");
    // No rest: as before.
    assert_eq!(plan(true, soon, false, false, false), ReadPlan { start: false, resting: false, next: soon });
    assert_eq!(plan(true, None, true, false, false), ReadPlan { start: false, resting: false, next: None });
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
        (
            "apply",
            concat!(
                include_str!("apply/mod.rs"),
                include_str!("apply/write.rs"),
                include_str!("apply/secrets.rs"),
                include_str!("apply/workload.rs"),
                include_str!("apply/exposure.rs"),
                include_str!("apply/prune.rs")
            ),
        ),
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

// The mesh as the routers report it (`status::with_mesh`, `read::recheck`).

mod mesh {
    use std::collections::{BTreeMap, BTreeSet};
    use std::time::Duration;

    use super::{cond, observed, owner, workload};
    use crate::mesh::{Link, MeshReport, Mode, Observation, RouterView, assess};
    use crate::reconcile::build::CredentialsReport;
    use crate::reconcile::observe::{Observed, RouterPod};
    use crate::reconcile::read::{MESH_RECHECK, MESH_RESYNC, MeshRead, recheck, resync};
    use crate::reconcile::status::{desired, with_mesh};
    use crate::reconcile::types::Applied;
    use qdr_api::router_config::Rendered;
    use qdr_api::{Interconnect, InterconnectStatus};

    const HASH: &str = "0123456789abcdef";

    pub(super) fn pods(names: &[&str], config: &str) -> Observed {
        let routers = names
            .iter()
            .map(|n| RouterPod {
                name: n.to_string(),
                ip: Some("10.88.0.9".into()),
                node: Some("real-0".into()),
                ready: true,
                ready_since: None,
                config_map: Some(format!("mesh-router-config-{config}")),
                owned: true,
                gated: false,
                linked: false,
                sites_trust: None,
            })
            .collect();
        Observed { pods: names.iter().map(|n| n.to_string()).collect(), routers, ..observed() }
    }

    fn router(id: &str, peers: &[&str]) -> Observation {
        Observation::Answered(RouterView {
            id: id.into(),
            mode: Mode::Interior,
            reaches: peers.iter().map(|p| (*p).into()).collect::<BTreeSet<_>>(),
            inter_router: peers
                .iter()
                .map(|p| Link { peer: (*p).into(), outgoing: id < *p, encrypted: true })
                .collect(),
            edge: vec![],
            clients: 2,
            links_blocked: 1,
            deliveries_stuck: 0,
            detailed: vec![],
            deferred: 0,
            routed: false,
            live: None,
        })
    }

    fn read(observations: &[(&str, Observation)]) -> MeshRead {
        let observations: BTreeMap<String, Observation> =
            observations.iter().map(|(p, o)| (p.to_string(), o.clone())).collect();
        let report: MeshReport = assess(Mode::Interior, &observations);
        MeshRead { blocked: None, observations, report, next: Some(MESH_RESYNC), restored: Vec::new() }
    }

    fn status(o: &Observed, r: &MeshRead) -> InterconnectStatus {
        let applied = Applied { workload: workload(3, 3, 3, 3), ..Default::default() };
        let s = desired(&owner(), o, &applied, &CredentialsReport::default());
        with_mesh(s, &owner(), o, r, &rendered(), None)
    }

    /// A configuration of hash [`HASH`] without live entities.
    fn rendered() -> Rendered {
        Rendered {
            text: String::new(),
            hash: HASH.into(),
            startup_hash: HASH.into(),
            live: false,
            startup_fields: String::new(),
        }
    }

    /// Routers not Ready because they wait for their readiness gate: `Ready` gives the mesh's
    /// reason (what keeps them from being linked), not "not ready".
    #[test]
    fn routers_waiting_for_their_gate_are_not_ready_for_the_meshs_reason() {
        let mut o = pods(&["mesh-a", "mesh-b", "mesh-c"], "0123456789");
        let r = read(&[
            ("mesh-a", router("mesh-a", &["mesh-b"])),
            ("mesh-b", router("mesh-b", &["mesh-a"])),
            ("mesh-c", router("mesh-c", &[])),
        ]);
        let not_ready = |o: &Observed| {
            let applied = Applied { workload: workload(3, 2, 3, 2), ..Default::default() };
            let s = desired(&owner(), o, &applied, &CredentialsReport::default());
            let s = with_mesh(s, &owner(), o, &r, &rendered(), None);
            assert_eq!(cond(&s, "MeshConnected").1, "Partitioned");
            (cond(&s, "Ready").0.to_string(), cond(&s, "Ready").1.to_string())
        };
        assert_eq!(
            not_ready(&o),
            ("False".into(), "RoutersNotReady".into()),
            "no gate: the pods' own reason"
        );
        o.routers[2].gated = true;
        assert_eq!(not_ready(&o), ("False".into(), "Partitioned".into()), "gated, running, not linked");
    }

    /// A router of [`router`] that answered what the visit did to its live entities.
    fn wrote(id: &str, peers: &[&str], hash: &str, applied: bool, refused: Option<&str>) -> Observation {
        let Observation::Answered(mut v) = router(id, peers) else { unreachable!() };
        v.live = Some(Box::new(crate::mesh::live::Outcome {
            hash: hash.into(),
            applied,
            created: 1,
            deleted: 0,
            refused: refused.map(String::from),
            deferred: 0,
            checked: None,
        }));
        Observation::Answered(v)
    }

    #[test]
    fn with_live_entities_a_router_runs_the_configuration_it_answered_it_holds() {
        // The ConfigMap is named by the start-up hash; the configuration by the whole one.
        let (startup, whole) = ("5555555555aaaa", "7777777777bbbb");
        let config = Rendered {
            text: String::new(),
            hash: whole.into(),
            startup_hash: startup.into(),
            live: true,
            startup_fields: String::new(),
        };
        let o = pods(&["mesh-a", "mesh-b", "mesh-c"], "5555555555");
        let applied = Applied { workload: workload(3, 3, 3, 3), ..Default::default() };
        let status_of = |r: &MeshRead| {
            let s = desired(&owner(), &o, &applied, &CredentialsReport::default());
            with_mesh(s, &owner(), &o, r, &config, Some("spec.edgeListeners"))
        };
        let all = status_of(&read(&[
            ("mesh-a", wrote("mesh-a", &["mesh-b", "mesh-c"], whole, true, None)),
            ("mesh-b", wrote("mesh-b", &["mesh-a", "mesh-c"], whole, true, None)),
            ("mesh-c", wrote("mesh-c", &["mesh-a", "mesh-b"], whole, true, None)),
        ]));
        assert_eq!(all.config_hash.as_deref(), Some("7777777777"));
        assert!(
            all.routers.iter().all(|r| r.config_hash.as_deref() == Some("7777777777")),
            "{:?}",
            all.routers
        );
        assert_eq!(cond(&all, "ConfigApplied").1, "Applied");
        // One router still holds the last configuration, one refused, one not read yet.
        let some = status_of(&read(&[
            ("mesh-a", wrote("mesh-a", &["mesh-b", "mesh-c"], "6666666666", true, None)),
            (
                "mesh-b",
                wrote(
                    "mesh-b",
                    &["mesh-a", "mesh-c"],
                    whole,
                    false,
                    Some("CREATE address x answered 400: Already exists"),
                ),
            ),
            ("mesh-c", Observation::Pending("not read yet".into())),
        ]));
        let hashes: Vec<Option<&str>> = some.routers.iter().map(|r| r.config_hash.as_deref()).collect();
        assert_eq!(hashes, [Some("6666666666"), None, None]);
        let (status, reason, message) = cond(&some, "ConfigApplied");
        assert_eq!((status, reason), ("False", "Refused"));
        assert!(
            message.contains("0/3 routers run configuration 7777777777")
                && message.contains("mesh-b refused CREATE address x answered 400: Already exists")
                && message.contains("mesh-c not written yet")
                && message.contains("mesh-a runs 6666666666"),
            "{message}"
        );
        // A visit that stopped half way: the condition says what the router lacks.
        let half = "1 live entities missing until the next visit (autoLink qdr-operator-auto-link-1): \
                    the visit stopped: no answer within 5s";
        let cut = status_of(&read(&[
            ("mesh-a", wrote("mesh-a", &["mesh-b", "mesh-c"], whole, true, None)),
            ("mesh-b", wrote("mesh-b", &["mesh-a", "mesh-c"], whole, true, None)),
            ("mesh-c", Observation::Unreachable(half.into())),
        ]));
        let (status, reason, message) = cond(&cut, "ConfigApplied");
        assert_eq!((status, reason), ("False", "Applying"));
        assert!(message.contains(&format!("mesh-c: {half}")), "{message}");
        assert!(crate::reconcile::read::half_applied(&Observation::Unreachable(half.into())));
        assert!(!crate::reconcile::read::half_applied(&Observation::Unreachable(
            "no answer within 5s".into()
        )));
        let stored = Interconnect { status: Some(some.clone()), ..owner().ic().clone() };
        use crate::reconcile::events::{Change, config as config_event};
        assert!(matches!(config_event(owner().ic(), &some), Some(Change::ConfigRefused(_))));
        assert_eq!(config_event(&stored, &some), None, "once, not once per pass");
        assert!(matches!(config_event(&stored, &all), Some(Change::ConfigApplied(_))));
        // Without a refusal, routers being written are `Applying`.
        let applying = status_of(&read(&[
            ("mesh-a", wrote("mesh-a", &["mesh-b", "mesh-c"], whole, true, None)),
            ("mesh-b", wrote("mesh-b", &["mesh-a", "mesh-c"], whole, false, None)),
            ("mesh-c", wrote("mesh-c", &["mesh-a", "mesh-b"], whole, true, None)),
        ]));
        assert_eq!(cond(&applying, "ConfigApplied").1, "Applying");
        assert!(!cond(&applying, "ConfigApplied").2.contains("rolling"), "a live change rolls nothing");
        // A router of the template before: a roll, and what forced it.
        let mut rolling = o.clone();
        rolling.routers[0].config_map = Some("mesh-router-config-4444444444".into());
        let s = desired(&owner(), &rolling, &applied, &CredentialsReport::default());
        let r = read(&[
            ("mesh-a", wrote("mesh-a", &["mesh-b", "mesh-c"], "6666666666", true, None)),
            ("mesh-b", wrote("mesh-b", &["mesh-a", "mesh-c"], whole, true, None)),
            ("mesh-c", wrote("mesh-c", &["mesh-a", "mesh-b"], whole, true, None)),
        ]);
        let rolled = with_mesh(s, &owner(), &rolling, &r, &config, Some("spec.edgeListeners"));
        let (_, reason, message) = cond(&rolled, "ConfigApplied");
        assert_eq!(reason, "RollingOut");
        assert!(
            message.ends_with(
                "; rolling the routers: spec.edgeListeners changed, which a running router cannot take"
            ),
            "{message}"
        );
    }

    /// Refusals of one configuration are counted in a row; another configuration starts
    /// again, a read without a refusal clears, a read of no router of the template leaves.
    #[test]
    fn refusals_of_one_configuration_are_counted_in_a_row() {
        use crate::reconcile::read::tried;
        let h = |c: char| Some(c.to_string().repeat(64));
        let mut n = None;
        for _ in 0..crate::reconcile::LIVE_TRIES {
            n = tried(n, h('a'), true);
        }
        assert_eq!(n, Some(("a".repeat(64), crate::reconcile::LIVE_TRIES)));
        assert_eq!(tried(n.clone(), None, false), n, "no router of the template read");
        assert_eq!(tried(n.clone(), h('b'), true), Some(("b".repeat(64), 1)), "another configuration");
        assert_eq!(tried(n, h('a'), false), None, "taken");
    }

    /// A router found holding the configuration, then found with entities written back to
    /// the same one, had them changed outside the operator; a first write is not that.
    #[test]
    fn entities_put_back_on_a_router_that_held_them_are_reported() {
        use crate::reconcile::read::restored;
        let at = |pod: &str, hash: &str, applied: bool, created: usize| {
            let Observation::Answered(mut v) = router(pod, &[]) else { unreachable!() };
            v.live = Some(Box::new(crate::mesh::live::Outcome {
                hash: hash.into(),
                applied,
                created,
                deleted: 0,
                refused: None,
                deferred: 0,
                checked: None,
            }));
            (pod.to_string(), Observation::Answered(v))
        };
        let kept = |list: &[(String, Observation)]| -> crate::reconcile::read::Answers {
            list.iter().cloned().collect::<BTreeMap<_, _>>().into()
        };
        let before =
            kept(&[at("mesh-a", "h1", true, 0), at("mesh-b", "h1", false, 0), at("mesh-c", "h0", true, 0)]);
        let now = kept(&[
            at("mesh-a", "h1", true, 2),
            at("mesh-b", "h1", true, 2),
            at("mesh-c", "h1", true, 2),
            at("mesh-d", "h1", true, 2),
        ]);
        assert_eq!(restored(&before, &now), ["mesh-a: 2 created, 0 deleted"]);
        let quiet = kept(&[at("mesh-a", "h1", true, 0)]);
        assert!(restored(&before, &quiet).is_empty(), "nothing written");
    }

    #[test]
    fn a_connected_mesh_lists_every_router_and_link_and_stays_ready() {
        let o = pods(&["mesh-a", "mesh-b", "mesh-c"], "0123456789");
        let r = read(&[
            ("mesh-a", router("mesh-a", &["mesh-b", "mesh-c"])),
            ("mesh-b", router("mesh-b", &["mesh-a", "mesh-c"])),
            ("mesh-c", router("mesh-c", &["mesh-a", "mesh-b"])),
        ]);
        let s = status(&o, &r);
        assert_eq!(cond(&s, "MeshConnected").0, "True");
        assert_eq!(cond(&s, "MeshConnected").1, "Connected");
        assert_eq!(cond(&s, "Ready").0, "True");
        assert_eq!((cond(&s, "ConfigApplied").0, cond(&s, "ConfigApplied").1), ("True", "Applied"));
        let mesh = s.mesh.as_ref().unwrap();
        assert_eq!(mesh.summary, "3/3 connected");
        assert_eq!((mesh.interiors_expected, mesh.interiors_connected, mesh.missing_link_count), (3, 3, 0));
        assert!(mesh.missing_links.is_empty() && mesh.unreachable.is_empty());
        assert_eq!(s.config_hash.as_deref(), Some("0123456789"));
        assert_eq!(s.routers.len(), 3);
        let a = &s.routers[0];
        assert_eq!(
            (a.pod.as_str(), a.id.as_deref(), a.mode.as_deref()),
            ("mesh-a", Some("mesh-a"), Some("interior"))
        );
        assert_eq!((a.node.as_deref(), a.config_hash.as_deref()), (Some("real-0"), Some("0123456789")));
        assert_eq!(
            (a.reached, a.inter_router_links, a.edge_links, a.uplink.as_deref()),
            (Some(2), Some(2), Some(0), None)
        );
    }

    /// A router that answered with `clients`, `blocked` and `stuck` (the counts that change
    /// all the time on a busy mesh) and the same links as [`router`].
    fn busy(id: &str, peers: &[&str], (clients, blocked, stuck): (u64, u64, u64)) -> Observation {
        let Observation::Answered(mut v) = router(id, peers) else { unreachable!() };
        (v.clients, v.links_blocked, v.deliveries_stuck) = (clients, blocked, stuck);
        Observation::Answered(v)
    }

    #[test]
    fn counts_that_change_all_the_time_are_metrics_and_write_no_status() {
        use crate::reconcile::status::equal_ignoring_times;
        let o = pods(&["mesh-a", "mesh-b"], "0123456789");
        let at = |counts| {
            read(&[
                ("mesh-a", busy("mesh-a", &["mesh-b"], counts)),
                ("mesh-b", busy("mesh-b", &["mesh-a"], counts)),
            ])
        };
        let (quiet, loaded) = (at((0, 0, 0)), at((9000, 12, 40)));
        let stored = status(&o, &quiet);
        assert!(equal_ignoring_times(&stored, &status(&o, &loaded)), "the status is the same: no write");
        assert_eq!(loaded.sample().client_connections, 18000);
        assert_eq!((loaded.sample().links_blocked, loaded.sample().deliveries_stuck), (24, 80));
        // A link that goes is a change of the mesh: written.
        let broken =
            read(&[("mesh-a", busy("mesh-a", &[], (0, 0, 0))), ("mesh-b", busy("mesh-b", &[], (0, 0, 0)))]);
        assert!(!equal_ignoring_times(&stored, &status(&o, &broken)));
        // The reader wakes no pass for a read that found the same mesh, and one for a change.
        use crate::reconcile::read::same_mesh;
        let kept = |o: &BTreeMap<String, Observation>| crate::reconcile::read::Answers::from(o.clone());
        assert!(same_mesh(&kept(&quiet.observations), &kept(&loaded.observations)));
        assert!(!same_mesh(&kept(&quiet.observations), &kept(&broken.observations)));
        let mut fewer = quiet.observations.clone();
        fewer.pop_last();
        assert!(!same_mesh(&kept(&quiet.observations), &kept(&fewer)));
    }

    /// `n` router pods named as a DaemonSet names them on nodes named as a cloud names
    /// them: the status's size at `n` routers.
    fn every_on(n: usize) -> Observed {
        let names: Vec<String> = (0..n).map(|i| format!("router-mesh-production-{i:05x}")).collect();
        let mut o = pods(&names.iter().map(String::as_str).collect::<Vec<_>>(), "0123456789");
        for (i, r) in o.routers.iter_mut().enumerate() {
            r.node = Some(format!("ip-10-0-{}-{}.eu-west-1.compute.internal", i / 250, i % 250));
        }
        o
    }

    #[test]
    fn the_status_of_128_routers_stays_under_64_kib_whatever_they_answer() {
        let o = every_on(128);
        let names: Vec<String> = o.routers.iter().map(|r| r.name.clone()).collect();
        let bytes = |r: &MeshRead| serde_json::to_vec(&status(&o, r)).unwrap().len();
        // Fully linked: 128 × 127 links, none of them listed.
        let full: Vec<(&str, Observation)> = (names.iter())
            .map(|me| {
                let peers: Vec<&str> = names.iter().filter(|p| *p != me).map(String::as_str).collect();
                (me.as_str(), router(me, &peers))
            })
            .collect();
        let full = read(&full);
        assert_eq!(full.report.condition.reason, "Connected");
        // No link at all: 8,128 missing pairs, 128 groups.
        let none: Vec<(&str, Observation)> = names.iter().map(|me| (me.as_str(), router(me, &[]))).collect();
        let none = read(&none);
        assert_eq!(none.report.links_missing, 128 * 127 / 2);
        // Nobody answers, each with the longest reason a router can cause.
        let long = format!("refused what the router sent: {}", "x".repeat(400));
        let mute: Vec<(&str, Observation)> =
            names.iter().map(|me| (me.as_str(), Observation::Unreachable(long.clone()))).collect();
        let mute = read(&mute);
        for (what, r) in [("connected", &full), ("no links", &none), ("not answering", &mute)] {
            let b = bytes(r);
            eprintln!("status of 128 routers, {what}: {b} bytes");
            assert!(b < 64 * 1024, "{what}: {b} bytes");
        }
        let s = status(&o, &none);
        let mesh = s.mesh.as_ref().unwrap();
        assert_eq!((mesh.missing_links.len(), mesh.missing_link_count), (32, 8128));
        let s = status(&o, &mute);
        let mesh = s.mesh.as_ref().unwrap();
        assert_eq!(mesh.unreachable.len(), 33);
        assert_eq!(mesh.unreachable[32], "and 96 more");
        assert!(
            s.routers.iter().all(|r| r.error.as_ref().is_some_and(|e| e.len() <= qdr_api::MAX_STATUS_REASON))
        );
    }

    /// 256 routers (the most read) that each report the longest id a router can have kept
    /// ([`crate::mesh::router_id`]: 63 bytes and `…`), links to 255 peers of such ids and an
    /// uplink of one: the status stays bounded whatever they chose.
    #[test]
    fn the_status_of_256_hostile_routers_stays_bounded() {
        let o = every_on(256);
        let hostile = |i: usize| crate::mesh::router_id(&format!("{i:03}\"{}", "\u{202e}x".repeat(100)));
        assert_eq!(hostile(1).len(), crate::mesh::MAX_ROUTER_ID + '…'.len_utf8());
        let views: Vec<(String, Observation)> = (o.routers.iter().enumerate())
            .map(|(i, p)| {
                let peers: Vec<String> = (0..256).filter(|j| *j != i).map(hostile).collect();
                let peers: Vec<&str> = peers.iter().map(String::as_str).collect();
                let Observation::Answered(mut v) = router(&hostile(i), &peers) else { unreachable!() };
                v.mode = Mode::Edge;
                v.edge = vec![Link { peer: hostile(1000 + i).into(), outgoing: true, encrypted: false }];
                (p.name.clone(), Observation::Answered(v))
            })
            .collect();
        let views: Vec<(&str, Observation)> = views.iter().map(|(p, v)| (p.as_str(), v.clone())).collect();
        let r = read(&views);
        let s = status(&o, &r);
        assert_eq!(s.routers.len(), 256);
        assert!(s.routers.iter().all(|r| r.uplink.as_ref().is_some_and(|u| u.len() <= 66)));
        let b = serde_json::to_vec(&s).unwrap().len();
        eprintln!("status of 256 hostile routers: {b} bytes");
        assert!(b < 128 * 1024, "{b} bytes");
    }

    #[test]
    fn routers_past_the_read_bound_are_counted_not_listed() {
        let o = every_on(300);
        let r = MeshRead {
            blocked: Some("300 router pods, more than the 256 the controller reads".into()),
            observations: BTreeMap::new(),
            report: assess(Mode::Interior, &BTreeMap::new()),
            next: None,
            restored: Vec::new(),
        };
        let s = status(&o, &r);
        assert_eq!(s.routers.len(), qdr_api::MAX_STATUS_ROUTERS);
        assert!(s.routers.iter().all(|r| r.error.is_none()), "the condition says why, once");
        // Every pod counts for ConfigApplied, listed or not.
        assert_eq!(cond(&s, "ConfigApplied").2, "300/300 routers run configuration 0123456789");
        let b = serde_json::to_vec(&s).unwrap().len();
        eprintln!("status of 300 routers, not read: {b} bytes");
        assert!(b < 128 * 1024, "{b} bytes");
    }

    #[test]
    fn a_partitioned_mesh_takes_ready_with_its_reason_and_names_the_groups() {
        let o = pods(&["mesh-a", "mesh-b", "mesh-c"], "0123456789");
        let r = read(&[
            ("mesh-a", router("mesh-a", &["mesh-b"])),
            ("mesh-b", router("mesh-b", &["mesh-a"])),
            ("mesh-c", router("mesh-c", &[])),
        ]);
        let s = status(&o, &r);
        let (mesh, reason, message) = cond(&s, "MeshConnected");
        assert_eq!((mesh, reason), ("False", "Partitioned"));
        assert!(message.contains("[mesh-a, mesh-b] [mesh-c]"), "{message}");
        assert_eq!(
            (cond(&s, "Ready").0, cond(&s, "Ready").1, cond(&s, "Ready").2),
            ("False", "Partitioned", message)
        );
        let mesh = s.mesh.as_ref().unwrap();
        assert_eq!(mesh.summary, "2/3 connected");
        let missing: Vec<(&str, &str)> =
            mesh.missing_links.iter().map(|l| (l.from.as_str(), l.to.as_str())).collect();
        assert_eq!(missing, [("mesh-a", "mesh-c"), ("mesh-b", "mesh-c")]);
    }

    #[test]
    fn a_router_that_does_not_answer_is_unknown_and_leaves_ready_to_the_pods() {
        let o = pods(&["mesh-a", "mesh-b"], "0123456789");
        let r = read(&[
            ("mesh-a", router("mesh-a", &["mesh-b"])),
            ("mesh-b", Observation::Unreachable("no answer within 5s".into())),
        ]);
        let s = status(&o, &r);
        assert_eq!(
            (cond(&s, "MeshConnected").0, cond(&s, "MeshConnected").1),
            ("Unknown", "RouterUnreachable")
        );
        assert_eq!(cond(&s, "Ready").0, "True");
        let mesh = s.mesh.as_ref().unwrap();
        assert_eq!(mesh.summary, "2/2 connected, 1 not answering");
        assert_eq!(mesh.unreachable, ["mesh-b: no answer within 5s"]);
        assert_eq!(s.routers[1].error.as_deref(), Some("no answer within 5s"));
        assert_eq!(s.routers[1].id, None);
    }

    #[test]
    fn routers_that_cannot_be_read_are_not_observed() {
        let o = pods(&["mesh-a"], "0123456789");
        let r = MeshRead {
            blocked: Some(
                "the management CA Secret mesh-qdr-operator-management-ca does not exist yet".into(),
            ),
            observations: BTreeMap::new(),
            report: assess(Mode::Interior, &BTreeMap::new()),
            next: Some(MESH_RESYNC),
            restored: Vec::new(),
        };
        let s = status(&o, &r);
        let (mesh, reason, message) = cond(&s, "MeshConnected");
        assert_eq!((mesh, reason), ("Unknown", "NotObserved"));
        assert!(message.contains("does not exist yet"), "{message}");
        assert_eq!(cond(&s, "Ready").0, "True");
        assert_eq!(s.mesh.as_ref().unwrap().summary, "not read");
        assert_eq!(s.routers[0].error, None, "the condition says why");
    }

    #[tokio::test]
    async fn a_management_ca_not_created_yet_is_looked_at_again_soon_not_at_the_resync() {
        use crate::reconcile::read::Reader;
        let reader = std::sync::Arc::new(Reader::default());
        let metrics = std::sync::Arc::new(crate::metrics::Metrics::default());
        let (o, added) = owner().with_management();
        added.unwrap();
        // The pass that finds it missing creates it; its own write wakes nothing.
        let seal = crate::hash_key::HashKey::from_bytes(&[9; 32]).unwrap();
        let r = reader.read(&o, &pods(&["mesh-a"], "0123456789"), Ok(()), None, &metrics, &seal);
        assert!(r.blocked.as_deref().is_some_and(|b| b.contains("does not exist yet")), "{r:?}");
        assert_eq!(r.next, Some(MESH_RECHECK));
        // Not ours: not looked at again until it changes.
        let mut foreign = pods(&["mesh-a"], "0123456789");
        let ca = crate::mesh::management::ca_secret("mesh");
        foreign.secrets.insert(ca.clone(), Some(k8s_openapi::api::core::v1::Secret::default()));
        let r = reader.read(&o, &foreign, Ok(()), None, &metrics, &seal);
        assert!(r.blocked.as_deref().is_some_and(|b| b.contains("not the management CA")), "{r:?}");
        assert!(r.blocked.as_deref().is_some_and(|b| b.contains("not controlled by it")), "{r:?}");
        assert_eq!(r.next, None);
        // Controlled by it, but its content not the controller's own (an owner reference
        // anyone who may create Secrets can write): not used either.
        let mut forged = pods(&["mesh-a"], "0123456789");
        let owned: k8s_openapi::api::core::v1::Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": ca, "ownerReferences": [{"apiVersion": "interconnectedcloud.github.io/v1alpha1",
                "kind": "Interconnect", "name": "mesh", "uid": o.uid(), "controller": true}]},
            "data": {"tls.crt": "Zm9yZ2Vk", "tls.key": "Zm9yZ2Vk"}}))
        .unwrap();
        forged.secrets.insert(ca.clone(), Some(owned.clone()));
        let r = reader.read(&o, &forged, Ok(()), None, &metrics, &seal);
        assert!(r.blocked.as_deref().is_some_and(|b| b.contains("carries no valid seal")), "{r:?}");
        // Sealed with another key (a seal copied from elsewhere): not used.
        let other = crate::hash_key::HashKey::from_bytes(&[8; 32]).unwrap();
        let copied = crate::credentials::seal::sealed(&other, o.namespace(), o.uid(), owned.clone());
        forged.secrets.insert(ca.clone(), Some(copied));
        let r = reader.read(&o, &forged, Ok(()), None, &metrics, &seal);
        assert!(r.blocked.as_deref().is_some_and(|b| b.contains("carries no valid seal")), "{r:?}");
        // Sealed by the controller: past the trust check (on to the credentials Secret).
        let ours = crate::credentials::seal::sealed(&seal, o.namespace(), o.uid(), owned);
        forged.secrets.insert(ca.clone(), Some(ours));
        let r = reader.read(&o, &forged, Ok(()), None, &metrics, &seal);
        assert!(!r.blocked.as_deref().is_some_and(|b| b.contains("is not the management CA")), "{r:?}");
    }

    #[test]
    fn a_router_on_another_configuration_is_not_applied_and_is_named() {
        let mut o = pods(&["mesh-a", "mesh-b"], "0123456789");
        o.routers[1].config_map = Some("mesh-router-config-aaaaaaaaaa".into());
        let r = read(&[("mesh-a", router("mesh-a", &["mesh-b"])), ("mesh-b", router("mesh-b", &["mesh-a"]))]);
        let s = status(&o, &r);
        let (applied, reason, message) = cond(&s, "ConfigApplied");
        assert_eq!((applied, reason), ("False", "RollingOut"));
        assert_eq!(message, "1/2 routers run configuration 0123456789 (mesh-b runs aaaaaaaaaa)");
        // An old router still shutting down is not yet applied either.
        let mut o = pods(&["mesh-a", "mesh-b"], "0123456789");
        o.terminating = 1;
        let s = status(&o, &r);
        assert_eq!(cond(&s, "ConfigApplied").0, "False");
        assert!(cond(&s, "ConfigApplied").2.ends_with("; 1 old routers shutting down"));
    }

    #[test]
    fn an_unsettled_mesh_is_read_again_sooner_never_in_a_tight_loop() {
        let r = |n| recheck(n, MESH_RESYNC);
        assert_eq!(r(1), MESH_RECHECK);
        assert_eq!(r(2), MESH_RECHECK * 2);
        assert_eq!(r(3), MESH_RECHECK * 4);
        assert_eq!(r(100), MESH_RESYNC);
        assert!((1..50).all(|n| r(n) >= MESH_RECHECK && r(n) <= r(n + 1)));
        // A mesh not connected is read again as soon at any scale; a connected one waits
        // the resync of the scale.
        assert_eq!(recheck(3, resync(6000)), MESH_RECHECK * 4);
        assert_eq!(recheck(0, resync(6000)), resync(6000));
    }

    #[test]
    fn the_resync_spreads_reads_at_rest_over_the_routers_at_the_read_rate() {
        use crate::reconcile::read::MESH_READ_RATE;
        assert_eq!(resync(0), MESH_RESYNC);
        assert_eq!(resync(3), MESH_RESYNC);
        let knee = usize::try_from(MESH_READ_RATE).unwrap() * usize::try_from(MESH_RESYNC.as_secs()).unwrap();
        assert_eq!(resync(knee), MESH_RESYNC);
        assert!(resync(knee + 100) > MESH_RESYNC);
        // 2,000 Interconnects of 3 routers: each asked once a minute, 100 a second in all;
        // twice as many, every 2 minutes. Within the recheck of a whole read of live
        // entities, so most visits skip them.
        assert_eq!(resync(6000), MESH_RESYNC);
        assert_eq!(resync(12_000), Duration::from_secs(120));
        assert!(resync(12_000) < crate::mesh::live::RECHECK);
        assert!(resync(6000) < crate::mesh::live::RECHECK);
        let rate = 6000.0 / resync(6000).as_secs_f64();
        assert!(rate <= f64::from(MESH_READ_RATE), "{rate}");
        assert!(MESH_RECHECK >= Duration::from_secs(1));
    }

    #[test]
    fn the_status_patch_removes_what_the_last_status_had_and_this_one_has_not() {
        use crate::reconcile::status::merge_patch;
        // Observation off: every mesh field is removed from the stored status.
        let plain = merge_patch(&InterconnectStatus::default());
        for k in ["mesh", "routers", "configHash"] {
            assert_eq!(plain[k], serde_json::Value::Null, "{k}: {plain}");
            assert!(plain.as_object().unwrap().contains_key(k), "{k}");
        }
        // A mesh with nothing missing: the lists the last one had are removed.
        let o = pods(&["mesh-a", "mesh-b"], "0123456789");
        let r = read(&[("mesh-a", router("mesh-a", &["mesh-b"])), ("mesh-b", router("mesh-b", &["mesh-a"]))]);
        let patch = merge_patch(&status(&o, &r));
        assert_eq!(patch["mesh"]["summary"], "2/2 connected");
        assert!(patch["mesh"].as_object().unwrap().contains_key("missingLinks"));
        assert_eq!(patch["mesh"]["missingLinks"], serde_json::Value::Null);
        assert_eq!(patch["mesh"]["unreachable"], serde_json::Value::Null);
        assert_eq!(patch["routers"].as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn a_partition_and_the_recovery_are_each_one_event() {
        use crate::reconcile::events::{Change, mesh as mesh_event};
        let o = pods(&["mesh-a", "mesh-b"], "0123456789");
        let whole = status(
            &o,
            &read(&[("mesh-a", router("mesh-a", &["mesh-b"])), ("mesh-b", router("mesh-b", &["mesh-a"]))]),
        );
        let split =
            status(&o, &read(&[("mesh-a", router("mesh-a", &[])), ("mesh-b", router("mesh-b", &[]))]));
        let stored = |s: &InterconnectStatus| {
            let mut ic = owner().ic().clone();
            ic.status = Some(s.clone());
            ic
        };
        let Some(Change::MeshBroken(reason, message)) = mesh_event(&stored(&whole), &split) else { panic!() };
        assert_eq!(reason, "Partitioned");
        assert!(message.contains("[mesh-a] [mesh-b]"), "{message}");
        assert_eq!(mesh_event(&stored(&split), &split), None, "once, not once per pass");
        assert!(matches!(mesh_event(&stored(&split), &whole), Some(Change::MeshConnected(_))));
        assert_eq!(mesh_event(&stored(&whole), &whole), None);
        // The links forming at a start warn of nothing.
        assert_eq!(mesh_event(owner().ic(), &split), None);
    }

    #[test]
    fn the_mesh_gauges_follow_the_read_and_go_with_the_interconnect() {
        use crate::metrics::{MeshSample, Metrics};
        let r = read(&[
            ("mesh-a", router("mesh-a", &["mesh-b"])),
            ("mesh-b", router("mesh-b", &["mesh-a"])),
            ("mesh-c", Observation::Unreachable("no answer within 5s".into())),
        ]);
        let sample = r.sample();
        assert_eq!(
            sample,
            MeshSample {
                routers_expected: 3,
                routers_connected: 2,
                routers_unreachable: 1,
                links_missing: 2,
                deliveries_stuck: 0,
                links_blocked: 2,
                client_connections: 4,
                connected: 0,
            }
        );
        let metrics = Metrics::default();
        metrics.mesh("ns", "mesh", Some(sample));
        let text = metrics.encode();
        for line in [
            "qdr_mesh_routers_expected{namespace=\"ns\",interconnect=\"mesh\"} 3",
            "qdr_mesh_routers_unreachable{namespace=\"ns\",interconnect=\"mesh\"} 1",
            "qdr_mesh_links_blocked{namespace=\"ns\",interconnect=\"mesh\"} 2",
            "qdr_mesh_connected{namespace=\"ns\",interconnect=\"mesh\"} 0",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        metrics.mesh("ns", "mesh", None);
        assert!(!metrics.encode().contains("interconnect=\"mesh\""), "series removed");
        metrics.mesh("ns", "mesh", Some(sample));
        metrics.routers("ns", "mesh", Some((3, 2)));
        let text = metrics.encode();
        for line in [
            "qdr_interconnect_routers_desired{namespace=\"ns\",interconnect=\"mesh\"} 3",
            "qdr_interconnect_routers_ready{namespace=\"ns\",interconnect=\"mesh\"} 2",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        for category in crate::reconcile::ERROR_CATEGORIES {
            let line = format!("qdr_controller_reconcile_errors_total{{category=\"{category}\"}} 0");
            assert!(text.contains(&line), "every stage's series starts at 0: {line}");
        }
        drop(metrics.interconnect_series_guard());
        assert!(!metrics.encode().contains("interconnect=\"mesh\""), "series cleared at the end of a term");
        metrics.routers("ns", "mesh", Some((1, 1)));
        metrics.routers("ns", "mesh", None);
        assert!(!metrics.encode().contains("interconnect=\"mesh\""), "router series removed");
        // One Interconnect's gauges are kept together and removed each on its own.
        let in_an_hour = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
        metrics.certificate_expiry("ns", "mesh", Some(in_an_hour));
        metrics.routers("ns", "mesh", Some((2, 2)));
        metrics.routers("other", "b", Some((1, 0)));
        metrics.mesh("ns", "mesh", Some(sample));
        metrics.mesh("ns", "mesh", None);
        let text = metrics.encode();
        let expiry = text
            .lines()
            .find_map(|l| {
                l.strip_prefix("qdr_router_certificate_expiry_seconds{namespace=\"ns\",name=\"mesh\"} ")
            })
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("the expiry series in\n{text}"));
        assert!((3590.0..=3600.0).contains(&expiry), "{expiry}");
        for line in [
            "qdr_interconnect_routers_ready{namespace=\"ns\",interconnect=\"mesh\"} 2",
            "qdr_interconnect_routers_ready{namespace=\"other\",interconnect=\"b\"} 0",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        assert!(!text.contains("qdr_mesh_connected{"), "{text}");
        // Every family once, described before its series, whether or not it has any.
        for family in [
            "qdr_router_certificate_expiry_seconds",
            "qdr_interconnect_routers_desired",
            "qdr_mesh_connected",
        ] {
            assert_eq!(text.matches(&format!("# TYPE {family} gauge")).count(), 1, "{family} in\n{text}");
        }
        metrics.certificate_expiry("ns", "mesh", None);
        metrics.routers("ns", "mesh", None);
        assert!(!metrics.encode().contains("\"mesh\""), "every series of ns/mesh removed");
    }
}

/// A generated Secret is rewritten from the store's copy, which keeps only what a pass
/// decides from: the rewrite keeps what others added since (read just before).
#[test]
fn a_rewritten_secret_keeps_what_others_added_to_its_metadata() {
    use crate::credentials::STEP_AT;
    use k8s_openapi::api::core::v1::Secret;
    let current: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "mesh-ca", "namespace": "ns", "resourceVersion": "7",
            "labels": {"interconnect_cr": "mesh", "backup": "daily"},
            "annotations": {STEP_AT: "2026-01-01T00:00:00Z", "note": "n"},
            "finalizers": ["keep"]},
        "immutable": false,
        "data": {"tls.crt": "b2xk"}}))
    .unwrap();
    let ours: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "mesh-ca", "namespace": "ns", "resourceVersion": "7",
            "labels": {"interconnect_cr": "mesh", "qdr-operator.io/credentials": "true"}},
        "data": {"tls.crt": "bmV3"}}))
    .unwrap();
    let out = super::apply::secrets::keeping_others(current.clone(), &ours);
    assert_eq!(out.data, ours.data);
    assert_eq!(
        out.metadata.resource_version.as_deref(),
        Some("7"),
        "the observed version is the precondition"
    );
    let labels = out.metadata.labels.clone().unwrap();
    assert_eq!(labels.get("backup").map(String::as_str), Some("daily"));
    assert_eq!(labels.get("qdr-operator.io/credentials").map(String::as_str), Some("true"));
    let annotations = out.metadata.annotations.clone().unwrap();
    assert_eq!(annotations.get("note").map(String::as_str), Some("n"));
    assert!(!annotations.contains_key(STEP_AT), "the step annotation goes when the controller removes it");
    assert_eq!(out.metadata.finalizers, Some(vec!["keep".to_string()]));
    assert_eq!(out.immutable, Some(false));
    // Set when the controller sets it.
    let mut stepping = ours.clone();
    stepping.metadata.annotations = Some([(STEP_AT.to_string(), "2026-02-01T00:00:00Z".to_string())].into());
    let out = super::apply::secrets::keeping_others(current, &stepping);
    assert_eq!(
        out.metadata.annotations.unwrap().get(STEP_AT).map(String::as_str),
        Some("2026-02-01T00:00:00Z")
    );
}

/// One Event of each kind the controller publishes: their (type, reason) pairs are exactly
/// [`crate::reasons::EVENTS`], both ways. The `match` lists every `Change` variant, so a new
/// one does not compile until it is added here (and then to the list and the book).
#[test]
fn every_event_reason_is_listed_and_every_listed_reason_is_published() {
    use super::events::Change;
    use crate::credentials::CredentialChange;
    use std::collections::BTreeSet;
    let at = std::time::SystemTime::UNIX_EPOCH;
    let s = || "s".to_string();
    let changes = vec![
        Change::InvalidSpec(s()),
        Change::ConfigChanged { live: false, by: s() },
        Change::ConfigChanged { live: true, by: s() },
        Change::ConfigRolled(s()),
        Change::ConfigRestored(vec![s()]),
        Change::Scaled { from: 1, to: 2 },
        Change::Pruned(vec![s()]),
        Change::ReconcileFailed(s()),
        Change::ConflictingObject(s()),
        Change::MissingSecret(s()),
        Change::SecretProblem(super::types::INVALID_SECRET, s()),
        Change::SecretProblem(super::types::CERTIFICATE_EXPIRED, s()),
        Change::CredentialsChanged,
        Change::Credential(CredentialChange::Renewed {
            secret: s(),
            why: "renew point reached",
            until: None,
        }),
        Change::Credential(CredentialChange::CaStaged { secret: s(), promote_after: at, lost: None }),
        Change::Credential(CredentialChange::CaPromoted { secret: s(), retire_after: at }),
        Change::Credential(CredentialChange::CaRetired(s())),
        Change::Credential(CredentialChange::CaReplaced { secret: s(), why: s() }),
        Change::Credential(CredentialChange::PasswordsChanged(s())),
        Change::CertificateExpiring(s()),
        Change::Unschedulable(s()),
        Change::Scheduled,
        Change::Adopted(vec![s()]),
        Change::MeshBroken("Partitioned".into(), s()),
        Change::MeshBroken("EdgeNotUplinked".into(), s()),
        Change::MeshConnected(s()),
        Change::ConfigApplied(s()),
        Change::ConfigRefused(s()),
        Change::AdminBudget(s()),
        Change::RouterIdClash(vec![s()]),
    ];
    for c in &changes {
        match c {
            Change::InvalidSpec(_)
            | Change::ConfigChanged { .. }
            | Change::Scaled { .. }
            | Change::Pruned(_)
            | Change::ReconcileFailed(_)
            | Change::ConflictingObject(_)
            | Change::MissingSecret(_)
            | Change::SecretProblem(..)
            | Change::CredentialsChanged
            | Change::Credential(_)
            | Change::CertificateExpiring(_)
            | Change::Unschedulable(_)
            | Change::Scheduled
            | Change::Adopted(_)
            | Change::MeshBroken(..)
            | Change::MeshConnected(_)
            | Change::ConfigApplied(_)
            | Change::ConfigRefused(_)
            | Change::ConfigRolled(_)
            | Change::ConfigRestored(_)
            | Change::AdminBudget(_)
            | Change::RouterIdClash(_) => {}
        }
    }
    let published: BTreeSet<(String, String)> = changes
        .iter()
        .map(|c| {
            let e = c.event();
            let t = if e.type_ == kube::runtime::events::EventType::Warning { "Warning" } else { "Normal" };
            (t.to_string(), e.reason)
        })
        .collect();
    let listed: BTreeSet<(String, String)> =
        crate::reasons::EVENTS.iter().map(|(t, r)| (t.to_string(), r.to_string())).collect();
    assert_eq!(published, listed);
}

/// The roll Events name what forced the roll: the fields of a start-up change, and the
/// configuration the routers did not take while running (once: the template keeps it).
#[test]
fn roll_events_say_why() {
    use super::build::Report;
    use super::events::{Change, planned};
    use crate::builders::Roll;
    use crate::reconcile::observe::WorkloadState;
    use qdr_api::router_config::Rendered;
    let config = |startup: &str| Rendered {
        text: String::new(),
        hash: "7777777777bbbb".into(),
        startup_hash: startup.into(),
        live: true,
        startup_fields: String::new(),
    };
    let seen = |restarted_for: Option<&str>| Observed {
        workload: Ownership::Ours(
            WorkloadState {
                config_hash: Some("5555".into()),
                roll: Roll { rolled_by: None, restarted_for: restarted_for.map(String::from), gated: false },
                ..Default::default()
            },
            None,
        ),
        ..observed()
    };
    let report = |startup: &str, rolled_by: Option<&str>, restarted_for: Option<&str>| Report {
        config: config(startup),
        replicas: None,
        credentials: CredentialsReport::default(),
        roll: Roll {
            rolled_by: rolled_by.map(String::from),
            restarted_for: restarted_for.map(String::from),
            gated: false,
        },
        budget: crate::builders::Budget::Disabled,
        policy: crate::builders::Policy::Disabled,
    };
    let changed = planned(&seen(None), &report("6666", Some("spec.edgeListeners"), None));
    assert_eq!(changed, [Change::ConfigChanged { live: true, by: "spec.edgeListeners".into() }]);
    let note = changed[0].event().note.unwrap();
    assert!(note.contains("cannot take (spec.edgeListeners): rolling the routers"), "{note}");
    assert!(
        planned(&seen(None), &report("5555", Some("spec.edgeListeners"), None)).is_empty(),
        "kept: no roll"
    );
    let fallback = planned(&seen(None), &report("5555", None, Some("7777777777")));
    assert_eq!(fallback, [Change::ConfigRolled("7777777777".into())]);
    assert_eq!(fallback[0].event().type_, kube::runtime::events::EventType::Warning);
    assert!(planned(&seen(Some("7777777777")), &report("5555", None, Some("7777777777"))).is_empty(), "once");
}

/// A pod controlled by `kind` `name` of uid `uid`.
fn controlled_pod(kind: &str, name: &str, uid: &str) -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_value(json!({"metadata": {"name": "p", "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid, "controller": true}]}}))
    .unwrap()
}

/// Metadata of `name` of uid `uid`, controlled by uid `controller` (when given).
fn meta_of(
    name: &str,
    uid: &str,
    controller: Option<&str>,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
    let owners: Vec<_> = controller
        .map(|c| json!({"apiVersion": "apps/v1", "kind": "Owner", "name": "o", "uid": c, "controller": true}))
        .into_iter()
        .collect();
    serde_json::from_value(json!({"name": name, "uid": uid, "ownerReferences": owners})).unwrap()
}

#[test]
fn a_replica_set_named_like_the_deployments_is_not_enough_to_make_a_router() {
    use crate::reconcile::observe::{Workloads, owned_by_workload};
    let deployment = meta_of("mesh", "dep-1", Some("ic-1"));
    let daemon_set = meta_of("mesh", "ds-1", Some("ic-1"));
    let replica_sets = [
        meta_of("mesh-5d8f7b9c6d", "rs-1", Some("dep-1")),
        // Anyone who may create ReplicaSets can make one named like the Deployment's.
        meta_of("mesh-forged", "rs-forged", None),
        meta_of("mesh-adopted", "rs-other", Some("someone-else")),
    ];
    let w = Workloads::of("ic-1", Some(&deployment), Some(&daemon_set), &replica_sets);
    assert_eq!(w.replica_sets.keys().collect::<Vec<_>>(), ["mesh-5d8f7b9c6d"]);
    let owned = |kind, name, uid| owned_by_workload(&controlled_pod(kind, name, uid), &w);
    assert!(owned("ReplicaSet", "mesh-5d8f7b9c6d", "rs-1"), "the Deployment's own ReplicaSet");
    assert!(owned("DaemonSet", "mesh", "ds-1"), "the DaemonSet, by uid");
    assert!(!owned("ReplicaSet", "mesh-forged", "rs-forged"), "a look-alike ReplicaSet");
    assert!(!owned("ReplicaSet", "mesh-adopted", "rs-other"), "a ReplicaSet someone else controls");
    assert!(!owned("ReplicaSet", "mesh-5d8f7b9c6d", "rs-copied"), "the real name with another uid");
    assert!(!owned("DaemonSet", "mesh", "ds-copied"), "the DaemonSet's name with another uid");
    assert!(!owned("StatefulSet", "mesh", "dep-1"), "another kind");
    // Workloads the Interconnect does not control make no router, nor do their ReplicaSets.
    let foreign = Workloads::of("ic-2", Some(&deployment), Some(&daemon_set), &replica_sets);
    assert_eq!(foreign, Workloads::default());
    assert!(!owned_by_workload(&controlled_pod("ReplicaSet", "mesh-5d8f7b9c6d", "rs-1"), &foreign));
    // Nor does a pod with the labels alone.
    let bare: k8s_openapi::api::core::v1::Pod =
        serde_json::from_value(json!({"metadata": {"name": "p", "labels": {"interconnect_cr": "mesh"}}}))
            .unwrap();
    assert!(!owned_by_workload(&bare, &w));
}

/// A router pod being deleted keeps its links until it is gone: a visit deletes no
/// connector to it (its clients are still served through its termination grace), nor any
/// of the configuration's own connectors; a pod gone is unlinked.
#[test]
fn a_router_shutting_down_keeps_its_links_until_it_is_gone() {
    use crate::mesh::links::{Connector, Template, changes, desired};
    let ic: Interconnect = serde_json::from_value(json!({
        "metadata": {"name": "mesh", "namespace": "ns", "uid": "u-1"},
        "spec": {"connectors": [{"name": "to-broker", "host": "broker", "port": 5672}]}}))
    .unwrap();
    let o = ValidatedInterconnect::new(&ic).unwrap();
    let template = Template { port: "55671".into(), ssl_profile: Some("inter-router".into()) };
    let peers = |names: &[&str]| -> Vec<(String, String)> {
        names.iter().map(|n| (n.to_string(), format!("10.0.0.{}", n.as_bytes()[5]))).collect()
    };
    // mesh-c holds links to mesh-a and mesh-b; mesh-a is being deleted.
    let existing: Vec<Connector> = desired("mesh-c", &peers(&["mesh-a", "mesh-b"]), &template);
    let now = desired("mesh-c", &peers(&["mesh-b"]), &template);
    let leaving = Observed { shutting_down: vec!["mesh-a".into()], ..observed() };
    let keep = super::read::kept_connectors(&o, &leaving);
    assert_eq!(keep, ["to-broker", "qdr-operator-mesh-mesh-a"]);
    assert_eq!(changes(&now, &existing, &keep, &[]), (vec![], vec![]), "nothing deleted while it shuts down");
    // Gone: its link goes.
    let keep = super::read::kept_connectors(&o, &observed());
    assert_eq!(changes(&now, &existing, &keep, &[]).0, ["qdr-operator-mesh-mesh-a"]);
}

/// Issue 72: the `DisruptionBudget` condition says which budget guards the routers, and an
/// admin's budget taking over is published once (comparing the stored status, so a pass
/// that finds the same budgets again says nothing).
#[test]
fn the_disruption_budget_condition_names_the_budget_and_an_admins_is_published_once() {
    use super::events::{Change, admin_budget};
    use super::status::with_budget;
    use crate::builders::Budget;
    let applied = Applied { workload: workload(3, 3, 3, 3), ..Default::default() };
    let base = || desired(&owner(), &observed(), &applied, &CredentialsReport::default());
    let managed = with_budget(
        base(),
        &owner(),
        &Budget::Managed { bound: "maxUnavailable: 1".into(), retiring: false },
    );
    assert_eq!(
        cond(&managed, "DisruptionBudget"),
        ("True", "Managed", "PodDisruptionBudget mesh: maxUnavailable: 1")
    );
    let retiring =
        with_budget(base(), &owner(), &Budget::Managed { bound: "maxUnavailable: 1".into(), retiring: true });
    assert!(cond(&retiring, "DisruptionBudget").2.contains("until the DaemonSet's are ready"));
    let off = with_budget(base(), &owner(), &Budget::Disabled);
    assert_eq!(cond(&off, "DisruptionBudget").0, "False");
    let none = with_budget(base(), &owner(), &Budget::NotNeeded("one router"));
    assert_eq!(cond(&none, "DisruptionBudget"), ("False", "NotNeeded", "no PodDisruptionBudget: one router"));
    let admins = with_budget(base(), &owner(), &Budget::Admin(vec!["a".into(), "b".into()]));
    let (status, reason, message) = cond(&admins, "DisruptionBudget");
    assert_eq!((status, reason), ("True", "AdminBudget"));
    assert!(message.starts_with("PodDisruptionBudgets a, b select the routers"), "{message}");

    // Stored status without it: one Event; with the same: none; other budgets: one more.
    let stored = |s: &InterconnectStatus| {
        let mut ic = owner().ic().clone();
        ic.status = Some(s.clone());
        ic
    };
    assert!(matches!(admin_budget(&stored(&managed), &admins), Some(Change::AdminBudget(m)) if m == message));
    assert_eq!(admin_budget(&stored(&admins), &admins), None);
    let one = with_budget(base(), &owner(), &Budget::Admin(vec!["a".into()]));
    assert!(admin_budget(&stored(&admins), &one).is_some());
    assert_eq!(admin_budget(&stored(&admins), &managed), None, "the operator's own again: no Event");
}

/// The reader's own reads of a connected mesh at rest ([`crate::reconcile::read::Reader`]),
/// against stand-in routers that speak the real protocol over TLS.
mod rest {
    use std::collections::BTreeMap;
    use std::net::IpAddr;
    use std::sync::{Arc, RwLock};
    use std::time::{Duration, SystemTime};

    use futures::StreamExt;
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::Secret;
    use qdr_tests::amqp_peer::{self, Answers, Script};

    use super::owner;
    use crate::reconcile::read::{MeshRead, Reader};

    /// Router pods of the mesh, each at `127.66.0.<i + 1>`.
    const PODS: [&str; 2] = ["rest-a", "rest-b"];
    /// The rest between two reads of the connected mesh.
    const REST: Duration = Duration::from_millis(300);
    /// Longest wait for what a read leads to (a read on a loaded machine, debug build).
    const WAIT: Duration = Duration::from_secs(30);

    /// The management CA Secret the controller would have generated for `o` (sealed under
    /// `seal`), and the routers' server configuration, their certificate signed by it.
    fn management(
        o: &crate::validated::ValidatedInterconnect,
        seal: &crate::hash_key::HashKey,
    ) -> (Secret, Arc<rustls::ServerConfig>) {
        let now = SystemTime::now();
        let ca = qdr_certs::pki::new_ca("mesh", now, Duration::from_secs(3600)).unwrap();
        let data = BTreeMap::from([
            ("tls.crt".to_string(), ByteString(ca.cert_pem.clone().into_bytes())),
            ("tls.key".to_string(), ByteString(ca.key_pem.clone().into_bytes())),
        ]);
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": crate::mesh::management::ca_secret("mesh"), "namespace": "ns",
                "ownerReferences": [{"apiVersion": "interconnectedcloud.github.io/v1alpha1",
                    "kind": "Interconnect", "name": "mesh", "uid": o.uid(), "controller": true}]}}))
        .unwrap();
        let secret = crate::credentials::seal::sealed(
            seal,
            o.namespace(),
            o.uid(),
            Secret { data: Some(data), ..secret },
        );
        let server = format!("{}.{}.svc", o.name(), o.namespace());
        let leaf = qdr_certs::pki::new_leaf(&ca, &[server], now, Duration::from_secs(3600)).unwrap();
        let tls = amqp_peer::server_tls(leaf.cert_pem.as_bytes(), leaf.key_pem.as_bytes()).unwrap();
        (secret, tls)
    }

    /// Reads of router `pod` so far (its `router` entity asked).
    fn reads(pod: &str) -> u64 {
        amqp_peer::queries(pod, "router")
    }

    /// A connected mesh of two routers named `pods`, each at `127.66.0.<i + 1>`, served by
    /// stand-in routers on runtime `peers` (one listener), and a reader of it resting `REST`.
    struct Mesh {
        o: crate::validated::ValidatedInterconnect,
        seal: crate::hash_key::HashKey,
        observed: crate::reconcile::observe::Observed,
        reader: Arc<Reader>,
        metrics: Arc<crate::metrics::Metrics>,
        /// What each router answers (replace one to change the mesh).
        answers: Arc<RwLock<Vec<Arc<Answers>>>>,
        peers: tokio::task::JoinHandle<()>,
    }

    impl Mesh {
        fn new(pods: [&'static str; 2], peers: &tokio::runtime::Handle) -> Mesh {
            let (o, added) = owner().with_management();
            added.unwrap();
            let seal = crate::hash_key::HashKey::from_bytes(&[9; 32]).unwrap();
            let (ca, tls) = management(&o, &seal);
            // Two routers linked to each other, at their own loopback addresses.
            let linked = |i: usize| Arc::new(amqp_peer::honest(pods[i], "interior", &[pods[1 - i]], 0));
            let answers: Arc<RwLock<Vec<Arc<Answers>>>> = Arc::new(RwLock::new(vec![linked(0), linked(1)]));
            for a in answers.read().unwrap().iter() {
                amqp_peer::routable(a);
            }
            let listener = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
            listener.set_nonblocking(true).unwrap();
            let port = listener.local_addr().unwrap().port();
            let scripts = answers.clone();
            let peers = {
                let _on = peers.enter();
                amqp_peer::serve_by_address(
                    tokio::net::TcpListener::from_std(listener).unwrap(),
                    Arc::new(move |ip| {
                        let IpAddr::V4(v4) = ip else { return None };
                        let i = usize::from(v4.octets()[3]).checked_sub(1).filter(|i| *i < pods.len())?;
                        Some((Some(tls.clone()), Script::Honest(scripts.read().unwrap()[i].clone())))
                    }),
                )
            };
            let mut observed = super::mesh::pods(&pods, "0123456789");
            for (i, p) in observed.routers.iter_mut().enumerate() {
                p.ip = Some(format!("127.66.0.{}", i + 1));
                // Ready for an hour: a router with no link is cut off, not joining.
                p.ready_since = Some(SystemTime::now() - Duration::from_secs(3600));
            }
            observed.secrets.insert(crate::mesh::management::ca_secret("mesh"), Some(ca));
            let reader = Arc::new(Reader::default().with_port(port).with_resync(REST));
            let metrics = Arc::new(crate::metrics::Metrics::default());
            Mesh { o, seal, observed, reader, metrics, answers, peers }
        }

        /// A reconcile pass's read stage.
        fn pass(&self) -> MeshRead {
            self.reader.read(&self.o, &self.observed, Ok(()), None, &self.metrics, &self.seal)
        }
    }

    /// A connected mesh is read again every rest by the reader itself from the pass that
    /// first finds it connected: that pass asks no requeue, no pass is woken while the reads
    /// find the mesh as before, and a pass meanwhile neither starts a read nor asks to come
    /// back for one. A read that finds the mesh changed wakes a pass, and the passes read
    /// again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connected_mesh_at_rest_is_read_again_without_a_pass() {
        let mesh = Mesh::new(PODS, &tokio::runtime::Handle::current());
        let (answers, peers) = (mesh.answers.clone(), &mesh.peers);
        let mut wakes = mesh.reader.subscribe("");
        let pass = || mesh.pass();

        // The first pass starts a read, whose end wakes the next pass with the answers.
        let r: MeshRead = pass();
        assert_eq!((r.blocked.as_deref(), r.next), (None, None), "{r:?}");
        let woken = tokio::time::timeout(WAIT, wakes.next()).await;
        assert!(woken.is_ok_and(|w| w.is_some()), "the first read ends and wakes a pass");
        let before = reads(PODS[1]);
        let r = pass();
        assert_eq!(r.report.condition.reason, "Connected", "{r:?}");
        // Connected and not due yet: the mesh rests at once. The reader reads it when the
        // read is due, and the pass need not come back to start it.
        assert_eq!(r.next, None, "a connected mesh is read when due without a pass: {r:?}");

        // From here the reader reads by itself, and no pass is woken while the reads find
        // the mesh as before.
        let rests = 3;
        let read_alone = tokio::time::timeout(WAIT, async {
            while reads(PODS[1]) < before + rests {
                tokio::time::sleep(REST / 4).await;
            }
        });
        let wake = wakes.next();
        tokio::pin!(wake);
        tokio::select! {
            done = read_alone => assert!(done.is_ok(), "{} reads at rest within {WAIT:?}", reads(PODS[1]) - before),
            w = &mut wake => panic!("a pass was woken at rest ({w:?}) after {} reads", reads(PODS[1]) - before),
        }
        // A pass meanwhile (a resync, an unrelated event) starts no read and asks no requeue.
        let r = pass();
        assert_eq!((r.report.condition.reason, r.next), ("Connected", None), "{r:?}");

        // The mesh changes: the link between the routers is lost. The reader's next read
        // wakes a pass.
        for (i, pod) in PODS.iter().enumerate() {
            let alone = Arc::new(amqp_peer::honest(pod, "interior", &[], 0));
            amqp_peer::routable(&alone);
            answers.write().unwrap()[i] = alone;
        }
        assert!(tokio::time::timeout(WAIT, &mut wake).await.is_ok(), "a changed mesh wakes a pass");
        let r = pass();
        assert_ne!(r.report.condition.reason, "Connected", "{r:?}");
        // Not connected: the passes come back for the reads again.
        assert!(r.next.is_some(), "{r:?}");
        peers.abort();
    }

    /// A read runs on the reads' own thread (`read::reads`), not on the runtime of the pass
    /// that starts it: it reads the routers and wakes the next pass while that runtime is
    /// held by other work (here its only thread, blocked), and a pass never waits on a read.
    #[test]
    fn a_read_goes_on_while_the_runtime_of_its_pass_is_busy() {
        let peers = tokio::runtime::Runtime::new().unwrap();
        let passes = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let mesh = Mesh::new(["busy-a", "busy-b"], peers.handle());
        let mut wakes = mesh.reader.subscribe("");
        let before = reads("busy-b");
        passes.block_on(async {
            let r = mesh.pass();
            assert_eq!((r.blocked.as_deref(), r.next), (None, None), "{r:?}");
            // This runtime's only thread is held until the read is done: nothing it runs
            // moves meanwhile.
            let deadline = std::time::Instant::now() + WAIT;
            while reads("busy-b") == before && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            assert!(
                reads("busy-b") > before,
                "no read within {WAIT:?} while the runtime of its pass was busy"
            );
        });
        passes.block_on(async {
            let woken = tokio::time::timeout(WAIT, wakes.next()).await;
            assert!(woken.is_ok_and(|w| w.is_some()), "the read ends and wakes a pass");
            assert_eq!(mesh.pass().report.condition.reason, "Connected");
        });
        mesh.peers.abort();
    }
}
