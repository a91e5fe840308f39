//! Undoing what a real node changed on the host, from its [`Record`]: its processes and
//! containers' shims, mounts, network namespaces, CNI results, iptables chains and rules, the
//! bridge, cgroups, sysctls and the directories it created; and [`leftovers`], what a test
//! checks is gone. It starts nothing.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::host::{BRIDGE, CGROUP_ROOT, CNI_NETWORK, FORWARD_DROP, RECORD, Record};

/// Undoes everything a real node with `record` changed on the host, whatever state it is in
/// (running, stopped, or left by a process that died); each step ignores what is already
/// gone:
/// 1. kills the containers (every process in a cgroup under [`CGROUP_ROOT`]) and the
///    containerd shims and any process started from the node's directory;
/// 2. unmounts everything under the node's directory (container root filesystems, pod
///    volumes, network namespaces, shm), deepest first;
/// 3. removes the cgroups under [`CGROUP_ROOT`] in every hierarchy;
/// 4. removes the rules that jump to `KUBE-*`/`CNI-*` chains and those chains (iptables and
///    ip6tables, tables filter, nat, mangle, raw), the `FORWARD` rule, and netpol's queueing
///    chain ([`super::NETPOL_CHAIN`]);
/// 5. deletes [`BRIDGE`], writes the saved sysctls back, removes the kubelet's links in
///    `/var/log/containers`, the network's cached CNI results, the shims' sockets, and
///    [`RECORD`].
pub fn cleanup(record: &Record) {
    let dir = record.dir.display().to_string();
    let shim_sockets = shim_sockets(record);
    let sandboxes = container_ids(record);
    for _ in 0..50 {
        let mut killed = 0;
        for pid in cgroup_pids().into_iter().chain(processes_of(record)) {
            crate::process::kill(pid);
            killed += 1;
        }
        if killed == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut mounts = mounts_under(&dir);
    mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
    for m in mounts {
        let _ = Command::new("umount").args(["-l", &m]).output();
    }
    for d in cgroup_dirs() {
        let _ = std::fs::remove_dir(d);
    }
    for bin in ["iptables", "ip6tables"] {
        iptables_cleanup(bin);
    }
    let _ = Command::new("iptables").args(["-D", "FORWARD"]).args(FORWARD_DROP).arg("DROP").output();
    super::netpol::remove_rules();
    let _ = Command::new("ip").args(["link", "del", BRIDGE]).output();
    for (name, value) in &record.sysctls {
        let _ = std::fs::write(Path::new("/proc/sys").join(name), value);
    }
    for entry in std::fs::read_dir("/var/log/containers").into_iter().flatten().flatten() {
        if std::fs::read_link(entry.path()).is_ok_and(|t| t.starts_with(&record.dir)) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    for entry in std::fs::read_dir("/var/lib/cni/results").into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(&format!("{CNI_NETWORK}-"))
            || sandboxes.iter().any(|id| name.contains(id.as_str()))
        {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    for s in shim_sockets {
        let _ = std::fs::remove_file(s);
    }
    for d in &record.new_dirs {
        let _ = std::fs::remove_dir(d);
    }
    if current().is_some_and(|r| r.dir == record.dir) {
        let _ = std::fs::remove_file(RECORD);
    }
}

/// The record in [`RECORD`], if any.
pub fn current() -> Option<Record> {
    serde_json::from_str(&std::fs::read_to_string(RECORD).ok()?).ok()
}

/// What [`cleanup`] looks for, for a check that nothing is left: each entry names one thing
/// of a real node still on the host.
pub fn leftovers(record: &Record) -> Vec<String> {
    let mut left = Vec::new();
    if Path::new("/sys/class/net").join(BRIDGE).exists() {
        left.push(format!("bridge {BRIDGE}"));
    }
    left.extend(cgroup_dirs().into_iter().map(|d| format!("cgroup {}", d.display())));
    left.extend(mounts_under(&record.dir.display().to_string()).into_iter().map(|m| format!("mount {m}")));
    left.extend(processes_of(record).into_iter().map(|p| format!("process {p}: {}", cmdline(p))));
    left.extend(cgroup_pids().into_iter().map(|p| format!("process in {CGROUP_ROOT}: {p}")));
    for bin in ["iptables", "ip6tables"] {
        for table in ["filter", "nat", "mangle", "raw"] {
            let Ok(out) = Command::new(bin).args(["-t", table, "-S"]).output() else { continue };
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                if line.contains("KUBE-") || line.contains("CNI-") || line.contains(BRIDGE) {
                    left.push(format!("{bin} -t {table}: {line}"));
                }
            }
        }
    }
    if super::netpol::table_exists() {
        left.push(format!("nftables table inet {}", super::NFT_TABLE));
    }
    if super::netpol::chain_exists() {
        left.push(format!("iptables -t mangle chain {}", super::NETPOL_CHAIN));
    }
    for (name, value) in &record.sysctls {
        let now = std::fs::read_to_string(Path::new("/proc/sys").join(name)).unwrap_or_default();
        if now.trim() != value {
            left.push(format!("sysctl {name} = {} (was {value})", now.trim()));
        }
    }
    for s in shim_sockets(record).into_iter().filter(|s| s.exists()) {
        left.push(format!("shim socket {}", s.display()));
    }
    left.extend(cni_results(&container_ids(record)).iter().map(|r| format!("CNI result {}", r.display())));
    left.extend(record.new_dirs.iter().filter(|d| d.exists()).map(|d| format!("directory {}", d.display())));
    if current().is_some_and(|r| r.dir == record.dir) {
        left.push(format!("record {RECORD}"));
    }
    left
}

/// Mount points under `dir` (from `/proc/self/mountinfo`, octal escapes decoded).
fn mounts_under(dir: &str) -> Vec<String> {
    let prefix = format!("{}/", dir.trim_end_matches('/'));
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape_octal)
        .filter(|m| m.starts_with(&prefix))
        .collect()
}

fn unescape_octal(s: &str) -> String {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push(u8::from_str_radix(&s[i + 1..i + 4], 8).unwrap_or(b'?'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every cgroup directory under [`CGROUP_ROOT`] in every hierarchy, deepest first.
fn cgroup_dirs() -> Vec<PathBuf> {
    fn walk(d: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                walk(&e.path(), out);
            }
        }
        out.push(d.to_path_buf());
    }
    let mut out = Vec::new();
    let hierarchies = std::fs::read_dir("/sys/fs/cgroup").into_iter().flatten().flatten().map(|h| h.path());
    // v1: one per hierarchy; v2 only: the unified hierarchy is /sys/fs/cgroup itself.
    for h in hierarchies.chain([PathBuf::from("/sys/fs/cgroup")]) {
        let root = h.join(CGROUP_ROOT.trim_start_matches('/'));
        if root.is_dir() {
            walk(&root, &mut out);
        }
    }
    out
}

fn cgroup_pids() -> Vec<i32> {
    let mut pids: Vec<i32> = cgroup_dirs()
        .iter()
        .flat_map(|d| {
            std::fs::read_to_string(d.join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " ").trim().to_string())
        .unwrap_or_default()
}

/// Processes whose command line names the node's directory or socket (containerd, the
/// kubelet, kube-proxy, the shims), other than this one.
fn processes_of(record: &Record) -> Vec<i32> {
    let dir = record.dir.display().to_string();
    let me = std::process::id() as i32;
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .filter(|p| *p != me && cmdline(*p).contains(&dir))
        .collect()
}

/// The sockets containerd's runc shims make outside the state directory:
/// `/run/containerd/s/<sha256 of "<containerd socket>/<namespace>/<id>">`, one per task
/// under `<state>/io.containerd.runtime.v2.task/<namespace>/<id>`.
fn shim_sockets(record: &Record) -> Vec<PathBuf> {
    use sha2::{Digest, Sha256};
    let tasks = record.dir.join("containerd/state/io.containerd.runtime.v2.task");
    let mut out = Vec::new();
    for ns in std::fs::read_dir(&tasks).into_iter().flatten().flatten() {
        for id in std::fs::read_dir(ns.path()).into_iter().flatten().flatten() {
            let path = format!(
                "{}/{}/{}",
                record.socket().display(),
                ns.file_name().to_string_lossy(),
                id.file_name().to_string_lossy()
            );
            out.push(PathBuf::from(format!("/run/containerd/s/{:x}", Sha256::digest(path.as_bytes()))));
        }
    }
    out
}

/// libcni's cached results of the node's network or of containers `ids`
/// (`/var/lib/cni/results/<network>-<id>-eth0`, `cni-loopback-<id>-lo`).
fn cni_results(ids: &[String]) -> Vec<PathBuf> {
    std::fs::read_dir("/var/lib/cni/results")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with(&format!("{CNI_NETWORK}-")) || ids.iter().any(|id| name.contains(id.as_str()))
        })
        .map(|e| e.path())
        .collect()
}

/// The ids of the node's pod sandboxes and containers (from containerd's directories), which
/// name their CNI results.
fn container_ids(record: &Record) -> Vec<String> {
    let c = record.dir.join("containerd");
    [
        c.join("root/io.containerd.grpc.v1.cri/sandboxes"),
        c.join("root/io.containerd.grpc.v1.cri/containers"),
        c.join("state/io.containerd.runtime.v2.task/k8s.io"),
    ]
    .iter()
    .flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten())
    .map(|e| e.file_name().to_string_lossy().into_owned())
    .filter(|id| id.len() >= 32)
    .collect()
}

/// Deletes, in `bin`'s tables, every rule that jumps to a `KUBE-*` or `CNI-*` chain and then
/// those chains: one `<bin>-restore --noflush` per table (kube-proxy leaves thousands of rules
/// for a few hundred Services; one command per rule would take minutes).
fn iptables_cleanup(bin: &str) {
    for table in ["filter", "nat", "mangle", "raw"] {
        let Ok(out) = Command::new(bin).args(["-t", table, "-S"]).output() else { continue };
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let ours = |chain: &str| chain.starts_with("KUBE-") || chain.starts_with("CNI-");
        let (mut deletes, mut chains) = (Vec::new(), Vec::new());
        for line in text.lines() {
            let words = split_args(line);
            match words.first().map(String::as_str) {
                Some("-N") if words.get(1).is_some_and(|c| ours(c)) => chains.push(words[1].clone()),
                Some("-A")
                    if !words.get(1).is_some_and(|c| ours(c))
                        && words.windows(2).any(|w| (w[0] == "-j" || w[0] == "-g") && ours(&w[1])) =>
                {
                    deletes.push(format!("-D{}", &line[2..]));
                }
                _ => {}
            }
        }
        if deletes.is_empty() && chains.is_empty() {
            continue;
        }
        let mut input = format!("*{table}\n");
        for d in &deletes {
            input.push_str(d);
            input.push('\n');
        }
        for c in &chains {
            input.push_str(&format!("-F {c}\n"));
        }
        for c in &chains {
            input.push_str(&format!("-X {c}\n"));
        }
        input.push_str("COMMIT\n");
        let restore = format!("{bin}-restore");
        let Ok(mut child) = Command::new(&restore)
            .arg("--noflush")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
        else {
            continue;
        };
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(input.as_bytes());
        }
        if let Ok(out) = child.wait_with_output()
            && !out.status.success()
        {
            eprintln!("qdr-tests: {restore} -t {table}: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
    }
}

/// Splits an `iptables -S` line into arguments (double quotes group words).
fn split_args(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            ' ' if !quoted => {
                if any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iptables_lines_split_with_quoted_comments() {
        assert_eq!(
            split_args(r#"-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES"#),
            [
                "-A",
                "OUTPUT",
                "-m",
                "comment",
                "--comment",
                "kubernetes service portals",
                "-j",
                "KUBE-SERVICES"
            ]
        );
        assert_eq!(split_args(r#"-A X --comment """#), ["-A", "X", "--comment", ""]);
    }

    #[test]
    fn mountinfo_escapes_decode() {
        assert_eq!(unescape_octal(r"/a\040b/c"), "/a b/c");
        assert_eq!(unescape_octal("/plain"), "/plain");
    }
}
