//! `kaosctl migrate --check`, read-only: whether the CRDs belong to the release, the release is
//! deployed, no KAOS operator runs, and every Agent, ModelAPI, MCPServer, MemoryStore,
//! AccessGrant and ThirdPartyService has been reconciled by kaos-rs: its status was written by
//! the kaos-rs controller of its kind (the field manager `kaos-<name>-controller` in
//! `managedFields`) for its current generation (`status.observedGeneration` =
//! `metadata.generation`; for AccessGrants and ThirdPartyServices, whose status has no
//! observedGeneration, that of the condition their controller always writes).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};
use kube::core::DynamicObject;
use serde_json::Value;

use super::{KINDS, Observed, Options, SHOWN, api_failure, kind_api, plural, survey};
use crate::failure::Failure;

/// One finding of `--check`.
#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    pub ok: bool,
    pub what: String,
}

/// `--check`: read-only; every finding, and whether all passed.
pub async fn check(
    client: &kube::Client,
    server: &str,
    options: &Options,
) -> Result<Vec<Finding>, Failure> {
    let survey = survey(client, server, options).await?;
    let (release, namespace) = (&options.release, &options.namespace);
    let mut findings = Vec::new();
    for crd in &survey.crds {
        findings.push(Finding {
            ok: crd.owner.is(release, namespace),
            what: format!("CRD {}: {}", crd.name, crd.owner.describe()),
        });
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let releases = secrets
        .list_metadata(&ListParams::default().labels(&format!("owner=helm,name={release}")))
        .await
        .map_err(|e| {
            api_failure(
                e,
                &format!("list the Helm release Secrets in {namespace}"),
                server,
            )
        })?;
    let deployed = releases.items.iter().find_map(|s| {
        let labels = s.metadata.labels.as_ref()?;
        (labels.get("status").map(String::as_str) == Some("deployed"))
            .then(|| labels.get("version").cloned().unwrap_or_default())
    });
    findings.push(Finding {
        ok: deployed.is_some(),
        what: match deployed {
            Some(version) => {
                format!("Helm release {release} in {namespace}: deployed (revision {version})")
            }
            None => format!("Helm release {release} in {namespace}: not deployed"),
        },
    });
    for op in &survey.operators {
        findings.push(Finding {
            ok: !op.running(),
            what: if op.running() {
                format!(
                    "KAOS operator {}/{}: running, it fights kaos-rs (scale it to 0 or remove it)",
                    op.namespace, op.name
                )
            } else {
                format!(
                    "KAOS operator {}/{}: scaled to 0 (remove it: {})",
                    op.namespace,
                    op.name,
                    op.removal()
                )
            },
        });
    }
    for (kind, _, manager, observed) in KINDS {
        let crd_served = survey.counts.iter().any(|(k, _)| k == kind);
        if !crd_served {
            continue;
        }
        let objects = kind_api(client, kind)
            .list(&ListParams::default())
            .await
            .map_err(|e| api_failure(e, &format!("list the {kind}s"), server))?
            .items;
        let mut behind = BTreeMap::new();
        for object in &objects {
            if let Some(reason) = not_reconciled(object, manager, *observed) {
                let name = format!(
                    "{}/{}",
                    object.metadata.namespace.as_deref().unwrap_or(""),
                    object.metadata.name.as_deref().unwrap_or("")
                );
                behind.insert(name, reason);
            }
        }
        let total = objects.len();
        if behind.is_empty() {
            findings.push(Finding {
                ok: true,
                what: format!(
                    "{}: all reconciled by kaos-rs ({manager})",
                    plural(total, kind)
                ),
            });
        } else {
            let mut what = format!(
                "{}: {} not reconciled by kaos-rs ({manager}) yet:",
                plural(total, kind),
                behind.len()
            );
            for (name, reason) in behind.iter().take(SHOWN) {
                let _ = write!(what, "\n      {name}: {reason}");
            }
            if behind.len() > SHOWN {
                let _ = write!(what, "\n      ... and {} more", behind.len() - SHOWN);
            }
            findings.push(Finding { ok: false, what });
        }
    }
    Ok(findings)
}

/// Why `object` does not show a kaos-rs reconcile of its current generation (None: it does).
pub fn not_reconciled(object: &DynamicObject, manager: &str, observed: Observed) -> Option<String> {
    let ours = object
        .metadata
        .managed_fields
        .as_ref()
        .is_some_and(|fields| fields.iter().any(|f| f.manager.as_deref() == Some(manager)));
    if !ours {
        return Some(format!("its status was never written by {manager}"));
    }
    let generation = object.metadata.generation;
    let (field, observed) = match observed {
        Observed::Status => (
            "status.observedGeneration".to_string(),
            object.data.pointer("/status/observedGeneration"),
        ),
        Observed::Condition(type_) => (
            format!("the observedGeneration of condition {type_}"),
            object
                .data
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|c| c.iter().find(|c| c["type"] == type_))
                .and_then(|c| c.get("observedGeneration")),
        ),
    };
    let observed = observed.and_then(Value::as_i64);
    if observed != generation {
        return Some(format!(
            "{field} {} behind metadata.generation {}",
            observed.map_or("unset".into(), |o| o.to_string()),
            generation.map_or("unset".into(), |g| g.to_string())
        ));
    }
    None
}
