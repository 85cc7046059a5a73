//! Real components the tests run as local processes: the Python tools of `scripts/python-tool`
//! (the agent runtime and FastMCP, the LiteLLM proxy), on free loopback ports, stopped (and their
//! scratch directory removed) when dropped. A missing tool fails the test with how to get it; it
//! never skips.

use std::path::PathBuf;
use std::process::{Child, Command};

use crate::repo_root;

/// `scripts/python-tool TOOL ARGS...`: the path it prints (a venv's python or one of its
/// scripts), the venv made if missing.
pub fn python_tool(tool: &str, args: &[&str]) -> String {
    let out = Command::new(repo_root().join("scripts/python-tool"))
        .arg(tool)
        .args(args)
        .output()
        .expect("scripts/python-tool runs");
    assert!(
        out.status.success(),
        "scripts/python-tool {tool} is needed (docs/testing.md): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("a path")
        .trim()
        .to_string()
}

/// A loopback port nothing listens on (yet).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").port()
}

/// A started process and its scratch directory: killed, waited for and removed when dropped.
pub struct LocalProcess(pub Child, pub PathBuf);

impl Drop for LocalProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}
