//! The security settings of every pod the controllers generate. By default they meet the
//! `restricted` Pod Security Standard, so agents, LiteLLM, Ollama and MCP servers run in
//! namespaces that enforce it. They are applied to the generated pod before the user's
//! `podSpec` is merged over it, so an override still wins; `--pod-security=baseline` leaves
//! them out for images that cannot run this way (set per controller, so per kind, in the chart).

use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, PodSecurityContext, PodSpec, SeccompProfile,
    SecurityContext, Volume, VolumeMount,
};

/// How far the generated pods are locked down.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PodSecurity {
    /// The `restricted` profile: non-root, no privilege escalation, no capabilities, the
    /// runtime's seccomp profile, a read-only root filesystem with a writable `/tmp`.
    #[default]
    Restricted,
    /// No security context at all (what the image and the namespace's defaults give; meets
    /// `baseline`, which asks for nothing we set).
    Baseline,
}

/// The user and group generated pods run as when the image does not say: the conventional
/// "nonroot" id of distroless images, so root-by-default images still start under
/// `runAsNonRoot`.
pub const NON_ROOT_ID: i64 = 65532;
/// The emptyDir every container gets at `/tmp`, the one path most images write to.
pub const TMP_VOLUME: &str = "tmp";

/// Locks `pod` down to `level`. `token` says whether the pod talks to the Kubernetes API with
/// its ServiceAccount (only then is the token mounted).
pub fn secure_pod(pod: &mut PodSpec, level: PodSecurity, token: bool) {
    pod.automount_service_account_token = Some(token);
    if level == PodSecurity::Baseline {
        return;
    }
    pod.security_context = Some(PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(NON_ROOT_ID),
        run_as_group: Some(NON_ROOT_ID),
        // emptyDir volumes (Ollama's models, /tmp) belong to this group, so they are writable.
        fs_group: Some(NON_ROOT_ID),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            localhost_profile: None,
        }),
        ..pod.security_context.take().unwrap_or_default()
    });
    let containers = pod
        .containers
        .iter_mut()
        .chain(pod.init_containers.iter_mut().flatten());
    for container in containers {
        secure_container(container);
    }
    let volumes = pod.volumes.get_or_insert_with(Vec::new);
    if !volumes.iter().any(|v| v.name == TMP_VOLUME) {
        volumes.push(Volume {
            name: TMP_VOLUME.into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        });
    }
}

fn secure_container(container: &mut Container) {
    container.security_context = Some(SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            add: None,
        }),
        read_only_root_filesystem: Some(true),
        ..container.security_context.take().unwrap_or_default()
    });
    let mounts = container.volume_mounts.get_or_insert_with(Vec::new);
    if !mounts.iter().any(|m| m.mount_path == "/tmp") {
        mounts.push(VolumeMount {
            name: TMP_VOLUME.into(),
            mount_path: "/tmp".into(),
            ..Default::default()
        });
    }
}

/// What the `restricted` Pod Security Standard (v1.33+) refuses in `pod`, one line per problem;
/// empty when it passes. The checks kube-apiserver's Pod Security admission makes.
pub fn restricted_violations(pod: &PodSpec) -> Vec<String> {
    let mut problems = Vec::new();
    let pod_context = pod.security_context.as_ref();
    if pod.host_network == Some(true) || pod.host_pid == Some(true) || pod.host_ipc == Some(true) {
        problems.push("host namespaces are shared".to_string());
    }
    let pod_non_root = pod_context.and_then(|c| c.run_as_non_root);
    let pod_seccomp = pod_context
        .and_then(|c| c.seccomp_profile.as_ref())
        .map(|p| p.type_.as_str());
    if pod_context.and_then(|c| c.run_as_user) == Some(0) {
        problems.push("the pod runs as user 0".to_string());
    }
    for volume in pod.volumes.iter().flatten() {
        if volume.host_path.is_some() {
            problems.push(format!("volume {} is a hostPath", volume.name));
        }
    }
    let containers = pod
        .containers
        .iter()
        .chain(pod.init_containers.iter().flatten());
    for container in containers {
        let name = &container.name;
        let context = container.security_context.as_ref();
        if context.and_then(|c| c.privileged) == Some(true) {
            problems.push(format!("container {name} is privileged"));
        }
        if context.and_then(|c| c.allow_privilege_escalation) != Some(false) {
            problems.push(format!(
                "container {name} does not set allowPrivilegeEscalation: false"
            ));
        }
        let capabilities = context.and_then(|c| c.capabilities.as_ref());
        let drops_all = capabilities
            .and_then(|c| c.drop.as_ref())
            .is_some_and(|d| d.iter().any(|c| c == "ALL"));
        if !drops_all {
            problems.push(format!("container {name} does not drop ALL capabilities"));
        }
        let adds = capabilities
            .and_then(|c| c.add.as_ref())
            .into_iter()
            .flatten();
        for added in adds.filter(|c| *c != "NET_BIND_SERVICE") {
            problems.push(format!("container {name} adds capability {added}"));
        }
        if context.and_then(|c| c.run_as_non_root).or(pod_non_root) != Some(true) {
            problems.push(format!("container {name} does not set runAsNonRoot: true"));
        }
        if context.and_then(|c| c.run_as_user) == Some(0) {
            problems.push(format!("container {name} runs as user 0"));
        }
        let seccomp = context
            .and_then(|c| c.seccomp_profile.as_ref())
            .map(|p| p.type_.as_str())
            .or(pod_seccomp);
        if !matches!(seccomp, Some("RuntimeDefault" | "Localhost")) {
            problems.push(format!(
                "container {name} has no RuntimeDefault or Localhost seccomp profile"
            ));
        }
        for port in container.ports.iter().flatten() {
            if port.host_port.is_some_and(|p| p != 0) {
                problems.push(format!("container {name} uses a hostPort"));
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> PodSpec {
        PodSpec {
            containers: vec![Container {
                name: "main".into(),
                ..Default::default()
            }],
            init_containers: Some(vec![Container {
                name: "init".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    #[test]
    fn a_bare_pod_fails_restricted_and_a_secured_one_passes() {
        let bare = pod();
        assert_eq!(
            restricted_violations(&bare).len(),
            8,
            "{:?}",
            restricted_violations(&bare)
        );
        let mut secured = pod();
        secure_pod(&mut secured, PodSecurity::Restricted, false);
        assert_eq!(restricted_violations(&secured), Vec::<String>::new());
        assert_eq!(secured.automount_service_account_token, Some(false));
        let main = &secured.containers[0];
        assert_eq!(
            main.security_context
                .as_ref()
                .and_then(|c| c.read_only_root_filesystem),
            Some(true)
        );
        assert!(
            main.volume_mounts
                .iter()
                .flatten()
                .any(|m| m.mount_path == "/tmp")
        );
    }

    #[test]
    fn baseline_sets_nothing_but_the_token_choice() {
        let mut relaxed = pod();
        secure_pod(&mut relaxed, PodSecurity::Baseline, true);
        assert_eq!(
            relaxed,
            PodSpec {
                automount_service_account_token: Some(true),
                ..pod()
            }
        );
    }

    #[test]
    fn what_the_image_or_builder_set_is_kept() {
        let mut mine = pod();
        mine.containers[0].security_context = Some(SecurityContext {
            run_as_user: Some(1000),
            ..Default::default()
        });
        mine.containers[0].volume_mounts = Some(vec![VolumeMount {
            name: "scratch".into(),
            mount_path: "/tmp".into(),
            ..Default::default()
        }]);
        secure_pod(&mut mine, PodSecurity::Restricted, false);
        let main = &mine.containers[0];
        assert_eq!(
            main.security_context.as_ref().and_then(|c| c.run_as_user),
            Some(1000)
        );
        assert_eq!(
            main.volume_mounts.as_ref().map(Vec::len),
            Some(1),
            "no second /tmp mount"
        );
    }
}
