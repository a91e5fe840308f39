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

use futures::future::try_join_all;
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::PostParams;
use kube::{Api, Client};

/// Asks the API server what a user may read. Needs `create subjectaccessreviews`
/// (`authorization.k8s.io`) for the webhook's ServiceAccount.
#[derive(Clone)]
pub struct Authorizer {
    api: Api<SubjectAccessReview>,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer").finish_non_exhaustive()
    }
}

impl Authorizer {
    /// An authorizer using `client`.
    pub fn new(client: Client) -> Self {
        Authorizer { api: Api::all(client) }
    }

    /// Which of `secrets` (names in `namespace`) `user` may not `get`. One review first
    /// asks about every Secret of the namespace (`get secrets` with no name): when allowed,
    /// as for a namespace admin, that answers for all of them; otherwise one review per name,
    /// concurrently. Errors: a review the API server did not answer.
    pub async fn unreadable(
        &self,
        user: &UserInfo,
        namespace: &str,
        secrets: &BTreeSet<&str>,
    ) -> Result<BTreeSet<String>, kube::Error> {
        if secrets.is_empty() || self.may_get(user, namespace, None).await? {
            return Ok(BTreeSet::new());
        }
        let answers = try_join_all(secrets.iter().map(|name| async move {
            Ok::<_, kube::Error>((*name, self.may_get(user, namespace, Some(name)).await?))
        }))
        .await?;
        Ok(answers.into_iter().filter(|(_, allowed)| !allowed).map(|(n, _)| n.to_string()).collect())
    }

    /// Whether `user` may `get secrets[/name]` in `namespace`.
    async fn may_get(
        &self,
        user: &UserInfo,
        namespace: &str,
        name: Option<&str>,
    ) -> Result<bool, kube::Error> {
        let review = SubjectAccessReview { spec: review_spec(user, namespace, name), ..Default::default() };
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
