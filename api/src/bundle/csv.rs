//! The ClusterServiceVersion: `deploy/olm/csv.yaml` (the hand-written part) completed with
//! the version, description, icon, examples (`alm-examples`), owned CRD, install strategy,
//! webhook definitions and related images. It assembles; the install strategy is
//! [`super::install`]'s and the descriptors are [`super::descriptors`]'.

use base64::prelude::{BASE64_STANDARD, Engine as _};
use serde_json::{Value, json};

use super::descriptors::owned_crd;
use super::install::install;
use super::metadata::PACKAGE;
use super::sources::Sources;

/// The CSV of `s`.
///
/// # Errors
/// A message when `deploy/olm/csv.yaml` has no `metadata` or `spec`, or the install strategy
/// or the descriptors cannot be made (see [`install`], [`owned_crd`]).
pub(super) fn csv(s: &Sources) -> Result<Value, String> {
    let mut csv = s.csv_base.clone();
    let install = install(s)?;
    let meta = csv["metadata"].as_object_mut().ok_or("deploy/olm/csv.yaml has no metadata")?;
    meta.insert("name".into(), json!(format!("{PACKAGE}.v{}", s.version)));
    let mut examples: Vec<Value> =
        s.examples.iter().filter(|e| e["kind"] == "Interconnect").cloned().collect();
    // One of each kind of links across clusters (docs/multi-cluster.md), for the console's
    // "create" form: a grant on the hub, a Link with its token.
    examples.push(json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "AccessGrant",
        "metadata": {"name": "site-b"},
        "spec": {"interconnect": "hub", "site": "b", "role": "inter-router", "expiry": "720h"}}));
    examples.push(json!({"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Link",
        "metadata": {"name": "to-hub"}, "spec": {"interconnect": "spoke", "tokenSecret": "site-b-token"}}));
    let annotations = meta.entry("annotations").or_insert(json!({}));
    annotations["alm-examples"] = json!(serde_json::to_string_pretty(&examples).expect("JSON serializes"));
    annotations["containerImage"] = json!(install.controller_image);

    let spec = csv["spec"].as_object_mut().ok_or("deploy/olm/csv.yaml has no spec")?;
    spec.insert("version".into(), json!(s.version));
    spec.insert("description".into(), json!(s.description));
    spec.insert(
        "icon".into(),
        json!([{"base64data": BASE64_STANDARD.encode(s.icon_svg.as_bytes()), "mediatype": "image/svg+xml"}]),
    );
    let mut owned = vec![owned_crd(s)?];
    for (_, crd) in &s.link_crds {
        owned.push(super::descriptors::owned_link_crd(crd)?);
    }
    spec.insert("customresourcedefinitions".into(), json!({"owned": owned}));
    spec.insert("install".into(), install.strategy);
    spec.insert("webhookdefinitions".into(), json!(install.webhooks));
    spec.insert(
        "relatedImages".into(),
        json!([
            {"name": "controller", "image": install.controller_image},
            {"name": "webhook", "image": install.webhook_image},
            {"name": "router", "image": default_router_image(s)?},
        ]),
    );
    Ok(csv)
}

/// The router image the controller runs for a spec that names none: its `--default-image`
/// argument in `deploy/base` (a release sets it), else [`crate::images::DEFAULT_ROUTER_IMAGE`].
///
/// # Errors
/// As [`super::sources::find`] when there is no controller Deployment.
fn default_router_image(s: &Sources) -> Result<String, String> {
    let controller = super::sources::find(s, "Deployment", "qdr-controller")?;
    let args = controller["spec"]["template"]["spec"]["containers"][0]["args"].as_array();
    Ok(args
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .find_map(|a| a.strip_prefix("--default-image="))
        .unwrap_or(crate::images::DEFAULT_ROUTER_IMAGE)
        .to_string())
}
