//! The CSV's owned CRD: the kinds an Interconnect makes, and the spec and status descriptors
//! the OLM console shows, named and described from the CRD's own schema. It reads only the
//! CRD: a field the schema does not have is an error, not a made-up descriptor.

use serde_json::{Value, json};

use super::sources::Sources;

/// Words of a camelCase field name, capitalised: `interRouterListeners` → `Inter Router
/// Listeners`.
pub(super) fn display_name(field: &str) -> String {
    let mut out = String::new();
    for (i, c) in field.chars().enumerate() {
        if i == 0 {
            out.extend(c.to_uppercase());
        } else {
            if c.is_uppercase() {
                out.push(' ');
            }
            out.push(c);
        }
    }
    out.replace("Ssl ", "SSL ")
}

/// The first sentence of a schema description: up to the first `. ` that a capital letter
/// follows (so `e.g. x` does not end it).
pub(super) fn first_sentence(text: &str) -> String {
    let line = text.split("\n\n").next().unwrap_or_default().replace('\n', " ");
    let end = line
        .match_indices(". ")
        .map(|(i, _)| i)
        .find(|&i| line[i + 2..].chars().next().is_some_and(char::is_uppercase));
    match end {
        Some(i) => line[..=i].to_string(),
        None => line,
    }
}

/// The storage version of a CRD (as JSON).
fn storage_version(crd: &Value) -> Result<&Value, String> {
    (crd["spec"]["versions"].as_array())
        .and_then(|v| v.iter().find(|v| v["storage"] == true))
        .ok_or_else(|| format!("CRD {} has no storage version", crd["metadata"]["name"]))
}

/// A spec or status descriptor of field `field` of the schema properties `props`, at
/// `path`, with the schema's first sentence and the `x` descriptors.
fn describe(props: &Value, path: &str, field: &str, x: &[&str]) -> Value {
    let mut d = json!({
        "path": path,
        "displayName": display_name(field),
        "description": first_sentence(props[field]["description"].as_str().unwrap_or_default()),
    });
    if !x.is_empty() {
        d["x-descriptors"] = json!(x);
    }
    d
}

/// The CSV's owned CRD: its kinds of children, a spec descriptor for every top-level spec
/// field and the main deployment-plan fields, status descriptors for the conditions and the
/// router counts, each with the schema's own description.
pub(super) fn owned_crd(s: &Sources) -> Result<Value, String> {
    let version = storage_version(&s.crd)?;
    let schema = &version["schema"]["openAPIV3Schema"]["properties"];
    let spec = &schema["spec"]["properties"];
    let plan = &spec["deploymentPlan"]["properties"];
    let mut spec_descriptors = Vec::new();
    for field in spec.as_object().ok_or("the CRD has no spec properties")?.keys() {
        spec_descriptors.push(describe(spec, field, field, &[]));
    }
    let select = |field: &str| -> Vec<String> {
        plan[field]["enum"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| Some(format!("urn:alm:descriptor:com.tectonic.ui:select:{}", v.as_str()?)))
            .collect()
    };
    let role = select("role");
    let placement = select("placement");
    for (field, x) in [
        ("size", vec!["urn:alm:descriptor:com.tectonic.ui:podCount"]),
        ("image", vec!["urn:alm:descriptor:com.tectonic.ui:text"]),
        ("role", role.iter().map(String::as_str).collect()),
        ("placement", placement.iter().map(String::as_str).collect()),
        ("resources", vec!["urn:alm:descriptor:com.tectonic.ui:resourceRequirements"]),
    ] {
        if plan.get(field).is_none() {
            return Err(format!("the CRD has no spec.deploymentPlan.{field}"));
        }
        spec_descriptors.push(describe(plan, &format!("deploymentPlan.{field}"), field, &x));
    }
    let status = &schema["status"]["properties"];
    let mut status_descriptors = Vec::new();
    for (field, x) in [
        ("conditions", vec!["urn:alm:descriptor:io.kubernetes.conditions"]),
        ("replicas", vec!["urn:alm:descriptor:com.tectonic.ui:podCount"]),
        ("readyReplicas", vec![]),
        ("pods", vec![]),
        ("observedGeneration", vec![]),
    ] {
        if status.get(field).is_none() {
            return Err(format!("the CRD has no status.{field}"));
        }
        status_descriptors.push(describe(status, field, field, &x));
    }
    let resource = |kind: &str, version: &str| json!({"kind": kind, "version": version, "name": ""});
    Ok(json!({
        "name": s.crd["metadata"]["name"],
        "version": version["name"],
        "kind": s.crd["spec"]["names"]["kind"],
        "displayName": "Interconnect",
        "description": "A network of Qpid Dispatch routers: their Deployment or DaemonSet, configuration, Services, TLS credentials and RBAC.",
        "resources": [
            resource("Deployment", "v1"),
            resource("DaemonSet", "v1"),
            resource("Service", "v1"),
            resource("ConfigMap", "v1"),
            resource("Secret", "v1"),
            resource("ServiceAccount", "v1"),
            resource("Role", "v1"),
            resource("RoleBinding", "v1"),
            resource("Ingress", "v1"),
            resource("Route", "v1"),
        ],
        "specDescriptors": spec_descriptors,
        "statusDescriptors": status_descriptors,
    }))
}

/// The CSV's owned entry of a CRD of links across clusters (AccessGrant, Link): its
/// top-level spec fields and its conditions, described from its schema; an AccessGrant makes
/// a Secret (its token).
pub(super) fn owned_link_crd(crd: &Value) -> Result<Value, String> {
    let version = storage_version(crd)?;
    let schema = &version["schema"]["openAPIV3Schema"]["properties"];
    let kind = crd["spec"]["names"]["kind"].as_str().ok_or("a link CRD has no kind")?;
    let describe = |props: &Value, field: &str, x: &[&str]| describe(props, field, field, x);
    let spec = &schema["spec"]["properties"];
    let spec_descriptors: Vec<Value> = (spec.as_object().ok_or("a link CRD has no spec properties")?.keys())
        .map(|f| describe(spec, f, &[]))
        .collect();
    let status = &schema["status"]["properties"];
    let status_descriptors =
        vec![describe(status, "conditions", &["urn:alm:descriptor:io.kubernetes.conditions"])];
    let resources: Vec<Value> = if kind == "AccessGrant" {
        vec![json!({"kind": "Secret", "version": "v1", "name": ""})]
    } else {
        Vec::new()
    };
    Ok(json!({
        "name": crd["metadata"]["name"],
        "version": version["name"],
        "kind": kind,
        "displayName": if kind == "AccessGrant" { "Access Grant" } else { "Link" },
        "description": first_sentence(schema["spec"]["description"].as_str().or(version["schema"]["openAPIV3Schema"]["description"].as_str()).unwrap_or_default()),
        "resources": resources,
        "specDescriptors": spec_descriptors,
        "statusDescriptors": status_descriptors,
    }))
}
