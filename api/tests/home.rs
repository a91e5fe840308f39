//! The project has one home (`deploy/project.env`, [`qdr_api::project`]): every image name,
//! source link, docs link and remote kustomize URL of the repository is spelled from it, and
//! the places that name it say exactly what the file says.

use std::path::{Path, PathBuf};

use qdr_api::project;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every file of the repository but the build output (`target/`, and `dist/` of `make release`), the Git directory, the Go operator's
/// own files kept as test data, and Go module files.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            if !["target", "dist", ".git", "go-operator", "node_modules"].contains(&name.as_str()) {
                files(&path, out);
            }
        } else if name != "go.mod" && name != "go.sum" {
            // (A Go module's own path, under `example.invalid`, names a
            // local build module, not a place.)
            out.push(path);
        }
    }
}

/// Spellings of the project's home that are wrong wherever they appear: the Go operator's
/// repository paths (this project's pages and manifests are not there), placeholders, and
/// the operator's images by a short name (Docker Hub's, refused by CRI-O in enforcing mode)
/// or another registry.
fn wrong(line: &str) -> Option<String> {
    let registry = project::image_registry();
    // Written in two parts, so that this file does not spell them itself.
    for bad in [
        concat!("github.com/interconnectedcloud/qdr-operator", "/blob"),
        concat!("github.com/interconnectedcloud/qdr-operator", "/tree"),
        concat!("github.com/interconnectedcloud/qdr-operator", "/deploy"),
        concat!("example.invalid", "/qdr-operator"),
    ] {
        if line.contains(bad) {
            return Some(format!("`{bad}`"));
        }
    }
    for component in ["controller", "webhook"] {
        let short = format!("qdr-operator/{component}");
        for (i, _) in line.match_indices(&short) {
            // The token around it: what a manifest, a flag or a sentence names.
            let start =
                line[..i].rfind(|c: char| c.is_whitespace() || "`\"'=(,[{".contains(c)).map_or(0, |s| s + 1);
            let token = &line[start..];
            if !token.starts_with(&format!("{registry}/{component}")) {
                return Some(format!(
                    "the image `{}` (not {registry}/{component})",
                    &line[start..i + short.len()]
                ));
            }
        }
    }
    None
}

#[test]
fn no_file_spells_the_home_another_way() {
    let mut all = Vec::new();
    files(&root(), &mut all);
    let mut found = Vec::new();
    for path in &all {
        let Ok(text) = std::fs::read_to_string(path) else { continue };
        for (n, line) in text.lines().enumerate() {
            if let Some(what) = wrong(line) {
                found.push(format!(
                    "{}:{}: {what}",
                    path.strip_prefix(root()).unwrap_or(path).display(),
                    n + 1
                ));
            }
        }
    }
    assert!(all.len() > 200, "only {} files read", all.len());
    assert!(found.is_empty(), "spelled other than deploy/project.env says:\n{}", found.join("\n"));
}

#[test]
fn the_check_finds_what_it_is_for() {
    let registry = project::image_registry();
    let (short, old_repo) = ("qdr-operator", "github.com/interconnectedcloud/qdr-operator");
    assert!(wrong(&format!("          image: {short}/controller")).is_some());
    assert!(wrong(&format!("  repository: docker.io/{short}/webhook")).is_some());
    assert!(wrong(&format!("runbook_url: https://{old_repo}/blob/main/docs/x.md")).is_some());
    assert!(wrong(&format!("          image: {registry}/controller")).is_none());
    assert!(
        wrong("replaces interconnectedcloud/qdr-operator (github.com/interconnectedcloud/qdr-operator)")
            .is_none()
    );
    assert!(wrong("kubectl logs -n qdr-operator deploy/qdr-controller").is_none());
}

#[test]
fn the_places_that_name_the_home_say_what_project_env_says() {
    let read = |p: &str| std::fs::read_to_string(root().join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
    let (source, docs) = (project::source_url(), project::docs_url());
    let controller = project::image_repository("controller");
    let webhook = project::image_repository("webhook");
    let expect = [
        ("Cargo.toml", format!("repository = \"{source}\"")),
        ("deploy/base/kustomization.yaml", format!("- name: {controller}")),
        ("deploy/base/kustomization.yaml", format!("- name: {webhook}")),
        ("deploy/base/controller.yaml", format!("image: {controller}")),
        ("deploy/base/webhook.yaml", format!("image: {webhook}")),
        ("deploy/helm/qdr-operator/values.yaml", format!("repository: {controller}")),
        ("deploy/helm/qdr-operator/values.yaml", format!("repository: {webhook}")),
        ("deploy/helm/qdr-operator/Chart.yaml", format!("home: {source}")),
        ("deploy/olm/csv.yaml", format!("repository: {source}")),
        ("deploy/olm/csv.yaml", format!("url: {docs}")),
        ("docs/book.toml", format!("git-repository-url = \"{source}\"")),
        ("SECURITY.md", format!("<{source}/security/advisories/new>")),
        ("deploy/components/monitoring/prometheus-rule.yaml", format!("runbook_url: {docs}/runbooks.html#")),
        (
            "deploy/helm/qdr-operator/files/prometheus-rule.yaml",
            format!("runbook_url: {docs}/runbooks.html#"),
        ),
    ];
    for (file, text) in expect {
        assert!(read(file).contains(&text), "{file} does not say `{text}`");
    }
    let source_path = source.trim_start_matches("https://");
    assert!(
        read("docs/monitoring.md").contains(&format!("{source_path}/deploy?ref=")),
        "the remote kustomize base"
    );
    let makefile = read("Makefile");
    assert!(makefile.contains("include deploy/project.env"), "the Makefile reads the home");
}
