//! The operations a request asks for (define, start, stop, restart,
//! delete, shutdown), including the waiting a stop involves.

use super::spawn;
use super::supervisor::{lock, Shared, StopTicket};
use nix::sys::signal::Signal;
use oxidepm_proto::{Actor, AppSpec, ErrorBody, ErrorCode, Status};
use serde_json::{json, Value};
use std::time::Duration;
use tokio::time::{sleep, timeout, Instant};

/// How often a stopper looks whether the tree is gone.
const POLL: Duration = Duration::from_millis(10);

/// Waits until the ticket's tree is gone: the stop signal was already sent;
/// after `kill_timeout` everything left gets SIGKILL. Returns how it ended.
pub async fn wait_stopped(mut t: StopTicket) -> &'static str {
    let deadline = Instant::now() + t.kill_timeout;
    let start = *t.exits.borrow_and_update();
    let main_exit = async {
        while *t.exits.borrow_and_update() == start {
            if t.exits.changed().await.is_err() {
                break;
            }
        }
    };
    let mut how = "stopped by signal";
    if timeout(t.kill_timeout, main_exit).await.is_err() {
        how = "killed after kill_timeout";
    }
    // The main process is gone (or late); children that ignored the signal
    // may remain in its group or session.
    while spawn::tree_alive(t.pid) {
        if Instant::now() >= deadline {
            how = "killed after kill_timeout";
            break;
        }
        sleep(POLL).await;
    }
    if spawn::tree_alive(t.pid) {
        spawn::signal_tree(t.pid, Signal::SIGKILL);
        let until = Instant::now() + Duration::from_secs(5);
        while spawn::tree_alive(t.pid) && Instant::now() < until {
            sleep(POLL).await;
        }
    }
    how
}

/// Stops the apps `ids` concurrently and waits until each tree is gone.
pub async fn stop(shared: &Shared, ids: &[u64], actor: &Actor, keep_desired: bool) {
    let tickets: Vec<StopTicket> = {
        let mut s = lock(shared);
        ids.iter()
            .filter_map(|&id| s.begin_stop(id, actor, keep_desired))
            .collect()
    };
    let waits = tickets.into_iter().map(|t| {
        let shared = shared.clone();
        let actor = actor.clone();
        tokio::spawn(async move {
            let id = t.id;
            let how = wait_stopped(t).await;
            lock(&shared).finish_stop(id, &actor, how);
        })
    });
    for w in waits.collect::<Vec<_>>() {
        let _ = w.await;
    }
}

/// Starts the apps `ids` that are not running, in order.
pub async fn start(shared: &Shared, ids: &[u64], actor: &Actor) -> Result<Value, ErrorBody> {
    let mut out = Vec::new();
    for &id in ids {
        let mut s = lock(shared);
        let Some(app) = s.app(id) else { continue };
        let name = app.spec.name.clone();
        match app.rt.status {
            Status::Online | Status::Starting => {
                out.push(json!({"name": name, "id": id, "action": "already running"}));
            }
            Status::Stopping => {
                return Err(ErrorBody::new(
                    ErrorCode::Conflict,
                    format!("{name} is stopping; try again when it is stopped"),
                ));
            }
            Status::Stopped | Status::Errored => {
                if let Some(a) = s.app_mut(id) {
                    a.unstable = 0;
                }
                let pid = s.spawn_now(id, actor, "started")?;
                out.push(json!({"name": name, "id": id, "action": "started", "pid": pid}));
            }
        }
    }
    Ok(Value::Array(out))
}

/// Restarts the apps `ids` (starting those that are not running).
pub async fn restart(shared: &Shared, ids: &[u64], actor: &Actor) -> Result<Value, ErrorBody> {
    let running: Vec<u64> = {
        let s = lock(shared);
        ids.iter()
            .copied()
            .filter(|&id| s.app(id).is_some_and(|a| a.is_running()))
            .collect()
    };
    stop(shared, &running, actor, true).await;
    let mut out = Vec::new();
    for &id in ids {
        let mut s = lock(shared);
        let Some(app) = s.app_mut(id) else { continue };
        let name = app.spec.name.clone();
        app.unstable = 0;
        let kind = if running.contains(&id) {
            app.rt.restarts += 1;
            "restarted"
        } else {
            "started"
        };
        let pid = s.spawn_now(id, actor, kind)?;
        out.push(json!({"name": name, "id": id, "action": kind, "pid": pid}));
    }
    Ok(Value::Array(out))
}

/// Stops and forgets the apps `ids`.
pub async fn delete(shared: &Shared, ids: &[u64], actor: &Actor) -> Result<Value, ErrorBody> {
    stop(shared, ids, actor, false).await;
    let mut out = Vec::new();
    let mut s = lock(shared);
    for &id in ids {
        let name = s.names(&[id]).pop().unwrap_or_default();
        s.remove(id, actor)?;
        out.push(json!({"name": name, "id": id, "action": "deleted"}));
    }
    Ok(Value::Array(out))
}

/// Defines apps (creating or changing them), then starts those that have
/// `autostart`. A changed app that was running is restarted with its new
/// spec. All specs are checked before anything changes.
pub async fn define(
    shared: &Shared,
    specs: Vec<AppSpec>,
    actor: &Actor,
) -> Result<Value, ErrorBody> {
    let mut seen = std::collections::HashSet::new();
    for spec in &specs {
        oxidepm_proto::check_app_name(&spec.name)
            .map_err(|m| ErrorBody::new(ErrorCode::BadRequest, m))?;
        if !seen.insert(spec.name.clone()) {
            return Err(ErrorBody::new(
                ErrorCode::BadRequest,
                format!("app {:?} is defined twice in one request", spec.name),
            ));
        }
        if spec.command.is_empty() {
            return Err(ErrorBody::new(
                ErrorCode::BadRequest,
                format!("app {:?} has no command", spec.name),
            ));
        }
        if spawn::parse_signal(&spec.stop_signal).is_none() {
            return Err(ErrorBody::new(
                ErrorCode::BadRequest,
                format!(
                    "app {:?}: unknown stop signal {:?}",
                    spec.name, spec.stop_signal
                ),
            ));
        }
    }
    let mut actions = Vec::new();
    let mut to_restart = Vec::new();
    let mut to_start = Vec::new();
    {
        let mut s = lock(shared);
        for spec in specs {
            let existing = s.apps().find(|a| a.spec.name == spec.name).map(|a| a.id);
            let autostart = spec.autostart;
            let (id, action) = match existing {
                None => (s.insert(spec, actor)?, "created"),
                Some(id) => {
                    let app = s.app(id).expect("found");
                    if app.spec == spec {
                        (id, "unchanged")
                    } else {
                        let running = app.is_running();
                        s.replace_spec(id, spec, actor)?;
                        if running {
                            to_restart.push(id);
                        }
                        (id, "changed")
                    }
                }
            };
            if autostart && !to_restart.contains(&id) {
                to_start.push(id);
            }
            actions.push((id, action));
        }
    }
    if !to_restart.is_empty() {
        restart(shared, &to_restart, actor).await?;
    }
    let started = start(shared, &to_start, actor).await;
    let s = lock(shared);
    let out: Vec<Value> = actions
        .into_iter()
        .map(|(id, action)| {
            let a = s.app(id);
            json!({
                "id": id,
                "name": a.map(|a| a.spec.name.clone()),
                "action": action,
                "status": a.map(|a| a.rt.status),
                "pid": a.and_then(|a| a.rt.pid),
            })
        })
        .collect();
    started?;
    Ok(Value::Array(out))
}

/// Stops every app for a daemon shutdown; the running set stays recorded
/// (desired state) so that `resurrect` can bring it back.
pub async fn shutdown(shared: &Shared, actor: &Actor) {
    let ids: Vec<u64> = {
        let mut s = lock(shared);
        s.shutting_down = true;
        s.apps().map(|a| a.id).collect()
    };
    stop(shared, &ids, actor, true).await;
}
