//! `--plot FILE` of `sim` and `inspect`: the file opened first, written at the end.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::error::usage;

/// `--plot FILE`, opened for writing before the work that draws it (created if missing, its
/// old content kept until the new plot replaces it): an unwritable file is a usage error
/// found first, not after a simulation.
pub(crate) struct PlotFile {
    file: std::fs::File,
    path: PathBuf,
    created: bool,
}

impl PlotFile {
    pub(crate) fn open(path: &Path) -> Result<PlotFile> {
        let existed = path.exists();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| usage(format!("--plot {}: cannot write it: {e}", path.display())))?;
        Ok(PlotFile {
            file,
            path: path.to_path_buf(),
            created: !existed,
        })
    }

    pub(crate) fn write(mut self, svg: &str) -> Result<()> {
        use std::io::Write;
        // (Only a regular file is truncated: `--plot /dev/stdout` works too.)
        let regular = self.file.metadata().is_ok_and(|m| m.is_file());
        if regular {
            self.file.set_len(0)
        } else {
            Ok(())
        }
        .and_then(|()| self.file.write_all(svg.as_bytes()))
        .with_context(|| format!("cannot write the plot {}", self.path.display()))
    }

    /// The work failed: remove the file if this command created it.
    pub(crate) fn discard(self) {
        if self.created {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
