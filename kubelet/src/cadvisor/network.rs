//! A network namespace's interface counters (cAdvisor's `networkStatsFromProc`): the
//! `/proc/<pid>/net/dev` table of a process in it, without the devices cAdvisor ignores
//! (loopback, and the host ends of container links: `veth*`, `docker*`, `nerdctl*`).

/// One interface's counters.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Interface {
    pub name: String,
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub rx_errors: u64,
    pub rx_dropped: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub tx_errors: u64,
    pub tx_dropped: u64,
}

/// Devices cAdvisor leaves out (`isIgnoredDevice`).
fn ignored(name: &str) -> bool {
    name == "lo"
        || ["veth", "docker", "nerdctl"]
            .iter()
            .any(|p| name.starts_with(p))
}

/// The interfaces of a `/proc/net/dev` table, by name.
pub fn parse_net_dev(table: &str) -> Vec<Interface> {
    let mut out: Vec<Interface> = table
        .lines()
        .skip(2)
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            let name = name.trim();
            let f: Vec<u64> = rest
                .split_whitespace()
                .map(|v| v.parse().unwrap_or(0))
                .collect();
            // rx: bytes packets errs drop fifo frame compressed multicast;
            // tx: bytes packets errs drop fifo colls carrier compressed
            (!ignored(name) && f.len() >= 16).then(|| Interface {
                name: name.to_string(),
                rx_bytes: f[0],
                rx_packets: f[1],
                rx_errors: f[2],
                rx_dropped: f[3],
                tx_bytes: f[8],
                tx_packets: f[9],
                tx_errors: f[10],
                tx_dropped: f[11],
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The interfaces of the network namespace of process `pid` (the host's for `None`).
pub fn interfaces(pid: Option<i64>) -> Vec<Interface> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/net/dev"),
        None => "/proc/net/dev".to_string(),
    };
    std::fs::read_to_string(path)
        .map(|t| parse_net_dev(&t))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_counter_of_the_kept_interfaces_is_read() {
        let table = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     100       1    0    0    0     0          0         0      100       1    0    0    0     0       0          0
vethab12:     1       1    0    0    0     0          0         0        1       1    0    0    0     0       0          0
  eth0:    2048      20    3    4    0     0          0         0     1024      10    5    6    0     0       0          0
";
        assert_eq!(
            parse_net_dev(table),
            [Interface {
                name: "eth0".into(),
                rx_bytes: 2048,
                rx_packets: 20,
                rx_errors: 3,
                rx_dropped: 4,
                tx_bytes: 1024,
                tx_packets: 10,
                tx_errors: 5,
                tx_dropped: 6,
            }]
        );
    }
}
