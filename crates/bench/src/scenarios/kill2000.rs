//! `kill2000`: N idle apps online, then the wall time of `oxidepm kill`
//! (every app stopped, the daemon gone).

use super::{with_sandbox, Plan};
use crate::report::{ms, Row};
use crate::sandbox::{Bins, Result};
use std::time::{Duration, Instant};

pub fn run(bins: &Bins, plan: &Plan) -> Result<Vec<Row>> {
    let n = if plan.quick { 200 } else { 2000 };
    with_sandbox(bins, |sb| {
        let pid = sb.ping()?;
        let daemon = crate::procfs::stat(pid).ok_or("the daemon is gone")?;
        let up = sb.start_sleepers(n, Duration::from_secs(180))?;
        say!("  {n} apps online after {:.1} s", up.as_secs_f64());
        let t0 = Instant::now();
        sb.run(&["kill"])?;
        let took = t0.elapsed();
        let deadline = Instant::now() + Duration::from_secs(30);
        while crate::procfs::alive(&daemon) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let gone = t0.elapsed();
        let k = ms(took);
        say!(
            "  `oxidepm kill`: {k:.0} ms; daemon gone after {:.0} ms",
            ms(gone)
        );
        say!("  target: <= 2 s for 2,000 apps");
        Ok(vec![
            Row::check(
                format!("kill {n} apps"),
                format!("{k:.0} ms"),
                "<= 2000 ms",
                k <= 2000.0,
            ),
            Row::info(
                format!("kill {n} apps: daemon gone"),
                format!("{:.0} ms", ms(gone)),
            ),
        ])
    })
}
