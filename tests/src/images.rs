//! Container images for the real test node, built from files on this machine: no registry
//! can be reached and no image builder runs here, so each image is written as an OCI image
//! layout archive (one uncompressed layer, an image config, a manifest, `index.json`) that
//! `ctr images import` takes.
//!
//! - [`operator_image`]: the controller or the webhook, from the root filesystem that
//!   `deploy/docker/rootfs.sh` lays out from the operator binary built with the tests ([`operator_binary`]; the binary and
//!   exactly the shared libraries it loads), with the user and entrypoint of
//!   `deploy/docker/<name>.Dockerfile`, whose build stage runs the same script: one definition
//!   for the published images and the tested ones.
//! - [`pause_image`]: the sandbox image, the static `pause` program of `tools/testbin/pause`.
//!
//! Layers are reproducible: entries sorted, owner 0:0, modification time 0.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::Error;

/// Where [`operator_image`] and [`pause_image`] images are named: a registry host nobody
/// serves, so no node ever tries to pull them.
pub const REGISTRY: &str = "qdr-operator.test";

/// The tag of [`operator_image`] images.
pub const TAG: &str = "dev";

/// The pause image's reference (containerd's `sandbox_image` on the real node).
pub const PAUSE_IMAGE: &str = "qdr-operator.test/pause:1";

/// One of the operator's two images, as `deploy/docker/<name>.Dockerfile` defines it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OperatorImage {
    /// `controller` or `webhook`: the Dockerfile's and the image's short name.
    pub name: &'static str,
    /// The cargo binary (`target/<profile>/<binary>`), stored at `/<binary>` in the image.
    pub binary: &'static str,
}

impl OperatorImage {
    /// `qdr-operator.test/<name>`.
    pub fn repository(&self) -> String {
        format!("{REGISTRY}/{}", self.name)
    }

    /// `qdr-operator.test/<name>:dev`.
    pub fn reference(&self) -> String {
        format!("{}:{TAG}", self.repository())
    }

    /// `deploy/docker/<name>.Dockerfile`.
    pub fn dockerfile_path(&self) -> PathBuf {
        crate::workspace_root().join(format!("deploy/docker/{}.Dockerfile", self.name))
    }
}

/// The controller image (`/qdr-controller`).
pub const CONTROLLER: OperatorImage = OperatorImage { name: "controller", binary: "qdr-controller" };

/// The webhook image (`/qdr-webhook`).
pub const WEBHOOK: OperatorImage = OperatorImage { name: "webhook", binary: "qdr-webhook" };

/// What goes into an image: files (source on this machine → absolute path in the image,
/// mode), the entrypoint and the user.
#[derive(Debug, Clone, Default)]
pub struct ImageSpec {
    /// The reference `ctr images import` names the image by (`host/name:tag`).
    pub reference: String,
    /// `(source, path in the image, mode)`; parent directories are added (mode 0755).
    pub files: Vec<(PathBuf, String, u32)>,
    /// The image's `Entrypoint`.
    pub entrypoint: Vec<String>,
    /// The image's `User` (`uid:gid`).
    pub user: String,
    /// The image's `Env` (`NAME=value`); empty for none.
    pub env: Vec<String>,
    /// Also name the image `<repository of reference>@<its digest>` (a release's archives:
    /// the manifests that pin it by digest ask a node for that name).
    pub by_digest: bool,
}

/// The image config of an archive, as read back by [`read_config`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageConfig {
    /// `config.Entrypoint`.
    pub entrypoint: Vec<String>,
    /// `config.User`.
    pub user: String,
    /// `config.Cmd`.
    pub cmd: Vec<String>,
    /// `config.Env` (`NAME=value`).
    pub env: Vec<String>,
    /// `config.WorkingDir`.
    pub working_dir: String,
    /// `config.ExposedPorts`' keys (`5672/tcp`), sorted.
    pub exposed_ports: Vec<String>,
    /// Every regular file in the layer, absolute paths, sorted.
    pub files: Vec<String>,
}

/// The script that lays out an operator image's root filesystem, for the Dockerfiles' build
/// stage and for [`operator_image`] alike: `deploy/docker/rootfs.sh BINARY ROOTFS`.
pub fn rootfs_script() -> PathBuf {
    crate::workspace_root().join("deploy/docker/rootfs.sh")
}

/// What a two-stage `deploy/docker/*.Dockerfile` says, read line by line (continuation lines
/// joined): the build stage's base and `RUN` commands, and the final stage's base, `COPY`
/// lines, `USER` and `ENTRYPOINT` (exec form).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dockerfile {
    /// The first `FROM` (without `AS name`), e.g. `rust:1.95-bookworm`.
    pub build_base: String,
    /// The build stage's `RUN` commands.
    pub build_runs: Vec<String>,
    /// The last `FROM`, e.g. `scratch`.
    pub final_base: String,
    /// The final stage's `COPY` lines, their words after `COPY`.
    pub final_copies: Vec<Vec<String>>,
    /// The final stage's `USER` (`uid:gid`).
    pub user: String,
    /// The final stage's `ENTRYPOINT`.
    pub entrypoint: Vec<String>,
}

/// Reads `image`'s Dockerfile ([`OperatorImage::dockerfile_path`]).
///
/// # Errors
/// [`Error::Io`] when it cannot be read or is not a two-stage Dockerfile with an exec-form
/// `ENTRYPOINT` and a `USER` in its final stage.
pub fn dockerfile(image: &OperatorImage) -> Result<Dockerfile, Error> {
    let path = image.dockerfile_path();
    let text =
        std::fs::read_to_string(&path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    parse_dockerfile(&text).map_err(|what| Error::io(what, std::io::Error::other(path.display().to_string())))
}

fn parse_dockerfile(text: &str) -> Result<Dockerfile, String> {
    let mut lines = Vec::new();
    let mut current = String::new();
    for line in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
        match line.trim_end().strip_suffix('\\') {
            Some(head) => current.push_str(head),
            None => {
                current.push_str(line);
                if !current.trim().is_empty() {
                    lines.push(current.split_whitespace().collect::<Vec<_>>().join(" "));
                }
                current.clear();
            }
        }
    }
    let mut d = Dockerfile::default();
    let mut stage = 0;
    for line in lines {
        let (cmd, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        match (cmd, stage) {
            ("FROM", _) => {
                stage += 1;
                let base = rest.split(' ').next().unwrap_or_default().to_string();
                if stage == 1 { d.build_base = base } else { d.final_base = base }
            }
            ("RUN", 1) => d.build_runs.push(rest.to_string()),
            ("COPY", 2) => d.final_copies.push(rest.split(' ').map(String::from).collect()),
            ("USER", 2) => d.user = rest.to_string(),
            ("ENTRYPOINT", 2) => {
                d.entrypoint =
                    serde_json::from_str(rest).map_err(|_| format!("ENTRYPOINT {rest}: not exec form"))?
            }
            _ => {}
        }
    }
    if stage != 2 || d.user.is_empty() || d.entrypoint.is_empty() {
        return Err("not a two-stage Dockerfile with USER and ENTRYPOINT in its final stage".into());
    }
    Ok(d)
}

/// The directory of the binaries cargo built together with the running program:
/// `<target dir>/<profile>`, the running program's own directory, or its parent when that is
/// `deps/` (where test executables live). `cargo test --workspace` builds every binary of the
/// workspace there, `make run` (`cargo build --bins`) the same ones in the same profile, and
/// `make bench` the release ones, so a test, `local-run` and the bench each find the operator
/// built as they were.
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().map(Path::to_path_buf).unwrap_or(dir)
    } else {
        dir
    }
}

/// The operator binary of `image` in [`bin_dir`] (`<target dir>/<profile>/<binary>`): the
/// program the tests' images hold and the tests run. `make images` packs the release one
/// for publishing with the same script and the same cargo flags as the Dockerfile (a test
/// compares them).
///
/// # Errors
/// [`Error::MissingBinary`] naming `cargo build --bins` when it has not been built.
pub fn operator_binary(image: &OperatorImage) -> Result<PathBuf, Error> {
    let path = bin_dir().join(image.binary);
    if path.is_file() { Ok(path) } else { Err(Error::MissingBinary { path, hint: "cargo build --bins" }) }
}

/// The spec of `image`: the root filesystem [`rootfs_script`] lays out from its
/// [`operator_binary`] into `rootfs` (a directory that must not exist or be empty; the spec's files are
/// read from it, so keep it until the archive is written), with the `USER` and `ENTRYPOINT`
/// of its Dockerfile.
///
/// # Errors
/// As [`operator_binary`] and [`dockerfile`]; [`Error::Startup`] with the script's output
/// when it fails (a library the binary needs is missing); [`Error::Io`] when `rootfs` cannot
/// be read.
pub fn operator_image(image: &OperatorImage, rootfs: &Path) -> Result<ImageSpec, Error> {
    operator_image_of(image, &operator_binary(image)?, rootfs)
}

/// [`operator_image`] of the program `binary` (for a release: `target/release/<binary>`).
///
/// # Errors
/// As [`operator_image`], but for the binary: this one must exist.
pub fn operator_image_of(image: &OperatorImage, binary: &Path, rootfs: &Path) -> Result<ImageSpec, Error> {
    let binary = binary.to_path_buf();
    let dockerfile = dockerfile(image)?;
    let out = Command::new(rootfs_script())
        .arg(&binary)
        .arg(rootfs)
        .output()
        .map_err(|e| Error::io("running deploy/docker/rootfs.sh", e))?;
    if !out.status.success() {
        return Err(Error::Startup {
            what: format!("deploy/docker/rootfs.sh {} {}", binary.display(), rootfs.display()),
            logs: String::from_utf8_lossy(&out.stderr).into(),
        });
    }
    Ok(ImageSpec {
        reference: image.reference(),
        files: tree_files(rootfs)?,
        entrypoint: dockerfile.entrypoint,
        user: dockerfile.user,
        ..ImageSpec::default()
    })
}

/// Every regular file under `root`, as `(file, absolute path in the image, mode)`, sorted by
/// path.
///
/// # Errors
/// [`Error::Io`] when a directory cannot be read.
pub fn tree_files(root: &Path) -> Result<Vec<(PathBuf, String, u32)>, Error> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let entries =
            std::fs::read_dir(&dir).map_err(|e| Error::io(format!("reading {}", dir.display()), e))?;
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(format!("reading {}", dir.display()), e))?;
            let meta = entry.metadata().map_err(|e| Error::io("reading a file's metadata", e))?;
            let path = entry.path();
            if meta.is_dir() {
                dirs.push(path);
            } else if meta.is_file() {
                let rel = path.strip_prefix(root).expect("under root").display().to_string();
                out.push((path, format!("/{rel}"), meta.permissions().mode() & 0o7777));
            }
        }
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(out)
}

/// The sandbox image [`PAUSE_IMAGE`]: `/pause` (static) as user 65535:65535.
pub fn pause_image(pause: &Path) -> ImageSpec {
    ImageSpec {
        reference: PAUSE_IMAGE.into(),
        files: vec![(pause.to_path_buf(), "/pause".into(), 0o755)],
        entrypoint: vec!["/pause".into()],
        user: "65535:65535".into(),
        ..ImageSpec::default()
    }
}

/// This machine's architecture as OCI names it (`amd64`, `arm64`): the programs an image of
/// [`operator_image`] holds were built for it.
pub fn architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

fn descriptor(media_type: &str, bytes: &[u8]) -> serde_json::Value {
    serde_json::json!({"mediaType": media_type, "digest": sha256(bytes), "size": bytes.len()})
}

fn tar_header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_ustar();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_size(size);
    h
}

/// The layer: every parent directory, then the files, sorted by path.
fn layer(spec: &ImageSpec) -> Result<Vec<u8>, Error> {
    let mut dirs = std::collections::BTreeSet::new();
    for (_, dst, _) in &spec.files {
        let mut p = Path::new(dst.trim_start_matches('/')).parent();
        while let Some(d) = p.filter(|d| !d.as_os_str().is_empty()) {
            dirs.insert(d.to_path_buf());
            p = d.parent();
        }
    }
    let mut files = spec.files.clone();
    files.sort_by(|a, b| a.1.cmp(&b.1));
    let mut b = tar::Builder::new(Vec::new());
    for d in dirs {
        let mut h = tar_header(tar::EntryType::Directory, 0o755, 0);
        b.append_data(&mut h, format!("{}/", d.display()), std::io::empty())
            .map_err(|e| Error::io("writing a layer", e))?;
    }
    for (src, dst, mode) in files {
        let bytes = std::fs::read(&src).map_err(|e| Error::io(format!("reading {}", src.display()), e))?;
        let mut h = tar_header(tar::EntryType::Regular, mode, bytes.len() as u64);
        b.append_data(&mut h, dst.trim_start_matches('/'), bytes.as_slice())
            .map_err(|e| Error::io("writing a layer", e))?;
    }
    b.into_inner().map_err(|e| Error::io("finishing a layer", e))
}

/// Writes `spec` as an OCI image layout archive to `out` (linux/[`architecture`], one uncompressed
/// layer; `index.json` names the image `spec.reference`, and `<repository>@<digest>` too
/// when [`ImageSpec::by_digest`], through the `io.containerd.image.name` annotation, which
/// `ctr images import` uses). Returns the
/// manifest's digest (`sha256:<hex>`), by which `<repository>@<digest>` names the image.
///
/// # Errors
/// [`Error::Io`] when a file cannot be read or the archive cannot be written.
pub fn write_archive(spec: &ImageSpec, out: &Path) -> Result<String, Error> {
    let layer = layer(spec)?;
    let layer_digest = sha256(&layer);
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": architecture(),
        "os": "linux",
        "config": {"Entrypoint": spec.entrypoint, "User": spec.user, "Env": spec.env},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created_by": "qdr-tests images::write_archive"}],
    }))
    .expect("JSON values serialize");
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": descriptor("application/vnd.oci.image.config.v1+json", &config),
        "layers": [descriptor("application/vnd.oci.image.layer.v1.tar", &layer)],
    }))
    .expect("JSON values serialize");
    let mut names = vec![spec.reference.clone()];
    if spec.by_digest {
        names.push(format!("{}@{}", repository_of(&spec.reference), sha256(&manifest)));
    }
    let index = index_json(&descriptor("application/vnd.oci.image.manifest.v1+json", &manifest), &names);

    let mut b = tar::Builder::new(Vec::new());
    let mut put = |name: String, bytes: &[u8]| -> Result<(), Error> {
        let mut h = tar_header(tar::EntryType::Regular, 0o644, bytes.len() as u64);
        b.append_data(&mut h, name, bytes).map_err(|e| Error::io("writing an image archive", e))
    };
    put("oci-layout".into(), br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    put("index.json".into(), &index)?;
    for blob in [&layer, &config, &manifest] {
        let digest = sha256(blob);
        put(format!("blobs/sha256/{}", digest.trim_start_matches("sha256:")), blob)?;
    }
    let bytes = b.into_inner().map_err(|e| Error::io("finishing an image archive", e))?;
    std::fs::write(out, bytes).map_err(|e| Error::io(format!("writing {}", out.display()), e))?;
    Ok(sha256(&manifest))
}

/// `index.json` naming the one manifest `descriptor` (its media type, digest and size) by
/// each of `names`: an entry per name with the `io.containerd.image.name` annotation `ctr
/// images import` reads, and for a name with a tag (not `repository@sha256:…`) the tag as
/// `org.opencontainers.image.ref.name`.
fn index_json(descriptor: &serde_json::Value, names: &[String]) -> Vec<u8> {
    let entries: Vec<serde_json::Value> = names
        .iter()
        .map(|name| {
            let mut one = serde_json::json!({
                "mediaType": descriptor["mediaType"], "digest": descriptor["digest"], "size": descriptor["size"],
                "annotations": {"io.containerd.image.name": name},
            });
            if !name.contains('@') {
                let tag = name.rsplit_once(':').map(|(_, t)| t).unwrap_or("latest");
                one["annotations"]["org.opencontainers.image.ref.name"] = tag.into();
            }
            one
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({"schemaVersion": 2, "manifests": entries}))
        .expect("JSON values serialize")
}

/// The repository of an image reference: without its tag or digest
/// (`localhost:5000/a/b:1` → `localhost:5000/a/b`).
fn repository_of(reference: &str) -> &str {
    let last = reference.rfind('/').map_or(0, |i| i + 1);
    let end = reference[last..].find(['@', ':']).map_or(reference.len(), |i| last + i);
    &reference[..end]
}

/// Reads back the image config and the layer's file list of an archive [`write_archive`]
/// wrote (for checks; follows `index.json` → manifest → config and layer).
///
/// # Errors
/// [`Error::Io`] when the archive cannot be read or is not such an archive.
pub fn read_config(archive: &Path) -> Result<ImageConfig, Error> {
    let (config, layer) = config_and_layer(archive)?;
    let mut files = Vec::new();
    let mut a = tar::Archive::new(layer.as_slice());
    for e in a.entries().map_err(|e| Error::io("reading a layer", e))? {
        let e = e.map_err(|e| Error::io("reading a layer", e))?;
        if e.header().entry_type() == tar::EntryType::Regular {
            let p = e.path().map_err(|e| Error::io("reading a layer", e))?;
            files.push(format!("/{}", p.display().to_string().trim_start_matches("./")));
        }
    }
    files.sort();
    let strings = |v: &serde_json::Value| -> Vec<String> {
        v.as_array().into_iter().flatten().filter_map(|s| s.as_str().map(String::from)).collect()
    };
    Ok(ImageConfig {
        entrypoint: strings(&config["config"]["Entrypoint"]),
        user: config["config"]["User"].as_str().unwrap_or_default().to_string(),
        cmd: strings(&config["config"]["Cmd"]),
        env: strings(&config["config"]["Env"]),
        working_dir: config["config"]["WorkingDir"].as_str().unwrap_or_default().to_string(),
        exposed_ports: config["config"]["ExposedPorts"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default(),
        files,
    })
}

/// The regular files `paths` (absolute) of an archive's layer, read in one pass, as
/// `path → (mode, contents)`; a path the layer has no regular file for is left out.
///
/// # Errors
/// [`Error::Io`] when the archive cannot be read or is not an OCI image layout archive.
pub fn layer_files(
    archive: &Path,
    paths: &[&str],
) -> Result<std::collections::BTreeMap<String, (u32, Vec<u8>)>, Error> {
    use std::io::Read;
    let (_, layer) = config_and_layer(archive)?;
    let mut found = std::collections::BTreeMap::new();
    let mut a = tar::Archive::new(layer.as_slice());
    for e in a.entries().map_err(|e| Error::io("reading a layer", e))? {
        let mut e = e.map_err(|e| Error::io("reading a layer", e))?;
        let p = format!("/{}", e.path().map_err(|e| Error::io("reading a layer", e))?.display());
        let p = p.replacen("/./", "/", 1);
        if e.header().entry_type() == tar::EntryType::Regular && paths.contains(&p.as_str()) {
            let mode = e.header().mode().map_err(|e| Error::io("reading a layer", e))?;
            let mut data = Vec::new();
            e.read_to_end(&mut data).map_err(|e| Error::io("reading a layer", e))?;
            found.insert(p, (mode, data));
        }
    }
    Ok(found)
}

/// Copies the OCI image layout archive `from` to `to`, its `index.json` naming the one image
/// it holds by each of `names` (one manifest entry per name, each with the
/// `io.containerd.image.name` annotation `ctr images import` reads, and a tag name also with
/// `org.opencontainers.image.ref.name`); every other entry is copied byte for byte, so the
/// manifest and its digest stay the same. A name is `repository:tag` or
/// `repository@sha256:<hex>`. Returns the manifest's digest (`sha256:<hex>`).
///
/// Used for a release: the router image `tools/router-image/build.sh` writes as
/// `qdr-operator.test/qdrouterd:1.19.0` becomes `<registry>/router:<version>` and
/// `<registry>/router@<digest>`, the names a manifest that pins it by digest asks a node for.
///
/// # Errors
/// [`Error::Io`] when `from` cannot be read or is not an archive with exactly one image in
/// its `index.json` (under any number of names), or `to` cannot be written.
pub fn rename_archive(from: &Path, to: &Path, names: &[String]) -> Result<String, Error> {
    use std::io::Read;
    let bad = |what: &str| Error::io(what.to_string(), std::io::Error::other(from.display().to_string()));
    let input = std::fs::File::open(from).map_err(|e| Error::io(format!("reading {}", from.display()), e))?;
    let output = std::fs::File::create(to).map_err(|e| Error::io(format!("writing {}", to.display()), e))?;
    let mut b = tar::Builder::new(std::io::BufWriter::new(output));
    let mut a = tar::Archive::new(std::io::BufReader::new(input));
    let mut digest = None;
    let write = |e| Error::io(format!("writing {}", to.display()), e);
    for e in a.entries().map_err(|e| Error::io(format!("reading {}", from.display()), e))? {
        let mut e = e.map_err(|e| Error::io(format!("reading {}", from.display()), e))?;
        let path = e.path().map_err(|e| Error::io("reading an entry's name", e))?.display().to_string();
        if path.trim_start_matches("./") != "index.json" {
            let mut h = e.header().clone();
            b.append_data(&mut h, &path, &mut e).map_err(write)?;
            continue;
        }
        let mut text = Vec::new();
        e.read_to_end(&mut text).map_err(|e| Error::io("reading index.json", e))?;
        let index: serde_json::Value =
            serde_json::from_slice(&text).map_err(|_| bad("its index.json is not JSON"))?;
        let Some(entry) = the_image(&index) else {
            return Err(bad("its index.json does not name exactly one image"));
        };
        digest = entry["digest"].as_str().map(String::from);
        let text = index_json(entry, names);
        let mut h = tar_header(tar::EntryType::Regular, 0o644, text.len() as u64);
        b.append_data(&mut h, "index.json", text.as_slice()).map_err(write)?;
    }
    b.into_inner().and_then(|mut w| std::io::Write::flush(&mut w)).map_err(write)?;
    digest.ok_or_else(|| bad("it has no index.json"))
}

/// The digest (`sha256:<hex>`) of the one image an OCI image layout archive holds (under
/// any number of names), from its `index.json`.
///
/// # Errors
/// [`Error::Io`] when the archive cannot be read or its `index.json` does not name exactly
/// one image.
pub fn archive_digest(archive: &Path) -> Result<String, Error> {
    use std::io::Read;
    let bad = |what: &str| Error::io(what.to_string(), std::io::Error::other(archive.display().to_string()));
    let file =
        std::fs::File::open(archive).map_err(|e| Error::io(format!("reading {}", archive.display()), e))?;
    let mut a = tar::Archive::new(std::io::BufReader::new(file));
    for e in a.entries().map_err(|e| Error::io(format!("reading {}", archive.display()), e))? {
        let mut e = e.map_err(|e| Error::io(format!("reading {}", archive.display()), e))?;
        let path = e.path().map_err(|e| Error::io("reading an entry's name", e))?.display().to_string();
        if path.trim_start_matches("./") == "index.json" {
            let mut text = Vec::new();
            e.read_to_end(&mut text).map_err(|e| Error::io("reading index.json", e))?;
            let index: serde_json::Value =
                serde_json::from_slice(&text).map_err(|_| bad("its index.json is not JSON"))?;
            return the_image(&index).map(|m| m["digest"].as_str().unwrap_or_default().to_string()).ok_or_else(|| {
                bad("its index.json does not name exactly one image (one manifest digest, under any number of names)")
            });
        }
    }
    Err(bad("it has no index.json"))
}

/// The manifest entry of `index.json` when every entry names the same manifest digest (one
/// image, under one name or several); `None` for no entry, no digest or two images.
fn the_image(index: &serde_json::Value) -> Option<&serde_json::Value> {
    let entries = index["manifests"].as_array()?;
    let first = entries.first()?;
    let digest = first["digest"].as_str()?;
    entries.iter().all(|e| e["digest"] == digest).then_some(first)
}

/// The image config and the (first) layer of an OCI image layout archive: `index.json` →
/// manifest → config and layer.
fn config_and_layer(archive: &Path) -> Result<(serde_json::Value, Vec<u8>), Error> {
    let bad = |what: &str| Error::io(what.to_string(), std::io::Error::other(archive.display().to_string()));
    let bytes = std::fs::read(archive).map_err(|e| Error::io(format!("reading {}", archive.display()), e))?;
    let mut entries = tar_entries(&bytes).map_err(|e| Error::io("reading an image archive", e))?;
    let digest = |v: &serde_json::Value| -> String {
        format!("blobs/sha256/{}", v.as_str().unwrap_or_default().trim_start_matches("sha256:"))
    };
    let json = |bytes: Option<&Vec<u8>>, what: &str| -> Result<serde_json::Value, Error> {
        serde_json::from_slice(bytes.ok_or_else(|| bad(&format!("no {what}")))?)
            .map_err(|_| bad(&format!("the {what} is not JSON")))
    };
    let index = json(entries.get("index.json"), "index.json")?;
    let manifest = json(entries.get(&digest(&index["manifests"][0]["digest"])), "manifest")?;
    let config = json(entries.get(&digest(&manifest["config"]["digest"])), "config")?;
    let layer = entries.remove(&digest(&manifest["layers"][0]["digest"])).ok_or_else(|| bad("no layer"))?;
    Ok((config, layer))
}

fn tar_entries(bytes: &[u8]) -> std::io::Result<std::collections::HashMap<String, Vec<u8>>> {
    use std::io::Read;
    let mut out = std::collections::HashMap::new();
    let mut a = tar::Archive::new(bytes);
    for e in a.entries()? {
        let mut e = e?;
        let name = e.path()?.display().to_string();
        let mut data = Vec::new();
        e.read_to_end(&mut data)?;
        out.insert(name, data);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_renamed_archive_keeps_its_digest_and_carries_every_name() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("prog");
        std::fs::write(&bin, b"a program").unwrap();
        let spec = ImageSpec {
            reference: "reg.example/a/prog:1".into(),
            files: vec![(bin, "/prog".into(), 0o755)],
            entrypoint: vec!["/prog".into()],
            user: "1:1".into(),
            ..ImageSpec::default()
        };
        let (first, renamed) = (dir.path().join("a.tar"), dir.path().join("b.tar"));
        let digest = write_archive(&spec, &first).unwrap();
        assert_eq!(archive_digest(&first).unwrap(), digest);
        let names = ["reg.example/b/prog:2".to_string(), format!("reg.example/b/prog@{digest}")];
        assert_eq!(rename_archive(&first, &renamed, &names).unwrap(), digest);
        let bytes = std::fs::read(&renamed).unwrap();
        let entries = tar_entries(&bytes).unwrap();
        let index: serde_json::Value = serde_json::from_slice(&entries["index.json"]).unwrap();
        let manifests = index["manifests"].as_array().unwrap();
        let named: Vec<&str> = manifests
            .iter()
            .map(|m| m["annotations"]["io.containerd.image.name"].as_str().unwrap())
            .collect();
        assert_eq!(named, names.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(manifests[0]["annotations"]["org.opencontainers.image.ref.name"], "2");
        assert!(
            manifests[1]["annotations"].get("org.opencontainers.image.ref.name").is_none(),
            "a digest has no tag"
        );
        assert!(manifests.iter().all(|m| m["digest"] == digest.as_str()));
        // The image itself is unchanged: the same config and files read back.
        assert_eq!(read_config(&renamed).unwrap(), read_config(&first).unwrap());
        // Written with both names at once, the archive says the same.
        let both = ImageSpec { reference: names[0].clone(), by_digest: true, ..spec.clone() };
        let written = dir.path().join("c.tar");
        assert_eq!(write_archive(&both, &written).unwrap(), digest);
        assert_eq!(
            tar_entries(&std::fs::read(&written).unwrap()).unwrap()["index.json"],
            entries["index.json"]
        );
        assert_eq!(repository_of("localhost:5000/a/b:1"), "localhost:5000/a/b");
        assert_eq!(repository_of("reg/x@sha256:ab"), "reg/x");
        assert_eq!(repository_of("x"), "x");
        // Several names of one image are still one image; two images are not.
        assert_eq!(archive_digest(&renamed).unwrap(), digest);
        let two = serde_json::json!({"manifests": [{"digest": digest}, {"digest": "sha256:00"}]});
        assert!(the_image(&two).is_none());
    }

    #[test]
    fn an_archive_reads_back_with_its_entrypoint_user_and_files() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("prog");
        std::fs::write(&bin, b"not really a program").unwrap();
        let spec = ImageSpec {
            reference: "qdr-operator.test/x:1".into(),
            files: vec![(bin.clone(), "/a/b/prog".into(), 0o755), (bin, "/prog".into(), 0o755)],
            entrypoint: vec!["/prog".into(), "--flag".into()],
            user: "1:2".into(),
            env: vec!["PATH=/bin".into()],
            by_digest: false,
        };
        let out = dir.path().join("x.tar");
        write_archive(&spec, &out).unwrap();
        let first = std::fs::read(&out).unwrap();
        let read = read_config(&out).unwrap();
        assert_eq!(read.entrypoint, ["/prog", "--flag"]);
        assert_eq!(read.user, "1:2");
        assert_eq!(read.env, ["PATH=/bin"]);
        assert_eq!(read.files, ["/a/b/prog", "/prog"]);
        // Reproducible: the same spec gives the same bytes.
        write_archive(&spec, &out).unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), first);
    }

    #[test]
    fn the_dockerfiles_read_back_with_both_stages() {
        let text = "# c\nFROM rust:1 AS build\nRUN a \\\n  && b\nCOPY . .\nFROM scratch\nCOPY --from=build /rootfs/ /\nUSER 1:2\nENTRYPOINT [\"/x\"]\n";
        let d = parse_dockerfile(text).unwrap();
        assert_eq!(d.build_base, "rust:1");
        assert_eq!(d.build_runs, ["a && b"]);
        assert_eq!(d.final_base, "scratch");
        assert_eq!(d.final_copies, [vec!["--from=build", "/rootfs/", "/"]]);
        assert_eq!((d.user.as_str(), d.entrypoint.as_slice()), ("1:2", ["/x".to_string()].as_slice()));
        assert!(parse_dockerfile("FROM scratch\nUSER 1\n").is_err(), "one stage, no entrypoint");
        for image in [CONTROLLER, WEBHOOK] {
            let d = dockerfile(&image).unwrap();
            assert_eq!(d.entrypoint, [format!("/{}", image.binary)], "{}", image.name);
        }
    }

    #[test]
    fn a_dynamic_binary_brings_its_loader_and_libraries() {
        let dir = tempfile::tempdir().unwrap();
        let rootfs = dir.path().join("rootfs");
        let out = Command::new(rootfs_script()).arg("/bin/sh").arg(&rootfs).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let files = tree_files(&rootfs).unwrap();
        let paths: Vec<&str> = files.iter().map(|(_, p, _)| p.as_str()).collect();
        assert!(paths.contains(&"/sh"), "{paths:?}");
        assert!(paths.iter().any(|p| p.ends_with("/libc.so.6")), "{paths:?}");
        assert!(paths.iter().any(|p| p.contains("ld-linux")), "{paths:?}");
        assert!(files.iter().all(|(_, _, mode)| *mode == 0o755));
        // Not into a directory that holds something already.
        let again = Command::new(rootfs_script()).arg("/bin/sh").arg(&rootfs).output().unwrap();
        assert!(!again.status.success());
    }
}
