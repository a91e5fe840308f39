//! The build stage in process, on whole [`Children`], for every example (the Go operator's
//! and `deploy/examples/`):
//!
//! * **golden files**: every child as JSON equals `tests/data/golden/<example>.json`
//!   (written by the builders before they were typed, so the typed builders are proven to
//!   build the same objects). `QDR_BLESS=1 cargo test -p qdr-controller --lib build::tests`
//!   rewrites them after an intended change; review the diff.
//! * **invariants** that hold for any spec: labels and owner reference on every child, the
//!   config rendered once and carried by the pod template with its hash, every volume
//!   mounted and every mounted Secret either created or kept, one Service port per
//!   listener, pruning keeps what was built.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use qdr_certs::pki::{new_ca, new_leaf};

use super::{Built, Children, Report, WorkloadChange, build};
use crate::builders::Roll;
use crate::builders::{self, CONFIG_HASH, CREDENTIALS_HASH, Exposure, Settings, Workload};
use crate::credentials::{CredentialChange, GENERATED_LABEL};
use crate::reconcile::observe::{Observed, WorkloadState, named_secrets};
use crate::reconcile::types::{LIVE_TRIES, Ownership};
use crate::validated::ValidatedInterconnect;
use qdr_api::Interconnect;
use qdr_api::router_config::router_config;
use serde_json::{Value, json};

const UID: &str = "0f1e2d3c-aaaa-bbbb-cccc-000000000001";

fn examples() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    for dir in ["api/tests/data/go-operator", "deploy/examples"] {
        for e in std::fs::read_dir(root.join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "yaml") {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

/// The stored object of an example file: namespace `ns`, a fixed uid, generation 1.
fn stored(file: &Path) -> Interconnect {
    let raw: Value = serde_saphyr::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let mut ic: Interconnect = serde_json::from_value(raw).unwrap();
    ic.metadata.namespace = Some("ns".into());
    ic.metadata.uid = Some(UID.into());
    ic.metadata.generation = Some(1);
    ic
}

/// Every example that passes validation (the Go fixtures G and H put edgeConnectors on an
/// interior router and are never built), with its ValidatedInterconnect.
fn owners() -> Vec<(String, ValidatedInterconnect)> {
    let mut out = Vec::new();
    for f in examples() {
        let name = f.file_stem().unwrap().to_string_lossy().to_string();
        // With the operator's management listener, as every pass builds them.
        match ValidatedInterconnect::new(&stored(&f)) {
            Ok(o) => out.push((name, o.with_management().0)),
            Err(e) => assert!(name.starts_with("g-") || name.starts_with("h-"), "{name}: {e}"),
        }
    }
    assert!(out.len() >= 12, "examples found: {}", out.len());
    out
}

fn settings(routes: bool) -> Settings {
    Settings {
        hash_key: crate::hash_key::HashKey::from_bytes(&[7; 32]).unwrap(),
        seal_key: crate::hash_key::HashKey::from_bytes(&[9; 32]).unwrap(),
        default_image: "quay.io/interconnectedcloud/qdrouterd:1.19.0".into(),
        routes,
        lifetimes: crate::credentials::Lifetimes::default(),
        run_as_user: Some(builders::DEFAULT_RUN_AS_USER),
        observe_mesh: false,
        controller_pods: builders::ControllerPods::installed_in("qdr-operator"),
        router_requests: builders::default_requests(),
    }
}

/// An observation of an empty namespace, except that `present` Secrets exist (no data).
fn observed(o: &ValidatedInterconnect, present: &[String]) -> Observed {
    let secrets = named_secrets(o)
        .into_iter()
        .map(|n| {
            let secret = present.contains(&n).then(|| k8s_openapi::api::core::v1::Secret {
                data: Some(BTreeMap::new()),
                ..Default::default()
            });
            (n, secret)
        })
        .collect();
    Observed {
        now: SystemTime::now(),
        secrets,
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

/// The golden JSON of `children` (generated Secrets by metadata, type and keys only: key
/// material differs on every run).
fn golden_json(o: &ValidatedInterconnect, Built { children, report, .. }: &Built) -> Value {
    let credentials: Vec<Value> = children
        .secrets
        .create
        .iter()
        .map(|s| {
            let keys: Vec<&String> = s.data.iter().flat_map(|d| d.keys()).collect();
            // A seal covers fresh key material too: checked, then shown by its place.
            let mut metadata = s.metadata.clone();
            if let Some(seal) =
                metadata.annotations.as_mut().and_then(|a| a.get_mut(crate::credentials::seal::SEAL))
            {
                let key = &settings(false).seal_key;
                assert!(crate::credentials::seal::is_sealed(key, o.namespace(), o.uid(), s), "{seal}");
                *seal = "<seal of its content>".into();
            }
            json!({"metadata": metadata, "type": s.type_, "keys": keys})
        })
        .collect();
    let mut workload = match children.workload.built() {
        Workload::Deployment(d) => serde_json::to_value(d).unwrap(),
        Workload::DaemonSet(d) => serde_json::to_value(d).unwrap(),
    };
    // The credentials fingerprint covers fresh key material: the same on no two runs.
    let fp = &mut workload["spec"]["template"]["metadata"]["annotations"][CREDENTIALS_HASH];
    assert_eq!(fp.as_str(), Some(report.credentials.fingerprint.as_str()));
    *fp = json!("<credentials fingerprint>");
    let Exposure::Ingresses(ingresses) = &children.exposure else { panic!("built without Routes") };
    json!({
        "serviceAccount": children.service_account,
        "role": children.role,
        "roleBinding": children.role_binding,
        "routerConfigMap": children.router_config_map,
        "saslConfigMap": children.sasl_config_map,
        "credentials": credentials,
        "workload": workload,
        "disruptionBudget": children.disruption_budget,
        "service": children.service,
        "ingresses": ingresses,
        "routes": builders::routes(o),
        "configHash": report.config.hash,
    })
}

#[test]
fn every_example_builds_its_golden_children() {
    let bless = std::env::var_os("QDR_BLESS").is_some();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/golden");
    for (name, o) in owners() {
        // The users Secret exists, so only generated credentials are created (as in the files).
        let users: Vec<String> = o.users_secret().into_iter().collect();
        let children = build(&o, &settings(false), &observed(&o, &users)).unwrap();
        let got = golden_json(&o, &children);
        let golden = dir.join(format!("{name}.json"));
        if bless {
            std::fs::write(&golden, serde_json::to_string_pretty(&got).unwrap() + "\n").unwrap();
            continue;
        }
        let want: Value = serde_json::from_str(&std::fs::read_to_string(&golden).unwrap()).unwrap();
        if got != want {
            panic!(
                "{name}: the built children differ from {}. A change of a pod template rolls every router \
                 of every cluster when the operator is upgraded: if it is meant, bless the files \
                 (QDR_BLESS=1) and name it in CHANGELOG.md.\n--- got\n{}",
                golden.display(),
                serde_json::to_string_pretty(&got).unwrap()
            );
        }
    }
}

/// The routers' pod templates of every example as an operator upgrade applies them to the
/// workloads an earlier release made (no readiness gate: [`running_before_the_gate`]), as
/// one fingerprint (the first 12 hex digits of a SHA-256 over them, credentials fingerprint
/// left out): what decides whether an operator upgrade rolls the routers.
fn pod_templates_fingerprint() -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for (name, o) in owners() {
        let users: Vec<String> = o.users_secret().into_iter().collect();
        let mut seen = observed(&o, &users);
        let new = build(&o, &settings(false), &seen).unwrap();
        seen.workload = running_before_the_gate(&new);
        let children = build(&o, &settings(false), &seen).unwrap();
        let mut template = golden_json(&o, &children)["workload"]["spec"]["template"].clone();
        template["metadata"]["annotations"].as_object_mut().map(|a| a.remove(CREDENTIALS_HASH));
        h.update(name.as_bytes());
        h.update(serde_json::to_vec(&template).unwrap());
    }
    h.finalize().iter().take(6).map(|b| format!("{b:02x}")).collect()
}

/// An operator upgrade rolls no router unless it must: the examples' pod templates are
/// fingerprinted, and the newest release in CHANGELOG.md names the fingerprint it ships
/// (`Router pod templates: <fingerprint>`). A change of any template (a new field, a changed
/// default, a different configuration file) fails here until the changelog says so, and its
/// entry says that upgrading rolls the routers.
#[test]
fn the_changelog_names_the_pod_templates_of_its_newest_release() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../CHANGELOG.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let newest = text.split("\n## ").nth(1).expect("a release section in CHANGELOG.md");
    let line = newest.lines().find(|l| l.contains("Router pod templates:")).unwrap_or_default();
    let want = pod_templates_fingerprint();
    assert!(
        line.contains(&format!("`{want}`")),
        "the routers' pod templates changed (fingerprint {want}; the newest release in CHANGELOG.md says \
         {line:?}): upgrading the operator will roll every router of every cluster. If that is meant, say so \
         in the release's entry and set its line to `Router pod templates: `{want}``."
    );
}

fn env<'a>(w: &'a Workload, name: &str) -> Option<&'a str> {
    let c = &w.template()?.spec.as_ref()?.containers[0];
    c.env.as_ref()?.iter().find(|e| e.name == name)?.value.as_deref()
}

#[test]
fn every_child_of_every_example_is_labelled_owned_and_consistent() {
    for routes in [false, true] {
        for (name, o) in owners() {
            let Built { children, report, .. } = build(&o, &settings(routes), &observed(&o, &[])).unwrap();
            let Children {
                service_account,
                role,
                role_binding,
                router_config_map,
                sasl_config_map,
                secrets,
                workload,
                disruption_budget,
                network_policy,
                service,
                exposure,
                links_secret,
            } = &children;
            let Report { config: rendered, credentials, .. } = &report;
            let WorkloadChange::Apply(workload) = workload else { panic!("{name}: nothing is missing") };
            // Nothing is missing once the generated Secrets are created (users: generated).
            assert!(credentials.unmet.is_empty(), "{name}: {:?}", credentials.unmet);
            // Every object: in the namespace, labelled, controlled by the Interconnect.
            let mut metas = vec![
                serde_json::to_value(&service_account.metadata).unwrap(),
                serde_json::to_value(&service.metadata).unwrap(),
                serde_json::to_value(&router_config_map.metadata).unwrap(),
            ];
            metas.extend(role.iter().map(|r| serde_json::to_value(&r.metadata).unwrap()));
            metas.extend(role_binding.iter().map(|r| serde_json::to_value(&r.metadata).unwrap()));
            metas.extend(sasl_config_map.iter().map(|c| serde_json::to_value(&c.metadata).unwrap()));
            metas.extend(disruption_budget.iter().map(|p| serde_json::to_value(&p.metadata).unwrap()));
            assert!(network_policy.is_some(), "{name}: a NetworkPolicy by default");
            metas.extend(network_policy.iter().map(|p| serde_json::to_value(&p.metadata).unwrap()));
            metas.extend(links_secret.iter().map(|s| serde_json::to_value(&s.metadata).unwrap()));
            metas.extend(secrets.create.iter().map(|s| serde_json::to_value(&s.metadata).unwrap()));
            metas.push(match workload {
                Workload::Deployment(d) => serde_json::to_value(&d.metadata).unwrap(),
                Workload::DaemonSet(d) => serde_json::to_value(&d.metadata).unwrap(),
            });
            match exposure {
                Exposure::Ingresses(l) => {
                    assert!(!routes, "{name}");
                    metas.extend(l.iter().map(|i| serde_json::to_value(&i.metadata).unwrap()))
                }
                Exposure::Routes(l) => {
                    assert!(routes, "{name}");
                    metas.extend(l.iter().map(|r| serde_json::to_value(&r.metadata).unwrap()))
                }
            }
            for m in &metas {
                assert_eq!(m["namespace"], "ns", "{name}: {m}");
                assert_eq!(m["labels"]["interconnect_cr"], o.name(), "{name}: {m}");
                assert_eq!(m["labels"]["app.kubernetes.io/managed-by"], "qdr-operator", "{name}: {m}");
                let refs = m["ownerReferences"].as_array().unwrap();
                assert_eq!(refs.len(), 1, "{name}: {m}");
                assert_eq!(refs[0]["uid"], UID);
                assert_eq!(refs[0]["controller"], true);
            }
            // The config is rendered once: the ConfigMap carries it, the pod mounts it and
            // names the file, and the pod template carries its hash.
            assert_eq!(*rendered, o.rendered_config(), "{name}");
            assert_eq!(rendered.text, router_config(o.spec()).with_management_listener().render(), "{name}");
            // Named by the start-up hash, and mutable: live entities change in place, a
            // start-up change is a new ConfigMap (docs/live-configuration.md).
            assert!(rendered.live, "{name}: every example has the management listener");
            assert_eq!(router_config_map.immutable, None, "{name}");
            assert_ne!(rendered.startup_hash, rendered.hash, "{name}");
            assert_eq!(
                router_config_map.metadata.name.as_deref(),
                Some(format!("{}{}", o.router_config_prefix(), &rendered.startup_hash[..10]).as_str()),
                "{name}"
            );
            let data = router_config_map.data.as_ref().unwrap();
            assert_eq!(data.get("qdrouterd.json"), Some(&rendered.text), "{name}");
            assert_eq!(
                env(workload, "QDROUTERD_CONF"),
                Some("/etc/qpid-dispatch-config/qdrouterd.json"),
                "{name}"
            );
            assert_eq!(env(workload, "QDROUTERD_CONF_TYPE"), Some("json"), "{name}");
            assert_eq!(env(workload, "DOLLAR"), Some("$"), "{name}");
            let config_volume =
                workload.template().unwrap().spec.as_ref().unwrap().volumes.iter().flatten().find_map(|v| {
                    v.config_map.as_ref().filter(|c| c.name.starts_with(&o.router_config_prefix()))
                });
            assert_eq!(
                config_volume.map(|c| c.name.as_str()),
                router_config_map.metadata.name.as_deref(),
                "{name}"
            );
            let template = workload.template().unwrap();
            let annotations = template.metadata.as_ref().unwrap().annotations.as_ref().unwrap();
            assert_eq!(annotations[CONFIG_HASH], rendered.startup_hash, "{name}");
            // Every volume is mounted; every Secret volume is generated now or kept.
            let pod = template.spec.as_ref().unwrap();
            let volumes: Vec<&str> = pod.volumes.iter().flatten().map(|v| v.name.as_str()).collect();
            let mounts: Vec<&str> =
                pod.containers[0].volume_mounts.iter().flatten().map(|m| m.name.as_str()).collect();
            assert_eq!(volumes, mounts, "{name}");
            for v in pod.volumes.iter().flatten() {
                if let Some(s) = v.secret.as_ref().and_then(|s| s.secret_name.as_ref()) {
                    assert!(secrets.keep.contains(s), "{name}: mounted Secret {s} is not kept");
                }
            }
            for s in &secrets.create {
                let n = s.metadata.name.as_ref().unwrap();
                assert!(secrets.keep.contains(n), "{name}: created Secret {n} would be pruned");
            }
            // The users Secret is created when missing; the config map goes with it.
            assert_eq!(o.users_secret().is_some(), sasl_config_map.is_some(), "{name}");
            if let Some(u) = o.users_secret() {
                assert!(secrets.create.iter().any(|s| s.metadata.name.as_deref() == Some(&u)), "{name}");
            }
            // One Service port per listener.
            let ports = service.spec.as_ref().unwrap().ports.as_ref().unwrap().len();
            assert_eq!(ports, o.spec().every_listener().count(), "{name}");
        }
    }
}

#[test]
fn secrets_that_exist_are_never_created_again() {
    for (name, o) in owners() {
        let Built { children: first, report: first_report, .. } =
            build(&o, &settings(false), &observed(&o, &[])).unwrap();
        // The namespace after the first pass: what was created now exists, with its data.
        let mut now = observed(&o, &[]);
        for s in &first.secrets.create {
            now.secrets.insert(s.metadata.name.clone().unwrap(), Some(s.clone()));
        }
        let Built { children: second, report: second_report, .. } =
            build(&o, &settings(false), &now).unwrap();
        assert!(second.secrets.create.is_empty(), "{name}: {:?}", second.secrets.create);
        assert!(second.secrets.update.is_empty(), "{name}: nothing is due: {:?}", second.secrets.update);
        assert_eq!(first.secrets.keep, second.secrets.keep, "{name}");
        // The same Secrets, the same fingerprint: a second pass does not roll the routers.
        assert_eq!(first_report.credentials.fingerprint, second_report.credentials.fingerprint, "{name}");
        assert_eq!(first.workload, second.workload, "{name}");
    }
}

/// Management Secrets an earlier release wrote (no seal, written before the seal key was
/// made) are written again as they are, sealed: the same data, so the credentials hash and
/// the pod template stay and no router rolls. One written since the key is not the
/// controller's: left alone, and the reader refuses it.
#[test]
fn management_secrets_of_an_earlier_release_are_sealed_again_without_a_roll() {
    use crate::credentials::seal::{SEAL, is_sealed};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let (_, o) = owners().into_iter().next().unwrap();
    let made = SystemTime::now();
    let mut settings = settings(false);
    settings.seal_key = settings.seal_key.clone().since(Some(made));
    let Built { children: first, report: first_report, .. } =
        build(&o, &settings, &observed(&o, &[])).unwrap();
    let management =
        [crate::mesh::management::ca_secret(o.name()), crate::mesh::management::credentials_secret(o.name())];
    let at = |t: SystemTime| Time(k8s_openapi::jiff::Timestamp::try_from(t).unwrap());
    // As the earlier release left them: no seal, created an hour before the seal key.
    let older = |before: std::time::Duration| {
        let mut now = observed(&o, &[]);
        for s in &first.secrets.create {
            let mut s = s.clone();
            if let Some(a) = s.metadata.annotations.as_mut() {
                a.remove(SEAL);
            }
            s.metadata.creation_timestamp = Some(at(made - before));
            now.secrets.insert(s.metadata.name.clone().unwrap(), Some(s));
        }
        now
    };
    let hour = std::time::Duration::from_secs(3600);
    let Built { children: second, report: second_report, .. } = build(&o, &settings, &older(hour)).unwrap();
    let resealed: Vec<&str> =
        second.secrets.update.iter().filter_map(|s| s.metadata.name.as_deref()).collect();
    assert_eq!(resealed, management.iter().map(String::as_str).collect::<Vec<_>>());
    for s in &second.secrets.update {
        let before = first.secrets.create.iter().find(|c| c.metadata.name == s.metadata.name).unwrap();
        assert_eq!(s.data, before.data, "the same data");
        assert!(is_sealed(&settings.seal_key, o.namespace(), o.uid(), s));
    }
    assert!(second.secrets.create.is_empty());
    assert_eq!(first_report.credentials.fingerprint, second_report.credentials.fingerprint, "no roll");
    assert_eq!(first.workload, second.workload, "the pod template stays");
    // Written after the seal key was made, without a seal: not the controller's.
    let mut later = older(hour);
    for name in &management {
        let s = later.secrets.get_mut(name).unwrap().as_mut().unwrap();
        s.metadata.creation_timestamp = Some(at(made + std::time::Duration::from_secs(5)));
    }
    let Built { children: third, .. } = build(&o, &settings, &later).unwrap();
    assert!(third.secrets.update.is_empty(), "{:?}", third.secrets.update);
}

/// A Secret the pods mount that is missing holds an existing workload (and its
/// configuration) as it is; with no workload yet, the new one is applied (nothing runs that
/// could be lost).
#[test]
fn a_missing_mounted_secret_holds_an_existing_workload() {
    let ic: Interconnect = serde_json::from_value(json!({
        "metadata": {"name": "mesh", "namespace": "ns", "uid": UID, "generation": 1},
        "spec": {"sslProfiles": [{"name": "tls", "credentials": "users-tls"}],
                 "listeners": [{"port": 5671, "sslProfile": "tls"}]}}))
    .unwrap();
    let o = ValidatedInterconnect::new(&ic).unwrap();
    let users: Vec<String> = o.users_secret().into_iter().collect();
    let mut seen = observed(&o, &users);
    assert_eq!(seen.secrets.get("users-tls"), Some(&None), "the user's Secret is missing");
    let Built { children, report, verify_workload } = build(&o, &settings(false), &seen).unwrap();
    assert!(!report.credentials.unmet.is_empty());
    assert!(matches!(children.workload, WorkloadChange::Apply(_)), "no workload yet: apply it");
    assert!(!verify_workload, "known to be missing");
    // Not in the store and not read: the build cannot hold what it does not know of, and
    // asks for the workload to be read.
    seen.workload = Ownership::Unverified;
    assert!(build(&o, &settings(false), &seen).unwrap().verify_workload);
    seen.workload = Ownership::Ours(Default::default(), None);
    let Built { children, verify_workload, .. } = build(&o, &settings(false), &seen).unwrap();
    assert!(matches!(children.workload, WorkloadChange::Hold(_)), "running routers are left alone");
    assert!(!verify_workload);
    // After a placement change the spec's kind is not there, but routers of the other kind
    // run: they are held too, not replaced by pods that cannot mount the Secret.
    seen.workload = Ownership::Free;
    seen.pods = vec!["mesh-7d9f-abcde".into()];
    let Built { children, .. } = build(&o, &settings(false), &seen).unwrap();
    assert!(matches!(children.workload, WorkloadChange::Hold(_)), "routers of the other kind are left alone");
    seen.workload = Ownership::Ours(Default::default(), None);
    // Once the Secret exists, the workload is applied again.
    let ca = new_ca("user", SystemTime::now(), DAY).unwrap();
    let leaf = new_leaf(&ca, &["mesh".into()], SystemTime::now(), DAY).unwrap();
    seen.secrets
        .insert("users-tls".into(), Some(secret(&[("tls.crt", &leaf.cert_pem), ("tls.key", &leaf.key_pem)])));
    let Built { children, report, .. } = build(&o, &settings(false), &seen).unwrap();
    assert!(report.credentials.unmet.is_empty(), "{:?}", report.credentials.unmet);
    assert!(report.credentials.problems.is_empty(), "{:?}", report.credentials.problems);
    assert!(matches!(children.workload, WorkloadChange::Apply(_)));
    // With every Secret there, an unread workload needs no read.
    seen.workload = Ownership::Unverified;
    assert!(!build(&o, &settings(false), &seen).unwrap().verify_workload);
}

const DAY: Duration = Duration::from_secs(24 * 3600);

/// A Secret with `entries` as data.
fn secret(entries: &[(&str, &str)]) -> Secret {
    Secret {
        data: Some(entries.iter().map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec()))).collect()),
        ..Default::default()
    }
}

/// `s` as generated by the Interconnect `owner` with `uid` (our label, its controller).
fn generated_by(mut s: Secret, owner: &str, uid: &str) -> Secret {
    s.metadata.labels = Some(BTreeMap::from([(GENERATED_LABEL.into(), "true".into())]));
    s.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "interconnectedcloud.github.io/v1alpha1".into(),
        kind: "Interconnect".into(),
        name: owner.into(),
        uid: uid.into(),
        controller: Some(true),
        ..Default::default()
    }]);
    s
}

fn owner(name: &str, spec: Value) -> ValidatedInterconnect {
    let ic: Interconnect = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": UID, "generation": 1}, "spec": spec}))
    .unwrap();
    ValidatedInterconnect::new(&qdr_api::defaults(&ic)).unwrap()
}

/// Interconnect `a` with profile `b` and Interconnect `a-b` both generate `a-b-ca`: the
/// second finds the first's CA (our label, another controller) in the way, never a
/// user-provided Secret it would read and prune.
#[test]
fn a_generated_secret_of_another_interconnect_is_a_conflict() {
    let o = owner("a-b", json!({}));
    let ca = new_ca("a-b-ca", SystemTime::now(), DAY).unwrap();
    let data = [
        ("tls.crt", ca.cert_pem.as_str()),
        ("tls.key", ca.key_pem.as_str()),
        ("ca.crt", ca.cert_pem.as_str()),
    ];
    let mut seen = observed(&o, &[]);
    seen.secrets.insert("a-b-ca".into(), Some(generated_by(secret(&data), "a", "another-uid")));
    let Built { children, .. } = build(&o, &settings(false), &seen).unwrap();
    let conflicts: Vec<String> = children.secrets.conflicts.iter().map(ToString::to_string).collect();
    assert_eq!(conflicts, ["Secret a-b-ca exists and is controlled by Interconnect a"]);
    // Without our label it is the user's CA: read, never a conflict.
    seen.secrets.insert("a-b-ca".into(), Some(secret(&data)));
    let Built { children, .. } = build(&o, &settings(false), &seen).unwrap();
    assert!(children.secrets.conflicts.is_empty(), "{:?}", children.secrets.conflicts);
}

/// The pod's volume of Secret `secret`.
fn volume<'a>(w: &'a Workload, secret: &str) -> &'a k8s_openapi::api::core::v1::Volume {
    let spec = w.template().unwrap().spec.as_ref().unwrap();
    let of = |v: &&k8s_openapi::api::core::v1::Volume| {
        v.secret.as_ref().and_then(|s| s.secret_name.as_deref()) == Some(secret)
    };
    spec.volumes.iter().flatten().find(of).unwrap_or_else(|| panic!("no volume of {secret}"))
}

/// A profile whose `caCert` names a generated CA (here another Interconnect's) trusts its
/// whole bundle, mounted alone where the configuration reads the CA.
#[test]
fn a_ca_cert_naming_a_generated_ca_trusts_its_bundle() {
    let o = owner(
        "client",
        json!({"sslProfiles": [{"name": "peer", "caCert": "mesh-inter-router-ca"}],
               "connectors": [{"host": "mesh", "port": 5671, "sslProfile": "peer"}]}),
    );
    let ca = new_ca("mesh-inter-router-ca", SystemTime::now(), DAY).unwrap();
    let data = [
        ("tls.crt", ca.cert_pem.as_str()),
        ("tls.key", ca.key_pem.as_str()),
        ("ca.crt", ca.cert_pem.as_str()),
    ];
    let mut seen = observed(&o, &[]);
    seen.secrets.insert("mesh-inter-router-ca".into(), Some(generated_by(secret(&data), "mesh", "mesh-uid")));
    let Built { children, report, .. } = build(&o, &settings(false), &seen).unwrap();
    assert!(children.secrets.conflicts.is_empty(), "only read, never generated: no conflict");
    let v = volume(children.workload.built(), "mesh-inter-router-ca");
    let items = v.secret.as_ref().unwrap().items.clone().unwrap();
    assert_eq!((items[0].key.as_str(), items[0].path.as_str()), ("ca.crt", "tls.crt"));
    assert!(report.credentials.unmet.is_empty(), "{:?}", report.credentials.unmet);
    // Only the bundle counts: a promotion (new tls.crt and tls.key) does not roll these
    // routers, a new bundle does (the Secrets this one generated now exist).
    for s in &children.secrets.create {
        seen.secrets.insert(s.metadata.name.clone().unwrap(), Some(s.clone()));
    }
    let next = new_ca("mesh-inter-router-ca", SystemTime::now(), DAY).unwrap();
    let fingerprint = |data: &[(&str, &str)], seen: &mut Observed| {
        let s = generated_by(secret(data), "mesh", "mesh-uid");
        seen.secrets.insert("mesh-inter-router-ca".into(), Some(s));
        build(&o, &settings(false), seen).unwrap().report.credentials.fingerprint
    };
    let promoted = [("tls.crt", next.cert_pem.as_str()), ("tls.key", next.key_pem.as_str()), data[2]];
    assert_eq!(fingerprint(&promoted, &mut seen), report.credentials.fingerprint);
    let bundle = format!("{}{}", ca.cert_pem, next.cert_pem);
    let staged = [data[0], data[1], ("ca.crt", bundle.as_str())];
    assert_ne!(fingerprint(&staged, &mut seen), report.credentials.fingerprint);
    // A user's CA Secret is mounted as it is.
    seen.secrets.insert("mesh-inter-router-ca".into(), Some(secret(&data)));
    let Built { children, .. } = build(&o, &settings(false), &seen).unwrap();
    assert!(
        volume(children.workload.built(), "mesh-inter-router-ca").secret.as_ref().unwrap().items.is_none()
    );
}

#[test]
fn a_users_secret_recreated_under_running_routers_is_a_warning() {
    let o = owner("mesh", json!({}));
    let mut seen = observed(&o, &[]);
    let Built { report, .. } = build(&o, &settings(false), &seen).unwrap();
    assert!(!report.credentials.changes.iter().any(|c| matches!(c, CredentialChange::PasswordsChanged(_))));
    seen.workload = Ownership::Ours(Default::default(), None);
    let Built { report, .. } = build(&o, &settings(false), &seen).unwrap();
    let lines: Vec<String> = report.credentials.changes.iter().map(ToString::to_string).collect();
    assert!(
        lines.iter().any(|l| l.starts_with("Secret mesh-users (spec.users) was missing, so new passwords")),
        "{lines:?}"
    );
}

/// User certificates are judged: expired, not a certificate, a key of another certificate;
/// an invalid one holds running routers like a missing one.
#[test]
fn user_certificates_are_judged() {
    let o = owner(
        "mesh",
        json!({"sslProfiles": [{"name": "tls", "credentials": "my-tls"}],
               "listeners": [{"port": 5671, "sslProfile": "tls"}]}),
    );
    let now = SystemTime::now();
    let ca = new_ca("user", now - 3 * DAY, DAY * 4).unwrap();
    let expired = new_leaf(&ca, &["mesh".into()], now - 2 * DAY, DAY).unwrap();
    let valid = new_leaf(&ca, &["mesh".into()], now, DAY).unwrap();
    let cases = [
        (secret(&[("tls.crt", &expired.cert_pem), ("tls.key", &expired.key_pem)]), "expired at"),
        (
            secret(&[("tls.crt", "not a certificate"), ("tls.key", &valid.key_pem)]),
            "tls.crt is not a PEM certificate",
        ),
        (
            secret(&[("tls.crt", &valid.cert_pem), ("tls.key", &expired.key_pem)]),
            "tls.key: the private key does not belong to the certificate",
        ),
    ];
    for (s, want) in cases {
        let mut seen = observed(&o, &o.users_secret().into_iter().collect::<Vec<_>>());
        seen.secrets.insert("my-tls".into(), Some(s));
        seen.workload = Ownership::Ours(Default::default(), None);
        let Built { children, report, .. } = build(&o, &settings(false), &seen).unwrap();
        let lines: Vec<String> = report.credentials.problems.iter().map(ToString::to_string).collect();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].contains("Secret my-tls (spec.sslProfiles[0].credentials)") && lines[0].contains(want),
            "{lines:?}"
        );
        let held = matches!(children.workload, WorkloadChange::Hold(_));
        assert_eq!(
            held,
            want != "expired at",
            "{want}: an invalid Secret holds the routers, an expired one does not"
        );
        if want == "expired at" {
            let expiring = &report.credentials.expiring;
            assert!(expiring.is_empty(), "expired is not 'expires in 0s': {expiring:?}");
        }
    }
}

/// The pod-template annotation `name` of the workload `built`.
fn template_annotation(built: &Built, name: &str) -> Option<String> {
    let template = built.children.workload.built().template()?;
    template.metadata.as_ref()?.annotations.as_ref()?.get(name).cloned()
}

/// What rolls the routers of `built` (the credentials aside: every build here generates new
/// ones): the pod-template annotations of the configuration.
fn rolls(built: &Built) -> Vec<Option<String>> {
    [
        builders::CONFIG_HASH,
        builders::CONFIG_FIELDS,
        builders::CONFIG_ROLLED_BY,
        builders::RESTARTED_FOR,
        builders::READINESS_GATE,
    ]
    .iter()
    .map(|a| template_annotation(built, a))
    .collect()
}

/// A workload running what `built` applies, made by a release before the readiness gate
/// (`qdr-operator.io/readiness-gate` absent).
fn running_before_the_gate(built: &Built) -> Ownership<WorkloadState> {
    match running(built) {
        Ownership::Ours(mut state, x) => {
            state.roll.gated = false;
            Ownership::Ours(state, x)
        }
        other => other,
    }
}

/// A workload running what `built` applies, as the observe stage reads it back.
fn running(built: &Built) -> Ownership<WorkloadState> {
    let state = WorkloadState {
        replicas: built.report.replicas,
        config_hash: template_annotation(built, builders::CONFIG_HASH),
        credentials_hash: template_annotation(built, builders::CREDENTIALS_HASH),
        config_fields: template_annotation(built, builders::CONFIG_FIELDS),
        roll: Roll {
            rolled_by: template_annotation(built, builders::CONFIG_ROLLED_BY),
            restarted_for: template_annotation(built, builders::RESTARTED_FOR),
            gated: template_annotation(built, builders::READINESS_GATE).is_some(),
        },
        rolled_out: true,
    };
    Ownership::Ours(state, None)
}

/// A change of the start-up part names its fields on the template (and keeps them until the
/// next such change); a live change does not touch the template; a configuration the
/// routers did not take in `LIVE_TRIES` visits is written as `restarted-for-config`, once.
#[test]
fn the_template_names_what_rolled_the_routers() {
    let spec = |edge_port: i32, prefix: &str| {
        json!({"deploymentPlan": {"size": 3},
               "edgeListeners": [{"port": edge_port}],
               "addresses": [{"prefix": prefix, "distribution": "closest"}]})
    };
    let with_management = |v: Value| owner("mesh", v).with_management().0;
    let o = with_management(spec(45672, "a"));
    let mut seen = observed(&o, &[]);
    let first = build(&o, &settings(false), &seen).unwrap();
    assert!(first.report.config.live);
    assert_eq!(
        first.report.roll,
        Roll { gated: true, ..Roll::default() },
        "a new workload starts from its configuration, its routers gated"
    );
    assert_eq!(template_annotation(&first, builders::READINESS_GATE).as_deref(), Some(builders::LINKED));
    let gates = |b: &Built| {
        let spec = b.children.workload.built().template().and_then(|t| t.spec.clone()).unwrap();
        spec.readiness_gates.unwrap_or_default().into_iter().map(|g| g.condition_type).collect::<Vec<_>>()
    };
    assert_eq!(gates(&first), [builders::LINKED]);

    // Routers an earlier release made (no gate): a live change leaves them ungated (the
    // gate alone rolls nothing); a start-up change gates the routers it rolls anyway.
    seen.workload = running_before_the_gate(&first);
    let upgraded = build(&with_management(spec(45672, "b")), &settings(false), &seen).unwrap();
    assert!(gates(&upgraded).is_empty(), "an upgrade rolls no router for the gate alone");
    assert_eq!(template_annotation(&upgraded, builders::READINESS_GATE), None);
    let rolled_anyway = build(&with_management(spec(45673, "a")), &settings(false), &seen).unwrap();
    assert_eq!(gates(&rolled_anyway), [builders::LINKED], "gated with a roll it makes anyway");
    // Without the management listener nothing would set the gate: none.
    let unmanaged = build(&owner("mesh", spec(45672, "a")), &settings(false), &observed(&o, &[])).unwrap();
    assert!(gates(&unmanaged).is_empty());
    assert!(template_annotation(&first, builders::CONFIG_FIELDS).unwrap().contains("spec.edgeListeners="));

    // A live change: the same template.
    seen.workload = running(&first);
    let live = build(&with_management(spec(45672, "b")), &settings(false), &seen).unwrap();
    assert_eq!(rolls(&live), rolls(&first));

    // A start-up change names the field, and the template keeps it while it runs.
    let o2 = with_management(spec(45673, "a"));
    let rolled = build(&o2, &settings(false), &seen).unwrap();
    assert_eq!(rolled.report.roll.rolled_by.as_deref(), Some("spec.edgeListeners"));
    seen.workload = running(&rolled);
    let again = build(&o2, &settings(false), &seen).unwrap();
    assert_eq!(rolls(&again), rolls(&rolled), "no second roll");
    let o3 = with_management(spec(45673, "c"));
    let live = build(&o3, &settings(false), &seen).unwrap();
    assert_eq!(live.report.roll.rolled_by.as_deref(), Some("spec.edgeListeners"), "kept by a live change");

    // Visits that found the routers not holding a configuration.
    let hash = live.report.config.hash.clone();
    for (tries, other, due) in
        [(LIVE_TRIES - 1, false, false), (LIVE_TRIES, true, false), (LIVE_TRIES, false, true)]
    {
        let counted = if other { "f".repeat(64) } else { hash.clone() };
        seen.live_tries = Some((counted, tries));
        let b = build(&o3, &settings(false), &seen).unwrap();
        let want = due.then(|| hash[..10].to_string());
        assert_eq!(b.report.roll.restarted_for, want, "{tries} tries, another configuration: {other}");
        assert_eq!(template_annotation(&b, builders::RESTARTED_FOR), want);
        if due {
            // Once rolled for it, the template keeps it, and rolls no more for it.
            seen.workload = running(&b);
            let kept = build(&o3, &settings(false), &seen).unwrap();
            assert_eq!(rolls(&kept), rolls(&b));
            seen.live_tries = None;
            let calm = build(&o3, &settings(false), &seen).unwrap();
            assert_eq!(rolls(&calm), rolls(&b), "kept after");
        }
    }
}

#[test]
fn what_rolled_the_routers_is_named_when_it_can_be() {
    use qdr_api::router_config::live::field_digests;
    let o = owner("mesh", json!({"interRouterListeners": [{"port": 55672}]}));
    let old = field_digests(&qdr_api::router_config::router_config(o.spec()));
    let o2 =
        owner("mesh", json!({"interRouterListeners": [{"port": 55673}], "sslProfiles": [{"name": "x"}]}));
    let new = field_digests(&qdr_api::router_config::router_config(o2.spec()));
    assert_eq!(super::rolled_by(Some(&old), &new), "spec.interRouterListeners, spec.sslProfiles");
    assert_eq!(super::rolled_by(None, &new), "the router configuration", "a template of 0.5.0");
    assert_eq!(super::rolled_by(Some(&new), &new), "the router configuration", "nothing named");
}

/// Issue 72: the routers' Role (get and list pods) and its RoleBinding exist only for
/// routers that use them: interior routers that find their peers with the image's
/// auto-mesh, whose pods mount the API token. An edge router, and an interior one the
/// controller links (the management listener), mount no token, so nothing is bound.
#[test]
fn the_routers_role_is_made_only_for_routers_that_read_the_pod_list() {
    let children =
        |o: &ValidatedInterconnect| build(o, &settings(false), &observed(o, &[])).unwrap().children;
    let edge = owner(
        "edge",
        json!({"deploymentPlan": {"role": "edge"}, "edgeConnectors": [{"host": "hub", "port": 45672}]}),
    );
    let linked = owner("linked", json!({})).with_management().0;
    let discovering = owner("discovering", json!({}));
    assert!(!builders::discovers_peers(&edge) && !builders::discovers_peers(&linked));
    assert!(builders::discovers_peers(&discovering));
    for o in [&edge, &linked] {
        let c = children(o);
        assert!(c.role.is_none() && c.role_binding.is_none(), "{}: {:?}", o.name(), c.role);
    }
    let c = children(&discovering);
    assert_eq!(c.role.map(|r| r.metadata.name), Some(Some("discovering".to_string())));
    assert!(c.role_binding.is_some());
}
