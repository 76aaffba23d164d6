//! Integration tests: the real binaries, real processes, real sockets.
//! Each test gets its own OXIDEPM_HOME and stops everything it started.

mod access;
mod authority;
mod bridge;
mod compat;
mod connections;
mod containment;
mod event_feed;
mod event_stream;
mod harness;
mod home;
mod journal;
mod journal_real;
mod lane_budgets;
mod lane_transactions;
mod lanes;
mod lanes_security;
mod lifecycle;
mod logs_big;
mod logwriter;
mod metrics;
mod monit;
mod ops;
mod ops_limits;
mod recovery;
mod retention;
mod routes;
mod start_like_pm2;
mod storage;
mod storms;
mod supervision;
