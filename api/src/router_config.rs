//! The router configuration as a typed model, rendered deterministically in qdrouterd's
//! JSON configuration form: `[["router", {...}], ["listener", {...}], ...]`, one entity per
//! line. The controller puts it in a ConfigMap that the router pod mounts read-only; the
//! image's start script copies it to `/tmp/qdrouterd.json` (`QDROUTERD_CONF_TYPE=json`) and
//! qdrouterd reads a `.json` file as JSON (docs/controller.md, "What the router image
//! reads").
//!
//! What goes in follows what the Go operator rendered, with its gaps fixed: `ciphers` and
//! `protocols` are rendered, auto-links use `address` (not the deprecated `addr`), and a
//! connector's `verifyHostname` is written only when set (the router's default, true,
//! otherwise). Every string is JSON-escaped (in ASCII: `\uXXXX` for every other
//! character, which the router's Python could not read raw), so any character but NUL arrives as written
//! (the `qdrouterd.conf` text format has no escaping: it cut values at `#`, quotes,
//! backslashes, braces and line breaks). The one rewrite is `$`: the image's
//! `expandvars.py` expands environment variables on every line that has one, so a literal
//! `$` is written as [`LITERAL_DOLLAR`] and the container's environment carries
//! [`DOLLAR_ENV`]` = "$"`.

pub mod live;

use std::borrow::Cow;

use crate::{Connector, InterconnectSpec, LinkRole, Listener, Role, SslProfile};
use sha2::Digest;

/// Where the ConfigMap holding the rendered configuration is mounted in the router
/// container.
pub const CONFIG_DIR: &str = "/etc/qpid-dispatch-config";
/// The ConfigMap key (and file name) of the rendered configuration: the `.json` ending is
/// what makes qdrouterd parse it as JSON.
pub const CONFIG_FILE: &str = "qdrouterd.json";
/// The environment variable the router container sets to `$`, for [`LITERAL_DOLLAR`].
pub const DOLLAR_ENV: &str = "DOLLAR";

/// Where credentials Secrets are mounted: `<CERTS_DIR>/<profile>/<secret>/`.
pub const CERTS_DIR: &str = "/etc/qpid-dispatch-certs";

/// How a literal `$` is written. The router image (1.19.0) runs `expandvars.py` over the
/// configuration: Python's `os.path.expandvars` on every line that contains `$` and does
/// not start with `#`, which replaces `$name` and `${name}` when `name` is in the
/// environment and leaves it otherwise. The router container's environment sets
/// [`DOLLAR_ENV`] to `$`, so `${DOLLAR}` comes out as `$` and nothing after it is looked at
/// again (`${DOLLAR}HOSTNAME` → `$HOSTNAME`); an older image that runs `envsubst` with its
/// own `DOLLAR='$'` gives the same. A bare `$` would be expanded (`price.$USD` with `USD`
/// set) or, under `envsubst`, removed with its name.
pub const LITERAL_DOLLAR: &str = "${DOLLAR}";

/// A typed attribute value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value<'a> {
    /// A string, path or enum tag, rendered as a JSON string: each `$` is written as
    /// [`LITERAL_DOLLAR`] so that it survives the image's variable expansion. Borrowed from
    /// the spec where it is the spec's own text.
    Str(Cow<'a, str>),
    /// A reference to an environment variable of the router container, rendered as a JSON
    /// string `"${NAME}"` for the image to expand (`${HOSTNAME}`: the router id is the pod
    /// name).
    Env(&'static str),
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
}

impl Value<'_> {
    /// Writes the value as JSON to `out` (what [`RouterConfig::render`] writes).
    fn write_json<W: std::io::Write>(&self, out: &mut W) -> std::io::Result<()> {
        match self {
            Value::Str(s) if s.contains('$') => json_string(out, &s.replace('$', LITERAL_DOLLAR)),
            Value::Str(s) => json_string(out, s),
            Value::Env(var) => {
                out.write_all(b"\"${")?;
                out.write_all(var.as_bytes())?;
                out.write_all(b"}\"")
            }
            Value::Int(i) => serde_json::to_writer(out, i).map_err(std::io::Error::other),
            Value::Bool(b) => out.write_all(if *b { b"true" } else { b"false" }),
        }
    }
}

/// `s` as a JSON string written to `out`, in ASCII: serde_json's escaping, and every
/// character outside ASCII as `\uXXXX` escapes (two, a surrogate pair, above U+FFFF).
/// qdrouterd's Python reads the file with the locale's codec, ASCII in the image
/// (`'ascii' codec can't decode byte 0xc3`: the router does not start); the image's
/// `auto_mesh.py` hid this while it rewrote the file with Python's `json.dump`, which
/// escapes the same way.
fn json_string<W: std::io::Write>(out: &mut W, s: &str) -> std::io::Result<()> {
    if s.is_ascii() {
        return serde::Serialize::serialize(s, &mut serde_json::Serializer::new(out))
            .map_err(std::io::Error::other);
    }
    // serde_json escapes only ASCII characters, so every other one stands alone in its output.
    let json = serde_json::to_string(s).map_err(std::io::Error::other)?;
    let mut units = [0u16; 2];
    for c in json.chars() {
        if c.is_ascii() {
            out.write_all(&[c as u8])?;
        } else {
            for u in c.encode_utf16(&mut units) {
                write!(out, "\\u{u:04x}")?;
            }
        }
    }
    Ok(())
}

impl std::fmt::Display for Value<'_> {
    /// The value as JSON.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut json = Vec::new();
        self.write_json(&mut json).map_err(|_| std::fmt::Error)?;
        f.write_str(&String::from_utf8_lossy(&json))
    }
}

/// An [`std::io::Write`] that keeps only the number of bytes written.
#[derive(Default)]
pub(crate) struct Count(pub(crate) usize);

/// The length in bytes of `value` as compact JSON (`serde_json::to_vec(value).len()`),
/// counted without building it; 0 when it does not serialize.
pub(crate) fn json_len<T: serde::Serialize + ?Sized>(value: &T) -> usize {
    let mut count = Count::default();
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => 0,
    }
}

impl std::io::Write for Count {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One configuration section (`listener { ... }`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section<'a> {
    /// Section name as written in the file (`router`, `listener`, `address`, ...).
    pub entity: &'static str,
    /// Attributes in emission order.
    pub attrs: Vec<(&'static str, Value<'a>)>,
}

impl<'a> Section<'a> {
    fn new(entity: &'static str) -> Self {
        Section { entity, attrs: Vec::new() }
    }
    fn s(mut self, k: &'static str, v: Option<&'a str>) -> Self {
        if let Some(v) = v {
            self.attrs.push((k, Value::Str(Cow::Borrowed(v))));
        }
        self
    }
    /// A string made here (a path derived from names), not the spec's own text.
    fn owned(mut self, k: &'static str, v: Option<String>) -> Self {
        if let Some(v) = v {
            self.attrs.push((k, Value::Str(Cow::Owned(v))));
        }
        self
    }
    fn env(mut self, k: &'static str, var: &'static str) -> Self {
        self.attrs.push((k, Value::Env(var)));
        self
    }
    fn i(mut self, k: &'static str, v: Option<i32>) -> Self {
        if let Some(v) = v {
            self.attrs.push((k, Value::Int(v.into())));
        }
        self
    }
    fn b(mut self, k: &'static str, v: Option<bool>) -> Self {
        if let Some(v) = v {
            self.attrs.push((k, Value::Bool(v)));
        }
        self
    }
    /// The value of attribute `k`, if present.
    pub fn get(&self, k: &str) -> Option<&Value<'a>> {
        self.attrs.iter().find(|(a, _)| *a == k).map(|(_, v)| v)
    }
}

/// A whole router configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RouterConfig<'a> {
    /// Sections in emission order.
    pub sections: Vec<Section<'a>>,
}

impl<'a> RouterConfig<'a> {
    /// The JSON configuration: a JSON array with one `["entity", {attributes}]` per line,
    /// attributes in emission order, a trailing newline. Deterministic for a given model;
    /// no line starts with `#` (the image's `expandvars.py` skips such lines).
    pub fn render(&self) -> String {
        let mut out = Vec::with_capacity(64 * (self.sections.len() + 1));
        self.write_to(&mut out).expect("writing to a Vec does not fail");
        String::from_utf8(out).expect("the rendered configuration is UTF-8 (it is made of str)")
    }

    /// The length in bytes of [`RouterConfig::render`]'s text, counted without building it.
    pub fn rendered_len(&self) -> usize {
        let mut count = Count::default();
        self.write_to(&mut count).expect("counting does not fail");
        count.0
    }

    /// Writes the text of [`RouterConfig::render`] to `out`.
    fn write_to<W: std::io::Write>(&self, out: &mut W) -> std::io::Result<()> {
        out.write_all(b"[\n")?;
        for (i, s) in self.sections.iter().enumerate() {
            out.write_all(b"  [\"")?;
            out.write_all(s.entity.as_bytes())?;
            out.write_all(b"\", {")?;
            for (j, (k, v)) in s.attrs.iter().enumerate() {
                out.write_all(if j == 0 { b"\"" } else { b", \"" })?;
                out.write_all(k.as_bytes())?;
                out.write_all(b"\": ")?;
                v.write_json(out)?;
            }
            out.write_all(if i + 1 < self.sections.len() { b"}],\n" } else { b"}]\n" })?;
        }
        out.write_all(b"]\n")
    }

    /// Sections of one entity.
    pub fn of<'s>(&'s self, entity: &'s str) -> impl Iterator<Item = &'s Section<'a>> + 's {
        self.sections.iter().filter(move |s| s.entity == entity)
    }
}

/// A configuration rendered once per reconcile: the JSON text (the [`CONFIG_FILE`] of the
/// router ConfigMap), its SHA-256 in lower-case hex, and the hash of the part that only a
/// restart changes (docs/live-configuration.md, "Where the configuration lives").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// The text, as [`RouterConfig::render`] writes it: the whole configuration.
    pub text: String,
    /// SHA-256 of `text`, 64 hex digits: the configuration the routers should run
    /// (`status.configHash` is its first 10 digits).
    pub hash: String,
    /// The hash that rolls the routers when it changes (the pod-template annotation and
    /// the ConfigMap's name), 64 hex digits. Without live entities ([`Rendered::live`]
    /// `false`) it is `hash`. With them, the SHA-256 of `live\n` followed by the text of
    /// the start-up part ([`live::split`]): a change of the live entities leaves it as it
    /// is, and it never equals the hash of a whole configuration, so it never names a
    /// ConfigMap of a release before 0.6.0 (those are immutable).
    pub startup_hash: String,
    /// Whether the live entities are written to the running routers through management
    /// ([`Rendered::with_live`]) rather than read only at start.
    pub live: bool,
    /// [`live::field_digests`] of the part `startup_hash` covers: which fields of the spec
    /// a change of `startup_hash` came from ([`live::changed_fields`]).
    pub startup_fields: String,
}

/// The first 10 hex digits of a configuration hash ([`Rendered::hash`] or
/// [`Rendered::startup_hash`], 64 hex digits): what `status.configHash` shows and what a
/// router configuration ConfigMap's name ends with. A shorter text is returned whole.
pub fn short_hash(hash: &str) -> &str {
    hash.get(..10).unwrap_or(hash)
}

fn sha256_hex(parts: &[&[u8]]) -> String {
    let mut d = sha2::Sha256::new();
    for p in parts {
        d.update(p);
    }
    d.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

impl Rendered {
    /// Renders the configuration of `spec` (already defaulted) and hashes it.
    pub fn of(spec: &InterconnectSpec) -> Self {
        Rendered::from_config(&router_config(spec))
    }

    /// Renders `config` and hashes it, every entity read at start (`startup_hash` is
    /// `hash`).
    pub fn from_config(config: &RouterConfig<'_>) -> Self {
        let text = config.render();
        let hash = sha256_hex(&[text.as_bytes()]);
        Rendered {
            text,
            startup_hash: hash.clone(),
            hash,
            live: false,
            startup_fields: live::field_digests(config),
        }
    }

    /// Renders `config` and hashes it, its live entities ([`live::is_live`]) written to
    /// running routers: `startup_hash` covers the start-up part only.
    pub fn with_live(config: &RouterConfig<'_>) -> Self {
        let (start_up, _) = live::split(config);
        let text = config.render();
        Rendered {
            hash: sha256_hex(&[text.as_bytes()]),
            text,
            startup_hash: sha256_hex(&[b"live\n", start_up.render().as_bytes()]),
            live: true,
            startup_fields: live::field_digests(&start_up),
        }
    }
}

fn listener(l: &Listener, link: LinkRole) -> Section<'_> {
    let role = link.router_role();
    let role = if role == "normal" && l.route_container == Some(true) { "route-container" } else { role };
    let mut s = Section::new("listener")
        .s("name", l.name.as_deref())
        .s("role", Some(role))
        .s("host", Some(l.host.as_deref().unwrap_or("0.0.0.0")))
        .i("port", Some(l.port));
    if role != "normal" && role != "route-container" {
        s = s.i("cost", l.cost);
    }
    s = s.i("linkCapacity", l.link_capacity);
    if role == "normal" || role == "route-container" {
        s = s.b("http", l.http.filter(|h| *h));
    }
    s.s("saslMechanisms", l.sasl_mechanisms.as_deref())
        .b("authenticatePeer", l.authenticate_peer.filter(|a| *a))
        .s("sslProfile", l.ssl_profile.as_deref())
}

fn connector(c: &Connector, link: LinkRole) -> Section<'_> {
    let role = link.router_role();
    let role = if role == "normal" && c.route_container == Some(true) { "route-container" } else { role };
    Section::new("connector")
        .s("name", c.name.as_deref())
        .s("role", Some(role))
        .s("host", Some(&c.host))
        .i("port", Some(c.port))
        .i("cost", c.cost)
        .i("linkCapacity", c.link_capacity)
        .s("sslProfile", c.ssl_profile.as_deref())
        .b("verifyHostname", c.verify_hostname)
}

/// Port of the operator's management listener on every router it reads
/// (docs/mesh-status.md): the controller asks the routers what they see through it. A user
/// listener on this port leaves the routers unread (the webhook warns of it).
pub const MANAGEMENT_PORT: i32 = 55670;
/// Name of the sslProfile of the operator's management listener. Its credentials are
/// generated like any mutual-auth profile's: Secrets `<name>-qdr-operator-management-ca`
/// and `<name>-qdr-operator-management-credentials`.
pub const MANAGEMENT_PROFILE: &str = "qdr-operator-management";

/// The generated CA Secret of the management profile of Interconnect `name`
/// (`<name>-qdr-operator-management-ca`).
pub fn management_ca_secret(name: &str) -> String {
    format!("{name}-{MANAGEMENT_PROFILE}-ca")
}

/// The generated credentials Secret (the routers' certificate) of the management profile of
/// Interconnect `name` (`<name>-qdr-operator-management-credentials`).
pub fn management_credentials_secret(name: &str) -> String {
    format!("{name}-{MANAGEMENT_PROFILE}-credentials")
}
/// Name of the operator's management listener. qdrouterd 1.19 wants names unique across
/// every entity, and a user's listener name has at most 15 characters, so it takes no
/// user's name.
pub const MANAGEMENT_LISTENER: &str = "qdr-operator-management-listener";

impl<'a> RouterConfig<'a> {
    /// This configuration with the operator's management listener (after the health
    /// listener): port [`MANAGEMENT_PORT`], TLS required with sslProfile
    /// [`MANAGEMENT_PROFILE`] (which must be among the spec's profiles, with a `caCert`), and
    /// the client's certificate verified in the TLS handshake: qdrouterd 1.19 verifies the
    /// peer whenever `saslMechanisms` names `EXTERNAL` (`connection_manager.c`), while
    /// `authenticatePeer: false` lets the client skip SASL. Measured on a real router: a
    /// client certificate of another CA, or none, is refused in the handshake; a plain
    /// connection is refused by `requireSsl`.
    pub fn with_management_listener(mut self) -> RouterConfig<'a> {
        let at = self
            .sections
            .iter()
            .position(|s| s.get("name") == Some(&Value::Str(crate::messages::HEALTH_LISTENER.into())));
        let section = Section::new("listener")
            .s("name", Some(MANAGEMENT_LISTENER))
            .s("role", Some("normal"))
            .s("host", Some("0.0.0.0"))
            .i("port", Some(MANAGEMENT_PORT))
            .s("saslMechanisms", Some("EXTERNAL"))
            .b("authenticatePeer", Some(false))
            .b("requireSsl", Some(true))
            .s("sslProfile", Some(MANAGEMENT_PROFILE));
        self.sections.insert(at.map_or(self.sections.len(), |i| i + 1), section);
        self
    }
}

/// Where the links Secret of an Interconnect ([`links_secret`]) is mounted once it has a
/// [`Link`](crate::links::Link): one directory for every link's files, so a new link, a
/// renewed token or a removed link changes files in place (qdrouterd 1.19 reads an
/// sslProfile's files on every connect) and rolls nothing.
pub const LINKS_DIR: &str = "/etc/qpid-dispatch-certs/qdr-operator-links";
/// The start of the name of a link's connector (`qdr-operator-link-<link>`): validation
/// refuses every `qdr-operator-` name in a spec, so none can clash.
pub const LINK_PREFIX: &str = "qdr-operator-link-";
/// The start of the name of a link's sslProfile (`qdr-operator-tls-link-<link>`): qdrouterd
/// wants a name unique across every entity, and no connector name starts so.
pub const LINK_PROFILE_PREFIX: &str = "qdr-operator-tls-link-";

/// The Secret holding every link's files of Interconnect `name`:
/// `<name>-qdr-operator-links`, keys `<link>.ca.crt`, `<link>.tls.crt`, `<link>.tls.key`.
pub fn links_secret(name: &str) -> String {
    format!("{name}-qdr-operator-links")
}

/// The key of a link's file in the links Secret: `<link>.<file>` (`file` being `ca.crt`,
/// `tls.crt` or `tls.key`).
pub fn link_key(link: &str, file: &str) -> String {
    format!("{link}.{file}")
}

/// The key of the links Secret ([`links_secret`]) holding what listener profile `profile`
/// trusts once its Interconnect lets other sites in (an AccessGrant): `sites.<profile>.ca.crt`,
/// the profile's own trust bundle followed by the CA of each live grant of the listener's
/// role. One file the controller rewrites, so a grant added or gone restarts no router.
pub fn site_trust_key(profile: &str) -> String {
    format!("sites.{profile}.ca.crt")
}

impl RouterConfig<'_> {
    /// This configuration with the sslProfiles named in `profiles` trusting their
    /// [`site_trust_key`] file of [`LINKS_DIR`] instead of their CA Secret's.
    pub fn with_site_trust(mut self, profiles: &[String]) -> Self {
        for s in self.sections.iter_mut().filter(|s| s.entity == "sslProfile") {
            let Some(Value::Str(name)) = s.get("name").cloned() else { continue };
            if !profiles.iter().any(|p| p == name.as_ref()) {
                continue;
            }
            let file = format!("{LINKS_DIR}/{}", site_trust_key(&name));
            if let Some((_, v)) = s.attrs.iter_mut().find(|(k, _)| *k == "caCertFile") {
                *v = Value::Str(Cow::Owned(file));
            }
        }
        self
    }
}

/// What a [`Link`](crate::links::Link) renders into its Interconnect's routers: an sslProfile
/// (the token's CA, certificate and key, from [`LINKS_DIR`]) and a connector to the token's
/// first endpoint, named [`LINK_PROFILE_PREFIX`]`<link>` and [`LINK_PREFIX`]`<link>`, both
/// live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkConnector {
    /// The Link's name.
    pub link: String,
    /// The connection's role (the token's): `inter-router` when true, else `edge`.
    pub inter_router: bool,
    /// Where to dial.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// The link's cost (rendered for inter-router links only).
    pub cost: Option<i32>,
    /// Whether the router checks that the remote certificate names `host`.
    pub verify_hostname: bool,
}

impl<'a> RouterConfig<'a> {
    /// This configuration with each link's sslProfile and connector ([`LinkConnector`]) at
    /// the end.
    pub fn with_links(mut self, links: &'a [LinkConnector]) -> RouterConfig<'a> {
        for l in links {
            let name = format!("{LINK_PREFIX}{}", l.link);
            let profile = format!("{LINK_PROFILE_PREFIX}{}", l.link);
            let file = |f: &str| Some(format!("{LINKS_DIR}/{}", link_key(&l.link, f)));
            self.sections.push(
                Section::new("sslProfile")
                    .owned("name", Some(profile.clone()))
                    .owned("certFile", file("tls.crt"))
                    .owned("privateKeyFile", file("tls.key"))
                    .owned("caCertFile", file("ca.crt")),
            );
            let inter_router = l.inter_router;
            self.sections.push(
                Section::new("connector")
                    .owned("name", Some(name.clone()))
                    .s("role", Some(if inter_router { "inter-router" } else { "edge" }))
                    .s("host", Some(&l.host))
                    .i("port", Some(l.port.into()))
                    .i("cost", l.cost.filter(|_| inter_router))
                    .owned("sslProfile", Some(profile))
                    .b("verifyHostname", Some(l.verify_hostname)),
            );
        }
        self
    }
}

/// Mount directory of Secret `secret` for profile `profile`.
pub fn cert_dir(profile: &str, secret: &str) -> String {
    format!("{CERTS_DIR}/{profile}/{secret}")
}

/// The CA file a profile trusts (Go operator rules): the `ca.crt` of `caCert` when it is the
/// credentials Secret itself or a generated mutual-auth pair (the credentials Secret then
/// carries the CA trust bundle as `ca.crt`); the `ca.crt` of a generated `caCert` Secret
/// (its trust bundle, which holds two CAs while one is rotated); else `tls.crt` of the
/// user's `caCert` Secret.
pub fn ca_cert_file(p: &SslProfile) -> Option<String> {
    let (secret, key) = ca_cert_source(p)?;
    Some(format!("{}/{key}", cert_dir(&p.name, secret)))
}

/// The Secret and key [`ca_cert_file`] reads: `(secret, "ca.crt" | "tls.crt")`.
pub fn ca_cert_source(p: &SslProfile) -> Option<(&str, &'static str)> {
    let ca = p.ca_cert.as_deref()?;
    Some(match p.credentials.as_deref() {
        Some(cred) if cred == ca => (ca, "ca.crt"),
        Some(cred) if p.generate_credentials == Some(true) && p.mutual_auth == Some(true) => (cred, "ca.crt"),
        _ if p.generate_ca_cert == Some(true) => (ca, "ca.crt"),
        _ => (ca, "tls.crt"),
    })
}

/// The key of Secret `secret` that a profile's configuration reads, for the files the
/// profile uses (`tls.crt`, `tls.key`, `ca.crt`): what must exist for the router to start.
pub fn keys_read(p: &SslProfile, secret: &str) -> Vec<&'static str> {
    let mut keys = Vec::new();
    if p.credentials.as_deref() == Some(secret) {
        keys.extend(["tls.crt", "tls.key"]);
    }
    if let Some(file) = ca_cert_file(p)
        && file.starts_with(&format!("{}/", cert_dir(&p.name, secret)))
    {
        let key = if file.ends_with("/ca.crt") { "ca.crt" } else { "tls.crt" };
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys
}

/// Most attributes of one section (a listener's: name, role, host, port, cost,
/// linkCapacity, http, saslMechanisms, authenticatePeer, sslProfile).
const MAX_ATTRIBUTES: usize = 10;
/// Longest attribute name (`addExternalPrefix`, `delExternalPrefix`).
const MAX_KEY: usize = 17;
/// Longest entity name (`sslProfile`).
const MAX_ENTITY: usize = 10;
/// Most bytes of an attribute value that are not the spec's own text: a constant or derived
/// value (a role such as `"route-container"`, an `i32`, `"${HOSTNAME}"`), what a
/// certificate path adds to the names in it (quotes, [`CERTS_DIR`], slashes, `/tls.key`),
/// or a generated name ([`live::generated_name`] with its quotes and a repeat's `-NNNN`:
/// `"qdr-operator-link-route-` and 12 hex digits, 44 bytes at most).
const MAX_VALUE_OVERHEAD: usize = {
    let path = CERTS_DIR.len() + 12;
    let name = 2 + live::NAME_PREFIX.len() + "link-route-".len() + 12 + 5;
    if path > name { path } else { name }
};
/// Most times one string of the spec is written: an sslProfile's name names the section
/// and is in its three certificate paths.
const MAX_REPEATS: usize = 4;

/// An upper bound, in bytes, of `router_config(spec).rendered_len()`, counted from the
/// number of list items in `spec` and `spec_json_len`, the length of `spec` as compact JSON
/// (what `serde_json` writes; [`json_len`]), without building the configuration.
///
/// Each section (one per list item, and the `router` and health-listener sections) adds at
/// most `"  [\"" entity "\", {" … "}],\n"` and, for each of at most [`MAX_ATTRIBUTES`]
/// attributes, `", \"" key "\": "` and [`MAX_VALUE_OVERHEAD`]. The rest is the spec's own
/// strings: each written at most [`MAX_REPEATS`] times, each character as `serde_json`
/// escapes it in `spec_json_len` too, except `$`, which takes the 9 bytes of
/// [`LITERAL_DOLLAR`]; numbers and booleans are written as in the spec. So a spec whose
/// bound is within a limit needs no rendering to know it fits (the webhook's and the
/// controller's size check, [`crate::MAX_CONFIG_BYTES`]). Checked on random specs and on
/// the tightest cases by `api/tests/render_bound.rs`; the size refusals in
/// `api/tests/sizes.rs` still render.
pub fn rendered_len_bound(spec: &InterconnectSpec, spec_json_len: usize) -> usize {
    let items = spec.every_listener().count()
        + spec.every_connector().count()
        + spec.ssl_profiles.as_ref().map_or(0, Vec::len)
        + spec.addresses.as_ref().map_or(0, Vec::len)
        + spec.auto_links.as_ref().map_or(0, Vec::len)
        + spec.link_routes.as_ref().map_or(0, Vec::len);
    let section = 12 + MAX_ENTITY + MAX_ATTRIBUTES * (6 + MAX_KEY + MAX_VALUE_OVERHEAD);
    4 + (items + 2) * section + MAX_REPEATS * LITERAL_DOLLAR.len() * spec_json_len
}

/// The configuration of the routers of Interconnect `spec` (already defaulted), every live
/// entity named ([`live::named`]).
pub fn router_config(spec: &InterconnectSpec) -> RouterConfig<'_> {
    let mode = if spec.role() == Role::Edge { "edge" } else { "interior" };
    let mut sections = vec![Section::new("router").s("mode", Some(mode)).env("id", "HOSTNAME")];
    sections.extend(spec.listeners.iter().flatten().map(|l| listener(l, LinkRole::Normal)));
    sections.push(
        Section::new("listener")
            .s("name", Some(crate::messages::HEALTH_LISTENER))
            .s("host", Some("0.0.0.0"))
            .i("port", Some(spec.liveness_port()))
            .b("http", Some(true))
            .b("healthz", Some(true))
            .b("metrics", Some(true))
            .b("websockets", Some(false))
            .s("httpRootDir", Some("invalid")),
    );
    for role in [LinkRole::InterRouter, LinkRole::Edge] {
        sections.extend(spec.listeners_of(role).iter().flatten().map(|l| listener(l, role)));
    }
    for p in spec.ssl_profiles.iter().flatten() {
        let mut s = Section::new("sslProfile").s("name", Some(&p.name));
        if let Some(cred) = &p.credentials {
            s = s
                .owned("certFile", Some(format!("{}/tls.crt", cert_dir(&p.name, cred))))
                .owned("privateKeyFile", Some(format!("{}/tls.key", cert_dir(&p.name, cred))));
        }
        s = s.owned("caCertFile", ca_cert_file(p));
        sections.push(s.s("ciphers", p.ciphers.as_deref()).s("protocols", p.protocols.as_deref()));
    }
    for a in spec.addresses.iter().flatten() {
        sections.push(
            Section::new("address")
                .s("prefix", a.prefix.as_deref())
                .s("pattern", a.pattern.as_deref())
                .s("distribution", a.distribution.as_ref().map(|d| d.as_str()))
                .b("waypoint", a.waypoint.filter(|w| *w))
                .i("ingressPhase", a.ingress_phase)
                .i("egressPhase", a.egress_phase)
                .i("priority", a.priority)
                .b("enableFallback", a.enable_fallback.filter(|f| *f)),
        );
    }
    for a in spec.auto_links.iter().flatten() {
        sections.push(
            Section::new("autoLink")
                .s("address", Some(&a.address))
                .s("direction", a.direction.as_ref().map(|d| d.as_str()))
                .s("containerId", a.container_id.as_deref())
                .s("connection", a.connection.as_deref())
                .s("externalAddress", a.external_address.as_deref())
                .i("phase", a.phase)
                .b("fallback", a.fallback.filter(|f| *f)),
        );
    }
    for r in spec.link_routes.iter().flatten() {
        sections.push(
            Section::new("linkRoute")
                .s("prefix", r.prefix.as_deref())
                .s("pattern", r.pattern.as_deref())
                .s("direction", r.direction.as_ref().map(|d| d.as_str()))
                .s("connection", r.connection.as_deref())
                .s("containerId", r.container_id.as_deref())
                .s("addExternalPrefix", r.add_external_prefix.as_deref())
                .s("delExternalPrefix", r.del_external_prefix.as_deref()),
        );
    }
    sections.extend(spec.every_connector().map(|(role, _, c)| connector(c, role)));
    live::named(RouterConfig { sections })
}

#[cfg(test)]
mod ascii_tests {
    /// Every character outside ASCII is escaped, and the JSON reads back as written.
    #[test]
    fn strings_are_written_in_ascii_and_read_back_as_written() {
        for s in ["grüße/日本", "😀 and $HOME", "plain", "tab\tquote\"back\\slash\u{7f}é"] {
            let mut out = Vec::new();
            super::json_string(&mut out, s).unwrap();
            assert!(out.is_ascii(), "{}", String::from_utf8_lossy(&out));
            let back: String = serde_json::from_slice(&out).unwrap();
            assert_eq!(back, s);
        }
        let mut out = Vec::new();
        super::json_string(&mut out, "😀").unwrap();
        assert_eq!(out, br#""\ud83d\ude00""#, "a surrogate pair above U+FFFF");
    }
}
