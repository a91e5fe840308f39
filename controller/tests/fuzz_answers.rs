//! A fuzz target over the whole answer path: the wire guard's message check
//! ([`check_message`]), fe2o3's decoding of the message into a [`Table`] body, and every
//! table reader of a visit (the router, its nodes, its connections, the operator's
//! connectors, the live entities of every kind).
//!
//! It runs for a fixed time, `QDR_FUZZ_SECONDS` (default 30 s, what `make test` gives it),
//! from the answers an honest qdrouterd 1.19 router sends (`qdr_tests::amqp_peer`), each
//! input one to four mutations of a seed or of an earlier input that decoded (bit flips,
//! AMQP constructors and large counts written in, bytes inserted, cut or repeated). The seed
//! of its random numbers is printed; `QDR_FUZZ_SEED=<n>` runs the same inputs again.
//!
//! It asserts that nothing panics (a panic fails the test with the input, in hex), that what
//! passes the guard decodes within the guard's item budget, and that the mutations reach
//! the decoder and the tables (a fuzzer whose inputs all fail the guard would test nothing).
//! Not cargo-fuzz: libFuzzer needs a nightly toolchain that CI does not install; this loop
//! runs on the stable one, in the ordinary test graph.

use std::time::{Duration, Instant};

use fe2o3_amqp::types::messaging::message::__private::Deserializable;
use fe2o3_amqp::types::messaging::{Body, Message};
use proptest::prelude::Rng;
use proptest::test_runner::{RngAlgorithm, TestRng};
use qdr_controller::mesh::answer::Table;
use qdr_controller::mesh::live::{self, Kind};
use qdr_controller::mesh::wire::check_message;
use qdr_controller::mesh::{CONNECTION_ATTRIBUTES, NODE_ATTRIBUTES, ROUTER_ATTRIBUTES, RouterView, links};
use qdr_tests::amqp_peer::{self, Answers};

/// Bytes the AMQP encoding gives meaning to: null, empty list, list8/32, map8/32, array8/32,
/// a descriptor, the section codes, str8/sym8, and the extremes.
const INTERESTING: [u8; 16] =
    [0x00, 0x40, 0x45, 0xc0, 0xd0, 0xc1, 0xd1, 0xe0, 0xf0, 0x53, 0x77, 0x72, 0xa1, 0xa3, 0xff, 0x7f];

/// Counts of four bytes a mutation writes in: the largest, half of them, one past a page.
const COUNTS: [u32; 4] = [u32::MAX, 0x7fff_ffff, 0x0001_0000, 4097];

/// The inputs to start from: honest answers to every query a visit makes.
fn seeds() -> Vec<Vec<u8>> {
    let mut answers: Answers = amqp_peer::honest("mesh-0", "interior", &["mesh-1", "mesh-2"], 3);
    let rows = |names: &[&str], row: serde_json::Value| serde_json::json!({"attributeNames": names, "results": [row.clone(), row]});
    answers.insert(
        "connector".into(),
        rows(
            &links::ATTRIBUTES,
            serde_json::json!([
                "qdr-operator-mesh-1",
                "inter-router",
                "10.0.0.1",
                "55672",
                "inter-router-tls"
            ]),
        ),
    );
    answers.insert(
        "router.config.address".into(),
        rows(
            Kind::Address.attributes(),
            serde_json::json!(["qdr-operator-address-1", "a", null, "multicast"]),
        ),
    );
    let mut out = vec![
        amqp_peer::answer_message(&answers, "router", &ROUTER_ATTRIBUTES),
        amqp_peer::answer_message(&answers, "router.node", &NODE_ATTRIBUTES),
        amqp_peer::answer_message(&answers, "connection", &CONNECTION_ATTRIBUTES),
        amqp_peer::answer_message(&answers, "connector", &links::ATTRIBUTES),
        amqp_peer::answer_message(&answers, "router.config.address", Kind::Address.attributes()),
    ];
    out.push(amqp_peer::answer_message(&answers, "connector", Kind::Connector.attributes()));
    out
}

/// What the path reached with one input.
#[derive(Default)]
struct Reached {
    guarded: bool,
    decoded: bool,
    tabled: bool,
}

/// The whole answer path over one message `payload`.
fn path(payload: &[u8]) -> Reached {
    let mut r = Reached::default();
    if check_message(payload).is_err() {
        return r;
    }
    r.guarded = true;
    let Ok(m) = serde_amqp::from_slice::<Deserializable<Message<Body<Table>>>>(payload) else { return r };
    r.decoded = true;
    let Body::Value(v) = m.0.body else { return r };
    let t = v.0;
    if let Ok(mut view) = RouterView::of_router(&t) {
        r.tabled = true;
        let _ = view.add_nodes(&t);
        let _ = view.add_connections(&t);
    }
    let mut open = std::collections::BTreeSet::new();
    qdr_controller::mesh::open_outgoing(&t, &mut open);
    let mut connectors = Vec::new();
    r.tabled |= links::add_connectors(&t, &open, &mut connectors).is_ok_and(|n| n > 0);
    let (mut held, mut bytes) = (Vec::new(), 0);
    for kind in Kind::ALL {
        r.tabled |= live::add_held(kind, &t, &mut held, &mut bytes).is_ok_and(|n| n > 0);
    }
    r
}

/// `input` with one random mutation.
fn mutate(rng: &mut TestRng, input: &mut Vec<u8>) {
    let pick = |rng: &mut TestRng, n: usize| (rng.next_u64() % n.max(1) as u64) as usize;
    let len = input.len();
    match pick(rng, 6) {
        0 if len > 0 => {
            let i = pick(rng, len);
            input[i] ^= 1 << pick(rng, 8);
        }
        1 if len > 0 => {
            let i = pick(rng, len);
            input[i] = INTERESTING[pick(rng, INTERESTING.len())];
        }
        2 => {
            let at = pick(rng, len + 1);
            let n = 1 + pick(rng, 8);
            let bytes: Vec<u8> = (0..n).map(|_| rng.next_u32() as u8).collect();
            input.splice(at..at, bytes);
        }
        3 if len > 1 => {
            let at = pick(rng, len);
            let n = 1 + pick(rng, (len - at).min(32));
            input.drain(at..at + n);
        }
        4 if len > 1 => {
            let at = pick(rng, len);
            let n = 1 + pick(rng, (len - at).min(64));
            let copy = input[at..at + n].to_vec();
            let to = pick(rng, len + 1);
            input.splice(to..to, copy);
        }
        _ if len >= 4 => {
            let at = pick(rng, len - 3);
            input[at..at + 4].copy_from_slice(&COUNTS[pick(rng, COUNTS.len())].to_be_bytes());
        }
        _ => input.push(INTERESTING[pick(rng, INTERESTING.len())]),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn no_answer_panics_the_answer_path() {
    let seconds: u64 = std::env::var("QDR_FUZZ_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(30);
    let seed: u64 = std::env::var("QDR_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    println!("fuzzing the answer path for {seconds} s, QDR_FUZZ_SEED={seed}");
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    let mut rng = TestRng::from_seed(RngAlgorithm::ChaCha, &key);
    let seeds = seeds();
    for s in &seeds {
        let r = path(s);
        assert!(r.guarded && r.decoded && r.tabled, "an honest answer goes the whole way: {}", hex(s));
    }
    // Inputs that decoded, to mutate further (bounded).
    let mut corpus = seeds.clone();
    let (mut runs, mut guarded, mut decoded, mut tabled) = (0u64, 0u64, 0u64, 0u64);
    let end = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < end {
        for _ in 0..256 {
            let mut input = corpus[(rng.next_u64() % corpus.len() as u64) as usize].clone();
            for _ in 0..1 + rng.next_u32() % 4 {
                mutate(&mut rng, &mut input);
            }
            // A stack overflow aborts the process before any panic handler runs: with
            // QDR_FUZZ_TRACE=<file> each input is written there first, to be found.
            if let Ok(f) = std::env::var("QDR_FUZZ_TRACE") {
                std::fs::write(f, &input).unwrap();
            }
            let r = match std::panic::catch_unwind(|| path(&input)) {
                Ok(r) => r,
                Err(_) => panic!("the answer path panicked on {}", hex(&input)),
            };
            runs += 1;
            guarded += u64::from(r.guarded);
            decoded += u64::from(r.decoded);
            tabled += u64::from(r.tabled);
            if r.decoded && input.len() <= 1 << 16 {
                if corpus.len() < 512 {
                    corpus.push(input);
                } else {
                    let i = (rng.next_u64() % corpus.len() as u64) as usize;
                    corpus[i] = input;
                }
            }
        }
    }
    println!("{runs} inputs: {guarded} passed the guard, {decoded} decoded, {tabled} read into a table");
    assert!(runs > 0);
    assert!(decoded > 0 && tabled > 0, "the mutations never reached the decoder and the tables");
}

/// What the fuzzer found first: an empty array (`e0 0c 00`) whose 11 bytes after the count
/// serde_amqp does not read, so it decoded them as a described value (`00 10 …`) and
/// recursed until the stack overflowed, aborting the process. The guard now refuses it, and
/// a described value inside a section whatever hides it.
#[test]
fn the_first_find_is_refused_by_the_guard() {
    // An amqp-value body: a map of one key whose value is `value`.
    let body = |value: &[u8]| {
        let mut entries = vec![0x02, 0xa1, 0x03, b'k', b'e', b'y'];
        entries.extend_from_slice(value);
        let mut m = vec![0x00, 0x53, 0x77, 0xc1, u8::try_from(entries.len()).unwrap()];
        m.extend(entries);
        m
    };
    let hidden = [0xe0, 0x0c, 0x00, 0x00, 0x10, 0x01, 0x65, 0x73, 0x00, 0x01, 0x00, 0x00, 0x73, 0x65];
    let described = [0x00, 0x53, 0x01, 0x40];
    for (what, value, why) in [
        ("an empty array hiding bytes", &hidden[..], "empty array"),
        ("a described value", &described[..], "described value"),
    ] {
        let message = body(value);
        let r = path(&message);
        assert!(!r.guarded, "{what}: not refused by the guard");
        let e = check_message(&message).unwrap_err().to_string();
        assert!(e.contains(why), "{what}: {e}");
    }
    assert!(path(&body(&[0xe0, 0x01, 0x00])).decoded, "an empty array of its count alone decodes");
}
