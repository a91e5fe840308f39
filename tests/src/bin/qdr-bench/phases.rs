//! Where the time from `kubectl apply` (or a pod's deletion) to a linked router goes: a
//! watch on the router pods that notes the moment each pod is first seen in each phase, on
//! this process's clock (the API server's timestamps have a resolution of one second).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher;

/// The phases of a router pod, in the order they happen.
pub(crate) const PHASES: [&str; 6] = [
    "pod created",
    "pod scheduled",
    "container running",
    "health probe passed (ContainersReady)",
    "linked (the controller's readiness gate)",
    "pod Ready",
];

/// The pod condition the controller sets once a router holds its links.
const LINKED: &str = "qdr-operator.io/linked";

/// Which of [`PHASES`] `pod` has reached.
fn reached(pod: &Pod) -> [bool; 6] {
    let status = pod.status.as_ref();
    let condition = |t: &str| {
        (status.and_then(|s| s.conditions.as_ref()).into_iter().flatten())
            .any(|c| c.type_ == t && c.status == "True")
    };
    let running = (status.and_then(|s| s.container_statuses.as_ref()).into_iter().flatten())
        .any(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()));
    [
        true,
        pod.spec.as_ref().is_some_and(|s| s.node_name.is_some()),
        running,
        condition("ContainersReady"),
        condition(LINKED),
        condition("Ready"),
    ]
}

/// The moments each pod (by name) first reached each phase.
#[derive(Clone, Default)]
pub(crate) struct Phases(Arc<Mutex<BTreeMap<String, [Option<Instant>; 6]>>>);

impl Phases {
    /// Starts watching the pods of `pods` (labelled `selector`; empty: all) in the background.
    pub(crate) fn watch(pods: Api<Pod>, selector: &str) -> Phases {
        let phases = Phases::default();
        let seen = phases.0.clone();
        let config = if selector.is_empty() {
            watcher::Config::default()
        } else {
            watcher::Config::default().labels(selector)
        };
        tokio::spawn(async move {
            let mut events = std::pin::pin!(watcher::watcher(pods, config));
            while let Some(event) = events.next().await {
                let (watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) =
                    event.unwrap_or(watcher::Event::Init)
                else {
                    continue;
                };
                let now = Instant::now();
                let name = pod.metadata.name.clone().unwrap_or_default();
                let mut seen = seen.lock().unwrap();
                let times = seen.entry(name).or_default();
                for (i, r) in reached(&pod).into_iter().enumerate() {
                    if r && times[i].is_none() {
                        times[i] = Some(now);
                    }
                }
            }
        });
        phases
    }

    /// For each phase, when the last of the pods first seen after `from` reached it, as time
    /// since `from` (`None` when one has not yet).
    pub(crate) fn since(&self, from: Instant) -> [Option<Duration>; 6] {
        let seen = self.0.lock().unwrap();
        let pods: Vec<_> = seen.values().filter(|t| t[0].is_some_and(|c| c >= from)).collect();
        std::array::from_fn(|i| {
            if pods.is_empty() {
                return None;
            }
            pods.iter().map(|t| t[i].map(|at| at - from)).collect::<Option<Vec<_>>>()?.into_iter().max()
        })
    }
}
