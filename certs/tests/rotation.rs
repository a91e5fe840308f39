//! The rotation state machine over simulated time, with no API server.

use std::time::{Duration, SystemTime};

use qdr_certs::pki::{CertInfo, verify_leaf};
use qdr_certs::rotation::{Material, Policy, Step, plan};

fn policy() -> Policy {
    Policy {
        ca_name: "test-ca".into(),
        sans: vec!["svc.ns.svc".into(), "127.0.0.1".into()],
        ca_lifetime: Duration::from_secs(300),
        leaf_lifetime: Duration::from_secs(60),
        renew_fraction: 2.0 / 3.0,
        soak: Duration::from_secs(5),
        retire_grace: Duration::from_secs(10),
    }
}

fn step(m: &Material, now: SystemTime, trusted: &[String]) -> Option<(Step, Material)> {
    step_with(&policy(), m, now, trusted)
}

fn step_with(p: &Policy, m: &Material, now: SystemTime, trusted: &[String]) -> Option<(Step, Material)> {
    plan(m, now, p, &|pem| trusted.iter().any(|b| b.contains(pem))).unwrap()
}

#[test]
fn first_plan_creates_a_ca_and_a_leaf_that_verifies() {
    let now = SystemTime::now();
    let (s, m) = step(&Material::default(), now, &[]).unwrap();
    assert_eq!(s, Step::Create);
    assert_eq!(m.bundle.len(), 1);
    let leaf = m.leaf.as_ref().unwrap();
    verify_leaf(&leaf.cert_pem, &m.bundle_pem(), "svc.ns.svc", now).unwrap();
    verify_leaf(&leaf.cert_pem, &m.bundle_pem(), "127.0.0.1", now).unwrap();
    let info = CertInfo::parse(&m.ca.as_ref().unwrap().cert_pem).unwrap();
    assert!(info.is_ca);
    assert_eq!(CertInfo::parse(&leaf.cert_pem).unwrap().sans, ["svc.ns.svc", "127.0.0.1"]);
    // Nothing else is due right away.
    assert!(step(&m, now, &[m.bundle_pem()]).is_none());
}

#[test]
fn ca_rotation_overlaps_trust_and_waits_for_the_live_bundle() {
    // A leaf that outlives the CA rotation window, so the old leaf is still valid to check.
    let p = Policy { leaf_lifetime: Duration::from_secs(300), ..policy() };
    let step = |m: &Material, now, trusted: &[String]| step_with(&p, m, now, trusted);
    let t0 = SystemTime::now();
    let (_, m) = step(&Material::default(), t0, &[]).unwrap();
    // Past 2/3 of the CA's life: stage a second CA; the leaf is untouched.
    let ca_renew = CertInfo::parse(&m.ca.as_ref().unwrap().cert_pem).unwrap().point(2.0 / 3.0);
    let t1 = ca_renew + Duration::from_secs(1);
    let (s, staged) = step(&m, t1, &[m.bundle_pem()]).unwrap();
    assert_eq!(s, Step::Stage);
    assert_eq!(staged.bundle.len(), 2);
    assert_eq!(staged.leaf, m.leaf);
    // Not promoted while the live caBundle lacks the new CA.
    let later = t1 + Duration::from_secs(6);
    let pending = step(&staged, later, &[m.bundle_pem()]);
    assert!(!matches!(pending, Some((Step::Promote, _))), "{pending:?}");
    // Nor before the soak, even when trusted.
    let early = step(&staged, t1 + Duration::from_secs(1), &[staged.bundle_pem()]);
    assert!(!matches!(early, Some((Step::Promote, _))), "{early:?}");
    // Promoted once trusted and soaked; both old and new leaves verify against the bundle.
    let (s, promoted) = step(&staged, later, &[staged.bundle_pem()]).unwrap();
    assert_eq!(s, Step::Promote);
    let old_leaf = &m.leaf.as_ref().unwrap().cert_pem;
    let new_leaf = &promoted.leaf.as_ref().unwrap().cert_pem;
    verify_leaf(old_leaf, &promoted.bundle_pem(), "svc.ns.svc", later).unwrap();
    verify_leaf(new_leaf, &promoted.bundle_pem(), "svc.ns.svc", later).unwrap();
    assert!(
        verify_leaf(new_leaf, &m.bundle_pem(), "svc.ns.svc", later).is_err(),
        "new leaf is from the new CA"
    );
    // The old CA is retired only after the grace period.
    assert!(step(&promoted, later + Duration::from_secs(5), &[promoted.bundle_pem()]).is_none());
    let (s, retired) = step(&promoted, later + Duration::from_secs(11), &[promoted.bundle_pem()]).unwrap();
    assert_eq!(s, Step::Retire);
    assert_eq!(retired.bundle, vec![promoted.ca.as_ref().unwrap().cert_pem.clone()]);
}

#[test]
fn leaf_is_renewed_at_two_thirds_of_its_life() {
    let t0 = SystemTime::now();
    let (_, m) = step(&Material::default(), t0, &[]).unwrap();
    let renew = CertInfo::parse(&m.leaf.as_ref().unwrap().cert_pem).unwrap().point(2.0 / 3.0);
    assert!(step(&m, renew - Duration::from_secs(1), &[m.bundle_pem()]).is_none());
    let (s, m2) = step(&m, renew + Duration::from_secs(1), &[m.bundle_pem()]).unwrap();
    assert_eq!(s, Step::Renew);
    assert_ne!(m2.leaf, m.leaf);
    assert_eq!(m2.ca, m.ca);
}

#[test]
fn leaf_for_other_names_is_reissued() {
    let t0 = SystemTime::now();
    let (_, m) = step(&Material::default(), t0, &[]).unwrap();
    let other = Policy { sans: vec!["other.ns.svc".into()], ..policy() };
    let (s, _) = plan(&m, t0, &other, &|_| true).unwrap().unwrap();
    assert_eq!(s, Step::Renew);
}

#[test]
fn a_lost_ca_keeps_the_old_bundle_trusted() {
    // An emptied or damaged Secret (ca gone, bundle kept): the new CA is added next to the
    // still-valid old one, so replicas still serving the old chain keep verifying.
    let t0 = SystemTime::now();
    let (_, m) = step(&Material::default(), t0, &[]).unwrap();
    let damaged = Material { ca: None, leaf: None, ..m.clone() };
    let (s, fixed) = step(&damaged, t0, &[m.bundle_pem()]).unwrap();
    assert_eq!(s, Step::Create);
    assert_eq!(fixed.bundle.len(), 2);
    verify_leaf(&m.leaf.unwrap().cert_pem, &fixed.bundle_pem(), "svc.ns.svc", t0).unwrap();
}

/// A whole year of simulated time at one tick per second of the scaled policy: at every
/// tick, the leaf served before the tick and the one served after it both verify against
/// the bundle the API server holds (synced one tick late), so no admission call can fail.
#[test]
fn simulated_rotations_never_serve_an_untrusted_leaf() {
    let mut now = SystemTime::now();
    let mut m = Material::default();
    let mut live = String::new(); // the caBundle in the webhook configurations
    let (mut creates, mut promotes, mut renews) = (0, 0, 0);
    for _ in 0..2000 {
        let before = m.leaf.clone();
        while let Some((s, next)) = step(&m, now, std::slice::from_ref(&live)) {
            match s {
                Step::Create => creates += 1,
                Step::Promote => promotes += 1,
                Step::Renew => renews += 1,
                _ => {}
            }
            m = next;
        }
        for leaf in [before.as_ref(), m.leaf.as_ref()].into_iter().flatten() {
            if !live.is_empty() {
                verify_leaf(&leaf.cert_pem, &live, "svc.ns.svc", now)
                    .unwrap_or_else(|e| panic!("served leaf not trusted by the live caBundle: {e}"));
            }
        }
        live = m.bundle_pem(); // the caBundle sync
        now += Duration::from_secs(1);
    }
    assert_eq!(creates, 1);
    assert!(promotes >= 5, "{promotes} CA rotations");
    assert!(renews >= 20, "{renews} leaf renewals");
}
