//! The committed CRD is what the types generate, and its shape is what
//! docs/validation-and-defaults.md describes.

use qdr_api::{CHART_CRD_PATH, CRD_PATH, crd, crd_yaml};

#[test]
fn committed_crd_is_fresh() {
    for p in [CRD_PATH, CHART_CRD_PATH] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(p);
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == crd_yaml(),
            "{} is stale or missing: run `make crd` and commit the result",
            path.display()
        );
    }
}

#[test]
fn committed_link_crds_are_fresh() {
    use qdr_api::links::{GRANT_CRD_PATH, LINK_CRD_PATH, crd_yaml_of, grant_crd, link_crd};
    for (p, crd) in [(GRANT_CRD_PATH, grant_crd()), (LINK_CRD_PATH, link_crd())] {
        let want = crd_yaml_of(&crd);
        let chart = p.replace("deploy/crds/", "deploy/helm/qdr-operator/crds/");
        for p in [p.to_string(), chart] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(&p);
            let committed = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                committed == want,
                "{} is stale or missing: run `make crd` and commit the result",
                path.display()
            );
        }
    }
}

#[test]
fn crd_has_status_subresource_printer_columns_and_short_name() {
    let crd = crd();
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.names.short_names, Some(vec!["ic".into()]));
    let v = &crd.spec.versions[0];
    assert_eq!(v.name, "v1alpha1");
    assert!(v.subresources.as_ref().unwrap().status.is_some());
    let cols: Vec<(&str, i32)> = v
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| (c.name.as_str(), c.priority.unwrap_or(0)))
        .collect();
    // `kubectl get ic`: priority 0; `-o wide` adds the priority-1 columns.
    assert_eq!(
        cols,
        [
            ("Role", 0),
            ("Size", 0),
            ("Ready", 0),
            ("Mesh", 0),
            ("Status", 0),
            ("Age", 0),
            ("Edges", 1),
            ("Config", 1)
        ]
    );
}

/// Structural: every node has a type (or int-or-string / preserve-unknown-fields), and the
/// list bounds that keep CEL cost in budget are present.
#[test]
fn schema_is_structural_and_bounded() {
    let crd = crd();
    let schema = serde_json::to_value(
        crd.spec.versions[0].schema.as_ref().unwrap().open_api_v3_schema.as_ref().unwrap(),
    )
    .unwrap();
    fn walk(path: &str, v: &serde_json::Value) {
        let m = v.as_object().unwrap();
        let typed = m.contains_key("type")
            || m.contains_key("x-kubernetes-int-or-string")
            || m.contains_key("x-kubernetes-preserve-unknown-fields");
        assert!(typed, "{path} has no type");
        assert!(!m.contains_key("default"), "{path} has a schema default");
        if m.get("type").and_then(|t| t.as_str()) == Some("array")
            && path.starts_with(".spec")
            && !path.starts_with(".spec.deploymentPlan.resources")
        {
            assert!(m.contains_key("maxItems"), "{path} has no maxItems");
        }
        if let Some(p) = m.get("properties").and_then(|p| p.as_object()) {
            for (k, c) in p {
                walk(&format!("{path}.{k}"), c);
            }
        }
        if let Some(i) = m.get("items") {
            walk(&format!("{path}[]"), i);
        }
    }
    walk("", &schema);
}

/// The rules page names every CEL rule id, so the documentation cannot silently fall behind.
#[test]
fn every_cel_rule_is_documented() {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/validation-and-defaults.md"),
    )
    .unwrap();
    for r in qdr_api::rules::cel_rules() {
        let id = r.id;
        let documented = doc.contains(&format!("`{id}`"))
            || id.starts_with("edge-without-") && doc.contains("`edge-without-*`");
        assert!(documented, "CEL rule {id} is not in docs/validation-and-defaults.md");
    }
}

#[test]
fn committed_api_reference_is_fresh() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(qdr_api::docs::DOCS_PATH);
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    let generated = qdr_api::docs::reference(&qdr_api::docs::repository_examples());
    assert!(
        committed == generated,
        "{} is stale or missing: run `make docs` and commit the result",
        path.display()
    );
    // Every CEL message appears, at its field.
    for r in qdr_api::rules::cel_rules() {
        assert!(generated.contains(&r.message.replace('|', "\\|")), "rule {} is not in the reference", r.id);
    }
    for section in [
        "### interconnect.spec.deploymentPlan",
        "### interconnect.spec.listeners",
        "### interconnect.spec.sslProfiles",
    ] {
        assert!(generated.contains(section), "{section}");
    }
}

/// `kubectl explain` wraps descriptions itself: a line break inside a sentence prints as a
/// broken line. Every single line break in a description must start a list item; paragraph
/// breaks (`\n\n`) are kept.
#[test]
fn descriptions_are_paragraphs() {
    let schema = serde_json::to_value(
        crd().spec.versions[0].schema.as_ref().unwrap().open_api_v3_schema.as_ref().unwrap(),
    )
    .unwrap();
    fn walk(path: &str, v: &serde_json::Value, seen: &mut usize, bad: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, c) in m {
                    match c {
                        serde_json::Value::String(text) if k == "description" => {
                            *seen += 1;
                            for para in text.split("\n\n") {
                                let mut lines = para.lines();
                                lines.next();
                                for line in lines {
                                    if !qdr_api::rules::is_list_item(line) {
                                        bad.push(format!("{path}: …{line}"));
                                    }
                                }
                            }
                            if text.contains("\n\n\n") || text.ends_with('\n') || text.contains(" \n") {
                                bad.push(format!("{path}: stray line breaks in {text:?}"));
                            }
                        }
                        _ => walk(&format!("{path}.{k}"), c, seen, bad),
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter().for_each(|i| walk(path, i, seen, bad)),
            _ => {}
        }
    }
    let (mut seen, mut bad) = (0, Vec::new());
    walk("", &schema, &mut seen, &mut bad);
    assert!(seen > 100, "only {seen} descriptions found");
    assert!(bad.is_empty(), "descriptions with a line break inside a paragraph:\n{}", bad.join("\n"));
}

#[test]
fn paragraphs_join_lines_and_keep_lists_and_breaks() {
    use qdr_api::rules::paragraphs;
    assert_eq!(paragraphs("A sentence\nbroken twice\nhere."), "A sentence broken twice here.");
    assert_eq!(paragraphs("One.\n\n\nTwo\nlines.\n"), "One.\n\nTwo lines.");
    assert_eq!(
        paragraphs("Either:\n- a thing\n  continued\n* b\n10. c"),
        "Either:\n- a thing continued\n* b\n10. c"
    );
    assert_eq!(paragraphs("Not a list: 5.5 - 3\nis fine."), "Not a list: 5.5 - 3 is fine.");
    let once = paragraphs("x\ny\n\n- z");
    assert_eq!(paragraphs(&once), once, "idempotent");
}

/// Rust doc links (`[`x`]`) in a field's doc comment would reach `kubectl explain` verbatim.
#[test]
fn descriptions_have_no_rustdoc_links() {
    let yaml = crd_yaml();
    assert!(!yaml.contains("[`"), "a rustdoc link reached the CRD");
}
