//! IPv4/IPv6 CIDR blocks for endpoint allow lists (`network.cidrList`), parsed once and matched by the proxy.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// A network block: the address with its host bits cleared, and the prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    #[error("`{0}` is not an IPv4 or IPv6 address")]
    Address(String),
    #[error("prefix length `{prefix}` is not a number from 0 to {max}")]
    Prefix { prefix: String, max: u8 },
}

impl Cidr {
    /// Parses `address/prefix`. A bare address is a single host (`/32` or `/128`). Host bits after the prefix
    /// are accepted and cleared (`10.1.2.3/8` is `10.0.0.0/8`), as allow lists are often written that way.
    pub fn parse(text: &str) -> Result<Cidr, CidrError> {
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let address =
            IpAddr::from_str(address).map_err(|_| CidrError::Address(address.to_owned()))?;
        let max = max_prefix(address);
        let prefix = match prefix {
            None => max,
            Some(p) => parse_prefix(p, max)?,
        };
        Ok(Cidr {
            network: mask(address, prefix),
            prefix,
        })
    }

    /// Whether `ip` lies in this block. An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, what a dual-stack
    /// listener reports for IPv4 peers) is matched as the IPv4 address it carries.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match (self.network, ip) {
            (IpAddr::V4(_), IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => return false,
            },
            _ => ip,
        };
        ip.is_ipv4() == self.network.is_ipv4() && mask(ip, self.prefix) == self.network
    }

    pub fn network(&self) -> IpAddr {
        self.network
    }

    pub fn prefix_len(&self) -> u8 {
        self.prefix
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Cidr::parse(s)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

fn max_prefix(address: IpAddr) -> u8 {
    match address {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

/// Digits only: `u8::from_str` would also take `+8`.
fn parse_prefix(text: &str, max: u8) -> Result<u8, CidrError> {
    let error = || CidrError::Prefix {
        prefix: text.to_owned(),
        max,
    };
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(error());
    }
    match text.parse::<u8>() {
        Ok(p) if p <= max => Ok(p),
        _ => Err(error()),
    }
}

fn mask(address: IpAddr, prefix: u8) -> IpAddr {
    match address {
        IpAddr::V4(a) => {
            let bits = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & bits))
        }
        IpAddr::V6(a) => {
            let bits = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & bits))
        }
    }
}

/// The caller's address: `peer`, or, when `peer` is one of the `trusted` proxies, the last hop of
/// `X-Forwarded-For` (the values of its fields, in order) that is not one of them. From the right, each
/// trusted hop vouches for the one before it; a hop that does not parse ends the walk, so nothing an
/// attacker wrote further left is believed.
pub fn client_ip<'v>(
    peer: std::net::IpAddr,
    forwarded: impl Iterator<Item = &'v [u8]>,
    trusted: &[Cidr],
) -> std::net::IpAddr {
    let is_trusted = |ip: std::net::IpAddr| trusted.iter().any(|c| c.contains(ip));
    let mut client = peer;
    if !is_trusted(client) {
        return client;
    }
    let hops: Vec<&str> = forwarded
        .filter_map(|v| std::str::from_utf8(v).ok())
        .flat_map(|v| v.split(','))
        .collect();
    for hop in hops.iter().rev() {
        match hop.trim().parse::<std::net::IpAddr>() {
            Ok(ip) => {
                client = ip;
                if !is_trusted(ip) {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    client
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn parses_v4_v6_and_bare_addresses() {
        assert_eq!(Cidr::parse("10.0.0.0/8").unwrap().to_string(), "10.0.0.0/8");
        assert_eq!(Cidr::parse("10.1.2.3/8").unwrap().to_string(), "10.0.0.0/8");
        assert_eq!(
            Cidr::parse("192.168.1.7").unwrap().to_string(),
            "192.168.1.7/32"
        );
        assert_eq!(
            Cidr::parse("2001:db8::1/32").unwrap().to_string(),
            "2001:db8::/32"
        );
        assert_eq!(Cidr::parse("::1").unwrap().prefix_len(), 128);
        assert_eq!(Cidr::parse("0.0.0.0/0").unwrap().to_string(), "0.0.0.0/0");
    }

    #[test]
    fn rejects_bad_addresses_and_prefixes() {
        for bad in [
            "",
            "10.0.0.0/33",
            "::/129",
            "10.0.0/8",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "10.0.0.0/-1",
            "example.com/8",
            "10.0.0.0/8/8",
            " 10.0.0.0/8",
        ] {
            assert!(Cidr::parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn contains_matches_within_the_prefix() {
        let net = Cidr::parse("10.0.0.0/8").unwrap();
        assert!(net.contains(ip("10.255.0.1")));
        assert!(!net.contains(ip("11.0.0.1")));
        assert!(!net.contains(ip("::1")));
        assert!(
            net.contains(ip("::ffff:10.1.1.1")),
            "IPv4-mapped peers match IPv4 blocks"
        );

        let all = Cidr::parse("0.0.0.0/0").unwrap();
        assert!(all.contains(ip("203.0.113.9")));

        let v6 = Cidr::parse("2001:db8::/32").unwrap();
        assert!(v6.contains(ip("2001:db8:ffff::1")));
        assert!(!v6.contains(ip("2001:db9::1")));
        assert!(!v6.contains(ip("10.0.0.1")));

        let host = Cidr::parse("192.168.1.7").unwrap();
        assert!(host.contains(ip("192.168.1.7")));
        assert!(!host.contains(ip("192.168.1.8")));
    }
}
