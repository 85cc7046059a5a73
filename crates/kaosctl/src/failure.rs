//! What a `kaosctl` command reports when it cannot go on: the error in one line, and a hint.

/// An error and what to do about it.
#[derive(Debug)]
pub struct Failure {
    pub error: anyhow::Error,
    pub hint: String,
}

impl Failure {
    pub fn new(error: impl Into<anyhow::Error>, hint: impl Into<String>) -> Self {
        Self {
            error: error.into(),
            hint: hint.into(),
        }
    }

    /// The failure of an error with this hint, for `map_err`.
    pub fn hint(hint: impl Into<String>) -> impl FnOnce(anyhow::Error) -> Self {
        move |error| Self::new(error, hint)
    }
}
