//! The one HTTP client for requests the server makes to the outside (client metadata documents, CI issuers'
//! discovery and keys, webhook deliveries), guarded against server-side request forgery.
//!
//! It never connects to a special-use address (loopback, private, link-local, … as the IANA special-purpose
//! registries list them, with multicast and the reserved blocks) unless `[outbound] allow` lets that block
//! through. The check is made on the addresses actually connected to: names go through [`GuardedResolver`],
//! which drops refused addresses from every answer, so a name that answers with a public address first and a
//! private one later (DNS rebinding) still never reaches the private one; IP-literal hosts, which the HTTP
//! client connects to without resolving, are checked here before anything is sent. Redirects are never
//! followed (a 3xx is an error the caller sees), bodies are capped while they stream, and every request has a
//! connect timeout and a total one.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, LOCATION};
use reqwest::{Method, StatusCode, Url};

use crate::config::OutboundConfig;
use crate::model::Cidr;

/// Why an outbound request failed. The messages are safe to show to the user who gave the URL: they
/// name the host and what went wrong, never an address a name resolved to; the fields and the source
/// chain carry the rest, for logs.
#[derive(Debug, thiserror::Error)]
pub enum OutboundError {
    #[error("not a valid URL: {0}")]
    BadUrl(String),
    #[error("URL scheme `{0}` is not allowed (only https and http)")]
    Scheme(String),
    #[error("the URL has no host")]
    NoHost,
    /// The host is, or only resolves to, special-use addresses; `address` is the first one refused.
    #[error("{host} is or resolves to a {range} address, which is not fetched from")]
    Refused {
        host: String,
        address: IpAddr,
        range: &'static str,
    },
    #[error("{host} does not resolve: {message}")]
    Resolve { host: String, message: String },
    #[error("could not connect to {host}")]
    Connect {
        host: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{host} did not answer in time")]
    Timeout { host: String },
    /// Redirects are not followed: the answer was a 3xx.
    #[error("{host} answered with a redirect ({status}), which is not followed")]
    Redirected {
        host: String,
        status: StatusCode,
        location: Option<String>,
    },
    #[error("the response from {host} is larger than {limit} bytes")]
    TooLarge { host: String, limit: usize },
    /// What a download was written to failed (a full disk).
    #[error("writing what {host} sent: {message}")]
    Sink { host: String, message: String },
    #[error("the request to {host} failed")]
    Http {
        host: String,
        #[source]
        source: reqwest::Error,
    },
}

/// Redirects a download follows (the hub sends its large files from a CDN).
pub const MAX_REDIRECTS: usize = 5;

/// How one request is made.
#[derive(Debug, Clone)]
pub struct FetchOptions {
    /// For each connection attempt (after the name is resolved).
    pub connect_timeout: Duration,
    /// For the whole request: resolving, connecting, sending, and reading the whole body.
    pub timeout: Duration,
    /// The largest body read; a larger one (by `Content-Length` or as it streams) fails the request,
    /// unless `truncate`.
    pub max_bytes: usize,
    /// Keep the first `max_bytes` of a larger body and stop reading, instead of failing (a webhook
    /// attempt keeps the start of the answer whatever its size).
    pub truncate: bool,
    /// Sent with the request (`Accept`, `Content-Type`, a webhook's signature, …).
    pub headers: HeaderMap,
}

impl Default for FetchOptions {
    fn default() -> Self {
        FetchOptions {
            connect_timeout: Duration::from_secs(5),
            timeout: Duration::from_secs(10),
            max_bytes: 1024 * 1024,
            truncate: false,
            headers: HeaderMap::new(),
        }
    }
}

impl FetchOptions {
    pub fn accept(mut self, media_type: &'static str) -> Self {
        self.headers
            .insert(ACCEPT, HeaderValue::from_static(media_type));
        self
    }
}

/// A response that was not a redirect, its body read whole (within [`FetchOptions::max_bytes`]).
#[derive(Debug, Clone)]
pub struct Fetched {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// Turns a host name into addresses. [`SystemLookup`] asks the operating system; tests answer with
/// names of their own (what they answer is checked like any other answer).
#[async_trait]
pub trait Lookup: Send + Sync {
    async fn lookup(&self, host: &str) -> std::io::Result<Vec<IpAddr>>;
}

/// The operating system's resolver (`getaddrinfo`, through tokio).
pub struct SystemLookup;

#[async_trait]
impl Lookup for SystemLookup {
    async fn lookup(&self, host: &str) -> std::io::Result<Vec<IpAddr>> {
        Ok(tokio::net::lookup_host((host, 0))
            .await?
            .map(|a| a.ip())
            .collect())
    }
}

/// Names with fixed addresses (`[outbound] resolve`), the others asked of `rest`.
struct FixedNames {
    names: std::collections::BTreeMap<String, IpAddr>,
    rest: Arc<dyn Lookup>,
}

#[async_trait]
impl Lookup for FixedNames {
    async fn lookup(&self, host: &str) -> std::io::Result<Vec<IpAddr>> {
        let name = host.trim_end_matches('.').to_ascii_lowercase();
        match self.names.get(&name) {
            Some(ip) => Ok(vec![*ip]),
            None => self.rest.lookup(host).await,
        }
    }
}

/// The guarded client. Cheap to share (`Arc<Outbound>`); its connections are pooled.
pub struct Outbound {
    allow: Arc<[Cidr]>,
    lookup: Arc<dyn Lookup>,
    roots: Vec<reqwest::Certificate>,
    /// One client per connect timeout asked for: reqwest sets that timeout per client, not per request.
    /// The callers use a handful of fixed timeouts, so this stays small.
    clients: Mutex<Vec<(Duration, reqwest::Client)>>,
}

/// Builds an [`Outbound`] with what tests need besides the config: their own name lookup and root CA.
pub struct OutboundBuilder {
    allow: Vec<Cidr>,
    lookup: Arc<dyn Lookup>,
    roots: Vec<reqwest::Certificate>,
}

impl OutboundBuilder {
    /// Resolve names with `lookup` instead of the operating system.
    pub fn lookup(mut self, lookup: Arc<dyn Lookup>) -> Self {
        self.lookup = lookup;
        self
    }

    /// Trust this CA (PEM) besides the public roots.
    pub fn root_certificate_pem(mut self, pem: &[u8]) -> Result<Self, String> {
        let cert = reqwest::Certificate::from_pem(pem).map_err(|e| e.to_string())?;
        self.roots.push(cert);
        Ok(self)
    }

    pub fn build(self) -> Result<Outbound, String> {
        let outbound = Outbound {
            allow: self.allow.into(),
            lookup: self.lookup,
            roots: self.roots,
            clients: Mutex::new(Vec::new()),
        };
        // Made now so a TLS set-up problem shows at start-up, not on the first request.
        outbound
            .client(FetchOptions::default().connect_timeout)
            .map_err(|e| format!("outbound HTTP client: {e}"))?;
        Ok(outbound)
    }
}

impl Outbound {
    /// The client for `[outbound]`; fails on an `allow` entry that is not a CIDR block.
    pub fn new(config: &OutboundConfig) -> Result<Outbound, String> {
        Outbound::builder(config)?.build()
    }

    /// A builder with `[outbound]`: its allow list, its fixed names (`resolve`) and its CA (`ca_file`).
    pub fn builder(config: &OutboundConfig) -> Result<OutboundBuilder, String> {
        let names = config.resolve_table()?;
        let lookup: Arc<dyn Lookup> = match names.is_empty() {
            true => Arc::new(SystemLookup),
            false => Arc::new(FixedNames {
                names,
                rest: Arc::new(SystemLookup),
            }),
        };
        let builder = OutboundBuilder {
            allow: config.allow_cidrs()?,
            lookup,
            roots: Vec::new(),
        };
        match &config.ca_file {
            None => Ok(builder),
            Some(path) => {
                let pem = std::fs::read(path)
                    .map_err(|e| format!("outbound.ca_file {}: {e}", path.display()))?;
                builder
                    .root_certificate_pem(&pem)
                    .map_err(|e| format!("outbound.ca_file {}: {e}", path.display()))
            }
        }
    }

    /// Refuses a URL that can never be fetched: not http(s), no host, an IP-literal host in a refused
    /// range (in any spelling: `2130706433` and `0177.0.0.1` are 127.0.0.1), or a `localhost` name while
    /// loopback is refused. For checking a URL when it is stored; a name that resolves to a refused
    /// address passes here and fails when fetched.
    pub fn check_url_static(&self, url: &str) -> Result<(), OutboundError> {
        self.checked_url(url).map(drop)
    }

    pub async fn get(&self, url: &str, options: &FetchOptions) -> Result<Fetched, OutboundError> {
        self.send(Method::GET, url, None, options).await
    }

    /// POSTs `body`; its `Content-Type` goes in `options.headers`.
    pub async fn post(
        &self,
        url: &str,
        body: Bytes,
        options: &FetchOptions,
    ) -> Result<Fetched, OutboundError> {
        self.send(Method::POST, url, Some(body), options).await
    }

    async fn send(
        &self,
        method: Method,
        url: &str,
        body: Option<Bytes>,
        options: &FetchOptions,
    ) -> Result<Fetched, OutboundError> {
        let url = self.checked_url(url)?;
        let host = url.host_str().unwrap_or_default().to_string();
        let client = self.client_for(&host, options.connect_timeout)?;
        let mut request = client.request(method, url).headers(options.headers.clone());
        if let Some(body) = body {
            request = request.body(body);
        }
        let exchange = async {
            let response = request.send().await.map_err(|e| classify(e, &host, true))?;
            read(response, &host, options.max_bytes, options.truncate).await
        };
        tokio::time::timeout(options.timeout, exchange)
            .await
            .unwrap_or_else(|_| Err(OutboundError::Timeout { host: host.clone() }))
    }

    /// GETs `url` for a download that may be large: the body goes to `sink` chunk by chunk, each of which must
    /// come within `options.timeout` (there is no bound on the whole). Redirects are followed (at most
    /// [`MAX_REDIRECTS`]), each target checked as the first was; `options.headers` go to `url`'s own host
    /// only, so a token never follows a redirect elsewhere. `sink` is told the answer's status with each
    /// chunk. Returns the final answer's status; the body of an answer other than 200 or 206 is not read.
    pub async fn download(
        &self,
        url: &str,
        options: &FetchOptions,
        mut sink: impl FnMut(StatusCode, &[u8]) -> std::io::Result<()>,
    ) -> Result<StatusCode, OutboundError> {
        let first = self.checked_url(url)?;
        let mut url = first.clone();
        for _ in 0..=MAX_REDIRECTS {
            let host = url.host_str().unwrap_or_default().to_string();
            let client = self.client_for(&host, options.connect_timeout)?;
            let same_origin = url.origin() == first.origin();
            let mut headers = options.headers.clone();
            if !same_origin {
                headers.remove(reqwest::header::AUTHORIZATION);
            }
            let request = client.get(url.clone()).headers(headers);
            let mut response = tokio::time::timeout(options.timeout, request.send())
                .await
                .map_err(|_| OutboundError::Timeout { host: host.clone() })?
                .map_err(|e| classify(e, &host, true))?;
            let status = response.status();
            if status.is_redirection() {
                let location = response
                    .headers()
                    .get(LOCATION)
                    .and_then(|l| l.to_str().ok())
                    .and_then(|l| url.join(l).ok());
                let Some(next) = location else {
                    return Err(OutboundError::Redirected {
                        host,
                        status,
                        location: None,
                    });
                };
                url = self.checked_url(next.as_str())?;
                continue;
            }
            if status == StatusCode::OK || status == StatusCode::PARTIAL_CONTENT {
                loop {
                    let chunk = tokio::time::timeout(options.timeout, response.chunk())
                        .await
                        .map_err(|_| OutboundError::Timeout { host: host.clone() })?
                        .map_err(|e| classify(e, &host, false))?;
                    let Some(chunk) = chunk else { break };
                    sink(status, &chunk).map_err(|e| OutboundError::Sink {
                        host: host.clone(),
                        message: e.to_string(),
                    })?;
                }
            }
            return Ok(status);
        }
        Err(OutboundError::Redirected {
            host: url.host_str().unwrap_or_default().to_string(),
            status: StatusCode::LOOP_DETECTED,
            location: Some(url.to_string()),
        })
    }

    fn checked_url(&self, text: &str) -> Result<Url, OutboundError> {
        let url = Url::parse(text).map_err(|e| OutboundError::BadUrl(e.to_string()))?;
        if !matches!(url.scheme(), "https" | "http") {
            return Err(OutboundError::Scheme(url.scheme().to_string()));
        }
        let refuse = |address: IpAddr| match refused(address, &self.allow) {
            Some(range) => Err(OutboundError::Refused {
                host: url.host_str().unwrap_or_default().to_string(),
                address,
                range,
            }),
            None => Ok(()),
        };
        match url.host() {
            None => return Err(OutboundError::NoHost),
            Some(url::Host::Ipv4(a)) => refuse(IpAddr::V4(a))?,
            Some(url::Host::Ipv6(a)) => refuse(IpAddr::V6(a))?,
            Some(url::Host::Domain(name)) => {
                // The URL parser turns every IPv4 spelling into a literal; this is in case one slips by.
                if let Ok(address) = name.parse::<IpAddr>() {
                    refuse(address)?;
                }
                if is_localhost(name) {
                    // RFC 6761: these names are loopback, whatever a resolver says; either loopback
                    // address let through is enough.
                    let v4 = refuse(IpAddr::V4(Ipv4Addr::LOCALHOST));
                    if v4.is_err() && refuse(IpAddr::V6(Ipv6Addr::LOCALHOST)).is_err() {
                        v4?;
                    }
                }
            }
        }
        Ok(url)
    }

    /// [`Self::client`], its failure said as a request to `host` failing.
    fn client_for(
        &self,
        host: &str,
        connect_timeout: Duration,
    ) -> Result<reqwest::Client, OutboundError> {
        self.client(connect_timeout)
            .map_err(|source| OutboundError::Http {
                host: host.to_string(),
                source,
            })
    }

    fn client(&self, connect_timeout: Duration) -> reqwest::Result<reqwest::Client> {
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, client)) = clients.iter().find(|(t, _)| *t == connect_timeout) {
            return Ok(client.clone());
        }
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            // A proxy from the environment would connect for us, to addresses never checked.
            .no_proxy()
            .connect_timeout(connect_timeout)
            .dns_resolver(Arc::new(GuardedResolver {
                allow: self.allow.clone(),
                lookup: self.lookup.clone(),
            }))
            .user_agent(concat!("Switchyard/", env!("CARGO_PKG_VERSION")))
            .pool_idle_timeout(Duration::from_secs(30));
        for root in &self.roots {
            builder = builder.add_root_certificate(root.clone());
        }
        let client = builder.build()?;
        clients.push((connect_timeout, client.clone()));
        Ok(client)
    }
}

/// Reads a response that came back: a redirect is an error, and the body is read up to `limit`.
async fn read(
    mut response: reqwest::Response,
    host: &str,
    limit: usize,
    truncate: bool,
) -> Result<Fetched, OutboundError> {
    let status = response.status();
    if status.is_redirection() {
        let location = response
            .headers()
            .get(LOCATION)
            .and_then(|l| l.to_str().ok())
            .map(str::to_string);
        return Err(OutboundError::Redirected {
            host: host.to_string(),
            status,
            location,
        });
    }
    let too_large = || OutboundError::TooLarge {
        host: host.to_string(),
        limit,
    };
    let declared = response.content_length();
    if !truncate && declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let mut body = BytesMut::with_capacity(declared.map_or(0, |n| (n as usize).min(limit)));
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| classify(e, host, false))?
    {
        if body.len() + chunk.len() > limit {
            if !truncate {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk[..limit - body.len()]);
            break;
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Fetched {
        status,
        headers: response.headers().clone(),
        body: body.freeze(),
    })
}

/// An error from sending, as the caller should see it: what the resolver refused comes back out of
/// reqwest's chain.
fn classify(error: reqwest::Error, host: &str, sending: bool) -> OutboundError {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&error);
    while let Some(e) = cause {
        if let Some(refusal) = e.downcast_ref::<ResolveError>() {
            return refusal.clone().into();
        }
        cause = e.source();
    }
    let host = host.to_string();
    if error.is_timeout() {
        OutboundError::Timeout { host }
    } else if sending && error.is_connect() {
        OutboundError::Connect {
            host,
            source: error,
        }
    } else {
        OutboundError::Http {
            host,
            source: error,
        }
    }
}

/// What the resolver says when it has nothing to connect to.
#[derive(Debug, Clone, thiserror::Error)]
enum ResolveError {
    #[error("{host} resolves only to refused addresses")]
    Refused {
        host: String,
        address: IpAddr,
        range: &'static str,
    },
    #[error("{host} does not resolve: {message}")]
    Lookup { host: String, message: String },
}

impl From<ResolveError> for OutboundError {
    fn from(e: ResolveError) -> Self {
        match e {
            ResolveError::Refused {
                host,
                address,
                range,
            } => OutboundError::Refused {
                host,
                address,
                range,
            },
            ResolveError::Lookup { host, message } => OutboundError::Resolve { host, message },
        }
    }
}

/// Resolves names for the HTTP client, keeping only the addresses that may be connected to: what it
/// returns is exactly what the client connects to, so the check holds at connect time.
struct GuardedResolver {
    allow: Arc<[Cidr]>,
    lookup: Arc<dyn Lookup>,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_string();
        let allow = self.allow.clone();
        let lookup = self.lookup.clone();
        Box::pin(async move {
            let found = lookup
                .lookup(&host)
                .await
                .map_err(|e| ResolveError::Lookup {
                    host: host.clone(),
                    message: e.to_string(),
                })?;
            let kept = permitted(&host, found, &allow)?;
            // Port 0: the client puts in the URL's port.
            let addrs: reqwest::dns::Addrs =
                Box::new(kept.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(addrs)
        })
    }
}

/// The addresses of an answer that may be connected to; an error when none remain.
fn permitted(host: &str, found: Vec<IpAddr>, allow: &[Cidr]) -> Result<Vec<IpAddr>, ResolveError> {
    let mut first_refused = None;
    let mut kept = Vec::with_capacity(found.len());
    for address in found {
        match refused(address, allow) {
            None => kept.push(address),
            Some(range) => {
                tracing::debug!(host, %address, range, "outbound: address refused");
                first_refused.get_or_insert((address, range));
            }
        }
    }
    match (kept.is_empty(), first_refused) {
        (false, _) => Ok(kept),
        (true, Some((address, range))) => Err(ResolveError::Refused {
            host: host.to_string(),
            address,
            range,
        }),
        (true, None) => Err(ResolveError::Lookup {
            host: host.to_string(),
            message: "no addresses".into(),
        }),
    }
}

/// The special-use range `address` is in, unless an `allow` block lets it through.
pub fn refused(address: IpAddr, allow: &[Cidr]) -> Option<&'static str> {
    if allow.iter().any(|c| c.contains(address)) {
        return None;
    }
    special_use(address)
}

/// The name of the special-use range `address` is in, or `None` for a public address. IPv6 addresses
/// that carry an IPv4 address (mapped, NAT64, 6to4) are judged by the IPv4 address.
pub fn special_use(address: IpAddr) -> Option<&'static str> {
    match address {
        IpAddr::V4(_) => find(&SPECIAL_V4, address),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => special_use(IpAddr::V4(v4)),
            None => find(&SPECIAL_V6, address),
        },
    }
}

fn find(table: &[(Cidr, &'static str)], address: IpAddr) -> Option<&'static str> {
    table
        .iter()
        .find(|(block, _)| block.contains(address))
        .map(|(_, name)| *name)
}

/// The IPv4 address an IPv6 one stands for: `::ffff:a.b.c.d` (mapped), `64:ff9b::a.b.c.d` (NAT64's
/// well-known prefix), `2002:AABB:CCDD::/48` (6to4).
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    let bits = u128::from(v6);
    let nat64 = u128::from(Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0));
    if bits >> 32 == nat64 >> 32 {
        return Some(Ipv4Addr::from(bits as u32));
    }
    if v6.segments()[0] == 0x2002 {
        return Some(Ipv4Addr::from((bits >> 80) as u32));
    }
    None
}

/// RFC 6761: `localhost` and everything under it.
fn is_localhost(name: &str) -> bool {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost" || name.ends_with(".localhost")
}

// The blocks are this file's own literals, each parsed by the unit tests: nothing from outside.
#[allow(clippy::expect_used)]
fn table(entries: &[(&str, &'static str)]) -> Vec<(Cidr, &'static str)> {
    entries
        .iter()
        .map(|(block, name)| (Cidr::parse(block).expect("a valid block"), *name))
        .collect()
}

/// The IANA IPv4 special-purpose address registry (RFC 6890 and successors), all of it, with multicast.
/// More specific blocks inside these (192.0.0.8/32, …) need no rows of their own.
static SPECIAL_V4: LazyLock<Vec<(Cidr, &'static str)>> = LazyLock::new(|| {
    table(&[
        ("0.0.0.0/8", "this-network"),
        ("10.0.0.0/8", "private-use"),
        ("100.64.0.0/10", "shared (carrier-grade NAT)"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local"),
        ("172.16.0.0/12", "private-use"),
        ("192.0.0.0/24", "IETF protocol assignment"),
        ("192.0.2.0/24", "documentation"),
        ("192.31.196.0/24", "AS112"),
        ("192.52.193.0/24", "AMT"),
        ("192.88.99.0/24", "6to4 relay anycast"),
        ("192.168.0.0/16", "private-use"),
        ("192.175.48.0/24", "AS112"),
        ("198.18.0.0/15", "benchmarking"),
        ("198.51.100.0/24", "documentation"),
        ("203.0.113.0/24", "documentation"),
        ("224.0.0.0/4", "multicast"),
        ("255.255.255.255/32", "broadcast"),
        ("240.0.0.0/4", "reserved"),
    ])
});

/// The IANA IPv6 special-purpose address registry, with multicast and the deprecated blocks. The
/// mapped, NAT64 and 6to4 blocks are judged by the IPv4 address they carry (see [`embedded_v4`]).
static SPECIAL_V6: LazyLock<Vec<(Cidr, &'static str)>> = LazyLock::new(|| {
    table(&[
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("::/96", "IPv4-compatible (deprecated)"),
        ("64:ff9b:1::/48", "local-use IPv4/IPv6 translation"),
        ("100::/64", "discard-only"),
        ("100:0:0:1::/64", "dummy"),
        ("2001:db8::/32", "documentation"),
        ("2001::/23", "IETF protocol assignment"),
        ("2620:4f:8000::/48", "AS112"),
        ("3fff::/20", "documentation"),
        ("5f00::/16", "segment routing"),
        ("fc00::/7", "unique-local"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local (deprecated)"),
        ("ff00::/8", "multicast"),
    ])
});

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn config(allow: &[&str]) -> OutboundConfig {
        OutboundConfig {
            allow: allow.iter().map(|c| c.to_string()).collect(),
            ..OutboundConfig::default()
        }
    }

    fn outbound(allow: &[&str]) -> Outbound {
        Outbound::new(&config(allow)).unwrap()
    }

    const LOOPBACK: &[&str] = &["127.0.0.0/8"];

    /// Names of the tests' own: each call takes the next answer (the last one repeats).
    struct Answers {
        answers: Mutex<VecDeque<Vec<IpAddr>>>,
        calls: AtomicUsize,
    }

    impl Answers {
        fn new(answers: &[&[&str]]) -> Arc<Answers> {
            Arc::new(Answers {
                answers: Mutex::new(
                    answers
                        .iter()
                        .map(|a| a.iter().map(|s| ip(s)).collect())
                        .collect(),
                ),
                calls: AtomicUsize::new(0),
            })
        }
    }

    #[async_trait]
    impl Lookup for Answers {
        async fn lookup(&self, _host: &str) -> std::io::Result<Vec<IpAddr>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let mut answers = self.answers.lock().unwrap();
            Ok(match answers.len() {
                1 => answers[0].clone(),
                _ => answers.pop_front().unwrap_or_default(),
            })
        }
    }

    fn with_names(allow: &[&str], names: Arc<Answers>) -> Outbound {
        Outbound::builder(&config(allow))
            .unwrap()
            .lookup(names)
            .build()
            .unwrap()
    }

    /// What a test server does after reading a request.
    #[derive(Clone)]
    enum Answer {
        Fixed(String),
        /// A chunked body that never ends.
        Endless,
        /// Nothing at all.
        Silent,
        /// Headers and part of the body, then nothing.
        Stalls,
    }

    fn ok(body: &str) -> Answer {
        Answer::Fixed(format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ))
    }

    /// A server's record: connections accepted and the requests read.
    #[derive(Default)]
    struct Seen {
        connections: AtomicUsize,
        requests: Mutex<Vec<String>>,
    }

    impl Seen {
        fn connections(&self) -> usize {
            self.connections.load(Ordering::SeqCst)
        }
    }

    async fn serve(answer: Answer) -> (SocketAddr, Arc<Seen>) {
        serve_on("127.0.0.1:0".parse().unwrap(), answer).await
    }

    async fn serve_on(at: SocketAddr, answer: Answer) -> (SocketAddr, Arc<Seen>) {
        let listener = TcpListener::bind(at).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Seen::default());
        let record = seen.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                record.connections.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(handle(stream, answer.clone(), record.clone()));
            }
        });
        (addr, seen)
    }

    async fn handle<S: AsyncRead + AsyncWrite + Unpin>(
        mut stream: S,
        answer: Answer,
        seen: Arc<Seen>,
    ) {
        let mut request = Vec::new();
        let mut buf = [0u8; 4096];
        let head_end = loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => request.extend_from_slice(&buf[..n]),
            }
            if let Some(i) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
        };
        let head = String::from_utf8_lossy(&request[..head_end]).to_lowercase();
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |n| n.trim().parse::<usize>().unwrap());
        while request.len() < head_end + length {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => request.extend_from_slice(&buf[..n]),
            }
        }
        seen.requests
            .lock()
            .unwrap()
            .push(String::from_utf8_lossy(&request).into_owned());
        match answer {
            Answer::Fixed(text) => {
                let _ = stream.write_all(text.as_bytes()).await;
                let _ = stream.shutdown().await;
            }
            Answer::Endless => {
                let head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
                if stream.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = format!("400\r\n{}\r\n", "x".repeat(0x400));
                while stream.write_all(chunk.as_bytes()).await.is_ok() {}
            }
            Answer::Silent => std::future::pending().await,
            Answer::Stalls => {
                let head = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc";
                let _ = stream.write_all(head.as_bytes()).await;
                std::future::pending().await
            }
        }
    }

    fn quick() -> FetchOptions {
        FetchOptions {
            connect_timeout: Duration::from_secs(2),
            timeout: Duration::from_secs(5),
            ..FetchOptions::default()
        }
    }

    /// Whether `outbound` never connected to `seen`'s server: a permitted request made after it must
    /// be the server's first connection (connections are accepted in order).
    async fn never_connected(url: &str, seen: &Seen) -> bool {
        outbound(LOOPBACK).get(url, &quick()).await.unwrap();
        seen.connections() == 1
    }

    #[test]
    fn every_special_use_block_is_refused() {
        for refused in [
            "0.0.0.0",
            "0.1.2.3",
            "10.0.0.1",
            "10.255.255.255",
            "100.64.0.1",
            "100.127.255.254",
            "127.0.0.1",
            "127.255.0.9",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.0.0.1",
            "192.0.0.170",
            "192.0.2.1",
            "192.31.196.1",
            "192.52.193.1",
            "192.88.99.1",
            "192.168.1.1",
            "192.175.48.1",
            "198.18.0.1",
            "198.19.255.255",
            "198.51.100.7",
            "203.0.113.9",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::127.0.0.1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "::ffff:0.0.0.0",
            "64:ff9b::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b:1::8.8.8.8",
            "100::1",
            "100:0:0:1::1",
            "2001::1",
            "2001:2::1",
            "2001:1ff:ffff::1",
            "2001:db8::1",
            "2002:7f00:1::1",
            "2002:c0a8:101::1",
            "2620:4f:8000::1",
            "3fff::1",
            "5f00::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "febf::1",
            "fec0::1",
            "ff02::1",
            "ff05::1:3",
        ] {
            assert!(
                special_use(ip(refused)).is_some(),
                "{refused} should be refused"
            );
        }
        for public in [
            "1.1.1.1",
            "8.8.8.8",
            "9.255.255.255",
            "11.0.0.1",
            "100.63.255.255",
            "100.128.0.1",
            "172.15.255.255",
            "172.32.0.1",
            "192.0.1.1",
            "192.169.0.1",
            "198.17.255.255",
            "198.20.0.1",
            "223.255.255.255",
            "::ffff:8.8.8.8",
            "64:ff9b::8.8.8.8",
            "2002:808:808::1",
            "2001:200::1",
            "2001:4860:4860::8888",
            "2606:4700:4700::1111",
            "2a00:1450:4001::1",
        ] {
            assert_eq!(special_use(ip(public)), None, "{public} is public");
        }
        assert_eq!(special_use(ip("::ffff:127.0.0.1")), Some("loopback"));
        assert_eq!(special_use(ip("64:ff9b::10.1.2.3")), Some("private-use"));
    }

    #[test]
    fn the_allow_list_lets_its_blocks_through_and_no_more() {
        let allow = [
            Cidr::parse("127.0.0.0/8").unwrap(),
            Cidr::parse("fd00::/8").unwrap(),
        ];
        assert_eq!(refused(ip("127.0.0.1"), &allow), None);
        assert_eq!(refused(ip("::ffff:127.0.0.1"), &allow), None);
        assert_eq!(refused(ip("fd12::1"), &allow), None);
        assert_eq!(refused(ip("::1"), &allow), Some("loopback"));
        assert_eq!(refused(ip("10.0.0.1"), &allow), Some("private-use"));
        assert_eq!(refused(ip("fc00::1"), &allow), Some("unique-local"));
        assert_eq!(refused(ip("8.8.8.8"), &[]), None);
    }

    #[test]
    fn an_answer_keeps_only_what_may_be_connected_to() {
        let allow = [Cidr::parse("10.1.0.0/16").unwrap()];
        let kept = permitted(
            "mixed.test",
            vec![
                ip("127.0.0.1"),
                ip("8.8.8.8"),
                ip("10.1.2.3"),
                ip("fe80::1"),
            ],
            &allow,
        )
        .unwrap();
        assert_eq!(kept, [ip("8.8.8.8"), ip("10.1.2.3")]);
        // The rebinding answer: only private addresses left, nothing to connect to.
        match permitted("rebind.test", vec![ip("192.168.0.1"), ip("::1")], &allow) {
            Err(ResolveError::Refused { address, range, .. }) => {
                assert_eq!(address, ip("192.168.0.1"));
                assert_eq!(range, "private-use");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            permitted("empty.test", vec![], &allow),
            Err(ResolveError::Lookup { .. })
        ));
    }

    #[test]
    fn ip_literals_in_any_spelling_are_refused_before_fetching() {
        let out = outbound(&[]);
        for (url, address) in [
            ("http://2130706433/", "127.0.0.1"),
            ("http://0177.0.0.1/", "127.0.0.1"),
            ("http://0x7f.0.0.1/", "127.0.0.1"),
            ("http://127.1/", "127.0.0.1"),
            ("https://127.0.0.1:8443/doc", "127.0.0.1"),
            ("http://0.0.0.0/", "0.0.0.0"),
            ("http://0/", "0.0.0.0"),
            ("http://10.0.0.1/", "10.0.0.1"),
            ("http://172.16.0.1/", "172.16.0.1"),
            ("http://192.168.1.1/", "192.168.1.1"),
            (
                "http://169.254.169.254/latest/meta-data/",
                "169.254.169.254",
            ),
            ("http://100.64.0.1/", "100.64.0.1"),
            ("http://[::1]/", "::1"),
            ("http://[::ffff:127.0.0.1]/", "::ffff:127.0.0.1"),
            ("http://[::ffff:7f00:1]/", "::ffff:127.0.0.1"),
            ("http://[fc00::1]/", "fc00::1"),
            ("http://[fe80::1]/", "fe80::1"),
        ] {
            match out.check_url_static(url) {
                Err(OutboundError::Refused { address: a, .. }) => {
                    assert_eq!(a, ip(address), "{url}")
                }
                other => panic!("{url}: {other:?}"),
            }
        }
        let allowed = outbound(&["10.0.0.0/8", "::1"]);
        allowed.check_url_static("http://10.1.2.3/").unwrap();
        allowed.check_url_static("http://[::1]:8080/").unwrap();
        out.check_url_static("https://example.com/client.json")
            .unwrap();
        out.check_url_static("http://8.8.8.8/").unwrap();
    }

    #[test]
    fn only_http_urls_with_a_host_pass() {
        let out = outbound(LOOPBACK);
        for url in [
            "ftp://example.com/",
            "file:///etc/passwd",
            "gopher://example.com/",
            "data:,x",
        ] {
            assert!(
                matches!(out.check_url_static(url), Err(OutboundError::Scheme(_))),
                "{url}"
            );
        }
        for url in ["not a url", "http://", "https://exa mple.com/"] {
            assert!(
                matches!(out.check_url_static(url), Err(OutboundError::BadUrl(_))),
                "{url}"
            );
        }
    }

    #[test]
    fn localhost_names_are_refused_unless_loopback_is_allowed() {
        let out = outbound(&[]);
        for url in [
            "http://localhost/",
            "http://LOCALHOST./",
            "https://app.localhost:8443/x",
        ] {
            let err = out.check_url_static(url).unwrap_err();
            assert!(
                matches!(
                    err,
                    OutboundError::Refused {
                        range: "loopback",
                        ..
                    }
                ),
                "{url}: {err:?}"
            );
            assert!(err.to_string().contains("loopback"), "{err}");
        }
        outbound(LOOPBACK)
            .check_url_static("http://localhost/")
            .unwrap();
        outbound(&["::1"])
            .check_url_static("http://localhost/")
            .unwrap();
        outbound(&["10.0.0.0/8"])
            .check_url_static("http://localhost/")
            .unwrap_err();
        out.check_url_static("http://localhost.example.com/")
            .unwrap();
    }

    #[tokio::test]
    async fn loopback_is_fetched_only_when_allowed() {
        let (addr, seen) = serve(ok("hello")).await;
        let url = format!("http://{addr}/doc");

        let err = outbound(&[]).get(&url, &quick()).await.unwrap_err();
        assert!(
            matches!(
                err,
                OutboundError::Refused {
                    range: "loopback",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(
            never_connected(&url, &seen).await,
            "an IP literal was connected to"
        );

        let fetched = outbound(LOOPBACK)
            .get(&url, &quick().accept("application/json"))
            .await
            .unwrap();
        assert_eq!(fetched.status, StatusCode::OK);
        assert_eq!(&fetched.body[..], b"hello");
        let request = seen.requests.lock().unwrap().last().cloned().unwrap();
        assert!(request.starts_with("GET /doc HTTP/1.1\r\n"), "{request}");
        assert!(request.contains("accept: application/json"), "{request}");
    }

    #[tokio::test]
    async fn names_are_checked_on_what_they_resolve_to() {
        let (addr, seen) = serve(ok("named")).await;
        let url = format!("http://cimd.test:{}/doc", addr.port());
        let names = Answers::new(&[&["127.0.0.1"]]);

        // What a production config does with a name that resolves to loopback.
        let err = with_names(&[], names.clone())
            .get(&url, &quick())
            .await
            .unwrap_err();
        match &err {
            OutboundError::Refused { host, address, .. } => {
                assert_eq!(host, "cimd.test");
                assert_eq!(*address, ip("127.0.0.1"));
            }
            other => panic!("{other:?}"),
        }
        assert!(!err.to_string().contains("127.0.0.1"), "{err}");
        assert_eq!(seen.connections(), 0);

        let fetched = with_names(LOOPBACK, names)
            .get(&url, &quick())
            .await
            .unwrap();
        assert_eq!(&fetched.body[..], b"named");
        let request = seen.requests.lock().unwrap()[0].to_lowercase();
        assert!(
            request.contains(&format!("host: cimd.test:{}", addr.port())),
            "{request}"
        );
    }

    #[tokio::test]
    async fn localhost_is_refused_by_default_and_fetched_when_loopback_is_allowed() {
        let (addr, _) = serve(ok("local")).await;
        let url = format!("http://localhost:{}/", addr.port());
        let err = outbound(&[]).get(&url, &quick()).await.unwrap_err();
        assert!(matches!(err, OutboundError::Refused { .. }), "{err:?}");
        let fetched = outbound(LOOPBACK).get(&url, &quick()).await.unwrap();
        assert_eq!(&fetched.body[..], b"local");
    }

    #[tokio::test]
    async fn dns_rebinding_is_refused_at_connect_time() {
        // The allowed address stands for a public one, 127.0.0.2 for the private one the name turns to.
        let (public, public_seen) = serve(ok("public")).await;
        let private_at = SocketAddr::new(ip("127.0.0.2"), public.port());
        let (_, private_seen) = serve_on(private_at, ok("secret")).await;
        let names = Answers::new(&[&["127.0.0.1"], &["127.0.0.2"], &["127.0.0.2", "127.0.0.1"]]);
        let out = with_names(&["127.0.0.1/32"], names.clone());
        let url = format!("http://rebind.test:{}/", public.port());

        let first = out.get(&url, &quick()).await.unwrap();
        assert_eq!(&first.body[..], b"public");
        let err = out.get(&url, &quick()).await.unwrap_err();
        assert!(
            matches!(err, OutboundError::Refused { address, .. } if address == ip("127.0.0.2")),
            "{err:?}"
        );
        let mixed = out.get(&url, &quick()).await.unwrap();
        assert_eq!(&mixed.body[..], b"public");

        assert_eq!(
            names.calls.load(Ordering::SeqCst),
            3,
            "every request resolves anew"
        );
        assert_eq!(public_seen.connections(), 2);
        assert_eq!(
            private_seen.connections(),
            0,
            "the refused address was connected to"
        );
    }

    #[tokio::test]
    async fn redirects_are_not_followed() {
        let (target, target_seen) = serve(ok("moved here")).await;
        for status in [
            "301 Moved Permanently",
            "302 Found",
            "303 See Other",
            "307 Temporary Redirect",
            "308 Permanent Redirect",
        ] {
            let (addr, seen) = serve(Answer::Fixed(format!(
                "HTTP/1.1 {status}\r\nLocation: http://{target}/\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )))
            .await;
            let err = outbound(LOOPBACK)
                .get(&format!("http://{addr}/"), &quick())
                .await
                .unwrap_err();
            match err {
                OutboundError::Redirected {
                    status: s,
                    location,
                    ..
                } => {
                    assert_eq!(s.as_u16().to_string(), status[..3]);
                    assert_eq!(location, Some(format!("http://{target}/")));
                }
                other => panic!("{status}: {other:?}"),
            }
            assert_eq!(seen.connections(), 1);
        }
        assert_eq!(target_seen.connections(), 0);
    }

    #[tokio::test]
    async fn bodies_over_the_cap_fail() {
        let small = FetchOptions {
            max_bytes: 5120,
            ..quick()
        };
        let out = outbound(LOOPBACK);

        let (addr, _) = serve(ok(&"x".repeat(5120))).await;
        let fetched = out.get(&format!("http://{addr}/"), &small).await.unwrap();
        assert_eq!(fetched.body.len(), 5120, "exactly the cap is fine");

        // Declared too large: refused before the body is read.
        let (addr, _) = serve(Answer::Fixed(format!(
            "HTTP/1.1 200 OK\r\nContent-Length: 5121\r\n\r\n{}",
            "x".repeat(100)
        )))
        .await;
        let err = out
            .get(&format!("http://{addr}/"), &small)
            .await
            .unwrap_err();
        assert!(
            matches!(err, OutboundError::TooLarge { limit: 5120, .. }),
            "{err:?}"
        );

        let (addr, _) = serve(Answer::Endless).await;
        let err = out
            .get(&format!("http://{addr}/"), &small)
            .await
            .unwrap_err();
        assert!(matches!(err, OutboundError::TooLarge { .. }), "{err:?}");
    }

    #[tokio::test]
    async fn slow_servers_time_out() {
        let brief = FetchOptions {
            timeout: Duration::from_millis(300),
            ..quick()
        };
        let out = outbound(LOOPBACK);
        for answer in [Answer::Silent, Answer::Stalls] {
            let (addr, _) = serve(answer).await;
            let err = out
                .get(&format!("http://{addr}/"), &brief)
                .await
                .unwrap_err();
            assert!(matches!(err, OutboundError::Timeout { .. }), "{err:?}");
        }
    }

    #[tokio::test]
    async fn post_sends_its_body_and_any_status_comes_back() {
        let (addr, seen) = serve(Answer::Fixed(
            "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\nConnection: close\r\n\r\noops".into(),
        ))
        .await;
        let mut options = quick();
        options.headers.insert(
            reqwest::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let fetched = outbound(LOOPBACK)
            .post(
                &format!("http://{addr}/hook"),
                Bytes::from_static(b"{\"a\":1}"),
                &options,
            )
            .await
            .unwrap();
        assert_eq!(fetched.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(&fetched.body[..], b"oops");
        let request = seen.requests.lock().unwrap()[0].clone();
        assert!(request.starts_with("POST /hook HTTP/1.1\r\n"), "{request}");
        assert!(
            request.contains("content-type: application/json"),
            "{request}"
        );
        assert!(request.ends_with("\r\n\r\n{\"a\":1}"), "{request}");
    }

    #[tokio::test]
    async fn connection_failures_say_so() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let err = outbound(LOOPBACK)
            .get(&format!("http://{addr}/"), &quick())
            .await
            .unwrap_err();
        assert!(matches!(err, OutboundError::Connect { .. }), "{err:?}");
        assert_eq!(err.to_string(), "could not connect to 127.0.0.1");
    }

    /// HTTPS against a local server with the test CA, the way the client metadata tests run: a test name
    /// mapped to 127.0.0.1, trusted only with the CA, and refused by a config without the allow list.
    #[tokio::test]
    async fn https_with_a_test_ca() {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        use tokio_rustls::rustls;

        let data = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/outbound/");
        let read = |f: &str| std::fs::read(format!("{data}{f}")).unwrap();
        let certs: Vec<CertificateDer> = CertificateDer::pem_slice_iter(&read("server.pem"))
            .collect::<Result<_, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_slice(&read("server.key")).unwrap();
        let tls = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Seen::default());
        let record = seen.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                record.connections.fetch_add(1, Ordering::SeqCst);
                if let Ok(stream) = acceptor.accept(stream).await {
                    tokio::spawn(handle(stream, ok("{\"secure\":true}"), record.clone()));
                }
            }
        });

        let url = format!("https://cimd.test:{port}/.well-known/oauth-cimd");
        let names = Answers::new(&[&["127.0.0.1"]]);
        let trusting = |allow: &[&str]| {
            Outbound::builder(&config(allow))
                .unwrap()
                .lookup(names.clone())
                .root_certificate_pem(&read("ca.pem"))
                .unwrap()
                .build()
                .unwrap()
        };

        let fetched = trusting(LOOPBACK).get(&url, &quick()).await.unwrap();
        assert_eq!(&fetched.body[..], b"{\"secure\":true}");

        let err = with_names(LOOPBACK, names.clone())
            .get(&url, &quick())
            .await
            .unwrap_err();
        assert!(
            matches!(err, OutboundError::Connect { .. }),
            "an unknown CA: {err:?}"
        );

        let before = seen.connections();
        let err = trusting(&[]).get(&url, &quick()).await.unwrap_err();
        assert!(matches!(err, OutboundError::Refused { .. }), "{err:?}");
        assert_eq!(seen.connections(), before);

        // The same from `[outbound]` alone: `ca_file` and `resolve`, still held to `allow`.
        let mut configured = config(LOOPBACK);
        configured.ca_file = Some(format!("{data}ca.pem").into());
        configured
            .resolve
            .insert("CIMD.test".into(), "127.0.0.1".into());
        let fetched = Outbound::new(&configured)
            .unwrap()
            .get(&url, &quick())
            .await
            .unwrap();
        assert_eq!(&fetched.body[..], b"{\"secure\":true}");
        configured.allow.clear();
        let err = Outbound::new(&configured)
            .unwrap()
            .get(&url, &quick())
            .await
            .unwrap_err();
        assert!(matches!(err, OutboundError::Refused { .. }), "{err:?}");
        configured.ca_file = Some(format!("{data}missing.pem").into());
        let err = Outbound::new(&configured).err().unwrap();
        assert!(err.contains("outbound.ca_file"), "{err}");
    }
}
