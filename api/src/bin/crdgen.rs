//! Prints the Interconnect CRD as YAML (`make crd` writes it to `deploy/crds/`).

fn main() {
    print!("{}", qdr_api::crd_yaml());
}
