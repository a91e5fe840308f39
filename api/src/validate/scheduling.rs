//! The scheduling and metadata fields of `deploymentPlan`: `tolerations`,
//! `nodeSelector`, `topologySpreadConstraints`, `priorityClassName`, `podLabels`,
//! `podAnnotations` and `serviceAnnotations`. Each is Kubernetes' own type, judged here the
//! way the API server judges it in a pod or Service (`k8s.io/kubernetes/pkg/apis/core/validation`,
//! apimachinery's label and annotation rules), so the webhook refuses at once, with every
//! cause at its path, what the API server would otherwise refuse later in the workload's
//! pods (where only the workload's status would say so). The keys the operator owns
//! ([`crate::owned_keys`]) are refused too.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Toleration, TopologySpreadConstraint};

use crate::types::{DeploymentPlan, Placement};

use super::checks::Validator;
use super::field_error::ErrorType;
use super::names::{is_dns_subdomain, is_label_value, is_qualified_name};

/// Tolerations at most (the schema's `maxItems`).
pub const MAX_TOLERATIONS: usize = 32;
/// Topology spread constraints at most (the schema's `maxItems`).
pub const MAX_SPREAD_CONSTRAINTS: usize = 8;
/// Entries of `nodeSelector`, `podLabels`, `podAnnotations` and `serviceAnnotations` at
/// most (the schema's `maxProperties`).
pub const MAX_METADATA_ENTRIES: usize = 64;
/// Items of a spread constraint's `matchLabelKeys` and of its selector's
/// `matchExpressions` at most (the schema's `maxItems`).
pub const MAX_SELECTOR_TERMS: usize = 16;
/// Values of one selector expression at most (the schema's `maxItems`).
pub const MAX_SELECTOR_VALUES: usize = 64;
/// Bytes of one object's annotations at most, keys and values (apimachinery's
/// `TotalAnnotationSizeLimitB`).
pub const MAX_ANNOTATION_BYTES: usize = 256 * 1024;

const KEY_FORMAT: &str = "must be a qualified name: an optional DNS subdomain prefix and '/', then at most 63 \
     alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric (e.g. 'example.com/tier')";
const VALUE_FORMAT: &str = "must be empty or at most 63 alphanumerics, '-', '_' or '.', starting and ending \
     with an alphanumeric";

/// Which map is judged: what its keys and values must be.
#[derive(Clone, Copy)]
enum Map {
    /// `nodeSelector`: label keys and values.
    NodeSelector,
    /// `podLabels`: label keys and values, the operator's keys refused.
    PodLabels,
    /// `podAnnotations`: annotation keys, the operator's refused; any values.
    PodAnnotations,
    /// `serviceAnnotations`: annotation keys, the operator's refused; any values.
    ServiceAnnotations,
}

impl Validator {
    /// The scheduling and metadata fields of `plan`.
    pub(super) fn scheduling(&mut self, plan: &DeploymentPlan) {
        let base = "spec.deploymentPlan";
        self.max_items(format_args!("{base}.tolerations"), &plan.tolerations, MAX_TOLERATIONS);
        for (i, t) in plan.tolerations.iter().flatten().enumerate() {
            self.toleration(&format!("{base}.tolerations[{i}]"), t);
        }
        self.metadata_map("nodeSelector", &plan.node_selector, Map::NodeSelector);
        if plan.topology_spread_constraints.as_ref().is_some_and(|c| !c.is_empty())
            && plan.placement == Some(Placement::Every)
        {
            self.push(
                format_args!("{base}.topologySpreadConstraints"),
                ErrorType::Forbidden,
                None,
                "may not be set with placement Every: a DaemonSet runs one router per node already, and a \
                 DoNotSchedule constraint could only keep routers from running",
            );
        }
        self.max_items(
            format_args!("{base}.topologySpreadConstraints"),
            &plan.topology_spread_constraints,
            MAX_SPREAD_CONSTRAINTS,
        );
        let constraints = plan.topology_spread_constraints.as_deref().unwrap_or_default();
        for (i, c) in constraints.iter().enumerate() {
            let at = format!("{base}.topologySpreadConstraints[{i}]");
            self.spread(&at, c);
            // `ValidateSpreadConstraintNotRepeat`: one constraint per pair, reported at the
            // first of two, as the API server does.
            let same = |o: &TopologySpreadConstraint| {
                o.topology_key == c.topology_key && o.when_unsatisfiable == c.when_unsatisfiable
            };
            if constraints[i + 1..].iter().any(same) {
                self.push(
                    format_args!("{at}.{{topologyKey, whenUnsatisfiable}}"),
                    ErrorType::Duplicate,
                    Some(format!("{{{}, {}}}", c.topology_key, c.when_unsatisfiable).into()),
                    "a later constraint has the same topologyKey and whenUnsatisfiable",
                );
            }
        }
        if let Some(p) = &plan.priority_class_name
            && !is_dns_subdomain(p)
        {
            self.push(
                format_args!("{base}.priorityClassName"),
                ErrorType::Invalid,
                Some(p.as_str().into()),
                "must be a DNS subdomain: at most 253 lowercase letters, digits, '-' and '.', starting and \
                 ending with a letter or digit",
            );
        }
        self.metadata_map("podLabels", &plan.pod_labels, Map::PodLabels);
        self.metadata_map("podAnnotations", &plan.pod_annotations, Map::PodAnnotations);
        self.metadata_map("serviceAnnotations", &plan.service_annotations, Map::ServiceAnnotations);
    }

    /// One toleration, as `validateTolerations` judges a pod's.
    fn toleration(&mut self, path: &str, t: &Toleration) {
        let key = t.key.as_deref().unwrap_or_default();
        let operator = t.operator.as_deref().unwrap_or("Equal");
        let value = t.value.as_deref().unwrap_or_default();
        if !key.is_empty() && !is_qualified_name(key) {
            self.push(format_args!("{path}.key"), ErrorType::Invalid, Some(key.into()), KEY_FORMAT);
        }
        match operator {
            "Equal" | "" => {
                if key.is_empty() {
                    self.push(
                        format_args!("{path}.operator"),
                        ErrorType::Invalid,
                        Some(operator.into()),
                        "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
                    );
                }
                if !is_label_value(value) {
                    self.push(
                        format_args!("{path}.value"),
                        ErrorType::Invalid,
                        Some(value.into()),
                        VALUE_FORMAT,
                    );
                }
            }
            "Exists" => {
                if !value.is_empty() {
                    self.push(
                        format_args!("{path}.operator"),
                        ErrorType::Invalid,
                        Some(value.into()),
                        "value must be empty when `operator` is 'Exists'",
                    );
                }
            }
            other => {
                self.enumeration(format_args!("{path}.operator"), other, false, &["Equal", "Exists"], "")
            }
        }
        let effect = t.effect.as_deref().unwrap_or_default();
        if !matches!(effect, "" | "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
            self.enumeration(
                format_args!("{path}.effect"),
                effect,
                false,
                &["NoSchedule", "PreferNoSchedule", "NoExecute"],
                "",
            );
        }
        if t.toleration_seconds.is_some() && effect != "NoExecute" {
            self.push(
                format_args!("{path}.effect"),
                ErrorType::Invalid,
                Some(effect.into()),
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            );
        }
    }

    /// One topology spread constraint, as `validateTopologySpreadConstraints` judges a pod's.
    fn spread(&mut self, path: &str, c: &TopologySpreadConstraint) {
        if c.max_skew < 1 {
            self.push(
                format_args!("{path}.maxSkew"),
                ErrorType::Invalid,
                Some(c.max_skew.into()),
                "must be greater than zero",
            );
        }
        // `ValidateTopologyKey` asks only for a key (one no node label can have is admitted,
        // and warned of: `crate::warnings`).
        if c.topology_key.is_empty() {
            self.push(format_args!("{path}.topologyKey"), ErrorType::Required, None, "can not be empty");
        }
        let when = c.when_unsatisfiable.as_str();
        self.enumeration(
            format_args!("{path}.whenUnsatisfiable"),
            when,
            matches!(when, "DoNotSchedule" | "ScheduleAnyway"),
            &["DoNotSchedule", "ScheduleAnyway"],
            "",
        );
        if let Some(m) = c.min_domains {
            if m < 1 {
                self.push(
                    format_args!("{path}.minDomains"),
                    ErrorType::Invalid,
                    Some(m.into()),
                    "must be greater than zero",
                );
            } else if when != "DoNotSchedule" {
                self.push(
                    format_args!("{path}.minDomains"),
                    ErrorType::Invalid,
                    Some(m.into()),
                    "can only use minDomains if whenUnsatisfiable=DoNotSchedule",
                );
            }
        }
        for (field, v) in
            [("nodeAffinityPolicy", &c.node_affinity_policy), ("nodeTaintsPolicy", &c.node_taints_policy)]
        {
            if let Some(v) = v {
                self.enumeration(
                    format_args!("{path}.{field}"),
                    v,
                    matches!(v.as_str(), "Honor" | "Ignore"),
                    &["Honor", "Ignore"],
                    "",
                );
            }
        }
        self.max_items(format_args!("{path}.matchLabelKeys"), &c.match_label_keys, MAX_SELECTOR_TERMS);
        // `validateMatchLabelKeysInTopologySpread`, over the selector the pods get: the
        // constraint's own, or (without one) the routers' that the operator fills in.
        let selector_keys: Vec<&str> = match &c.label_selector {
            Some(s) => (s.match_labels.iter().flatten().map(|(k, _)| k.as_str()))
                .chain(s.match_expressions.iter().flatten().map(|e| e.key.as_str()))
                .collect(),
            None => crate::owned_keys::SELECTOR_LABELS.to_vec(),
        };
        for (i, k) in c.match_label_keys.iter().flatten().enumerate() {
            if !is_qualified_name(k) {
                self.push(
                    format_args!("{path}.matchLabelKeys[{i}]"),
                    ErrorType::Invalid,
                    Some(k.as_str().into()),
                    KEY_FORMAT,
                );
            } else if selector_keys.contains(&k.as_str()) {
                self.push(
                    format_args!("{path}.matchLabelKeys[{i}]"),
                    ErrorType::Invalid,
                    Some(k.as_str().into()),
                    if c.label_selector.is_some() {
                        "exists in both matchLabelKeys and labelSelector"
                    } else {
                        "exists in both matchLabelKeys and the labelSelector the operator gives a constraint without \
                         one (application, interconnect_cr: this Interconnect's routers)"
                    },
                );
            }
        }
        if let Some(selector) = &c.label_selector {
            for (k, v) in selector.match_labels.iter().flatten() {
                let at = format!("{path}.labelSelector.matchLabels[{k}]");
                if !is_qualified_name(k) {
                    self.push(&at, ErrorType::Invalid, Some(k.as_str().into()), KEY_FORMAT);
                } else if !is_label_value(v) {
                    self.push(&at, ErrorType::Invalid, Some(v.as_str().into()), VALUE_FORMAT);
                }
            }
            self.max_items(
                format_args!("{path}.labelSelector.matchExpressions"),
                &selector.match_expressions,
                MAX_SELECTOR_TERMS,
            );
            for (i, e) in selector.match_expressions.iter().flatten().enumerate() {
                let at = format!("{path}.labelSelector.matchExpressions[{i}]");
                self.max_items(format_args!("{at}.values"), &e.values, MAX_SELECTOR_VALUES);
                if !is_qualified_name(&e.key) {
                    self.push(
                        format_args!("{at}.key"),
                        ErrorType::Invalid,
                        Some(e.key.as_str().into()),
                        KEY_FORMAT,
                    );
                }
                for (j, v) in e.values.iter().flatten().enumerate() {
                    if !is_label_value(v) {
                        self.push(
                            format_args!("{at}.values[{j}]"),
                            ErrorType::Invalid,
                            Some(v.as_str().into()),
                            VALUE_FORMAT,
                        );
                    }
                }
                let values = e.values.as_ref().map_or(0, Vec::len);
                match e.operator.as_str() {
                    "In" | "NotIn" if values == 0 => self.push(
                        format_args!("{at}.values"),
                        ErrorType::Required,
                        None,
                        "must be specified when `operator` is 'In' or 'NotIn'",
                    ),
                    "Exists" | "DoesNotExist" if values > 0 => self.push(
                        format_args!("{at}.values"),
                        ErrorType::Forbidden,
                        None,
                        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    ),
                    "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
                    other => self.enumeration(
                        format_args!("{at}.operator"),
                        other,
                        false,
                        &["In", "NotIn", "Exists", "DoesNotExist"],
                        "",
                    ),
                }
            }
        }
    }

    /// A map of labels or annotations: its size, each key, each label value, the keys the
    /// operator owns, and the annotations' total size.
    fn metadata_map(&mut self, field: &str, map: &Option<BTreeMap<String, String>>, kind: Map) {
        let Some(map) = map else { return };
        let path = &format!("spec.deploymentPlan.{field}");
        if map.len() > MAX_METADATA_ENTRIES {
            self.push(
                path,
                ErrorType::TooMany,
                Some(map.len().into()),
                format!("must have at most {MAX_METADATA_ENTRIES} items"),
            );
        }
        let labels = matches!(kind, Map::NodeSelector | Map::PodLabels);
        for (k, v) in map {
            let at = format!("{path}[{k}]");
            // `ValidateAnnotations` judges a key lowercased (`Example.com/x` is taken);
            // label keys as written.
            let judged =
                if labels { std::borrow::Cow::Borrowed(k.as_str()) } else { k.to_lowercase().into() };
            if !is_qualified_name(&judged) {
                self.push(&at, ErrorType::Invalid, Some(k.as_str().into()), KEY_FORMAT);
                continue;
            }
            let owned = match kind {
                Map::NodeSelector => false,
                Map::PodLabels => crate::owned_keys::owned_pod_label(k),
                Map::PodAnnotations => crate::owned_keys::owned_pod_annotation(k),
                Map::ServiceAnnotations => crate::owned_keys::owned_service_annotation(k),
            };
            if owned {
                self.push(
                    &at,
                    ErrorType::Forbidden,
                    None,
                    format!(
                        "{k} is set by the operator (or the workload controller) and may not be set here: keys \
                         under {} and {}",
                        crate::owned_keys::RESERVED_PREFIX,
                        match kind {
                            Map::PodLabels => crate::owned_keys::POD_LABELS.join(", "),
                            Map::PodAnnotations => crate::owned_keys::POD_ANNOTATIONS.join(", "),
                            _ => "none other".to_string(),
                        }
                    ),
                );
            } else if labels && !is_label_value(v) {
                self.push(&at, ErrorType::Invalid, Some(v.as_str().into()), VALUE_FORMAT);
            }
        }
        if !labels {
            let bytes: usize = map.iter().map(|(k, v)| k.len() + v.len()).sum();
            // The pods' annotations hold the operator's too.
            let (max, why) = match kind {
                Map::PodAnnotations => (
                    MAX_ANNOTATION_BYTES - crate::owned_keys::POD_ANNOTATION_RESERVE,
                    format!(
                        " (the API server's {MAX_ANNOTATION_BYTES} for an object's annotations, less {} kept for the \
                         operator's own)",
                        crate::owned_keys::POD_ANNOTATION_RESERVE
                    ),
                ),
                _ => (MAX_ANNOTATION_BYTES, String::new()),
            };
            if bytes > max {
                self.push(
                    path,
                    ErrorType::TooLong,
                    None,
                    format!("may not have more than {max} bytes in all{why} ({bytes} given)"),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::types::Interconnect;

    /// `(field, reason)` of every cause of a spec with `plan` as its `deploymentPlan`.
    fn causes(plan: serde_json::Value) -> Vec<(String, &'static str)> {
        let ic: Interconnect = serde_json::from_value(json!({
            "apiVersion": "interconnectedcloud.github.io/v1alpha1", "kind": "Interconnect",
            "metadata": {"name": "mesh"}, "spec": {"deploymentPlan": plan},
        }))
        .unwrap();
        crate::validate(&ic).into_iter().map(|e| (e.field.clone(), e.error_type.reason())).collect()
    }

    #[test]
    fn what_the_api_server_takes_in_a_pod_is_taken() {
        let plan = json!({
            "placement": "AntiAffinity", "size": 3,
            "tolerations": [
                {"key": "dedicated", "operator": "Equal", "value": "messaging", "effect": "NoSchedule"},
                {"operator": "Exists"},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 30},
            ],
            "nodeSelector": {"kubernetes.io/os": "linux", "tier": ""},
            "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
                 "minDomains": 2, "nodeTaintsPolicy": "Honor", "matchLabelKeys": ["pod-template-hash"]},
                {"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
                 "labelSelector": {"matchLabels": {"application": "mesh"},
                                   "matchExpressions": [{"key": "tier", "operator": "Exists"}]}},
            ],
            "priorityClassName": "messaging-critical",
            "podLabels": {"team": "payments", "example.com/cost-center": "42"},
            "podAnnotations": {"sidecar.istio.io/inject": "false", "note": "any text: at all"},
            "serviceAnnotations": {"service.beta.kubernetes.io/aws-load-balancer-type": "nlb"},
        });
        assert_eq!(causes(plan), []);
    }

    #[test]
    fn every_cause_is_at_its_path() {
        let plan = json!({
            "placement": "Every",
            "tolerations": [
                {"key": "a b", "operator": "Equal", "value": "x"},
                {"operator": "Equal", "value": "x"},
                {"key": "k", "operator": "Exists", "value": "v"},
                {"key": "k", "operator": "Maybe", "effect": "Sometimes"},
                {"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5},
            ],
            "nodeSelector": {"-bad": "x", "good": "not valid!"},
            "topologySpreadConstraints": [
                {"maxSkew": 0, "topologyKey": "", "whenUnsatisfiable": "Never", "minDomains": 0,
                 "nodeAffinityPolicy": "Sometimes",
                 "labelSelector": {"matchExpressions": [{"key": "k", "operator": "In"}]}},
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway", "minDomains": 2},
            ],
            "priorityClassName": "Not_A_Name",
            "podLabels": {"application": "other", "app.kubernetes.io/managed-by": "me", "ok": "a/b"},
            "podAnnotations": {"prometheus.io/port": "1", "qdr-operator.io/config-hash": "x"},
            "serviceAnnotations": {"qdr-operator.io/anything": "x", "bad key": "x"},
        });
        let p = "spec.deploymentPlan";
        let want = [
            (format!("{p}.tolerations[0].key"), "FieldValueInvalid"),
            (format!("{p}.tolerations[1].operator"), "FieldValueInvalid"),
            (format!("{p}.tolerations[2].operator"), "FieldValueInvalid"),
            (format!("{p}.tolerations[3].operator"), "FieldValueNotSupported"),
            (format!("{p}.tolerations[3].effect"), "FieldValueNotSupported"),
            (format!("{p}.tolerations[4].effect"), "FieldValueInvalid"),
            (format!("{p}.nodeSelector[-bad]"), "FieldValueInvalid"),
            (format!("{p}.nodeSelector[good]"), "FieldValueInvalid"),
            (format!("{p}.topologySpreadConstraints"), "FieldValueForbidden"),
            (format!("{p}.topologySpreadConstraints[0].maxSkew"), "FieldValueInvalid"),
            (format!("{p}.topologySpreadConstraints[0].topologyKey"), "FieldValueRequired"),
            (format!("{p}.topologySpreadConstraints[0].whenUnsatisfiable"), "FieldValueNotSupported"),
            (format!("{p}.topologySpreadConstraints[0].minDomains"), "FieldValueInvalid"),
            (format!("{p}.topologySpreadConstraints[0].nodeAffinityPolicy"), "FieldValueNotSupported"),
            (
                format!("{p}.topologySpreadConstraints[0].labelSelector.matchExpressions[0].values"),
                "FieldValueRequired",
            ),
            (format!("{p}.topologySpreadConstraints[1].minDomains"), "FieldValueInvalid"),
            (format!("{p}.priorityClassName"), "FieldValueInvalid"),
            (format!("{p}.podLabels[app.kubernetes.io/managed-by]"), "FieldValueForbidden"),
            (format!("{p}.podLabels[application]"), "FieldValueForbidden"),
            (format!("{p}.podLabels[ok]"), "FieldValueInvalid"),
            (format!("{p}.podAnnotations[prometheus.io/port]"), "FieldValueForbidden"),
            (format!("{p}.podAnnotations[qdr-operator.io/config-hash]"), "FieldValueForbidden"),
            (format!("{p}.serviceAnnotations[bad key]"), "FieldValueInvalid"),
            (format!("{p}.serviceAnnotations[qdr-operator.io/anything]"), "FieldValueForbidden"),
        ];
        let got = causes(plan);
        let want: Vec<(String, &str)> = want.into_iter().collect();
        assert_eq!(got, want);
    }

    #[test]
    fn sizes_are_bounded() {
        let many: serde_json::Map<String, serde_json::Value> =
            (0..=super::MAX_METADATA_ENTRIES).map(|i| (format!("k{i}"), json!("v"))).collect();
        let big = "x".repeat(super::MAX_ANNOTATION_BYTES);
        let tolerations: Vec<_> =
            (0..=super::MAX_TOLERATIONS).map(|_| json!({"operator": "Exists"})).collect();
        let plan = json!({"podLabels": many, "serviceAnnotations": {"a": big}, "tolerations": tolerations});
        let p = "spec.deploymentPlan";
        assert_eq!(
            causes(plan),
            [
                (format!("{p}.tolerations"), "FieldValueTooMany"),
                (format!("{p}.podLabels"), "FieldValueTooMany"),
                (format!("{p}.serviceAnnotations"), "FieldValueTooLong"),
            ]
        );
    }

    /// Issue 72: what the admission-parity test found the API server refuses and the
    /// webhook took (a second constraint of the same pair; a `matchLabelKeys` key the
    /// selector has, the operator's filled-in one included; pod annotations that leave no room
    /// for the operator's), and what it took that the webhook refused (a `topologyKey` that
    /// is no label key; an annotation key with capitals in its prefix).
    #[test]
    fn the_api_servers_rules_found_by_the_parity_test() {
        let spread =
            |c: serde_json::Value| json!({"placement": "Any", "size": 2, "topologySpreadConstraints": c});
        let zone = |when: &str| json!({"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": when});
        assert_eq!(
            causes(spread(json!([zone("DoNotSchedule"), zone("ScheduleAnyway"), zone("DoNotSchedule")]))),
            [(
                "spec.deploymentPlan.topologySpreadConstraints[0].{topologyKey, whenUnsatisfiable}"
                    .to_string(),
                "FieldValueDuplicate"
            )]
        );
        let with_keys = |selector: Option<serde_json::Value>, keys: serde_json::Value| {
            let mut c = zone("DoNotSchedule");
            c["matchLabelKeys"] = keys;
            if let Some(s) = selector {
                c["labelSelector"] = s;
            }
            causes(spread(json!([c])))
        };
        let at = "spec.deploymentPlan.topologySpreadConstraints[0].matchLabelKeys";
        assert_eq!(
            with_keys(None, json!(["pod-template-hash", "application"])),
            [(format!("{at}[1]"), "FieldValueInvalid")]
        );
        assert_eq!(with_keys(None, json!(["interconnect_cr"])), [(format!("{at}[0]"), "FieldValueInvalid")]);
        let selector = json!({"matchLabels": {"tier": "a"}, "matchExpressions": [{"key": "zone", "operator": "Exists"}]});
        assert_eq!(with_keys(Some(selector.clone()), json!(["application", "tier", "zone"])).len(), 2);
        assert_eq!(with_keys(Some(selector), json!(["application"])), []);
        // Selector values are label values.
        let mut c = zone("DoNotSchedule");
        c["labelSelector"] =
            json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "-v"]}]});
        assert_eq!(
            causes(spread(json!([c]))),
            [(
                "spec.deploymentPlan.topologySpreadConstraints[0].labelSelector.matchExpressions[0].values[1]".to_string(),
                "FieldValueInvalid"
            )]
        );
        // No label key, but the API server takes it: admitted, warned of.
        let odd =
            spread(json!([{"maxSkew": 1, "topologyKey": "-bad", "whenUnsatisfiable": "DoNotSchedule"}]));
        assert_eq!(causes(odd.clone()), []);
        let ic: Interconnect =
            serde_json::from_value(json!({"metadata": {"name": "mesh"}, "spec": {"deploymentPlan": odd}}))
                .unwrap();
        assert!(
            crate::warnings(&ic).iter().any(|w| w.contains("is no label key")),
            "{:?}",
            crate::warnings(&ic)
        );
        // Annotation keys are judged lowercased; label keys as written.
        let capital =
            json!({"podAnnotations": {"Example.com/x": "v"}, "serviceAnnotations": {"Example.com/x": "v"}});
        assert_eq!(causes(capital), []);
        assert_eq!(causes(json!({"podLabels": {"Example.com/x": "v"}})).len(), 1);
        // Pod annotations leave room for the operator's; the Service's may take all 256 KiB.
        let near = |field: &str, room: usize| {
            let value = "a".repeat(super::MAX_ANNOTATION_BYTES - room - 1);
            causes(json!({field: {"k": value}}))
        };
        assert_eq!(near("serviceAnnotations", 0), []);
        assert_eq!(
            near("podAnnotations", 0),
            [("spec.deploymentPlan.podAnnotations".to_string(), "FieldValueTooLong")]
        );
        assert_eq!(near("podAnnotations", crate::owned_keys::POD_ANNOTATION_RESERVE), []);
    }
}
