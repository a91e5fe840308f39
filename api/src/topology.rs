//! The topology of one Interconnect, drawn from its status (`status.routers`,
//! `status.mesh`: what the routers themselves reported to the controller,
//! docs/mesh-status.md) as text, a Mermaid flowchart or a Graphviz DOT graph. Pure: the
//! `kubectl-qdr topology` command reads the object and prints this.
//!
//! The status holds counts, not each router's links (its size must not grow with the
//! square of the routers), so the links are drawn from what it implies: every pair of
//! interior routers that answered is linked unless `status.mesh.missingLinks` names it
//! (auto-mesh links every pair), and each edge router to its `uplink`. An uplink to a router
//! that is not one of the Interconnect's (an interior router another Interconnect runs) is
//! drawn as an outside node. Missing links are drawn dashed, routers that did not answer
//! are marked. When more pairs miss a link than the status lists
//! (`missingLinkCount` > its 32 names), the interior links are not drawn at all, and the
//! text says so, rather than drawn wrong.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::InterconnectStatus;

/// An output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Lines for a terminal.
    Text,
    /// A Mermaid flowchart (`graph LR`), as GitHub and most Markdown viewers draw it.
    Mermaid,
    /// A Graphviz DOT graph (`dot -Tsvg`).
    Dot,
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(Format::Text),
            "mermaid" => Ok(Format::Mermaid),
            "dot" => Ok(Format::Dot),
            other => Err(format!("unknown format {other:?}: text, mermaid or dot")),
        }
    }
}

/// A link drawn once: from the lesser router id to the greater (inter-router) or from an
/// edge router to its uplink, and its role.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Drawn {
    from: String,
    to: String,
    role: &'static str,
}

/// Whether every pair of interior routers that misses a link is named in `status`.
fn missing_all_listed(status: &InterconnectStatus) -> bool {
    status
        .mesh
        .as_ref()
        .is_none_or(|m| usize::try_from(m.missing_link_count).unwrap_or(0) <= m.missing_links.len())
}

/// The links of `status`, each once (see the module docs).
fn links(status: &InterconnectStatus) -> BTreeSet<Drawn> {
    let mut out = BTreeSet::new();
    let missing: BTreeSet<(&str, &str)> = (status.mesh.iter().flat_map(|m| &m.missing_links))
        .map(|l| (l.from.as_str(), l.to.as_str()))
        .collect();
    let interiors: BTreeSet<&str> = (status.routers.iter())
        .filter(|r| r.error.is_none() && r.mode.as_deref() == Some("interior"))
        .filter_map(|r| r.id.as_deref())
        .collect();
    if missing_all_listed(status) {
        for (i, a) in interiors.iter().enumerate() {
            for b in interiors.iter().skip(i + 1) {
                if !missing.contains(&(a, b)) && !missing.contains(&(b, a)) {
                    out.insert(Drawn { from: a.to_string(), to: b.to_string(), role: "inter-router" });
                }
            }
        }
    }
    for r in &status.routers {
        if let (Some(me), Some(up)) = (&r.id, &r.uplink) {
            out.insert(Drawn { from: me.clone(), to: up.clone(), role: "edge" });
        }
    }
    out
}

/// `, N edge` for an interior router with `N` edge routers attached (the edge routers are
/// another Interconnect's, and the status counts them only), else nothing.
fn edges(r: &crate::RouterStatus) -> String {
    match (r.mode.as_deref(), r.edge_links) {
        (Some("interior"), Some(n)) if n > 0 => format!(", {n} edge"),
        _ => String::new(),
    }
}

/// A Mermaid node id for `name` (letters, digits and `_`).
fn node_id(name: &str) -> String {
    let id: String = name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    format!("n_{id}")
}

/// `name` inside a quoted DOT or Mermaid string: backslashes doubled, double quotes made
/// single.
fn escaped(name: &str) -> String {
    name.replace('\\', "\\\\").replace('"', "'")
}

/// `name` as a quoted DOT or Mermaid string.
fn quoted(name: &str) -> String {
    format!("\"{}\"", escaped(name))
}

/// The topology of Interconnect `name` from `status`, in `format`. An Interconnect whose
/// routers are not read (no `status.routers`) gives a line that says so (text), or an empty
/// graph.
pub fn render(name: &str, status: &InterconnectStatus, format: Format) -> String {
    let drawn = links(status);
    let ours: BTreeSet<String> =
        status.routers.iter().map(|r| r.id.clone().unwrap_or_else(|| r.pod.clone())).collect();
    let outside: BTreeSet<&String> =
        drawn.iter().flat_map(|d| [&d.from, &d.to]).filter(|n| !ours.contains(*n)).collect();
    let unreachable: BTreeMap<&str, &str> =
        status.routers.iter().filter_map(|r| Some((r.pod.as_str(), r.error.as_deref()?))).collect();
    let missing = status.mesh.as_ref().map(|m| m.missing_links.clone()).unwrap_or_default();
    let condition = status.conditions.iter().find(|c| c.type_ == "MeshConnected");
    let mut out = String::new();
    match format {
        Format::Text => {
            let summary = status.mesh.as_ref().map_or("not read", |m| m.summary.as_str());
            let _ = write!(out, "Interconnect {name}: {summary}");
            if let Some(c) = condition {
                let _ = write!(out, " (MeshConnected {} {}: {})", c.status, c.reason, c.message);
            }
            out.push('\n');
            for r in &status.routers {
                let me = r.id.clone().unwrap_or_else(|| r.pod.clone());
                let _ = write!(out, "  {}  {}", me, r.mode.as_deref().unwrap_or("?"));
                if let Some(node) = &r.node {
                    let _ = write!(out, "  node {node}");
                }
                if let Some(hash) = &r.config_hash {
                    let _ = write!(out, "  config {hash}");
                }
                if let (Some(i), Some(e)) = (r.inter_router_links, r.edge_links) {
                    let _ = write!(out, "  links {i} inter-router, {e} edge");
                }
                if let Some(why) = &r.error {
                    let _ = write!(out, "  NOT ANSWERING: {why}");
                }
                out.push('\n');
                for d in drawn.iter().filter(|d| d.from == me || d.to == me) {
                    let (arrow, peer) = match (d.role, d.from == me) {
                        ("edge", true) => ("──>", &d.to),
                        ("edge", false) => ("<──", &d.from),
                        (_, true) => ("───", &d.to),
                        (_, false) => ("───", &d.from),
                    };
                    let _ = writeln!(out, "    {arrow} {peer}  {}", d.role);
                }
            }
            for m in &missing {
                let _ = writeln!(out, "  missing link: {} – {}", m.from, m.to);
            }
            if !missing_all_listed(status) {
                let count = status.mesh.as_ref().map_or(0, |m| m.missing_link_count);
                let _ = writeln!(
                    out,
                    "  {count} pairs of interior routers miss a link, more than the status names: interior links not drawn"
                );
            }
        }
        Format::Mermaid => {
            out.push_str("graph LR\n");
            for r in &status.routers {
                let me = r.id.clone().unwrap_or_else(|| r.pod.clone());
                let label = match r.mode.as_deref() {
                    Some(mode) => format!("{me}<br/>{mode}{}", edges(r)),
                    None => me.clone(),
                };
                let class = if unreachable.contains_key(r.pod.as_str()) { ":::unreachable" } else { "" };
                let _ = writeln!(out, "  {}[{}]{class}", node_id(&me), quoted(&label));
            }
            for n in &outside {
                let _ = writeln!(out, "  {}([{}]):::outside", node_id(n), quoted(n));
            }
            for d in &drawn {
                let arrow = if d.role == "edge" { "-->" } else { "---" };
                let _ = writeln!(out, "  {} {arrow}|{}| {}", node_id(&d.from), d.role, node_id(&d.to));
            }
            for m in &missing {
                let _ = writeln!(out, "  {} -.-x|missing| {}", node_id(&m.from), node_id(&m.to));
            }
            out.push_str("  classDef unreachable stroke:#c00,stroke-dasharray:4\n");
            out.push_str("  classDef outside fill:#eee\n");
        }
        Format::Dot => {
            let _ = writeln!(out, "digraph {} {{", quoted(name));
            out.push_str("  rankdir=LR;\n  node [shape=box];\n");
            for r in &status.routers {
                let me = r.id.clone().unwrap_or_else(|| r.pod.clone());
                // DOT's own `\n` between the id and the mode.
                let mode = escaped(&format!("{}{}", r.mode.as_deref().unwrap_or("?"), edges(r)));
                let label = format!("\"{}\\n{mode}\"", escaped(&me));
                let style =
                    if unreachable.contains_key(r.pod.as_str()) { ", style=dashed, color=red" } else { "" };
                let _ = writeln!(out, "  {} [label={label}{style}];", quoted(&me));
            }
            for n in &outside {
                let _ = writeln!(out, "  {} [shape=ellipse, style=filled, fillcolor=lightgray];", quoted(n));
            }
            for d in &drawn {
                let dir = if d.role == "edge" { "" } else { ", dir=none" };
                let _ = writeln!(
                    out,
                    "  {} -> {} [label={}{dir}];",
                    quoted(&d.from),
                    quoted(&d.to),
                    quoted(d.role)
                );
            }
            for m in &missing {
                let _ = writeln!(
                    out,
                    "  {} -> {} [label=\"missing\", style=dashed, color=red, dir=none];",
                    quoted(&m.from),
                    quoted(&m.to)
                );
            }
            out.push_str("}\n");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MeshStatus, MissingLink, RouterStatus};

    fn router(id: &str, mode: &str, links: i32) -> RouterStatus {
        RouterStatus {
            pod: id.into(),
            id: Some(id.into()),
            mode: Some(mode.into()),
            node: Some("real-0".into()),
            config_hash: Some("0123456789".into()),
            inter_router_links: Some(links),
            edge_links: Some(0),
            ..Default::default()
        }
    }

    fn split_mesh() -> InterconnectStatus {
        InterconnectStatus {
            routers: vec![
                router("mesh-a", "interior", 1),
                router("mesh-b", "interior", 1),
                RouterStatus {
                    pod: "mesh-c".into(),
                    error: Some("no answer within 5s".into()),
                    ..Default::default()
                },
            ],
            mesh: Some(MeshStatus {
                summary: "2/3 connected, 1 not answering".into(),
                missing_links: vec![
                    MissingLink { from: "mesh-a".into(), to: "mesh-c".into() },
                    MissingLink { from: "mesh-b".into(), to: "mesh-c".into() },
                ],
                missing_link_count: 2,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn every_pair_of_answering_interiors_is_linked_but_the_missing() {
        let d = links(&split_mesh());
        assert_eq!(
            d.iter().map(|d| (d.from.as_str(), d.to.as_str(), d.role)).collect::<Vec<_>>(),
            [("mesh-a", "mesh-b", "inter-router")]
        );
        // A third answering router with one missing pair: two more links.
        let mut s = split_mesh();
        s.routers[2] = router("mesh-c", "interior", 1);
        s.mesh.as_mut().unwrap().missing_links.truncate(1);
        s.mesh.as_mut().unwrap().missing_link_count = 1;
        let d: Vec<_> = links(&s).into_iter().map(|d| (d.from, d.to)).collect();
        assert_eq!(d, [("mesh-a".into(), "mesh-b".into()), ("mesh-b".into(), "mesh-c".into())]);
    }

    #[test]
    fn more_missing_links_than_listed_draws_no_interior_link() {
        let mut s = split_mesh();
        s.mesh.as_mut().unwrap().missing_link_count = 40;
        assert!(links(&s).is_empty());
        let text = render("mesh", &s, Format::Text);
        assert!(
            text.contains("  40 pairs of interior routers miss a link, more than the status names: interior links not drawn
"),
            "{text}"
        );
    }

    #[test]
    fn text_names_routers_links_and_what_is_missing() {
        let text = render("mesh", &split_mesh(), Format::Text);
        assert!(
            text.starts_with(
                "Interconnect mesh: 2/3 connected, 1 not answering
"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "  mesh-a  interior  node real-0  config 0123456789  links 1 inter-router, 0 edge
    ─── mesh-b  inter-router
"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "    ─── mesh-a  inter-router
"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "  mesh-c  ?  NOT ANSWERING: no answer within 5s
"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "  missing link: mesh-a – mesh-c
  missing link: mesh-b – mesh-c
"
            ),
            "{text}"
        );
        assert!(!text.contains("interior links not drawn"), "{text}");
    }

    #[test]
    fn mermaid_and_dot_draw_the_same_graph() {
        let m = render("mesh", &split_mesh(), Format::Mermaid);
        assert!(m.starts_with("graph LR\n"), "{m}");
        assert!(m.contains("  n_mesh_a[\"mesh-a<br/>interior\"]\n"), "{m}");
        assert!(m.contains("  n_mesh_c[\"mesh-c\"]:::unreachable\n"), "{m}");
        assert!(m.contains("  n_mesh_a ---|inter-router| n_mesh_b\n"), "{m}");
        assert!(m.contains("  n_mesh_a -.-x|missing| n_mesh_c\n"), "{m}");
        let d = render("mesh", &split_mesh(), Format::Dot);
        assert!(d.starts_with("digraph \"mesh\" {\n"), "{d}");
        assert!(d.contains("  \"mesh-a\" -> \"mesh-b\" [label=\"inter-router\", dir=none];\n"), "{d}");
        assert!(d.contains("  \"mesh-c\" [label=\"mesh-c\\n?\", style=dashed, color=red];\n"), "{d}");
        assert!(
            d.contains(
                "  \"mesh-b\" -> \"mesh-c\" [label=\"missing\", style=dashed, color=red, dir=none];\n"
            ),
            "{d}"
        );
        assert!(d.trim_end().ends_with('}'));
    }

    #[test]
    fn an_uplink_to_another_interconnect_is_an_outside_node() {
        let mut leaf = router("leaf-a", "edge", 0);
        leaf.edge_links = Some(1);
        leaf.uplink = Some("hub-0".into());
        let s = InterconnectStatus { routers: vec![leaf], ..Default::default() };
        let m = render("leaf", &s, Format::Mermaid);
        assert!(
            m.contains("  n_hub_0([\"hub-0\"]):::outside\n") && m.contains("  n_leaf_a -->|edge| n_hub_0\n"),
            "{m}"
        );
        let d = render("leaf", &s, Format::Dot);
        assert!(d.contains("\"hub-0\" [shape=ellipse"), "{d}");
        assert!(d.contains("  \"leaf-a\" -> \"hub-0\" [label=\"edge\"];\n"), "{d}");
        let text = render("leaf", &s, Format::Text);
        assert!(text.contains("    ──> hub-0  edge\n"), "{text}");
    }

    #[test]
    fn an_interior_router_counts_its_edge_routers() {
        let mut s = split_mesh();
        s.routers[0].edge_links = Some(2);
        let d = render("mesh", &s, Format::Dot);
        assert!(d.contains("[label=\"mesh-a\\ninterior, 2 edge\"];"), "{d}");
        let m = render("mesh", &s, Format::Mermaid);
        assert!(m.contains("[\"mesh-a<br/>interior, 2 edge\"]"), "{m}");
    }

    #[test]
    fn unread_routers_say_so() {
        let text = render("quiet", &InterconnectStatus::default(), Format::Text);
        assert_eq!(text, "Interconnect quiet: not read\n");
        assert_eq!("svg".parse::<Format>().unwrap_err(), "unknown format \"svg\": text, mermaid or dot");
    }
}
