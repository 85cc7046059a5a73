//! What `kaosctl dev` shows: a row per custom resource with its phase, the runs as they change,
//! the wait for readiness and the final report.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use kaos_api::workflow::AgentWorkflowRunStatus;
use kube::api::{Api, ListParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;

use super::{Dev, KINDS, RUN_KIND, Settled, shown_only};
use crate::workflow::steps_summary;

/// One custom resource as `kaosctl dev` reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// `status.phase`; for the kinds without one, the reason of the condition they settle on.
    pub phase: String,
    pub endpoint: String,
    pub message: String,
    /// For an AgentWorkflowRun, each step's phase: `a Succeeded, b Running`.
    pub steps: String,
    /// Whether [`Dev::wait_ready`] has nothing more to wait for.
    pub settled: bool,
}

fn text(v: &Value, pointer: &str) -> String {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

/// The condition `type_` of an object's status.
fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// A custom resource as a row: its phase, or for the kinds without one the condition it settles
/// on (written for its current generation), with the unresolved references as the message.
fn row(kind: &str, settled: Settled, object: &Value) -> Row {
    let mut steps = String::new();
    let (phase, message, settled) = match settled {
        Settled::WhenReady => {
            let phase = text(object, "/status/phase");
            let ready = phase == "Ready";
            (phase, text(object, "/status/message"), ready)
        }
        Settled::WhenWritten(type_) => {
            let written = condition(object, type_);
            let current = written.is_some_and(|c| {
                c.get("observedGeneration") == object.pointer("/metadata/generation")
            });
            let resolved = condition(object, authz_controller::status::RESOLVED_REFS)
                .filter(|c| c["status"] == "False");
            let message = resolved
                .or(written)
                .map_or("", |c| c["message"].as_str().unwrap_or_default());
            (
                written
                    .map_or("", |c| c["reason"].as_str().unwrap_or_default())
                    .into(),
                message.into(),
                current,
            )
        }
        Settled::WhenTrue(type_) => {
            let current = condition(object, type_)
                .filter(|c| c.get("observedGeneration") == object.pointer("/metadata/generation"));
            let ready = current.is_some_and(|c| c["status"] == "True");
            let phase = match current {
                None => "",
                Some(_) if ready => "Ready",
                Some(c) => c["reason"].as_str().unwrap_or("NotReady"),
            };
            let message = current.map_or("", |c| c["message"].as_str().unwrap_or_default());
            (phase.into(), message.into(), ready)
        }
        Settled::Shown => {
            let status: Option<AgentWorkflowRunStatus> = object
                .get("status")
                .and_then(|s| serde_json::from_value(s.clone()).ok());
            steps = status.as_ref().map(steps_summary).unwrap_or_default();
            let phase = text(object, "/status/phase");
            let phase = if phase.is_empty() {
                "Pending".into()
            } else {
                phase
            };
            (phase, text(object, "/status/message"), true)
        }
    };
    Row {
        kind: kind.to_string(),
        namespace: text(object, "/metadata/namespace"),
        name: text(object, "/metadata/name"),
        phase,
        endpoint: text(object, "/status/endpoint"),
        message,
        steps,
        settled,
    }
}

/// A run in one line: `NAME  PHASE  a Succeeded, b Running`, with the reason when it failed
/// or was canceled.
fn run_line(r: &Row) -> String {
    let mut line = format!("{}  {}", r.name, r.phase);
    if !r.steps.is_empty() {
        line.push_str(&format!("  {}", r.steps));
    }
    if matches!(r.phase.as_str(), "Failed" | "Canceled") && !r.message.is_empty() {
        line.push_str(&format!("  ({})", r.message));
    }
    line
}

/// Follows the runs for `kaosctl dev`'s output: a line for each run that appeared or changed
/// since the last look.
#[derive(Default)]
pub struct RunFollower {
    seen: HashMap<(String, String), String>,
}

impl RunFollower {
    /// `run NAMESPACE/NAME  PHASE  a Succeeded, b Running` for each run new or changed since
    /// the last call (none when the runs cannot be listed now: the next call catches up).
    pub async fn changes(&mut self, dev: &Dev) -> Vec<String> {
        let Ok(rows) = dev.rows().await else {
            return Vec::new();
        };
        let mut lines = Vec::new();
        let mut seen = HashMap::new();
        for r in rows.iter().filter(|r| r.kind == RUN_KIND) {
            let key = (r.namespace.clone(), r.name.clone());
            let line = run_line(r);
            if self.seen.get(&key) != Some(&line) {
                lines.push(format!("run {}/{line}", r.namespace));
            }
            seen.insert(key, line);
        }
        self.seen = seen;
        lines
    }
}

impl Dev {
    /// Every custom resource in the cluster, with its phase.
    pub async fn rows(&self) -> anyhow::Result<Vec<Row>> {
        let mut rows = Vec::new();
        for (_, kind, settled) in KINDS {
            let resource =
                ApiResource::from_gvk(&GroupVersionKind::gvk("kaos.tools", "v1alpha1", kind));
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
            for object in api.list(&ListParams::default()).await?.items {
                rows.push(row(kind, *settled, &serde_json::to_value(object)?));
            }
        }
        Ok(rows)
    }

    /// The children the controllers created: (kind, namespace/name).
    pub async fn children(&self) -> anyhow::Result<Vec<(String, String)>> {
        let mut children = Vec::new();
        let labelled =
            ListParams::default().labels("app in (agent,modelapi,mcpserver,memorystore)");
        for (group, version, kind) in [
            ("", "v1", "ConfigMap"),
            ("apps", "v1", "Deployment"),
            ("", "v1", "Service"),
            ("", "v1", "PersistentVolumeClaim"),
            ("policy", "v1", "PodDisruptionBudget"),
        ] {
            let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
            for object in api.list_metadata(&labelled).await?.items {
                let namespace = object.metadata.namespace.unwrap_or_default();
                let name = object.metadata.name.unwrap_or_default();
                children.push((kind.to_string(), format!("{namespace}/{name}")));
            }
        }
        Ok(children)
    }

    fn tracked(&self, row: &Row) -> bool {
        self.applied.is_empty()
            || self
                .applied
                .contains(&(row.kind.clone(), row.namespace.clone(), row.name.clone()))
    }

    /// Waits until every applied custom resource (every one, if none was applied) has settled
    /// (Ready; AccessGrants and ThirdPartyServices reconciled), printing progress; on timeout
    /// returns those that have not, with their messages.
    pub async fn wait_ready(&self, timeout: Duration, progress: bool) -> Result<(), Vec<Row>> {
        let started = Instant::now();
        let mut last = String::new();
        loop {
            let (line, waiting) = match self.rows().await {
                Ok(rows) => {
                    let rows: Vec<Row> = rows
                        .into_iter()
                        .filter(|r| self.tracked(r) && !shown_only(&r.kind))
                        .collect();
                    let waiting: Vec<Row> = rows.iter().filter(|r| !r.settled).cloned().collect();
                    if waiting.is_empty() && rows.len() >= self.applied.len() {
                        return Ok(());
                    }
                    let first = waiting.first().map(|r| {
                        let phase = if r.phase.is_empty() {
                            "not reconciled yet"
                        } else {
                            &r.phase
                        };
                        format!(" ({} {}: {phase})", r.kind, r.name)
                    });
                    let ready = rows.len() - waiting.len();
                    let line = format!(
                        "waiting: {ready}/{} ready{}",
                        rows.len(),
                        first.unwrap_or_default()
                    );
                    (line, waiting)
                }
                Err(e) => (format!("waiting: cannot list the resources: {e}"), vec![]),
            };
            if started.elapsed() >= timeout {
                return Err(waiting);
            }
            if progress && line != last {
                eprintln!("{line}");
                last = line;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The summary: every custom resource, the runs with their steps, the children, the metrics
    /// URLs, the agent addresses and the kubeconfig.
    pub async fn report(&self) -> String {
        let (runs, rows): (Vec<Row>, Vec<Row>) = self
            .rows()
            .await
            .unwrap_or_default()
            .into_iter()
            .partition(|r| shown_only(&r.kind));
        let width = |f: fn(&Row) -> &str, title: &str| {
            rows.iter()
                .map(|r| f(r).len())
                .max()
                .unwrap_or(0)
                .max(title.len())
        };
        let (wk, wn, wp) = (
            width(|r| &r.kind, "KIND"),
            width(|r| &r.name, "NAME"),
            width(|r| &r.phase, "PHASE"),
        );
        let mut out = format!(
            "{:wk$}  {:wn$}  {:wp$}  ENDPOINT\n",
            "KIND", "NAME", "PHASE"
        );
        for r in &rows {
            let line = format!(
                "{:wk$}  {:wn$}  {:wp$}  {}",
                r.kind, r.name, r.phase, r.endpoint
            );
            // No endpoint (AccessGrants, ThirdPartyServices, what is not Ready): no padding.
            out.push_str(line.trim_end());
            out.push('\n');
        }
        if !runs.is_empty() {
            out.push_str("\nruns:\n");
            for r in &runs {
                out.push_str(&format!("  {}\n", run_line(r)));
            }
        }
        out.push_str("\nchildren:\n");
        for (kind, name) in self.children().await.unwrap_or_default() {
            out.push_str(&format!("  {kind} {name}\n"));
        }
        out.push_str("\nmetrics:\n");
        for (controller, address) in &self.metrics {
            out.push_str(&format!("  {controller}: http://{address}/metrics\n"));
        }
        if !self.agent_addresses.is_empty() {
            out.push_str("\nagent addresses (workflow steps go there):\n");
            for address in &self.agent_addresses {
                out.push_str(&format!("  {address}\n"));
            }
        }
        out.push_str(&format!(
            "\nkubeconfig: {path}\ntry: kubectl --kubeconfig {path} get agents,modelapis,mcpservers,memorystores,accessgrants,thirdpartyservices,agentworkflows,agentworkflowruns\n",
            path = self.kubeconfig.display()
        ));
        out
    }
}
