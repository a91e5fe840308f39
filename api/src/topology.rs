//! The topology of one Interconnect, drawn from its status (`status.routers`,
//! `status.mesh`: what the routers themselves reported to the controller,
//! docs/mesh-status.md) as text, a Mermaid flowchart or a Graphviz DOT graph. Pure: the
//! `kubectl-qdr topology` command reads the object and prints this.
//!
//! Each link is drawn once, from the router that opened it (its connector, `direction:
//! out`) to its peer, whichever end reported it; a peer that is not one of the
//! Interconnect's routers (an interior router another Interconnect runs, for an edge's
//! uplink) is drawn as an outside node. Missing links are drawn dashed, routers that did
//! not answer are marked.

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

/// A link drawn once: the router that opened it, its peer, and its role.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Drawn {
    from: String,
    to: String,
    role: String,
    encrypted: bool,
}

/// The links of `status`, each once (see the module docs).
fn links(status: &InterconnectStatus) -> BTreeSet<Drawn> {
    let mut out = BTreeSet::new();
    let mut seen: BTreeSet<(String, String)> = BTreeSet::new();
    // Links as their opener reports them first, then those only the other end reported.
    for outgoing in [true, false] {
        for r in &status.routers {
            let me = r.id.clone().unwrap_or_else(|| r.pod.clone());
            for l in &r.links {
                if (l.direction == "out") != outgoing {
                    continue;
                }
                let (from, to) =
                    if outgoing { (me.clone(), l.peer.clone()) } else { (l.peer.clone(), me.clone()) };
                let pair = if from < to { (from.clone(), to.clone()) } else { (to.clone(), from.clone()) };
                if seen.insert(pair) {
                    out.insert(Drawn { from, to, role: l.role.clone(), encrypted: l.encrypted });
                }
            }
        }
    }
    out
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
                if let Some(c) = r.client_connections {
                    let _ = write!(out, "  clients {c}");
                }
                if let Some(why) = &r.error {
                    let _ = write!(out, "  NOT ANSWERING: {why}");
                }
                out.push('\n');
                for d in drawn.iter().filter(|d| d.from == me || d.to == me) {
                    let (arrow, peer) = if d.from == me { ("──>", &d.to) } else { ("<──", &d.from) };
                    let tls = if d.encrypted { "TLS" } else { "plain" };
                    let _ = writeln!(out, "    {arrow} {peer}  {} {tls}", d.role);
                }
            }
            for m in &missing {
                let _ = writeln!(out, "  missing link: {} – {}", m.from, m.to);
            }
        }
        Format::Mermaid => {
            out.push_str("graph LR\n");
            for r in &status.routers {
                let me = r.id.clone().unwrap_or_else(|| r.pod.clone());
                let label = match r.mode.as_deref() {
                    Some(mode) => format!("{me}<br/>{mode}"),
                    None => me.clone(),
                };
                let class = if unreachable.contains_key(r.pod.as_str()) { ":::unreachable" } else { "" };
                let _ = writeln!(out, "  {}[{}]{class}", node_id(&me), quoted(&label));
            }
            for n in &outside {
                let _ = writeln!(out, "  {}([{}]):::outside", node_id(n), quoted(n));
            }
            for d in &drawn {
                let _ = writeln!(out, "  {} -->|{}| {}", node_id(&d.from), d.role, node_id(&d.to));
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
                let mode = escaped(r.mode.as_deref().unwrap_or("?"));
                let label = format!("\"{}\\n{mode}\"", escaped(&me));
                let style =
                    if unreachable.contains_key(r.pod.as_str()) { ", style=dashed, color=red" } else { "" };
                let _ = writeln!(out, "  {} [label={label}{style}];", quoted(&me));
            }
            for n in &outside {
                let _ = writeln!(out, "  {} [shape=ellipse, style=filled, fillcolor=lightgray];", quoted(n));
            }
            for d in &drawn {
                let _ =
                    writeln!(out, "  {} -> {} [label={}];", quoted(&d.from), quoted(&d.to), quoted(&d.role));
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
    use crate::{MeshStatus, MissingLink, RouterLink, RouterStatus};

    fn router(id: &str, links: &[(&str, &str, &str)]) -> RouterStatus {
        RouterStatus {
            pod: id.into(),
            id: Some(id.into()),
            mode: Some("interior".into()),
            node: Some("real-0".into()),
            config_hash: Some("0123456789".into()),
            client_connections: Some(1),
            links: links
                .iter()
                .map(|(role, peer, dir)| RouterLink {
                    role: role.to_string(),
                    peer: peer.to_string(),
                    direction: dir.to_string(),
                    encrypted: true,
                })
                .collect(),
            ..Default::default()
        }
    }

    fn split_mesh() -> InterconnectStatus {
        InterconnectStatus {
            routers: vec![
                router("mesh-a", &[("inter-router", "mesh-b", "out")]),
                router("mesh-b", &[("inter-router", "mesh-a", "in")]),
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
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn each_link_is_drawn_once_from_its_opener() {
        let s = split_mesh();
        let d = links(&s);
        assert_eq!(d.len(), 1, "{d:?}");
        let only = d.iter().next().unwrap();
        assert_eq!((only.from.as_str(), only.to.as_str()), ("mesh-a", "mesh-b"));
        // Reported by the other end only: still drawn from the opener.
        let mut s = split_mesh();
        s.routers[0].links.clear();
        let d = links(&s);
        assert_eq!(
            d.iter().map(|d| (d.from.as_str(), d.to.as_str())).collect::<Vec<_>>(),
            [("mesh-a", "mesh-b")]
        );
    }

    #[test]
    fn text_names_routers_links_and_what_is_missing() {
        let text = render("mesh", &split_mesh(), Format::Text);
        assert!(text.starts_with("Interconnect mesh: 2/3 connected, 1 not answering\n"), "{text}");
        assert!(text.contains("  mesh-a  interior  node real-0  config 0123456789  clients 1\n    ──> mesh-b  inter-router TLS\n"), "{text}");
        assert!(text.contains("    <── mesh-a  inter-router TLS\n"), "{text}");
        assert!(text.contains("  mesh-c  ?  NOT ANSWERING: no answer within 5s\n"), "{text}");
        assert!(
            text.contains("  missing link: mesh-a – mesh-c\n  missing link: mesh-b – mesh-c\n"),
            "{text}"
        );
    }

    #[test]
    fn mermaid_and_dot_draw_the_same_graph() {
        let m = render("mesh", &split_mesh(), Format::Mermaid);
        assert!(m.starts_with("graph LR\n"), "{m}");
        assert!(m.contains("  n_mesh_a[\"mesh-a<br/>interior\"]\n"), "{m}");
        assert!(m.contains("  n_mesh_c[\"mesh-c\"]:::unreachable\n"), "{m}");
        assert!(m.contains("  n_mesh_a -->|inter-router| n_mesh_b\n"), "{m}");
        assert!(m.contains("  n_mesh_a -.-x|missing| n_mesh_c\n"), "{m}");
        let d = render("mesh", &split_mesh(), Format::Dot);
        assert!(d.starts_with("digraph \"mesh\" {\n"), "{d}");
        assert!(d.contains("  \"mesh-a\" -> \"mesh-b\" [label=\"inter-router\"];\n"), "{d}");
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
        let mut s = InterconnectStatus {
            routers: vec![router("leaf-a", &[("edge", "hub-0", "out")])],
            ..Default::default()
        };
        s.routers[0].mode = Some("edge".into());
        let m = render("leaf", &s, Format::Mermaid);
        assert!(
            m.contains("  n_hub_0([\"hub-0\"]):::outside\n") && m.contains("  n_leaf_a -->|edge| n_hub_0\n"),
            "{m}"
        );
        let d = render("leaf", &s, Format::Dot);
        assert!(d.contains("\"hub-0\" [shape=ellipse"), "{d}");
    }

    #[test]
    fn unread_routers_say_so() {
        let text = render("quiet", &InterconnectStatus::default(), Format::Text);
        assert_eq!(text, "Interconnect quiet: not read\n");
        assert_eq!("svg".parse::<Format>().unwrap_err(), "unknown format \"svg\": text, mermaid or dot");
    }
}
