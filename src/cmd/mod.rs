//! One short handler per subcommand, each a script over the concern modules.

mod units;

use anyhow::Result;

use crate::app::App;
use crate::cli::Command;

pub fn dispatch(app: &App, command: &Command) -> Result<()> {
    match command {
        Command::Units(c) => units::run(app, c),
        _ => anyhow::bail!("not implemented yet"),
    }
}
