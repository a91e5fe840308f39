//! The project's canonical home, read from `deploy/project.env` (the one place it is named;
//! the Makefile includes the same file): the image registry, the source repository, the
//! chart repository and the docs site. Every image name, link and URL the project writes is
//! spelled from these; `api/tests/home.rs` finds any other spelling.

/// The text of `deploy/project.env`, compiled in.
const PROJECT_ENV: &str = include_str!("../../deploy/project.env");

/// The value of `key` in `deploy/project.env` (`KEY=value` lines; `#` comments).
///
/// # Panics
/// When the file does not name `key`: a build of this crate with a broken file.
pub fn value(key: &str) -> &'static str {
    PROJECT_ENV
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .find_map(|l| l.split_once('=').filter(|(k, _)| k.trim() == key).map(|(_, v)| v.trim()))
        .unwrap_or_else(|| panic!("deploy/project.env does not name {key}"))
}

/// Where the operator's images are pushed (`QDR_IMAGE_REGISTRY`, e.g. `ghcr.io/qdr-operator`):
/// the controller's image is `<registry>/controller`, the webhook's `<registry>/webhook`.
pub fn image_registry() -> &'static str {
    value("QDR_IMAGE_REGISTRY")
}

/// The image repository of component `name` (`controller`, `webhook`):
/// `<image_registry>/<name>`.
pub fn image_repository(name: &str) -> String {
    format!("{}/{name}", image_registry())
}

/// The source repository's web address (`QDR_SOURCE_URL`).
pub fn source_url() -> &'static str {
    value("QDR_SOURCE_URL")
}

/// The published book (`QDR_DOCS_URL`): `docs/<page>.md` is `<docs_url>/<page>.html`.
pub fn docs_url() -> &'static str {
    value("QDR_DOCS_URL")
}

/// The OCI repository the Helm chart is pushed to (`QDR_CHART_REPOSITORY`).
pub fn chart_repository() -> &'static str {
    value("QDR_CHART_REPOSITORY")
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_key_is_named_and_fully_qualified() {
        assert!(super::source_url().starts_with("https://"));
        assert!(super::docs_url().starts_with("https://"));
        assert!(super::chart_repository().starts_with("oci://"));
        let host = super::image_registry().split('/').next().unwrap();
        assert!(host.contains('.'), "a registry host, not a Docker Hub short name: {host}");
        assert_eq!(super::image_repository("webhook"), format!("{}/webhook", super::image_registry()));
    }
}
