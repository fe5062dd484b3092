//! `backup FILE`: an online copy of the database (docs/operations.md).

use anyhow::{bail, Result};

use crate::cli::BackupArgs;
use crate::cmd::App;

pub fn run(_app: &App, _args: &BackupArgs) -> Result<()> {
    bail!("backup is not built yet")
}
