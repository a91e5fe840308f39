//! TLS listeners: server names verified by clients, client certificates by the routers.

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use qdr_tests::routers::{self, apply, client, json_lines, router_pods};
use serde_json::json;

use crate::{cluster, controllers};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_listeners_verify_names_and_client_certificates() {
    let cp = cluster().await;
    let ns = cp.namespace("tls").await;
    apply(
        cp,
        &ns.name,
        &routers::interconnect(
            "tls",
            json!({
                "deploymentPlan": {"size": 1},
                "listeners": [
                    {"port": 5672},
                    {"name": "amqps", "port": 5671, "sslProfile": "server-tls"},
                    {"name": "mtls", "port": 5674, "sslProfile": "mutual-tls", "authenticatePeer": true,
                     "saslMechanisms": "EXTERNAL"},
                ],
                "sslProfiles": [{"name": "server-tls"}, {"name": "mutual-tls", "mutualAuth": true}],
            }),
        ),
    );
    routers::wait_ready(cp, &ns.name, "tls", &controllers());
    let pods = router_pods(&ns, "tls").await;
    let ip = pods[0].1.clone();
    let secrets: Api<Secret> = ns.api();
    let data = |s: &Secret, k: &str| s.data.as_ref().and_then(|d| d.get(k)).map(|b| b.0.clone()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p.display().to_string()
    };
    let server = secrets.get("tls-server-tls-credentials").await.unwrap();
    let server_ca = file("server-ca.crt", &data(&server, "ca.crt"));
    let query = |port: u16, options: &[&str]| {
        client("query", &format!("amqps://{ip}:{port}"), "org.apache.qpid.dispatch.router", options)
            .output()
            .unwrap()
    };

    // amqps with the generated credentials: the router's name is verified.
    let service_name = format!("tls.{}.svc", ns.name);
    let ok = query(5671, &["--ca", &server_ca, "--verify-host", "--sni", &service_name]);
    assert!(ok.status.success(), "amqps as {service_name}: {:?}", json_lines(&ok));
    let wrong = query(5671, &["--ca", &server_ca, "--verify-host", "--sni", "elsewhere.example"]);
    assert!(!wrong.status.success(), "a certificate for {service_name} was accepted as elsewhere.example");

    // Mutual TLS with EXTERNAL: a client certificate from the profile's generated CA logs in,
    // one from another CA is refused.
    let ca = secrets.get("tls-mutual-tls-ca").await.unwrap();
    let (cert, key) = qdr_tests::keys::issued_by(&data(&ca, "tls.crt"), &data(&ca, "tls.key"), "alice");
    let (cert, key) = (file("alice.crt", cert.as_bytes()), file("alice.key", key.as_bytes()));
    let mutual = secrets.get("tls-mutual-tls-credentials").await.unwrap();
    let mutual_ca = file("mutual-ca.crt", &data(&mutual, "ca.crt"));
    let good = query(5674, &["--ca", &mutual_ca, "--cert", &cert, "--key", &key, "--mech", "EXTERNAL"]);
    assert!(good.status.success(), "alice's certificate from the profile's CA: {:?}", json_lines(&good));
    let other_key = openssl::pkey::PKey::from_rsa(openssl::rsa::Rsa::generate(2048).unwrap()).unwrap();
    let other_ca = qdr_tests::keys::certificate(&other_key, None, "someone else's CA");
    let (cert, key) = qdr_tests::keys::issued_by(
        other_ca.as_bytes(),
        &other_key.private_key_to_pem_pkcs8().unwrap(),
        "mallory",
    );
    let (cert, key) = (file("mallory.crt", cert.as_bytes()), file("mallory.key", key.as_bytes()));
    let refused = query(5674, &["--ca", &mutual_ca, "--cert", &cert, "--key", &key, "--mech", "EXTERNAL"]);
    assert!(!refused.status.success(), "a certificate from another CA was let in");
    let none = query(5674, &["--ca", &mutual_ca, "--mech", "EXTERNAL"]);
    assert!(!none.status.success(), "no client certificate was let in");
}
