//! `backup FILE`: an online copy of the database, checked before it is put in place
//! (docs/operations.md, "Backups").

use anyhow::Result;

use crate::cli::BackupArgs;
use crate::cmd::App;
use crate::store::{OpenMode, Store};

pub fn run(app: &App, args: &BackupArgs) -> Result<()> {
    let loaded = app.load_config()?;
    let dir = app.state_dir(Some(&loaded.config))?;
    // A world-writable dir is refused here as by every command (a planted database).
    crate::paths::state_dir_access(&dir)?;
    // Copied as it is: a backup taken before an upgrade must not be of a migrated database.
    let store = Store::open(&dir, OpenMode::AsIs, app.now())?;
    let version = store.schema_version()?;
    let copied = crate::store::backup::to_file(&store.conn, &args.file, app.now())?;
    let rows: Vec<String> = copied
        .rows
        .iter()
        .map(|(t, n)| format!("{t} {n}"))
        .collect();
    crate::outln!(
        "backup {}: {} pages of {} bytes ({:.1} MiB) from {}, checked (PRAGMA quick_check: ok); rows: {}",
        copied.path.display(),
        copied.pages,
        copied.page_size,
        (copied.pages * copied.page_size) as f64 / (1 << 20) as f64,
        store.path.display(),
        rows.join(", ")
    );
    if version < crate::store::SCHEMA_VERSION {
        crate::outln!(
            "schema version {version}, older than this fleetagent's ({}): copied as it is, not migrated (the next `fleetagent run` of this build migrates the database)",
            crate::store::SCHEMA_VERSION
        );
    }
    Ok(())
}
