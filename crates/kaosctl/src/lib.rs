//! The library behind `kaosctl`: `dev` (the controllers against a sandbox or a cluster) and manifest rendering.

pub mod defaults;
pub mod dev;
pub mod render;
