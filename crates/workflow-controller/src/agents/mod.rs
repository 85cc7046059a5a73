//! Talking to agents: what the controller keeps of an Agent (`view`), where it is reached
//! (`endpoints`), steps sent in the background (`dispatcher`), tasks in flight looked at
//! (`polling`) and cancelled (`cancellation`). The protocol itself is `crate::a2a`.

pub mod cancellation;
pub mod dispatcher;
pub mod endpoints;
pub mod polling;
pub mod view;
