//! Writes a release of the operator into a directory ([`qdr_tests::release`]); `make release
//! VERSION=… REGISTRY=…` runs it with the release binaries and the test tools.
//!
//!     qdr-release --version VERSION --registry REGISTRY --out DIR
//!                 --binaries DIR --router-archive FILE (--syft FILE | --no-sbom)
//!     qdr-release --version VERSION --registry REGISTRY --out DIR
//!                 --digests controller=sha256:…,webhook=sha256:…,router=sha256:…
//!
//!                 [--kubectl FILE] [--helm FILE]
//!
//! The first writes everything (images, SBOMs, manifests, chart, bundle, checksums) into an
//! emptied DIR; the second only the manifests, chart, bundle, images.txt and checksums, for
//! images published already (the release workflow's multi-architecture indexes), keeping
//! DIR's other files. kubectl and helm are the ones named, else the test tools' (`$QDR_TESTBIN`,
//! or the cache of `tools/testbin/build.sh`). Prints each file with its size, then the images by digest.
//! Exits 2 on a usage error, 1 with the reason when the release cannot be written.

use std::collections::BTreeMap;
use std::path::PathBuf;

use qdr_tests::release::{Images, Options};

fn usage(why: &str) -> ! {
    eprintln!(
        "qdr-release: {why}\nusage: qdr-release --version VERSION --registry REGISTRY --out DIR \
         (--binaries DIR --router-archive FILE (--syft FILE | --no-sbom) | --digests controller=D,webhook=D,router=D)"
    );
    std::process::exit(2)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut flags: BTreeMap<String, String> = BTreeMap::new();
    let mut no_sbom = false;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--no-sbom" => no_sbom = true,
            "--version" | "--registry" | "--binaries" | "--router-archive" | "--out" | "--syft"
            | "--digests" => {
                let value = args.next().unwrap_or_else(|| usage(&format!("{a} needs a value")));
                flags.insert(a.trim_start_matches("--").to_string(), value);
            }
            other => usage(&format!("unknown argument {other}")),
        }
    }
    let required =
        |v: Option<String>, name: &str| v.unwrap_or_else(|| usage(&format!("--{name} is required")));
    let (version, registry, out) = (flags.remove("version"), flags.remove("registry"), flags.remove("out"));
    let images = match flags.remove("digests") {
        Some(list) => {
            let mut digests = BTreeMap::new();
            for pair in list.split(',') {
                let (name, digest) = pair
                    .split_once('=')
                    .unwrap_or_else(|| usage(&format!("--digests: {pair:?} is not NAME=DIGEST")));
                digests.insert(name.to_string(), digest.to_string());
            }
            if let Some(extra) =
                ["binaries", "router-archive", "syft"].into_iter().find(|f| flags.contains_key(*f))
            {
                usage(&format!("--{extra} builds images; --digests names published ones: not both"));
            }
            Images::Published(digests)
        }
        None => {
            let syft = flags.remove("syft").map(PathBuf::from);
            if syft.is_none() && !no_sbom {
                usage("say --syft FILE, or --no-sbom for a release without SBOMs");
            }
            Images::Build {
                binaries: PathBuf::from(required(flags.remove("binaries"), "binaries")),
                router_archive: PathBuf::from(required(flags.remove("router-archive"), "router-archive")),
                syft,
            }
        }
    };
    let fail = |e: qdr_tests::Error| -> ! {
        eprintln!("qdr-release: {e}");
        std::process::exit(1)
    };
    // A tool named on the command line, else the test tools' own.
    let mut tool = |name: &str| {
        flags.remove(name).map(PathBuf::from).unwrap_or_else(|| {
            qdr_tests::Testbin::locate().and_then(|t| t.require(name)).unwrap_or_else(|e| fail(e))
        })
    };
    let (kubectl, helm) = (tool("kubectl"), tool("helm"));
    let options = Options {
        version: required(version, "version"),
        registry: required(registry, "registry"),
        out: PathBuf::from(required(out, "out")),
        kubectl,
        helm,
        images,
    };
    let release = qdr_tests::release::write(&options).unwrap_or_else(|e| fail(e));
    for (file, size) in &release.files {
        println!("{size:>12}  {}/{file}", options.out.display());
    }
    for image in &release.images {
        println!("{}", image.pinned());
    }
}
