//! Router pods of a second control plane, run for real on the first one's real node.
//!
//! One real node runs on a machine (its bridge, iptables chains and kube-proxy are the
//! host's: [`crate::real_node`]), so a second cluster's routers cannot get a node of their
//! own. A second control plane ([`crate::ControlPlane`] with simulated nodes) schedules its
//! router pods on a kwok node, where nothing runs; [`StandIn`] then runs each of them as a pod
//! of the same name and the same containers and volumes on the real node, in a namespace of
//! the first control plane, and writes the stand-in's address back as the second cluster's pod
//! address (kwok sets a pod's status once, when it leaves `Pending`). The second cluster's
//! controller thus reaches its routers at the address its pods report, over its own mutual
//! TLS, as in any cluster; its ConfigMaps and Secrets are copied over and kept in step (the
//! kubelet then refreshes the stand-in's mounted files, as the second cluster's own kubelet
//! would). Only the routers' TCP crosses: the second cluster's controller and webhook have no
//! credentials of the first.
//!
//! What differs from a node of its own: the stand-in pods live on the first cluster's pod
//! network (they resolve its Service names), and carry no ServiceAccount token, no readiness
//! gates and no scheduling constraints of the second cluster.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodSpec, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

/// The stand-ins of one Interconnect's router pods.
pub struct StandIn {
    task: tokio::task::JoinHandle<()>,
    /// The pod names stood in for, with the stand-in's address.
    pub pods: Arc<std::sync::Mutex<BTreeMap<String, String>>>,
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The pod spec of `pod` as it runs on the real node: its containers and volumes; nothing of
/// its cluster's identity, scheduling or readiness gates.
fn spec_for_real_node(pod: &Pod) -> PodSpec {
    let spec = pod.spec.clone().unwrap_or_default();
    PodSpec {
        containers: spec.containers,
        init_containers: spec.init_containers,
        volumes: spec.volumes,
        security_context: spec.security_context,
        termination_grace_period_seconds: spec.termination_grace_period_seconds,
        automount_service_account_token: Some(false),
        hostname: spec.hostname,
        ..Default::default()
    }
}

/// Copies ConfigMap or Secret `name` from `from` to `to` when it differs (data only).
async fn copy_config_map(from: &Api<ConfigMap>, to: &Api<ConfigMap>, name: &str) {
    let Ok(Some(src)) = from.get_opt(name).await else { return };
    let dst = to.get_opt(name).await.ok().flatten();
    if dst.as_ref().is_some_and(|d| d.data == src.data && d.binary_data == src.binary_data) {
        return;
    }
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                    "data": src.data, "binaryData": src.binary_data});
    let _ = to.patch(name, &PatchParams::apply("stand-in").force(), &Patch::Apply(&cm)).await;
}

async fn copy_secret(from: &Api<Secret>, to: &Api<Secret>, name: &str) {
    let Ok(Some(src)) = from.get_opt(name).await else { return };
    let dst = to.get_opt(name).await.ok().flatten();
    if dst.as_ref().is_some_and(|d| d.data == src.data) {
        return;
    }
    let s = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": src.type_,
                   "data": src.data});
    let _ = to.patch(name, &PatchParams::apply("stand-in").force(), &Patch::Apply(&s)).await;
}

/// Brings every volume source of `pod` from `b` (namespace `b_ns`) to `a` (`a_ns`).
async fn copy_volumes(pod: &Pod, b: &kube::Client, b_ns: &str, a: &kube::Client, a_ns: &str) {
    for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        if let Some(cm) = &v.config_map {
            copy_config_map(&Api::namespaced(b.clone(), b_ns), &Api::namespaced(a.clone(), a_ns), &cm.name)
                .await;
        }
        if let Some(name) = v.secret.as_ref().and_then(|s| s.secret_name.as_deref()) {
            copy_secret(&Api::namespaced(b.clone(), b_ns), &Api::namespaced(a.clone(), a_ns), name).await;
        }
    }
}

/// The address of `a_ns/name` once it runs and has one.
async fn running_ip(pods: &Api<Pod>, name: &str) -> Option<String> {
    let p = pods.get_opt(name).await.ok()??;
    let status = p.status?;
    (status.phase.as_deref() == Some("Running")).then_some(status.pod_ip).flatten()
}

impl StandIn {
    /// Stands in, on the first cluster (`a`, namespace `a_ns`, which has the real node), for
    /// the router pods of Interconnect `name` of the second (`b`, namespace `b_ns`): now and
    /// as they come and go, every second, until dropped.
    pub fn start(b: kube::Client, b_ns: &str, name: &str, a: kube::Client, a_ns: &str) -> StandIn {
        let pods_seen: Arc<std::sync::Mutex<BTreeMap<String, String>>> = Arc::default();
        let (b_ns, a_ns, selector, seen) =
            (b_ns.to_string(), a_ns.to_string(), format!("interconnect_cr={name}"), pods_seen.clone());
        let task = tokio::spawn(async move {
            let (b_pods, a_pods): (Api<Pod>, Api<Pod>) =
                (Api::namespaced(b.clone(), &b_ns), Api::namespaced(a.clone(), &a_ns));
            loop {
                let listed = b_pods.list(&ListParams::default().labels(&selector)).await;
                for pod in listed.map(|l| l.items).unwrap_or_default() {
                    let pod_name = pod.metadata.name.clone().unwrap_or_default();
                    if pod.metadata.deletion_timestamp.is_some() {
                        let _ = a_pods.delete(&pod_name, &Default::default()).await;
                        seen.lock().unwrap().remove(&pod_name);
                        continue;
                    }
                    copy_volumes(&pod, &b, &b_ns, &a, &a_ns).await;
                    if a_pods.get_opt(&pod_name).await.ok().flatten().is_none() {
                        let stand_in = Pod {
                            metadata: kube::api::ObjectMeta {
                                name: Some(pod_name.clone()),
                                labels: Some(BTreeMap::from([(
                                    "qdr-operator.test/stand-in".into(),
                                    b_ns.clone(),
                                )])),
                                ..Default::default()
                            },
                            spec: Some(spec_for_real_node(&pod)),
                            ..Default::default()
                        };
                        let _ = a_pods.create(&PostParams::default(), &stand_in).await;
                    }
                    let Some(ip) = running_ip(&a_pods, &pod_name).await else { continue };
                    let reported = pod.status.as_ref().and_then(|s| s.pod_ip.clone());
                    if reported.as_deref() != Some(ip.as_str()) {
                        let patch = json!({"status": {"podIP": ip, "podIPs": [{"ip": ip}]}});
                        let _ = b_pods
                            .patch_status(&pod_name, &PatchParams::default(), &Patch::Merge(&patch))
                            .await;
                    }
                    seen.lock().unwrap().insert(pod_name, ip);
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        StandIn { task, pods: pods_seen }
    }

    /// Waits until `count` pods are stood in for, and returns them (name → address).
    ///
    /// # Panics
    /// When they are not within `timeout`.
    pub async fn wait(&self, count: usize, timeout: Duration) -> BTreeMap<String, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let pods = self.pods.lock().unwrap().clone();
            if pods.len() >= count {
                return pods;
            }
            assert!(Instant::now() < deadline, "{} of {count} stand-in routers run", pods.len());
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}
