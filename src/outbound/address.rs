//! Which addresses a guest's request may reach: public unicast only, unless the operator
//! allows private networks.
//!
//! Checked on the addresses a name resolves to, never on the name (a granted name that
//! resolves to 127.0.0.1 or 169.254.169.254 is refused), and on every connection the
//! client makes, redirects included, since the check sits in the client's resolver.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Whether requests may reach non-public addresses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum PrivateNetwork {
    /// Loopback, private, link-local, multicast and metadata addresses are refused.
    #[default]
    Refused,
    /// The operator allows them (`--allow-private-network`): for tools that call
    /// services on the same machine or network, and for tests.
    Allowed,
}

/// Why an address may not be reached, or `None` when it may.
pub fn refusal(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_refusal(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return v4_refusal(v4);
            }
            v6_refusal(v6)
        }
    }
}

fn v4_refusal(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    if ip.is_loopback() {
        Some("a loopback address")
    } else if ip == Ipv4Addr::new(169, 254, 169, 254) || ip == Ipv4Addr::new(100, 100, 100, 200) {
        Some("a cloud metadata address")
    } else if ip.is_private() {
        Some("a private address")
    } else if ip.is_link_local() {
        Some("a link-local address")
    } else if ip.is_multicast() || ip.is_broadcast() {
        Some("a multicast or broadcast address")
    } else if ip.is_unspecified() || a == 0 {
        Some("an unspecified address")
    } else if a == 100 && (64..128).contains(&b) {
        Some("a shared (carrier-grade NAT) address")
    } else if a >= 240 || (a == 192 && b == 0 && c == 0) || (a == 198 && (18..20).contains(&b)) {
        Some("a reserved address")
    } else if ip.is_documentation() {
        Some("a documentation address")
    } else {
        None
    }
}

fn v6_refusal(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    if ip.is_loopback() {
        Some("a loopback address")
    } else if ip.is_unspecified() {
        Some("an unspecified address")
    } else if ip == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
        Some("a cloud metadata address")
    } else if ip.is_unique_local() {
        Some("a private (unique local) address")
    } else if ip.is_unicast_link_local() || (first & 0xffc0) == 0xfec0 {
        Some("a link-local address")
    } else if ip.is_multicast() {
        Some("a multicast address")
    } else if let Some(v4) = ip.to_ipv4() {
        // IPv4-compatible and NAT64 forms name an IPv4 host: judge that host.
        v4_refusal(v4)
    } else if first == 0x64 && ip.segments()[1] == 0xff9b {
        let [.., a, b, c, d] = ip.octets();
        v4_refusal(Ipv4Addr::new(a, b, c, d))
    } else if first == 0x2001 && ip.segments()[1] == 0xdb8 {
        Some("a documentation address")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_unicast_addresses_pass() {
        for refused in [
            "127.0.0.1",
            "127.8.9.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "169.254.0.7",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fd00:ec2::254",
            "fc00::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a9fe:a9fe",
        ] {
            let ip: IpAddr = refused.parse().unwrap();
            assert!(refusal(ip).is_some(), "{refused} should be refused");
        }
        for public in [
            "93.184.216.34",
            "1.1.1.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            let ip: IpAddr = public.parse().unwrap();
            assert_eq!(refusal(ip), None, "{public} should pass");
        }
    }
}
