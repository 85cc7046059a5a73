//! The chart's default rendering (`deploy/`) on a testkit with RBAC, each controller binary run
//! under its chart ServiceAccount with its own token, as the chart deploys them.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Process, Scratch, apply_yaml, binaries, client, serve_testkit, start_program};

/// What a controller logs when it exits because it lost its Lease: kaos_runtime's leader
/// (`lost leadership of lease …: not renewed within …`) and runner (`lost leadership: exiting so
/// a fresh process can campaign again`).
pub const LOST_LEASE: &str = "lost leadership";

/// How many of its last log lines a [`Crash`] keeps.
const CRASH_LOG_LINES: usize = 40;

/// One running controller replica under its chart ServiceAccount.
pub struct Replica {
    pub process: Process,
    /// The controller's ServiceAccount.
    pub service_account: String,
    /// The credential it authenticates with, as the testkit's audit log names it.
    pub client: String,
    program: PathBuf,
    args: Vec<String>,
    kubeconfig: PathBuf,
    env: BTreeMap<String, String>,
    /// Times it was restarted after it lost its Lease.
    pub restarts: usize,
    /// Where it logs (every process of this replica appends), and where the current process's
    /// output starts in it.
    log: PathBuf,
    log_start: u64,
    started_at: Instant,
    /// Killed on purpose ([`Replica::kill`]): left down until [`Replica::start`].
    killed: bool,
    /// How it exited when that was not for a lost Lease: left down, a failure of the test.
    pub crash: Option<Crash>,
}

/// A replica that exited for another reason than a lost Lease (a panic, an error, a signal).
#[derive(Clone)]
pub struct Crash {
    pub replica: String,
    pub status: ExitStatus,
    /// How long the process ran.
    pub ran: Duration,
    /// The last lines it logged (stdout and stderr).
    pub log_tail: String,
}

impl fmt::Display for Crash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} crashed: {} after {:.1?}, not for a lost Lease; the end of its log:\n{}",
            self.replica, self.status, self.ran, self.log_tail
        )
    }
}

impl fmt::Debug for Crash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Every replica left down after a crash ([`ChartCluster::restart_exited`]'s error).
pub struct Crashes(pub Vec<Crash>);

impl fmt::Display for Crashes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} controller replica(s) crashed", self.0.len())?;
        for crash in &self.0 {
            write!(f, "\n--- {crash}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Crashes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for Crashes {}

/// `text` without terminal colour sequences (tracing colours its text logs).
fn strip_ansi(text: &str) -> String {
    let mut plain = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // ESC [ parameters final-byte
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
}

/// The last [`CRASH_LOG_LINES`] lines of a log without the frames of panics' backtraces (with
/// `RUST_BACKTRACE` set they would leave no room for the panic's message).
fn log_tail(logged: &str) -> String {
    let lines: Vec<&str> = logged
        .lines()
        .filter(|line| {
            let trimmed = line.trim_start();
            let frame = trimmed
                .split_once(": ")
                .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            !(frame
                || (trimmed.starts_with("at ") && line.starts_with("   "))
                || trimmed == "stack backtrace:"
                || trimmed.starts_with("note: Some details are omitted"))
        })
        .collect();
    lines[lines.len().saturating_sub(CRASH_LOG_LINES)..].join("\n")
}

impl Replica {
    /// Starts `program` as replica `name`, logging to `<scratch>/<name>.log`.
    #[allow(clippy::too_many_arguments)]
    fn launch(
        scratch: &Scratch,
        name: &str,
        program: &Path,
        args: Vec<String>,
        kubeconfig: PathBuf,
        env: BTreeMap<String, String>,
        service_account: String,
        client: String,
    ) -> Self {
        let log = scratch.0.join(format!("{name}.log"));
        let log_start = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
        let process = start_program(scratch, program, &args, name, &kubeconfig, &env);
        Self {
            process,
            service_account,
            client,
            program: program.to_path_buf(),
            args,
            kubeconfig,
            env,
            restarts: 0,
            log,
            log_start,
            started_at: Instant::now(),
            killed: false,
            crash: None,
        }
    }

    /// Starts it again (after a kill or a crash), appending to its log.
    pub fn start(&mut self, scratch: &Scratch) {
        self.log_start = std::fs::metadata(&self.log).map(|m| m.len()).unwrap_or(0);
        let name = self.process.name.clone();
        self.process = start_program(
            scratch,
            &self.program,
            &self.args,
            &name,
            &self.kubeconfig,
            &self.env,
        );
        self.started_at = Instant::now();
        self.killed = false;
        self.crash = None;
    }

    /// SIGKILL, as when its node dies (no chance to release the Lease). It stays down, and is
    /// not a crash, until [`Replica::start`].
    pub fn kill(&mut self) {
        self.killed = true;
        let _ = self.process.child.kill();
        let _ = self.process.child.wait();
    }

    /// What the current process logged since it started, without colours.
    pub fn log_since_start(&self) -> String {
        let mut text = Vec::new();
        if let Ok(mut file) = std::fs::File::open(&self.log) {
            let _ = file.seek(SeekFrom::Start(self.log_start));
            let _ = file.read_to_end(&mut text);
        }
        strip_ansi(&String::from_utf8_lossy(&text))
    }

    fn note(&self, line: &str) {
        if let Ok(mut file) = std::fs::OpenOptions::new().append(true).open(&self.log) {
            let _ = writeln!(file, "--- the test's supervisor: {line}");
        }
    }

    /// The supervisor's step, as a kubelet that restarts only what lost its Lease: when the
    /// process exited and its log since it started says it lost its Lease, starts it again and
    /// returns true. Any other exit is recorded in [`Replica::crash`] and the replica left down;
    /// a replica killed on purpose, or named in `stopped`, is left down and is no crash.
    pub fn restart_if_lost_lease(&mut self, scratch: &Scratch, stopped: &[String]) -> bool {
        if self.killed || self.crash.is_some() || stopped.contains(&self.process.name) {
            return false;
        }
        let status = match self.process.child.try_wait() {
            Ok(Some(status)) => status,
            _ => return false,
        };
        let ran = self.started_at.elapsed();
        let logged = self.log_since_start();
        if logged.contains(LOST_LEASE) {
            self.note(&format!(
                "{status} after {ran:.1?} (it lost its Lease): started again"
            ));
            self.start(scratch);
            self.restarts += 1;
            return true;
        }
        let log_tail = log_tail(&logged);
        self.note(&format!(
            "{status} after {ran:.1?}, not for a lost Lease: left down"
        ));
        self.crash = Some(Crash {
            replica: self.process.name.clone(),
            status,
            ran,
            log_tail,
        });
        false
    }
}

/// The chart's default rendering (`deploy/`) on a testkit with RBAC, and `replicas` processes of
/// each controller binary, each with its own token for the chart's ServiceAccount.
pub struct ChartCluster {
    pub testkit: Process,
    pub admin: kube::Client,
    pub admin_kubeconfig: PathBuf,
    pub chart: Vec<Value>,
    /// (binary, replicas)
    pub controllers: Vec<(String, Vec<Replica>)>,
}

pub fn documents(path: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(crate::repo_root().join(path)).expect("manifest");
    serde_saphyr::from_multiple::<Value>(&text)
        .expect("YAML")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// The binary a chart Deployment runs: its `app.kubernetes.io/name` (the controller's name),
/// whatever the release prefix and suffix of the Deployment's own name.
pub fn binary_of(deployment: &Value) -> String {
    deployment["metadata"]["labels"]["app.kubernetes.io/name"]
        .as_str()
        .expect("a controller Deployment is labelled app.kubernetes.io/name")
        .to_string()
}

/// The environment the chart gives a controller's pod (its literal values; `start_controller`
/// sets the fieldRefs as the kubelet would), text logs, then `extra_env`.
pub fn chart_env(pod: &Value, extra_env: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = pod["containers"][0]["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            Some((
                e["name"].as_str()?.to_string(),
                e["value"].as_str()?.to_string(),
            ))
        })
        .collect();
    env.insert("LOG_FORMAT".into(), "text".into());
    for (k, v) in extra_env {
        env.insert(k.to_string(), v.to_string());
    }
    env
}

/// A token of a ServiceAccount minted by the testkit: `{"token", "client"}` (the client is how
/// its audit log names the credential).
pub async fn mint_token(admin: &kube::Client, namespace: &str, service_account: &str) -> Value {
    let request = http::Request::post(format!(
        "/kaos-testkit/tokens?namespace={namespace}&serviceAccount={service_account}"
    ))
    .body(Vec::new())
    .expect("request");
    serde_json::from_str(&admin.request_text(request).await.expect("token")).expect("json")
}

impl ChartCluster {
    pub async fn start(
        scratch: &Scratch,
        testkit_flags: &[&str],
        replicas: usize,
        extra_env: &[(&str, &str)],
    ) -> Self {
        let mut flags = vec!["--rbac"];
        flags.extend_from_slice(testkit_flags);
        let (testkit, admin_kubeconfig) = serve_testkit(scratch, &flags);
        let admin = client(&admin_kubeconfig).await;
        let chart = documents("deploy/kaos.yaml");
        apply_yaml(
            &admin,
            &std::fs::read_to_string(crate::repo_root().join("deploy/namespace.yaml"))
                .expect("namespace"),
        )
        .await;
        apply_yaml(
            &admin,
            &std::fs::read_to_string(crate::repo_root().join("deploy/kaos.yaml")).expect("chart"),
        )
        .await;
        let admin_text = std::fs::read_to_string(&admin_kubeconfig).expect("kubeconfig");
        let admin_token = admin_text
            .lines()
            .find_map(|l| l.trim().strip_prefix("token: "))
            .expect("admin token")
            .to_string();
        let mut controllers = Vec::new();
        for deployment in chart.iter().filter(|o| o["kind"] == "Deployment") {
            let binary = binary_of(deployment);
            let pod = &deployment["spec"]["template"]["spec"];
            let service_account = pod["serviceAccountName"]
                .as_str()
                .expect("service account")
                .to_string();
            let env = chart_env(pod, extra_env);
            let mut replicas_of = Vec::new();
            for index in 0..replicas {
                let minted = mint_token(&admin, "kaos-system", &service_account).await;
                let token = minted["token"].as_str().expect("token");
                let kubeconfig = scratch.0.join(format!("{binary}-{index}.kubeconfig"));
                std::fs::write(&kubeconfig, admin_text.replace(&admin_token, token))
                    .expect("kubeconfig");
                replicas_of.push(Replica::launch(
                    scratch,
                    &format!("{binary}-{index}"),
                    &binaries().join(&binary),
                    Vec::new(),
                    kubeconfig,
                    env.clone(),
                    service_account.clone(),
                    minted["client"].as_str().unwrap_or("").to_string(),
                ));
            }
            controllers.push((binary, replicas_of));
        }
        Self {
            testkit,
            admin,
            admin_kubeconfig,
            chart,
            controllers,
        }
    }

    /// Restarts, as a kubelet would, each replica that exited because it lost its Lease (a
    /// controller does, by design); returns how many it restarted. Unlike a kubelet it leaves
    /// down a replica that exited for any other reason (a panic, an error, a signal) and returns
    /// every such crash so far as the error, with its exit status and the end of its log, so a
    /// restart never hides a crash. Replicas killed on purpose ([`Replica::kill`]) or named in
    /// `stopped` stay down and are no crash.
    pub fn restart_exited(
        &mut self,
        scratch: &Scratch,
        stopped: &[String],
    ) -> Result<usize, Crashes> {
        let mut restarted = 0;
        for (_, replicas) in &mut self.controllers {
            for replica in replicas.iter_mut() {
                if replica.restart_if_lost_lease(scratch, stopped) {
                    restarted += 1;
                }
            }
        }
        let crashes: Vec<Crash> = self.crashes().into_iter().cloned().collect();
        if crashes.is_empty() {
            Ok(restarted)
        } else {
            Err(Crashes(crashes))
        }
    }

    /// Every replica left down after a crash.
    pub fn crashes(&self) -> Vec<&Crash> {
        self.controllers
            .iter()
            .flat_map(|(_, replicas)| replicas)
            .filter_map(|r| r.crash.as_ref())
            .collect()
    }

    /// The testkit's audit log.
    pub async fn audit(&self) -> Vec<Value> {
        let request = http::Request::get("/kaos-testkit/audit")
            .body(Vec::new())
            .expect("request");
        serde_json::from_str(&self.admin.request_text(request).await.expect("audit")).expect("json")
    }

    /// Every (user, verb, group, resource, namespace) an RBAC rule allowed.
    pub async fn used_grants(&self) -> Vec<Value> {
        let request = http::Request::get("/kaos-testkit/grants")
            .body(Vec::new())
            .expect("request");
        serde_json::from_str(&self.admin.request_text(request).await.expect("grants"))
            .expect("json")
    }
}

#[cfg(test)]
mod tests {
    //! The supervisor's classification, with a shell command standing in for the controller
    //! binary (no cluster, no build), as tests/control_plane/test_supervisor.py does.

    use super::*;

    /// What a controller logs before it exits when its Lease was not renewed
    /// (kaos_runtime::leader, through the runner).
    const LOSES_ITS_LEASE: &str =
        "echo 'ERROR kaos_runtime::runner: lost leadership of lease kaos-x: not renewed within 2s'";

    /// A replica running `script` under `sh -c`, with `$MARK` a file that exists once it ran.
    fn stand_in(scratch: &Scratch, name: &str, script: &str) -> Replica {
        let mark = scratch.0.join(format!("{name}.mark"));
        let mut env = BTreeMap::new();
        env.insert("MARK".to_string(), mark.display().to_string());
        Replica::launch(
            scratch,
            name,
            Path::new("sh"),
            vec!["-c".into(), script.into()],
            scratch.0.join("kubeconfig"),
            env,
            "kaos-stand-in".into(),
            String::new(),
        )
    }

    /// Waits for the stand-in to exit (it runs for a moment at most).
    fn exited(replica: &mut Replica) {
        replica.process.child.wait().expect("the stand-in exits");
    }

    fn log(scratch: &Scratch, name: &str) -> String {
        std::fs::read_to_string(scratch.0.join(format!("{name}.log"))).expect("log")
    }

    #[test]
    fn a_replica_that_lost_its_lease_is_started_again() {
        let scratch = Scratch::new("harness-lost-lease");
        let script = format!(
            "[ -e \"$MARK\" ] && exec sleep 60; touch \"$MARK\"; {LOSES_ITS_LEASE}; exit 1"
        );
        let mut replica = stand_in(&scratch, "stand-in-0", &script);
        exited(&mut replica);
        assert!(replica.restart_if_lost_lease(&scratch, &[]), "restarted");
        assert_eq!(replica.restarts, 1);
        assert!(replica.crash.is_none());
        assert!(replica.process.is_running(), "the new process runs");
        assert!(
            !replica.restart_if_lost_lease(&scratch, &[]),
            "nothing to do while it runs"
        );
        assert!(
            log(&scratch, "stand-in-0").contains("--- the test's supervisor: exit status: 1 after")
                && log(&scratch, "stand-in-0").contains("(it lost its Lease): started again")
        );
    }

    #[test]
    fn a_replica_that_exits_for_another_reason_is_a_crash_left_down() {
        let scratch = Scratch::new("harness-crash");
        let backtrace =
            "stack backtrace:\n   0: std::panicking::begin_panic\n             at std.rs:1:1\n"
                .repeat(CRASH_LOG_LINES);
        let mut replica = stand_in(
            &scratch,
            "stand-in-0",
            &format!(
                "echo 'thread main panicked at src/reconcile.rs:'; echo 'injected'; \
                 printf '{backtrace}'; exit 101"
            ),
        );
        exited(&mut replica);
        assert!(
            !replica.restart_if_lost_lease(&scratch, &[]),
            "not restarted"
        );
        assert!(!replica.restart_if_lost_lease(&scratch, &[]), "still not");
        assert!(!replica.process.is_running() && replica.restarts == 0);
        let crash = replica.crash.clone().expect("recorded as a crash");
        assert_eq!(crash.status.code(), Some(101));
        assert_eq!(crash.replica, "stand-in-0");
        assert_eq!(
            crash.log_tail, "thread main panicked at src/reconcile.rs:\ninjected",
            "the backtrace's frames are left out"
        );
        let message = crash.to_string();
        assert!(
            message.starts_with("stand-in-0 crashed: exit status: 101 after")
                && message.contains("not for a lost Lease")
                && message.contains("thread main panicked at src/reconcile.rs:\ninjected"),
            "{message}"
        );
        assert!(log(&scratch, "stand-in-0").contains("not for a lost Lease: left down"));
        replica.start(&scratch); // the test may start it again by hand
        assert!(replica.crash.is_none());
    }

    #[test]
    fn a_lost_lease_in_an_earlier_run_does_not_excuse_a_later_crash() {
        let scratch = Scratch::new("harness-later-crash");
        let script = format!(
            "if [ -e \"$MARK\" ]; then echo 'thread main panicked'; exit 101; fi; \
             touch \"$MARK\"; {LOSES_ITS_LEASE}; exit 1"
        );
        let mut replica = stand_in(&scratch, "stand-in-0", &script);
        exited(&mut replica);
        assert!(replica.restart_if_lost_lease(&scratch, &[]));
        exited(&mut replica);
        assert!(!replica.restart_if_lost_lease(&scratch, &[]));
        let crash = replica.crash.as_ref().expect("a crash");
        assert_eq!(crash.status.code(), Some(101));
        assert!(!crash.log_tail.contains(LOST_LEASE), "{crash}");
    }

    #[test]
    fn a_replica_killed_by_a_signal_is_a_crash_with_its_signal() {
        use std::os::unix::process::ExitStatusExt;
        let scratch = Scratch::new("harness-signal");
        let mut replica = stand_in(&scratch, "stand-in-0", "kill -SEGV $$");
        exited(&mut replica);
        assert!(!replica.restart_if_lost_lease(&scratch, &[]));
        let crash = replica.crash.as_ref().expect("a crash");
        assert_eq!(crash.status.signal(), Some(11));
        assert!(
            crash.to_string().contains("signal: 11 (SIGSEGV)"),
            "{crash}"
        );
    }

    #[test]
    fn a_killed_or_stopped_replica_stays_down_and_is_no_crash() {
        let scratch = Scratch::new("harness-killed");
        let mut replica = stand_in(&scratch, "stand-in-0", "exec sleep 60");
        replica.kill();
        assert!(!replica.restart_if_lost_lease(&scratch, &[]));
        assert!(!replica.process.is_running() && replica.crash.is_none());
        replica.start(&scratch);
        assert!(replica.process.is_running());
        // Killed behind the replica's back, but named as stopped by the test.
        let _ = replica.process.child.kill();
        exited(&mut replica);
        let stopped = ["stand-in-0".to_string()];
        assert!(!replica.restart_if_lost_lease(&scratch, &stopped));
        assert!(!replica.process.is_running() && replica.crash.is_none());
        assert_eq!(replica.restarts, 0);
    }
}
