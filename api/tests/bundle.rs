//! The committed OLM bundle (`bundle/`) is what `make bundle` makes from `deploy/` now: every
//! file equal, none missing, none left over.

use std::path::{Path, PathBuf};

fn files_under(dir: &Path, root: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path: PathBuf = entry.unwrap().path();
        if path.is_dir() {
            files_under(&path, root, out);
        } else {
            out.push(path.strip_prefix(root).unwrap().display().to_string());
        }
    }
}

#[test]
fn committed_bundle_is_fresh() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let want = qdr_api::bundle::render(&qdr_api::bundle::Sources::read(&root).unwrap()).unwrap();
    let dir = root.join(qdr_api::bundle::BUNDLE_DIR);
    let mut have = Vec::new();
    if dir.is_dir() {
        files_under(&dir, &dir, &mut have);
    }
    have.sort();
    let stale = "is stale: run `make bundle` and commit bundle/";
    assert_eq!(have, want.keys().cloned().collect::<Vec<_>>(), "bundle/'s files {stale}");
    for (rel, text) in &want {
        let committed = std::fs::read_to_string(dir.join(rel)).unwrap_or_default();
        assert!(&committed == text, "bundle/{rel} {stale}");
    }
}
