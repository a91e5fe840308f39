//! Generated router credentials over time, in process: renewal at 2/3 of the lifetime, CA
//! rotation with overlap (checked by verifying every router's certificate against every
//! other router's trust at each step), user-provided Secrets never written, and the
//! references check (missing Secrets and keys, with the spec field).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::secrets::text;
use super::work::Plan;
use crate::credentials::{CredentialChange, Existing, Lifetimes, Routers, STEP_AT, plan};
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

const LIFE: Lifetimes = Lifetimes {
    ca: Duration::from_secs(600),
    cert: Duration::from_secs(300),
    overlap: Duration::from_secs(20),
};

/// The namespace after `p` was applied. Like the API server, refuses a `kubernetes.io/tls`
/// Secret without `tls.crt` and `tls.key`.
fn apply(existing: &mut Existing, p: &Plan) {
    for s in p.create.iter().chain(&p.update) {
        let data = s.data.as_ref().unwrap();
        if s.type_.as_deref() == Some("kubernetes.io/tls") {
            assert!(
                data.contains_key("tls.crt") && data.contains_key("tls.key"),
                "{:?}: data[tls.key]: Required",
                s.metadata.name
            );
        }
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
    let first = plan(&o, &ns, t0, LIFE, Routers::RolledOut).unwrap();
    apply(&mut ns, &first);
    let issued = CertInfo::parse(&get(&ns, LEAF, "tls.crt")).unwrap();
    let renew_at = issued.point(2.0 / 3.0);
    assert!(first.next_renewal.is_some_and(|t| t <= renew_at), "{:?}", first.next_renewal);
    // Before the renew point nothing changes.
    let quiet = plan(&o, &ns, renew_at - Duration::from_secs(1), LIFE, Routers::RolledOut).unwrap();
    assert!(quiet.create.is_empty() && quiet.update.is_empty(), "{quiet:?}");
    // At it, both leaves are re-issued by the same CAs; the CAs stay.
    let due = plan(&o, &ns, renew_at + Duration::from_secs(1), LIFE, Routers::RolledOut).unwrap();
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

#[test]
fn the_addresses_grants_advertise_are_names_of_the_router_certificates() {
    let o = owner(json!({}));
    let t0 = SystemTime::now();
    let mut ns = Existing::new();
    let first = plan(&o, &ns, t0, LIFE, Routers::RolledOut).unwrap();
    apply(&mut ns, &first);
    // A grant advertises a load balancer's IP and a NAT name: the leaves are re-issued with
    // both, and a site that dials either verifies the routers' certificate.
    let advertised = o.clone().with_advertised(vec!["203.0.113.7".into(), "hub.example.com".into()]);
    let again = plan(&advertised, &ns, t0, LIFE, Routers::RolledOut).unwrap();
    assert!(
        again.changes.iter().any(|c| matches!(c, CredentialChange::Renewed { why: "names changed", .. }))
    );
    apply(&mut ns, &again);
    let leaf = get(&ns, LEAF, "tls.crt");
    let ca = get(&ns, CA, "tls.crt");
    for host in ["hub.example.com", "203.0.113.7", "mesh.ns.svc"] {
        verify_leaf(&leaf, &ca, host, t0).unwrap_or_else(|e| panic!("{host}: {e}"));
    }
    assert!(verify_leaf(&leaf, &ca, "elsewhere.example", t0).is_err());
    let quiet = plan(&advertised, &ns, t0, LIFE, Routers::RolledOut).unwrap();
    assert!(quiet.update.is_empty(), "the same addresses, no re-issue");
    // A grant deleted takes its address out of what is advertised: the certificates keep it
    // until their renewal, so no router rolls (and no other site's link drops) for it.
    let fewer = o.clone().with_advertised(vec!["hub.example.com".into()]);
    let kept = plan(&fewer, &ns, t0, LIFE, Routers::RolledOut).unwrap();
    assert!(kept.update.is_empty() && kept.create.is_empty(), "a name leaving re-issued: {:?}", kept.changes);
}

/// A rotation step of `c`, as `stage mesh-ca` (renewals are `None`).
fn step(c: &CredentialChange) -> Option<String> {
    match c {
        CredentialChange::CaStaged { secret, lost: None, .. } => Some(format!("stage {secret}")),
        CredentialChange::CaStaged { secret, lost: Some(_), .. } => Some(format!("recover {secret}")),
        CredentialChange::CaPromoted { secret, .. } => Some(format!("promote {secret}")),
        CredentialChange::CaRetired(secret) => Some(format!("retire {secret}")),
        CredentialChange::CaReplaced { secret, .. } => Some(format!("replace {secret}")),
        _ => None,
    }
}

/// Runs passes every `tick` from `now` while anything changes (at most `passes`), with the
/// routers rolled out after every change; checks that a pass which sees the routers still
/// on the previous state takes no CA step beyond a stage, and that each state accepts the
/// peer certificate of the state before and after it (a rolling update mixes them).
/// Returns the steps with their times (seconds from the first pass) and the states.
fn run(
    o: &ValidatedInterconnect,
    ns: &mut Existing,
    mut now: SystemTime,
    life: Lifetimes,
    tick: Duration,
    passes: usize,
) -> (Vec<(u64, String)>, SystemTime) {
    let start = now;
    let state = |ns: &Existing| (get(ns, LEAF, "tls.crt"), get(ns, LEAF, "ca.crt"));
    let mut states = vec![state(ns)];
    let mut steps = Vec::new();
    let mut quiet = 0;
    for _ in 0..passes {
        let waiting = plan(o, ns, now, life, Routers::Rolling).unwrap();
        let early: Vec<String> = waiting
            .changes
            .iter()
            .filter_map(step)
            .filter(|s| s.starts_with("promote") || s.starts_with("retire"))
            .collect();
        assert!(early.is_empty(), "a step before the rollout: {early:?}");
        let p = plan(o, ns, now, life, Routers::RolledOut).unwrap();
        if p.update.is_empty() && p.create.is_empty() {
            quiet += 1;
            // Nothing due before the overlap ends: wait for the plan's own next moment.
            if quiet > 2 && p.next_renewal.is_none_or(|t| t > now + life.overlap * 2) {
                break;
            }
        } else {
            quiet = 0;
            let secs = now.duration_since(start).unwrap().as_secs();
            steps.extend(p.changes.iter().filter_map(step).map(|s| (secs, s)));
            apply(ns, &p);
            states.push(state(ns));
        }
        now += tick;
    }
    for pair in states.windows(2) {
        let ((leaf_a, trust_a), (leaf_b, trust_b)) = (&pair[0], &pair[1]);
        verify_leaf(leaf_a, trust_b, "mesh.ns.svc", now).expect("new router trusts old peer");
        verify_leaf(leaf_b, trust_a, "mesh.ns.svc", now).expect("old router trusts new peer");
    }
    (steps, now)
}

#[test]
fn a_ca_is_rotated_with_overlap_and_no_router_ever_distrusts_a_peer() {
    // Leaves outlive the CA's renew point, so only the rotation changes them.
    const LIFE: Lifetimes = Lifetimes {
        ca: Duration::from_secs(300),
        cert: Duration::from_secs(600),
        overlap: Duration::from_secs(20),
    };
    assert_eq!(LIFE.check(), Ok(()));
    let o = owner(json!({}));
    let t0 = SystemTime::now();
    let mut ns = Existing::new();
    let first = plan(&o, &ns, t0, LIFE, Routers::RolledOut).unwrap();
    apply(&mut ns, &first);
    let ca_info = CertInfo::parse(&get(&ns, CA, "tls.crt")).unwrap();
    let first_ca = get(&ns, CA, "tls.crt");
    // Past the CA's renew point, but before its leaves' lifetime ends: a pass every second.
    let from = ca_info.point(2.0 / 3.0) + Duration::from_secs(1);
    let (steps, now) = run(&o, &mut ns, from, LIFE, Duration::from_secs(1), 120);
    let names: Vec<&str> = steps.iter().map(|(_, s)| s.as_str()).collect();
    assert_eq!(
        names,
        [
            "stage mesh-ca",
            "stage mesh-inter-router-ca",
            "promote mesh-ca",
            "promote mesh-inter-router-ca",
            "retire mesh-ca",
            "retire mesh-inter-router-ca"
        ]
    );
    // Each step waits the overlap after the one before (a pass a second: at most one late).
    let at = |name: &str| steps.iter().find(|(_, s)| s == name).unwrap().0;
    for (a, b) in [("stage mesh-ca", "promote mesh-ca"), ("promote mesh-ca", "retire mesh-ca")] {
        let gap = at(b) - at(a);
        assert!((20..=21).contains(&gap), "{a} → {b}: {gap}s, overlap 20s");
    }
    // At the end: one CA trusted, the new one, and the leaf is signed by it.
    assert_eq!(qdr_certs::pki::split_bundle(&get(&ns, LEAF, "ca.crt")).len(), 1);
    assert_eq!(get(&ns, LEAF, "ca.crt"), get(&ns, CA, "ca.crt"));
    assert_ne!(get(&ns, CA, "tls.crt"), first_ca, "the CA changed");
    verify_leaf(&get(&ns, LEAF, "tls.crt"), &get(&ns, CA, "ca.crt"), "mesh.ns.svc", now).unwrap();
    let data = ns[CA].data.as_ref().unwrap();
    assert!(!data.contains_key("next.crt"));
    assert!(ns[CA].metadata.annotations.as_ref().is_none_or(|a| !a.contains_key(STEP_AT)));
}

#[test]
fn each_rotation_event_names_the_date_of_the_next_step() {
    let o = owner(json!({}));
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000);
    let mut ns = Existing::new();
    let first = plan(&o, &ns, t0, LIFE, Routers::RolledOut).unwrap();
    apply(&mut ns, &first);
    let at = CertInfo::parse(&get(&ns, CA, "tls.crt")).unwrap().point(2.0 / 3.0);
    let staged = plan(&o, &ns, at, LIFE, Routers::RolledOut).unwrap();
    let line = staged.changes.iter().find(|c| step(c).is_some()).unwrap().to_string();
    let promote = crate::human::date(at + LIFE.overlap);
    assert!(line.contains(&format!("must trust the new ca.crt before {promote}")), "{line}");
    assert_eq!(staged.next_renewal, Some(at + LIFE.overlap));
    apply(&mut ns, &staged);
    // The overlap is kept even with everything rolled out, and the requeue is at its end.
    let early = plan(&o, &ns, at + LIFE.overlap - Duration::from_secs(1), LIFE, Routers::RolledOut).unwrap();
    assert!(early.changes.iter().all(|c| step(c).is_none()), "{:?}", early.changes);
    assert_eq!(early.next_renewal, Some(at + LIFE.overlap));
    let promoted = plan(&o, &ns, at + LIFE.overlap, LIFE, Routers::RolledOut).unwrap();
    let line = promoted.changes.iter().find(|c| step(c).is_some()).unwrap().to_string();
    let retire = crate::human::date(at + LIFE.overlap * 2);
    assert!(line.contains(&format!("stays trusted until at least {retire}")), "{line}");
}

/// Removes `key` from Secret `name`, or the whole Secret when `key` is `None`.
fn lose(ns: &mut Existing, name: &str, key: Option<&str>) {
    match key {
        None => {
            ns.remove(name);
        }
        Some(k) => {
            ns.get_mut(name).unwrap().data.as_mut().unwrap().remove(k);
        }
    }
}

#[test]
fn a_lost_ca_is_replaced_through_the_three_steps_with_the_old_ca_trusted_meanwhile() {
    for (what, key) in [("deleted", None), ("without tls.key", Some("tls.key"))] {
        let o = owner(json!({}));
        let t0 = SystemTime::now();
        let mut ns = Existing::new();
        let first = plan(&o, &ns, t0, LIFE, Routers::RolledOut).unwrap();
        apply(&mut ns, &first);
        let old_ca = get(&ns, CA, "tls.crt");
        lose(&mut ns, CA, key);
        let (steps, _) = run(&o, &mut ns, t0 + Duration::from_secs(1), LIFE, Duration::from_secs(1), 120);
        let names: Vec<&str> = steps.iter().map(|(_, s)| s.as_str()).collect();
        assert_eq!(
            names,
            [format!("recover {CA}"), format!("promote {CA}"), format!("retire {CA}")],
            "{what}"
        );
        assert_ne!(get(&ns, CA, "tls.crt"), old_ca, "{what}");
        let leaf = CertInfo::parse(&get(&ns, LEAF, "tls.crt")).unwrap();
        assert!(
            crate::keys::signed_by(&get(&ns, LEAF, "tls.crt"), &get(&ns, CA, "tls.crt")),
            "{what}: {leaf:?}"
        );
    }
}

#[test]
fn a_lost_ca_with_nothing_left_to_trust_is_replaced_at_once_with_a_warning() {
    // The CA and its leaf are both gone: nothing signed by the old CA is served.
    let o = owner(json!({}));
    let t0 = SystemTime::now();
    let mut ns = Existing::new();
    let first = plan(&o, &ns, t0, LIFE, Routers::RolledOut).unwrap();
    apply(&mut ns, &first);
    let old = ns[CA].clone();
    lose(&mut ns, LEAF, None);
    // The CA Secret expired: replaced, every leaf re-issued by the new one.
    let later = t0 + LIFE.ca + Duration::from_secs(60);
    let mut ns2 = ns.clone();
    let p = plan(&o, &ns2, later, LIFE, Routers::RolledOut).unwrap();
    let replaced: Vec<String> = p.changes.iter().map(ToString::to_string).collect();
    assert!(
        replaced.iter().any(|l| l.contains(&format!("the CA in Secret {CA} was replaced at once"))
            && l.contains("expired at")),
        "{replaced:?}"
    );
    apply(&mut ns2, &p);
    assert_ne!(ns2[CA].data, old.data);
    verify_leaf(&get(&ns2, LEAF, "tls.crt"), &get(&ns2, CA, "ca.crt"), "mesh.ns.svc", later).unwrap();
    // The CA Secret and its leaves deleted together, the CA still valid: nothing is left
    // that the controller can keep trusted, so it is replaced at once, and the Warning says
    // what breaks (old and new routers refuse each other) and until when (the rollout).
    let gone = Existing::new();
    let p = plan(&o, &gone, t0 + Duration::from_secs(5), LIFE, Routers::Rolling).unwrap();
    let note = p
        .changes
        .iter()
        .map(ToString::to_string)
        .find(|l| l.contains(&format!("the CA in Secret {CA} was replaced at once")))
        .unwrap_or_else(|| panic!("{:?}", p.changes));
    for says in [
        "it does not exist",
        "Until that rollout completes",
        "links between an old and a new router are refused",
    ] {
        assert!(note.contains(says), "{says}: {note}");
    }
    // A brand-new Interconnect gets its CAs silently.
    let fresh = plan(&o, &Existing::new(), t0, LIFE, Routers::Unknown).unwrap();
    assert!(fresh.changes.is_empty(), "{:?}", fresh.changes);
}

#[test]
fn a_leaf_is_reissued_when_its_issuer_is_rekeyed_under_the_same_name() {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let o = owner(json!({"deploymentPlan": {"issuer": "corp-ca"}}));
    let t0 = SystemTime::now();
    let ca = new_ca("corp", t0, Duration::from_secs(3600)).unwrap();
    let mut ns = Existing::new();
    ns.insert("corp-ca".into(), user_secret(&[("tls.crt", &ca.cert_pem), ("tls.key", &ca.key_pem)]));
    let first = plan(&o, &ns, t0, LIFE, Routers::RolledOut).unwrap();
    apply(&mut ns, &first);
    let leaf = "mesh-default-credentials";
    assert!(crate::keys::signed_by(&get(&ns, leaf, "tls.crt"), &ca.cert_pem));
    // cert-manager's rotationPolicy: Always: a new key, the same subject.
    let subject = CertInfo::parse(&ca.cert_pem).unwrap().subject_cn;
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, subject.clone());
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    let rekeyed = qdr_certs::pki::der_to_pem(params.self_signed(&key).unwrap().der());
    ns.insert("corp-ca".into(), user_secret(&[("tls.crt", &rekeyed), ("tls.key", &key.serialize_pem())]));
    let p = plan(&o, &ns, t0 + Duration::from_secs(1), LIFE, Routers::RolledOut).unwrap();
    assert!(
        p.changes.iter().any(|c| matches!(c, CredentialChange::Renewed { why: "signer's key changed", .. })),
        "{:?}",
        p.changes
    );
    apply(&mut ns, &p);
    assert_eq!(CertInfo::parse(&get(&ns, leaf, "tls.crt")).unwrap().issuer_cn, subject);
    verify_leaf(&get(&ns, leaf, "tls.crt"), &rekeyed, "mesh.ns.svc", t0 + Duration::from_secs(1)).unwrap();
}

#[test]
fn the_overlap_must_fit_in_the_last_third_of_the_ca_lifetime() {
    let d = Lifetimes::default();
    assert_eq!(d.overlap, Duration::from_secs(5 * 365 * 24 * 3600 / 10));
    assert_eq!(d.check(), Ok(()));
    let too_long =
        Lifetimes { overlap: Duration::from_secs(60), ..Lifetimes::new(Duration::from_secs(300), LIFE.cert) };
    let e = too_long.check().unwrap_err();
    assert!(e.contains("--router-ca-overlap=1m is too long") && e.contains("less than 50s"), "{e}");
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
    let p = plan(&o, &ns, t0 + Duration::from_secs(3600), LIFE, Routers::RolledOut).unwrap();
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
    let refs = references(&o, &Default::default());
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
    let key = crate::hash_key::HashKey::from_bytes(&[7; 32]).unwrap();
    let before = fingerprint(&key, &refs, &ns);
    ns.insert("client-ca".into(), user_secret(&[("tls.crt", "ca")]).data.unwrap());
    assert_ne!(before, fingerprint(&key, &refs, &ns));
    // Keyed: the same content under another key gives another value, so the annotation
    // cannot be matched against guesses without the key.
    let other = crate::hash_key::HashKey::from_bytes(&[8; 32]).unwrap();
    assert_ne!(fingerprint(&key, &refs, &ns), fingerprint(&other, &refs, &ns));
    let unkeyed = {
        use sha2::Digest;
        sha2::Sha256::digest(b"").iter().map(|b| format!("{b:02x}")).collect::<String>()
    };
    assert_eq!(fingerprint(&key, &refs, &ns).len(), unkeyed.len(), "still 256 bits, hex");
    // The issuer is read by the operator, not mounted: it is not in the fingerprint.
    let with_issuer = {
        let mut n = ns.clone();
        n.insert("corp-ca".into(), user_secret(&[("tls.crt", "a"), ("tls.key", "b")]).data.unwrap());
        n
    };
    assert_eq!(fingerprint(&key, &refs, &ns), fingerprint(&key, &refs, &with_issuer));
}

/// Whether OpenSSL (what qdrouterd verifies peers with, through proton) verifies `served`
/// (the leaf, then the chain the router sends) against the CAs of `trust` at `at`.
fn openssl_verifies(served: &str, trust: &str, at: SystemTime) -> Result<(), String> {
    use openssl::stack::Stack;
    use openssl::x509::store::X509StoreBuilder;
    use openssl::x509::verify::X509VerifyParam;
    use openssl::x509::{X509, X509StoreContext};
    let mut certs = X509::stack_from_pem(served.as_bytes()).map_err(|e| e.to_string())?;
    let leaf = certs.remove(0);
    let mut chain = Stack::new().unwrap();
    for c in certs {
        chain.push(c).unwrap();
    }
    let mut store = X509StoreBuilder::new().unwrap();
    for c in X509::stack_from_pem(trust.as_bytes()).unwrap() {
        store.add_cert(c).unwrap();
    }
    let mut param = X509VerifyParam::new().unwrap();
    param.set_time(at.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() as _);
    store.set_param(&param).unwrap();
    let store = store.build();
    let mut ctx = X509StoreContext::new().unwrap();
    ctx.init(&store, &leaf, &chain, |c| {
        let ok = c.verify_cert()?;
        Ok(if ok { Ok(()) } else { Err(c.error().to_string()) })
    })
    .unwrap()
}

/// The inter-router listener's profile offered to other sites (an AccessGrant exists).
fn offered(o: &ValidatedInterconnect) -> ValidatedInterconnect {
    o.clone().with_site_trust(vec![("inter-router".into(), vec![])])
}

#[test]
fn a_site_that_trusts_its_first_token_verifies_the_routers_through_a_ca_rotation() {
    const LIFE: Lifetimes = Lifetimes {
        ca: Duration::from_secs(300),
        cert: Duration::from_secs(600),
        overlap: Duration::from_secs(20),
    };
    let o = offered(&owner(json!({})));
    let t0 = SystemTime::now();
    let mut ns = Existing::new();
    let first = plan(&o, &ns, t0, LIFE, Routers::RolledOut).unwrap();
    apply(&mut ns, &first);
    // The offered CA has a root and its certificate cross-signed by it; the leaf it signs is
    // served with that certificate; the Interconnect's own CA (not offered) has neither.
    let root = get(&ns, CA, "root.crt");
    assert_eq!(qdr_certs::pki::split_bundle(&get(&ns, LEAF, "tls.crt")).len(), 2);
    assert!(get(&ns, LEAF, "tls.crt").ends_with(&get(&ns, CA, "cross.crt")));
    assert!(!ns["mesh-ca"].data.as_ref().unwrap().contains_key("root.crt"));
    assert_eq!(qdr_certs::pki::split_bundle(&get(&ns, "mesh-default-credentials", "tls.crt")).len(), 1);
    // What a token issued now carries: the bundle, then the root.
    let token = format!("{}{root}", get(&ns, CA, "ca.crt"));
    let first_ca = get(&ns, CA, "tls.crt");
    openssl_verifies(&get(&ns, LEAF, "tls.crt"), &token, t0).unwrap();

    let from = CertInfo::parse(&first_ca).unwrap().point(2.0 / 3.0) + Duration::from_secs(1);
    let (steps, now) = run(&o, &mut ns, from, LIFE, Duration::from_secs(1), 120);
    assert!(steps.iter().any(|(_, s)| s == "retire mesh-inter-router-ca"), "{steps:?}");
    assert_ne!(get(&ns, CA, "tls.crt"), first_ca);
    assert_eq!(get(&ns, CA, "root.crt"), root, "the root stays");
    // The site still verifies the routers with its first token, by OpenSSL and WebPKI...
    let served = get(&ns, LEAF, "tls.crt");
    assert!(served.ends_with(&get(&ns, CA, "cross.crt")));
    openssl_verifies(&served, &token, now).unwrap();
    verify_leaf(&served, &token, "mesh.ns.svc", now).unwrap();
    // ...which it would not without the cross-signed certificate.
    let leaf_alone = qdr_certs::pki::split_bundle(&served).remove(0);
    let refused = openssl_verifies(&leaf_alone, &token, now).unwrap_err();
    assert!(refused.contains("local issuer"), "{refused}");
    // The routers themselves trust the CA directly, chain or no chain.
    openssl_verifies(&served, &get(&ns, LEAF, "ca.crt"), now).unwrap();
}

#[test]
fn a_ca_offered_to_sites_gets_its_root_in_the_pass_that_offers_it_and_keeps_it() {
    let o = owner(json!({}));
    let t0 = SystemTime::now();
    let mut ns = Existing::new();
    let first = plan(&o, &ns, t0, LIFE, Routers::RolledOut).unwrap();
    apply(&mut ns, &first);
    // Stage a rotation first: the root's write keeps the step's time.
    let at = CertInfo::parse(&get(&ns, CA, "tls.crt")).unwrap().point(2.0 / 3.0);
    let staged = plan(&o, &ns, at, LIFE, Routers::RolledOut).unwrap();
    apply(&mut ns, &staged);
    let (leaf, key) = (get(&ns, LEAF, "tls.crt"), get(&ns, LEAF, "tls.key"));
    let staged_at = ns[CA].metadata.annotations.as_ref().unwrap()[STEP_AT].clone();
    // The first grant: the CA gets its root and cross-signed certificate, and the leaf its
    // chain (the same key and certificate: one write, in the pass that rolls the routers
    // onto the sites' trust anyway).
    let now = at + Duration::from_secs(1);
    let p = plan(&offered(&o), &ns, now, LIFE, Routers::RolledOut).unwrap();
    let written: Vec<&str> = p.update.iter().filter_map(|s| s.metadata.name.as_deref()).collect();
    assert_eq!(written, [CA, LEAF]);
    assert!(p.changes.iter().all(|c| step(c).is_none()), "{:?}", p.changes);
    apply(&mut ns, &p);
    assert_eq!(ns[CA].metadata.annotations.as_ref().unwrap()[STEP_AT], staged_at);
    assert!(get(&ns, CA, "next.crt").contains("BEGIN CERTIFICATE"), "still staged");
    assert!(get(&ns, LEAF, "tls.crt").starts_with(&leaf));
    assert_eq!(get(&ns, LEAF, "tls.key"), key);
    // Nothing more while nothing changes, and the root stays when no grant is left.
    for o in [offered(&o), o.clone()] {
        let quiet = plan(&o, &ns, now, LIFE, Routers::RolledOut).unwrap();
        assert!(quiet.update.is_empty() && quiet.create.is_empty(), "{quiet:?}");
    }
    // A cross-signed certificate of another CA is made again.
    let other = new_ca("x", now, LIFE.ca).unwrap();
    let root =
        qdr_certs::pki::CertKey { cert_pem: get(&ns, CA, "root.crt"), key_pem: get(&ns, CA, "root.key") };
    let wrong = qdr_certs::pki::cross_sign(&other, &root).unwrap();
    let mut s = ns[CA].clone();
    s.data.as_mut().unwrap().insert("cross.crt".into(), ByteString(wrong.clone().into_bytes()));
    ns.insert(CA.into(), s);
    let mended = plan(&o, &ns, now, LIFE, Routers::RolledOut).unwrap();
    apply(&mut ns, &mended);
    assert_ne!(get(&ns, CA, "cross.crt"), wrong);
    assert!(crate::keys::signed_by(&get(&ns, CA, "cross.crt"), &root.cert_pem));
}
