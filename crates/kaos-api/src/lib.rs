pub mod agent;
pub mod common;
pub mod crd;
pub mod mcpserver;
pub mod modelapi;
