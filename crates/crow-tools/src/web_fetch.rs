//! `web_fetch`: an HTTP(S) GET of a URL for the model — HTML as markdown (htmd), other text
//! as it is, binary refused — with caps on size, time and redirects.
//!
//! It reaches outside the machine, so it is careful about where: every hop's host is resolved
//! once, its addresses checked (loopback, private, link-local, shared and unspecified ones are
//! refused unless `allow_private`: a prompt-injected fetch must not read the user's router or
//! cloud metadata), and the connection pinned to the checked address so a second DNS answer
//! cannot swap it (rebinding). Redirects are followed by hand, each hop checked the same way.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use async_trait::async_trait;
use crow_core::{Footprint, Tool, ToolContext, ToolKind, ToolResult};
use serde::Deserialize;

use crate::args::parse;
use crate::output::cap_head_tail;

const SHAPE: &str = r#"{"url": string}"#;
/// Redirects followed at most.
const MAX_REDIRECTS: usize = 5;

/// What `web_fetch` may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebFetchOptions {
    /// Fetch loopback and private-network addresses too (off: a local dev server needs it).
    pub allow_private: bool,
    /// Bytes of body read at most; the rest is not downloaded.
    pub max_download_bytes: usize,
    /// Time for the whole fetch, redirects included.
    pub timeout: Duration,
    /// Cap on what the model sees.
    pub max_output_bytes: usize,
}

impl Default for WebFetchOptions {
    fn default() -> Self {
        Self {
            allow_private: false,
            max_download_bytes: 5 * 1024 * 1024,
            timeout: Duration::from_secs(30),
            max_output_bytes: 30 * 1024,
        }
    }
}

#[derive(Debug, Deserialize)]
struct Args {
    url: String,
}

pub struct WebFetchTool {
    options: WebFetchOptions,
}

impl WebFetchTool {
    pub fn new(options: WebFetchOptions) -> Self {
        Self { options }
    }
}

#[async_trait]
impl Tool for WebFetchTool {
    fn name(&self) -> &str {
        "web_fetch"
    }

    fn description(&self) -> &str {
        "Fetch a web page or text file by http(s) URL; HTML comes back as markdown."
    }

    fn parameters_schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {"url": {"type": "string"}},
            "required": ["url"]
        })
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Fetch
    }

    fn footprint(&self, _input: &serde_json::Value, _ctx: &ToolContext) -> Footprint {
        Footprint::Nothing
    }

    async fn execute(&self, input: serde_json::Value, ctx: &ToolContext) -> ToolResult {
        let args: Args = match parse(&input, SHAPE) {
            Ok(a) => a,
            Err(e) => return e,
        };
        let fetch = fetch(&args.url, &self.options);
        let result = tokio::select! {
            result = tokio::time::timeout(self.options.timeout, fetch) => result,
            () = ctx.cancel.cancelled() => return ToolResult::cancelled(),
        };
        match result {
            Ok(Ok(page)) => {
                let mut text = page.text;
                if page.cut {
                    text.push_str(&format!(
                        "\n[… the page is longer than {} KiB; the rest was not fetched]",
                        self.options.max_download_bytes / 1024
                    ));
                }
                let mut result = ToolResult::success(cap_head_tail(
                    &format!("{} ({})\n\n{text}", page.url, page.content_type),
                    self.options.max_output_bytes,
                ));
                result.metadata.extra = serde_json::json!({
                    "url": page.url,
                    "status": page.status,
                    "content_type": page.content_type,
                });
                result
            }
            Ok(Err(message)) => ToolResult::error(message),
            Err(_) => ToolResult::error(format!(
                "fetching {} took longer than {} s",
                args.url,
                self.options.timeout.as_secs()
            )),
        }
    }
}

struct Page {
    url: String,
    status: u16,
    content_type: String,
    text: String,
    cut: bool,
}

async fn fetch(start: &str, options: &WebFetchOptions) -> Result<Page, String> {
    let mut url = reqwest::Url::parse(start).map_err(|e| format!("'{start}' is not a URL: {e}"))?;
    for _ in 0..=MAX_REDIRECTS {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "only http and https URLs can be fetched, not {}",
                url.scheme()
            ));
        }
        let host = url
            .host_str()
            .ok_or_else(|| format!("{url} has no host"))?
            .to_owned();
        let port = url.port_or_known_default().unwrap_or(443);
        let address = checked_address(&host, port, options.allow_private).await?;
        // Pinned to the address just checked: no second lookup can move the connection.
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .resolve(&host, address)
            .user_agent(concat!("crow/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("cannot make an HTTP client: {e}"))?;
        let mut response = client
            .get(url.clone())
            .send()
            .await
            .map_err(|e| format!("fetching {url} failed: {e}"))?;
        let status = response.status();
        if status.is_redirection() {
            let location = response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|l| l.to_str().ok())
                .ok_or_else(|| format!("{url} redirects ({status}) without a location"))?;
            url = url
                .join(location)
                .map_err(|e| format!("{url} redirects to a bad location '{location}': {e}"))?;
            continue;
        }
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|c| c.to_str().ok())
            .unwrap_or("application/octet-stream")
            .to_owned();
        let mime = content_type
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let textual = mime.starts_with("text/")
            || mime.ends_with("json")
            || mime.ends_with("xml")
            || mime.contains("javascript")
            || mime.contains("yaml")
            || mime.contains("toml");
        if !textual {
            return Err(format!(
                "{url} is {mime}, not text: web_fetch returns pages and text files only"
            ));
        }
        let mut body = Vec::new();
        let mut cut = false;
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| format!("reading {url} failed: {e}"))?
        {
            let room = options.max_download_bytes.saturating_sub(body.len());
            if chunk.len() > room {
                body.extend_from_slice(&chunk[..room]);
                cut = true;
                break;
            }
            body.extend_from_slice(&chunk);
        }
        let raw = String::from_utf8_lossy(&body).into_owned();
        let text = if mime == "text/html" || mime == "application/xhtml+xml" {
            htmd::convert(&raw).map_err(|e| format!("cannot convert {url} to markdown: {e}"))?
        } else {
            raw
        };
        if !status.is_success() {
            return Err(format!(
                "{url} answered {status}: {}",
                crate::output::truncate_line(text.trim(), 500)
            ));
        }
        return Ok(Page {
            url: url.to_string(),
            status: status.as_u16(),
            content_type,
            text,
            cut,
        });
    }
    Err(format!(
        "{start} redirects more than {MAX_REDIRECTS} times; not followed further"
    ))
}

/// The address to connect to for `host`, refused when it (or any address the name has) is
/// not public and private addresses are not allowed.
async fn checked_address(host: &str, port: u16, allow_private: bool) -> Result<SocketAddr, String> {
    let addresses: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .collect();
    let first = *addresses
        .first()
        .ok_or_else(|| format!("{host} has no address"))?;
    if !allow_private && let Some(private) = addresses.iter().find(|a| !is_public(a.ip())) {
        return Err(format!(
            "refusing to fetch from {host}: it resolves to {}, a loopback or private address \
             (set [tools] web_fetch_allow_private = true to allow it)",
            private.ip()
        ));
    }
    Ok(first)
}

/// Whether an address belongs to the public internet.
fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                // Shared address space (carrier NAT) and "this network".
                || (a == 100 && (64..128).contains(&b))
                || a == 0)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                // Unique local (fc00::/7) and link-local (fe80::/10).
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80)
        }
    }
}

#[cfg(test)]
#[path = "web_fetch_tests.rs"]
mod tests;
