//! Writes the OLM bundle (`bundle/`) from `deploy/` ([`qdr_api::bundle`]); `make bundle` runs
//! it from the repository root. Files of an earlier bundle that the new one lacks are removed.
//!
//!     bundlegen [REPOSITORY_ROOT]     (default: the current directory)
//!
//! Exits 1 with the reason when `deploy/` cannot be read or is not shaped as expected.

use std::path::PathBuf;

fn main() {
    let root = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| ".".into()));
    let files = qdr_api::bundle::Sources::read(&root).and_then(|s| qdr_api::bundle::render(&s));
    let files = match files {
        Ok(f) => f,
        Err(e) => {
            eprintln!("bundlegen: {e}");
            std::process::exit(1);
        }
    };
    let dir = root.join(qdr_api::bundle::BUNDLE_DIR);
    let write = || -> std::io::Result<()> {
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        for (rel, text) in &files {
            let path = dir.join(rel);
            std::fs::create_dir_all(path.parent().expect("a file in a directory"))?;
            std::fs::write(&path, text)?;
        }
        Ok(())
    };
    if let Err(e) = write() {
        eprintln!("bundlegen: writing {}: {e}", dir.display());
        std::process::exit(1);
    }
    println!("{}", dir.display());
}
