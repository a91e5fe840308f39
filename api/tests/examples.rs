//! Every example written for the Go operator (`tests/data/go-operator/`) is accepted unchanged by
//! the CRD schema, its CEL rules and `validate`, before and after `defaults` — except the
//! two e2e fixtures that put edgeConnectors on an interior router (see the test below).

mod common;

use qdr_api::offline::OfflineValidator;
use qdr_api::{ErrorType, defaults, validate};

/// Fixtures G and H (the Go e2e suite's connector tests) give an interior router
/// `edgeConnectors`, which this API rejects (an interior router reaches other networks with
/// interRouterConnectors; the router never treats an interior router's edge connection as
/// an uplink). They must fail on exactly that one rule and nothing else.
const INTERIOR_WITH_EDGE_CONNECTORS: [&str; 2] = ["g-spec-connector.yaml", "h-spec-connector-ssl.yaml"];

#[test]
fn go_operator_examples_are_accepted_before_and_after_defaults() {
    let offline = OfflineValidator::default();
    for (file, raw) in common::go_examples() {
        let ic = common::parse(&raw);
        let defaulted = defaults(&ic);
        let defaulted_json = serde_json::to_value(&defaulted).unwrap();
        for (stage, obj, json) in [("as written", &ic, &raw), ("defaulted", &defaulted, &defaulted_json)] {
            let errors = validate(obj);
            let server = offline.check(json);
            if INTERIOR_WITH_EDGE_CONNECTORS.contains(&file.as_str()) {
                assert_eq!(errors.len(), 1, "{file} {stage}: {errors:#?}");
                assert_eq!(errors[0].field, "spec.edgeConnectors");
                assert_eq!(errors[0].error_type, ErrorType::Forbidden);
                assert_eq!(server.len(), 1, "{file} {stage}: {server:#?}");
                assert_eq!(server[0].path, "spec.edgeConnectors");
            } else {
                assert!(errors.is_empty(), "{file} {stage}: {errors:#?}");
                assert!(server.is_empty(), "{file} {stage}: {server:#?}");
            }
        }
    }
}

#[test]
fn examples_round_trip_without_losing_a_field() {
    for (file, raw) in common::go_examples() {
        let ic = common::parse(&raw);
        let back = serde_json::to_value(&ic).unwrap();
        assert_eq!(back["spec"], raw["spec"], "{file}: spec changed on a decode/encode round trip");
    }
}
