//! The library behind `kaosctl`: `dev` (the controllers against a sandbox or a cluster), manifest rendering and
//! `migrate` (from the KAOS Go operator).

pub mod defaults;
pub mod dev;
pub mod migrate;
pub mod render;
