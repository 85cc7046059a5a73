//! Who may read `/metrics` in secure mode, decided as controller-runtime's
//! `filters.WithAuthenticationAndAuthorization` decides: the caller's bearer token is checked by a
//! TokenReview (no token or an invalid one: 401), then the user it names by a SubjectAccessReview
//! for the non-resource URL (`get /metrics`; not allowed: 403). Decisions are cached briefly, so a
//! scrape every 15 s costs no API call most of the time. The token is never logged nor echoed.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;

/// How long an allowed caller is remembered.
pub const ALLOW_TTL: Duration = Duration::from_secs(60);
/// How long a refused token is remembered: short, so a new RoleBinding takes effect soon.
pub const DENY_TTL: Duration = Duration::from_secs(10);
/// Distinct tokens remembered at most (a handful of scrapers in practice).
pub const CACHE_SIZE: usize = 256;

/// The outcome for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    /// No token, or one the API server does not accept.
    Unauthenticated,
    /// Authenticated as `user`, who may not `get` the path.
    Forbidden {
        user: String,
    },
}

/// The bearer token of an `Authorization` header value, as kube-apiserver reads it.
pub fn bearer_token(header: Option<&str>) -> Option<&str> {
    let mut parts = header?.split_whitespace();
    let (scheme, token) = (parts.next()?, parts.next()?);
    (scheme.eq_ignore_ascii_case("bearer") && parts.next().is_none()).then_some(token)
}

/// (token, verb, path): what a decision was made for.
type Key = (String, String, String);

/// Reviews and their cache. It has no `Debug`, so tokens cannot end up in a log line by
/// accident.
pub struct MetricsAuth {
    client: kube::Client,
    cache: Mutex<HashMap<Key, (Instant, Decision)>>,
}

impl MetricsAuth {
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            cache: Mutex::default(),
        }
    }

    /// May the holder of `token` do `verb` on `path`? An error means the API server could not
    /// be asked (the caller answers 500, and nothing is cached).
    pub async fn check(
        &self,
        token: Option<&str>,
        verb: &str,
        path: &str,
    ) -> Result<Decision, kube::Error> {
        let Some(token) = token.filter(|t| !t.is_empty()) else {
            return Ok(Decision::Unauthenticated);
        };
        let key = (token.to_string(), verb.to_string(), path.to_string());
        if let Some(decision) = self.cached(&key) {
            return Ok(decision);
        }
        let decision = self.review(token, verb, path).await?;
        self.remember(key, decision.clone());
        Ok(decision)
    }

    fn cached(&self, key: &Key) -> Option<Decision> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let (at, decision) = cache.get(key)?;
        let ttl = if *decision == Decision::Allowed {
            ALLOW_TTL
        } else {
            DENY_TTL
        };
        (at.elapsed() < ttl).then(|| decision.clone())
    }

    fn remember(&self, key: Key, decision: Decision) {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= CACHE_SIZE {
            cache.retain(|_, (at, _)| at.elapsed() < ALLOW_TTL);
        }
        if cache.len() >= CACHE_SIZE {
            // Still full of live entries (many distinct tokens): start over rather than grow.
            cache.clear();
        }
        cache.insert(key, (Instant::now(), decision));
    }

    async fn review(&self, token: &str, verb: &str, path: &str) -> Result<Decision, kube::Error> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await?;
        let status = reviewed.status.unwrap_or_default();
        let user = match (status.authenticated, status.user) {
            (Some(true), Some(user)) if user.username.is_some() => user,
            _ => return Ok(Decision::Unauthenticated),
        };
        let allowed = self.access_review(&user, verb, path).await?;
        Ok(if allowed {
            Decision::Allowed
        } else {
            Decision::Forbidden {
                user: user.username.unwrap_or_default(),
            }
        })
    }

    async fn access_review(
        &self,
        user: &UserInfo,
        verb: &str,
        path: &str,
    ) -> Result<bool, kube::Error> {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username.clone(),
                groups: user.groups.clone(),
                uid: user.uid.clone(),
                extra: user.extra.clone(),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_string()),
                    verb: Some(verb.to_string()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let reviewed = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await?;
        Ok(reviewed.status.is_some_and(|s| s.allowed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_bearer_tokens_as_kube_apiserver() {
        assert_eq!(bearer_token(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(Some("bearer abc")), Some("abc"));
        assert_eq!(bearer_token(Some("Basic abc")), None);
        assert_eq!(bearer_token(Some("Bearer")), None);
        assert_eq!(bearer_token(Some("Bearer a b")), None);
        assert_eq!(bearer_token(None), None);
    }
}
