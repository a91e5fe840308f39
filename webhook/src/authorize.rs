//! Secret references authorized as their author: `SubjectAccessReview`s for the user of an
//! admission request.
//!
//! The controller mounts every Secret an Interconnect names into the routers' pods and
//! signs certificates with the issuer CA it names; so naming a Secret is reading it. As the
//! API server's own admission plugins check what a user may reference (`NodeRestriction`,
//! `OwnerReferencesPermissionEnforcement`), the webhook asks the API server whether the
//! requesting user may `get` each named Secret in the object's namespace, and denies the
//! fields that name one the user may not read ([`crate::admission::Reply::authorized`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::PostParams;
use kube::{Api, Client};

/// Most distinct Secrets one review may name and still be checked: 32 profiles (the CRD's
/// `maxItems` of `sslProfiles`) with a `credentials` and a `caCert` each, the users Secret
/// and the issuer. A review naming more is invalid anyway; it is not checked (and denied if
/// it were otherwise allowed), so one body cannot make the webhook send thousands of
/// reviews to the API server.
pub const MAX_SECRETS_PER_REVIEW: usize = 2 * 32 + 2;

/// SubjectAccessReviews in flight at once, over all admission requests: a flood of reviews
/// straight to the webhook cannot turn into a flood of requests to the API server.
pub const MAX_REVIEWS_IN_FLIGHT: usize = 16;

/// SubjectAccessReviews one admission request sends at once.
const PER_REQUEST: usize = 4;

/// How long an allowing answer is reused by default (`--authorization-cache-allowed-ttl`):
/// 10 s. The API server keeps its own webhook authorizer's answers 5 minutes when allowed
/// and 30 s when denied (`--authorization-webhook-cache-authorized-ttl`,
/// `-unauthorized-ttl`); a reference check reuses them far shorter, so a removed RoleBinding
/// stops admitting new references within seconds.
pub const ALLOWED_TTL: Duration = Duration::from_secs(10);

/// How long a denying answer is reused by default (`--authorization-cache-denied-ttl`): 5 s,
/// so a user granted access waits at most that long.
pub const DENIED_TTL: Duration = Duration::from_secs(5);

/// Most answers kept ([`DecisionCache`]); at about 200 bytes each, under 1 MiB.
pub const CACHE_CAPACITY: usize = 4096;

/// Longest identity a cached answer is kept for, in bytes of user, uid, groups and extra
/// (longer ones are asked every time: the cache's memory stays bounded by
/// [`CACHE_CAPACITY`] × this).
const MAX_CACHED_IDENTITY: usize = 1024;

/// Who asks about what: the whole identity of the review's `userInfo` and the Secret (no
/// name: every Secret of the namespace). Kept whole, not hashed: two identities never share
/// an answer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    user: Option<String>,
    uid: Option<String>,
    groups: Option<Vec<String>>,
    extra: Option<BTreeMap<String, Vec<String>>>,
    namespace: String,
    name: Option<String>,
}

impl Key {
    fn new(user: &UserInfo, namespace: &str, name: Option<&str>) -> Option<Key> {
        let size =
            [&user.username, &user.uid].iter().map(|s| s.as_ref().map_or(0, String::len)).sum::<usize>()
                + user.groups.iter().flatten().map(String::len).sum::<usize>()
                + user
                    .extra
                    .iter()
                    .flatten()
                    .map(|(k, v)| k.len() + v.iter().map(String::len).sum::<usize>())
                    .sum::<usize>();
        (size <= MAX_CACHED_IDENTITY).then(|| Key {
            user: user.username.clone(),
            uid: user.uid.clone(),
            groups: user.groups.clone(),
            extra: user.extra.clone(),
            namespace: namespace.into(),
            name: name.map(String::from),
        })
    }
}

/// SubjectAccessReview answers reused for a short time: an allowing one for `allowed_ttl`,
/// a denying one for `denied_ttl` (zero: not kept), at most `capacity` of them (when full,
/// expired answers are dropped first, then any). A bulk apply of many Interconnects by one
/// user costs one review, not one per object.
#[derive(Debug)]
pub struct DecisionCache {
    entries: Mutex<HashMap<Key, (bool, Instant)>>,
    allowed_ttl: Duration,
    denied_ttl: Duration,
    capacity: usize,
}

impl DecisionCache {
    /// A cache keeping answers `allowed_ttl` / `denied_ttl`, at most `capacity`.
    pub fn new(allowed_ttl: Duration, denied_ttl: Duration, capacity: usize) -> Self {
        DecisionCache { entries: Mutex::new(HashMap::new()), allowed_ttl, denied_ttl, capacity }
    }

    fn get(&self, key: &Key, now: Instant) -> Option<bool> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        match entries.get(key) {
            Some(&(allowed, until)) if now < until => Some(allowed),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    fn put(&self, key: Key, allowed: bool, now: Instant) {
        let ttl = if allowed { self.allowed_ttl } else { self.denied_ttl };
        if ttl.is_zero() || self.capacity == 0 {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= self.capacity && !entries.contains_key(&key) {
            entries.retain(|_, (_, until)| now < *until);
            if entries.len() >= self.capacity
                && let Some(any) = entries.keys().next().cloned()
            {
                entries.remove(&any);
            }
        }
        entries.insert(key, (allowed, now + ttl));
    }

    /// Answers kept now (expired ones included until looked up or pushed out).
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether no answer is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Asks the API server what a user may read. Needs `create subjectaccessreviews`
/// (`authorization.k8s.io`) for the webhook's ServiceAccount.
#[derive(Clone)]
pub struct Authorizer {
    api: Api<SubjectAccessReview>,
    in_flight: Arc<tokio::sync::Semaphore>,
    cache: Arc<DecisionCache>,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer").finish_non_exhaustive()
    }
}

impl Authorizer {
    /// An authorizer using `client`, reusing answers from `cache`.
    pub fn new(client: Client, cache: DecisionCache) -> Self {
        Authorizer {
            api: Api::all(client),
            in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_REVIEWS_IN_FLIGHT)),
            cache: Arc::new(cache),
        }
    }

    /// Which of `secrets` (names in `namespace`) `user` may not `get`. One review first
    /// asks about every Secret of the namespace (`get secrets` with no name): when allowed,
    /// as for a namespace admin, that answers for all of them; otherwise one review per name,
    /// a few at a time ([`MAX_REVIEWS_IN_FLIGHT`] over all requests). Errors: a review the
    /// API server did not answer.
    pub async fn unreadable(
        &self,
        user: &UserInfo,
        namespace: &str,
        secrets: &BTreeSet<&str>,
    ) -> Result<BTreeSet<String>, kube::Error> {
        if secrets.is_empty() || self.may_get(user, namespace, None).await? {
            return Ok(BTreeSet::new());
        }
        let names: Vec<String> = secrets.iter().map(|n| n.to_string()).collect();
        let answers: Vec<(String, bool)> = futures::stream::iter(names)
            .map(|name| async move {
                let allowed = self.may_get(user, namespace, Some(&name)).await?;
                Ok::<_, kube::Error>((name, allowed))
            })
            .buffer_unordered(PER_REQUEST)
            .try_collect()
            .await?;
        Ok(answers.into_iter().filter(|(_, allowed)| !allowed).map(|(n, _)| n).collect())
    }

    /// Whether `user` may `get secrets[/name]` in `namespace`: a kept answer
    /// ([`DecisionCache`]) or a new review.
    async fn may_get(
        &self,
        user: &UserInfo,
        namespace: &str,
        name: Option<&str>,
    ) -> Result<bool, kube::Error> {
        let key = Key::new(user, namespace, name);
        if let Some(allowed) = key.as_ref().and_then(|k| self.cache.get(k, Instant::now())) {
            return Ok(allowed);
        }
        let review = SubjectAccessReview { spec: review_spec(user, namespace, name), ..Default::default() };
        let _permit = self.in_flight.acquire().await.expect("the semaphore is never closed");
        let answer = self.api.create(&PostParams::default(), &review).await?;
        let allowed = answer.status.is_some_and(|s| s.allowed);
        if let Some(key) = key {
            self.cache.put(key, allowed, Instant::now());
        }
        Ok(allowed)
    }
}

/// The review of `get secrets[/name]` in `namespace` for `user`: user, uid, groups and extra
/// as the admission request carries them (`userInfo`), so the API server's authorizers see
/// exactly the requesting identity.
pub fn review_spec(user: &UserInfo, namespace: &str, name: Option<&str>) -> SubjectAccessReviewSpec {
    SubjectAccessReviewSpec {
        user: user.username.clone(),
        uid: user.uid.clone(),
        groups: user.groups.clone(),
        extra: user.extra.clone(),
        resource_attributes: Some(ResourceAttributes {
            namespace: Some(namespace.into()),
            verb: Some("get".into()),
            group: Some(String::new()),
            resource: Some("secrets".into()),
            name: name.map(String::from),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            username: Some(name.into()),
            groups: Some(groups.iter().map(|g| g.to_string()).collect()),
            ..Default::default()
        }
    }

    #[test]
    fn answers_are_kept_per_identity_and_secret_for_their_ttl() {
        let cache = DecisionCache::new(Duration::from_secs(10), Duration::from_secs(5), 100);
        let t0 = Instant::now();
        let alice = Key::new(&user("alice", &["a"]), "ns", Some("s")).unwrap();
        cache.put(alice.clone(), true, t0);
        assert_eq!(cache.get(&alice, t0 + Duration::from_secs(9)), Some(true));
        assert_eq!(cache.get(&alice, t0 + Duration::from_secs(10)), None, "expired");
        assert!(cache.is_empty(), "an expired answer is dropped when looked up");

        cache.put(alice.clone(), false, t0);
        assert_eq!(cache.get(&alice, t0 + Duration::from_secs(4)), Some(false));
        assert_eq!(cache.get(&alice, t0 + Duration::from_secs(5)), None, "a denial is kept shorter");

        // Any difference in identity or Secret is another question.
        cache.put(alice.clone(), true, t0);
        for other in [
            Key::new(&user("alice", &["a", "b"]), "ns", Some("s")),
            Key::new(&user("alice", &[]), "ns", Some("s")),
            Key::new(&UserInfo { uid: Some("1".into()), ..user("alice", &["a"]) }, "ns", Some("s")),
            Key::new(&user("alice", &["a"]), "ns2", Some("s")),
            Key::new(&user("alice", &["a"]), "ns", Some("t")),
            Key::new(&user("alice", &["a"]), "ns", None),
            Key::new(&user("bob", &["a"]), "ns", Some("s")),
        ] {
            assert_eq!(cache.get(&other.unwrap(), t0), None);
        }
    }

    #[test]
    fn the_cache_is_bounded_and_a_zero_ttl_keeps_nothing() {
        let cache = DecisionCache::new(Duration::from_secs(10), Duration::ZERO, 3);
        let t0 = Instant::now();
        let key = |i: usize| Key::new(&user(&format!("u{i}"), &[]), "ns", None).unwrap();
        cache.put(key(0), false, t0);
        assert!(cache.is_empty(), "denials are not kept with a zero TTL");
        for i in 0..10 {
            cache.put(key(i), true, t0);
            assert!(cache.len() <= 3);
        }
        assert_eq!(cache.get(&key(9), t0), Some(true), "the newest answer is kept");
        // Expired answers go first when full.
        let later = t0 + Duration::from_secs(11);
        cache.put(key(20), true, later);
        assert_eq!(cache.len(), 1);
        let huge = user(&"x".repeat(MAX_CACHED_IDENTITY + 1), &[]);
        assert!(Key::new(&huge, "ns", None).is_none(), "an outsized identity is not kept");
    }

    #[test]
    fn the_review_carries_the_whole_identity() {
        let user = UserInfo {
            username: Some("alice".into()),
            uid: Some("42".into()),
            groups: Some(vec!["team-a".into(), "system:authenticated".into()]),
            extra: Some([("scopes".to_string(), vec!["x".to_string()])].into()),
        };
        let spec = review_spec(&user, "ns", Some("s"));
        assert_eq!(spec.user.as_deref(), Some("alice"));
        assert_eq!(spec.uid.as_deref(), Some("42"));
        assert_eq!(spec.groups, user.groups);
        assert_eq!(spec.extra, user.extra);
        let attrs = spec.resource_attributes.unwrap();
        assert_eq!(
            (
                attrs.namespace.as_deref(),
                attrs.verb.as_deref(),
                attrs.resource.as_deref(),
                attrs.name.as_deref()
            ),
            (Some("ns"), Some("get"), Some("secrets"), Some("s"))
        );
        assert_eq!(attrs.group.as_deref(), Some(""));
        assert_eq!(review_spec(&user, "ns", None).resource_attributes.unwrap().name, None);
    }
}
