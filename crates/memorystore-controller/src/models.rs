//! The two ModelAPIs a MemoryStore names, and what of them it reads: a store waits (Pending, no
//! children written) until both exist and are ready, as in KAOS. Pure.

use kaos_api::memorystore::MemoryStore;
use kaos_api::modelapi::ModelAPI;
use kaos_workload::desired::Problem;

/// What a store reads of a ModelAPI: its readiness and endpoint.
pub type ModelApiView = (bool, Option<String>);

pub fn model_api_view(m: &ModelAPI) -> ModelApiView {
    let status = m.status.clone().unwrap_or_default();
    (status.ready, status.endpoint)
}

/// The model service both roles are called at: the summarization ModelAPI's endpoint, which
/// must serve the embedding model too (KAOS's one OpenAI-compatible base URL).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelService {
    /// `<summarization ModelAPI endpoint>/v1`.
    pub base_url: String,
}

pub use kaos_api::conditions::{MODEL_API_NOT_FOUND, MODEL_API_NOT_READY};

/// Resolves the store's ModelAPIs through `lookup` (by name, in the store's namespace):
/// summarization first, then embedding, each found and ready.
pub fn resolve<F, M>(store: &MemoryStore, lookup: F) -> Result<ModelService, Problem>
where
    F: Fn(&str) -> Option<M>,
    M: std::ops::Deref<Target = ModelAPI>,
{
    let models = &store.spec.models;
    let mut endpoint = None;
    for (role, name) in [
        ("summarization", &models.summarization.model_api),
        ("embedding", &models.embedding.model_api),
    ] {
        let Some(model_api) = lookup(name) else {
            return Err(Problem::waiting(
                MODEL_API_NOT_FOUND,
                format!("{role} ModelAPI \"{name}\" not found"),
            ));
        };
        let (ready, published) = model_api_view(&model_api);
        if !ready {
            return Err(Problem::waiting(
                MODEL_API_NOT_READY,
                format!("{role} ModelAPI \"{name}\" is not ready"),
            ));
        }
        endpoint.get_or_insert(published.unwrap_or_default());
    }
    Ok(ModelService {
        base_url: format!("{}/v1", endpoint.unwrap_or_default()),
    })
}
