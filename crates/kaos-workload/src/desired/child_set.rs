//! What a builder asks converge for: the children to apply (each of a known kind) and the
//! names that must be absent, and a workload's usual set of them.

use std::any::Any;
use std::fmt::Debug;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::core::DynamicObject;
use serde::Serialize;

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

/// The kind of a child, as the write memory, converge's messages and the builders' absent
/// names know it. Every kind is a row of converge's child-kind table (`converge/child_kinds.rs`),
/// the one place that makes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChildKind {
    name: &'static str,
    status_is_noise: bool,
}

impl ChildKind {
    /// Made by the child-kind table only, so every kind converge meets is one it can write.
    pub(crate) const fn new(name: &'static str, status_is_noise: bool) -> Self {
        Self {
            name,
            status_is_noise,
        }
    }

    pub fn as_str(self) -> &'static str {
        self.name
    }

    /// Whether a change of the child's status alone is none of its owner's business (the
    /// autoscaler's and disruption controller's frequent status writes wake no reconcile).
    pub fn status_is_noise(self) -> bool {
        self.status_is_noise
    }
}

/// A type a builder can ask converge for: exactly the rows of converge's child-kind table
/// (sealed: only that table implements it, so converge can write every [`Child`]).
pub trait ChildType: Sealed + Clone + Debug + Serialize + Send + Sync + 'static {
    const KIND: ChildKind;
}

/// Implemented by the child-kind table alone.
pub trait Sealed {}

/// One desired child, of any [`ChildType`].
#[derive(Debug)]
pub struct Child {
    kind: ChildKind,
    object: Box<dyn Erased>,
}

impl Child {
    pub fn new<T: ChildType>(object: T) -> Self {
        Self {
            kind: T::KIND,
            object: Box::new(object),
        }
    }

    pub fn kind(&self) -> ChildKind {
        self.kind
    }

    /// The object, if it is a `T`.
    pub fn get<T: ChildType>(&self) -> Option<&T> {
        self.object.as_any().downcast_ref()
    }

    pub fn get_mut<T: ChildType>(&mut self) -> Option<&mut T> {
        self.object.as_any_mut().downcast_mut()
    }

    /// The object if it is a `T`, else the child back.
    pub fn take<T: ChildType>(self) -> Result<T, Self> {
        if self.object.as_any().is::<T>() {
            let object = self.object.into_any().downcast::<T>();
            Ok(*object.expect("the type was just checked"))
        } else {
            Err(self)
        }
    }

    /// The object as the API server would receive it.
    pub fn to_json(&self) -> serde_json::Result<serde_json::Value> {
        self.object.to_json()
    }
}

impl Clone for Child {
    fn clone(&self) -> Self {
        Self {
            kind: self.kind,
            object: self.object.clone_box(),
        }
    }
}

/// A [`ChildType`] behind a box: what [`Child`] needs of it whatever its type.
trait Erased: Any + Debug + Send + Sync {
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
    fn clone_box(&self) -> Box<dyn Erased>;
    fn to_json(&self) -> serde_json::Result<serde_json::Value>;
}

impl<T: ChildType> Erased for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
    fn clone_box(&self) -> Box<dyn Erased> {
        Box::new(self.clone())
    }
    fn to_json(&self) -> serde_json::Result<serde_json::Value> {
        serde_json::to_value(self)
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

impl ChildSet {
    /// `child` applied when some, else the `T` named `name` absent.
    pub fn wanted<T: ChildType>(&mut self, child: Option<T>, name: &str) {
        match child {
            Some(child) => self.apply.push(Child::new(child)),
            None => self.absent.push((T::KIND, name.to_string())),
        }
    }
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
        set.wanted(self.network_policy, &name);
        set.apply.push(Child::new(self.deployment));
        set.wanted(self.service, &name);
        set.wanted(self.http_route, &name);
        set.wanted(self.autoscaler, &name);
        set.wanted(self.disruption_budget, &name);
        if let Replicas::Autoscaled { initial } = self.replicas {
            set.autoscaled_replicas = Some(initial);
        }
        set
    }
}
