//! RBAC enforcement over HTTP: bearer tokens per ServiceAccount, Roles and bindings stored in the
//! cluster, 403 Forbidden on denial, and a record of which grants were used.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::rbac::v1::RoleBinding;
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

/// The testkit served on loopback with RBAC enforced.
async fn serve_with_rbac() -> (ApiServer, TestServer) {
    let api = ApiServer::new(Cluster::default());
    let options = ServeOptions {
        rbac: true,
        ..Default::default()
    };
    let server = TestServer::start(api.clone(), &options)
        .await
        .expect("serve");
    (api, server)
}

/// An object with only a name, to create.
fn named<K: serde::de::DeserializeOwned>(name: &str) -> K {
    serde_json::from_value(json!({"metadata": {"name": name}})).expect("object")
}

fn code(e: kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        other => panic!("API error expected, got {other}"),
    }
}

/// The status code of a list the server must refuse.
async fn refused_list<K>(api: Api<K>) -> u16
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    code(api.list(&ListParams::default()).await.expect_err("refused"))
}

const READER_RBAC: &str = r#"
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

/// The admin's client, and the client of ServiceAccount `default/reader`, which a Role lets
/// get and list ConfigMaps in `default`; ConfigMap `c` exists.
async fn admin_and_reader(api: &ApiServer, server: &TestServer) -> (Client, Client) {
    let admin = client_with(server, Some(&server.admin_token)).await;
    kaos_testkit::manifests::apply_yaml(&api.cluster, READER_RBAC).expect("RBAC objects");
    let cm: ConfigMap = named("c");
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
    let reader = client_with(server, Some(&token)).await;
    (admin, reader)
}

#[tokio::test]
async fn rbac_allows_what_is_bound_denies_the_rest_and_records_used_grants() {
    let (api, server) = serve_with_rbac().await;
    let (_, reader) = admin_and_reader(&api, &server).await;
    let cm: ConfigMap = named("c");
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
    let no_secrets = Api::<Secret>::default_namespaced(reader.clone());
    assert_eq!(refused_list(no_secrets).await, 403);
    let other_namespace = Api::<ConfigMap>::namespaced(reader.clone(), "kube-system");
    assert_eq!(refused_list(other_namespace).await, 403);
    let bad_token = Api::<ConfigMap>::default_namespaced(client_with(&server, None).await);
    assert_eq!(refused_list(bad_token).await, 401);
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

#[tokio::test]
async fn a_changed_role_or_binding_holds_from_the_next_request() {
    let (api, server) = serve_with_rbac().await;
    let (admin, reader) = admin_and_reader(&api, &server).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(reader);
    let list = ListParams::default();
    cms.list(&list).await.expect("allowed");
    let another: ConfigMap = named("d");
    let create = PostParams::default();
    assert_eq!(
        code(cms.create(&create, &another).await.expect_err("no create")),
        403
    );

    let with_create = READER_RBAC.replace("verbs: [get, list]", "verbs: [get, list, create]");
    kaos_testkit::manifests::apply_yaml(&api.cluster, &with_create).expect("role edited");
    cms.create(&create, &another)
        .await
        .expect("create, once the Role allows it");

    Api::<RoleBinding>::default_namespaced(admin)
        .delete("reader", &Default::default())
        .await
        .expect("unbound");
    assert_eq!(refused_list(cms).await, 403, "no binding, no list");
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

    let (_, server) = serve_with_rbac().await;
    let admin = client_with(&server, Some(&server.admin_token)).await;
    let accounts: Api<ServiceAccount> = Api::default_namespaced(admin.clone());
    accounts
        .create(&PostParams::default(), &named("worker"))
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
    let (api, server) = serve_with_rbac().await;
    let anonymous = anonymous_client(&server);
    let off_by_default = Api::<ConfigMap>::default_namespaced(anonymous.clone());
    assert_eq!(refused_list(off_by_default).await, 401);

    api.auth.set_anonymous_admin(true);
    let cm: ConfigMap = named("c");
    Api::<ConfigMap>::default_namespaced(anonymous)
        .create(&PostParams::default(), &cm)
        .await
        .expect("no credentials: the admin");
    // A wrong credential is still refused, and a ServiceAccount's token still held to RBAC.
    let bad_token = Api::<ConfigMap>::default_namespaced(client_with(&server, None).await);
    assert_eq!(refused_list(bad_token).await, 401);
    let token = api
        .auth
        .mint_token(kaos_testkit::auth::Identity::service_account(
            "default", "nobody",
        ));
    let no_rule = Api::<ConfigMap>::default_namespaced(client_with(&server, Some(&token)).await);
    assert_eq!(refused_list(no_rule).await, 403);
}
