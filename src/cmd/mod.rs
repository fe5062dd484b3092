//! One short handler per subcommand, each a script over the concern modules.

use anyhow::Result;

use crate::app::App;
use crate::cli::Command;

pub fn dispatch(app: &App, command: &Command) -> Result<()> {
    match command {
        _ => anyhow::bail!("not implemented yet"),
    }
}
