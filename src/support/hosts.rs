//! The hosts an item may reach (`sandbox.network: [hosts…]`): the list as the manifest gives
//! it, and whether a host a client asks for is on it. The proxy that enforces it is
//! `process::egress`.

/// The hosts an item may reach.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Allow {
    rules: Vec<Rule>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Rule {
    /// Lower case; for a `*.domain` entry, `.domain`.
    host: String,
    wildcard: bool,
    port: Option<u16>,
}

impl Allow {
    /// The list as the manifest gives it; an entry that is not a host is an error naming it.
    pub fn parse(entries: &[String]) -> Result<Allow, String> {
        let mut rules = Vec::with_capacity(entries.len());
        for e in entries {
            rules.push(parse_entry(e).ok_or_else(|| {
                format!("`{e}` is not a host, `host:port`, `*.domain` or an IP address")
            })?);
        }
        Ok(Allow { rules })
    }

    /// Whether `host` (as a client asked for it) at `port` is on the list.
    pub fn allows(&self, host: &str, port: u16) -> bool {
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .trim_end_matches('.')
            .to_ascii_lowercase();
        self.rules.iter().any(|r| {
            let port_ok = r.port.map_or(port == 443 || port == 80, |p| p == port);
            let host_ok = if r.wildcard {
                host.ends_with(&r.host) && host.len() > r.host.len()
            } else {
                host == r.host
            };
            port_ok && host_ok
        })
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

fn parse_entry(e: &str) -> Option<Rule> {
    let e = e.trim();
    if e.is_empty() || e.contains("://") || e.contains('/') || e.contains('@') {
        return None;
    }
    let (host, port) = if let Some(rest) = e.strip_prefix('[') {
        // `[v6]` or `[v6]:port`.
        let (h, after) = rest.split_once(']')?;
        h.parse::<std::net::Ipv6Addr>().ok()?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?.parse::<u16>().ok()?),
        };
        (h.to_ascii_lowercase(), port)
    } else if e.parse::<std::net::Ipv6Addr>().is_ok() {
        (e.to_ascii_lowercase(), None)
    } else {
        match e.rsplit_once(':') {
            Some((h, p)) => (h.to_ascii_lowercase(), Some(p.parse::<u16>().ok()?)),
            None => (e.to_ascii_lowercase(), None),
        }
    };
    if port == Some(0) {
        return None;
    }
    let (host, wildcard) = match host.strip_prefix("*.") {
        Some(domain) => (format!(".{domain}"), true),
        None => (host, false),
    };
    let name = host.trim_start_matches('.');
    let valid = !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == ':')
        && !name.split('.').any(str::is_empty);
    valid.then_some(Rule {
        host,
        wildcard,
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allow(list: &[&str]) -> Allow {
        Allow::parse(&list.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn a_host_is_allowed_on_its_ports_and_no_other_host_is() {
        let a = allow(&[
            "api.anthropic.com",
            "*.googleapis.com",
            "127.0.0.1:8080",
            "[::1]:9",
        ]);
        assert!(a.allows("api.anthropic.com", 443));
        assert!(a.allows("API.Anthropic.com.", 80));
        assert!(!a.allows("api.anthropic.com", 22));
        assert!(!a.allows("anthropic.com", 443));
        assert!(!a.allows("api.anthropic.com.evil.net", 443));
        assert!(a.allows("generativelanguage.googleapis.com", 443));
        assert!(!a.allows("googleapis.com", 443));
        assert!(!a.allows("evilgoogleapis.com", 443));
        assert!(a.allows("127.0.0.1", 8080));
        assert!(!a.allows("127.0.0.1", 8081));
        assert!(a.allows("[::1]", 9));
    }

    #[test]
    fn an_entry_that_is_not_a_host_is_refused() {
        for bad in [
            "https://api.anthropic.com",
            "api.anthropic.com/v1",
            "user@host",
            "host:0",
            "host:99999",
            "",
            "a..b",
            "*.",
        ] {
            assert!(Allow::parse(&[bad.to_string()]).is_err(), "{bad}");
        }
    }
}
