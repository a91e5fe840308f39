//! Generated router credentials over time, in process: renewal at 2/3 of the lifetime, CA
//! rotation with overlap (checked by verifying every router's certificate against every
//! other router's trust at each step), user-provided Secrets never written, and the
//! references check (missing Secrets and keys, with the spec field).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use crate::credentials::{CredentialChange, Existing, Lifetimes, Plan, plan, text};
use crate::references::{fingerprint, references, unmet};
use crate::validated::ValidatedInterconnect;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use qdr_api::Interconnect;
use qdr_certs::pki::{CertInfo, new_ca, new_leaf, verify_leaf};
use serde_json::{Value, json};

fn owner(spec: Value) -> ValidatedInterconnect {
    let ic: Interconnect = serde_json::from_value(json!({
        "metadata": {"name": "mesh", "namespace": "ns", "uid": "0f1e2d3c-aaaa-bbbb-cccc-000000000001"},
        "spec": spec,
    }))
    .unwrap();
    ValidatedInterconnect::new(&ic).unwrap()
}

const LIFE: Lifetimes = Lifetimes { ca: Duration::from_secs(600), cert: Duration::from_secs(300) };

/// The namespace after `p` was applied.
fn apply(existing: &mut Existing, p: &Plan) {
    for s in p.create.iter().chain(&p.update) {
        existing.insert(s.metadata.name.clone().unwrap(), s.clone());
    }
}

fn get(existing: &Existing, name: &str, key: &str) -> String {
    text(existing[name].data.as_ref().unwrap(), key).unwrap_or_else(|| panic!("{name} has no {key}"))
}

/// The inter-router profile (mutual TLS, own CA): each router presents
/// `mesh-inter-router-credentials/tls.crt` and trusts its `ca.crt`.
const LEAF: &str = "mesh-inter-router-credentials";
const CA: &str = "mesh-inter-router-ca";

#[test]
fn certificates_are_renewed_at_two_thirds_of_their_lifetime() {
    let o = owner(json!({}));
    let t0 = SystemTime::now();
    let mut ns = Existing::new();
    let first = plan(&o, &ns, t0, LIFE, true).unwrap();
    apply(&mut ns, &first);
    let issued = CertInfo::parse(&get(&ns, LEAF, "tls.crt")).unwrap();
    let renew_at = issued.point(2.0 / 3.0);
    assert!(first.next_renewal.is_some_and(|t| t <= renew_at), "{:?}", first.next_renewal);
    // Before the renew point nothing changes.
    let quiet = plan(&o, &ns, renew_at - Duration::from_secs(1), LIFE, true).unwrap();
    assert!(quiet.create.is_empty() && quiet.update.is_empty(), "{quiet:?}");
    // At it, both leaves are re-issued by the same CAs; the CAs stay.
    let due = plan(&o, &ns, renew_at + Duration::from_secs(1), LIFE, true).unwrap();
    let updated: Vec<&str> = due.update.iter().filter_map(|s| s.metadata.name.as_deref()).collect();
    assert_eq!(updated, ["mesh-default-credentials", LEAF]);
    assert!(
        due.changes.iter().all(|c| matches!(c, CredentialChange::Renewed { why: "renew point reached", .. }))
    );
    assert!(
        due.update.iter().all(|s| s.metadata.resource_version
            == ns[s.metadata.name.as_deref().unwrap()].metadata.resource_version)
    );
    let old_ca = get(&ns, CA, "tls.crt");
    apply(&mut ns, &due);
    let renewed = CertInfo::parse(&get(&ns, LEAF, "tls.crt")).unwrap();
    assert!(renewed.not_after > issued.not_after);
    verify_leaf(&get(&ns, LEAF, "tls.crt"), &old_ca, "mesh.ns.svc", renew_at + Duration::from_secs(1))
        .unwrap();
}

/// Runs the passes of a CA rotation, with the routers rolled out after every change, and
/// checks at every step that each router state accepts the peer certificate of the state
/// before and after it (a rolling update mixes them).
#[test]
fn a_ca_is_rotated_with_overlap_and_no_router_ever_distrusts_a_peer() {
    // Leaves outlive the CA's renew point, so only the rotation changes them.
    const LIFE: Lifetimes = Lifetimes { ca: Duration::from_secs(300), cert: Duration::from_secs(600) };
    let o = owner(json!({}));
    let t0 = SystemTime::now();
    let mut ns = Existing::new();
    let first = plan(&o, &ns, t0, LIFE, true).unwrap();
    apply(&mut ns, &first);
    let ca_info = CertInfo::parse(&get(&ns, CA, "tls.crt")).unwrap();
    // Past the CA's renew point, but before its leaves' lifetime ends: pass again and again.
    let mut now = ca_info.point(2.0 / 3.0) + Duration::from_secs(1);
    let state = |ns: &Existing| (get(ns, LEAF, "tls.crt"), get(ns, LEAF, "ca.crt"));
    let mut states = vec![state(&ns)];
    let mut steps = Vec::new();
    for _ in 0..8 {
        // A pass that sees the routers still on the previous state changes no CA.
        let waiting = plan(&o, &ns, now, LIFE, false).unwrap();
        assert!(
            waiting
                .changes
                .iter()
                .all(|c| !matches!(c, CredentialChange::CaPromoted(_) | CredentialChange::CaRetired(_))),
            "promotion or retirement before the rollout: {:?}",
            waiting.changes
        );
        let p = plan(&o, &ns, now, LIFE, true).unwrap();
        if p.update.is_empty() && p.create.is_empty() {
            break;
        }
        steps.extend(p.changes.iter().filter(|c| !matches!(c, CredentialChange::Renewed { .. })).cloned());
        apply(&mut ns, &p);
        states.push(state(&ns));
        now += Duration::from_secs(1);
    }
    assert_eq!(
        steps,
        [
            CredentialChange::CaStaged("mesh-ca".into()),
            CredentialChange::CaStaged(CA.into()),
            CredentialChange::CaPromoted("mesh-ca".into()),
            CredentialChange::CaPromoted(CA.into()),
            CredentialChange::CaRetired("mesh-ca".into()),
            CredentialChange::CaRetired(CA.into()),
        ]
    );
    for pair in states.windows(2) {
        let ((leaf_a, trust_a), (leaf_b, trust_b)) = (&pair[0], &pair[1]);
        verify_leaf(leaf_a, trust_b, "mesh.ns.svc", now).expect("new router trusts old peer");
        verify_leaf(leaf_b, trust_a, "mesh.ns.svc", now).expect("old router trusts new peer");
    }
    // At the end: one CA trusted, the new one, and the leaf is signed by it.
    let (leaf, trust) = states.last().unwrap();
    assert_eq!(qdr_certs::pki::split_bundle(trust).len(), 1);
    assert_eq!(trust, &get(&ns, CA, "ca.crt"));
    assert_ne!(get(&ns, CA, "tls.crt"), states[0].1, "the CA changed");
    verify_leaf(leaf, trust, "mesh.ns.svc", now).unwrap();
    assert!(!ns[CA].data.as_ref().unwrap().contains_key("next.crt"));
}

fn user_secret(entries: &[(&str, &str)]) -> Secret {
    Secret {
        data: Some(entries.iter().map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec()))).collect()),
        ..Default::default()
    }
}

#[test]
fn user_provided_secrets_are_never_written_even_when_due() {
    let o = owner(json!({}));
    let t0 = SystemTime::now();
    let ca = new_ca("user", t0, Duration::from_secs(60)).unwrap();
    let leaf = new_leaf(&ca, &["mesh".into()], t0, Duration::from_secs(60)).unwrap();
    let mut ns = Existing::new();
    for name in ["mesh-default-credentials", LEAF] {
        ns.insert(
            name.into(),
            user_secret(&[("tls.crt", &leaf.cert_pem), ("tls.key", &leaf.key_pem), ("ca.crt", &ca.cert_pem)]),
        );
    }
    ns.insert(CA.into(), user_secret(&[("tls.crt", &ca.cert_pem), ("tls.key", &ca.key_pem)]));
    // Long past expiry: still never touched (the CA Secret `mesh-ca` is not even needed).
    let p = plan(&o, &ns, t0 + Duration::from_secs(3600), LIFE, true).unwrap();
    assert!(p.update.is_empty(), "{:?}", p.update);
    assert!(p.create.is_empty(), "{:?}", p.create);
}

#[test]
fn missing_secrets_and_keys_are_reported_with_the_field_that_names_them() {
    let o = owner(json!({
        "sslProfiles": [
            {"name": "tls", "credentials": "my-tls"},
            {"name": "client", "credentials": "client-cert", "caCert": "client-ca"},
            {"name": "generated"},
        ],
        "listeners": [
            {"port": 5671, "sslProfile": "tls"},
            {"port": 5672, "sslProfile": "client"},
            {"port": 5673, "sslProfile": "generated"},
        ],
        "deploymentPlan": {"issuer": "corp-ca"},
    }));
    let refs = references(&o);
    let mut ns: BTreeMap<String, BTreeMap<String, ByteString>> = BTreeMap::new();
    ns.insert("mesh-users".into(), BTreeMap::new());
    let lines: Vec<String> = unmet(&refs, &ns).iter().map(ToString::to_string).collect();
    assert!(
        lines.contains(&"Secret my-tls (spec.sslProfiles[0].credentials) does not exist".to_string()),
        "{lines:?}"
    );
    assert!(
        lines.contains(&"Secret client-ca (spec.sslProfiles[1].caCert) does not exist".to_string()),
        "{lines:?}"
    );
    assert!(
        lines.contains(&"Secret corp-ca (spec.deploymentPlan.issuer) does not exist".to_string()),
        "{lines:?}"
    );
    let only_cert = user_secret(&[("tls.crt", "x")]).data.unwrap();
    ns.insert("my-tls".into(), only_cert);
    let lines: Vec<String> = unmet(&refs, &ns).iter().map(ToString::to_string).collect();
    assert!(
        lines.contains(&"Secret my-tls (spec.sslProfiles[0].credentials) has no tls.key".to_string()),
        "{lines:?}"
    );
    // A Secret appearing changes the fingerprint (the routers roll onto it).
    let before = fingerprint(&refs, &ns);
    ns.insert("client-ca".into(), user_secret(&[("tls.crt", "ca")]).data.unwrap());
    assert_ne!(before, fingerprint(&refs, &ns));
    // The issuer is read by the operator, not mounted: it is not in the fingerprint.
    let with_issuer = {
        let mut n = ns.clone();
        n.insert("corp-ca".into(), user_secret(&[("tls.crt", "a"), ("tls.key", "b")]).data.unwrap());
        n
    };
    assert_eq!(fingerprint(&refs, &ns), fingerprint(&refs, &with_issuer));
}
