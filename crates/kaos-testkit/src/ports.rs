//! Loopback ports for the processes a test starts.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

/// The lowest port handed out here; below it sit well-known and registered services.
const LOWEST: u16 = 10_000;

/// A loopback TCP port that is free now, for a process the test is about to start.
///
/// Chosen below the kernel's ephemeral range (`ip_local_port_range`): the usual
/// "bind port 0, read the port, close" trick leaves a window, until the process binds, in which
/// any other port-0 bind on the machine (a parallel test's server, a control plane) can be given
/// the same port, and the test then talks to the wrong server. The kernel never hands out a
/// port below that range, and successive calls in one process never return the same port.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let highest = ephemeral_range_start().saturating_sub(1).max(LOWEST + 1);
    let span = u32::from(highest - LOWEST);
    // Parallel test processes start at different places (pid, clock), then walk up.
    let seed = std::process::id().wrapping_mul(2_654_435_761)
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
    let _ = NEXT.compare_exchange(0, seed % span + 1, Ordering::SeqCst, Ordering::SeqCst);
    for _ in 0..span {
        let offset = NEXT.fetch_add(1, Ordering::SeqCst) % span;
        let port = LOWEST + u16::try_from(offset).unwrap_or(0);
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    // Every port below the range is taken: fall back to one the kernel picks.
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("no free loopback port")
}

/// The first port of the kernel's ephemeral range (Linux default 32768).
fn ephemeral_range_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_bindable_and_below_the_ephemeral_range() {
        let ports: Vec<u16> = (0..50).map(|_| free_port()).collect();
        let distinct: std::collections::BTreeSet<_> = ports.iter().collect();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
        for port in ports {
            assert!((LOWEST..ephemeral_range_start()).contains(&port), "{port}");
            TcpListener::bind(("127.0.0.1", port)).expect("the port is free");
        }
    }
}
