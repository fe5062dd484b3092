//! `pause [--for DURATION] --reason TEXT` and `resume`: the hand-brake (docs/operations.md).

use anyhow::{bail, Result};

use crate::cli::PauseArgs;
use crate::cmd::App;

pub fn pause(_app: &App, _args: &PauseArgs) -> Result<()> {
    bail!("pause is not built yet")
}

pub fn resume(_app: &App) -> Result<()> {
    bail!("resume is not built yet")
}
