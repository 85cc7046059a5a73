//! The committed CRDs in `deploy/crds/` are exactly what the code generates, small enough for a
//! plain `kubectl apply`, and structural (as kube-apiserver requires of every CRD).

use kaos_harness::repo_root;
use serde_json::Value;

const REGENERATE: &str = "cargo run -p kaos-api --bin crdgen -- --write deploy/crds";

#[test]
fn committed_crds_match_the_code() {
    let dir = repo_root().join("deploy/crds");
    let mut expected_files = Vec::new();
    for (file, crd) in kaos_api::crd::all() {
        let generated = kaos_api::crd::to_yaml(&crd).expect("CRDs serialize to YAML");
        let path = dir.join(file);
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == generated,
            "{} differs from the generated CRD: run `{REGENERATE}` and commit the result",
            path.display()
        );
        expected_files.push(file.to_string());
    }
    let mut present: Vec<String> = std::fs::read_dir(&dir)
        .expect("deploy/crds exists")
        .map(|e| {
            e.expect("readable entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    present.sort();
    expected_files.sort();
    assert_eq!(
        present, expected_files,
        "deploy/crds holds exactly one file per CRD"
    );
}

/// `kubectl apply` (client-side) stores the whole object in an annotation limited to 256 KiB.
#[test]
fn every_crd_fits_the_last_applied_annotation() {
    for (file, crd) in kaos_api::crd::all() {
        let json = serde_json::to_string(&crd).expect("CRDs serialize");
        assert!(
            json.len() < 256 * 1024,
            "{file} is {} bytes as JSON, over the 256 KiB kubectl apply limit",
            json.len()
        );
    }
}

#[test]
fn crds_have_the_contracted_names_columns_and_subresources() {
    let expected = [
        (
            "agents",
            "Agent",
            vec!["agent", "agents"],
            vec![
                "ModelAPI", "Model", "Ready", "Phase", "Tokens", "Budget", "Age",
            ],
        ),
        (
            "modelapis",
            "ModelAPI",
            vec!["api", "apis"],
            vec!["Mode", "Ready", "Phase", "Age"],
        ),
        (
            "mcpservers",
            "MCPServer",
            vec!["mcp", "mcps"],
            vec!["Runtime", "Ready", "Phase", "Tools", "Age"],
        ),
        (
            "agentworkflows",
            "AgentWorkflow",
            vec!["awf"],
            vec!["Schedule", "Suspend", "Last Schedule", "Ready", "Age"],
        ),
        (
            "agentworkflowruns",
            "AgentWorkflowRun",
            vec!["awfr"],
            vec![
                "Workflow",
                "Phase",
                "Trigger",
                "Started",
                "Completed",
                "Age",
            ],
        ),
    ];
    let crds = kaos_api::crd::all();
    for (plural, kind, short, columns) in expected {
        let crd = &crds
            .iter()
            .find(|(_, crd)| crd.spec.names.plural == plural)
            .unwrap_or_else(|| panic!("a CRD of {plural}"))
            .1;
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some(format!("{plural}.kaos.tools").as_str())
        );
        assert_eq!(crd.spec.group, "kaos.tools");
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(crd.spec.names.plural, plural);
        assert_eq!(crd.spec.names.kind, kind);
        assert_eq!(
            crd.spec.names.short_names.as_deref(),
            Some(&short.iter().map(|s| s.to_string()).collect::<Vec<_>>()[..])
        );
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha1");
        assert!(version.served && version.storage);
        assert!(
            version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some(),
            "{kind} has a status subresource"
        );
        let names: Vec<&str> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(names, columns, "{kind} printer columns");
    }
}

/// The workflow kinds' columns read the fields they are named after, as `kubectl get` shows them,
/// and the kinds are listed by `kubectl get kaos` with the others.
#[test]
fn workflow_columns_read_their_fields() {
    let expected = [
        (
            "AgentWorkflow",
            vec![
                ("Schedule", "string", ".spec.schedule"),
                ("Suspend", "boolean", ".spec.suspend"),
                ("Last Schedule", "date", ".status.lastScheduleTime"),
                (
                    "Ready",
                    "string",
                    r#".status.conditions[?(@.type=="Ready")].status"#,
                ),
                ("Age", "date", ".metadata.creationTimestamp"),
            ],
        ),
        (
            "AgentWorkflowRun",
            vec![
                ("Workflow", "string", ".spec.workflowRef"),
                ("Phase", "string", ".status.phase"),
                ("Trigger", "string", ".spec.trigger"),
                ("Started", "date", ".status.startTime"),
                ("Completed", "date", ".status.completionTime"),
                ("Age", "date", ".metadata.creationTimestamp"),
            ],
        ),
    ];
    let crds = kaos_api::crd::all();
    for (kind, columns) in expected {
        let (_, crd) = crds
            .iter()
            .find(|(_, crd)| crd.spec.names.kind == kind)
            .unwrap_or_else(|| panic!("a CRD of {kind}"));
        assert_eq!(
            crd.spec.names.categories.as_deref(),
            Some(&["kaos".to_string()][..])
        );
        let found: Vec<(&str, &str, &str)> = crd.spec.versions[0]
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| (c.name.as_str(), c.type_.as_str(), c.json_path.as_str()))
            .collect();
        assert_eq!(found, columns, "{kind} printer columns");
    }
}

/// kube-apiserver rejects a CRD whose schema is not structural: every node needs a type (unless
/// it is int-or-string or preserves unknown fields) and there are no references.
#[test]
fn schemas_are_structural() {
    fn check(node: &Value, path: &str, problems: &mut Vec<String>) {
        let Some(map) = node.as_object() else { return };
        for banned in ["$ref", "definitions", "$defs", "oneOf", "anyOf"] {
            if map.contains_key(banned) {
                problems.push(format!("{path}: has {banned}"));
            }
        }
        let typed = map.contains_key("type")
            || map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
            || map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
        if !typed {
            problems.push(format!("{path}: no type"));
        }
        if let Some(Value::Object(properties)) = map.get("properties") {
            for (name, child) in properties {
                check(child, &format!("{path}.{name}"), problems);
            }
        }
        for key in ["items", "additionalProperties"] {
            if let Some(child @ Value::Object(_)) = map.get(key) {
                check(child, &format!("{path}[{key}]"), problems);
            }
        }
    }
    for (file, crd) in kaos_api::crd::all() {
        let json = serde_json::to_value(&crd).expect("CRDs serialize");
        let schema = json
            .pointer("/spec/versions/0/schema/openAPIV3Schema")
            .expect("schema");
        let mut problems = Vec::new();
        check(schema, "", &mut problems);
        assert!(
            problems.is_empty(),
            "{file} is not structural:\n{}",
            problems.join("\n")
        );
    }
}

/// The embedded PodSpec is validated (its fields and types are in the schema) even though its
/// upstream descriptions are dropped.
#[test]
fn pod_spec_is_validated_without_upstream_descriptions() {
    let mut workloads = 0;
    for (file, crd) in kaos_api::crd::all() {
        let json = serde_json::to_value(&crd).expect("CRDs serialize");
        // The authorization kinds run no pods.
        let Some(pod_spec) = json
            .pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/podSpec")
        else {
            continue;
        };
        workloads += 1;
        assert!(
            pod_spec.get("description").is_some(),
            "{file}: podSpec keeps our description"
        );
        let containers = pod_spec.pointer("/properties/containers/items/properties/name/type");
        assert_eq!(
            containers,
            Some(&Value::from("string")),
            "{file}: containers[].name is typed"
        );
        let text = serde_json::to_string(&pod_spec["properties"]).expect("serializes");
        assert!(
            !text.contains("\"description\""),
            "{file}: upstream PodSpec descriptions are dropped"
        );
    }
    assert_eq!(
        workloads, 4,
        "Agent, ModelAPI, MCPServer and MemoryStore have a podSpec"
    );
}

/// The kaos-crds chart's templates are the same CRDs, marked to survive `helm uninstall`, with
/// each `{{` of their text escaped: Helm reads the templates as Go templates, and a description
/// showing a step template (`{{ input }}`) would otherwise fail the chart.
#[test]
fn chart_crds_match_the_code() {
    const ESCAPED: &str = "{{`{{`}}";
    let dir = repo_root().join("charts/kaos/charts/kaos-crds/templates");
    let mut escapes = 0;
    for (file, mut crd) in kaos_api::crd::all() {
        let committed = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
        assert!(
            committed == kaos_api::crd::to_helm_template(&crd).expect("CRDs serialize to YAML"),
            "charts/kaos/charts/kaos-crds/templates/{file} differs: run `cargo run -p kaos-api --bin crdgen -- --write-helm charts/kaos/charts/kaos-crds/templates`"
        );
        escapes += committed.matches(ESCAPED).count();
        assert!(
            !committed.replace(ESCAPED, "").contains("{{"),
            "{file}: a Helm action that is not an escaped `{{`"
        );
        crd.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert("helm.sh/resource-policy".into(), "keep".into());
        assert_eq!(
            committed.replace(ESCAPED, "{{"),
            kaos_api::crd::to_yaml(&crd).expect("CRDs serialize to YAML"),
            "{file}: unescaped, the template is the CRD with the keep annotation"
        );
    }
    assert!(
        escapes > 0,
        "the workflow step's template syntax is escaped"
    );
}
