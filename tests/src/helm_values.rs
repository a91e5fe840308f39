//! The reference of the Helm chart's values (`docs/helm-values.md`), generated from the
//! chart's own `values.yaml`: every value that has a comment or a default, at its dotted
//! path, with its default as written and the comment above it as its description. The
//! comments of `values.yaml` are the one text; `make helm-values-reference` writes the page
//! and the docs test fails when it is stale.

/// Path of `values.yaml`, relative to the repository root.
pub const VALUES_PATH: &str = "deploy/helm/qdr-operator/values.yaml";
/// Path of the generated page, relative to the repository root.
pub const PAGE_PATH: &str = "docs/helm-values.md";

/// The page for the chart whose `values.yaml` is `values`: an introduction, then one table
/// row per key that has a comment or a value on its line (a map without a comment is only
/// a prefix of its keys' paths). A comment block belongs to the key right below it; a blank
/// line ends a block that no key follows (the file's header). Keys are read by indentation;
/// values are taken as written on the key's line (flow maps and lists included).
pub fn reference(values: &str) -> String {
    let mut out = String::from(
        "# Helm chart values\n\n\
         Every value of the `qdr-operator` chart (`deploy/helm/qdr-operator`), generated from the\n\
         comments of its `values.yaml` (`make helm-values-reference`; `make test` fails when this\n\
         page is stale). Set them with `--set path=value` or a values file. A map's keys are\n\
         listed under its path.\n\n\
         | Value | Default | Description |\n|---|---|---|\n",
    );
    let mut comments: Vec<&str> = Vec::new();
    let mut stack: Vec<(usize, &str)> = Vec::new();
    for line in values.lines() {
        let text = line.trim_start();
        let indent = line.len() - text.len();
        if text.is_empty() {
            comments.clear();
            continue;
        }
        if let Some(c) = text.strip_prefix('#') {
            comments.push(c.trim());
            continue;
        }
        let Some((key, value)) = text.split_once(':') else { continue };
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        let path: Vec<&str> = stack.iter().map(|(_, k)| *k).chain([key]).collect();
        let value = value.trim();
        if value.is_empty() {
            stack.push((indent, key));
        }
        if !value.is_empty() || !comments.is_empty() {
            let default = if value.is_empty() { String::new() } else { format!("`{value}`") };
            let description = qdr_api::docs::table_cell(&comments.join(" "));
            out.push_str(&format!("| `{}` | {default} | {description} |\n", path.join(".")));
        }
        comments.clear();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_take_their_paths_defaults_and_the_comment_above_them() {
        let values = "# The file's header.\n\n\
                      images:\n  # The webhook.\n  webhook:\n    repository: r/w\n    # Empty: <default>.\n    pullPolicy: \"\"\n\
                      # Read them.\nobserveMesh: true\nresources:\n  webhook:\n    limits: {cpu: \"1\"}\n";
        let page = reference(values);
        let rows: Vec<&str> = page.lines().filter(|l| l.starts_with("| `")).collect();
        assert_eq!(
            rows,
            [
                "| `images.webhook` |  | The webhook. |",
                "| `images.webhook.repository` | `r/w` |  |",
                "| `images.webhook.pullPolicy` | `\"\"` | Empty: &lt;default&gt;. |",
                "| `observeMesh` | `true` | Read them. |",
                "| `resources.webhook.limits` | `{cpu: \"1\"}` |  |",
            ]
        );
    }
}
