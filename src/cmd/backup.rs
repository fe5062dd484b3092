//! `backup FILE`: an online copy of the database, checked before it is put in place
//! (docs/operations.md, "Backups").

use anyhow::Result;

use crate::cli::BackupArgs;
use crate::cmd::App;
use crate::store::{OpenMode, Store};

pub fn run(app: &App, args: &BackupArgs) -> Result<()> {
    backup(app, args).map_err(|e| match e.downcast::<Copying>() {
        // A full or read-only file system met while writing the copy is the backup's own,
        // named with its dir (a walkthrough was told the state dir was full).
        Ok(Copying(e)) => {
            let dest = args
                .file
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(std::path::Path::new("."));
            name_copy_fault(e, dest)
        }
        Err(e) => super::name_storage_fault(app, e),
    })
}

/// A full or read-only file system met writing the copy, named with the copy's dir (the
/// state dir's lines say nothing can be recorded, which is not so: a re-test).
fn name_copy_fault(err: anyhow::Error, dest: &std::path::Path) -> anyhow::Error {
    use crate::error::StorageFault;
    let Some(fault) = crate::error::storage_fault(&err) else {
        return err;
    };
    let Some(fs) = crate::paths::fs_state(dest) else {
        return err;
    };
    let shown = dest.display();
    let line = match fault {
        _ if fs.read_only => format!(
            "the backup's directory {shown} is on a read-only file system: write the backup elsewhere (the agent's own database is not affected)"
        ),
        StorageFault::Io if !fs.nearly_full() => return err,
        StorageFault::NoSpace | StorageFault::Io => format!(
            "no space left for the backup in {shown} ({}): free some or write it elsewhere (the agent's own database is not affected)",
            fs.free_said()
        ),
        StorageFault::ReadOnly => format!(
            "the backup's directory {shown} refuses writes: write the backup elsewhere (the agent's own database is not affected)"
        ),
    };
    err.context(line)
}

/// An error of writing the copy, told from one of reading the state dir.
#[derive(Debug)]
struct Copying(anyhow::Error);

impl std::fmt::Display for Copying {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl std::error::Error for Copying {}

fn backup(app: &App, args: &BackupArgs) -> Result<()> {
    let loaded = app.load_config()?;
    let dir = app.state_dir(Some(&loaded.config))?;
    // A world-writable dir is refused here as by every command (a planted database).
    crate::paths::state_dir_access(&dir)?;
    refuse_a_state_file(&dir, &args.file)?;
    // Copied as it is: a backup taken before an upgrade must not be of a migrated database.
    let store = Store::open(&dir, OpenMode::AsIs, app.now())?;
    let version = store.schema_version()?;
    let copied = crate::store::backup::to_file(&store.conn, &args.file, app.now())
        .map_err(|e| anyhow::Error::new(Copying(e)))?;
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

/// A backup under a name fleetagent uses in its state dir (`run.lock`, `trigger`, a side file
/// of the database) would be overwritten or deleted by the next run: a walkthrough saw the
/// copy reported "checked" and gone a pass later.
fn refuse_a_state_file(state_dir: &std::path::Path, file: &std::path::Path) -> Result<()> {
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let parent = file
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    if crate::paths::STATE_FILES.contains(&name) && crate::paths::same_path(parent, state_dir) {
        anyhow::bail!(
            "{} is a file fleetagent keeps in its state dir: the next run would overwrite or delete the backup; choose another name (or another dir)",
            file.display()
        );
    }
    Ok(())
}
