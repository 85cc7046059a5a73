//! The library behind `kaosctl`: the local sandbox and manifest rendering.

pub mod defaults;
pub mod render;
pub mod sandbox;
