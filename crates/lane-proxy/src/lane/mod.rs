//! What the connections of one lane share: its settings, its byte budget,
//! its rate limit, and what it holds in Redis (outboxes, consumer names).

pub mod budget;
pub mod consumers;
pub mod groups;
pub mod meter;
pub mod rate_limit;
pub mod settings;
