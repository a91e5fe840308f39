//! The ConfigMaps and the generated users Secret the router pods mount.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};

use crate::validated::ValidatedInterconnect;
use qdr_api::router_config::{CONFIG_FILE, Rendered};

/// Where the SASL users Secret is mounted.
pub(crate) const SASL_USERS_DIR: &str = "/etc/qpid-dispatch/sasl-users";
/// Content of the `<name>-sasl-config` ConfigMap (Go operator parity).
pub(crate) const SASL_CONFIG: &str =
    "\npwcheck_method: auxprop\nauxprop_plugin: sasldb\nsasldb_path: /tmp/qdrouterd.sasldb\n";
/// The user the generated users Secret holds (Go operator parity).
pub(crate) const GENERATED_USER: &str = "guest";

/// ConfigMap `<name>-router-config-<start-up hash>` ([`ValidatedInterconnect::router_config_name`]
/// of [`Rendered::startup_hash`]): the whole rendered router configuration under
/// [`CONFIG_FILE`], mounted read-only at [`CONFIG_DIR`](qdr_api::router_config::CONFIG_DIR). A start-up change makes a new
/// ConfigMap and a new pod template, so a router of the old revision that restarts
/// mid-rollout reads a configuration made for its own template. With live entities
/// ([`Rendered::live`]) it is updated in place when only they change, so that a router that
/// restarts starts with what the running ones were given (docs/live-configuration.md);
/// without, it is immutable. Old ones are pruned once no router mounts them. Its size is
/// bounded by `qdr_api::validate` (a ConfigMap holds at most 1 MiB).
pub fn router_config_map(o: &ValidatedInterconnect, config: &Rendered) -> ConfigMap {
    ConfigMap {
        metadata: o.meta(&o.router_config_name(&config.startup_hash)),
        data: Some(BTreeMap::from([(CONFIG_FILE.into(), config.text.clone())])),
        immutable: (!config.live).then_some(true),
        ..Default::default()
    }
}

/// ConfigMap `<name>-sasl-config` pointing Cyrus SASL at the sasldb the image builds; `None`
/// with `users: none`.
pub fn sasl_config_map(o: &ValidatedInterconnect) -> Option<ConfigMap> {
    o.users_secret()?;
    Some(ConfigMap {
        metadata: o.meta(&o.sasl_config_name()),
        data: Some(BTreeMap::from([("qdrouterd.conf".into(), SASL_CONFIG.into())])),
        ..Default::default()
    })
}

/// The users Secret `name` the operator creates when it is missing: user
/// `guest` with `password`.
pub fn users_secret(o: &ValidatedInterconnect, name: &str, password: &str) -> Secret {
    Secret {
        metadata: o.meta(name),
        data: Some(BTreeMap::from([(GENERATED_USER.into(), ByteString(password.as_bytes().to_vec()))])),
        ..Default::default()
    }
}

/// The links Secret `<name>-qdr-operator-links` ([`qdr_api::router_config::links_secret`]):
/// every valid Link's token files (`<link>.ca.crt`, `<link>.tls.crt`, `<link>.tls.key`),
/// mounted at [`LINKS_DIR`](qdr_api::router_config::LINKS_DIR) from the Interconnect's first
/// Link on (`None` before). Written by server-side apply in every pass that has it, so a
/// token renewed in place reaches the routers' files (the kubelet refreshes a mounted
/// Secret) and no router restarts.
pub fn links_secret(o: &ValidatedInterconnect, files: &BTreeMap<String, ByteString>) -> Option<Secret> {
    o.links_mounted().then(|| Secret {
        metadata: o.meta(&qdr_api::router_config::links_secret(o.name())),
        data: Some(files.clone()),
        type_: Some("Opaque".into()),
        ..Default::default()
    })
}
