//! RBAC enforcement over HTTP: bearer tokens per ServiceAccount, Roles and bindings stored in the
//! cluster, 403 Forbidden on denial, and a record of which grants were used.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kaos_testkit::auth::Grant;
use kaos_testkit::{ApiServer, Cluster, ServeOptions, TestServer};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

async fn client_with(server: &TestServer, token: Option<&str>) -> Client {
    let text = match token {
        Some(token) => server.kubeconfig(Some(token)),
        None => server.kubeconfig(Some("not-a-token")),
    };
    let kubeconfig: kube::config::Kubeconfig = serde_saphyr::from_str(&text).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    Client::try_from(config).expect("client")
}

fn code(e: kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        other => panic!("API error expected, got {other}"),
    }
}

#[tokio::test]
async fn rbac_allows_what_is_bound_denies_the_rest_and_records_used_grants() {
    let api = ApiServer::new(Cluster::default());
    let options = ServeOptions {
        rbac: true,
        ..Default::default()
    };
    let server = TestServer::start(api.clone(), &options)
        .await
        .expect("serve");
    let admin = client_with(&server, Some(&server.admin_token)).await;
    let manifests = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: reader, namespace: default}
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reader, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: reader}
subjects:
- {kind: ServiceAccount, name: reader, namespace: default}
"#;
    kaos_testkit::manifests::apply_yaml(&api.cluster, manifests).expect("RBAC objects");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "c"}})).expect("cm");
    Api::<ConfigMap>::default_namespaced(admin.clone())
        .create(&PostParams::default(), &cm)
        .await
        .expect("admin");

    // The token comes from the test-control endpoint, as a script would get it.
    let minted = admin
        .request_text(
            http::Request::post("/kaos-testkit/tokens?namespace=default&serviceAccount=reader")
                .body(Vec::new())
                .expect("request"),
        )
        .await
        .expect("mint");
    let token = serde_json::from_str::<serde_json::Value>(&minted).expect("json")["token"]
        .as_str()
        .expect("token")
        .to_string();
    let reader = client_with(&server, Some(&token)).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(reader.clone());
    assert_eq!(
        cms.list(&ListParams::default())
            .await
            .expect("allowed")
            .items
            .len(),
        1
    );
    assert_eq!(
        code(
            cms.create(&PostParams::default(), &cm)
                .await
                .expect_err("no create")
        ),
        403
    );
    assert_eq!(
        code(
            Api::<Secret>::default_namespaced(reader.clone())
                .list(&ListParams::default())
                .await
                .expect_err("no secrets")
        ),
        403
    );
    assert_eq!(
        code(
            Api::<ConfigMap>::namespaced(reader.clone(), "kube-system")
                .list(&ListParams::default())
                .await
                .expect_err("other ns")
        ),
        403
    );
    assert_eq!(
        code(
            Api::<ConfigMap>::default_namespaced(client_with(&server, None).await)
                .list(&ListParams::default())
                .await
                .expect_err("bad token")
        ),
        401
    );
    // The test-control endpoints are for the admin only.
    let denied = reader
        .request_text(
            http::Request::get("/kaos-testkit/audit")
                .body(Vec::new())
                .expect("request"),
        )
        .await;
    assert!(denied.is_err());

    let used: Vec<Grant> = api
        .auth
        .used_grants()
        .into_iter()
        .filter(|g| g.user.ends_with(":reader"))
        .collect();
    assert_eq!(
        used,
        vec![Grant {
            user: "system:serviceaccount:default:reader".into(),
            verb: "list".into(),
            group: "".into(),
            resource: "configmaps".into(),
            namespace: "default".into(),
        }],
        "only the list grant was used; get was granted but never used"
    );
}

/// A client of `server` that sends no credentials at all, as kubectl and helm do over plain
/// HTTP.
fn anonymous_client(server: &TestServer) -> Client {
    let config = kube::Config::new(server.url().parse().expect("url"));
    Client::try_from(config).expect("client")
}

#[tokio::test]
async fn token_request_mints_a_service_account_token_that_rbac_then_holds() {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;

    let api = ApiServer::new(Cluster::default());
    let options = ServeOptions {
        rbac: true,
        ..Default::default()
    };
    let server = TestServer::start(api.clone(), &options)
        .await
        .expect("serve");
    let admin = client_with(&server, Some(&server.admin_token)).await;
    let accounts: Api<ServiceAccount> = Api::default_namespaced(admin.clone());
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "worker"}})).expect("sa");
    accounts
        .create(&PostParams::default(), &account)
        .await
        .expect("service account");

    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(7200),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = accounts
        .create_token_request("worker", &PostParams::default(), &request)
        .await
        .expect("token request");
    assert_eq!(answer.spec.expiration_seconds, Some(7200));
    assert!(
        !answer.spec.audiences.is_empty(),
        "kube fills the audiences"
    );
    let status = answer.status.expect("status");
    assert!(status.expiration_timestamp.0 > jiff::Timestamp::now());

    // The token is the ServiceAccount's, held to RBAC: no rule grants it anything.
    let worker = client_with(&server, Some(&status.token)).await;
    let denied = Api::<ConfigMap>::default_namespaced(worker.clone())
        .list(&ListParams::default())
        .await
        .expect_err("no rule");
    assert!(
        denied
            .to_string()
            .contains("User \"system:serviceaccount:default:worker\" cannot list"),
        "{denied}"
    );
    // Minting is `create` on serviceaccounts/token, which it was not granted either.
    let minting = Api::<ServiceAccount>::default_namespaced(worker)
        .create_token_request("worker", &PostParams::default(), &request)
        .await
        .expect_err("no serviceaccounts/token");
    assert_eq!(code(minting), 403);
    // No token for a ServiceAccount that does not exist.
    let missing = accounts
        .create_token_request("nobody", &PostParams::default(), &request)
        .await
        .expect_err("missing");
    assert_eq!(code(missing), 404);
}

#[tokio::test]
async fn anonymous_admin_lets_credential_less_clients_in_and_keeps_rbac_for_tokens() {
    let api = ApiServer::new(Cluster::default());
    let options = ServeOptions {
        rbac: true,
        ..Default::default()
    };
    let server = TestServer::start(api.clone(), &options)
        .await
        .expect("serve");
    let anonymous = anonymous_client(&server);
    let listed = Api::<ConfigMap>::default_namespaced(anonymous.clone())
        .list(&ListParams::default())
        .await;
    assert_eq!(code(listed.expect_err("off by default")), 401);

    api.auth.set_anonymous_admin(true);
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "c"}})).expect("cm");
    Api::<ConfigMap>::default_namespaced(anonymous)
        .create(&PostParams::default(), &cm)
        .await
        .expect("no credentials: the admin");
    // A wrong credential is still refused, and a ServiceAccount's token still held to RBAC.
    let wrong = Api::<ConfigMap>::default_namespaced(client_with(&server, None).await)
        .list(&ListParams::default())
        .await;
    assert_eq!(code(wrong.expect_err("bad token")), 401);
    let token = api
        .auth
        .mint_token(kaos_testkit::auth::Identity::service_account(
            "default", "nobody",
        ));
    let held = Api::<ConfigMap>::default_namespaced(client_with(&server, Some(&token)).await)
        .list(&ListParams::default())
        .await;
    assert_eq!(code(held.expect_err("no rule")), 403);
}
