//! The inbound side: one gateway session (twilight-gateway) and the task
//! that publishes what it receives.
//!
//! The session identifies with the intents GUILDS, GUILD_MESSAGES,
//! DIRECT_MESSAGES and MESSAGE_CONTENT (privileged: enabled in the
//! developer portal). twilight keeps it alive: heartbeats, and on a lost
//! connection or a RECONNECT a RESUME at the `resume_gateway_url` of READY,
//! which replays what was missed; when Discord refuses the resume, a new
//! IDENTIFY. A message can therefore arrive twice; the publishing task
//! drops one whose id it has taken lately ([`Seen`]).
//!
//! The gateway is read without waiting on Redis: messages go through a
//! bounded queue to the publishing task, which tries each up to
//! `publish_attempts` times with a growing pause while Redis is away, and
//! counts and logs one it has to give up. When the queue is full the
//! gateway waits: Discord resumes it later.

use super::dedupe::Seen;
use super::message;
use crate::config::DiscordConfig;
use crate::publish::{PublishError, Publisher};
use crate::source::Shutdown;
use oxidepm_lanes::Secret;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use twilight_gateway::{
    CloseFrame, ConfigBuilder, Event, EventTypeFlags, Intents, Shard, ShardId, StreamExt,
};
use twilight_model::gateway::payload::incoming::MessageCreate;

/// Messages received and not yet published (each within Discord's own
/// bounds on a message, and the text cut at `max_text_bytes` when taken).
const QUEUE: usize = 256;
/// First pause after a failed publish; doubled each time, at most `MAX_PAUSE`.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const MAX_PAUSE: Duration = Duration::from_secs(5);
/// How long stopping waits for the gateway to see the close frame.
const CLOSING: Duration = Duration::from_secs(2);

/// What the inbound side counted since the bridge started.
#[derive(Debug, Default)]
pub struct Counts {
    /// Messages received again and dropped.
    pub duplicates: AtomicU64,
    /// Messages given up: Redis did not take them in `publish_attempts` tries.
    pub lost: AtomicU64,
}

/// The intents the source identifies with.
pub fn intents() -> Intents {
    Intents::GUILDS | Intents::GUILD_MESSAGES | Intents::DIRECT_MESSAGES | Intents::MESSAGE_CONTENT
}

/// Runs the session until `shutdown`; `Err` when the gateway ended it for
/// good (a refused token or intents).
pub async fn run(
    cfg: Arc<DiscordConfig>,
    token: &Secret,
    publisher: Publisher,
    mut shutdown: Shutdown,
    counts: Arc<Counts>,
) -> Result<(), super::DiscordError> {
    let mut b = ConfigBuilder::new(token.expose().to_string(), intents());
    if let Some(u) = &cfg.gateway_url {
        b = b.proxy_url(u.clone());
    }
    let mut con = publisher.connection();
    if let Some(saved) = super::resume::take(&mut con).await {
        log::info!("discord: resuming the session of the last run");
        b = b.session(saved.session).resume_url(saved.resume_url);
    }
    let mut shard = Shard::with_config(ShardId::ONE, b.build());
    let (tx, rx) = mpsc::channel(QUEUE);
    let publishing = tokio::spawn(publish_all(
        cfg.clone(),
        publisher,
        rx,
        counts,
        shutdown.clone(),
    ));
    let wanted = EventTypeFlags::READY | EventTypeFlags::RESUMED | EventTypeFlags::MESSAGE_CREATE;
    let mut own_id: Option<u64> = None;
    let mut result = Ok(());
    loop {
        let event = tokio::select! {
            e = shard.next_event(wanted) => e,
            _ = shutdown.wait() => break,
        };
        match event {
            None => {
                result = Err(super::DiscordError::Closed);
                break;
            }
            // twilight reconnects by itself after these.
            Some(Err(e)) => log::warn!("discord: gateway: {e}"),
            Some(Ok(Event::Ready(r))) => {
                own_id = Some(r.user.id.get());
                log::info!(
                    "discord: connected as {} ({}) in {} servers",
                    r.user.name,
                    r.user.id,
                    r.guilds.len()
                );
            }
            Some(Ok(Event::Resumed)) => log::info!("discord: session resumed"),
            Some(Ok(Event::MessageCreate(m))) => {
                if message::wanted(&m, own_id, &cfg) && tx.send(m).await.is_err() {
                    break;
                }
            }
            Some(Ok(_)) => {}
        }
    }
    // What was taken so far: dispatches that arrive while closing are
    // replayed to the next bridge.
    let session = shard.session().cloned();
    let resume_url = shard.resume_url().map(str::to_string);
    // Resumable: a bridge started again soon picks up where this one was.
    // The close frame is sent while the shard is polled (a close is
    // yielded whatever the flags).
    shard.close(CloseFrame::RESUME);
    let _ = tokio::time::timeout(CLOSING, async {
        while let Some(Ok(e)) = shard.next_event(EventTypeFlags::empty()).await {
            if matches!(e, Event::GatewayClose(_)) {
                break;
            }
        }
    })
    .await;
    drop(tx);
    let _ = publishing.await;
    if let (Ok(()), Some(s), Some(u)) = (&result, session, resume_url) {
        super::resume::save(&mut con, &s, &u).await;
    }
    result
}

/// Publishes every received message once, in order.
async fn publish_all(
    cfg: Arc<DiscordConfig>,
    publisher: Publisher,
    mut rx: mpsc::Receiver<Box<MessageCreate>>,
    counts: Arc<Counts>,
    shutdown: Shutdown,
) {
    let mut seen = Seen::new(cfg.dedupe_ids);
    while let Some(m) = rx.recv().await {
        let id = m.id.get();
        if seen.contains(id) {
            counts.duplicates.fetch_add(1, Ordering::Relaxed);
            log::debug!("discord: message {id} received again; dropped");
            continue;
        }
        let msg = message::inbound(&m, &cfg);
        let mut pause = FIRST_PAUSE;
        let mut tries = 0;
        loop {
            tries += 1;
            let err = match publisher.publish(msg.clone()).await {
                Ok(_) => {
                    seen.insert(id);
                    break;
                }
                Err(e) => e,
            };
            let give_up = matches!(err, PublishError::UnknownSource(_))
                || tries >= cfg.publish_attempts
                || shutdown.is_set();
            if give_up {
                let lost = counts.lost.fetch_add(1, Ordering::Relaxed) + 1;
                log::error!(
                    "discord: message {id} of channel {} not taken after {tries} tries ({err}); \
                     {lost} lost since the bridge started",
                    msg.channel
                );
                break;
            }
            log::warn!("discord: message {id} not taken yet ({err}); trying again");
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }
}
