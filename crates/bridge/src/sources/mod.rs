//! The bridge's sources, each behind the [`Source`](crate::Source) trait.

pub mod consult;
pub mod discord;
pub mod email;
pub mod webhook;
