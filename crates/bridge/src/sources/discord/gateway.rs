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
//! counts (`lost` in `bridge:stats`, once Redis takes it) and logs one it
//! has to give up. When the queue is full the gateway waits: Discord
//! resumes it later. Each message carries the session's place after it,
//! which the publishing task saves once the message is in ([`Saver`]).

use super::close;
use super::dedupe::{self, Seen};
use super::message;
use super::resume::{Mark, Saver};
use crate::publish::{PublishError, Publisher};
use crate::shutdown::Shutdown;
use oxidepm_lanes::bridge_config::DiscordConfig;
use oxidepm_lanes::Secret;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use twilight_gateway::{
    CloseFrame, ConfigBuilder, Event, EventTypeFlags, Intents, Shard, ShardId, StreamExt,
};
use twilight_model::gateway::payload::incoming::{MessageCreate, Ready};

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

/// What the gateway hands the publishing task, in order.
#[derive(Debug)]
enum Item {
    /// A message to publish, and the session's place after it.
    Message(Box<MessageCreate>, Option<Mark>),
    /// The session's place after something with nothing to publish.
    Position(Mark),
    /// The saved session's resume was refused: a new session began.
    ResumeRefused,
}

/// The session's place now (after the event just received).
fn mark(shard: &Shard) -> Option<Mark> {
    let s = shard.session()?;
    Some(Mark {
        session: s.id().into(),
        seq: s.sequence(),
        resume_url: shard.resume_url()?.into(),
    })
}

/// The intents the source identifies with.
pub fn intents() -> Intents {
    Intents::GUILDS | Intents::GUILD_MESSAGES | Intents::DIRECT_MESSAGES | Intents::MESSAGE_CONTENT
}

/// Runs the session until `shutdown`; `Err` when the gateway ended it for
/// good (a refused token or intents: a fatal close code).
pub async fn run(
    cfg: Arc<DiscordConfig>,
    token: &Secret,
    publisher: Publisher,
    mut shutdown: Shutdown,
    counts: Arc<Counts>,
    reach: Arc<super::reach::Reach>,
) -> Result<(), super::DiscordError> {
    let (mut shard, resuming) = open(&cfg, token, &publisher).await;
    let (tx, rx) = mpsc::channel(QUEUE);
    let publishing = tokio::spawn(publish_all(
        cfg.clone(),
        publisher,
        rx,
        counts,
        shutdown.clone(),
        reach,
    ));
    let mut session = Session {
        cfg,
        tx,
        own_id: None,
        resuming,
        last_close: None,
        closes: 0,
    };
    let wanted = EventTypeFlags::READY | EventTypeFlags::RESUMED | EventTypeFlags::MESSAGE_CREATE;
    loop {
        let event = tokio::select! {
            e = shard.next_event(wanted) => e,
            _ = shutdown.wait() => break,
        };
        let flow = match event {
            // The stream has ended: polling it again would panic.
            None => {
                let refusal = session.refusal();
                drop(session);
                let _ = publishing.await;
                return Err(super::DiscordError::Refused(refusal));
            }
            // twilight reconnects by itself after these.
            Some(Err(e)) => {
                log::warn!("discord: gateway: {e}");
                Flow::Go
            }
            Some(Ok(Event::GatewayClose(frame))) => session.closed(frame, &mut shutdown).await,
            Some(Ok(Event::Ready(r))) => session.ready(mark(&shard), &r).await,
            Some(Ok(Event::Resumed)) => {
                session.closes = 0;
                session.resuming = false;
                log::info!("discord: session resumed");
                Flow::Go
            }
            Some(Ok(Event::MessageCreate(m))) => session.message(mark(&shard), m).await,
            Some(Ok(_)) => Flow::Go,
        };
        if let Flow::Stop = flow {
            break;
        }
    }
    close_resumable(&mut shard).await;
    // The publishing task saves where it got to: dispatches that arrive
    // while closing, or that it could not publish, are replayed to the
    // next bridge.
    drop(session);
    let _ = publishing.await;
    Ok(())
}

/// The shard of a session: the session of the last run resumed when one
/// was saved (the `bool`: whether it was).
async fn open(cfg: &DiscordConfig, token: &Secret, publisher: &Publisher) -> (Shard, bool) {
    let mut b = ConfigBuilder::new(token.expose().to_string(), intents())
        .max_message_size(Some(close::MAX_MESSAGE_BYTES));
    if let Some(u) = &cfg.settings.gateway_url {
        b = b.proxy_url(u.clone());
    }
    let mut con = publisher.connection();
    let mut resuming = false;
    if let Some(saved) = super::resume::load(&mut con).await {
        log::info!("discord: resuming the session of the last run");
        b = b.session(saved.session).resume_url(saved.resume_url);
        resuming = true;
    }
    (Shard::with_config(ShardId::ONE, b.build()), resuming)
}

/// Closes the session resumable: a bridge started again soon picks up
/// where this one was.
async fn close_resumable(shard: &mut Shard) {
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
}

/// Whether the gateway loop goes on after an event.
enum Flow {
    Go,
    Stop,
}

/// The gateway loop's state between events.
struct Session {
    cfg: Arc<DiscordConfig>,
    /// To the publishing task; dropped to tell it the session is over.
    tx: mpsc::Sender<Item>,
    /// The bot's own user id, once READY said it.
    own_id: Option<u64>,
    /// A saved session is being resumed.
    resuming: bool,
    /// The last close frame.
    last_close: Option<(u16, String)>,
    /// Closes that came without a session coming up in between.
    closes: u32,
}

impl Session {
    /// Why the gateway ended the session for good: its last close frame.
    fn refusal(&mut self) -> close::Refusal {
        let (code, reason) = self.last_close.take().unzip();
        close::Refusal {
            code,
            reason: reason.unwrap_or_default(),
            token_file: self.cfg.token_file.clone(),
        }
    }

    /// The gateway closed the connection: twilight resumes it, after a
    /// pause that grows with the closes in a row.
    async fn closed(&mut self, frame: Option<CloseFrame<'_>>, shutdown: &mut Shutdown) -> Flow {
        let (code, reason) =
            frame.map_or((1006, String::new()), |f| (f.code, f.reason.into_owned()));
        self.last_close = Some((code, reason.clone()));
        if close::is_fatal(code) {
            return Flow::Go;
        }
        self.closes += 1;
        let closes = self.closes;
        let pause = close::pause_after(closes);
        log::warn!(
            "discord: the gateway closed the connection (code {code}{}{}); resuming{}",
            if reason.is_empty() { "" } else { ": " },
            reason,
            if pause.is_zero() {
                String::new()
            } else {
                format!(" in {} s ({closes} closes in a row)", pause.as_secs())
            }
        );
        if code == 1006 && closes == 1 {
            log::info!(
                "discord: (1006: the connection broke, or the gateway sent a message over {} MiB, which is refused)",
                close::MAX_MESSAGE_BYTES >> 20
            );
        }
        if !pause.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = shutdown.wait() => return Flow::Stop,
            }
        }
        Flow::Go
    }

    /// A session came up (a new one: a saved one's resume was refused);
    /// `at` is its place.
    async fn ready(&mut self, at: Option<Mark>, r: &Ready) -> Flow {
        self.closes = 0;
        if std::mem::take(&mut self.resuming) {
            log::warn!(
                "discord: the gateway refused to resume the last session; \
                 what was sent since its last save is not replayed"
            );
            if self.tx.send(Item::ResumeRefused).await.is_err() {
                return Flow::Stop;
            }
        }
        if let Some(m) = at {
            if self.tx.send(Item::Position(m)).await.is_err() {
                return Flow::Stop;
            }
        }
        self.own_id = Some(r.user.id.get());
        log::info!(
            "discord: connected as {} ({}) in {} servers",
            r.user.name,
            r.user.id,
            r.guilds.len()
        );
        Flow::Go
    }

    /// A message: handed to the publishing task when it is wanted, else
    /// only the session's place after it (`at`).
    async fn message(&mut self, at: Option<Mark>, m: Box<MessageCreate>) -> Flow {
        let item = if message::wanted(&m, self.own_id, &self.cfg) {
            Item::Message(m, at)
        } else if let Some(at) = at {
            Item::Position(at)
        } else {
            return Flow::Go;
        };
        if self.tx.send(item).await.is_err() {
            return Flow::Stop;
        }
        Flow::Go
    }
}

/// Publishes every received message once, in order, and saves the
/// session's place after what it published.
async fn publish_all(
    cfg: Arc<DiscordConfig>,
    publisher: Publisher,
    mut rx: mpsc::Receiver<Item>,
    counts: Arc<Counts>,
    shutdown: Shutdown,
    reach: Arc<super::reach::Reach>,
) {
    let mut seen = Seen::new(cfg.settings.dedupe_ids);
    let mut con = publisher.connection();
    match dedupe::load(&mut con, &mut seen).await {
        Ok(n) => log::debug!("discord: {n} message ids taken before"),
        Err(e) => log::warn!("discord: cannot read the message ids taken before ({e})"),
    }
    let mut saver = Saver::new(con);
    loop {
        let item = if saver.dirty() {
            match tokio::time::timeout(saver.due_in(), rx.recv()).await {
                Ok(i) => i,
                Err(_) => {
                    saver.save().await;
                    continue;
                }
            }
        } else {
            rx.recv().await
        };
        let Some(item) = item else { break };
        match item {
            Item::Position(at) => saver.advance(at),
            Item::ResumeRefused => saver.resume_refused(),
            Item::Message(m, at) => {
                match publish_one(&cfg, &publisher, &m, &mut seen, &counts, &shutdown).await {
                    Outcome::Taken(Some(agent)) => {
                        reach.record(&agent, &m.channel_id.to_string()).await;
                    }
                    Outcome::Taken(None) => {}
                    Outcome::Lost => saver.lost(),
                    // Not advanced past it: the next bridge's resume
                    // replays it.
                    Outcome::Stopping => break,
                }
                if let Some(at) = at {
                    saver.advance(at);
                }
            }
        }
        saver.maybe_save().await;
    }
    saver.save().await;
}

/// What became of one message.
enum Outcome {
    /// Published (to this agent's inbox, if routed), or a duplicate.
    Taken(Option<String>),
    /// Given up after `publish_attempts` tries.
    Lost,
    /// Not published, and the bridge is stopping.
    Stopping,
}

/// Publishes one message unless it was taken before.
async fn publish_one(
    cfg: &DiscordConfig,
    publisher: &Publisher,
    m: &MessageCreate,
    seen: &mut Seen,
    counts: &Counts,
    shutdown: &Shutdown,
) -> Outcome {
    let id = m.id.get();
    if seen.contains(id) {
        counts.duplicates.fetch_add(1, Ordering::Relaxed);
        log::debug!("discord: message {id} received again; dropped");
        return Outcome::Taken(None);
    }
    let msg = message::inbound(m, cfg);
    let mut pause = FIRST_PAUSE;
    let mut tries = 0;
    loop {
        tries += 1;
        let once = dedupe::once(id, cfg.settings.dedupe_ids);
        let err = match publisher.publish_once(msg.clone(), once).await {
            Ok(p) => {
                seen.insert(id);
                return Outcome::Taken(p.agent);
            }
            Err(e) => e,
        };
        if shutdown.is_set() && !matches!(err, PublishError::UnknownSource(_)) {
            log::warn!(
                "discord: message {id} not taken ({err}) as the bridge stops; \
                 the next bridge's resume replays it"
            );
            return Outcome::Stopping;
        }
        if matches!(err, PublishError::UnknownSource(_)) || tries >= cfg.publish_attempts {
            let lost = counts.lost.fetch_add(1, Ordering::Relaxed) + 1;
            log::error!(
                "discord: message {id} of channel {} not taken after {tries} tries ({err}); \
                 {lost} lost since the bridge started",
                msg.channel
            );
            return Outcome::Lost;
        }
        log::warn!("discord: message {id} not taken yet ({err}); trying again");
        let mut stop = shutdown.clone();
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stop.wait() => {}
        }
        pause = (pause * 2).min(MAX_PAUSE);
    }
}
