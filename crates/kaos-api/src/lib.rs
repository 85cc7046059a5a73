pub mod access;
pub mod agent;
pub mod common;
pub mod crd;
pub mod docs;
pub mod mcpserver;
pub mod memorystore;
pub mod modelapi;
