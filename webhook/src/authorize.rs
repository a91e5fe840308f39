//! Secret references authorized as their author: `SubjectAccessReview`s for the user of an
//! admission request.
//!
//! The controller mounts every Secret an Interconnect names into the routers' pods and
//! signs certificates with the issuer CA it names; so naming a Secret is reading it. As the
//! API server's own admission plugins check what a user may reference (`NodeRestriction`,
//! `OwnerReferencesPermissionEnforcement`), the webhook asks the API server whether the
//! requesting user may `get` each named Secret in the object's namespace, and denies the
//! fields that name one the user may not read ([`crate::admission::Reply::authorized`]).

use std::collections::BTreeSet;

use std::sync::Arc;

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

/// Asks the API server what a user may read. Needs `create subjectaccessreviews`
/// (`authorization.k8s.io`) for the webhook's ServiceAccount.
#[derive(Clone)]
pub struct Authorizer {
    api: Api<SubjectAccessReview>,
    in_flight: Arc<tokio::sync::Semaphore>,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer").finish_non_exhaustive()
    }
}

impl Authorizer {
    /// An authorizer using `client`.
    pub fn new(client: Client) -> Self {
        Authorizer {
            api: Api::all(client),
            in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_REVIEWS_IN_FLIGHT)),
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

    /// Whether `user` may `get secrets[/name]` in `namespace`.
    async fn may_get(
        &self,
        user: &UserInfo,
        namespace: &str,
        name: Option<&str>,
    ) -> Result<bool, kube::Error> {
        let review = SubjectAccessReview { spec: review_spec(user, namespace, name), ..Default::default() };
        let _permit = self.in_flight.acquire().await.expect("the semaphore is never closed");
        let answer = self.api.create(&PostParams::default(), &review).await?;
        Ok(answer.status.is_some_and(|s| s.allowed))
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
