//! Prints a CRD as YAML (`make crd` writes each to `deploy/crds/`): `crdgen` or `crdgen
//! interconnects` the Interconnect CRD, `crdgen accessgrants` and `crdgen links` the kinds of
//! links across clusters.

fn main() {
    match std::env::args().nth(1).as_deref() {
        None | Some("interconnects") => print!("{}", qdr_api::crd_yaml()),
        Some("accessgrants") => print!("{}", qdr_api::links::crd_yaml_of(&qdr_api::links::grant_crd())),
        Some("links") => print!("{}", qdr_api::links::crd_yaml_of(&qdr_api::links::link_crd())),
        Some(other) => {
            eprintln!("crdgen: unknown CRD {other:?} (interconnects, accessgrants or links)");
            std::process::exit(2);
        }
    }
}
