//! Container images for the real test node, built from files on this machine: no registry
//! can be reached and no image builder runs here, so each image is written as an OCI image
//! layout archive (one uncompressed layer, an image config, a manifest, `index.json`) that
//! `ctr images import` takes.
//!
//! - [`operator_image`]: the controller or the webhook from the workspace's release binary,
//!   with the entrypoint, user and path that `deploy/docker/<name>.Dockerfile` gives its
//!   published (static musl) image, plus exactly the shared libraries the glibc binary loads
//!   (`ldd`), at the paths the dynamic loader looks in.
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

/// One of the operator's two images, as `deploy/docker/<name>.Dockerfile` describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OperatorImage {
    /// `controller` or `webhook`: the Dockerfile's and the image's short name.
    pub name: &'static str,
    /// The cargo binary (`target/release/<binary>`).
    pub binary: &'static str,
    /// Where the binary sits in the image and what the entrypoint runs.
    pub path: &'static str,
    /// `uid:gid` the image runs as (`USER`).
    pub user: &'static str,
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
}

/// The controller image: `/qdr-controller` as user 65532:65532.
pub const CONTROLLER: OperatorImage = OperatorImage {
    name: "controller",
    binary: "qdr-controller",
    path: "/qdr-controller",
    user: "65532:65532",
};

/// The webhook image: `/qdr-webhook` as user 65532:65532.
pub const WEBHOOK: OperatorImage =
    OperatorImage { name: "webhook", binary: "qdr-webhook", path: "/qdr-webhook", user: "65532:65532" };

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

/// The release binary of `image` (`<target dir>/release/<binary>`).
///
/// # Errors
/// [`Error::MissingBinary`] naming `cargo build --release` when it has not been built.
pub fn release_binary(image: &OperatorImage) -> Result<PathBuf, Error> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::workspace_root().join("target"));
    let path = target.join("release").join(image.binary);
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::MissingBinary { path, hint: "cargo build --release --locked --bins" })
    }
}

/// The spec of `image` from its release binary: the binary at [`OperatorImage::path`]
/// (0755), the libraries [`shared_libraries`] finds, entrypoint `[path]`, the image's user.
///
/// # Errors
/// As [`release_binary`] and [`shared_libraries`].
pub fn operator_image(image: &OperatorImage) -> Result<ImageSpec, Error> {
    let binary = release_binary(image)?;
    let mut files = vec![(binary.clone(), image.path.to_string(), 0o755)];
    files.extend(shared_libraries(&binary)?.into_iter().map(|(src, dst)| (src, dst, 0o755)));
    Ok(ImageSpec {
        reference: image.reference(),
        files,
        entrypoint: vec![image.path.to_string()],
        user: image.user.to_string(),
    })
}

/// The sandbox image [`PAUSE_IMAGE`]: `/pause` (static) as user 65535:65535.
pub fn pause_image(pause: &Path) -> ImageSpec {
    ImageSpec {
        reference: PAUSE_IMAGE.into(),
        files: vec![(pause.to_path_buf(), "/pause".into(), 0o755)],
        entrypoint: vec!["/pause".into()],
        user: "65535:65535".into(),
    }
}

/// The shared libraries `binary` loads, as `(file on this machine, path in the image)`:
/// every `name => /path` line of `ldd` at the path named there, and the dynamic loader at
/// the absolute path the binary asks for (its `PT_INTERP`, which ldd prints alone). Symbolic
/// links are followed: the image holds the file under the name the loader looks for. An empty
/// list for a static binary.
///
/// # Errors
/// [`Error::Io`] when `ldd` cannot run; [`Error::Startup`] when it names a library it did
/// not find (`not found`).
pub fn shared_libraries(binary: &Path) -> Result<Vec<(PathBuf, String)>, Error> {
    let out = Command::new("ldd").arg(binary).output().map_err(|e| Error::io("running ldd", e))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut libs = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.contains("not found") {
            return Err(Error::Startup { what: format!("{}: {line}", binary.display()), logs: text.into() });
        }
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.trim().split(' ').next().unwrap_or(""),
            None => line.split(' ').next().unwrap_or(""),
        };
        if path.starts_with('/') {
            let real = std::fs::canonicalize(path).map_err(|e| Error::io(format!("resolving {path}"), e))?;
            libs.push((real, path.to_string()));
        }
    }
    libs.sort_by(|a, b| a.1.cmp(&b.1));
    libs.dedup_by(|a, b| a.1 == b.1);
    Ok(libs)
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

/// Writes `spec` as an OCI image layout archive to `out` (linux/amd64, one uncompressed
/// layer; `index.json` names the image `spec.reference` through the
/// `io.containerd.image.name` annotation, which `ctr images import` uses).
///
/// # Errors
/// [`Error::Io`] when a file cannot be read or the archive cannot be written.
pub fn write_archive(spec: &ImageSpec, out: &Path) -> Result<(), Error> {
    let layer = layer(spec)?;
    let layer_digest = sha256(&layer);
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": spec.entrypoint, "User": spec.user},
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
    let tag = spec.reference.rsplit_once(':').map(|(_, t)| t).unwrap_or("latest");
    let mut index_entry = descriptor("application/vnd.oci.image.manifest.v1+json", &manifest);
    index_entry["annotations"] = serde_json::json!({
        "io.containerd.image.name": spec.reference,
        "org.opencontainers.image.ref.name": tag,
    });
    let index = serde_json::to_vec(&serde_json::json!({"schemaVersion": 2, "manifests": [index_entry]}))
        .expect("JSON values serialize");

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
    std::fs::write(out, bytes).map_err(|e| Error::io(format!("writing {}", out.display()), e))
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
    fn an_archive_reads_back_with_its_entrypoint_user_and_files() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("prog");
        std::fs::write(&bin, b"not really a program").unwrap();
        let spec = ImageSpec {
            reference: "qdr-operator.test/x:1".into(),
            files: vec![(bin.clone(), "/a/b/prog".into(), 0o755), (bin, "/prog".into(), 0o755)],
            entrypoint: vec!["/prog".into(), "--flag".into()],
            user: "1:2".into(),
        };
        let out = dir.path().join("x.tar");
        write_archive(&spec, &out).unwrap();
        let first = std::fs::read(&out).unwrap();
        let read = read_config(&out).unwrap();
        assert_eq!(read.entrypoint, ["/prog", "--flag"]);
        assert_eq!(read.user, "1:2");
        assert_eq!(read.files, ["/a/b/prog", "/prog"]);
        // Reproducible: the same spec gives the same bytes.
        write_archive(&spec, &out).unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), first);
    }

    #[test]
    fn a_dynamic_binary_brings_its_loader_and_libraries() {
        let libs = shared_libraries(Path::new("/bin/sh")).unwrap();
        let paths: Vec<&str> = libs.iter().map(|(_, p)| p.as_str()).collect();
        assert!(paths.iter().any(|p| p.ends_with("/libc.so.6")), "{paths:?}");
        assert!(paths.iter().any(|p| p.contains("ld-linux")), "{paths:?}");
        assert!(libs.iter().all(|(src, _)| src.is_file()));
    }
}
