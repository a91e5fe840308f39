//! What every part reads from a spec, in one place: the three listener and connector
//! lists and the role their list gives them, every listener, the Secrets an Interconnect
//! names (SASL users, issuer CA), the liveness port.
//!
//! The helpers answer the same on a stored object and on its defaulted copy (for example
//! [`Interconnect::users_secret`] gives `<name>-users` when `users` is absent, exactly
//! what [`crate::defaults`] would write), so the webhook, the controller and the docs
//! cannot disagree about them.

use crate::types::{Connector, Interconnect, InterconnectSpec, Listener, Role};

/// JSON names of the three listener lists, in rendering order.
pub const LISTENER_LISTS: [&str; 3] = ["listeners", "interRouterListeners", "edgeListeners"];
/// JSON names of the three connector lists, in rendering order.
pub const CONNECTOR_LISTS: [&str; 3] = ["connectors", "interRouterConnectors", "edgeConnectors"];
/// sslProfile names that [`crate::defaults`] defines when a listener or connector refers
/// to them and `sslProfiles` lacks them (Go operator parity, extended to connectors).
pub const AUTO_PROFILES: [&str; 2] = ["default", "inter-router"];
/// Default of `deploymentPlan.livenessPort` (Go operator parity).
pub const DEFAULT_LIVENESS_PORT: i32 = 8888;

/// The list a listener or connector sits in, which decides the role of its connections
/// (router schema: `listener.role`, `connector.role`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkRole {
    /// `listeners` / `connectors`: clients (`normal`, or `route-container` when the entry
    /// sets `routeContainer`).
    Normal,
    /// `interRouterListeners` / `interRouterConnectors`: interior routers (`inter-router`).
    InterRouter,
    /// `edgeListeners` / `edgeConnectors`: edge routers (`edge`).
    Edge,
}

impl LinkRole {
    /// The three roles in rendering order.
    pub const ALL: [LinkRole; 3] = [LinkRole::Normal, LinkRole::InterRouter, LinkRole::Edge];

    /// Index in [`Self::ALL`], [`LISTENER_LISTS`] and [`CONNECTOR_LISTS`].
    pub fn index(self) -> usize {
        match self {
            LinkRole::Normal => 0,
            LinkRole::InterRouter => 1,
            LinkRole::Edge => 2,
        }
    }

    /// JSON name of the listener list of this role (`listeners`, ...).
    pub fn listeners_field(self) -> &'static str {
        LISTENER_LISTS[self.index()]
    }

    /// JSON name of the connector list of this role (`connectors`, ...).
    pub fn connectors_field(self) -> &'static str {
        CONNECTOR_LISTS[self.index()]
    }

    /// The router's `role` value for entries of this list, before `routeContainer`.
    pub fn router_role(self) -> &'static str {
        match self {
            LinkRole::Normal => "normal",
            LinkRole::InterRouter => "inter-router",
            LinkRole::Edge => "edge",
        }
    }
}

/// Whether a `users` value means "no SASL user database": `none` or `false`, any case
/// (the Go operator's convention).
pub fn is_no_users(users: &str) -> bool {
    users.eq_ignore_ascii_case("none") || users.eq_ignore_ascii_case("false")
}

/// What the operator does with a Secret an Interconnect names, which is what its author
/// gains by naming it (each use reads the whole Secret; they differ in what the author can
/// then do with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SecretUse {
    /// `spec.users`: every entry becomes a SASL user of the routers.
    Users,
    /// An sslProfile's `caCert` that only verifies peers: the routers trust it.
    TrustedCa,
    /// An sslProfile's `credentials`: the routers serve it as their certificate and key.
    Credentials,
    /// The issuer (`deploymentPlan.issuer`, or the generated `<name>-ca` when it signs), or a
    /// `caCert` that signs its profile's generated credentials: the controller signs router
    /// certificates with its key.
    Signer,
}

impl InterconnectSpec {
    /// The listener list of `role`, as stored (absent and `[]` differ).
    pub fn listeners_of(&self, role: LinkRole) -> &Option<Vec<Listener>> {
        match role {
            LinkRole::Normal => &self.listeners,
            LinkRole::InterRouter => &self.inter_router_listeners,
            LinkRole::Edge => &self.edge_listeners,
        }
    }

    /// The connector list of `role`, as stored.
    pub fn connectors_of(&self, role: LinkRole) -> &Option<Vec<Connector>> {
        match role {
            LinkRole::Normal => &self.connectors,
            LinkRole::InterRouter => &self.inter_router_connectors,
            LinkRole::Edge => &self.edge_connectors,
        }
    }

    /// The three listener lists with their roles, in rendering order.
    pub fn listener_lists(&self) -> [(LinkRole, &Option<Vec<Listener>>); 3] {
        LinkRole::ALL.map(|r| (r, self.listeners_of(r)))
    }

    /// The three connector lists with their roles, in rendering order.
    pub fn connector_lists(&self) -> [(LinkRole, &Option<Vec<Connector>>); 3] {
        LinkRole::ALL.map(|r| (r, self.connectors_of(r)))
    }

    /// Every listener of every list, with its role and index in its list, in rendering
    /// order.
    pub fn every_listener(&self) -> impl Iterator<Item = (LinkRole, usize, &Listener)> + '_ {
        LinkRole::ALL
            .into_iter()
            .flat_map(move |r| self.listeners_of(r).iter().flatten().enumerate().map(move |(i, l)| (r, i, l)))
    }

    /// Every connector of every list, with its role and index in its list.
    pub fn every_connector(&self) -> impl Iterator<Item = (LinkRole, usize, &Connector)> + '_ {
        LinkRole::ALL.into_iter().flat_map(move |r| {
            self.connectors_of(r).iter().flatten().enumerate().map(move |(i, c)| (r, i, c))
        })
    }

    /// The router mode: `deploymentPlan.role`, interior when absent.
    pub fn role(&self) -> Role {
        self.deployment_plan.as_ref().and_then(|p| p.role.clone()).unwrap_or(Role::Interior)
    }

    /// The port of the router's health and metrics listener: `deploymentPlan.livenessPort`
    /// or [`DEFAULT_LIVENESS_PORT`].
    pub fn liveness_port(&self) -> i32 {
        self.deployment_plan.as_ref().and_then(|p| p.liveness_port).unwrap_or(DEFAULT_LIVENESS_PORT)
    }

    /// The CA Secret the spec names in `deploymentPlan.issuer` (user-provided: read, never
    /// written), if any.
    pub fn user_issuer(&self) -> Option<&str> {
        self.deployment_plan.as_ref().and_then(|p| p.issuer.as_deref())
    }
}

impl Interconnect {
    /// Name of the Secret holding SASL users, or `None` for `users: none`/`false`.
    /// Absent `users` means `<name>-users` (the default).
    pub fn users_secret(&self) -> Option<String> {
        match self.spec.users.as_deref() {
            Some(u) if is_no_users(u) => None,
            Some(u) => Some(u.to_string()),
            None => Some(format!("{}-users", self.metadata.name.as_deref().unwrap_or_default())),
        }
    }

    /// Name of the CA Secret that signs generated credentials not signed by a profile's own
    /// CA: `deploymentPlan.issuer` when set (user-provided), else `<name>-ca` (generated).
    pub fn issuer_secret(&self) -> String {
        match self.spec.user_issuer() {
            Some(i) => i.to_string(),
            None => format!("{}-ca", self.metadata.name.as_deref().unwrap_or_default()),
        }
    }

    /// Every Secret the spec names: the users Secret, each sslProfile's `credentials` and
    /// `caCert`, and the issuer CA. Call it on a defaulted object ([`crate::defaults`]) to
    /// include the derived names.
    pub fn secret_names(&self) -> std::collections::BTreeSet<String> {
        let mut names: std::collections::BTreeSet<String> = self.users_secret().into_iter().collect();
        for p in self.spec.ssl_profiles.iter().flatten() {
            names.extend([&p.credentials, &p.ca_cert].into_iter().flatten().cloned());
        }
        names.insert(self.issuer_secret());
        names
    }

    /// Every Secret the routers mount or the controller signs with, with the field that
    /// names it, in field order: `spec.users`, `spec.sslProfiles[i].credentials`,
    /// `spec.sslProfiles[i].caCert` and `spec.deploymentPlan.issuer` (a named issuer, or the
    /// generated `<name>-ca` when it signs: [`Interconnect::issuer_signs`]). Call it on a
    /// defaulted object so the derived names are included.
    pub fn secret_references(&self) -> Vec<(String, String)> {
        self.secret_uses().into_iter().map(|(field, name, _)| (field, name)).collect()
    }

    /// [`Interconnect::secret_references`] with the use each reference makes of its Secret
    /// ([`SecretUse`]): what an author gains by naming it there. The admission webhook checks
    /// a reference again whenever its (use, Secret) pair is new, so a name moved to a more
    /// powerful field, or a field whose use grows (a `caCert` that starts signing), is checked.
    pub fn secret_uses(&self) -> Vec<(String, String, SecretUse)> {
        let mut refs: Vec<(String, String, SecretUse)> = self
            .users_secret()
            .map(|u| ("spec.users".to_string(), u, SecretUse::Users))
            .into_iter()
            .collect();
        for (i, p) in self.spec.ssl_profiles.iter().flatten().enumerate() {
            if let Some(name) = &p.credentials {
                refs.push((
                    format!("spec.sslProfiles[{i}].credentials"),
                    name.clone(),
                    SecretUse::Credentials,
                ));
            }
            if let Some(name) = &p.ca_cert {
                // A mutually authenticating profile with generated credentials has them signed
                // by its own CA (the controller's credential plan).
                let signs = p.generate_credentials == Some(true) && p.mutual_auth == Some(true);
                let usage = if signs { SecretUse::Signer } else { SecretUse::TrustedCa };
                refs.push((format!("spec.sslProfiles[{i}].caCert"), name.clone(), usage));
            }
        }
        if self.spec.user_issuer().is_some() || self.issuer_signs() {
            refs.push(("spec.deploymentPlan.issuer".into(), self.issuer_secret(), SecretUse::Signer));
        }
        refs
    }

    /// Whether the issuer CA ([`Interconnect::issuer_secret`]) signs a generated certificate:
    /// a `generateCredentials` profile without mutual authentication (its peers verify
    /// against the issuer), or with mutual authentication and no `caCert` of its own, or with
    /// the issuer as its `caCert`.
    pub fn issuer_signs(&self) -> bool {
        let issuer = self.issuer_secret();
        self.spec
            .ssl_profiles
            .iter()
            .flatten()
            .filter(|p| p.generate_credentials == Some(true))
            .any(|p| p.mutual_auth != Some(true) || p.ca_cert.as_ref().is_none_or(|c| *c == issuer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ic(name: &str, spec: serde_json::Value) -> Interconnect {
        let mut ic = Interconnect::new(name, serde_json::from_value(spec).unwrap());
        ic.metadata.namespace = Some("ns".into());
        ic
    }

    #[test]
    fn users_secret_follows_the_default_and_none() {
        assert_eq!(ic("a", serde_json::json!({})).users_secret().as_deref(), Some("a-users"));
        assert_eq!(ic("a", serde_json::json!({"users": "u"})).users_secret().as_deref(), Some("u"));
        for none in ["none", "NONE", "False", "false"] {
            assert_eq!(ic("a", serde_json::json!({"users": none})).users_secret(), None, "{none}");
        }
        let raw = ic("a", serde_json::json!({}));
        assert_eq!(
            raw.users_secret(),
            crate::defaults(&raw).users_secret(),
            "same before and after defaults"
        );
    }

    #[test]
    fn issuer_secret_is_the_named_one_or_the_generated_one() {
        assert_eq!(ic("a", serde_json::json!({})).issuer_secret(), "a-ca");
        let named = ic("a", serde_json::json!({"deploymentPlan": {"issuer": "corp"}}));
        assert_eq!(named.issuer_secret(), "corp");
        assert_eq!(named.spec.user_issuer(), Some("corp"));
    }

    #[test]
    fn secret_references_name_their_fields_and_match_secret_names() {
        let raw = ic(
            "a",
            serde_json::json!({"users": "u", "sslProfiles": [
                {"name": "p", "credentials": "c", "caCert": "ca"}, {"name": "q", "caCert": "ca"}]}),
        );
        let refs = raw.secret_references();
        let pairs: Vec<(&str, &str)> = refs.iter().map(|(f, n)| (f.as_str(), n.as_str())).collect();
        assert_eq!(
            pairs,
            [
                ("spec.users", "u"),
                ("spec.sslProfiles[0].credentials", "c"),
                ("spec.sslProfiles[0].caCert", "ca"),
                ("spec.sslProfiles[1].caCert", "ca"),
            ]
        );
        assert!(!raw.issuer_signs(), "nothing generated");
        let defaulted = crate::defaults(&ic("b", serde_json::json!({})));
        let names: std::collections::BTreeSet<String> =
            defaulted.secret_references().into_iter().map(|(_, n)| n).collect();
        assert!(defaulted.issuer_signs(), "the default profile's credentials");
        assert_eq!(names, defaulted.secret_names());
        assert!(names.contains("b-users") && names.contains("b-ca"));
        let none = ic("c", serde_json::json!({"users": "none", "deploymentPlan": {"issuer": "corp"}}));
        assert_eq!(
            none.secret_references(),
            [("spec.deploymentPlan.issuer".to_string(), "corp".to_string())]
        );
    }

    #[test]
    fn every_listener_walks_the_three_lists_in_order_with_roles() {
        let spec: InterconnectSpec = serde_json::from_value(serde_json::json!({
            "listeners": [{"port": 1}, {"port": 2}], "edgeListeners": [{"port": 3}],
            "interRouterListeners": [{"port": 4}]}))
        .unwrap();
        let got: Vec<(LinkRole, usize, i32)> =
            spec.every_listener().map(|(r, i, l)| (r, i, l.port)).collect();
        assert_eq!(
            got,
            [
                (LinkRole::Normal, 0, 1),
                (LinkRole::Normal, 1, 2),
                (LinkRole::InterRouter, 0, 4),
                (LinkRole::Edge, 0, 3)
            ]
        );
        assert_eq!(LinkRole::Edge.listeners_field(), "edgeListeners");
        assert_eq!(LinkRole::InterRouter.connectors_field(), "interRouterConnectors");
        assert_eq!(spec.liveness_port(), DEFAULT_LIVENESS_PORT);
        assert_eq!(spec.role(), Role::Interior);
    }
}
