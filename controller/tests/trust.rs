//! Credentials that others touch, on a real control plane with one shared controller (default
//! lifetimes, `--router-ca-overlap` of [`OVERLAP`]):
//!
//! * a generated CA deleted: the CA it had stays trusted while a replacement is staged,
//!   promoted and the old one retired, each pair of consecutive states verifying each other;
//! * a generated users Secret deleted: a Warning says the passwords changed;
//! * a user's issuer re-keyed under the same subject: the leaves are re-issued by the new key;
//! * a generated Secret's name taken by another Interconnect's generated Secret: a conflict;
//! * user certificates judged: expired, not a certificate, a key of another certificate, a
//!   missing key.

mod common;

use std::time::{Duration, Instant, SystemTime};

use common::{condition_with_reason, create_interconnect, events, eventually};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, PostParams};
use qdr_certs::pki::{CertKey, new_ca, new_leaf, split_bundle, verify_leaf};
use qdr_controller::keys::signed_by;
use serde_json::json;

static CONTROLLER: common::SharedController = common::SharedController::new();

/// Least time between a CA's rotation steps.
const OVERLAP: Duration = Duration::from_secs(2);

async fn start() -> &'static qdr_tests::ControlPlane {
    let overlap = format!("--router-ca-overlap={}s", OVERLAP.as_secs());
    CONTROLLER.start_with(1, "trust-system", "trust-0", &[overlap]).await
}

use common::secret_text as text;

fn tls_secret(name: &str, entries: &[(&str, &str)]) -> Secret {
    Secret {
        metadata: kube::api::ObjectMeta { name: Some(name.into()), ..Default::default() },
        data: Some(entries.iter().map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec()))).collect()),
        ..Default::default()
    }
}

async fn secret(api: &Api<Secret>, name: &str) -> Secret {
    eventually(&format!("Secret {name}"), Duration::from_secs(30), || async {
        api.get_opt(name).await.ok().flatten()
    })
    .await
}

/// The notes of the Events with `reason` in the namespace.
async fn notes(ns: &qdr_tests::TestNamespace, reason: &str) -> Vec<String> {
    let api: Api<k8s_openapi::api::events::v1::Event> = ns.api();
    let items = api.list(&Default::default()).await.unwrap().items;
    items.into_iter().filter(|e| e.reason.as_deref() == Some(reason)).filter_map(|e| e.note).collect()
}

#[tokio::test]
async fn a_deleted_generated_ca_is_replaced_without_a_trust_gap() {
    let cp = start().await;
    let ns = cp.namespace("lost-ca").await;
    create_interconnect(&ns, "mesh", json!({"deploymentPlan": {"size": 1}})).await;
    let secrets: Api<Secret> = ns.api();
    let (leaf, ca) = ("mesh-inter-router-credentials", "mesh-inter-router-ca");
    let first = secret(&secrets, leaf).await;
    let old_ca = text(&secret(&secrets, ca).await, "tls.crt");
    condition_with_reason(&ns, "mesh", "Ready", "RoutersReady").await;

    let start = Instant::now();
    secrets.delete(ca, &DeleteParams::default()).await.unwrap();
    // Follow the leaf (what a router serves and trusts) until the CA is one certificate
    // again and not the old one; each state must accept its neighbours' certificates.
    let host = format!("mesh.{}.svc", ns.name);
    let mut states = vec![(text(&first, "tls.crt"), text(&first, "ca.crt"))];
    let mut timeline = Vec::new();
    let deadline = start + Duration::from_secs(60);
    loop {
        let (l, c) = (secrets.get_opt(leaf).await.unwrap(), secrets.get_opt(ca).await.unwrap());
        if let (Some(l), Some(c)) = (l, c) {
            let state = (text(&l, "tls.crt"), text(&l, "ca.crt"));
            if states.last() != Some(&state) {
                let trusted = split_bundle(&state.1).len();
                timeline.push(format!("{:6.2}s  leaf: {trusted} CAs trusted", start.elapsed().as_secs_f64()));
                states.push(state);
            }
            let bundle = split_bundle(&text(&c, "ca.crt"));
            if bundle.len() == 1 && text(&c, "tls.crt") != old_ca && text(&l, "ca.crt") == text(&c, "ca.crt")
            {
                break;
            }
        }
        assert!(Instant::now() < deadline, "the lost CA was not replaced within 60 s: {timeline:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for line in &timeline {
        eprintln!("{line}");
    }
    assert!(
        states.iter().any(|(_, trust)| split_bundle(trust).len() == 2),
        "the old CA was kept beside the new one"
    );
    for pair in states.windows(2) {
        let ((leaf_a, trust_a), (leaf_b, trust_b)) = (&pair[0], &pair[1]);
        verify_leaf(leaf_a, trust_b, &host, SystemTime::now()).expect("a new router trusts an old peer");
        verify_leaf(leaf_b, trust_a, &host, SystemTime::now()).expect("an old router trusts a new peer");
    }
    let lost = eventually("the retirement's Event", Duration::from_secs(30), || async {
        let notes = notes(&ns, "CARotation").await;
        notes.iter().any(|n| n.starts_with("CA rotation 3/3")).then_some(notes)
    })
    .await;
    assert!(
        lost.iter()
            .any(|n| n.contains(&format!("the CA in Secret {ca} was lost (Secret {ca}: it does not exist)"))),
        "{lost:?}"
    );
}

#[tokio::test]
async fn a_deleted_users_secret_warns_that_the_passwords_changed() {
    let cp = start().await;
    let ns = cp.namespace("users").await;
    create_interconnect(&ns, "mesh", json!({"deploymentPlan": {"size": 1}})).await;
    let secrets: Api<Secret> = ns.api();
    let before = text(&secret(&secrets, "mesh-users").await, "guest");
    condition_with_reason(&ns, "mesh", "Ready", "RoutersReady").await;
    secrets.delete("mesh-users", &DeleteParams::default()).await.unwrap();
    let note = eventually("a PasswordsChanged Warning", Duration::from_secs(30), || async {
        notes(&ns, "PasswordsChanged").await.into_iter().next()
    })
    .await;
    assert!(
        note.starts_with("Secret mesh-users (spec.users) was missing, so new passwords were generated"),
        "{note}"
    );
    let after = text(&secret(&secrets, "mesh-users").await, "guest");
    assert_ne!(before, after);
}

/// A ValidatingAdmissionPolicy (and its binding) named `name` that refuses `operations` on
/// `resources` of `group` in namespace `ns`, in effect once this returns (`probe` is refused);
/// removed by [`unblock`].
async fn block(
    cp: &qdr_tests::ControlPlane,
    name: &str,
    ns: &str,
    (group, resource, operations): (&str, &str, &[&str]),
    probe: impl AsyncFn() -> bool,
) {
    let objects = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name},
         "spec": {"failurePolicy": "Fail",
                  "matchConstraints": {"resourceRules": [{"apiGroups": [group], "apiVersions": ["*"],
                                                          "operations": operations, "resources": [resource]}]},
                  "validations": [{"expression": "false", "message": format!("{name}: refused by the test")}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
         "spec": {"policyName": name, "validationActions": ["Deny"],
                  "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}}}]});
    let out = common::kubectl_stdin(cp, &["apply", "-f", "-"], &objects.to_string());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    eventually(&format!("{name} in effect"), Duration::from_secs(30), || async {
        probe().await.then_some(())
    })
    .await;
}

fn unblock(cp: &qdr_tests::ControlPlane, name: &str) {
    let out = cp
        .kubectl()
        .args([
            "delete",
            "validatingadmissionpolicybinding,validatingadmissionpolicy",
            name,
            "--ignore-not-found",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A Secret change is announced even when a later write of the same pass fails: the users
/// Secret is made again with new passwords while the routers' Deployment cannot be written
/// (an admission policy refuses it), and the `PasswordsChanged` Warning is published anyway;
/// the next pass, which finds the Secret already made, would never say it.
#[tokio::test]
async fn a_secret_change_is_announced_when_a_later_write_fails() {
    use k8s_openapi::api::apps::v1::Deployment;
    let cp = start().await;
    let ns = cp.namespace("notice").await;
    create_interconnect(&ns, "mesh", json!({"deploymentPlan": {"size": 1}})).await;
    let secrets: Api<Secret> = ns.api();
    secret(&secrets, "mesh-users").await;
    condition_with_reason(&ns, "mesh", "Ready", "RoutersReady").await;
    let deployments: Api<Deployment> = ns.api();
    let policy = format!("{}-no-deployments", ns.name);
    let probe = || async {
        let patch = json!({"metadata": {"annotations": {"probe": "x"}}});
        let params = kube::api::PatchParams { dry_run: true, ..Default::default() };
        let refused = deployments.patch("mesh", &params, &kube::api::Patch::Merge(patch)).await;
        refused.is_err_and(|e| e.to_string().contains("refused by the test"))
    };
    block(cp, &policy, &ns.name, ("apps", "deployments", &["UPDATE"]), probe).await;
    secrets.delete("mesh-users", &DeleteParams::default()).await.unwrap();
    let failed = condition_with_reason(&ns, "mesh", "Degraded", "ReconcileFailed").await;
    assert!(failed["message"].as_str().unwrap().contains("refused by the test"), "{failed}");
    let note = eventually("a PasswordsChanged Warning", Duration::from_secs(30), || async {
        notes(&ns, "PasswordsChanged").await.into_iter().next()
    })
    .await;
    assert!(note.starts_with("Secret mesh-users (spec.users) was missing"), "{note}");
    unblock(cp, &policy);
    eventually("Degraded cleared", Duration::from_secs(60), || async {
        let c = condition_with_reason(&ns, "mesh", "Degraded", "ReconcileSucceeded").await;
        (c["status"] == "False").then_some(())
    })
    .await;
    assert_eq!(notes(&ns, "PasswordsChanged").await.len(), 1, "announced once");
}

/// A change made to the routers is announced even when a later write of the same pass fails:
/// the routers' Deployment is scaled while their Service cannot be written (an admission
/// policy refuses it, as a timed-out request would fail it), and `Scaled` is published
/// anyway; the next pass, which finds the Deployment already scaled, would never say it.
#[tokio::test]
async fn a_scaling_is_announced_when_a_later_write_fails() {
    use k8s_openapi::api::core::v1::Service;
    use kube::api::{Patch, PatchParams};
    let cp = start().await;
    let ns = cp.namespace("scaled").await;
    create_interconnect(&ns, "mesh", json!({"deploymentPlan": {"size": 1}})).await;
    condition_with_reason(&ns, "mesh", "Ready", "RoutersReady").await;
    let services: Api<Service> = ns.api();
    let policy = format!("{}-no-services", ns.name);
    let probe = || async {
        let patch = json!({"metadata": {"annotations": {"probe": "x"}}});
        let params = PatchParams { dry_run: true, ..Default::default() };
        let refused = services.patch("mesh", &params, &Patch::Merge(patch)).await;
        refused.is_err_and(|e| e.to_string().contains("refused by the test"))
    };
    block(cp, &policy, &ns.name, ("", "services", &["UPDATE"]), probe).await;
    let ics = common::interconnects(&ns.client, &ns.name);
    let size = json!({"spec": {"deploymentPlan": {"size": 2}}});
    ics.patch("mesh", &PatchParams::default(), &Patch::Merge(size)).await.unwrap();
    let failed = condition_with_reason(&ns, "mesh", "Degraded", "ReconcileFailed").await;
    assert!(failed["message"].as_str().unwrap().contains("refused by the test"), "{failed}");
    let note = eventually("a Scaled Event", Duration::from_secs(30), || async {
        notes(&ns, "Scaled").await.into_iter().next()
    })
    .await;
    assert_eq!(note, "routers scaled from 1 to 2");
    unblock(cp, &policy);
    eventually("Degraded cleared", Duration::from_secs(60), || async {
        let c = condition_with_reason(&ns, "mesh", "Degraded", "ReconcileSucceeded").await;
        (c["status"] == "False").then_some(())
    })
    .await;
    assert_eq!(events(&ns, "Scaled").await, 1, "announced once");
}

/// The Event recorder loses no notice: a create the API server refuses is retried (here
/// until an admission policy that refuses Events is removed); an Event deleted under its
/// series is created again instead of patched; a note of more than 1,024 bytes is cut on a
/// character boundary to fit the API's limit.
#[tokio::test]
async fn the_event_recorder_retries_and_never_patches_a_missing_event() {
    use k8s_openapi::api::events::v1::Event as K8sEvent;
    use kube::runtime::events::{Event, EventType};
    let cp = start().await;
    let ns = cp.namespace("recorder").await;
    let client = cp.client().await.unwrap();
    let recorder = qdr_controller::recorder::Recorder::new(client, "qdr-operator", "test");
    let regarding = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        name: Some("subject".into()),
        namespace: Some(ns.name.clone()),
        uid: Some(format!("{}-subject", ns.name)),
        ..Default::default()
    };
    let event = |note: &str| Event {
        type_: EventType::Warning,
        reason: "Notice".into(),
        note: Some(note.into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    let events: Api<K8sEvent> = ns.api();
    let with_note = |note: String| {
        let events = events.clone();
        async move {
            let list = events.list(&Default::default()).await.ok()?.items;
            let found: Vec<K8sEvent> =
                list.into_iter().filter(|e| e.note.as_deref() == Some(note.as_str())).collect();
            (!found.is_empty()).then_some(found)
        }
    };

    // Refused, then let through: the retry publishes it.
    let policy = format!("{}-no-events", ns.name);
    let probe = || async {
        let e: K8sEvent = serde_json::from_value(json!({
            "metadata": {"name": "probe"}, "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "test",
            "reportingInstance": "test", "action": "Probe", "reason": "Probe", "type": "Normal",
            "regarding": {"kind": "ConfigMap", "name": "subject", "namespace": ns.name}}))
        .unwrap();
        let params = kube::api::PostParams { dry_run: true, ..Default::default() };
        events.create(&params, &e).await.is_err_and(|e| e.to_string().contains("refused by the test"))
    };
    block(cp, &policy, &ns.name, ("events.k8s.io", "events", &["CREATE"]), probe).await;
    let refused = recorder.publish(&event("CA rotation 1/3 (test)"), &regarding).await;
    assert!(refused.is_err(), "the policy let the Event through");
    unblock(cp, &policy);
    let total: Duration = qdr_controller::recorder::RETRY_SPAN;
    let published = eventually("the refused Event, retried", total + Duration::from_secs(5), || {
        with_note("CA rotation 1/3 (test)".into())
    })
    .await;
    assert_eq!(published.len(), 1);

    // Its series' Event deleted: the same note again is a new Event, not a patch of nothing.
    let name = published[0].metadata.name.clone().unwrap();
    events.delete(&name, &DeleteParams::default()).await.unwrap();
    recorder.publish(&event("CA rotation 1/3 (test)"), &regarding).await.unwrap();
    let again = eventually("the note as a new Event", Duration::from_secs(10), || {
        with_note("CA rotation 1/3 (test)".into())
    })
    .await;
    assert_ne!(again[0].metadata.name.as_deref(), Some(name.as_str()));

    // A long note of multi-byte characters fits.
    let long = "€".repeat(1000);
    recorder.publish(&event(&long), &regarding).await.expect("a long note is accepted");
    let stored = eventually("the long note", Duration::from_secs(10), || {
        let fitted = qdr_controller::recorder::fitted_note(&long);
        with_note(fitted)
    })
    .await;
    let note = stored[0].note.clone().unwrap();
    assert!(note.len() <= 1024 && note.ends_with('…'), "{} bytes", note.len());
}

#[tokio::test]
async fn leaves_follow_an_issuer_rekeyed_under_the_same_subject() {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let cp = start().await;
    let ns = cp.namespace("rekeyed").await;
    let secrets: Api<Secret> = ns.api();
    let day = Duration::from_secs(24 * 3600);
    let first = new_ca("corp", SystemTime::now(), 30 * day).unwrap();
    let ca_secret =
        |ca: &CertKey| tls_secret("corp-ca", &[("tls.crt", &ca.cert_pem), ("tls.key", &ca.key_pem)]);
    secrets.create(&PostParams::default(), &ca_secret(&first)).await.unwrap();
    create_interconnect(&ns, "mesh", json!({"deploymentPlan": {"size": 1, "issuer": "corp-ca"}})).await;
    let leaf = "mesh-default-credentials";
    eventually("a leaf signed by the issuer", Duration::from_secs(30), || async {
        let l = secrets.get_opt(leaf).await.ok()??;
        signed_by(&text(&l, "tls.crt"), &first.cert_pem).then_some(())
    })
    .await;
    // cert-manager's rotationPolicy: Always: a new key under the very same subject.
    let subject = qdr_certs::pki::CertInfo::parse(&first.cert_pem).unwrap().subject_cn;
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, subject);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    let rekeyed = CertKey {
        cert_pem: qdr_certs::pki::der_to_pem(params.self_signed(&key).unwrap().der()),
        key_pem: key.serialize_pem(),
    };
    let mut s = secrets.get("corp-ca").await.unwrap();
    s.data = ca_secret(&rekeyed).data;
    secrets.replace("corp-ca", &PostParams::default(), &s).await.unwrap();
    eventually("the leaf re-issued by the new key", Duration::from_secs(30), || async {
        let l = secrets.get_opt(leaf).await.ok()??;
        signed_by(&text(&l, "tls.crt"), &rekeyed.cert_pem).then_some(())
    })
    .await;
    // The Event follows the pass's status write.
    eventually("a CertificateRenewed Event naming the re-keyed signer", Duration::from_secs(30), || async {
        let renewed = notes(&ns, "CertificateRenewed").await;
        renewed.iter().any(|n| n.contains(&format!("Secret {leaf} (signer's key changed"))).then_some(())
    })
    .await;
}

#[tokio::test]
async fn another_interconnects_generated_secret_is_a_conflict() {
    let cp = start().await;
    let ns = cp.namespace("collide").await;
    // Interconnect `a` with profile `b` generates the CA `a-b-ca`; so would `a-b`.
    create_interconnect(
        &ns,
        "a",
        json!({"deploymentPlan": {"size": 1}, "sslProfiles": [{"name": "b", "mutualAuth": true}]}),
    )
    .await;
    let secrets: Api<Secret> = ns.api();
    let ca = text(&secret(&secrets, "a-b-ca").await, "tls.crt");
    create_interconnect(&ns, "a-b", json!({"deploymentPlan": {"size": 1}})).await;
    let c = condition_with_reason(&ns, "a-b", "Degraded", "ConflictingObject").await;
    let message = c["message"].as_str().unwrap();
    assert!(message.contains("Secret a-b-ca exists and is controlled by Interconnect a"), "{message}");
    assert_eq!(text(&secrets.get("a-b-ca").await.unwrap(), "tls.crt"), ca, "never written by a-b");
    eventually("a ConflictingObject Warning", Duration::from_secs(30), || async {
        (events(&ns, "ConflictingObject").await >= 1).then_some(())
    })
    .await;
}

#[tokio::test]
async fn user_certificates_are_judged() {
    let cp = start().await;
    let now = SystemTime::now();
    let day = Duration::from_secs(24 * 3600);
    let ca = new_ca("user", now - 3 * day, 4 * day).unwrap();
    let expired = new_leaf(&ca, &["mesh".into()], now - 2 * day, day).unwrap();
    let valid = new_leaf(&ca, &["mesh".into()], now, day).unwrap();
    let spec = json!({"deploymentPlan": {"size": 1},
                      "sslProfiles": [{"name": "tls", "credentials": "my-tls"}],
                      "listeners": [{"port": 5671, "sslProfile": "tls"}]});
    // (case, Secret data, Ready reason, what the message says)
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a str, &'a str);
    let cases: [Case<'_>; 4] = [
        (
            "expired",
            vec![("tls.crt", &expired.cert_pem), ("tls.key", &expired.key_pem)],
            "CertificateExpired",
            "expired at",
        ),
        (
            "garbage",
            vec![("tls.crt", "not a certificate"), ("tls.key", &valid.key_pem)],
            "InvalidSecret",
            "tls.crt is not a PEM certificate",
        ),
        (
            "other-key",
            vec![("tls.crt", &valid.cert_pem), ("tls.key", &expired.key_pem)],
            "InvalidSecret",
            "does not belong to the certificate",
        ),
        (
            "no-key",
            vec![("tls.crt", &valid.cert_pem)],
            "MissingSecret",
            "Secret my-tls (spec.sslProfiles[0].credentials) has no tls.key",
        ),
    ];
    for (name, data, reason, says) in cases {
        let ns = cp.namespace(&format!("judged-{name}")).await;
        let secrets: Api<Secret> = ns.api();
        secrets.create(&PostParams::default(), &tls_secret("my-tls", &data)).await.unwrap();
        create_interconnect(&ns, "mesh", spec.clone()).await;
        let c = condition_with_reason(&ns, "mesh", "Ready", reason).await;
        let message = c["message"].as_str().unwrap();
        assert_eq!(c["status"], "False", "{name}");
        assert!(message.contains(says), "{name}: {message}");
        // The Warning follows the status write.
        eventually(&format!("{name}: a Warning {reason}"), Duration::from_secs(30), || async {
            (events(&ns, reason).await >= 1).then_some(())
        })
        .await;
    }
}

/// Keys that OpenSSL, and so the router, reads but `ring` refuses are accepted: a user's
/// certificate with an RSA 1024, RSA-PSS, ECDSA P-521, Ed448 or DSA key is mounted and the
/// routers become Ready (not `InvalidSecret`, which would hold them).
#[tokio::test]
async fn keys_the_router_reads_are_accepted() {
    let cp = start().await;
    let ns = cp.namespace("key-types").await;
    let secrets: Api<Secret> = ns.api();
    let wanted = ["RSA 1024", "RSA-PSS 2048", "ECDSA P-521", "Ed448", "DSA 2048"];
    let kinds: Vec<_> =
        qdr_tests::keys::kinds().into_iter().filter(|k| wanted.contains(&k.name.as_str())).collect();
    assert_eq!(kinds.len(), wanted.len());
    let (mut profiles, mut listeners) = (Vec::new(), Vec::new());
    for (i, k) in kinds.iter().enumerate() {
        let cert = qdr_tests::keys::certificate(&k.key, None, "mesh");
        let key = String::from_utf8(k.key.private_key_to_pem_pkcs8().unwrap()).unwrap();
        let name = format!("key-{i}");
        secrets
            .create(&PostParams::default(), &tls_secret(&name, &[("tls.crt", &cert), ("tls.key", &key)]))
            .await
            .unwrap();
        profiles.push(json!({"name": name, "credentials": name}));
        listeners.push(json!({"port": 5671 + i, "sslProfile": name}));
    }
    create_interconnect(
        &ns,
        "mesh",
        json!({"deploymentPlan": {"size": 1}, "sslProfiles": profiles, "listeners": listeners}),
    )
    .await;
    let ready = condition_with_reason(&ns, "mesh", "Ready", "RoutersReady").await;
    assert_eq!(ready["status"], "True", "{ready}");
    assert_eq!(events(&ns, "InvalidSecret").await, 0, "a key the router reads was judged invalid");
}

/// A generated CA deleted together with every certificate it signed, while routers run: no
/// copy of the old CA is left to keep trusted, so it is replaced at once, and the Warning
/// `CAReplaced` says what breaks until the routers have rolled (old and new routers refuse
/// each other) instead of the replacement passing silently as a new CA.
#[tokio::test]
async fn a_ca_lost_with_its_leaves_is_announced_with_what_breaks() {
    let cp = start().await;
    let ns = cp.namespace("lost-all").await;
    create_interconnect(&ns, "mesh", json!({"deploymentPlan": {"size": 1}})).await;
    let secrets: Api<Secret> = ns.api();
    let (leaf, ca) = ("mesh-inter-router-credentials", "mesh-inter-router-ca");
    let old_ca = text(&secret(&secrets, ca).await, "tls.crt");
    secret(&secrets, leaf).await;
    condition_with_reason(&ns, "mesh", "Ready", "RoutersReady").await;
    // Both gone at once as the controller sees them: it may write no Secret while they are
    // deleted one after the other (it would otherwise recover the CA from the leaf).
    let policy = format!("{}-no-secret-writes", ns.name);
    let probe = || async {
        let s = tls_secret("probe", &[("a", "b")]);
        let params = PostParams { dry_run: true, ..Default::default() };
        secrets.create(&params, &s).await.is_err_and(|e| e.to_string().contains("refused by the test"))
    };
    block(cp, &policy, &ns.name, ("", "secrets", &["CREATE", "UPDATE"]), probe).await;
    for name in [ca, leaf] {
        secrets.delete(name, &DeleteParams::default()).await.unwrap();
    }
    unblock(cp, &policy);
    let note = eventually("a CAReplaced Warning", Duration::from_secs(60), || async {
        notes(&ns, "CAReplaced").await.into_iter().next()
    })
    .await;
    assert!(note.contains(&format!("the CA in Secret {ca} was replaced at once")), "{note}");
    assert!(note.contains("links between an old and a new router are refused"), "{note}");
    let new_ca = text(&secret(&secrets, ca).await, "tls.crt");
    assert_ne!(new_ca, old_ca);
    let new_leaf = secret(&secrets, leaf).await;
    assert!(signed_by(&text(&new_leaf, "tls.crt"), &new_ca));
}
