//! The book (`docs/`, an mdBook built by `tools/book/build.sh`, `make docs`), checked as a
//! reader meets it:
//! - it builds, and every link and anchor inside it (and every file the README links to)
//!   resolves;
//! - the troubleshooting page lists exactly the condition and Event reasons the controller
//!   emits (`qdr_controller::reasons`);
//! - the example topology picture is what `kubectl qdr topology -o dot` draws for its status,
//!   every other picture is what Graphviz draws from its `.dot` source, and no page has a
//!   diagram block the book would print as text;
//! - the flags reference (`docs/flags.md`) is what both programs' argument parsers declare,
//!   and the Helm values reference (`docs/helm-values.md`) is the chart's `values.yaml`;
//! - the first page and the architecture page render in headless Chromium (Debian's) without
//!   a script error, with screenshots kept in `target/test-artifacts/docs/`;
//! - every `make` target the book or the README names exists, and every command of a
//!   `console` block runs against a local control plane (webhook, two controllers with a
//!   cluster's defaults, mesh reading on; 3 simulated nodes, so no page shows output only
//!   answering routers give: the README's `kubectl get ic` row and the first client are
//!   checked on the real node by tests/tests/install.rs), page by page in a namespace of its
//!   own, printing what the page shows (each line the page shows after a command, spaces
//!   squeezed, `…` for any text) and failing where the page shows it refused
//!   (`... is invalid:`, `Error from server`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use qdr_tests::components;

fn root() -> PathBuf {
    qdr_tests::workspace_root()
}

/// The book, built once per test binary into `target/test-artifacts/docs/book`.
fn book() -> &'static Path {
    static BOOK: OnceLock<PathBuf> = OnceLock::new();
    BOOK.get_or_init(|| {
        let out = artifacts().join("book");
        let run =
            Command::new(root().join("tools/book/build.sh")).arg(&out).output().expect("tools/book/build.sh");
        assert!(
            run.status.success(),
            "the book does not build:\n{}{}",
            String::from_utf8_lossy(&run.stdout),
            String::from_utf8_lossy(&run.stderr)
        );
        let warnings: Vec<&str> = std::str::from_utf8(&run.stderr)
            .unwrap()
            .lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR"))
            .collect();
        assert!(warnings.is_empty(), "mdbook warned:\n{}", warnings.join("\n"));
        out
    })
}

/// `target/test-artifacts/docs/`: the built book and the screenshots, kept after the run.
fn artifacts() -> PathBuf {
    let dir = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from);
    let dir = dir.join("test-artifacts/docs");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The pages of the book, in `SUMMARY.md`'s order (file names relative to `docs/`).
fn pages() -> Vec<String> {
    let summary = std::fs::read_to_string(root().join("docs/SUMMARY.md")).unwrap();
    summary
        .lines()
        .filter_map(|l| {
            l.split_once("](").and_then(|(_, rest)| rest.split_once(')')).map(|(p, _)| p.to_string())
        })
        .collect()
}

/// The values of attribute `attr` (`href`, `src`, `id`) in an HTML text, as mdBook writes
/// them (double-quoted).
fn attributes<'a>(html: &'a str, attr: &str) -> Vec<&'a str> {
    let needle = format!(" {attr}=\"");
    html.match_indices(&needle)
        .filter_map(|(i, _)| {
            let rest = &html[i + needle.len()..];
            rest.find('"').map(|end| &rest[..end])
        })
        .collect()
}

fn unescape(s: &str) -> String {
    s.replace("&amp;", "&").replace("%20", " ")
}

#[test]
fn the_book_builds_and_every_internal_link_and_anchor_resolves() {
    let book = book();
    let mut ids: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    let mut html_files = Vec::new();
    for entry in walk(book) {
        if entry.extension().is_some_and(|e| e == "html") {
            let text = std::fs::read_to_string(&entry).unwrap();
            ids.insert(entry.clone(), attributes(&text, "id").into_iter().map(unescape).collect());
            html_files.push((entry, text));
        }
    }
    // Every page of SUMMARY.md is in the book.
    for page in pages() {
        let html = book.join(page.replace(".md", ".html"));
        assert!(html.is_file(), "{} is missing from the book", html.display());
    }
    let mut broken = Vec::new();
    let mut checked = 0;
    for (file, text) in &html_files {
        // The print page repeats every page with its links rewritten; each page is checked.
        if file.file_name().is_some_and(|n| n == "print.html" || n == "404.html" || n == "toc.html") {
            continue;
        }
        for link in attributes(text, "href").into_iter().chain(attributes(text, "src")) {
            let link = unescape(link);
            if link.is_empty()
                || ["http://", "https://", "mailto:", "javascript:", "data:"]
                    .iter()
                    .any(|p| link.starts_with(p))
            {
                continue;
            }
            checked += 1;
            let (path, fragment) = link.split_once('#').unwrap_or((&link, ""));
            let path = path.split('?').next().unwrap();
            let target =
                if path.is_empty() { file.clone() } else { normalize(&file.parent().unwrap().join(path)) };
            let target = if target.is_dir() { target.join("index.html") } else { target };
            if !target.is_file() {
                broken.push(format!("{}: {link} (no file {})", rel(book, file), target.display()));
            } else if !fragment.is_empty() && !ids.get(&target).is_some_and(|s| s.contains(fragment)) {
                broken.push(format!(
                    "{}: {link} (no id {fragment:?} in {})",
                    rel(book, file),
                    rel(book, &target)
                ));
            }
        }
    }
    assert!(checked > 500, "only {checked} links checked: is the book empty?");
    assert!(broken.is_empty(), "broken links in the book:\n{}", broken.join("\n"));

    // The README's links: files of the repository, or the book's pages.
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    for (_, rest) in readme.match_indices("](").map(|(i, _)| ((), &readme[i + 2..])) {
        let link = rest.split(')').next().unwrap();
        if link.starts_with("http") || link.starts_with('#') {
            continue;
        }
        let path = link.split('#').next().unwrap();
        assert!(root().join(path).exists(), "README.md links to {link}, which does not exist");
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() { out.extend(walk(&p)) } else { out.push(p) }
    }
    out
}

fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

fn rel(base: &Path, p: &Path) -> String {
    p.strip_prefix(base).unwrap_or(p).display().to_string()
}

/// The backquoted first cells of the rows of the table under heading `## {section}` of
/// `page`: (first column, second column).
fn table_rows(page: &str, section: &str) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(root().join("docs").join(page)).unwrap();
    let start =
        text.find(&format!("\n## {section}\n")).unwrap_or_else(|| panic!("{page} has no section {section}"));
    let body = &text[start + 1..];
    let body = &body[..body[3..].find("\n## ").map_or(body.len(), |i| i + 3)];
    body.lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (cells[1].trim_matches('`').to_string(), cells[2].trim_matches('`').to_string())
        })
        .collect()
}

#[test]
fn troubleshooting_lists_exactly_the_reasons_the_controller_emits() {
    let listed: BTreeSet<(String, String)> =
        table_rows("troubleshooting.md", "Conditions").into_iter().collect();
    let emitted: BTreeSet<(String, String)> = qdr_controller::reasons::CONDITIONS
        .iter()
        .flat_map(|(t, rs)| rs.iter().map(move |r| (t.to_string(), r.to_string())))
        .collect();
    assert_eq!(
        listed.difference(&emitted).collect::<Vec<_>>(),
        Vec::<&(String, String)>::new(),
        "condition reasons on the page that the controller never sets"
    );
    assert_eq!(
        emitted.difference(&listed).collect::<Vec<_>>(),
        Vec::<&(String, String)>::new(),
        "condition reasons the controller sets that the page does not explain"
    );
    let listed: BTreeSet<(String, String)> = table_rows("troubleshooting.md", "Events").into_iter().collect();
    let emitted: BTreeSet<(String, String)> =
        qdr_controller::reasons::EVENTS.iter().map(|(t, r)| (t.to_string(), r.to_string())).collect();
    assert_eq!(listed, emitted, "the page's Events table and qdr_controller::reasons::EVENTS differ");
}

/// `docs/flags.md` is what `tools/flags/reference.sh` prints from the binaries built with the
/// tests: every flag and environment variable as the programs' argument parsers declare them.
#[test]
fn the_flags_reference_is_what_the_programs_declare() {
    let bin = qdr_tests::images::bin_dir();
    let run = Command::new(root().join("tools/flags/reference.sh")).arg(&bin).output().unwrap();
    assert!(run.status.success(), "tools/flags/reference.sh: {}", String::from_utf8_lossy(&run.stderr));
    let printed = String::from_utf8(run.stdout).unwrap();
    for flag in ["`--observe-mesh`", "`QDR_WEBHOOK_TLS_MODE`", "`--watch-namespaces`"] {
        assert!(printed.contains(flag), "the reference lacks {flag}");
    }
    let committed = std::fs::read_to_string(root().join("docs/flags.md")).unwrap();
    assert!(committed == printed, "docs/flags.md is stale: run `make flags-reference`");
}

/// `docs/helm-values.md` is what `qdr_tests::helm_values` makes of the chart's `values.yaml`
/// now, and names every top-level value.
#[test]
fn the_helm_values_reference_is_the_charts_values() {
    use qdr_tests::helm_values::{PAGE_PATH, VALUES_PATH, reference};
    let values = std::fs::read_to_string(root().join(VALUES_PATH)).unwrap();
    let page = reference(&values);
    for top in values.lines().filter(|l| !l.starts_with([' ', '#']) && l.contains(':')) {
        let key = top.split(':').next().unwrap();
        assert!(page.contains(&format!("| `{key}")), "the reference lacks {key}");
    }
    let committed = std::fs::read_to_string(root().join(PAGE_PATH)).unwrap();
    assert!(committed == page, "{PAGE_PATH} is stale: run `make helm-values-reference`");
}

/// The book (mdBook, no preprocessors) shows a Mermaid or other diagram block as its source
/// text: every picture is a Graphviz `.dot` drawn to SVG instead.
#[test]
fn no_page_has_a_diagram_block_the_book_prints_as_text() {
    for page in pages() {
        let text = std::fs::read_to_string(root().join("docs").join(&page)).unwrap();
        for info in ["```mermaid", "```plantuml", "```dot", "```graphviz"] {
            assert!(!text.contains(info), "docs/{page} has a {info} block, which the book prints as text");
        }
    }
}

/// The committed pictures (`docs/diagrams/*.svg`, shown where the pages are read as plain
/// Markdown) are what Graphviz draws from their `.dot` sources now (`make docs` redraws them).
#[test]
fn the_committed_pictures_are_drawn_from_their_sources() {
    let drawn_dir = book().with_extension("src").join("diagrams");
    let mut compared = 0;
    for dot in walk(&root().join("docs/diagrams")) {
        if dot.extension().is_none_or(|e| e != "dot") {
            continue;
        }
        let svg = dot.with_extension("svg");
        let committed = std::fs::read_to_string(&svg)
            .unwrap_or_else(|e| panic!("{}: {e}: run `make docs`", svg.display()));
        let drawn = std::fs::read_to_string(drawn_dir.join(svg.file_name().unwrap())).unwrap();
        assert!(committed == drawn, "{} is not what {} draws: run `make docs`", svg.display(), dot.display());
        compared += 1;
    }
    assert!(compared >= 2, "only {compared} pictures");
}

/// `docs/diagrams/topology.dot` is `kubectl qdr topology router-mesh -o dot` of the status in
/// `docs/diagrams/topology-status.json`. `QDR_BLESS=1` rewrites it.
#[test]
fn the_topology_picture_is_what_kubectl_qdr_draws() {
    let dir = root().join("docs/diagrams");
    let status: qdr_api::InterconnectStatus =
        serde_json::from_str(&std::fs::read_to_string(dir.join("topology-status.json")).unwrap()).unwrap();
    let drawn = qdr_api::topology::render("router-mesh", &status, qdr_api::topology::Format::Dot);
    let path = dir.join("topology.dot");
    if std::env::var_os("QDR_BLESS").is_some() {
        std::fs::write(&path, &drawn).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(committed, drawn, "docs/diagrams/topology.dot is stale: run this test with QDR_BLESS=1");
}

/// Headless Chromium, as the machine's probe runs it (no background networking: this machine's
/// network is closed).
fn chromium(args: &[&str], profile: &Path) -> std::process::Output {
    Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .output()
        .expect("chromium (Debian's package `chromium`; .ci/run installs it)")
}

#[test]
fn the_first_page_and_the_architecture_render_in_headless_chromium() {
    let book = book();
    let out = artifacts();
    for (page, shot, size, must) in [
        ("index.html", "first-page.png", "1280,900", "Quick start"),
        ("architecture.html", "architecture.png", "1280,900", "diagrams/architecture.svg"),
        // The picture alone, at its own size (Graphviz writes it about 1,200 points wide).
        ("diagrams/architecture.svg", "architecture-picture.png", "1700,560", "qdr-controller"),
    ] {
        let profile = tempfile::tempdir().unwrap();
        let url = format!("file://{}", book.join(page).display());
        let dom = chromium(&["--virtual-time-budget=3000", "--dump-dom", &url], profile.path());
        let stderr = String::from_utf8_lossy(&dom.stderr);
        let stdout = String::from_utf8_lossy(&dom.stdout);
        assert!(dom.status.success(), "chromium failed on {page}:\n{stderr}");
        assert!(
            stdout.contains(must),
            "{page} rendered without {must:?}:\n{}",
            &stdout[..stdout.len().min(2000)]
        );
        // Every console message (the book logs none) and every uncaught script error is
        // logged as an `INFO:CONSOLE` line; a file that is not there as a net error.
        let errors: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains(":CONSOLE") || l.contains("Uncaught") || l.contains("ERR_FILE_NOT_FOUND"))
            .collect();
        assert!(errors.is_empty(), "{page} logged errors in Chromium:\n{}", errors.join("\n"));
        let png = out.join(shot);
        let _ = std::fs::remove_file(&png);
        let profile = tempfile::tempdir().unwrap();
        let run = chromium(
            &[&format!("--window-size={size}"), &format!("--screenshot={}", png.display()), &url],
            profile.path(),
        );
        assert!(run.status.success(), "screenshot of {page}:\n{}", String::from_utf8_lossy(&run.stderr));
        let bytes = std::fs::read(&png).unwrap_or_else(|e| panic!("{}: {e}", png.display()));
        assert!(
            bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000,
            "{} is not a real screenshot",
            png.display()
        );
        eprintln!("screenshot: {} ({} bytes)", png.display(), bytes.len());
    }
}

/// A command of a `console` block and the lines the page shows it printing.
#[derive(Debug)]
struct Step {
    page: String,
    command: String,
    shows: Vec<String>,
}

/// The commands of every `console` block, page by page in SUMMARY order, and every command
/// (of any block) that runs `make`.
fn console_steps() -> (Vec<Step>, Vec<String>) {
    let mut steps = Vec::new();
    let mut makes = Vec::new();
    let mut sources: Vec<(String, String)> = pages()
        .into_iter()
        .map(|p| (p.clone(), std::fs::read_to_string(root().join("docs").join(&p)).unwrap()))
        .collect();
    sources.push(("README.md".into(), std::fs::read_to_string(root().join("README.md")).unwrap()));
    for (page, text) in sources {
        let mut fence: Option<String> = None;
        for line in text.lines() {
            if let Some(info) = line.trim_start().strip_prefix("```") {
                fence = if fence.is_some() { None } else { Some(info.trim().to_string()) };
                continue;
            }
            let Some(info) = &fence else { continue };
            let command = line.strip_prefix("$ ").or_else(|| (info == "sh").then_some(line));
            if let Some(c) = command.map(str::trim).filter(|c| c.starts_with("make ")) {
                makes.push(c.split_whitespace().nth(1).unwrap().to_string());
            }
            if info != "console" {
                continue;
            }
            if let Some(command) = line.strip_prefix("$ ") {
                steps.push(Step { page: page.clone(), command: command.to_string(), shows: Vec::new() });
            } else if !line.trim().is_empty() {
                steps
                    .last_mut()
                    .expect("output before the first command")
                    .shows
                    .push(line.trim().to_string());
            }
        }
    }
    (steps, makes)
}

#[test]
fn every_make_target_the_docs_name_exists() {
    let (_, makes) = console_steps();
    assert!(makes.contains(&"run".to_string()) && makes.contains(&"test".to_string()), "{makes:?}");
    for target in makes {
        let dry = Command::new("make").args(["-n", &target]).current_dir(root()).output().unwrap();
        assert!(
            dry.status.success(),
            "`make {target}` named in the docs: {}",
            String::from_utf8_lossy(&dry.stderr)
        );
    }
}

/// Whether `printed` holds `line`, where `…` in `line` stands for any text (a generated
/// namespace's name, a time).
fn shows(printed: &str, line: &str) -> bool {
    let mut rest = printed;
    for part in line.split('…') {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_console_command_runs_against_a_local_control_plane() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (steps, _) = console_steps();
    let pages: BTreeSet<&str> = steps.iter().map(|s| s.page.as_str()).collect();
    assert!(steps.len() >= 30 && pages.len() >= 6, "{} commands on {pages:?}", steps.len());

    let cp = qdr_tests::shared_with_nodes(3).await;
    cp.install_crd().await;
    let client = cp.client().await.unwrap();
    let system = cp.namespace("docs-system").await;
    let (validate, mutate) = (components::free_port(), components::free_port());
    let reg = components::register(&client, "docs", validate, mutate).await;
    let webhooks = [validate, mutate].map(|p| components::start_replica(cp, &system.name, &reg, p, &[]));
    for w in &webhooks {
        components::wait_ready(w, Duration::from_secs(60)).await;
    }
    // The controllers built with the tests, as deploy/'s ServiceAccount, with a cluster's
    // defaults: the mesh is read (no router answers on the simulated nodes, so no page may
    // show output that needs one: the condition then says `RouterUnreachable` and `Ready`
    // is the pods').
    let _controllers: Vec<qdr_tests::Process> = ["docs-0", "docs-1"]
        .iter()
        .map(|id| qdr_tests::routers::start_controller(cp, id, &[]).expect("a controller"))
        .collect();

    let path = format!(
        "{}:{}",
        cp.kubectl().get_program().to_string_lossy().rsplit_once('/').unwrap().0,
        std::env::var("PATH").unwrap()
    );
    let mut failures = Vec::new();
    for page in pages {
        let ns =
            cp.namespace(&format!("docs-{}", page.trim_end_matches(".md").replace(['_', '.'], "-"))).await;
        components::label_namespace(cp, &ns.name, "docs");
        components::wait_admission_works(cp, &ns.name, Duration::from_secs(60)).await;
        let kubeconfig = cp.dir().join(format!("docs-{}.kubeconfig", ns.name));
        std::fs::copy(cp.kubeconfig(), &kubeconfig).unwrap();
        let set = Command::new("kubectl")
            .env("PATH", &path)
            .args(["config", "set-context", "--current", &format!("--namespace={}", ns.name)])
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .output()
            .unwrap();
        assert!(set.status.success(), "{}", String::from_utf8_lossy(&set.stderr));
        for step in steps.iter().filter(|s| s.page == page) {
            let run = Command::new("bash")
                .args(["-o", "pipefail", "-c", &step.command])
                .current_dir(root())
                .env("PATH", &path)
                .env("KUBECONFIG", &kubeconfig)
                .output()
                .unwrap();
            let printed =
                format!("{}{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
            let refused =
                step.shows.iter().any(|l| l.contains(" is invalid:") || l.starts_with("Error from server"));
            eprintln!("[{page}] $ {}\n{}", step.command, printed.trim_end());
            if run.status.success() == refused {
                failures.push(format!(
                    "{page}: `{}` {} (the page shows it {}):\n{printed}",
                    step.command,
                    if refused { "succeeded" } else { "failed" },
                    if refused { "refused" } else { "succeeding" }
                ));
                continue;
            }
            let all = squash(&printed);
            for line in &step.shows {
                if !shows(&all, &squash(line)) {
                    failures.push(format!("{page}: `{}` did not print {line:?}:\n{printed}", step.command));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} command(s) of the book do not do what it shows:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// The text of `path`, relative to the workspace root.
fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The controller page's condition table is `qdr_controller::reasons::CONDITIONS`: every
/// condition type, in order, with every reason the controller sets on it, in order.
#[test]
fn the_controller_page_lists_every_condition_reason_in_the_codes_order() {
    let text = read("docs/controller.md");
    let rows: Vec<(String, Vec<String>)> = text
        .lines()
        .skip_while(|l| !l.starts_with("| Condition | Reasons |"))
        .skip(2)
        .take_while(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let kind = cells[1].split('`').nth(1).unwrap_or_default().to_string();
            let reasons = cells[2].split(", ").map(|r| r.trim_matches('`').to_string()).collect();
            (kind, reasons)
        })
        .collect();
    let code: Vec<(String, Vec<String>)> = qdr_controller::reasons::CONDITIONS
        .iter()
        .map(|(t, rs)| (t.to_string(), rs.iter().map(|r| r.to_string()).collect()))
        .collect();
    assert_eq!(
        rows, code,
        "docs/controller.md's condition table and qdr_controller::reasons::CONDITIONS differ"
    );
}

/// The stages of a reconcile, as `controller/src/reconcile/mod.rs` numbers them in its doc
/// comment, are the stages the architecture page names, in the same order and number, and
/// the controller page's picture shows them in that order.
#[test]
fn the_pages_name_the_reconcile_stages_the_code_runs() {
    let code = read("controller/src/reconcile/mod.rs");
    let stages: Vec<String> = code
        .lines()
        .filter_map(|l| l.strip_prefix("//! ")?.split_once(". [`"))
        .filter(|(n, _)| n.parse::<u32>().is_ok())
        .map(|(_, rest)| rest.split('`').next().unwrap().to_string())
        .collect();
    assert_eq!(
        stages,
        ["observe", "build", "apply", "read", "status", "events"],
        "the code's stages changed"
    );
    let words = ["", "one", "two", "three", "four", "five", "six", "seven", "eight"];
    let architecture = read("docs/architecture.md");
    let said = format!("Each reconcile is {} stages", words[stages.len()]);
    assert!(architecture.contains(&said), "docs/architecture.md does not say \"{said}\"");
    let mut rest = &architecture[architecture.find(&said).unwrap()..];
    for s in &stages {
        let i = rest
            .find(&format!("`{s}`"))
            .unwrap_or_else(|| panic!("architecture.md: stage `{s}` missing or out of order"));
        rest = &rest[i..];
    }
    let controller = read("docs/controller.md");
    let picture =
        controller.lines().find(|l| l.contains("observe ──► build")).expect("controller.md's stage picture");
    let shown: Vec<&str> = picture
        .split("──►")
        .map(|s| s.split_whitespace().next().unwrap_or_default().trim_end_matches("_or_reuse"))
        .collect();
    assert_eq!(shown, stages, "docs/controller.md's picture");
}

/// Go as the docs and the CI entry point ask for it is the newest `go` directive of the Go
/// modules the tests build (`tools/testbin/*/go.mod`, built with `GOTOOLCHAIN=local`).
#[test]
fn the_go_version_the_docs_ask_for_builds_every_test_tool() {
    let mut newest = (0, 0, 0);
    for e in std::fs::read_dir(root().join("tools/testbin")).unwrap() {
        let m = e.unwrap().path().join("go.mod");
        let Ok(text) = std::fs::read_to_string(&m) else { continue };
        let v = text.lines().find_map(|l| l.strip_prefix("go ")).unwrap().trim();
        let n: Vec<u32> = v.split('.').map(|p| p.parse().unwrap()).collect();
        newest = newest.max((n[0], n[1], n.get(2).copied().unwrap_or(0)));
    }
    let want = format!("Go ≥ {}.{}.{}", newest.0, newest.1, newest.2);
    for page in ["README.md", "docs/quick-start.md", "docs/development.md"] {
        let text = read(page);
        assert!(text.contains(&want), "{page} does not ask for {want}");
        let asks = text.matches("Go ≥ ").count();
        assert_eq!(asks, text.matches(&want).count(), "{page} asks for another Go version than {want}");
    }
    let ci = read(".ci/run");
    let plain = want.replace("Go ≥ ", "Go (>= ");
    assert!(ci.contains(&plain), ".ci/run does not ask for {want}");
    let workflow = read(".github/workflows/ci.yml");
    assert!(
        workflow.contains(&format!("go-version: \"{}.{}.{}\"", newest.0, newest.1, newest.2)),
        "ci.yml's Go"
    );
}

/// No page, manifest or metadata a user reads carries a development log's wording or a
/// promise of work in progress.
#[test]
fn no_page_speaks_of_work_in_progress_or_names_a_placeholder() {
    let forbidden = [
        "being built",
        "in this round",
        "this round",
        "not established yet",
        "used to mean",
        "TODO",
        "FIXME",
    ];
    let mut files = vec![root().join("README.md"), root().join("SECURITY.md"), root().join("CHANGELOG.md")];
    for dir in ["docs", "deploy", "bundle"] {
        files.extend(walk(&root().join(dir)).into_iter().filter(|p| {
            p.extension().is_some_and(|e| {
                ["md", "yaml", "yml", "tpl", "txt"].contains(&e.to_str().unwrap_or_default())
            })
        }));
    }
    let mut found = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            for w in forbidden {
                if line.contains(w) {
                    found.push(format!("{}:{}: {w}", rel(&root(), &f), n + 1));
                }
            }
        }
    }
    assert!(found.is_empty(), "work-in-progress or placeholder wording:\n{}", found.join("\n"));
}

/// The book's address: where `.github/workflows/book.yml` publishes it (GitHub Pages of the
/// repository the chart names as `home`), which every alert's `runbook_url` and the CSV's
/// Documentation link name; each runbook URL's anchor is a section of the runbooks page.
#[test]
fn every_link_to_the_published_book_names_where_the_book_workflow_publishes_it() {
    let chart = read("deploy/helm/qdr-operator/Chart.yaml");
    let home = chart.lines().find_map(|l| l.strip_prefix("home: ")).expect("Chart.yaml's home").trim();
    let (owner, repo) = home.trim_start_matches("https://github.com/").split_once('/').unwrap();
    let book = format!("https://{owner}.github.io/{repo}/");
    let workflow = read(".github/workflows/book.yml");
    for needed in
        ["make docs", "actions/upload-pages-artifact", "actions/deploy-pages", "path: target/book", &book]
    {
        assert!(workflow.contains(needed), "book.yml lacks {needed}");
    }
    let runbooks = read("docs/runbooks.md");
    let sections: BTreeSet<String> =
        runbooks.lines().filter_map(|l| l.strip_prefix("## ")).map(|h| h.trim().to_lowercase()).collect();
    for rules in [
        "deploy/components/monitoring/prometheus-rule.yaml",
        "deploy/helm/qdr-operator/files/prometheus-rule.yaml",
    ] {
        let text = read(rules);
        let urls: Vec<&str> = text.lines().filter_map(|l| l.trim().strip_prefix("runbook_url: ")).collect();
        assert!(!urls.is_empty(), "{rules}: no runbook_url");
        for url in urls {
            let anchor = url
                .strip_prefix(&format!("{book}runbooks.html#"))
                .unwrap_or_else(|| panic!("{rules}: {url}"));
            assert!(sections.contains(anchor), "{rules}: {url} names no section of docs/runbooks.md");
        }
    }
    let csv = read("deploy/olm/csv.yaml");
    assert!(csv.contains(&format!("url: {}", book.trim_end_matches('/'))), "the CSV's Documentation link");
}
