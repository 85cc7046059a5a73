//! What a builder asks converge for: the children to apply (each of a known kind) and the
//! names that must be absent, and a workload's usual set of them.

use std::fmt::Debug;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::core::DynamicObject;

use kaos_api::scaling::WorkloadScaling;

/// What the workload's Deployment is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replicas {
    /// Exactly this many (`spec.replicas`), or the API default (1) at creation and then left to
    /// whoever scales the Deployment (None).
    Fixed(Option<i32>),
    /// An autoscaler sets them: the Deployment is created with this many and its replicas are
    /// never compared or changed afterwards.
    Autoscaled { initial: i32 },
}

impl Replicas {
    pub fn of(scaling: &WorkloadScaling) -> Self {
        match &scaling.autoscaling {
            Some(a) => Replicas::Autoscaled { initial: a.min() },
            None => Replicas::Fixed(scaling.replicas),
        }
    }

    /// The replicas the desired Deployment carries: an autoscaled one's are filled in only when
    /// it is written (see `converge`), so they are never part of what is compared.
    pub fn in_spec(self) -> Option<i32> {
        match self {
            Replicas::Fixed(replicas) => replicas,
            Replicas::Autoscaled { .. } => None,
        }
    }
}

/// The kinds of child a workload can have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChildKind {
    Deployment,
    Service,
    ConfigMap,
    Secret,
    HttpRoute,
    PersistentVolumeClaim,
    PodDisruptionBudget,
    HorizontalPodAutoscaler,
    NetworkPolicy,
}

impl ChildKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChildKind::Deployment => "Deployment",
            ChildKind::Service => "Service",
            ChildKind::ConfigMap => "ConfigMap",
            ChildKind::Secret => "Secret",
            ChildKind::HttpRoute => "HTTPRoute",
            ChildKind::PersistentVolumeClaim => "PersistentVolumeClaim",
            ChildKind::PodDisruptionBudget => "PodDisruptionBudget",
            ChildKind::HorizontalPodAutoscaler => "HorizontalPodAutoscaler",
            ChildKind::NetworkPolicy => "NetworkPolicy",
        }
    }

    /// Whether a change of the child's status alone is none of its owner's business (the
    /// autoscaler's and disruption controller's frequent status writes wake no reconcile).
    pub fn status_is_noise(self) -> bool {
        matches!(
            self,
            ChildKind::PodDisruptionBudget | ChildKind::HorizontalPodAutoscaler
        )
    }
}

/// One desired child.
#[derive(Clone, Debug)]
pub enum Child {
    Deployment(Box<Deployment>),
    Service(Box<Service>),
    ConfigMap(Box<ConfigMap>),
    Secret(Box<Secret>),
    HttpRoute(Box<DynamicObject>),
    /// Created once and then left alone (see [`ChildResource::CREATE_ONLY`]).
    PersistentVolumeClaim(Box<PersistentVolumeClaim>),
    PodDisruptionBudget(Box<PodDisruptionBudget>),
    HorizontalPodAutoscaler(Box<HorizontalPodAutoscaler>),
    NetworkPolicy(Box<NetworkPolicy>),
}

impl Child {
    pub fn kind(&self) -> ChildKind {
        match self {
            Child::Deployment(_) => ChildKind::Deployment,
            Child::Service(_) => ChildKind::Service,
            Child::ConfigMap(_) => ChildKind::ConfigMap,
            Child::Secret(_) => ChildKind::Secret,
            Child::HttpRoute(_) => ChildKind::HttpRoute,
            Child::PersistentVolumeClaim(_) => ChildKind::PersistentVolumeClaim,
            Child::PodDisruptionBudget(_) => ChildKind::PodDisruptionBudget,
            Child::HorizontalPodAutoscaler(_) => ChildKind::HorizontalPodAutoscaler,
            Child::NetworkPolicy(_) => ChildKind::NetworkPolicy,
        }
    }
}

/// What a parent's children must be: the ones to apply, in order, and the names that must not
/// exist (a Service after `expose: false`, a ConfigMap after Proxy → Hosted, …).
#[derive(Clone, Debug, Default)]
pub struct ChildSet {
    pub apply: Vec<Child>,
    pub absent: Vec<(ChildKind, String)>,
    /// The Deployment's replicas belong to an autoscaler: they are left out of what is
    /// compared, and a write carries the live value (this initial one at creation), so the
    /// controller never changes them.
    pub autoscaled_replicas: Option<i32>,
}

/// The children every kind's workload has, as its builder produces them.
#[derive(Clone, Debug)]
pub struct WorkloadChildren {
    /// Without replicas when they are autoscaled (see [`ChildSet::autoscaled_replicas`]).
    pub deployment: Deployment,
    /// None when the workload must not be reachable (an Agent with `expose: false`).
    pub service: Option<Service>,
    /// None when the gateway is disabled.
    pub http_route: Option<DynamicObject>,
    /// How many pods: fixed, or an autoscaler's (see `scaling`).
    pub replicas: Replicas,
    /// None when the workload is not autoscaled.
    pub autoscaler: Option<HorizontalPodAutoscaler>,
    /// None when at most one pod can run (or the resource turned it off).
    pub disruption_budget: Option<PodDisruptionBudget>,
    /// None when network policies are off for the workload's namespace.
    pub network_policy: Option<NetworkPolicy>,
}

impl WorkloadChildren {
    /// A Deployment, Service and HTTPRoute with fixed replicas and no other child.
    pub fn plain(
        deployment: Deployment,
        service: Option<Service>,
        http_route: Option<DynamicObject>,
    ) -> Self {
        let replicas = Replicas::Fixed(deployment.spec.as_ref().and_then(|s| s.replicas));
        WorkloadChildren {
            deployment,
            service,
            http_route,
            replicas,
            autoscaler: None,
            disruption_budget: None,
            network_policy: None,
        }
    }

    /// With the NetworkPolicy of the workload (None: it must not have one).
    pub fn fenced(self, network_policy: Option<NetworkPolicy>) -> Self {
        WorkloadChildren {
            network_policy,
            ..self
        }
    }

    /// The set to converge to: the network policy first (pods start fenced), the Deployment,
    /// then the Service, HTTPRoute, autoscaler and disruption budget, each of which shares the
    /// Deployment's name and, when not wanted, must be absent.
    pub fn into_set(self) -> ChildSet {
        let name = self.deployment.name_any();
        let mut set = ChildSet::default();
        let wanted = |child: Option<Child>, kind: ChildKind, set: &mut ChildSet| match child {
            Some(child) => set.apply.push(child),
            None => set.absent.push((kind, name.clone())),
        };
        wanted(
            self.network_policy
                .map(|p| Child::NetworkPolicy(Box::new(p))),
            ChildKind::NetworkPolicy,
            &mut set,
        );
        set.apply.push(Child::Deployment(Box::new(self.deployment)));
        wanted(
            self.service.map(|s| Child::Service(Box::new(s))),
            ChildKind::Service,
            &mut set,
        );
        wanted(
            self.http_route.map(|r| Child::HttpRoute(Box::new(r))),
            ChildKind::HttpRoute,
            &mut set,
        );
        wanted(
            self.autoscaler
                .map(|a| Child::HorizontalPodAutoscaler(Box::new(a))),
            ChildKind::HorizontalPodAutoscaler,
            &mut set,
        );
        wanted(
            self.disruption_budget
                .map(|b| Child::PodDisruptionBudget(Box::new(b))),
            ChildKind::PodDisruptionBudget,
            &mut set,
        );
        if let Replicas::Autoscaled { initial } = self.replicas {
            set.autoscaled_replicas = Some(initial);
        }
        set
    }
}
