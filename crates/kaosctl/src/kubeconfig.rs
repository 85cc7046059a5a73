//! Reaching a cluster from a kubeconfig, as `dev --kubeconfig`, `migrate` and `workflow` do.

use std::path::Path;

use crate::failure::Failure;

/// The client settings of the kubeconfig file at `path` (its current context).
pub async fn read(path: &Path) -> Result<kube::Config, Failure> {
    async {
        let file = kube::config::Kubeconfig::read_from(path)?;
        anyhow::Ok(kube::Config::from_custom_kubeconfig(file, &Default::default()).await?)
    }
    .await
    .map_err(|e| {
        Failure::new(
            e.context(format!("cannot use kubeconfig {}", path.display())),
            "pass a kubeconfig kubectl can use (its current context names the cluster)",
        )
    })
}

/// The client settings of `kubeconfig`, else the inferred ones ($KUBECONFIG, ~/.kube/config,
/// in-cluster); `without_one` says what to do when there are none.
pub async fn read_or_infer(
    kubeconfig: Option<&Path>,
    without_one: &str,
) -> Result<kube::Config, Failure> {
    match kubeconfig {
        Some(path) => read(path).await,
        None => kube::Config::infer().await.map_err(|e| {
            Failure::new(
                anyhow::Error::new(e).context("no kubeconfig found"),
                without_one,
            )
        }),
    }
}

/// A client for `config`, and its API server's URL (without a trailing `/`) to name in
/// messages.
pub fn client(config: kube::Config) -> Result<(kube::Client, String), kube::Error> {
    let server = config
        .cluster_url
        .to_string()
        .trim_end_matches('/')
        .to_string();
    Ok((kube::Client::try_from(config)?, server))
}
