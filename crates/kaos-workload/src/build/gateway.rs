//! The Gateway API: whether the controllers create HTTPRoutes and which Gateway they attach to
//! (`docs/contract.md` §3), and the HTTPRoute resource.

use clap::{ArgAction, Args};
use kube::core::{ApiResource, GroupVersionKind};

/// Gateway API settings (every workload controller creates HTTPRoutes).
#[derive(Args, Clone, Debug, Default, PartialEq)]
pub struct GatewayArgs {
    /// Create an HTTPRoute per resource.
    #[arg(long, env = "GATEWAY_API_ENABLED", default_value_t = false, action = ArgAction::Set)]
    pub gateway_api_enabled: bool,
    /// The Gateway the routes attach to.
    #[arg(long, env = "GATEWAY_NAME")]
    pub gateway_name: Option<String>,
    /// Namespace of that Gateway (default: the route's namespace).
    #[arg(long, env = "GATEWAY_NAMESPACE")]
    pub gateway_namespace: Option<String>,
}

/// `gateway.networking.k8s.io/v1` HTTPRoute.
pub fn http_route_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "gateway.networking.k8s.io",
        "v1",
        "HTTPRoute",
    ))
}
