//! Stopping: [`Shutdown`], which every long-running loop of the bridge
//! (a source's inbound side, the outbox reader, a keepalive) watches, and
//! [`ShutdownTrigger`], which sets it off.

/// Tells long-running loops that the bridge is stopping.
#[derive(Clone, Debug)]
pub struct Shutdown(tokio::sync::watch::Receiver<bool>);

/// Sets off a [`Shutdown`].
#[derive(Debug)]
pub struct ShutdownTrigger(tokio::sync::watch::Sender<bool>);

impl Shutdown {
    /// A new pair.
    pub fn new() -> (ShutdownTrigger, Shutdown) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        (ShutdownTrigger(tx), Shutdown(rx))
    }

    /// Whether the bridge is stopping.
    pub fn is_set(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once the bridge is stopping.
    pub async fn wait(&mut self) {
        // An error means the trigger is gone, which also means stopping.
        let _ = self.0.wait_for(|s| *s).await;
    }
}

impl ShutdownTrigger {
    /// Tells every [`Shutdown`] to stop.
    pub fn trigger(&self) {
        let _ = self.0.send(true);
    }
}
