//! What `MCPT_REDIS_URL` names: one Redis or the seed nodes of a Redis Cluster.

/// What `MCPT_REDIS_URL` names: one Redis, or the seed nodes of a Redis Cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// One Redis: a `redis://`, `rediss://` or `unix://` URL.
    Single(String),
    /// Redis Cluster: one `redis://` (or `rediss://`) URL per seed node.
    Cluster(Vec<String>),
}

impl RedisTarget {
    /// Read `url`: `redis+cluster://[user:pass@]host:port,host:port` (`rediss+cluster://`
    /// for TLS) or a comma-separated list of `redis://` URLs is a cluster; one URL is one
    /// Redis. `None` when it is neither.
    pub fn parse(url: &str) -> Option<RedisTarget> {
        let url = url.trim();
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
