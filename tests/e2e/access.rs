//! An AccessGrant says it is not enforced and follows what it names.

use super::*;

/// (status, reason, message) of a condition.
fn state(object: &DynamicObject, type_: &str) -> Option<(String, String, String)> {
    let c = condition(object, type_)?;
    let text = |k: &str| c[k].as_str().unwrap_or("").to_string();
    Some((text("status"), text("reason"), text("message")))
}

/// The authz-controller binary: an AccessGrant naming an Agent that exists and an MCPServer
/// that does not says, in KAOS's words, that it is not enforced and which reference is missing;
/// once the MCPServer is created its references resolve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_access_grant_is_not_enforced_and_follows_what_it_names() {
    let scratch = Scratch::new("authz");
    let (_testkit, kubeconfig, client) = testkit_with_system_namespace(&scratch).await;
    let _controller = start_controller(
        &scratch,
        "authz-controller",
        "authz-controller",
        &kubeconfig,
        &settings(),
    );
    apply_yaml(
        &client,
        "apiVersion: kaos.tools/v1alpha1\nkind: Agent\nmetadata: {name: researcher, namespace: default}\nspec: {modelAPI: llm, model: openai/gpt-4o}\n---\napiVersion: kaos.tools/v1alpha1\nkind: AccessGrant\nmetadata: {name: researchers, namespace: default}\nspec: {subjects: [{kind: Agent, name: researcher}], resources: [{kind: MCPServer, name: tools}]}\n",
    )
    .await;
    let grants = kind_api(&client, "AccessGrant");
    let resolved = |status: &'static str| {
        let grants = grants.clone();
        async move {
            let grant = grants.get("researchers").await.ok()?;
            (state(&grant, "ResolvedRefs")?.0 == status).then_some(grant)
        }
    };
    let grant = wait_until(
        &scratch,
        "the grant reports the missing MCPServer",
        Duration::from_secs(30),
        || resolved("False"),
    )
    .await;
    assert_eq!(
        state(&grant, "Enforced"),
        Some((
            "False".into(),
            "AuthorizationDisabled".into(),
            "Gateway authorization is not enabled; this AccessGrant is not enforced".into()
        ))
    );
    assert_eq!(
        state(&grant, "ResolvedRefs"),
        Some((
            "False".into(),
            "ReferenceNotFound".into(),
            "MCPServer tools not found in namespace default; create them or fix the names".into()
        ))
    );

    apply_yaml(
        &client,
        "apiVersion: kaos.tools/v1alpha1\nkind: MCPServer\nmetadata: {name: tools, namespace: default}\nspec: {runtime: python-string}\n",
    )
    .await;
    let grant = wait_until(
        &scratch,
        "the grant's references resolve",
        Duration::from_secs(30),
        || resolved("True"),
    )
    .await;
    assert_eq!(
        state(&grant, "ResolvedRefs").map(|(_, reason, _)| reason),
        Some("ReferencesResolved".into())
    );
    assert_eq!(
        state(&grant, "Enforced").map(|(status, reason, _)| (status, reason)),
        Some(("False".into(), "AuthorizationDisabled".into()))
    );
}
