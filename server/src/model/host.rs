//! Host names as every comparison takes them (requests' `Host`, custom domains, the server's address).

use std::net::IpAddr;

/// A host without port, IPv6 brackets or trailing dot, in lowercase.
pub fn bare_host(host: &str) -> String {
    let h = host.trim();
    let h = match h.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6),
        None => h
            .rsplit_once(':')
            .filter(|(_, p)| p.bytes().all(|b| b.is_ascii_digit()))
            .map_or(h, |(h, _)| h),
    };
    h.trim_end_matches('.').to_ascii_lowercase()
}

/// Whether `host` (bare, see [`bare_host`]) names this server itself: `own` (its public host, bare), an IP
/// address or localhost in any of its forms (see [`LOCALHOST`]). Those never route to an endpoint's custom
/// domain, so no endpoint can take over the API.
pub fn is_server_host(host: &str, own: &str) -> bool {
    host.is_empty()
        || LOCALHOST.contains(&host)
        || host.ends_with(".localhost")
        || host.parse::<IpAddr>().is_ok()
        || host == own
}

/// The loopback's names: RFC 6761's `localhost` (and every name under it, above), and those systems' hosts
/// files give it.
const LOCALHOST: [&str; 8] = [
    "localhost",
    "localhost.localdomain",
    "localhost4",
    "localhost4.localdomain4",
    "localhost6",
    "localhost6.localdomain6",
    "ip6-localhost",
    "ip6-loopback",
];
