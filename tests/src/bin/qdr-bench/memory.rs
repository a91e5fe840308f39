//! What the controller keeps in memory (`QDR_BENCH_ONLY=unrelated`): the bytes its stores
//! hold per Interconnect and kind, and its RSS and start-up with thousands of unrelated
//! Secrets and ConfigMaps in the watched namespace.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use qdr_tests::ControlPlane;
use serde_json::{Value, json};

use crate::convergence::{CHILD_KINDS, converged, create_interconnects, start_controller};
use crate::fixtures::interconnects;
use crate::measure::peak_rss_mib;
use crate::table::Row;

/// What each of the controller's stores keeps per Interconnect, as JSON bytes (the size of
/// what it holds serialized, an approximation of its memory): every kind the controller
/// watches, listed from namespace `ns` of `n` converged Interconnects and cut the way its
/// store cuts it (`controller/src/cache/meta_store.rs`): the Interconnects without
/// `managedFields`; for every child, the name, namespace, `resourceVersion`, `generation`,
/// the labels lookups select by and the controller owner reference (a Secret: every owner
/// reference, the rotation-step annotation, its type and data; a workload: replicas, the pod
/// template's annotations, the status without conditions).
pub(crate) async fn store_bytes(
    cp: &'static ControlPlane,
    ns: &str,
    n: usize,
) -> Result<Vec<(String, f64)>, Box<dyn std::error::Error>> {
    const SELECTED: &[&str] =
        &["interconnect_cr", "app.kubernetes.io/managed-by", "application", "qdr-operator.io/credentials"];
    let client = cp.client().await?;
    let mut out = Vec::new();
    let ic_kind = ("interconnectedcloud.github.io", "v1alpha1", "Interconnect", "interconnects");
    for (group, version, kind, plural) in CHILD_KINDS.iter().chain([&ic_kind]) {
        let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        let mut lp = kube::api::ListParams::default();
        if *kind != "Interconnect" {
            lp = lp.labels("app.kubernetes.io/managed-by=qdr-operator");
        }
        let mut bytes = 0usize;
        for o in Api::<DynamicObject>::namespaced_with(client.clone(), ns, &ar).list(&lp).await?.items {
            let mut v = serde_json::to_value(&o)?;
            if *kind == "Interconnect" {
                if let Some(m) = v["metadata"].as_object_mut() {
                    m.remove("managedFields");
                }
                bytes += serde_json::to_vec(&v)?.len();
                continue;
            }
            let m = &v["metadata"];
            let labels: serde_json::Map<String, Value> = (m["labels"].as_object().into_iter().flatten())
                .filter(|(k, _)| SELECTED.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let owners: Vec<Value> = (m["ownerReferences"].as_array().into_iter().flatten())
                .filter(|r| *kind == "Secret" || r["controller"] == true)
                .cloned()
                .collect();
            let mut kept = json!({"metadata": {"name": m["name"], "namespace": m["namespace"],
                "resourceVersion": m["resourceVersion"], "generation": m["generation"],
                "labels": labels, "ownerReferences": owners}});
            match *kind {
                "Secret" => {
                    kept["metadata"]["annotations"] = json!({"qdr-operator.io/ca-rotation-step-at": m["annotations"]["qdr-operator.io/ca-rotation-step-at"]});
                    kept["type"] = v["type"].take();
                    kept["data"] = v["data"].take();
                }
                "Deployment" => {
                    kept["spec"] = json!({"replicas": v["spec"]["replicas"],
                        "template": {"metadata": {"annotations": v["spec"]["template"]["metadata"]["annotations"]}}});
                    if let Some(st) = v["status"].as_object_mut() {
                        st.remove("conditions");
                    }
                    kept["status"] = v["status"].take();
                }
                _ => {}
            }
            bytes += serde_json::to_vec(&kept)?.len();
        }
        out.push((kind.to_string(), bytes as f64 / n as f64));
    }
    Ok(out)
}

/// Controller RSS and start-to-first-reconcile over 50 Interconnects, without and then with
/// 5,000 unrelated Secrets and 5,000 unrelated ConfigMaps (4 KiB of data each, no labels)
/// in the watched namespace.
pub(crate) async fn unrelated_rows(
    rows: &mut Vec<Row>,
    bin_dir: &Path,
    cp: &'static ControlPlane,
) -> Result<(), Box<dyn std::error::Error>> {
    // The smoke mode: 5 Interconnects, 200 of each.
    let (n, each) = crate::scaled((50, 5000), (5, 200));
    let client = cp.client().await?;
    let ns = cp.namespace("bench-unrelated").await;
    let system = cp.namespace("bench-ctl").await;
    let api = interconnects(&client, &ns.name);
    create_interconnects(&api, n).await?;
    let measure = |log: &'static str| {
        let (ns, system, api) = (ns.name.clone(), system.name.clone(), api.clone());
        async move {
            let start = Instant::now();
            let (ctl, _) = start_controller(cp, bin_dir, &ns, &system, log)?;
            let (first, _) = converged(&api, n, start, Duration::from_secs(120), &ctl).await?;
            tokio::time::sleep(Duration::from_secs(1)).await;
            let rss = peak_rss_mib(ctl.pid());
            ctl.stop(Duration::from_secs(5));
            // Back to unreconciled, for the second start.
            Ok::<_, Box<dyn std::error::Error>>((first.as_secs_f64() * 1000.0, rss))
        }
    };
    let (first_without, rss_without) = measure("controller-unrelated-0.log").await?;
    let data = "x".repeat(4096);
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), &ns.name);
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let sem = Arc::new(tokio::sync::Semaphore::new(32));
    let mut tasks = Vec::new();
    for i in 0..each {
        let (s, c, sem, data) = (secrets.clone(), config_maps.clone(), sem.clone(), data.clone());
        tasks.push(tokio::spawn(async move {
            let _p = sem.acquire().await.unwrap();
            let name = format!("unrelated-{i}");
            let secret: k8s_openapi::api::core::v1::Secret =
                serde_json::from_value(json!({"metadata": {"name": name}, "stringData": {"data": data}}))
                    .unwrap();
            let cm: k8s_openapi::api::core::v1::ConfigMap =
                serde_json::from_value(json!({"metadata": {"name": name}, "data": {"data": data}})).unwrap();
            s.create(&PostParams::default(), &secret).await?;
            c.create(&PostParams::default(), &cm).await.map(|_| ())
        }));
    }
    for t in tasks {
        t.await??;
    }
    // Status cleared, so the second start reconciles all of them again.
    for i in 0..n {
        api.patch_status(&format!("ic-{i}"), &PatchParams::default(), &Patch::Merge(json!({"status": null})))
            .await?;
    }
    let (first_with, rss_with) = measure("controller-unrelated-1.log").await?;
    rows.push(Row::once(format!("controller peak RSS, {n} Interconnects alone"), rss_without, "MiB"));
    rows.push(Row {
        what: format!(
            "controller peak RSS, {n} Interconnects + {each} Secrets + {each} ConfigMaps (4 KiB, unrelated)"
        ),
        runs: vec![rss_with],
        unit: "MiB",
        target: String::new(),
    });
    rows.push(Row {
        what: "  RSS growth from the unrelated objects".into(),
        runs: vec![rss_with - rss_without],
        unit: "MiB",
        target: "≤ 5".into(),
    });
    rows.push(Row {
        what: "controller start → first Interconnect reconciled, alone".into(),
        runs: vec![first_without],
        unit: "ms",
        target: String::new(),
    });
    rows.push(Row::once(
        "controller start → first Interconnect reconciled, with the unrelated objects",
        first_with,
        "ms",
    ));
    Ok(())
}
