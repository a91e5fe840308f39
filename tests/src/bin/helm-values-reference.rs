//! Prints `docs/helm-values.md`, the reference of the Helm chart's values, from the chart's
//! `values.yaml` (`qdr_tests::helm_values`): `make helm-values-reference` writes it.

fn main() {
    let root = qdr_tests::workspace_root();
    let path = root.join(qdr_tests::helm_values::VALUES_PATH);
    let values = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    print!("{}", qdr_tests::helm_values::reference(&values));
}
