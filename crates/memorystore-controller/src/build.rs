//! MemoryStore spec + its model service → the children that serve it: the Deployment, the
//! Service, the data claim of `local` storage, the disruption budget of a store with two pods or
//! more, and the HTTPRoute when the gateway is on. Pure: no IO.

use kaos_api::conditions::NO_IMAGE;
use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::DeploymentStrategy;
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, EnvVarSource, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource, PodSpec, Volume, VolumeMount,
    VolumeResourceRequirements,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kaos_api::memorystore::{
    DEFAULT_VOLUME_SIZE, MemoryStore, MemoryStoreSpec, PORT, StorageType, service_name,
};
use kaos_api::modelapi::ModelAPI;
use kaos_workload::build::container::{
    apply_container_override, env, http_probe, image, merge_telemetry, push_if_set,
    python_otel_env, with_user_env,
};
use kaos_workload::build::network_policy::{self, Target};
use kaos_workload::build::podspec::workload_pod;
use kaos_workload::build::workload::{Workload, owner_of};
use kaos_workload::desired::{Child, WorkloadChildren};
use kube::ResourceExt;
use std::ops::Deref;

use crate::models::{self, ModelService};
use crate::settings::Settings;
pub use kaos_workload::desired::{Desired, Problem};

pub const CONTAINER: &str = "memory";
/// Where `local` storage keeps Chroma and SQLite (`KAOS_MEMORY_LOCAL_PATH`).
pub const DATA_PATH: &str = "/data/memory";
pub const DATA_VOLUME: &str = "data";
/// Selects every child of every MemoryStore (the controller's watch caches).
pub const CHILD_SELECTOR: &str = "app=memorystore";

/// `memorystore-<name>`: the Deployment, Service, disruption budget and HTTPRoute.
pub fn deployment_name(name: &str) -> String {
    service_name(name)
}

/// `memorystore-<name>-data`: the claim of `local` storage.
pub fn claim_name(name: &str) -> String {
    format!("memorystore-{name}-data")
}

pub fn labels(name: &str) -> BTreeMap<String, String> {
    [
        ("app".to_string(), "memorystore".to_string()),
        ("memorystore".to_string(), name.to_string()),
    ]
    .into()
}

/// Where memories are kept: `KAOS_MEMORY_STORAGE_TYPE` and the settings of that storage, the
/// PostgreSQL DSN read by the pod from its Secret (never by us).
fn storage_env(spec: &MemoryStoreSpec) -> Vec<EnvVar> {
    let storage = &spec.storage;
    let mut vars = vec![env(
        "KAOS_MEMORY_STORAGE_TYPE",
        storage.storage_type.as_str(),
    )];
    match storage.storage_type {
        StorageType::Local => {
            vars.push(env("KAOS_MEMORY_LOCAL_PATH", DATA_PATH));
            if let Some(collection) = storage.local.as_ref().and_then(|l| l.collection.as_ref()) {
                vars.push(env("KAOS_MEMORY_LOCAL_COLLECTION", collection.clone()));
            }
        }
        StorageType::External => {
            if let Some(external) = &storage.external {
                vars.push(EnvVar {
                    name: "KAOS_MEMORY_EXTERNAL_DSN".into(),
                    value: None,
                    value_from: Some(EnvVarSource {
                        secret_key_ref: Some(external.connection_secret_ref.clone()),
                        ..Default::default()
                    }),
                });
                vars.push(env(
                    "KAOS_MEMORY_EXTERNAL_DIMS",
                    external.embedding_dims.to_string(),
                ));
                if let Some(collection) = &external.collection {
                    vars.push(env("KAOS_MEMORY_EXTERNAL_COLLECTION", collection.clone()));
                }
            }
        }
    }
    vars
}

/// The models: one base URL for both roles, and the two model ids.
fn model_env(spec: &MemoryStoreSpec, models: &ModelService) -> Vec<EnvVar> {
    vec![
        env("KAOS_MEMORY_MODEL_BASE_URL", models.base_url.clone()),
        env(
            "KAOS_MEMORY_SUMMARIZATION_MODEL",
            spec.models.summarization.model.clone(),
        ),
        env(
            "KAOS_MEMORY_EMBEDDING_MODEL",
            spec.models.embedding.model.clone(),
        ),
    ]
}

/// The tiers, only the fields that are set, in KAOS's order; then the request concurrency and
/// the default failure mode. Numbers print as Go does (`0.4`, `true`).
fn tier_env(spec: &MemoryStoreSpec) -> Vec<EnvVar> {
    let mut vars = Vec::new();
    let text = |t: &Option<String>| t.clone().filter(|t| !t.is_empty());
    if let Some(short) = &spec.short_term {
        push_if_set(&mut vars, "KAOS_MEMORY_TOKEN_BUDGET", short.token_budget);
        push_if_set(
            &mut vars,
            "KAOS_MEMORY_HARD_EVENT_CAP",
            short.hard_event_cap,
        );
    }
    if let Some(medium) = &spec.medium_term {
        push_if_set(&mut vars, "KAOS_MEMORY_ROLLING_SUMMARY", medium.enabled);
        push_if_set(
            &mut vars,
            "KAOS_MEMORY_COMPACTION_TRIGGER",
            medium.compaction_trigger,
        );
        push_if_set(
            &mut vars,
            "KAOS_MEMORY_COMPACTION_TARGET",
            medium.compaction_target,
        );
        push_if_set(
            &mut vars,
            "KAOS_MEMORY_DIGEST_RETENTION",
            medium.digest_retention,
        );
        push_if_set(
            &mut vars,
            "KAOS_MEMORY_SUMMARIZATION_SYSTEM_PROMPT",
            text(&medium.system_prompt),
        );
    }
    if let Some(long) = &spec.long_term {
        push_if_set(&mut vars, "KAOS_MEMORY_LONG_TERM_ENABLED", long.enabled);
        push_if_set(&mut vars, "KAOS_MEMORY_DEFAULT_TOP_K", long.default_top_k);
        push_if_set(
            &mut vars,
            "KAOS_MEMORY_SCORE_THRESHOLD",
            long.score_threshold,
        );
        push_if_set(&mut vars, "KAOS_MEMORY_RERANK", long.rerank);
        if let Some(extraction) = &long.extraction {
            push_if_set(
                &mut vars,
                "KAOS_MEMORY_EXTRACTION_CONCURRENCY",
                Some(extraction.concurrency),
            );
            push_if_set(
                &mut vars,
                "KAOS_MEMORY_EXTRACTION_MAX_RETRIES",
                extraction.max_retries,
            );
            push_if_set(
                &mut vars,
                "KAOS_MEMORY_EXTRACTION_SYSTEM_PROMPT",
                text(&extraction.system_prompt),
            );
        }
    }
    push_if_set(
        &mut vars,
        "KAOS_MEMORY_REQUEST_CONCURRENCY",
        spec.request_concurrency,
    );
    vars.push(env(
        "KAOS_MEMORY_DEFAULT_FAILURE_MODE",
        spec.default_failure_mode.as_str(),
    ));
    vars
}

/// The memory container's environment, in KAOS's order: storage, models, tiers, telemetry,
/// then the user's `container.env` (a name the user sets replaces ours where it stands).
pub fn environment(store: &MemoryStore, models: &ModelService, settings: &Settings) -> Vec<EnvVar> {
    let spec = &store.spec;
    let name = deployment_name(&store.name_any());
    let namespace = store.namespace().unwrap_or_else(|| "default".into());
    let mut generated = storage_env(spec);
    generated.extend(model_env(spec, models));
    generated.extend(tier_env(spec));
    let telemetry = merge_telemetry(spec.telemetry.as_ref(), &settings.data_plane);
    generated.extend(python_otel_env(&name, &namespace, telemetry.as_ref()));
    let at = generated.len();
    with_user_env(generated, spec.workload.user_env(), at)
}

fn claim(store: &MemoryStore, workload: &Workload) -> Result<PersistentVolumeClaim, Problem> {
    let size = store
        .spec
        .storage
        .local
        .as_ref()
        .and_then(|l| l.persistent_volume.as_ref())
        .map(|v| v.size.clone())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| DEFAULT_VOLUME_SIZE.into());
    Ok(PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(claim_name(&store.name_any())),
            namespace: Some(workload.namespace.clone()),
            labels: Some(workload.labels.clone()),
            owner_references: Some(vec![workload.owner.clone()]),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            resources: Some(VolumeResourceRequirements {
                requests: Some([("storage".to_string(), Quantity(size))].into()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    })
}

fn disruption_budget(workload: &Workload) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some(workload.name.clone()),
            namespace: Some(workload.namespace.clone()),
            labels: Some(workload.labels.clone()),
            owner_references: Some(vec![workload.owner.clone()]),
            ..Default::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(workload.labels.clone()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    }
}

/// What `store` should have in the cluster, its model service (its ModelAPIs, found by
/// `model_api`) ready; or why it waits, or can have nothing.
pub fn desired<M: Deref<Target = ModelAPI>>(
    store: &MemoryStore,
    model_api: impl Fn(&str) -> Option<M>,
    settings: &Settings,
) -> Result<Desired, Problem> {
    let models = models::resolve(store, model_api)?;
    built(store, &models, settings)
}

/// [`desired`] once the model service is known.
pub fn built(
    store: &MemoryStore,
    models: &ModelService,
    settings: &Settings,
) -> Result<Desired, Problem> {
    let name = store.name_any();
    let namespace = store.namespace().unwrap_or_else(|| "default".into());
    let spec = &store.spec;
    let user = spec.workload.container.as_ref();
    let image = image(user, settings.default_memory_service_image.as_deref()).ok_or_else(|| {
        Problem::failed(
            NO_IMAGE,
            "no memory service image: set spec.container.image, or DEFAULT_MEMORY_SERVICE_IMAGE \
             on the memorystore-controller (the chart's defaultImages.memoryService)"
                .into(),
        )
    })?;
    let local = spec.storage.storage_type == StorageType::Local;
    let mut container = Container {
        name: CONTAINER.into(),
        image: Some(image),
        ports: Some(vec![ContainerPort {
            container_port: PORT,
            name: Some("http".into()),
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        env: Some(environment(store, models, settings)),
        liveness_probe: Some(http_probe("/healthz", PORT, 10, 15)),
        readiness_probe: Some(http_probe("/readyz", PORT, 5, 10)),
        volume_mounts: local.then(|| {
            vec![VolumeMount {
                name: DATA_VOLUME.into(),
                mount_path: DATA_PATH.into(),
                ..Default::default()
            }]
        }),
        ..Default::default()
    };
    apply_container_override(&mut container, user)?;
    let generated_pod = PodSpec {
        containers: vec![container],
        volumes: local.then(|| {
            vec![Volume {
                name: DATA_VOLUME.into(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: claim_name(&name),
                    read_only: None,
                }),
                ..Default::default()
            }]
        }),
        ..Default::default()
    };
    // The memory service never calls the Kubernetes API: no token.
    let level = settings.data_plane.pod_security;
    let pod = workload_pod(
        generated_pod,
        level,
        false,
        spec.workload.pod_spec.as_deref(),
    )?;
    let workload = Workload {
        name: deployment_name(&name),
        namespace,
        labels: labels(&name),
        owner: owner_of(store),
        port: PORT,
    };
    workload.check_name(&name)?;
    let replicas = spec.effective_replicas();
    let mut deployment = workload.deployment(pod, Some(replicas));
    if local && let Some(deployment_spec) = deployment.spec.as_mut() {
        // One pod owns the claim's Chroma and SQLite files: the old pod stops before the new
        // one starts, so two never write them at once (and a ReadWriteOnce volume never has to
        // attach to two nodes).
        deployment_spec.strategy = Some(DeploymentStrategy {
            type_: Some("Recreate".into()),
            rolling_update: None,
        });
    }
    let policies = &settings.data_plane.network_policy;
    let network_policy = policies.applies_to(&workload.namespace).then(|| {
        let model_apis: Vec<Target> = [&spec.models.summarization, &spec.models.embedding]
            .into_iter()
            .map(|m| Target::any_port(m.model_api.clone()))
            .collect();
        network_policy::memory_store_policy(&workload, &model_apis, !local, policies)
    });
    let timeout = spec.workload.route_timeout();
    let mut desired = Desired::of(
        WorkloadChildren {
            // With two pods or more; absent otherwise, so a drain of a single pod is never
            // blocked.
            disruption_budget: (replicas >= 2).then(|| disruption_budget(&workload)),
            ..WorkloadChildren::plain(
                deployment,
                Some(workload.service()),
                workload.http_route(
                    "memorystore",
                    &name,
                    timeout,
                    &settings.gateway_default_timeout,
                    &settings.gateway,
                ),
            )
        }
        .fenced(network_policy),
        Some(workload.endpoint()),
    );
    // `local` storage's claim first (the pods mount it): created once and never updated, and
    // never deleted by us (the data is the user's).
    if local {
        let claim = claim(store, &workload)?;
        desired.first.apply.push(Child::new(claim));
    }
    Ok(desired)
}
