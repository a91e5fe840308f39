//! The status stage, purely: the condition reasons for conflicts, missing Secrets, rollouts;
//! and the retry backoff.

use std::time::{Duration, SystemTime};

use qdr_api::{Interconnect, InterconnectStatus};
use qdr_controller::owner::Owner;
use qdr_controller::reconcile::apply::{Applied, Conflict, WorkloadStatus};
use qdr_controller::reconcile::backoff;
use qdr_controller::reconcile::build::CredentialsReport;
use qdr_controller::reconcile::observe::Observed;
use qdr_controller::reconcile::status::desired;
use qdr_controller::references::{Reference, Unmet};
use serde_json::json;

fn owner() -> Owner {
    let ic: Interconnect = serde_json::from_value(json!({
        "metadata": {"name": "mesh", "namespace": "ns", "uid": "u-1", "generation": 3}, "spec": {}}))
    .unwrap();
    Owner::new(&ic).unwrap()
}

fn observed() -> Observed {
    Observed {
        now: SystemTime::now(),
        secrets: Default::default(),
        workload: None,
        workload_conflict: None,
        pods: vec![],
        generation_reconciled: false,
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
