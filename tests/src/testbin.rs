//! Locating the pinned control-plane binaries built by `make testbin`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Error;

/// Environment variable that points at a directory holding `etcd`, `kube-apiserver`,
/// `kube-controller-manager`, `kube-scheduler`, `kubectl`, `kwok`, `kubelet`, `kube-proxy`,
/// `pause`, `helm`, `coredns`, `prometheus-operator` (with its CRDs in `monitoring-crds/`),
/// `prometheus`, `promtool` and [`KWOK_STAGES`]. When unset, the directory that
/// `tools/testbin/build.sh --print` names (the build cache) is used.
pub const TESTBIN_ENV: &str = "QDR_TESTBIN";

/// The command that builds the binaries, quoted in every "missing binary" error.
pub const BUILD_HINT: &str = "make testbin";

/// kwok's stage definitions (YAML, assembled by `tools/testbin/build.sh` from the kwok module).
pub const KWOK_STAGES: &str = "kwok-stages.yaml";

/// The files of the `core` group (`tools/testbin/build.sh core`), which every control plane
/// runs and [`Testbin::from_dir`] therefore requires. The other groups (`node`, `helm`,
/// `monitoring`, `olm`) are built after them and checked when used ([`Testbin::require`]),
/// so a test of the control plane alone can start before they exist.
pub const CORE: [&str; 7] =
    ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok", KWOK_STAGES];

/// The binaries the control plane needs, all from one pinned build.
#[derive(Debug, Clone)]
pub struct Testbin {
    dir: PathBuf,
}

impl Testbin {
    /// Finds the binaries: `$QDR_TESTBIN` if set, else the cache directory of
    /// `tools/testbin/build.sh`.
    ///
    /// # Errors
    /// [`Error::MissingBinary`] when the directory or any binary in it is missing; the
    /// message names the missing path and the command that builds it.
    pub fn locate() -> Result<Self, Error> {
        match std::env::var_os(TESTBIN_ENV) {
            Some(d) => Self::from_dir(PathBuf::from(d)),
            None => Self::from_dir(Self::cache_dir()?),
        }
    }

    /// Uses the binaries in `dir`.
    ///
    /// # Errors
    /// [`Error::MissingBinary`] naming the first missing file of [`CORE`] and the build
    /// command.
    pub fn from_dir(dir: PathBuf) -> Result<Self, Error> {
        let tb = Testbin { dir };
        for name in CORE {
            tb.require(name)?;
        }
        Ok(tb)
    }

    /// Full path of a file `tools/testbin/build.sh` writes (a binary, or a directory such as
    /// `olm-crds`), once it is there.
    ///
    /// # Errors
    /// [`Error::MissingBinary`] naming the path and the build command when it is not.
    pub fn require(&self, name: &str) -> Result<PathBuf, Error> {
        let p = self.path(name);
        if p.exists() { Ok(p) } else { Err(Error::MissingBinary { path: p, hint: BUILD_HINT }) }
    }

    /// The directory the binaries are in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Full path of a file `tools/testbin/build.sh` writes, whether or not it is there (see [`Self::require`]).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The cache directory `tools/testbin/build.sh --print` names for the pinned versions.
    fn cache_dir() -> Result<PathBuf, Error> {
        let script = workspace_root().join("tools/testbin/build.sh");
        let out = Command::new("bash")
            .arg(&script)
            .arg("--print")
            .output()
            .map_err(|e| Error::Io { what: format!("running {}", script.display()), source: e })?;
        if !out.status.success() {
            return Err(Error::MissingBinary { path: script, hint: BUILD_HINT });
        }
        let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Ok(PathBuf::from(dir))
    }
}

/// The repository root (the directory holding the workspace `Cargo.toml`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests crate lives one level below the workspace root")
        .to_path_buf()
}
