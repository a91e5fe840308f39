//! A release of the operator, as files: `make release VERSION=… REGISTRY=…` (the
//! `qdr-release` program) calls [`write`], which fills a directory (`dist/`) with
//!
//! - `images/{controller,webhook,router}.oci.tar`: OCI image layout archives (linux/amd64),
//!   each naming its image `<REGISTRY>/<name>:<VERSION>` and `<REGISTRY>/<name>@<digest>`.
//!   The controller and webhook are the programs in [`Options::binaries`], laid out as their
//!   Dockerfiles say ([`crate::images::operator_image_of`]); the router is the image
//!   `tools/router-image/build.sh` builds from source (qpid-dispatch 1.19.0 on qpid-proton
//!   0.37.0), the one every real-router test runs, renamed ([`crate::images::rename_archive`],
//!   so its digest is the tested image's);
//! - `images.txt`: one line per image, `<REGISTRY>/<name>:<VERSION> <REGISTRY>/<name>@<digest>`;
//! - `install.yaml` (`deploy/`: every namespace) and `install-namespaced.yaml`
//!   (`deploy/overlays/namespaced`), rendered by kustomize (`kubectl kustomize`) with every
//!   image by digest and the controller's `--default-image` set to the released router image;
//! - `qdr-operator-<VERSION>.tgz`: the Helm chart (`helm package`), its values naming the same
//!   images by digest;
//! - `bundle/`: the OLM bundle ([`qdr_api::bundle`]) of the same manifests, `relatedImages`
//!   by digest;
//! - `bin/kubectl-qdr-linux-<arch>` and `bin/qdr-validate-linux-<arch>`: the kubectl plugin
//!   and the offline manifest checker from [`Options::binaries`] ([`TOOLS`]), for the
//!   machine's architecture (`amd64`, `arm64`);
//! - `sbom/<name>.spdx.json`: an SPDX SBOM per image, by syft, when [`Options::syft`] is set;
//! - `SHA256SUMS`: the SHA-256 of every other file (`sha256sum -c` format).
//!
//! `make test` writes a release with the operator binaries built in its own (dev) profile and
//! without SBOMs (tests/tests/install.rs installs it on the real node); `make release` writes
//! it with the release binaries and syft ([`Images::Build`]). The release workflow, once it
//! has pushed one multi-architecture index per image, writes the manifests, chart and bundle
//! again for the indexes' digests ([`Images::Published`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::Error;
use crate::images::{CONTROLLER, OperatorImage, WEBHOOK};

/// What [`write`] needs.
#[derive(Debug, Clone)]
pub struct Options {
    /// The release's version, `MAJOR.MINOR.PATCH` with an optional `-PRERELEASE`; its
    /// `MAJOR.MINOR.PATCH` must be the workspace's version (the programs report it).
    pub version: String,
    /// Where the images are published: a registry host with an optional path, lower case,
    /// without a scheme or tag (`ghcr.io/qdr-operator`).
    pub registry: String,
    /// The directory to write.
    pub out: PathBuf,
    /// `kubectl` (its `kustomize`), from the test tools (`tools/testbin/build.sh core`).
    pub kubectl: PathBuf,
    /// `helm`, from the test tools (`tools/testbin/build.sh helm`).
    pub helm: PathBuf,
    /// Where the images come from.
    pub images: Images,
}

/// Where a release's images come from.
#[derive(Debug, Clone)]
pub enum Images {
    /// Written by [`write`] into `<out>/images/` (the directory is emptied first).
    Build {
        /// The directory holding `qdr-controller`, `qdr-webhook` and the [`TOOLS`]
        /// (`target/release`).
        binaries: PathBuf,
        /// The router image's archive (`tools/router-image/build.sh` prints its path).
        router_archive: PathBuf,
        /// syft, for the SBOMs (`tools/testbin/build.sh release`); `None` writes none.
        syft: Option<PathBuf>,
    },
    /// Published already, e.g. as one multi-architecture index per image that the release
    /// workflow assembled from the archives of one [`Images::Build`] per architecture:
    /// `controller`, `webhook` and `router` → the digest (`sha256:<64 hex>`) to pin. Only the
    /// manifests, `images.txt` and `SHA256SUMS` are written; the other files of `<out>` stay
    /// (and are summed).
    Published(std::collections::BTreeMap<String, String>),
}

/// One released image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// `controller`, `webhook` or `router`.
    pub name: &'static str,
    /// `<registry>/<name>`.
    pub repository: String,
    /// `<VERSION>`.
    pub tag: String,
    /// The manifest's digest, `sha256:<64 hex>`.
    pub digest: String,
    /// Its archive in the release, `<out>/images/<name>.oci.tar` (for [`Images::Published`]
    /// the path an archive would have: none is written).
    pub archive: PathBuf,
}

impl Image {
    /// `<repository>:<tag>`.
    pub fn tagged(&self) -> String {
        format!("{}:{}", self.repository, self.tag)
    }

    /// `<repository>@<digest>`: how every released manifest names the image.
    pub fn pinned(&self) -> String {
        format!("{}@{}", self.repository, self.digest)
    }
}

/// What [`write`] wrote.
#[derive(Debug, Clone)]
pub struct Release {
    /// The controller, webhook and router images, in that order.
    pub images: Vec<Image>,
    /// Every file of [`Options::out`] but `SHA256SUMS` (the files it sums), as (path relative
    /// to it, size in bytes), sorted.
    pub files: Vec<(String, u64)>,
}

impl Release {
    /// The image named `name` (`controller`, `webhook`, `router`).
    ///
    /// # Panics
    /// When there is none: [`write`] always writes the three.
    pub fn image(&self, name: &str) -> &Image {
        self.images.iter().find(|i| i.name == name).expect("a released image")
    }
}

/// Checks `version` and `registry` as [`Options`] describes them.
///
/// # Errors
/// A message naming what is wrong with which value.
pub fn check(version: &str, registry: &str) -> Result<(), String> {
    let (core, pre) = version.split_once('-').unwrap_or((version, ""));
    let numbers: Vec<&str> = core.split('.').collect();
    let number = |n: &&str| {
        !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && (n.len() == 1 || !n.starts_with('0'))
    };
    if numbers.len() != 3 || !numbers.iter().all(number) {
        return Err(format!("VERSION={version:?} is not MAJOR.MINOR.PATCH[-PRERELEASE] (e.g. 0.5.0)"));
    }
    if version.contains('-')
        && (pre.is_empty() || !pre.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-'))
    {
        return Err(format!("VERSION={version:?}: the pre-release after '-' may hold only [0-9A-Za-z.-]"));
    }
    let workspace = env!("CARGO_PKG_VERSION");
    if core != workspace {
        return Err(format!(
            "VERSION={version:?}, but the programs are version {workspace} (Cargo.toml's workspace version): \
             set that first, or release {workspace}"
        ));
    }
    let (host, path) = registry.split_once('/').unwrap_or((registry, ""));
    let host_ok = !host.is_empty()
        && host.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-.:".contains(&b))
        && (host.contains('.') || host.contains(':') || host == "localhost");
    let path_ok = path.split('/').all(|c| {
        !c.is_empty()
            && c.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
            && c.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
    }) || path.is_empty();
    if !host_ok || !path_ok || registry.contains("://") {
        return Err(format!(
            "REGISTRY={registry:?} is not a registry host (with a '.' or a port, or localhost) and an optional \
             lower-case path, e.g. ghcr.io/qdr-operator"
        ));
    }
    Ok(())
}

/// Writes the release [`Options`] describes into [`Options::out`].
///
/// # Errors
/// [`Error::Startup`] naming the value when [`check`] refuses the version or registry, or
/// naming the tool and its output when kustomize, helm or syft fails; as
/// [`crate::images::operator_image_of`] and [`crate::images::rename_archive`];
/// [`Error::Io`] when a file cannot be read or written.
pub fn write(o: &Options) -> Result<Release, Error> {
    check(&o.version, &o.registry).map_err(|what| Error::Startup { what, logs: String::new() })?;
    let out = &o.out;
    if matches!(o.images, Images::Build { .. }) && out.exists() {
        std::fs::remove_dir_all(out).map_err(|e| Error::io(format!("emptying {}", out.display()), e))?;
    }
    let work = out.join(".work");
    std::fs::create_dir_all(&work).map_err(|e| Error::io(format!("creating {}", work.display()), e))?;
    let images = match &o.images {
        Images::Build { binaries, router_archive, syft } => {
            std::fs::create_dir_all(out.join("images")).map_err(|e| Error::io("creating images/", e))?;
            let mut images = Vec::new();
            for image in [CONTROLLER, WEBHOOK] {
                images.push(operator(o, &image, binaries, &work)?);
            }
            let router =
                Image { digest: crate::images::archive_digest(router_archive)?, ..released(o, "router") };
            crate::images::rename_archive(
                router_archive,
                &router.archive,
                &[router.tagged(), router.pinned()],
            )?;
            images.push(router);
            if let Some(syft) = syft {
                sboms(o, syft, &images)?;
            }
            tools(o, binaries)?;
            images
        }
        Images::Published(digests) => ["controller", "webhook", "router"]
            .into_iter()
            .map(|name| {
                let digest = digests.get(name).filter(|d| is_digest(d)).ok_or_else(|| Error::Startup {
                    what: format!("no digest (sha256:<64 hex>) given for the {name} image"),
                    logs: String::new(),
                })?;
                Ok(Image { digest: digest.clone(), ..released(o, name) })
            })
            .collect::<Result<_, Error>>()?,
    };
    let lines: String = images.iter().map(|i| format!("{} {}\n", i.tagged(), i.pinned())).collect();
    put(&out.join("images.txt"), &lines)?;

    let root = crate::workspace_root();
    for (file, base) in
        [("install.yaml", "deploy"), ("install-namespaced.yaml", "deploy/overlays/namespaced")]
    {
        let text = kustomized(o, &root.join(base), &work.join(file), &images)?;
        let header = format!(
            "# qdr-operator {} ({}): {}\n# kubectl apply -f {file}    (the images by digest: {})\n",
            o.version,
            qdr_api::project::source_url(),
            if base == "deploy" {
                "the CRD, the namespace qdr-operator, the webhook and the controller for every namespace"
            } else {
                "the CRD, the webhook for every namespace and the controller for the namespaces its WATCH_NAMESPACE lists"
            },
            images.iter().map(Image::pinned).collect::<Vec<_>>().join(", "),
        );
        put(&out.join(file), &(header + &text))?;
    }
    chart(o, &root, &work, &images)?;
    bundle(o, &root, &images)?;
    std::fs::remove_dir_all(&work).map_err(|e| Error::io(format!("removing {}", work.display()), e))?;
    let files = listing(out)?;
    let sums: String = files
        .iter()
        .map(|(rel, _)| {
            let bytes = std::fs::read(out.join(rel)).map_err(|e| Error::io(format!("reading {rel}"), e))?;
            Ok(format!("{:x}  {rel}\n", Sha256::digest(&bytes)))
        })
        .collect::<Result<_, Error>>()?;
    put(&out.join("SHA256SUMS"), &sums)?;
    Ok(Release { images, files })
}

/// The programs a release carries beside its images, for users' machines: the kubectl
/// plugin (`kubectl qdr`: status, topology, diagnostics) and the offline checker of
/// manifests (`qdr-validate`, for CI pipelines).
pub const TOOLS: [&str; 2] = ["kubectl-qdr", "qdr-validate"];

/// The name a release gives tool `name` built for this machine:
/// `<name>-linux-<amd64|arm64>`.
pub fn tool_file(name: &str) -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    format!("{name}-linux-{arch}")
}

/// Copies the [`TOOLS`] from `binaries` into `<out>/bin/` as [`tool_file`] names them,
/// executable.
fn tools(o: &Options, binaries: &Path) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt;
    let dir = o.out.join("bin");
    std::fs::create_dir_all(&dir).map_err(|e| Error::io("creating bin/", e))?;
    for name in TOOLS {
        let (from, to) = (binaries.join(name), dir.join(tool_file(name)));
        std::fs::copy(&from, &to)
            .map_err(|e| Error::io(format!("copying {} (build it first)", from.display()), e))?;
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| Error::io(format!("making {} executable", to.display()), e))?;
    }
    Ok(())
}

/// An SPDX SBOM per image, by syft, into `<out>/sbom/<name>.spdx.json`.
fn sboms(o: &Options, syft: &Path, images: &[Image]) -> Result<(), Error> {
    std::fs::create_dir_all(o.out.join("sbom")).map_err(|e| Error::io("creating sbom/", e))?;
    for i in images {
        let sbom = o.out.join(format!("sbom/{}.spdx.json", i.name));
        let mut cmd = Command::new(syft);
        cmd.env("SYFT_CHECK_FOR_APP_UPDATE", "false")
            .args(["scan", "-q", "--source-name", &i.repository, "--source-version", &o.version])
            .arg(format!("oci-archive:{}", i.archive.display()))
            .arg("-o")
            .arg(format!("spdx-json={}", sbom.display()));
        run(cmd, "syft")?;
    }
    Ok(())
}

/// `sha256:` and 64 lower-case hex digits.
fn is_digest(d: &str) -> bool {
    d.strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
}

/// `<registry>/<name>:<version>` with its archive path; the digest is filled in once written.
fn released(o: &Options, name: &'static str) -> Image {
    Image {
        name,
        repository: format!("{}/{name}", o.registry),
        tag: o.version.clone(),
        digest: String::new(),
        archive: o.out.join(format!("images/{name}.oci.tar")),
    }
}

/// The controller or webhook image from [`Options::binaries`].
fn operator(o: &Options, image: &OperatorImage, binaries: &Path, work: &Path) -> Result<Image, Error> {
    let rootfs = work.join(format!("{}.rootfs", image.name));
    let spec = crate::images::operator_image_of(image, &binaries.join(image.binary), &rootfs)?;
    let mut out = released(o, image.name);
    let spec = crate::images::ImageSpec { reference: out.tagged(), by_digest: true, ..spec };
    out.digest = crate::images::write_archive(&spec, &out.archive)?;
    std::fs::remove_dir_all(&rootfs).map_err(|e| Error::io(format!("removing {}", rootfs.display()), e))?;
    Ok(out)
}

/// `kubectl kustomize` of an overlay (in `dir`) of `base` that names the images by digest and
/// gives the controller `--default-image=<router by digest>`.
fn kustomized(o: &Options, base: &Path, dir: &Path, images: &[Image]) -> Result<String, Error> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    let canonical =
        |p: &Path| std::fs::canonicalize(p).map_err(|e| Error::io(format!("resolving {}", p.display()), e));
    let base = crate::install::relative(&canonical(dir)?, &canonical(base)?);
    let mut k = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {}\nimages:\n",
        base.display()
    );
    for i in images.iter().filter(|i| i.name != "router") {
        k.push_str(&format!(
            "  - name: {}\n    newName: {}\n    digest: {}\n",
            qdr_api::project::image_repository(i.name),
            i.repository,
            i.digest
        ));
    }
    let router = images.iter().find(|i| i.name == "router").expect("the router image");
    k.push_str(&format!(
        "patches:\n  - target: {{kind: Deployment, name: qdr-controller}}\n    patch: |-\n      - op: add\n        \
         path: /spec/template/spec/containers/0/args/-\n        value: --default-image={}\n",
        router.pinned()
    ));
    put(&dir.join("kustomization.yaml"), &k)?;
    let mut cmd = Command::new(&o.kubectl);
    cmd.arg("kustomize").arg(dir);
    run(cmd, "kubectl kustomize")
}

/// Replaces the one occurrence of `from` (whole lines) in `text` by `to`.
fn replace_once(text: &str, file: &str, from: &str, to: &str) -> Result<String, Error> {
    let n = text.matches(from).count();
    if n != 1 {
        return Err(Error::Startup {
            what: format!("{file}: expected {from:?} once, found it {n} times"),
            logs: String::new(),
        });
    }
    Ok(text.replacen(from, to, 1))
}

/// The chart, its version and images the release's: `helm package` into [`Options::out`].
fn chart(o: &Options, root: &Path, work: &Path, images: &[Image]) -> Result<(), Error> {
    let src = root.join("deploy/helm/qdr-operator");
    let dir = work.join("chart/qdr-operator");
    std::fs::create_dir_all(work.join("chart")).map_err(|e| Error::io("creating the chart's copy", e))?;
    let mut cp = Command::new("cp");
    cp.arg("-a").arg(&src).arg(&dir);
    run(cp, "cp")?;
    let read =
        |f: &str| std::fs::read_to_string(dir.join(f)).map_err(|e| Error::io(format!("reading {f}"), e));
    let here = env!("CARGO_PKG_VERSION");
    let v = &o.version;
    let mut chart = read("Chart.yaml")?;
    chart =
        replace_once(&chart, "Chart.yaml", &format!("\nversion: {here}\n"), &format!("\nversion: {v}\n"))?;
    chart = replace_once(
        &chart,
        "Chart.yaml",
        &format!("\nappVersion: \"{here}\"\n"),
        &format!("\nappVersion: \"{v}\"\n"),
    )?;
    put(&dir.join("Chart.yaml"), &chart)?;
    let mut values = read("values.yaml")?;
    for i in images {
        values = if i.name == "router" {
            replace_once(
                &values,
                "values.yaml",
                "\n  router: \"\"\n",
                &format!("\n  router: {}\n", i.pinned()),
            )?
        } else {
            image_values(&values, i, v)?
        };
    }
    put(&dir.join("values.yaml"), &values)?;
    let mut helm = Command::new(&o.helm);
    helm.arg("package").arg(&dir).arg("--destination").arg(&o.out);
    run(helm, "helm package").map(drop)
}

/// `values.yaml` with `images.<name>`'s `repository`, `tag` and `digest` set to `image`'s
/// (its block: the lines after `  <name>:` indented more than it).
fn image_values(values: &str, image: &Image, version: &str) -> Result<String, Error> {
    let mut out = Vec::new();
    let (mut inside, mut set) = (false, 0);
    for line in values.lines() {
        if line == format!("  {}:", image.name) {
            inside = true;
        } else if inside && !line.starts_with("    ") {
            inside = false;
        }
        let key = line.trim_start().split(':').next().unwrap_or_default();
        let value = match key {
            "repository" => image.repository.as_str(),
            "tag" => version,
            "digest" => image.digest.as_str(),
            _ => "",
        };
        if inside && !value.is_empty() && line.starts_with("    ") && !line.starts_with("     ") {
            out.push(format!("    {key}: {value}"));
            set += 1;
        } else {
            out.push(line.to_string());
        }
    }
    if set != 3 {
        return Err(Error::Startup {
            what: format!("values.yaml: images.{} must have repository, tag and digest", image.name),
            logs: String::new(),
        });
    }
    Ok(out.join("\n") + "\n")
}

/// The OLM bundle of the release's manifests into `<out>/bundle`.
fn bundle(o: &Options, root: &Path, images: &[Image]) -> Result<(), Error> {
    let fail = |what: String| Error::Startup { what, logs: String::new() };
    let mut s = qdr_api::bundle::Sources::read(root).map_err(fail)?;
    s.version = o.version.clone();
    s.image_tags.clear();
    let router = images.iter().find(|i| i.name == "router").expect("the router image");
    for doc in &mut s.deploy {
        if doc["kind"] != "Deployment" {
            continue;
        }
        let container = &mut doc["spec"]["template"]["spec"]["containers"][0];
        let Some(i) =
            images.iter().find(|i| container["image"] == qdr_api::project::image_repository(i.name))
        else {
            continue;
        };
        container["image"] = i.repository.clone().into();
        s.image_tags.insert(i.repository.clone(), i.digest.clone());
        if i.name == "controller" {
            let args =
                container["args"].as_array_mut().ok_or_else(|| fail("the controller has no args".into()))?;
            args.push(format!("--default-image={}", router.pinned()).into());
        }
    }
    let files = qdr_api::bundle::render(&s).map_err(fail)?;
    let dir = o.out.join(qdr_api::bundle::BUNDLE_DIR);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|e| Error::io(format!("emptying {}", dir.display()), e))?;
    }
    for (rel, text) in files {
        put(&o.out.join(qdr_api::bundle::BUNDLE_DIR).join(rel), &text)?;
    }
    Ok(())
}

/// Writes `text` to `path`, creating its directory.
fn put(path: &Path, text: &str) -> Result<(), Error> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    }
    std::fs::write(path, text).map_err(|e| Error::io(format!("writing {}", path.display()), e))
}

/// Runs `cmd`; its standard output, or [`Error::Startup`] naming `what` with its output.
fn run(mut cmd: Command, what: &str) -> Result<String, Error> {
    let out = cmd.output().map_err(|e| Error::io(format!("running {what}"), e))?;
    if !out.status.success() {
        return Err(Error::Startup {
            what: format!("{what} failed ({})", out.status),
            logs: format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        });
    }
    String::from_utf8(out.stdout).map_err(|e| Error::io(format!("{what}'s output"), std::io::Error::other(e)))
}

/// Every regular file under `dir`, relative, with its size, sorted.
fn listing(dir: &Path) -> Result<Vec<(String, u64)>, Error> {
    let mut out: Vec<(String, u64)> = crate::images::tree_files(dir)?
        .into_iter()
        .map(|(path, rel, _)| {
            let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or_default();
            (rel.trim_start_matches('/').to_string(), size)
        })
        .filter(|(rel, _)| rel != "SHA256SUMS")
        .collect();
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_registries_are_checked() {
        let v = env!("CARGO_PKG_VERSION");
        assert_eq!(check(v, "ghcr.io/qdr-operator"), Ok(()));
        assert_eq!(check(&format!("{v}-rc.1"), "localhost:5000"), Ok(()));
        assert_eq!(check(v, "registry.example.com/a/b-c"), Ok(()));
        for bad in ["1.2", "v1.2.3", "01.2.3", "1.2.3-", "1.2.3-a+b", "9.9.9"] {
            assert!(check(bad, "ghcr.io/x").is_err(), "{bad}");
        }
        assert!(check("9.9.9", "ghcr.io/x").unwrap_err().contains("Cargo.toml"));
        for bad in
            ["Ghcr.io/x", "https://ghcr.io/x", "ghcr.io/x/", "ghcr.io/X", "qdr-operator", "ghcr.io/x:1"]
        {
            assert!(check(v, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn digests_are_sha256_in_lower_case_hex() {
        let hex = "0123456789abcdef".repeat(4);
        assert!(is_digest(&format!("sha256:{hex}")));
        for bad in [
            hex.clone(),
            format!("sha256:{}", hex.to_uppercase()),
            format!("sha256:{}", &hex[1..]),
            format!("sha512:{hex}"),
        ] {
            assert!(!is_digest(&bad), "{bad}");
        }
    }

    #[test]
    fn a_text_is_replaced_only_when_it_is_there_once() {
        assert_eq!(replace_once("a\nb\n", "f", "\nb\n", "\nc\n").unwrap(), "a\nc\n");
        assert!(replace_once("a\nb\nb\n", "f", "b\n", "c\n").unwrap_err().to_string().contains("2 times"));
        assert!(replace_once("a\n", "f", "b", "c").is_err());
    }
}
