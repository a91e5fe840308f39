//! The operator installed for real on the real node: its images built from the
//! binaries and imported into the node's containerd, and `deploy/` (or an overlay of it, or
//! the Helm chart) applied with only what the node needs changed: the image names, the pull
//! policy `Never` (there is no registry), and the placement on [`crate::real_node::NODE`]
//! (its toleration and a node selector, so the simulated nodes, where no container runs,
//! get none of the operator's pods).

use std::path::{Path, PathBuf};

use crate::images::{CONTROLLER, OperatorImage, TAG, WEBHOOK};
use crate::real_node::{NODE, TAINT};
use crate::{ControlPlane, Error};

/// Builds the controller and webhook images from the operator binaries built with the tests, as their Dockerfiles
/// define them ([`crate::images::operator_image`]), into `<control plane dir>/images` and imports them
/// into the real node.
///
/// # Errors
/// [`Error::MissingBinary`] when the operator binaries are not built or there is no real
/// node; [`Error::Startup`] when an import fails.
pub fn import_operator_images(cp: &ControlPlane) -> Result<(), Error> {
    import_operator_images_as(cp, OperatorImage::reference)
}

/// [`import_operator_images`], each image named `reference(image)` (for example the name a
/// manifest gives it, `ghcr.io/qdr-operator/controller:0.5.0`, so that manifest runs
/// unchanged: a tag other than `latest` is not pulled when present).
///
/// # Errors
/// As [`import_operator_images`].
pub fn import_operator_images_as(
    cp: &ControlPlane,
    reference: impl Fn(&OperatorImage) -> String,
) -> Result<(), Error> {
    let node = cp.real_node().ok_or(Error::MissingBinary {
        path: NODE.into(),
        hint: "start the control plane with real_nodes: 1",
    })?;
    let dir = cp.dir().join("images");
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    for image in [CONTROLLER, WEBHOOK] {
        let archive = dir.join(format!("{}.oci.tar", image.name));
        let rootfs = dir.join(format!("{}.rootfs", image.name));
        let _ = std::fs::remove_dir_all(&rootfs);
        let spec = crate::images::ImageSpec {
            reference: reference(&image),
            ..crate::images::operator_image(&image, &rootfs)?
        };
        crate::images::write_archive(&spec, &archive)?;
        node.import(&archive)?;
    }
    Ok(())
}

/// Waits (up to 60 s) until the API server calls the validating webhook through its Service
/// for namespace `ns`, shown by an Interconnect only the webhook can judge (an `sslProfile`
/// reference to nothing, which the schema does not check) refused on a server-side dry run;
/// returns kubectl's error, which names the field path.
///
/// # Panics
/// When it is not refused so within 60 s.
pub async fn refused_by_webhook(cp: &ControlPlane, ns: &str) -> String {
    let unresolved = r#"{"apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
        "metadata": {"name": "unresolved"},
        "spec": {"listeners": [{"port": 5671, "sslProfile": "missing"}]}}"#;
    crate::eventually(
        "admission through the webhook's Service",
        std::time::Duration::from_secs(60),
        || async {
            let out = crate::components::kubectl_stdin(
                cp,
                &["create", "-n", ns, "--dry-run=server", "-f", "-"],
                unresolved,
            );
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            (!out.status.success() && err.contains(r#"no sslProfile named "missing""#)).then_some(err)
        },
    )
    .await
}

/// The JSON patch (as YAML) that makes a Deployment's images never pulled.
const NEVER_PULL_PATCH: &str = "\
- op: add
  path: /spec/template/spec/containers/0/imagePullPolicy
  value: Never
";

/// The JSON patch (as YAML) that puts a Deployment's pods on the real node.
const PLACEMENT_PATCH: &str = "\
- op: add
  path: /spec/template/spec/tolerations
  value: [{key: TAINT_KEY, operator: Exists, effect: TAINT_EFFECT}]
- op: add
  path: /spec/template/spec/nodeSelector
  value: {kubernetes.io/hostname: NODE_NAME}
";

fn image_entry(image: &OperatorImage) -> String {
    format!(
        "  - name: {}\n    newName: {}\n    newTag: {TAG}\n",
        qdr_api::project::image_repository(image.name),
        image.repository()
    )
}

/// Writes a kustomize overlay into `dir` whose only resource is `base` (an absolute path:
/// `deploy/` or one of its overlays) and which changes only the images (to
/// [`CONTROLLER`]/[`WEBHOOK`]'s references), their pull policy (`Never`) and the placement
/// of every Deployment (the toleration of [`TAINT`] and `kubernetes.io/hostname: real-0`),
/// and, without `observe_mesh`, adds `--observe-mesh=off` to the controller (its routers
/// run on simulated nodes, where nobody answers). Returns `dir`, for `kubectl apply -k`.
///
/// # Errors
/// [`Error::Io`] when the directory cannot be written.
pub fn real_node_overlay(base: &Path, dir: &Path, observe_mesh: bool) -> Result<PathBuf, Error> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    // kustomize takes a base only by a relative path.
    let canonical =
        |p: &Path| std::fs::canonicalize(p).map_err(|e| Error::io(format!("resolving {}", p.display()), e));
    let base = relative(&canonical(dir)?, &canonical(base)?);
    let patch = format!("{NEVER_PULL_PATCH}{}", placement_patch());
    let indented: String = patch.lines().map(|l| format!("      {l}\n")).collect();
    let mut kustomization = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {}\nimages:\n{}{}\
         patches:\n  - target: {{kind: Deployment}}\n    patch: |-\n{indented}",
        base.display(),
        image_entry(&WEBHOOK),
        image_entry(&CONTROLLER),
    );
    if !observe_mesh {
        kustomization.push_str(
            "  - target: {kind: Deployment, name: qdr-controller}\n    patch: |-\n      - op: add\n        \
             path: /spec/template/spec/containers/0/args/-\n        value: --observe-mesh=off\n",
        );
    }
    let path = dir.join("kustomization.yaml");
    std::fs::write(&path, kustomization).map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
    Ok(dir.to_path_buf())
}

fn placement_patch() -> String {
    PLACEMENT_PATCH.replace("TAINT_KEY", TAINT.0).replace("TAINT_EFFECT", TAINT.2).replace("NODE_NAME", NODE)
}

/// Writes a kustomize overlay into `dir` of the manifest file `manifest` (copied into `dir`:
/// kustomize reads files only under its root), which adds only the placement of every
/// Deployment on the real node (the toleration of [`TAINT`] and `kubernetes.io/hostname:
/// real-0`): the images, their pull policy and everything else stay as `manifest` says.
/// For a release's `install.yaml`, whose images are imported under the names it uses.
/// Returns `dir`, for `kubectl apply -k`.
///
/// # Errors
/// [`Error::Io`] when `manifest` cannot be copied or the directory written.
pub fn placement_overlay(manifest: &Path, dir: &Path) -> Result<PathBuf, Error> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    let name = manifest.file_name().unwrap_or_default().to_string_lossy().into_owned();
    std::fs::copy(manifest, dir.join(&name))
        .map_err(|e| Error::io(format!("copying {}", manifest.display()), e))?;
    let indented: String = placement_patch().lines().map(|l| format!("      {l}\n")).collect();
    let kustomization = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {name}\n\
         patches:\n  - target: {{kind: Deployment}}\n    patch: |-\n{indented}"
    );
    let path = dir.join("kustomization.yaml");
    std::fs::write(&path, kustomization).map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
    Ok(dir.to_path_buf())
}

/// The path from directory `from` to `to`, both absolute.
pub(crate) fn relative(from: &Path, to: &Path) -> PathBuf {
    let (f, t): (Vec<_>, Vec<_>) = (from.components().collect(), to.components().collect());
    let common = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..f.len() {
        out.push("..");
    }
    for c in &t[common..] {
        out.push(c);
    }
    out
}

/// `helm install` arguments (`--set`) that change the chart's defaults the same way
/// [`real_node_overlay`] changes `deploy/`.
pub fn real_node_helm_values(observe_mesh: bool) -> Vec<String> {
    let mut out = Vec::new();
    if !observe_mesh {
        out.push("--set=observeMesh=false".into());
    }
    for image in [WEBHOOK, CONTROLLER] {
        out.push(format!("--set=images.{}.repository={}", image.name, image.repository()));
        out.push(format!("--set=images.{}.tag={TAG}", image.name));
        out.push(format!("--set=images.{}.pullPolicy=Never", image.name));
    }
    out.push(format!("--set=tolerations[0].key={}", TAINT.0));
    out.push("--set=tolerations[0].operator=Exists".into());
    out.push(format!("--set=tolerations[0].effect={}", TAINT.2));
    out.push(format!("--set=nodeSelector.kubernetes\\.io/hostname={NODE}"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_climb_to_the_common_ancestor() {
        assert_eq!(
            relative(Path::new("/tmp/a/b"), Path::new("/work/deploy")),
            Path::new("../../../work/deploy")
        );
        assert_eq!(relative(Path::new("/work/t"), Path::new("/work/deploy/x")), Path::new("../deploy/x"));
    }
}
