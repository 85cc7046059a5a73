//! `kaosctl dev`: the quickstart brought to Ready in a sandbox and, with `--kubeconfig`, on an
//! existing cluster; the sandbox's authz controller; one line and a hint on errors.

use std::time::Duration;

use kaos_testkit::ApiServer;
use kaos_testkit::cluster::ListOptions;

use super::{
    ACCESS, Scratch, assert_has_lines, kaosctl, repo, run, serve, start_sandbox, stderr_lines,
};

/// The sandbox runs the authz controller: an AccessGrant and a ThirdPartyService say they are
/// not enforced and that what they name resolves, the table shows those reasons, and waiting
/// for readiness ends although neither is ever Ready.
#[tokio::test]
async fn the_sandbox_reports_access_grants_and_third_party_services() {
    let scratch = Scratch::new("access");
    let apply = vec![
        scratch.credentials(),
        repo().join("examples/quickstart.yaml"),
        scratch.write("access.yaml", ACCESS),
    ];
    let sandbox = start_sandbox(&scratch, apply, vec![]).await;
    sandbox
        .wait_ready(Duration::from_secs(60), false)
        .await
        .expect("everything settles");
    let rows = sandbox.rows().await.expect("rows");
    let row = |kind: &str| {
        rows.iter()
            .find(|r| r.kind == kind)
            .unwrap_or_else(|| panic!("no {kind} in {rows:?}"))
    };
    let (grant, service) = (row("AccessGrant"), row("ThirdPartyService"));
    assert_eq!(
        (grant.name.as_str(), grant.phase.as_str(), grant.settled),
        ("researchers", "AuthorizationDisabled", true)
    );
    assert_eq!(
        (
            service.name.as_str(),
            service.phase.as_str(),
            service.settled
        ),
        ("github", "FeatureDisabled", true)
    );

    let cluster = &sandbox.testkit.as_ref().expect("a sandbox").api.cluster;
    let conditions = |plural: &str, name: &str| -> Vec<(String, String, String)> {
        let resource = cluster
            .resource("kaos.tools", "v1alpha1", plural)
            .expect("served");
        let object = cluster.get(&resource, "default", name).expect("exists");
        let mut conditions: Vec<(String, String, String)> = object["status"]["conditions"]
            .as_array()
            .expect("conditions")
            .iter()
            .map(|c| {
                let text = |k: &str| c[k].as_str().unwrap_or("").to_string();
                (text("type"), text("status"), text("reason"))
            })
            .collect();
        conditions.sort();
        conditions
    };
    let expected = |settled: (&str, &str)| {
        let mut expected = vec![
            (
                settled.0.to_string(),
                "False".to_string(),
                settled.1.to_string(),
            ),
            (
                "ResolvedRefs".to_string(),
                "True".to_string(),
                "ReferencesResolved".to_string(),
            ),
        ];
        expected.sort();
        expected
    };
    assert_eq!(
        conditions("accessgrants", "researchers"),
        expected(("Enforced", "AuthorizationDisabled"))
    );
    assert_eq!(
        conditions("thirdpartyservices", "github"),
        expected(("Ready", "FeatureDisabled"))
    );

    let report = sandbox.report().await;
    assert_has_lines(
        &report,
        &[
            "AccessGrant        researchers  AuthorizationDisabled\n",
            "ThirdPartyService  github       FeatureDisabled\n",
            "authz-controller: http://",
        ],
    );
    sandbox.stop().await;
}

/// Asserts that `kaosctl dev` says the quickstart is Ready, with its table and its children in
/// `namespace`.
fn assert_quickstart_ready(stdout: &str, namespace: &str) {
    assert!(stdout.contains("all resources are Ready"), "{stdout}");
    assert_has_lines(
        stdout,
        &[
            "ModelAPI   llm-proxy",
            "MCPServer  echo-tools",
            "Agent      coordinator",
            "Agent      worker",
            &format!("Deployment {namespace}/agent-worker"),
        ],
    );
}

#[test]
fn the_cli_prints_one_line_and_a_hint_on_errors() {
    let out = run(["render", "-f", "no-such-file.yaml"]);
    assert!(!out.status.success());
    assert_eq!(
        stderr_lines(&out),
        [
            "kaosctl: cannot read no-such-file.yaml: No such file or directory (os error 2)",
            "hint: pass existing YAML files with -f, or - for standard input"
        ]
    );
    let out = run(["crds"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout)
            .matches("kind: CustomResourceDefinition")
            .count(),
        kaos_api::crd::all().len()
    );
}

#[test]
fn dev_exits_when_the_quickstart_is_ready() {
    let scratch = Scratch::new("dev");
    let kubeconfig = scratch.join("kubeconfig");
    let out = run([
        "dev",
        "--listen",
        "127.0.0.1:0",
        "--exit-when-ready",
        "--timeout",
        "90",
        "--write-kubeconfig",
        &kubeconfig.display().to_string(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_quickstart_ready(&stdout, "default");
    assert!(
        stdout.contains(&format!(
            "try: kubectl --kubeconfig {} get agents",
            kubeconfig.display()
        )),
        "{stdout}"
    );
    assert!(kubeconfig.exists());
}

#[tokio::test]
async fn dev_with_kubeconfig_brings_the_quickstart_to_ready_on_an_existing_cluster() {
    // An existing cluster: kaos-testkit on loopback, no CRDs, no registry, a kubeconfig whose
    // context points at namespace team-a.
    let api = ApiServer::new(kaos_testkit::Cluster::default());
    kaos_testkit::manifests::apply_yaml(
        &api.cluster,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a}\n",
    )
    .expect("namespace");
    let server = serve(api, false).await;
    let scratch = Scratch::new("existing");
    let kubeconfig = scratch.write(
        "kubeconfig",
        &server
            .kubeconfig(None)
            .replace("namespace: default", "namespace: team-a"),
    );
    // The provider key Secret the quickstart's ModelAPI reads, as a user creates it first.
    let credentials = scratch.write(
        "credentials.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata: {name: openai-credentials}\nstringData: {api-key: sk-test}\n",
    );
    let args = |extra: &[&str]| -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = vec!["dev".into(), "--kubeconfig".into()];
        args.push(kubeconfig.clone().into());
        args.push("--apply".into());
        args.push(credentials.clone().into());
        args.push("--apply".into());
        args.push(repo().join("examples/quickstart.yaml").into());
        args.extend(["--exit-when-ready", "--timeout", "90"].map(Into::into));
        args.extend(extra.iter().map(Into::into));
        args
    };

    // Without the CRDs: one line naming what is missing, and the flag that installs it.
    let out = kaosctl(args(&[])).await;
    assert!(!out.status.success());
    assert_eq!(
        stderr_lines(&out),
        [
            format!(
                "kaosctl: {} lacks CRD agents.kaos.tools, CRD modelapis.kaos.tools, CRD mcpservers.kaos.tools, CRD memorystores.kaos.tools, CRD accessgrants.kaos.tools, CRD thirdpartyservices.kaos.tools, CRD agentworkflows.kaos.tools, CRD agentworkflowruns.kaos.tools, the MCP runtime registry (ConfigMap kaos-system/kaos-mcp-runtimes)",
                server.url().trim_end_matches('/')
            )
            .as_str(),
            "hint: add --install-crds to install them (the CRDs of `kaosctl crds`, server-side applied, and the default registry)",
        ]
    );

    let out = kaosctl(args(&["--install-crds"])).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_quickstart_ready(&stdout, "team-a");
    assert_has_lines(&stdout, &["Service team-a/mcpserver-echo-tools"]);
    assert!(stderr.contains("Leases in namespace team-a"), "{stderr}");
    let cluster = &server.api.cluster;
    let leases = cluster
        .resource("coordination.k8s.io", "v1", "leases")
        .expect("leases");
    let mut holders: Vec<String> = cluster
        .list(&leases, "team-a", &ListOptions::default())
        .expect("list")["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|l| l["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect();
    holders.sort();
    assert_eq!(
        holders,
        [
            "kaos-agent-controller",
            "kaos-authz-controller",
            "kaos-mcpserver-controller",
            "kaos-memorystore-controller",
            "kaos-modelapi-controller",
            "kaos-workflow-controller"
        ]
    );
    // A clean stop hands the Leases over (no holder left), so the next run leads at once.
    for lease in cluster
        .list(&leases, "team-a", &ListOptions::default())
        .expect("list")["items"]
        .as_array()
        .expect("items")
    {
        assert!(
            lease
                .pointer("/spec/holderIdentity")
                .is_none_or(|h| h.is_null() || h == ""),
            "{lease}"
        );
    }

    // Again, with the CRDs in place: no flag needed, and Ready again.
    let out = kaosctl(args(&[])).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
