//! Integration tests: the real binaries, real processes, real sockets.
//! Each test gets its own OXIDEPM_HOME and stops everything it started.

// Tests wait for processes and sleep between looks: what blocks here
// blocks a test, never the daemon.
#![allow(clippy::disallowed_methods)]

mod access;
mod attach;
mod authority;
mod bridge;
mod cli_manners;
mod cli_reads;
mod compat;
mod connections;
mod consult;
mod consult_outage;
mod containment;
mod discord;
mod event_feed;
mod event_stream;
mod foreign_files;
mod grant_uids;
mod harness;
mod home;
mod hosts;
mod inside;
mod journal;
mod journal_real;
mod lane_budgets;
mod lane_transactions;
mod lanes;
mod lanes_security;
mod lifecycle;
mod log_search;
mod logs_big;
mod logwriter;
mod mcp;
mod mcp_fuzz;
mod mcp_inspector;
mod mcp_owed;
mod mcp_subscribe;
mod memory_pressure;
mod metrics;
mod monit;
mod ops;
mod ops_limits;
mod pm2_files;
mod pm2_habits;
mod quickstart;
mod recovery;
mod reload;
mod reload_config;
mod responder_lanes;
mod responders;
mod retention;
mod routes;
mod shared_redis;
mod start_like_pm2;
mod startup;
mod storage;
mod storms;
mod supervision;
mod verbs;
mod watch;
