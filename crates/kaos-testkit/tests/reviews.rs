//! TokenReview and SubjectAccessReview, answered as kube-apiserver answers them from the
//! testkit's tokens and RBAC, and listed in discovery as it lists them.

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kaos_testkit::auth::Identity;
use kaos_testkit::{ApiServer, Cluster, TestServer};
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::Value;

/// prometheus may GET `/metrics` and read ConfigMaps in `default`; reviewer may create reviews.
const RBAC: &str = include_str!("fixtures/reviews-rbac.yaml");

async fn client(server: &TestServer, token: &str) -> Client {
    let kubeconfig: kube::config::Kubeconfig =
        serde_saphyr::from_str(&server.kubeconfig(Some(token))).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    Client::try_from(config).expect("client")
}

fn metrics_access(user: &str, groups: &[&str], path: &str) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.into()),
            groups: Some(groups.iter().map(|g| g.to_string()).collect()),
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(path.into()),
                verb: Some("get".into()),
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[tokio::test]
async fn reviews_answer_from_the_tokens_and_rbac() {
    let server = TestServer::start_with_rbac(RBAC).await.expect("serve");
    let api = &server.api;
    let prometheus = api
        .auth
        .mint_token(Identity::service_account("default", "prometheus"));
    let reviewer = client(
        &server,
        &api.auth
            .mint_token(Identity::service_account("default", "reviewer")),
    )
    .await;
    let token_reviews: Api<TokenReview> = Api::all(reviewer.clone());
    let review = |token: &str| TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.into()),
            ..Default::default()
        },
        ..Default::default()
    };

    let answer = token_reviews
        .create(&PostParams::default(), &review(&prometheus))
        .await
        .expect("token review");
    let status = answer.status.expect("status");
    assert_eq!(status.authenticated, Some(true));
    let user = status.user.expect("user");
    assert_eq!(
        user.username.as_deref(),
        Some("system:serviceaccount:default:prometheus")
    );
    assert_eq!(
        user.groups.expect("groups"),
        [
            "system:serviceaccounts",
            "system:serviceaccounts:default",
            "system:authenticated"
        ]
    );
    assert!(user.uid.is_some(), "the ServiceAccount's uid");
    assert_eq!(
        status.audiences.expect("audiences"),
        ["https://kubernetes.default.svc.cluster.local"]
    );
    let answer = token_reviews
        .create(&PostParams::default(), &review("not-a-token"))
        .await
        .expect("token review");
    let status = answer.status.expect("status");
    assert_ne!(status.authenticated, Some(true));
    assert!(status.error.is_some());
    let empty = token_reviews
        .create(&PostParams::default(), &review(""))
        .await
        .expect_err("a token is required");
    assert!(matches!(empty, kube::Error::Api(s) if s.code == 400));

    let access: Api<SubjectAccessReview> = Api::all(reviewer.clone());
    let sa_groups = ["system:serviceaccounts", "system:authenticated"];
    let allowed = access
        .create(
            &PostParams::default(),
            &metrics_access(
                "system:serviceaccount:default:prometheus",
                &sa_groups,
                "/metrics",
            ),
        )
        .await
        .expect("access review")
        .status
        .expect("status");
    assert!(allowed.allowed);
    assert_eq!(
        allowed.reason.as_deref(),
        Some(
            "RBAC: allowed by ClusterRoleBinding \"prometheus-metrics\" of ClusterRole \"metrics-reader\" to ServiceAccount \"prometheus/default\""
        )
    );
    for (user, path) in [
        ("system:serviceaccount:default:prometheus", "/healthz"),
        ("system:serviceaccount:default:stranger", "/metrics"),
    ] {
        let status = access
            .create(
                &PostParams::default(),
                &metrics_access(user, &sa_groups, path),
            )
            .await
            .expect("access review")
            .status
            .expect("status");
        assert!(!status.allowed, "{user} {path}");
        assert_eq!(status.denied, None, "RBAC never denies, it only allows");
    }
    // system:masters may do anything.
    let admin = access
        .create(
            &PostParams::default(),
            &metrics_access("someone", &["system:masters"], "/metrics"),
        )
        .await
        .expect("access review");
    assert!(admin.status.expect("status").allowed);
    // Resource attributes go through RoleBindings of their namespace.
    let resource = |namespace: &str| SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some("system:serviceaccount:default:prometheus".into()),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(namespace.into()),
                verb: Some("get".into()),
                resource: Some("configmaps".into()),
                name: Some("x".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let in_default = access
        .create(&PostParams::default(), &resource("default"))
        .await
        .expect("access review");
    assert_eq!(
        in_default.status.expect("status").reason.as_deref(),
        Some(
            "RBAC: allowed by RoleBinding \"cm-reader/default\" of Role \"cm-reader\" to ServiceAccount \"prometheus/default\""
        )
    );
    let elsewhere = access
        .create(&PostParams::default(), &resource("kube-system"))
        .await
        .expect("access review");
    assert!(!elsewhere.status.expect("status").allowed);
    let neither = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some("u".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let invalid = access
        .create(&PostParams::default(), &neither)
        .await
        .expect_err("one of the attributes is required");
    assert!(matches!(invalid, kube::Error::Api(s) if s.code == 422));

    // Creating reviews is itself authorized: the ServiceAccount under review may not.
    let unprivileged = client(&server, &prometheus).await;
    let refused = Api::<TokenReview>::all(unprivileged)
        .create(&PostParams::default(), &review(&prometheus))
        .await
        .expect_err("no grant for tokenreviews");
    assert!(matches!(refused, kube::Error::Api(s) if s.code == 403));
    // The reviewer's creates are recorded as used grants, nothing of the reviewed users.
    let used: Vec<(String, String)> = api
        .auth
        .used_grants()
        .into_iter()
        .map(|g| (g.user, g.resource))
        .collect();
    assert!(used.contains(&(
        "system:serviceaccount:default:reviewer".into(),
        "tokenreviews".into()
    )));
    assert!(
        !used
            .iter()
            .any(|(user, _)| user.ends_with(":prometheus") || user.ends_with(":stranger"))
    );
}

#[tokio::test]
async fn discovery_lists_the_reviews_as_kube_apiserver_does() {
    let api = ApiServer::new(Cluster::default());
    let router = api.router();
    let client = Client::new(router, "default");
    for (group, name, kind) in [
        ("authentication.k8s.io", "tokenreviews", "TokenReview"),
        (
            "authorization.k8s.io",
            "subjectaccessreviews",
            "SubjectAccessReview",
        ),
    ] {
        let request = http::Request::get(format!("/apis/{group}/v1"))
            .body(Vec::new())
            .expect("request");
        let list: Value =
            serde_json::from_str(&client.request_text(request).await.expect("discovery"))
                .expect("json");
        let entry = list["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .expect("listed");
        assert_eq!(entry["kind"], kind);
        assert_eq!(entry["namespaced"], false);
        assert_eq!(entry["verbs"], serde_json::json!(["create"]));
        let groups: Value = serde_json::from_str(
            &client
                .request_text(
                    http::Request::get("/apis")
                        .body(Vec::new())
                        .expect("request"),
                )
                .await
                .expect("groups"),
        )
        .expect("json");
        assert!(
            groups["groups"]
                .as_array()
                .expect("groups")
                .iter()
                .any(|g| g["name"] == group)
        );
    }
}
