//! The oldest Kubernetes the controller runs against, checked at start.
//!
//! The controller creates children with a conditional server-side apply (`resourceVersion:
//! "1"`, see [`crate::reconcile`]'s apply stage): refused with `409 Conflict` when any object
//! holds the name. Older API servers answer that request for Services with `500 Internal
//! Server Error` ("resourceVersion should not be set on objects to be created", kubernetes
//! issue 106745), so a Service could never be created. It is tested here against v1.33,
//! the version `k8s-openapi`'s `v1_33` feature targets, and the CRD's CEL rules need a
//! recent server too; so v1.33 is the oldest supported, and an older server stops the
//! controller at start with a message saying so, instead of failing every reconcile.

use k8s_openapi::apimachinery::pkg::version::Info;

/// The oldest supported Kubernetes: (major, minor).
pub const OLDEST: (u32, u32) = (1, 33);

/// Checks that `info` (the API server's `/version`) is [`OLDEST`] or newer. A minor such as
/// `33+` (some providers' builds) counts by its digits.
///
/// # Errors
/// A sentence naming the server's version and the oldest supported, or saying the version
/// cannot be read.
pub fn check(info: &Info) -> Result<(), String> {
    let number = |s: &str| s.chars().take_while(char::is_ascii_digit).collect::<String>().parse::<u32>().ok();
    let (Some(major), Some(minor)) = (number(&info.major), number(&info.minor)) else {
        return Err(format!(
            "cannot read the API server's version (major {:?}, minor {:?}, {})",
            info.major, info.minor, info.git_version
        ));
    };
    if (major, minor) < OLDEST {
        return Err(format!(
            "the API server is Kubernetes {} ({major}.{minor}); qdr-controller needs {}.{} or newer (older API \
             servers refuse its conditional creates of Services with 500, kubernetes issue 106745)",
            info.git_version, OLDEST.0, OLDEST.1
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One Kubernetes minimum everywhere an install states one: the chart's `kubeVersion`,
    /// the CSV's `minKubeVersion` and the install page (the version the tests run) say
    /// [`OLDEST`].
    #[test]
    fn every_install_states_the_same_oldest_kubernetes() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
        let (major, minor) = OLDEST;
        let chart = read("deploy/helm/qdr-operator/Chart.yaml");
        assert!(
            chart.contains(&format!("kubeVersion: \">={major}.{minor}.0-0\"")),
            "Chart.yaml's kubeVersion"
        );
        for csv in ["deploy/olm/csv.yaml", "bundle/manifests/qdr-operator.clusterserviceversion.yaml"] {
            let text = read(csv);
            let line = text.lines().find(|l| l.trim_start().starts_with("minKubeVersion:")).expect(csv);
            assert_eq!(
                line.split(':').nth(1).unwrap().trim().trim_matches('"'),
                format!("{major}.{minor}.0"),
                "{csv}"
            );
        }
        assert!(
            read("docs/install.md").contains(&format!("Kubernetes **{major}.{minor}** (what the tests run")),
            "docs/install.md"
        );
    }

    fn info(major: &str, minor: &str) -> Info {
        Info {
            major: major.into(),
            minor: minor.into(),
            git_version: format!("v{major}.{minor}.0"),
            ..Info::default()
        }
    }

    #[test]
    fn servers_older_than_1_33_are_refused_with_both_versions_named() {
        for ok in [("1", "33"), ("1", "34"), ("1", "33+"), ("2", "0")] {
            assert_eq!(check(&info(ok.0, ok.1)), Ok(()), "{ok:?}");
        }
        let old = check(&info("1", "22")).unwrap_err();
        assert!(old.contains("Kubernetes v1.22.0") && old.contains("needs 1.33 or newer"), "{old}");
        assert!(check(&info("1", "32+")).is_err());
        assert!(check(&info("", "")).unwrap_err().starts_with("cannot read"));
    }
}
