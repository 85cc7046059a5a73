//! The `MemoryStore` kind: a shared memory service (KAOS's kaos-memory, Mem0 over Chroma or
//! pgvector) that agents bind to with `config.memory.memoryStore`.

use k8s_openapi::api::core::v1::SecretKeySelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{DNS_LABEL, MAX_ENV_TEXT, MAX_MODEL_ID, Telemetry, WorkloadStatus};
use crate::modelapi;
use crate::workload::{WorkloadSpec, describe_workload_fields};

/// The longest MemoryStore name: its Deployment and Service `memorystore-<name>` must be a DNS
/// label (63).
pub const MAX_NAME_LENGTH: u32 = 51;

/// The port of the memory service.
pub const PORT: i32 = 8080;

/// Rules on the whole object, the only place a CEL rule can read `metadata.name`.
pub(crate) fn object_rules() -> serde_json::Value {
    serde_json::json!([crate::common::child_name_rule(
        "MemoryStore",
        "memorystore",
        MAX_NAME_LENGTH
    )])
}

/// The short-term compaction marks, as kaos-memory derives them: a mark that is 0 or absent comes
/// from the token budget (trigger = budget, target = budget / 2, at least 1).
const COMPACTION_MARKS_RULE: &str = "((has(self.mediumTerm) && has(self.mediumTerm.compactionTarget) && self.mediumTerm.compactionTarget != 0) ? self.mediumTerm.compactionTarget : (((has(self.shortTerm) && has(self.shortTerm.tokenBudget)) ? self.shortTerm.tokenBudget : 4096) / 2 < 1 ? 1 : ((has(self.shortTerm) && has(self.shortTerm.tokenBudget)) ? self.shortTerm.tokenBudget : 4096) / 2)) < ((has(self.mediumTerm) && has(self.mediumTerm.compactionTrigger) && self.mediumTerm.compactionTrigger != 0) ? self.mediumTerm.compactionTrigger : ((has(self.shortTerm) && has(self.shortTerm.tokenBudget)) ? self.shortTerm.tokenBudget : 4096)) && ((has(self.mediumTerm) && has(self.mediumTerm.compactionTrigger) && self.mediumTerm.compactionTrigger != 0) ? self.mediumTerm.compactionTrigger : ((has(self.shortTerm) && has(self.shortTerm.tokenBudget)) ? self.shortTerm.tokenBudget : 4096)) <= ((has(self.shortTerm) && has(self.shortTerm.tokenBudget)) ? self.shortTerm.tokenBudget : 4096)";

/// The desired state of a MemoryStore.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "kaos.tools",
    version = "v1alpha1",
    kind = "MemoryStore",
    plural = "memorystores",
    singular = "memorystore",
    namespaced,
    doc = "A memory service shared by agents: short-term history, medium-term digests and long-term facts (Mem0 over Chroma or pgvector).",
    status = "MemoryStoreStatus",
    shortname = "memstore",
    shortname = "memstores",
    category = "kaos",
    printcolumn = r#"{"name":"Engine","type":"string","jsonPath":".spec.engine"}"#,
    printcolumn = r#"{"name":"Storage","type":"string","jsonPath":".spec.storage.type"}"#,
    printcolumn = r#"{"name":"Ready","type":"boolean","jsonPath":".status.ready"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.storage.type != 'local' || !has(self.replicas) || self.replicas == 1", "message": "replicas must be 1 in local storage mode", "fieldPath": ".replicas"},
    {"rule": COMPACTION_MARKS_RULE, "message": "short-term compaction marks must satisfy 0 < compactionTarget < compactionTrigger <= tokenBudget (0 or absent marks derive from the token budget)"},
]))]
#[schemars(transform = describe_memorystore_fields)]
pub struct MemoryStoreSpec {
    /// The memory engine; `mem0` is the only one.
    #[serde(default)]
    pub engine: Engine,
    /// Where memories are kept.
    pub storage: Storage,
    /// Number of pods. Unset: 1 for `local` storage (which allows only 1), 2 for `external`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub replicas: Option<i32>,
    /// The models that summarise history and embed memories.
    pub models: Models,
    /// Short-term history (`KAOS_MEMORY_TOKEN_BUDGET`, `KAOS_MEMORY_HARD_EVENT_CAP`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub short_term: Option<ShortTerm>,
    /// Medium-term digests of compacted history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub medium_term: Option<MediumTerm>,
    /// Long-term facts extracted from conversations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub long_term: Option<LongTerm>,
    /// Requests served at once (`KAOS_MEMORY_REQUEST_CONCURRENCY`; service default 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub request_concurrency: Option<i32>,
    /// The widest scope a bound agent may read: an agent's `config.memory.maxReadScope` above it
    /// fails. Unset: `agent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_read_scope: Option<ReadScope>,
    /// What a request does when storage fails, for agents that do not choose
    /// (`KAOS_MEMORY_DEFAULT_FAILURE_MODE`).
    #[serde(default)]
    pub default_failure_mode: FailureMode,
    /// OpenTelemetry settings, merged with the operator's `DEFAULT_TELEMETRY_*` defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<Telemetry>,
    /// `container`, `podSpec`, `gatewayRoute` and `security`.
    #[serde(flatten)]
    pub workload: WorkloadSpec,
}

fn describe_memorystore_fields(schema: &mut schemars::Schema) {
    let container = "Overrides of the generated `memory` container; `env` comes last and wins.";
    describe_workload_fields(schema, container, "memorystore");
}

/// The memory engine.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    #[default]
    Mem0,
}

impl Engine {
    pub fn as_str(self) -> &'static str {
        match self {
            Engine::Mem0 => "mem0",
        }
    }
}

/// Where a MemoryStore keeps memories.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.type != 'external' || has(self.external)", "message": "storage.external is required when storage.type is external"},
]))]
pub struct Storage {
    /// `local`: Chroma and SQLite on a PersistentVolumeClaim, one pod. `external`: pgvector.
    #[serde(rename = "type")]
    pub storage_type: StorageType,
    /// Settings of `local` storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<LocalStorage>,
    /// Settings of `external` storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<ExternalStorage>,
}

/// The kind of storage.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StorageType {
    Local,
    External,
}

impl StorageType {
    pub fn as_str(self) -> &'static str {
        match self {
            StorageType::Local => "local",
            StorageType::External => "external",
        }
    }
}

/// Chroma and SQLite on a PersistentVolumeClaim `memorystore-<name>-data`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalStorage {
    /// The vector store; `chroma` is the only one.
    #[serde(default)]
    pub provider: LocalProvider,
    /// The claim's size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume: Option<PersistentVolume>,
    /// The collection name (`KAOS_MEMORY_LOCAL_COLLECTION`; service default `kaos_memory`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub collection: Option<String>,
}

/// The local vector store.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LocalProvider {
    #[default]
    Chroma,
}

/// The PersistentVolumeClaim of `local` storage.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PersistentVolume {
    /// Requested size, a quantity such as `5Gi`. Set at creation: a claim is not resized.
    #[serde(default = "default_volume_size")]
    #[schemars(pattern(crate::common::QUANTITY), length(max = 64))]
    pub size: String,
}

/// The size of the local storage claim when none is given.
pub const DEFAULT_VOLUME_SIZE: &str = "5Gi";

fn default_volume_size() -> String {
    DEFAULT_VOLUME_SIZE.into()
}

/// pgvector on a PostgreSQL server the store connects to.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalStorage {
    /// The vector store; `pgvector` is the only one.
    #[serde(default)]
    pub provider: ExternalProvider,
    /// The key of a Secret (same namespace) holding the PostgreSQL DSN
    /// (`KAOS_MEMORY_EXTERNAL_DSN`, read from the Secret by the pod).
    pub connection_secret_ref: SecretKeySelector,
    /// Dimensions of the embedding model's vectors (`KAOS_MEMORY_EXTERNAL_DIMS`).
    #[serde(default = "default_embedding_dims")]
    #[schemars(range(min = 1))]
    pub embedding_dims: i32,
    /// The table's collection name (`KAOS_MEMORY_EXTERNAL_COLLECTION`; service default
    /// `kaos_memory`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub collection: Option<String>,
}

fn default_embedding_dims() -> i32 {
    1536
}

/// The external vector store.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ExternalProvider {
    #[default]
    Pgvector,
}

/// The two model roles of a store. Both are called at the summarization ModelAPI's endpoint,
/// which must serve both models; the embedding ModelAPI must be ready too.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Models {
    /// Summarises history into digests (`KAOS_MEMORY_SUMMARIZATION_MODEL`).
    pub summarization: ModelRef,
    /// Embeds memories for recall (`KAOS_MEMORY_EMBEDDING_MODEL`).
    pub embedding: ModelRef,
}

/// A model served by a ModelAPI in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelRef {
    /// The ModelAPI's name.
    #[serde(rename = "modelAPI")]
    #[schemars(length(min = 1, max = modelapi::MAX_NAME_LENGTH), pattern(DNS_LABEL))]
    pub model_api: String,
    /// The model id.
    #[schemars(length(min = 1, max = MAX_MODEL_ID))]
    pub model: String,
}

/// Short-term history of a session.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShortTerm {
    /// Tokens of history kept verbatim (`KAOS_MEMORY_TOKEN_BUDGET`; service default 4096).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub token_budget: Option<i32>,
    /// Events kept per session at most (`KAOS_MEMORY_HARD_EVENT_CAP`; service default 2000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub hard_event_cap: Option<i32>,
}

/// Compaction of short-term history into digests.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MediumTerm {
    /// Summarise instead of dropping (`KAOS_MEMORY_ROLLING_SUMMARY`; service default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Tokens at which history is compacted (`KAOS_MEMORY_COMPACTION_TRIGGER`; 0: the budget).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub compaction_trigger: Option<i32>,
    /// Tokens left after compaction (`KAOS_MEMORY_COMPACTION_TARGET`; 0: half the budget).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub compaction_target: Option<i32>,
    /// Digests kept (`KAOS_MEMORY_DIGEST_RETENTION`; service default 20).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub digest_retention: Option<i32>,
    /// The summariser's instructions (`KAOS_MEMORY_SUMMARIZATION_SYSTEM_PROMPT`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_ENV_TEXT))]
    pub system_prompt: Option<String>,
}

/// Facts extracted from conversations and recalled by similarity.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LongTerm {
    /// `KAOS_MEMORY_LONG_TERM_ENABLED` (service default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Memories recalled per query (`KAOS_MEMORY_DEFAULT_TOP_K`; service default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub default_top_k: Option<i32>,
    /// The lowest similarity recalled, 0 to 1 (`KAOS_MEMORY_SCORE_THRESHOLD`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub score_threshold: Option<f64>,
    /// Re-rank recalled memories (`KAOS_MEMORY_RERANK`; service default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerank: Option<bool>,
    /// Fact extraction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extraction: Option<Extraction>,
}

/// Fact extraction of the long-term tier.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Extraction {
    /// Extractions run at once (`KAOS_MEMORY_EXTRACTION_CONCURRENCY`).
    #[serde(default = "default_extraction_concurrency")]
    #[schemars(range(min = 1))]
    pub concurrency: i32,
    /// Retries of a failed extraction (`KAOS_MEMORY_EXTRACTION_MAX_RETRIES`; service default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_retries: Option<i32>,
    /// The extractor's instructions (`KAOS_MEMORY_EXTRACTION_SYSTEM_PROMPT`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_ENV_TEXT))]
    pub system_prompt: Option<String>,
}

fn default_extraction_concurrency() -> i32 {
    4
}

/// How far memory reads reach, narrowest first.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum ReadScope {
    /// The current session.
    Session,
    /// Every session of the agent.
    Agent,
    /// Everything of the user, across agents (needs user identity at the gateway).
    User,
}

impl ReadScope {
    pub fn as_str(self) -> &'static str {
        match self {
            ReadScope::Session => "session",
            ReadScope::Agent => "agent",
            ReadScope::User => "user",
        }
    }
}

/// What a memory request does when storage fails.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FailureMode {
    /// Carry on without the memory.
    #[default]
    Soft,
    /// Fail the request.
    Strict,
}

impl FailureMode {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureMode::Soft => "soft",
            FailureMode::Strict => "strict",
        }
    }
}

/// The observed state of a MemoryStore: `Pending` until the ModelAPIs are ready and a pod is.
pub type MemoryStoreStatus = WorkloadStatus;

impl MemoryStoreSpec {
    /// Pods to run: the spec's, else 1 for local storage and 2 for external.
    pub fn effective_replicas(&self) -> i32 {
        self.replicas.unwrap_or(match self.storage.storage_type {
            StorageType::Local => 1,
            StorageType::External => 2,
        })
    }

    /// The read ceiling for bound agents.
    pub fn effective_max_read_scope(&self) -> ReadScope {
        self.max_read_scope.unwrap_or(ReadScope::Agent)
    }
}

/// The Service name of a MemoryStore.
pub fn service_name(name: &str) -> String {
    format!("memorystore-{name}")
}

/// The endpoint a MemoryStore publishes, known from its name before it is built.
pub fn endpoint(name: &str, namespace: &str) -> String {
    format!(
        "http://{}.{namespace}.svc.cluster.local:{PORT}",
        service_name(name)
    )
}
