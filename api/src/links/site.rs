//! A site outside Kubernetes (a qdrouterd on a VM or bare metal) that links with the same
//! token as a cluster: [`site_config`] turns a token into the router's configuration and
//! its three certificate files, what `kubectl qdr site-config` writes. The offering
//! cluster cannot tell such a site from a cluster's: it dials with the site's certificate,
//! and the grant lists its connections the same way.

use std::borrow::Cow;

use super::GrantRole;
use super::token::Token;
use crate::router_config::{RouterConfig, Section, Value};

/// How the site's router runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteOptions {
    /// The router id (unique in the whole network: the offering cluster's ids are pod names).
    pub id: String,
    /// Where the certificate files will be on the site's machine (absolute).
    pub cert_dir: String,
    /// The port of a plain AMQP listener for the site's clients (`None`: no listener).
    pub listen: Option<u16>,
}

fn s(v: &str) -> Value<'static> {
    Value::Str(Cow::Owned(v.to_string()))
}

/// The qdrouterd 1.19 configuration (JSON, the form qdrouterd reads from a file ending in
/// `.json`) of a site that links with `token`: the router (interior for an `inter-router`
/// token, edge for an `edge` one), a client listener, the sslProfile over the token's files
/// in `cert_dir` (`ca.crt`, `tls.crt`, `tls.key`), and a connector to the token's first
/// endpoint (as a Link dials), verifying the host name. qdrouterd wants every entity's name
/// unique across types: `clients`, `link-tls`, `link`.
pub fn site_config(token: &Token, o: &SiteOptions) -> String {
    let interior = token.role == GrantRole::InterRouter;
    let mut sections = vec![Section {
        entity: "router",
        attrs: vec![("mode", s(if interior { "interior" } else { "edge" })), ("id", s(&o.id))],
    }];
    if let Some(port) = o.listen {
        sections.push(Section {
            entity: "listener",
            attrs: vec![
                ("name", s("clients")),
                ("role", s("normal")),
                ("host", s("0.0.0.0")),
                ("port", Value::Int(port.into())),
                ("saslMechanisms", s("ANONYMOUS")),
            ],
        });
    }
    let dir = o.cert_dir.trim_end_matches('/');
    sections.push(Section {
        entity: "sslProfile",
        attrs: vec![
            ("name", s("link-tls")),
            ("certFile", s(&format!("{dir}/tls.crt"))),
            ("privateKeyFile", s(&format!("{dir}/tls.key"))),
            ("caCertFile", s(&format!("{dir}/ca.crt"))),
        ],
    });
    if let Some((host, port)) = token.endpoints.first() {
        let mut attrs = vec![
            ("name", s("link")),
            ("role", s(if interior { "inter-router" } else { "edge" })),
            ("host", s(host)),
            ("port", Value::Int((*port).into())),
        ];
        if interior {
            attrs.push(("cost", Value::Int(token.cost.into())));
        }
        attrs.push(("sslProfile", s("link-tls")));
        attrs.push(("verifyHostname", Value::Bool(true)));
        sections.push(Section { entity: "connector", attrs });
    }
    RouterConfig { sections }.render()
}
