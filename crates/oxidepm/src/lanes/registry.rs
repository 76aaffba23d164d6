//! The registry of names on a shared server: `oxidepm:agents`, a hash
//! whose fields are agent and responder-app names and whose values are
//! `<host id> <lease end, ms>`. Names are unique across the hosts sharing
//! a server because each host claims its names here before it makes
//! anything for them. Every operation is one Lua script, so a claim is
//! atomic, and the clock is the server's (`TIME`), so hosts' clocks need
//! not agree. A host that disappears stops renewing, and its names are
//! free once their leases end.

use super::server::Con;

/// The registry's key.
pub const REGISTRY_KEY: &str = "oxidepm:agents";

/// Claims (`all`: every name or none) or renews (`each`: every name not
/// held by another host) names for a host; returns, for each name another
/// host holds, the name, that host and the milliseconds its lease has
/// left. Values that are not `<host> <ms>` are taken as free.
const CLAIM: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local host = ARGV[1]
local lease = tonumber(ARGV[2])
local all = ARGV[3] == 'all'
local lost = {}
local held = {}
for i = 4, #ARGV do
  local v = redis.call('HGET', KEYS[1], ARGV[i])
  if v then
    local owner, ends = string.match(v, '^(%S+) (%d+)$')
    if owner and owner ~= host and tonumber(ends) > now then
      table.insert(lost, ARGV[i])
      table.insert(lost, owner)
      table.insert(lost, tostring(tonumber(ends) - now))
      held[ARGV[i]] = true
    end
  end
end
if all and #lost > 0 then
  return lost
end
for i = 4, #ARGV do
  if not held[ARGV[i]] then
    redis.call('HSET', KEYS[1], ARGV[i], host .. ' ' .. tostring(now + lease))
  end
end
return lost
"#;

/// Deletes the names a host holds; others' are left alone.
const RELEASE: &str = r#"
local n = 0
for i = 2, #ARGV do
  local v = redis.call('HGET', KEYS[1], ARGV[i])
  if v and string.match(v, '^(%S+) ') == ARGV[1] then
    redis.call('HDEL', KEYS[1], ARGV[i])
    n = n + 1
  end
end
return n
"#;

/// Frees a name another host holds: `{0}` when nobody holds it, `{1,
/// value}` when the asking host does (left alone), `{2, value}` when it
/// was freed.
const FORCE: &str = r#"
local v = redis.call('HGET', KEYS[1], ARGV[2])
if not v then
  return {0, ''}
end
if string.match(v, '^(%S+) ') == ARGV[1] then
  return {1, v}
end
redis.call('HDEL', KEYS[1], ARGV[2])
return {2, v}
"#;

/// A name another host holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    /// The name.
    pub name: String,
    /// The host holding it.
    pub host: String,
    /// Milliseconds its lease has left.
    pub ms_left: u64,
}

/// Who held a name before `lanes release --force`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Forced {
    /// Nobody.
    Free,
    /// This host (left alone).
    Own,
    /// Another host, whose claim is gone now.
    Freed {
        /// That host.
        host: String,
    },
}

/// A name's entry: its host and when its lease ends (server ms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The host holding it.
    pub host: String,
    /// When its lease ends, in the server's milliseconds.
    pub ends_ms: u64,
}

async fn run_claim(
    con: &mut Con,
    host: &str,
    lease_ms: u64,
    mode: &str,
    names: &[String],
) -> redis::RedisResult<Vec<Taken>> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let flat: Vec<String> = redis::cmd("EVAL")
        .arg(CLAIM)
        .arg(1)
        .arg(REGISTRY_KEY)
        .arg(host)
        .arg(lease_ms)
        .arg(mode)
        .arg(names)
        .query_async(con)
        .await?;
    Ok(flat
        .chunks(3)
        .filter_map(|c| match c {
            [name, host, ms] => Some(Taken {
                name: name.clone(),
                host: host.clone(),
                ms_left: ms.parse().unwrap_or(0),
            }),
            _ => None,
        })
        .collect())
}

/// Claims every name in `names` for `host`, or none: `Err(taken)` names
/// the first held by another host whose lease has not ended.
pub async fn claim(
    con: &mut Con,
    host: &str,
    lease_ms: u64,
    names: &[String],
) -> redis::RedisResult<Result<(), Taken>> {
    Ok(
        match run_claim(con, host, lease_ms, "all", names)
            .await?
            .into_iter()
            .next()
        {
            Some(t) => Err(t),
            None => Ok(()),
        },
    )
}

/// Renews `host`'s lease of each name (and claims those nobody holds);
/// returns the names another host holds now.
pub async fn renew(
    con: &mut Con,
    host: &str,
    lease_ms: u64,
    names: &[String],
) -> redis::RedisResult<Vec<Taken>> {
    run_claim(con, host, lease_ms, "each", names).await
}

/// Releases the names among `names` that `host` holds.
pub async fn release(con: &mut Con, host: &str, names: &[String]) -> redis::RedisResult<()> {
    if names.is_empty() {
        return Ok(());
    }
    redis::cmd("EVAL")
        .arg(RELEASE)
        .arg(1)
        .arg(REGISTRY_KEY)
        .arg(host)
        .arg(names)
        .query_async::<i64>(con)
        .await
        .map(|_| ())
}

/// Frees `name` unless `host` holds it.
pub async fn force_release(con: &mut Con, host: &str, name: &str) -> redis::RedisResult<Forced> {
    let (code, value): (i64, String) = redis::cmd("EVAL")
        .arg(FORCE)
        .arg(1)
        .arg(REGISTRY_KEY)
        .arg(host)
        .arg(name)
        .query_async(con)
        .await?;
    Ok(match code {
        0 => Forced::Free,
        1 => Forced::Own,
        _ => Forced::Freed {
            host: parse(&value).map(|l| l.host).unwrap_or(value),
        },
    })
}

/// The entries of `names` (`None`: nobody holds it).
pub async fn leases(con: &mut Con, names: &[String]) -> redis::RedisResult<Vec<Option<Lease>>> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let values: Vec<Option<String>> = redis::cmd("HMGET")
        .arg(REGISTRY_KEY)
        .arg(names)
        .query_async(con)
        .await?;
    Ok(values
        .iter()
        .map(|v| v.as_deref().and_then(parse))
        .collect())
}

/// The server's clock, in ms.
pub async fn now_ms(con: &mut Con) -> redis::RedisResult<u64> {
    let (s, us): (u64, u64) = redis::cmd("TIME").query_async(con).await?;
    Ok(s * 1000 + us / 1000)
}

/// `<host> <ms>`, as the scripts write it.
fn parse(v: &str) -> Option<Lease> {
    let (host, ms) = v.split_once(' ')?;
    Some(Lease {
        host: host.to_string(),
        ends_ms: ms.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_a_host_and_a_time() {
        assert_eq!(
            parse("host-a 1700"),
            Some(Lease {
                host: "host-a".into(),
                ends_ms: 1700
            })
        );
        assert_eq!(parse("garbage"), None);
        assert_eq!(parse("h x"), None);
    }
}
