//! Real policy decisions: the controller projects the cluster into the policy ConfigMap on
//! kaos-testkit, and the real OPA (built from its Go module: `KAOS_OPA`, `scripts/opa-tool
//! path`) evaluates `data.kaos.authz.result` on the `policy.rego` and `data.json` it wrote, for
//! inputs shaped as the PDP's Envoy plugin gives them (an ext_authz CheckRequest with
//! `parsed_path`). Tokens are RS256, signed with a key made for the run (openssl) whose public
//! half the users' issuer serves.
//!
//! Users, groups and Agents, by name and by selector; a grant removed; a grant for a resource
//! that does not exist yet, then does.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::ConfigMap;
use kaos_api::access::{AccessGrant, ResourceKind, SubjectKind};
use kaos_api::agent::Agent;
use kaos_api::mcpserver::MCPServer;
use kaos_harness::cluster::eventually_within;
use kaos_harness::controller::ControllerTest;
use kaos_harness::fixtures::*;
use kaos_harness::status::Conditioned;
use kube::Resource;
use serde_json::{Value, json};
use support::{ISSUER, KeyServer, POLICY_CONFIGMAP, policy_data, security_on, start};

fn opa() -> PathBuf {
    let Some(path) = std::env::var_os("KAOS_OPA") else {
        panic!("KAOS_OPA is not set: KAOS_OPA=$(scripts/opa-tool path) (docs/testing.md)");
    };
    let path = PathBuf::from(path);
    assert!(path.exists(), "KAOS_OPA={} does not exist", path.display());
    path
}

/// A scratch directory of this run.
fn scratch() -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos();
    let dir = std::env::temp_dir().join(format!("kaos-policy-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

fn run(command: &mut Command) -> String {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("utf-8")
}

/// `opa eval` of `query` over these files and input: the value.
fn eval(files: &[&Path], input: &Value, query: &str, dir: &Path) -> Value {
    let input_path = dir.join("input.json");
    std::fs::write(&input_path, input.to_string()).expect("input");
    let mut command = Command::new(opa());
    command
        .args(["eval", "--format", "json", "--input"])
        .arg(&input_path);
    for file in files {
        command.arg("--data").arg(file);
    }
    let out: Value = serde_json::from_str(&run(command.arg(query))).expect("opa's JSON");
    out["result"][0]["expressions"][0]["value"].clone()
}

/// A new RSA key (PEM) at `path`.
fn new_key(path: &Path) {
    run(Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
        ])
        .arg(path));
}

/// Tokens signed with the key at `pem`, by name, and the key's public JWK.
fn mint(pem: &Path, claims: &Value, dir: &Path) -> (Value, Value) {
    let minter = dir.join("mint.rego");
    std::fs::write(
        &minter,
        r#"package mint
import rego.v1
key := crypto.x509.parse_rsa_private_key(input.pem)
public := {"kty": "RSA", "kid": "k1", "alg": "RS256", "use": "sig", "n": key.n, "e": key.e}
tokens := {name: io.jwt.encode_sign({"alg": "RS256", "kid": "k1", "typ": "JWT"}, c, key) | some name, c in input.claims}
"#,
    )
    .expect("minter");
    let pem = std::fs::read_to_string(pem).expect("pem");
    let out = eval(
        &[&minter],
        &json!({"pem": pem, "claims": claims}),
        "data.mint",
        dir,
    );
    (out["tokens"].clone(), out["public"].clone())
}

/// The input the PDP's Envoy plugin gives the policy for this request.
fn request(path: &str, subject: Option<&Value>, actor: Option<&Value>) -> Value {
    let mut headers = json!({":method": "POST", ":path": path, "content-type": "application/json"});
    if let Some(token) = subject.and_then(Value::as_str) {
        headers["authorization"] = json!(format!("Bearer {token}"));
    }
    if let Some(token) = actor.and_then(Value::as_str) {
        headers["x-agent-authorization"] = json!(format!("Bearer {token}"));
    }
    let parsed: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    json!({
        "attributes": {"request": {"http": {"method": "POST", "path": path, "host": "gateway", "headers": headers}}},
        "parsed_path": parsed,
        "parsed_query": {},
    })
}

/// What the controller wrote, as the PDP mounts it: `dir/policy.rego` and `dir/data.json`.
async fn written(h: &ControllerTest, dir: &Path) {
    let cm: ConfigMap = h.get(POLICY_CONFIGMAP).await;
    let data = cm.data.expect("data");
    std::fs::write(dir.join("policy.rego"), &data["policy.rego"]).expect("policy");
    std::fs::write(dir.join("data.json"), &data["data.json"]).expect("data");
}

fn labelled(mut agent: Agent, key: &str, value: &str) -> Agent {
    agent
        .meta_mut()
        .labels
        .get_or_insert_default()
        .insert(key.into(), value.into());
    agent
}

#[tokio::test]
async fn the_real_pdp_decides_on_what_the_controller_projected() {
    let dir = scratch();
    let (key, other_key) = (dir.join("issuer.pem"), dir.join("other.pem"));
    new_key(&key);
    new_key(&other_key);
    let exp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        + 3600;
    let user = |name: &str, groups: &[&str]| {
        json!({"iss": ISSUER, "aud": "kaos", "sub": format!("id-{name}"),
               "email": format!("{name}@example.com"), "groups": groups, "exp": exp})
    };
    let agent = |name: &str| {
        json!({"iss": ISSUER, "aud": "kaos-gateway",
               "sub": format!("system:serviceaccount:default:kaos-agent-{name}"), "exp": exp})
    };
    let (tokens, public) = mint(
        &key,
        &json!({"alice": user("alice", &[]), "carol": user("carol", &["researchers"]),
                "dave": user("dave", &["writers"]), "bob": user("bob", &[]),
                "researcher": agent("researcher"), "writer": agent("writer")}),
        &dir,
    );
    let (forged, _) = mint(&other_key, &json!({"alice": user("alice", &[])}), &dir);
    let server = KeyServer::start(&json!({"keys": [public]})).await;

    let h = start(security_on(&server.url));
    h.apply(&Agent::test("researcher").mcp_servers(["tools"]));
    h.apply(&labelled(Agent::test("writer"), "team", "research"));
    h.apply(&MCPServer::test("tools").params("x"));
    h.apply(
        &AccessGrant::test("alice-researcher")
            .subject(SubjectKind::User, "alice@example.com")
            .resource(ResourceKind::Agent, "researcher"),
    );
    h.apply(
        &AccessGrant::test("research-team")
            .subject(SubjectKind::Group, "researchers")
            .resources_labelled("team", "research"),
    );
    h.apply(
        &AccessGrant::test("researcher-to-writer")
            .subject(SubjectKind::Agent, "researcher")
            .resource(ResourceKind::Agent, "writer"),
    );
    h.apply(
        &AccessGrant::test("bob-ghost")
            .subject(SubjectKind::User, "bob@example.com")
            .resource(ResourceKind::Agent, "ghost"),
    );
    for grant in [
        "alice-researcher",
        "research-team",
        "researcher-to-writer",
        "bob-ghost",
    ] {
        h.until(grant, "enforced", |g: &AccessGrant| {
            g.reason("Enforced") == "Enforced"
        })
        .await;
    }

    written(&h, &dir).await;
    let decide = |path: &str, subject: Option<&Value>, actor: Option<&Value>| {
        let result = eval(
            &[&dir.join("policy.rego"), &dir.join("data.json")],
            &request(path, subject, actor),
            "data.kaos.authz.result",
            &dir,
        );
        let reasons: Vec<String> = result["reasons"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r.as_str().map(String::from))
            .collect();
        (result["allowed"] == json!(true), reasons.join("; "))
    };
    let allowed = |what: &str, decision: (bool, String), why: &str| {
        assert!(decision.0, "{what}: denied ({})", decision.1);
        assert_eq!(decision.1, why, "{what}");
    };
    let denied = |what: &str, decision: (bool, String), why: &str| {
        assert!(!decision.0, "{what}: allowed ({})", decision.1);
        assert_eq!(decision.1, why, "{what}");
    };
    let chat = |agent: &str| format!("/default/agent/{agent}/v1/chat/completions");

    // Entry: a user by name, a group by selector, nobody else.
    allowed(
        "alice, granted by name",
        decide(&chat("researcher"), Some(&tokens["alice"]), None),
        "user subject may reach kaos://agent/default/researcher",
    );
    denied(
        "alice, on another Agent",
        decide(&chat("writer"), Some(&tokens["alice"]), None),
        "user is not granted target resource",
    );
    allowed(
        "carol, her group granted by selector",
        decide(&chat("writer"), Some(&tokens["carol"]), None),
        "user subject may reach kaos://agent/default/writer",
    );
    denied(
        "carol, outside the selector",
        decide(&chat("researcher"), Some(&tokens["carol"]), None),
        "user is not granted target resource",
    );
    denied(
        "dave, no grant",
        decide(&chat("researcher"), Some(&tokens["dave"]), None),
        "user is not granted target resource",
    );
    denied(
        "no token",
        decide(&chat("researcher"), None, None),
        "no user subject at entry",
    );
    denied(
        "alice, signed with another key",
        decide(&chat("researcher"), Some(&forged["alice"]), None),
        "no user subject at entry",
    );
    denied(
        "bob, granted an Agent that does not exist",
        decide(&chat("ghost"), Some(&tokens["bob"]), None),
        "user is not granted target resource",
    );

    // Internal hops: the Agent must be granted the target, for a valid subject.
    allowed(
        "researcher to its MCP server, for alice",
        decide(
            "/default/mcp/tools/mcp",
            Some(&tokens["alice"]),
            Some(&tokens["researcher"]),
        ),
        "actor kaos://agent/default/researcher may reach kaos://mcpserver/default/tools for a verified subject",
    );
    allowed(
        "researcher to writer, by the Agent grant",
        decide(
            &chat("writer"),
            Some(&tokens["alice"]),
            Some(&tokens["researcher"]),
        ),
        "actor kaos://agent/default/researcher may reach kaos://agent/default/writer for a verified subject",
    );
    denied(
        "writer to an MCP server it does not use",
        decide(
            "/default/mcp/tools/mcp",
            Some(&tokens["alice"]),
            Some(&tokens["writer"]),
        ),
        "actor kaos://agent/default/writer is not granted kaos://mcpserver/default/tools",
    );
    denied(
        "researcher without a subject",
        decide("/default/mcp/tools/mcp", None, Some(&tokens["researcher"])),
        "subject missing or invalid",
    );

    // A grant removed: alice is refused once the data no longer holds it.
    h.delete::<AccessGrant>("alice-researcher").await;
    eventually_within(
        Duration::from_secs(10),
        "alice's grant gone from the data",
        || async {
            let data = policy_data(&h).await;
            data["kaos"]["user_grants"]
                .get("user:alice@example.com")
                .is_none()
                .then_some(())
        },
    )
    .await;
    written(&h, &dir).await;
    denied(
        "alice, her grant removed",
        decide(&chat("researcher"), Some(&tokens["alice"]), None),
        "user is not granted target resource",
    );

    // The missing resource created: bob's grant takes effect.
    h.apply(&Agent::test("ghost"));
    eventually_within(Duration::from_secs(10), "ghost in bob's grant", || async {
        let data = policy_data(&h).await;
        (data["kaos"]["user_grants"]["user:bob@example.com"]
            == json!(["kaos://agent/default/ghost"]))
        .then_some(())
    })
    .await;
    written(&h, &dir).await;
    allowed(
        "bob, once the Agent exists",
        decide(&chat("ghost"), Some(&tokens["bob"]), None),
        "user subject may reach kaos://agent/default/ghost",
    );
    let _ = std::fs::remove_dir_all(&dir);
}
