//! Two replicas per controller: readiness, convergence of the examples, a pair and a mesh,
//! quiet leaders, failover by kill and by SIGTERM, metrics on the leader only.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_per_controller_converge_hand_over_and_count_on_the_leader_only() {
    let scratch = Scratch::new("replicas");
    let (_testkit, kubeconfig) = serve_testkit(&scratch, &[]);
    let client = client(&kubeconfig).await;
    let registry: String = mcpserver_registry();
    apply_yaml(
        &client,
        &format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: kaos-system}}\n---\n{registry}"
        ),
    )
    .await;

    let env = settings();
    let mut pairs: Vec<Pair> = [
        ("agent-controller", "kaos-agent-controller", "agent"),
        (
            "modelapi-controller",
            "kaos-modelapi-controller",
            "modelapi",
        ),
        (
            "mcpserver-controller",
            "kaos-mcpserver-controller",
            "mcpserver",
        ),
        (
            "memorystore-controller",
            "kaos-memorystore-controller",
            "memorystore",
        ),
        ("authz-controller", "kaos-authz-controller", "authz"),
        (
            "workflow-controller",
            "kaos-workflow-controller",
            "workflow",
        ),
    ]
    .into_iter()
    .map(|(binary, lease, controller)| Pair {
        binary,
        lease,
        controller,
        processes: ["a", "b"]
            .iter()
            .map(|r| {
                start_controller(
                    &scratch,
                    binary,
                    &format!("{controller}-{r}"),
                    &kubeconfig,
                    &env,
                )
            })
            .collect(),
    })
    .collect();

    // Every replica is ready once its caches have synced, whether it leads or not.
    for process in pairs.iter().flat_map(|p| &p.processes) {
        let started = Instant::now();
        loop {
            let ready = http_get(process.probe_port, "/readyz")
                .await
                .map(|(c, _)| c);
            let live = http_get(process.probe_port, "/healthz")
                .await
                .map(|(c, _)| c);
            if ready == Some(200) && live == Some(200) {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{} not ready: /readyz {ready:?}, /healthz {live:?}",
                process.name
            );
            tokio::time::sleep(POLL).await;
        }
    }

    apply_yaml(&client, &peer_shapes()).await;
    apply_yaml(&client, EXAMPLE_CREDENTIALS).await;
    // Every example, each resource of which must reach Ready.
    for example in example_files() {
        apply_yaml(&client, &std::fs::read_to_string(example).expect("example")).await;
    }
    apply_yaml(&client, ACCESS).await;
    apply_yaml(&client, BUDGETED).await;
    let started = Instant::now();
    loop {
        match all_ready(&client).await {
            Ok(()) => break,
            Err(waiting) if started.elapsed() > Duration::from_secs(60) => panic!(
                "not Ready after 60 s: {waiting}\nlogs in {}",
                scratch.0.display()
            ),
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }

    // Only the leaders reconciled.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kaos-system");
    let mut leaders = Vec::new();
    let mut leaders_export = BTreeSet::new();
    for pair in &pairs {
        let (leader, _) = leader_of(&leases, pair, None).await;
        for (i, process) in pair.processes.iter().enumerate() {
            let metrics = scrape(process.metrics_port).await;
            if i == leader {
                leaders_export.extend(exported_series(&metrics));
            }
            // Reconciles that ended well: done, or to look again at a set time (a workflow with a
            // schedule always asks to be woken at its next fire).
            let success =
                reconciles_ending(&metrics, pair.controller, &["success", "requeue_after"]);
            let leading = sample(
                &metrics,
                &format!("leader_election_master_status{{name=\"{}\"}}", pair.lease),
            );
            let queue = |family: &str| {
                sample(
                    &metrics,
                    &format!(
                        "{family}{{name=\"{0}\",controller=\"{0}\"}}",
                        pair.controller
                    ),
                )
            };
            let adds = queue("workqueue_adds_total");
            let waited = queue("workqueue_queue_duration_seconds_count");
            let worked = queue("workqueue_work_duration_seconds_count");
            if i == leader {
                assert!(
                    success > 0.0,
                    "{} leads but counted no reconcile",
                    process.name
                );
                assert_eq!(leading, 1.0, "{} reports it leads", process.name);
                // Every reconcile was queued first: a trigger's add or a requeue come due.
                assert!(
                    waited > 0.0 && adds >= waited && worked >= success,
                    "{}: adds {adds}, queue durations {waited}, work durations {worked}, successes {success}",
                    process.name
                );
                let queued_sum = queue("workqueue_queue_duration_seconds_sum");
                assert!(
                    queued_sum / waited < 10.0,
                    "{}: objects waited {}s on average",
                    process.name,
                    queued_sum / waited
                );
                assert!(
                    metrics.contains("kaos_resources{kind="),
                    "the leader {} exports kaos_resources",
                    process.name
                );
            } else {
                assert_eq!(success, 0.0, "standby {} reconciled", process.name);
                assert_eq!(leading, 0.0);
                assert_eq!(
                    (adds, worked),
                    (0.0, 0.0),
                    "standby {} queued",
                    process.name
                );
                assert!(
                    !metrics.contains("kaos_resources{"),
                    "standby {} exports kaos_resources (alerts would count them twice)",
                    process.name
                );
            }
            for family in [
                "workqueue_depth",
                "workqueue_retries_total",
                "workqueue_unfinished_work_seconds",
                "workqueue_longest_running_processor_seconds",
            ] {
                assert!(
                    metrics.contains(&format!("{family}{{name=\"{}\"", pair.controller)),
                    "{} exports no {family}",
                    process.name
                );
            }
        }
        leaders.push(leader);
    }

    // The chart's dashboards and alerts query only what the controllers export.
    let queried = charted_metrics();
    assert!(queried.len() > 10, "{queried:?}");
    let missing: Vec<_> = queried.difference(&leaders_export).collect();
    assert!(
        missing.is_empty(),
        "the dashboards or alerts query series no controller exports: {missing:?}"
    );

    // Converged: the leaders go quiet, peer cycles included.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = reconciles_of(&pairs).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        reconciles_of(&pairs).await,
        before,
        "reconciles in a 5 s idle window"
    );
    // Converged: nothing waits in any queue and nothing runs.
    for pair in &pairs {
        for process in &pair.processes {
            let metrics = scrape(process.metrics_port).await;
            for family in ["workqueue_depth", "workqueue_unfinished_work_seconds"] {
                let value = sample(&metrics, &format!("{family}{{name=\"{}\"", pair.controller));
                assert_eq!(value, 0.0, "{} {family} when idle", process.name);
            }
        }
    }

    // Kill every leader; each standby takes over and reconciles a new change within the lease.
    let holders: Vec<Option<String>> = {
        let mut holders = Vec::new();
        for pair in &pairs {
            holders.push(lease_holder(&leases, pair.lease).await);
        }
        holders
    };
    for (pair, leader) in pairs.iter_mut().zip(&leaders) {
        let _ = pair.processes[*leader].child.kill();
    }
    let killed = Instant::now();
    let agents: Api<Agent> = Api::default_namespaced(client.clone());
    let was_ready: Vec<String> = agents
        .list(&Default::default())
        .await
        .expect("agents")
        .items
        .into_iter()
        .filter(|a| a.status.as_ref().is_some_and(|s| s.ready))
        .filter_map(|a| a.metadata.name)
        .filter(|n| n != "worker")
        .collect();
    let model_apis: Api<ModelAPI> = Api::default_namespaced(client.clone());
    let servers: Api<MCPServer> = Api::default_namespaced(client.clone());
    let stores: Api<MemoryStore> = Api::default_namespaced(client.clone());
    let grants = kind_api(&client, "AccessGrant");
    let change = PatchParams::default();
    agents
        .patch(
            "worker",
            &change,
            &Patch::Merge(
                serde_json::json!({"spec": {"config": {"instructions": "after failover"}}}),
            ),
        )
        .await
        .expect("patch");
    model_apis
        .patch(
            "llm-proxy",
            &change,
            &Patch::Merge(
                serde_json::json!({"spec": {"proxyConfig": {"models": ["openai/*", "gpt-4.1"]}}}),
            ),
        )
        .await
        .expect("patch");
    servers
        .patch(
            "echo-tools",
            &change,
            &Patch::Merge(serde_json::json!({"spec": {"params": "def echo(t): return t"}})),
        )
        .await
        .expect("patch");
    stores
        .patch(
            "support-memory",
            &change,
            &Patch::Merge(serde_json::json!({"spec": {"shortTerm": {"tokenBudget": 8192}}})),
        )
        .await
        .expect("patch");
    grants
        .patch(
            "researchers",
            &change,
            &Patch::Merge(
                serde_json::json!({"spec": {"subjects": [{"kind": "Group", "name": "analysts"}]}}),
            ),
        )
        .await
        .expect("patch");
    loop {
        for agent in agents.list(&Default::default()).await.expect("agents") {
            let name = agent.metadata.name.clone().unwrap_or_default();
            assert!(
                !was_ready.contains(&name) || agent.status.as_ref().is_some_and(|s| s.ready),
                "{name} left Ready during the failover: {:?}",
                agent.status
            );
        }
        let a = observed_generation(&agents, "worker").await;
        let m = observed_generation(&model_apis, "llm-proxy").await;
        let s = observed_generation(&servers, "echo-tools").await;
        let st = observed_generation(&stores, "support-memory").await;
        let g = condition_generation(&grants, "researchers", "Enforced").await;
        if [a, m, s, st, g]
            .iter()
            .all(|(generation, observed)| generation.is_some() && generation == observed)
        {
            break;
        }
        assert!(
            killed.elapsed() < LEASE_DURATION + Duration::from_secs(5),
            "the standbys did not reconcile the change in time: {a:?} {m:?} {s:?} {st:?} {g:?}"
        );
        tokio::time::sleep(POLL).await;
    }
    for ((pair, holder), killed_leader) in pairs.iter().zip(&holders).zip(&leaders) {
        let (new_leader, _) = leader_of(&leases, pair, holder.as_deref()).await;
        assert_ne!(
            new_leader, *killed_leader,
            "{}: the standby took over",
            pair.lease
        );
    }

    // SIGTERM the new agent leader with a fresh standby started: the lease moves in about a second.
    let agent_pair = &mut pairs[0];
    let standby_name = "agent-c";
    agent_pair.processes.push(start_controller(
        &scratch,
        agent_pair.binary,
        standby_name,
        &kubeconfig,
        &env,
    ));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (leader, _) = leader_of(&leases, agent_pair, None).await;
    let holder = lease_holder(&leases, agent_pair.lease).await;
    let terminated = Instant::now();
    agent_pair.processes[leader].sigterm();
    let (new_leader, _) = leader_of(&leases, agent_pair, holder.as_deref()).await;
    let handover = terminated.elapsed();
    assert_eq!(agent_pair.processes[new_leader].name, standby_name);
    assert!(
        handover < Duration::from_millis(1500),
        "handover took {handover:?}"
    );
    let exited = Instant::now();
    while agent_pair.processes[leader].is_running() {
        assert!(
            exited.elapsed() < Duration::from_secs(5),
            "the terminated leader did not exit"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = agent_pair.processes[leader].child.try_wait().ok().flatten();
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "SIGTERM is a clean exit"
    );
}
