//! Router credentials renewed and a CA rotated on a real control plane, in seconds: the
//! controller runs with a router certificate lifetime of [`CERT`] and a CA lifetime of
//! [`CA`]; three `AntiAffinity` routers run on three simulated nodes (kwok makes them
//! Ready), and every rollout surges (a new router may share a node with an old one:
//! `matchLabelKeys: [pod-template-hash]`), completes and gates the CA steps. A configuration change
//! then rolls them once more, to completion. The CA's steps wait at least [`OVERLAP`] each.
//! A second Interconnect, `client`, trusts the first's inter-router CA through its profile's
//! `caCert`: it follows every change of that bundle before the next step, and every
//! consecutive pair of states (the CA's served certificate, the bundle `client` trusts)
//! verifies each other.
//! The timeline (when each Secret changed, when each pod template rolled) is printed.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{eventually, interconnects};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use qdr_certs::pki::{CertInfo, split_bundle};
use serde_json::json;

/// Router certificate lifetime: renewed at 2/3, 16 s.
const CERT: Duration = Duration::from_secs(24);
/// CA lifetime: the next CA is staged at 2/3, 30 s.
const CA: Duration = Duration::from_secs(45);
/// Least time between the CA's steps (`--router-ca-overlap`).
const OVERLAP: Duration = Duration::from_secs(4);

use common::secret_text as text;

#[tokio::test]
async fn certificates_renew_and_the_ca_rotates_with_rolling_routers() {
    let cp = qdr_tests::shared_with_nodes(3).await;
    cp.install_crd().await;
    let lease_ns = cp.namespace("rotation-system").await.name.clone();
    let health = common::free_port();
    let controller = common::start_controller_with(
        cp,
        &lease_ns,
        "qdr-operator-controller",
        "rotation-0",
        health,
        &[
            format!("--router-cert-lifetime={}s", CERT.as_secs()),
            format!("--router-ca-lifetime={}s", CA.as_secs()),
            format!("--router-ca-overlap={}s", OVERLAP.as_secs()),
        ],
    );
    let ns = cp.namespace("rotation").await;
    let ic: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
        "metadata": {"name": "mesh"}, "spec": {"deploymentPlan": {"size": 3, "placement": "AntiAffinity"}}}))
    .unwrap();
    let start = Instant::now();
    interconnects(&ns.client, &ns.name).create(&PostParams::default(), &ic).await.unwrap();
    common::create_interconnect(
        &ns,
        "client",
        json!({"sslProfiles": [{"name": "peer", "caCert": "mesh-inter-router-ca"}],
               "connectors": [{"host": "mesh", "port": 5671, "sslProfile": "peer"}]}),
    )
    .await;
    let secrets: Api<Secret> = ns.api();
    let deps: Api<Deployment> = ns.api();
    let leaf = "mesh-inter-router-credentials";
    let ca = "mesh-inter-router-ca";
    let first = eventually("generated credentials", Duration::from_secs(30), || async {
        secrets.get_opt(leaf).await.ok().flatten()
    })
    .await;
    let first_ca = eventually("generated CA", Duration::from_secs(30), || async {
        secrets.get_opt(ca).await.ok().flatten()
    })
    .await;
    let issued = CertInfo::parse(&text(&first, "tls.crt")).unwrap();
    // What others add to the generated Secrets' metadata (a backup tool's label, a policy
    // engine's annotation, a finalizer) survives every renewal and rotation step.
    let foreign = json!({"metadata": {"labels": {"backup.example.com/keep": "yes"},
                                      "annotations": {"policy.example.com/checked": "true"},
                                      "finalizers": ["example.com/hold"]}});
    for name in [leaf, ca] {
        secrets.patch(name, &PatchParams::default(), &Patch::Merge(foreign.clone())).await.unwrap();
    }

    // Follow the Secrets and the pod template until the rotation is over (the CA's bundle
    // is one certificate again, and not the first one) and the routers rolled for that last
    // step (the pod template is applied right after the Secrets, in the same pass: waited for
    // up to half a certificate lifetime), or 3 CA lifetimes. Followed through watches, so no
    // step is missed however quickly the next follows (kwok completes a rollout in
    // milliseconds, and each step waits only for the previous rollout).
    enum Seen {
        Secret(Box<Secret>),
        Template(String, String),
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Seen>();
    let follow_secrets = {
        let (api, tx) = (secrets.clone(), tx.clone());
        tokio::spawn(async move {
            use futures::StreamExt;
            use kube::runtime::{WatchStreamExt, watcher};
            let mut events = watcher(api, watcher::Config::default()).applied_objects().boxed();
            while let Some(Ok(s)) = events.next().await {
                if tx.send(Seen::Secret(Box::new(s))).is_err() {
                    break;
                }
            }
        })
    };
    let follow_template = {
        let (api, tx) = (deps.clone(), tx.clone());
        tokio::spawn(async move {
            use futures::StreamExt;
            use kube::runtime::{WatchStreamExt, watcher};
            let mut events = watcher(api, watcher::Config::default()).applied_objects().boxed();
            while let Some(Ok(d)) = events.next().await {
                let hash = d
                    .spec
                    .and_then(|s| s.template.metadata)
                    .and_then(|m| m.annotations)
                    .and_then(|a| a.get("qdr-operator.io/credentials-hash").cloned())
                    .unwrap_or_default();
                let name = d.metadata.name.clone().unwrap_or_default();
                if ["mesh", "client"].contains(&name.as_str()) && tx.send(Seen::Template(name, hash)).is_err()
                {
                    break;
                }
            }
        })
    };
    let mut timeline: Vec<(f64, String)> = Vec::new();
    let mut retired_at: Option<f64> = None;
    let mut last_roll = 0.0;
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let mut leaf_renewed_at = None;
    let mut now_ca = first_ca.clone();
    // What `client` trusts (the CA's bundle) and what the mesh serves (its leaf), at each
    // change; the CA's steps and the client's rolls, with times.
    let mut states: Vec<(std::time::SystemTime, String, String)> =
        vec![(std::time::SystemTime::now(), text(&first, "tls.crt"), text(&first_ca, "ca.crt"))];
    let mut ca_steps: Vec<(f64, &str)> = Vec::new();
    let mut client_rolls: Vec<f64> = Vec::new();
    let deadline = start + 3 * CA;
    let done = loop {
        let next = tokio::time::timeout(Duration::from_millis(200), rx.recv()).await;
        let t = start.elapsed().as_secs_f64();
        match next {
            Ok(Some(Seen::Secret(s))) => {
                let name = s.metadata.name.clone().unwrap_or_default();
                if [leaf, ca, "mesh-default-credentials", "mesh-ca"].contains(&name.as_str()) {
                    let state = format!(
                        "{} CAs trusted, signed by {}{}",
                        split_bundle(&text(&s, "ca.crt")).len(),
                        CertInfo::parse(&text(&s, "tls.crt")).map(|i| i.issuer_cn).unwrap_or_default(),
                        if text(&s, "next.crt").is_empty() { "" } else { ", next CA staged" }
                    );
                    let rv = s.metadata.resource_version.clone().unwrap_or_default();
                    if seen.get(&name) != Some(&rv) {
                        if seen.contains_key(&name) {
                            timeline.push((t, format!("Secret {name}: {state}")));
                            if name == leaf && leaf_renewed_at.is_none() {
                                leaf_renewed_at = Some(t);
                            }
                        }
                        seen.insert(name.clone(), rv);
                    }
                    let changed = |k: &str| text(&s, k) != text(&now_ca, k);
                    if name == ca && (changed("tls.crt") || changed("ca.crt") || changed("next.crt")) {
                        let bundle = split_bundle(&text(&s, "ca.crt")).len();
                        let step = match (text(&s, "next.crt").is_empty(), bundle) {
                            (false, _) => "stage",
                            (true, 2) => "promote",
                            _ => "retire",
                        };
                        ca_steps.push((t, step));
                    }
                    if name == ca {
                        now_ca = (*s).clone();
                    }
                    if name == leaf || name == ca {
                        let (served, trusted) = (states.last().unwrap().1.clone(), text(&now_ca, "ca.crt"));
                        let served = if name == leaf { text(&s, "tls.crt") } else { served };
                        if states.last().is_some_and(|(_, l, b)| (l, b) != (&served, &trusted)) {
                            states.push((std::time::SystemTime::now(), served, trusted));
                        }
                    }
                }
            }
            Ok(Some(Seen::Template(name, hash))) => {
                let key = format!("template {name}");
                if seen.get(&key) != Some(&hash) {
                    if seen.contains_key(&key) {
                        timeline.push((
                            t,
                            format!("pod template of {name} rolled (credentials fingerprint changed)"),
                        ));
                        if name == "mesh" {
                            last_roll = t;
                        } else {
                            client_rolls.push(t);
                        }
                    }
                    seen.insert(key, hash);
                }
            }
            Ok(None) => break false,
            Err(_) => {} // no change for 200 ms
        }
        if split_bundle(&text(&now_ca, "ca.crt")).len() == 1
            && text(&now_ca, "tls.crt") != text(&first_ca, "tls.crt")
        {
            let retired = *retired_at.get_or_insert(t);
            if last_roll >= retired || t - retired > CERT.as_secs_f64() / 2.0 {
                break true;
            }
        }
        if Instant::now() > deadline {
            break false;
        }
    };
    follow_secrets.abort();
    follow_template.abort();
    for (t, what) in &timeline {
        eprintln!("{t:7.2}s  {what}");
    }
    assert!(done, "the CA rotation did not complete within {:?}:\n{}", 3 * CA, controller.log_tail(80));

    // The first renewal came at 2/3 of the certificate's lifetime: not before the renew
    // point (its notBefore is backdated by a tenth of the lifetime), and within the
    // lifetime itself.
    let renewed = leaf_renewed_at.expect("the leaf was renewed");
    let renew_point = issued.point(2.0 / 3.0);
    let backdate = CERT / 10;
    assert!(
        Duration::from_secs_f64(renewed) + backdate + Duration::from_secs(1)
            >= renew_point.duration_since(issued.not_before).unwrap() - backdate,
        "renewed after {renewed:.1}s, before the renew point"
    );
    assert!(Duration::from_secs_f64(renewed) < CERT, "renewed after {renewed:.1}s: past the lifetime");

    // The rotation's steps, in order, each a rollout of the routers.
    let steps: Vec<&str> = timeline
        .iter()
        .filter(|(_, w)| w.starts_with(&format!("Secret {ca}:")))
        .map(|(_, w)| w.as_str())
        .collect();
    assert!(steps.len() >= 3, "stage, promote and retire: {steps:?}\n{}", controller.log_tail(80));
    assert!(steps.iter().any(|s| s.contains("2 CAs trusted") && s.contains("next CA staged")), "{steps:?}");
    let rolls = timeline.iter().filter(|(_, w)| w.starts_with("pod template of mesh rolled")).count();
    assert!(rolls >= 4, "renewal, stage, promote and retire each roll the routers: {rolls}");
    // Each step waited the overlap after the one before (the controller's clock and this
    // test's see the same moments, up to the watch's delay, which only adds).
    let names: Vec<&str> = ca_steps.iter().map(|(_, s)| *s).collect();
    assert_eq!(names, ["stage", "promote", "retire"], "{ca_steps:?}");
    for pair in ca_steps.windows(2) {
        let gap = pair[1].0 - pair[0].0;
        assert!(
            gap >= OVERLAP.as_secs_f64() - 0.5,
            "{} → {}: {gap:.2}s < overlap {OVERLAP:?}",
            pair[0].1,
            pair[1].1
        );
    }
    // `client` rolled onto the staged bundle before the new CA signed anything (woken by the
    // CA Secret, not at a resync), and onto the final bundle after the retirement.
    let (staged, promoted) = (ca_steps[0].0, ca_steps[1].0);
    assert!(
        client_rolls.iter().any(|t| *t >= staged && *t < promoted),
        "client did not follow the staged bundle before the promotion: rolls at {client_rolls:?}"
    );
    // Every consecutive pair of states verifies each other: an old client trusts the new
    // served certificate and a new client the old one (a rollout mixes them).
    for pair in states.windows(2) {
        let ((_, leaf_a, trust_a), (at, leaf_b, trust_b)) = (&pair[0], &pair[1]);
        let host = format!("mesh.{}.svc", ns.name);
        qdr_certs::pki::verify_leaf(leaf_a, trust_b, &host, *at)
            .expect("the new bundle trusts the old certificate");
        qdr_certs::pki::verify_leaf(leaf_b, trust_a, &host, *at)
            .expect("the old bundle trusts the new certificate");
    }
    eprintln!("{} states of served certificate and trusted bundle, each pair verified", states.len());

    // The final state: the leaf is signed by the new CA, which alone is trusted.
    let (leaf_now, ca_now) = (secrets.get(leaf).await.unwrap(), secrets.get(ca).await.unwrap());
    for s in [&leaf_now, &ca_now] {
        let m = &s.metadata;
        assert_eq!(
            m.labels.as_ref().unwrap().get("backup.example.com/keep").map(String::as_str),
            Some("yes"),
            "{m:?}"
        );
        assert_eq!(
            m.annotations.as_ref().unwrap().get("policy.example.com/checked").map(String::as_str),
            Some("true"),
            "{m:?}"
        );
        assert_eq!(m.finalizers.as_deref(), Some(&["example.com/hold".to_string()][..]), "{m:?}");
        assert!(m.labels.as_ref().unwrap().contains_key("qdr-operator.io/credentials"), "still ours: {m:?}");
    }
    for name in [leaf, ca] {
        let release = json!({"metadata": {"finalizers": null}});
        secrets.patch(name, &PatchParams::default(), &Patch::Merge(release)).await.unwrap();
    }
    assert_eq!(text(&leaf_now, "ca.crt"), text(&ca_now, "ca.crt"));
    qdr_certs::pki::verify_leaf(
        &text(&leaf_now, "tls.crt"),
        &text(&ca_now, "ca.crt"),
        &format!("mesh.{}.svc", ns.name),
        std::time::SystemTime::now(),
    )
    .unwrap();
    let info = CertInfo::parse(&text(&leaf_now, "tls.crt")).unwrap();
    assert_eq!(info.issuer_cn, CertInfo::parse(&text(&ca_now, "tls.crt")).unwrap().subject_cn);

    // A configuration change rolls the three routers to completion as well.
    let ics = interconnects(&ns.client, &ns.name);
    ics.patch(
        "mesh",
        &PatchParams::default(),
        // The edge listener: what a running router cannot take (an address is written into
        // the running routers instead: docs/live-configuration.md).
        &Patch::Merge(json!({"spec": {"edgeListeners": [{"port": 45699}]}})),
    )
    .await
    .unwrap();
    let config_hash = |d: &Deployment| {
        d.spec
            .as_ref()?
            .template
            .metadata
            .as_ref()?
            .annotations
            .as_ref()?
            .get("qdr-operator.io/config-hash")
            .cloned()
    };
    let before = config_hash(&deps.get("mesh").await.unwrap());
    eventually("the configuration change rolled out on 3 nodes", CA, || async {
        let d = deps.get("mesh").await.ok()?;
        let st = d.status.as_ref()?;
        let done = config_hash(&d) != before
            && st.observed_generation >= d.metadata.generation
            && st.updated_replicas == Some(3)
            && st.replicas == Some(3)
            && st.available_replicas == Some(3);
        done.then_some(())
    })
    .await;

    // The expiry metric names the Interconnect and comes within a certificate lifetime. It is
    // set by each pass from the certificates that pass leaves mounted: on a loaded machine a
    // certificate of this test's 24 s lifetime can run out while its renewal waits for a roll
    // (seen once: -0.35 s), so it is polled until a pass has renewed it, for at most CA.
    let ns_label = format!("namespace=\"{}\"", ns.name);
    eventually("the expiry metric of the Interconnect within a certificate lifetime", CA, || {
        let ns_label = ns_label.clone();
        async move {
            let metrics = common::metrics_text(health).await?;
            let line = metrics
                .lines()
                .find(|l| l.starts_with("qdr_router_certificate_expiry_seconds{") && l.contains(&ns_label))?;
            let secs: f64 = line.rsplit(' ').next()?.parse().ok()?;
            (secs > 0.0 && secs <= (CERT + CERT / 10).as_secs_f64()).then_some(())
        }
    })
    .await;
}
