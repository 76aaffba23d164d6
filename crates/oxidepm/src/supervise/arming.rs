//! The tasks an app's spec asks the daemon to run beside it — cron
//! restarts, health checks and the file watch — armed anew whenever the spec
//! changes; a memory limit wakes the limit watch (`sampler::run`). Each
//! task holds the epoch it was armed for and ends by itself once the app's
//! epoch moves on, so re-arming never needs to find the old tasks.

use super::supervisor::Supervisor;
use super::{automation, health, watch};

impl Supervisor {
    /// (Re)arms the cron and health tasks of app `id` for its current spec.
    pub fn arm(&mut self, id: u64) {
        let Some(app) = self.app_mut(id) else {
            return;
        };
        app.auto_epoch += 1;
        let epoch = app.auto_epoch;
        let limited = app.spec.max_memory_bytes.is_some();
        let name = app.spec.name.clone();
        let cron = app.spec.cron_restart.clone();
        let check = app.spec.health.clone();
        // Dropping the sender ends the watch armed for the old spec.
        app.watch_stop = None;
        let watch = app.spec.watch.clone().map(|spec| watch::Armed {
            id,
            epoch,
            spec,
            cwd: app.spec.cwd.clone().unwrap_or_else(|| "/".into()).into(),
            user: app.spec.user.clone(),
        });
        if limited {
            self.limits_armed.notify_one();
        }
        self.tell_specs_changed();
        let Some(shared) = self.shared() else {
            return;
        };
        if let Some(armed) = watch {
            let stop = watch::arm(shared.clone(), armed);
            if let Some(app) = self.app_mut(id) {
                app.watch_stop = Some(stop);
            }
        }
        if let Some(expr) = cron {
            match automation::parse_cron(&expr) {
                Ok(cron) => {
                    tokio::spawn(automation::cron_loop(shared.clone(), id, epoch, cron, expr));
                }
                Err(e) => log::error!("{name}: {e}; no cron restarts"),
            }
        }
        if let Some(h) = check {
            tokio::spawn(health::run(shared, id, epoch, h));
        }
    }
}
