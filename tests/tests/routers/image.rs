//! The router image as `qdr-image`'s Dockerfile lays it out (no cluster needed).

use qdr_tests::routers::{self};

/// The Dockerfile of the published image, from the router sources' `qdr-image/`.
fn dockerfile() -> (String, std::path::PathBuf) {
    let out = std::process::Command::new(routers::build_script()).arg("--sources").output().unwrap();
    assert!(out.status.success(), "router sources: {}", String::from_utf8_lossy(&out.stderr));
    let dir = std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    (std::fs::read_to_string(dir.join("qdr-image/Dockerfile")).unwrap(), dir.join("qdr-image"))
}

#[test]
fn the_router_image_is_laid_out_as_qdr_images_dockerfile_says() {
    let archive = routers::image_archive().expect("the router image");
    let image = qdr_tests::images::read_config(&archive).unwrap();
    let (dockerfile, qdr_image) = dockerfile();
    let mut workdir = String::new();
    let mut copied = Vec::new();
    for line in dockerfile.lines() {
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        match word {
            "CMD" => {
                let cmd: Vec<String> = serde_json::from_str(rest).expect("CMD in exec form");
                assert_eq!(image.cmd, cmd);
            }
            "ENV" => {
                let (k, v) = rest.split_once('=').unwrap();
                let v = if v.starts_with("${") { "1.19.0" } else { v }; // ARG version: the tag
                assert!(image.env.contains(&format!("{k}={v}")), "{k}={v} not in {:?}", image.env);
            }
            "WORKDIR" => workdir = rest.to_string(),
            "EXPOSE" => {
                let mut want: Vec<String> = rest.split(' ').map(|p| format!("{p}/tcp")).collect();
                want.sort();
                assert_eq!(image.exposed_ports, want);
            }
            "COPY" => copied.push(rest.split(' ').map(String::from).collect::<Vec<_>>()),
            _ => {}
        }
    }
    assert_eq!(image.working_dir, workdir, "the last WORKDIR");
    assert_eq!(copied, [vec!["./scripts/*".to_string(), "/home/qdrouterd/bin/".to_string()]]);
    let scripts: Vec<(String, std::path::PathBuf)> = std::fs::read_dir(qdr_image.join("scripts"))
        .unwrap()
        .flatten()
        .map(|s| (format!("/home/qdrouterd/bin/{}", s.file_name().to_string_lossy()), s.path()))
        .collect();
    let paths: Vec<&str> = scripts.iter().map(|(p, _)| p.as_str()).collect();
    let in_image = qdr_tests::images::layer_files(&archive, &paths).unwrap();
    for (path, source) in &scripts {
        let (mode, bytes) = in_image.get(path).unwrap_or_else(|| panic!("{path} missing"));
        assert_eq!(bytes, &std::fs::read(source).unwrap(), "{path} differs from qdr-image's");
        assert_eq!(mode & 0o111, 0o111, "{path} is not executable");
    }
    // What the scripts and the router need from the base: qdrouterd on PATH, python3 with
    // Proton's and the router's modules, hostname, saslpasswd2 and the SASL plugins.
    for f in [
        "/usr/sbin/qdrouterd",
        "/usr/bin/qdmanage",
        "/usr/bin/qdstat",
        "/usr/bin/hostname",
        "/usr/sbin/saslpasswd2",
    ] {
        assert!(image.files.iter().any(|x| x == f), "{f} missing from the image");
    }
    for f in [
        "/qpid_dispatch/management/client.py",
        "/proton/utils.py",
        "/sasl2/libplain.so",
        "/sasl2/libsasldb.so",
    ] {
        assert!(image.files.iter().any(|x| x.contains(f)), "no *{f}* in the image");
    }
    assert!(!image.files.iter().any(|x| x == "/usr/bin/sh"), "/bin/sh must be a link to bash, as on Fedora");
    assert!(image.files.iter().any(|x| x == "/usr/bin/bash"), "no bash in the image");
}
