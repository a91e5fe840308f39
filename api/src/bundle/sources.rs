//! What the bundle is made from, read from the repository: `deploy/base` (its resources and
//! image tags), the committed CRD, the examples and the hand-written `deploy/olm/` parts;
//! and the lookups the other parts make in it. It reads files and parses YAML, nothing more:
//! it does not shape any bundle file.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

/// Everything [`super::render()`] reads, loaded by [`Sources::read`].
#[derive(Debug, Clone)]
pub struct Sources {
    /// The workspace version (`0.5.0`): the CSV is `qdr-operator.v<version>`.
    pub version: String,
    /// `deploy/olm/csv.yaml`.
    pub csv_base: Value,
    /// `deploy/olm/description.md`.
    pub description: String,
    /// `deploy/olm/icon.svg`.
    pub icon_svg: String,
    /// The documents of `deploy/base`'s resource files, in the kustomization's order.
    pub deploy: Vec<Value>,
    /// `deploy/base/kustomization.yaml`'s `images`: name → its `digest` (`sha256:…`) when
    /// it has one, else its `newTag`.
    pub image_tags: BTreeMap<String, String>,
    /// The committed CRD (`deploy/crds/…yaml`), as text and parsed.
    pub crd_text: String,
    /// The CRD, parsed.
    pub crd: Value,
    /// `deploy/examples/*.yaml` (the valid ones), sorted by file name.
    pub examples: Vec<Value>,
    /// The committed CRDs of links across clusters (AccessGrant, Link), as text and parsed.
    pub link_crds: Vec<(String, Value)>,
}

fn read(root: &Path, rel: &str) -> Result<String, String> {
    std::fs::read_to_string(root.join(rel)).map_err(|e| format!("reading {rel}: {e}"))
}

fn yaml_docs(text: &str, what: &str) -> Result<Vec<Value>, String> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).map_err(|e| format!("{what}: {e}"))?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

impl Sources {
    /// Reads the sources from the repository at `root`.
    ///
    /// # Errors
    /// A message naming the file that cannot be read or parsed.
    pub fn read(root: &Path) -> Result<Sources, String> {
        let kustomization: Value = serde_saphyr::from_str(&read(root, "deploy/base/kustomization.yaml")?)
            .map_err(|e| format!("deploy/base/kustomization.yaml: {e}"))?;
        let mut deploy = Vec::new();
        for r in kustomization["resources"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            if r.ends_with(".yaml") {
                let rel = format!("deploy/base/{r}");
                deploy.extend(yaml_docs(&read(root, &rel)?, &rel)?);
            }
        }
        let image_tags = kustomization["images"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| {
                let pin = i["digest"].as_str().or_else(|| i["newTag"].as_str())?;
                Some((i["name"].as_str()?.to_string(), pin.to_string()))
            })
            .collect();
        let crd_text = read(root, crate::CRD_PATH)?;
        let crd = serde_saphyr::from_str(&crd_text).map_err(|e| format!("{}: {e}", crate::CRD_PATH))?;
        let mut link_crds = Vec::new();
        for p in [crate::links::GRANT_CRD_PATH, crate::links::LINK_CRD_PATH] {
            let text = read(root, p)?;
            let parsed = serde_saphyr::from_str(&text).map_err(|e| format!("{p}: {e}"))?;
            link_crds.push((text, parsed));
        }
        let mut names: Vec<String> = std::fs::read_dir(root.join("deploy/examples"))
            .map_err(|e| format!("reading deploy/examples: {e}"))?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".yaml"))
            .collect();
        names.sort();
        let mut examples = Vec::new();
        for n in names {
            let rel = format!("deploy/examples/{n}");
            examples.extend(yaml_docs(&read(root, &rel)?, &rel)?);
        }
        Ok(Sources {
            version: env!("CARGO_PKG_VERSION").to_string(),
            csv_base: serde_saphyr::from_str(&read(root, "deploy/olm/csv.yaml")?)
                .map_err(|e| format!("deploy/olm/csv.yaml: {e}"))?,
            description: read(root, "deploy/olm/description.md")?,
            icon_svg: read(root, "deploy/olm/icon.svg")?,
            deploy,
            image_tags,
            crd_text,
            crd,
            examples,
            link_crds,
        })
    }
}

pub(super) fn find<'a>(s: &'a Sources, kind: &str, name: &str) -> Result<&'a Value, String> {
    s.deploy
        .iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .ok_or_else(|| format!("deploy/base has no {kind} {name}"))
}

/// `repository:tag` (or `repository@sha256:…` for a digest) for a Deployment's image named
/// as in the kustomization's `images`.
pub(super) fn tagged(s: &Sources, image: &str) -> Result<String, String> {
    let tag = s
        .image_tags
        .get(image)
        .ok_or_else(|| format!("deploy/base/kustomization.yaml sets no tag for {image}"))?;
    Ok(if tag.starts_with("sha256:") { format!("{image}@{tag}") } else { format!("{image}:{tag}") })
}
