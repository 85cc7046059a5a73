//! What a workflow's schedule asks for, on data only: its cron expression (`cron`), whether a
//! fire time is due and what the concurrency policy makes of it (`policy`), and which finished
//! runs it keeps (`history`).

pub mod cron;
pub mod history;
pub mod policy;
