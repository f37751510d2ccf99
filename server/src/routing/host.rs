//! Host names as routing compares them: bare hosts, the server's own names, the host of its public URL.

use std::net::IpAddr;

/// A host as every comparison here takes it: without port, IPv6 brackets or trailing dot, in lowercase.
/// `Host` headers, custom domains and the server's own address all go through it.
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
/// address or localhost. Those never route to an endpoint's custom domain, so no endpoint can take over
/// the API.
pub fn is_server_host(host: &str, own: &str) -> bool {
    host.is_empty()
        || host == "localhost"
        || host.ends_with(".localhost")
        || host.parse::<IpAddr>().is_ok()
        || host == own
}

/// The host of the server's public URL, bare (see [`bare_host`]); `None` unless `url` is an http(s) URL
/// with a host.
pub fn public_host(url: &str) -> Option<String> {
    let url = reqwest::Url::parse(url).ok()?;
    if !matches!(url.scheme(), "http" | "https") {
        return None;
    }
    url.host_str().map(bare_host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_names_itself() {
        let own = public_host("http://Switchyard.example.com.:8080/").unwrap();
        assert_eq!(own, "switchyard.example.com");
        assert_eq!(public_host("https://[::1]/").as_deref(), Some("::1"));
        for not_one in ["switchyard.example.com", "ftp://example.com", "http://"] {
            assert_eq!(public_host(not_one), None, "{not_one}");
        }
        for host in [
            "switchyard.example.com",
            "SWITCHYARD.example.com:8080",
            "switchyard.example.com.",
            "localhost:8080",
            "api.localhost",
            "127.0.0.1:9",
            "[::1]:8080",
            "10.0.0.7",
            "",
        ] {
            assert!(is_server_host(&bare_host(host), &own), "{host}");
        }
        for host in [
            "models.example.com",
            "Models.Example.com.:443",
            "example.com",
        ] {
            assert!(!is_server_host(&bare_host(host), &own), "{host}");
        }
    }
}
