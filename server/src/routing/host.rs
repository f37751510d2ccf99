//! Host names as routing compares them: bare hosts and the server's own (see `model::host`), its public host.

pub use crate::model::host::{bare_host, is_server_host};

/// The host of the server's public URL, bare (see [`bare_host`]); `None` unless `url` is an http(s) URL
/// with a host.
pub fn public_host(url: &str) -> Option<String> {
    let url = reqwest::Url::parse(url).ok()?;
    if !matches!(url.scheme(), "http" | "https") {
        return None;
    }
    url.host_str().map(bare_host)
}

/// Whether `url`'s host is a loopback address or `localhost`: reachable from its own machine only.
pub fn is_loopback_url(url: &str) -> bool {
    public_host(url).is_some_and(|host| {
        host == "localhost"
            || host.ends_with(".localhost")
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_urls() {
        for url in [
            "http://127.0.0.1:8080",
            "http://localhost",
            "http://[::1]:9/",
            "http://a.localhost",
        ] {
            assert!(is_loopback_url(url), "{url}");
        }
        for url in [
            "http://10.0.0.1",
            "https://switchyard.example.com",
            "nonsense",
        ] {
            assert!(!is_loopback_url(url), "{url}");
        }
    }

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
