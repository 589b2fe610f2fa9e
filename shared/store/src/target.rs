//! What `MCPT_REDIS_URL` names: one Redis, the seed nodes of a Redis Cluster, or the
//! sentinels that know a primary.

/// What `MCPT_REDIS_URL` names: one Redis, the seed nodes of a Redis Cluster, or a primary
/// behind Redis Sentinel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// One Redis: a `redis://`, `rediss://` or `unix://` URL.
    Single(String),
    /// Redis Cluster: one `redis://` (or `rediss://`) URL per seed node.
    Cluster(Vec<String>),
    /// A primary found (and followed through failovers) by asking sentinels.
    Sentinel(SentinelTarget),
}

/// `redis+sentinel://[user:pass@]HOST[:PORT][,HOST[:PORT]…]/MASTER_NAME[/DB]` (and
/// `rediss+sentinel://` for TLS to the primary and the sentinels), the URL convention of
/// redis-sentinel-url that other task backends follow too.
#[derive(Clone, PartialEq, Eq)]
pub struct SentinelTarget {
    /// The sentinels, `host` and `port` (26379 where the URL gives none).
    pub sentinels: Vec<(String, u16)>,
    /// The name the sentinels monitor the primary under.
    pub master: String,
    /// Database number on the primary.
    pub db: i64,
    /// The primary's user (from the URL's userinfo).
    pub username: Option<String>,
    /// The primary's password (from the URL's userinfo).
    pub password: Option<String>,
    /// The sentinels' user (`?sentinel_username=`).
    pub sentinel_username: Option<String>,
    /// The sentinels' password (`?sentinel_password=`).
    pub sentinel_password: Option<String>,
    /// `rediss+sentinel://`: TLS to the sentinels and the primary.
    pub tls: bool,
}

/// Credentials stay out of logs.
impl std::fmt::Debug for SentinelTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelTarget")
            .field("sentinels", &self.sentinels)
            .field("master", &self.master)
            .field("db", &self.db)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

/// The port of a sentinel whose URL names none.
pub const DEFAULT_SENTINEL_PORT: u16 = 26379;

impl SentinelTarget {
    fn parse(url: &str) -> Option<SentinelTarget> {
        let (tls, rest) = if let Some(rest) = url.strip_prefix("redis+sentinel://") {
            (false, rest)
        } else {
            (true, url.strip_prefix("rediss+sentinel://")?)
        };
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = rest.split_once('/')?;
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        let (username, password) = match userinfo {
            None => (None, None),
            Some(info) => {
                let (user, pass) = info.split_once(':').unwrap_or((info, ""));
                let user = percent_decode(user)?;
                let pass = percent_decode(pass)?;
                (
                    (!user.is_empty()).then_some(user),
                    (!pass.is_empty()).then_some(pass),
                )
            }
        };
        let sentinels = hosts
            .split(',')
            .map(|h| sentinel_address(h.trim()))
            .collect::<Option<Vec<_>>>()?;
        let mut parts = path.trim_end_matches('/').split('/');
        let master = percent_decode(parts.next()?)?;
        let db = match parts.next() {
            None => 0,
            Some(db) => db.parse().ok().filter(|d| *d >= 0)?,
        };
        if master.is_empty() || parts.next().is_some() {
            return None;
        }
        let (mut sentinel_username, mut sentinel_password) = (None, None);
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=')?;
            let value = Some(percent_decode(value)?).filter(|v| !v.is_empty());
            match key {
                "sentinel_username" => sentinel_username = value,
                "sentinel_password" => sentinel_password = value,
                _ => return None,
            }
        }
        Some(SentinelTarget {
            sentinels,
            master,
            db,
            username,
            password,
            sentinel_username,
            sentinel_password,
            tls,
        })
    }
}

/// `host`, `host:port` or `[v6]:port`, the port 26379 when absent.
fn sentinel_address(s: &str) -> Option<(String, u16)> {
    let (host, port) = if let Some(v6) = s.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        match after {
            "" => (host, None),
            _ => (host, Some(after.strip_prefix(':')?)),
        }
    } else {
        match s.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (s, None),
        }
    };
    let port = match port {
        None => DEFAULT_SENTINEL_PORT,
        Some(p) => p.parse().ok().filter(|p| *p > 0)?,
    };
    let valid = !host.is_empty() && !host.contains(['/', '@', ',', ' ', '?']);
    valid.then(|| (host.to_owned(), port))
}

/// `%XX` escapes decoded; `None` for a malformed escape or bytes that are not UTF-8.
/// Hand-written: `percent_encoding` passes a malformed escape through, and a mistyped
/// password should be refused, not sent as typed.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

impl RedisTarget {
    /// Read `url`: `redis+cluster://[user:pass@]host:port,host:port` (`rediss+cluster://`
    /// for TLS) or a comma-separated list of `redis://` URLs is a cluster;
    /// `redis+sentinel://…` ([`SentinelTarget`]) a primary behind sentinels; one URL is one
    /// Redis. `None` when it is none of these.
    pub fn parse(url: &str) -> Option<RedisTarget> {
        let url = url.trim();
        if url.starts_with("redis+sentinel://") || url.starts_with("rediss+sentinel://") {
            return SentinelTarget::parse(url).map(RedisTarget::Sentinel);
        }
        for (scheme, node_scheme) in [
            ("redis+cluster://", "redis://"),
            ("rediss+cluster://", "rediss://"),
        ] {
            if let Some(rest) = url.strip_prefix(scheme) {
                let (auth, hosts) = match rest.rsplit_once('@') {
                    Some((auth, hosts)) if !auth.is_empty() => (format!("{auth}@"), hosts),
                    Some(_) => return None,
                    None => (String::new(), rest),
                };
                let nodes = hosts
                    .trim_end_matches('/')
                    .split(',')
                    .map(|h| {
                        host_port(h.trim()).then(|| format!("{node_scheme}{auth}{}", h.trim()))
                    })
                    .collect::<Option<Vec<_>>>()?;
                return Some(RedisTarget::Cluster(nodes));
            }
        }
        if url.contains(',') {
            let nodes = url
                .split(',')
                .map(str::trim)
                .filter(|u| !u.is_empty())
                .map(|u| {
                    let rest = u
                        .strip_prefix("redis://")
                        .or_else(|| u.strip_prefix("rediss://"))?;
                    let hosts = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
                    let host = hosts.split(['/', '?']).next().unwrap_or_default();
                    host_port(host).then(|| u.to_owned())
                })
                .collect::<Option<Vec<_>>>()?;
            return (!nodes.is_empty()).then_some(RedisTarget::Cluster(nodes));
        }
        (url.starts_with("redis://") || url.starts_with("rediss://") || url.starts_with("unix://"))
            .then(|| RedisTarget::Single(url.to_owned()))
    }
}

/// `host:port` with a non-empty host and a port from 1 to 65535.
fn host_port(s: &str) -> bool {
    s.rsplit_once(':').is_some_and(|(host, port)| {
        !host.is_empty()
            && !host.contains(['/', '@', ',', ' '])
            && port.parse::<u16>().is_ok_and(|p| p > 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_urls_name_the_sentinels_the_primary_and_both_credentials() {
        let Some(RedisTarget::Sentinel(t)) = RedisTarget::parse(
            "redis+sentinel://app:p%40ss@s1:26380,s2,[::1]:26381/mymaster/2?sentinel_username=sen&sentinel_password=x%2Fy",
        ) else {
            panic!("not a sentinel target");
        };
        assert_eq!(
            t.sentinels,
            vec![
                ("s1".to_owned(), 26380),
                ("s2".to_owned(), DEFAULT_SENTINEL_PORT),
                ("::1".to_owned(), 26381)
            ]
        );
        assert_eq!(t.master, "mymaster");
        assert_eq!(t.db, 2);
        assert_eq!(t.username.as_deref(), Some("app"));
        assert_eq!(t.password.as_deref(), Some("p@ss"));
        assert_eq!(t.sentinel_username.as_deref(), Some("sen"));
        assert_eq!(t.sentinel_password.as_deref(), Some("x/y"));
        assert!(!t.tls);
        assert!(!format!("{t:?}").contains("p@ss"), "{t:?}");

        let Some(RedisTarget::Sentinel(t)) =
            RedisTarget::parse("rediss+sentinel://:secret@10.0.0.5/primary")
        else {
            panic!("not a sentinel target");
        };
        assert!(t.tls);
        assert_eq!(
            (t.username, t.password.as_deref(), t.db),
            (None, Some("secret"), 0)
        );

        for bad in [
            "redis+sentinel://s1:26379",
            "redis+sentinel://s1:26379/",
            "redis+sentinel://s1:0/m",
            "redis+sentinel://s1:x/m",
            "redis+sentinel://,s2/m",
            "redis+sentinel://s1/m/-1",
            "redis+sentinel://s1/m/0/extra",
            "redis+sentinel://s1/m?other=1",
            "redis+sentinel://u:%zz@s1/m",
        ] {
            assert_eq!(RedisTarget::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn redis_url_names_one_redis_or_cluster_nodes() {
        let single = |u: &str| Some(RedisTarget::Single(u.to_owned()));
        let cluster = |n: &[&str]| {
            Some(RedisTarget::Cluster(
                n.iter().map(|s| (*s).to_owned()).collect(),
            ))
        };
        assert_eq!(
            RedisTarget::parse("redis://127.0.0.1:6379"),
            single("redis://127.0.0.1:6379")
        );
        assert_eq!(
            RedisTarget::parse("unix:///tmp/r.sock"),
            single("unix:///tmp/r.sock")
        );
        assert_eq!(
            RedisTarget::parse("redis+cluster://10.0.0.1:7000,10.0.0.2:7001"),
            cluster(&["redis://10.0.0.1:7000", "redis://10.0.0.2:7001"])
        );
        assert_eq!(
            RedisTarget::parse("rediss+cluster://u:p@a:1"),
            cluster(&["rediss://u:p@a:1"])
        );
        assert_eq!(
            RedisTarget::parse("redis://a:1, redis://:pw@b:2/0"),
            cluster(&["redis://a:1", "redis://:pw@b:2/0"])
        );
        for bad in [
            "redis+cluster://",
            "redis+cluster://a",
            "redis+cluster://a:1,",
            "redis+cluster://a:0",
            "redis+cluster://a:99999",
            "redis+cluster://@a:1",
            "redis://a:1,http://b:2",
            "redis://a:1,redis://b",
            "http://a:1",
            "a:1,b:2",
        ] {
            assert_eq!(RedisTarget::parse(bad), None, "{bad}");
        }
    }
}
