//! The doorbell: a file whose existence means "work is waiting" (the path unit watches it
//! with `PathExists=`). Writers append one line; only the pass that claims the waiting work
//! deletes it. Behind a trait so tests and `sim` control its mtime.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use serde::Serialize;

use crate::clock::{system_time_ms, Clock, Millis};

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DoorbellStatus {
    pub path: String,
    pub exists: bool,
    /// Last modification, Unix ms (None when absent).
    pub mtime: Option<Millis>,
    /// Lines appended since it was last deleted.
    pub lines: usize,
    /// It is a link or not a regular file: what is wrong (never read through).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

pub trait Doorbell: Send + Sync {
    /// Append one line, creating the file (0660) when absent.
    fn ring(&self, line: &str) -> Result<()>;
    /// Last modification time, or None when absent.
    fn mtime(&self) -> Result<Option<Millis>>;
    /// Delete it; Ok(false) when it was already gone.
    fn remove(&self) -> Result<bool>;
    fn status(&self) -> Result<DoorbellStatus>;
    fn path(&self) -> &Path;
}

/// The real doorbell: `<state_dir>/trigger`.
pub struct FileDoorbell {
    path: PathBuf,
}

impl FileDoorbell {
    pub fn new(state_dir: &Path) -> Self {
        FileDoorbell {
            path: state_dir.join(crate::paths::DOORBELL_FILE),
        }
    }
}

impl Doorbell for FileDoorbell {
    fn ring(&self, line: &str) -> Result<()> {
        crate::paths::refuse_special(&self.path)?;
        // O_NOFOLLOW as well: a link planted between that look and this open is refused too.
        let mut f = OpenOptions::new()
            .append(true)
            .create(true)
            .custom_flags(crate::paths::no_follow())
            .mode(0o660)
            .open(&self.path)
            .with_context(|| format!("cannot open doorbell {}", self.path.display()))?;
        let meta = f.metadata()?;
        if !meta.is_file() {
            anyhow::bail!(
                "doorbell {} is not a regular file; remove it",
                self.path.display()
            );
        }
        if meta.permissions().mode() & 0o777 != 0o660 {
            // Created just now under a stricter umask: make it group-writable explicitly.
            let _ = f.set_permissions(fs::Permissions::from_mode(0o660));
        }
        // One line, and nothing a terminal would act on (`cat trigger`): control characters
        // are shown as escapes. The event row keeps the reason as it was given.
        let mut text: String = line
            .chars()
            .map(|c| match c {
                '\n' | '\r' | '\t' => " ".to_string(),
                // Controls, and the bidirectional overrides that reorder what follows.
                c if c.is_control()
                    || ('\u{202a}'..='\u{202e}').contains(&c)
                    || ('\u{2066}'..='\u{2069}').contains(&c) =>
                {
                    c.escape_unicode().to_string()
                }
                c => c.to_string(),
            })
            .collect();
        text.push('\n');
        // One write(2) with O_APPEND: concurrent rings never interleave.
        f.write_all(text.as_bytes())
            .with_context(|| format!("cannot write doorbell {}", self.path.display()))?;
        Ok(())
    }

    fn mtime(&self) -> Result<Option<Millis>> {
        match fs::symlink_metadata(&self.path) {
            Ok(m) => Ok(Some(system_time_ms(m.modified()?))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("doorbell {}", self.path.display())),
        }
    }

    fn remove(&self) -> Result<bool> {
        if fs::symlink_metadata(&self.path).is_ok_and(|m| m.file_type().is_symlink()) {
            // Removing the link is safe (nothing is written through it), but it is evidence.
            let target = fs::read_link(&self.path)
                .map(|t| t.display().to_string())
                .unwrap_or_else(|_| "?".into());
            log::warn!(
                "the doorbell {} was a symbolic link (to {target}), planted in the state dir: removed, nothing was written through it",
                self.path.display()
            );
        }
        match fs::remove_file(&self.path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => {
                Err(e).with_context(|| format!("cannot delete doorbell {}", self.path.display()))
            }
        }
    }

    fn status(&self) -> Result<DoorbellStatus> {
        let path = self.path.display().to_string();
        if let Some(problem) = crate::paths::not_a_plain_file(&self.path) {
            // Shown, never read through: `doctor`'s state_dir check names it.
            return Ok(DoorbellStatus {
                path,
                exists: true,
                mtime: self.mtime()?,
                lines: 0,
                problem: Some(problem),
            });
        }
        match fs::read(&self.path) {
            Ok(bytes) => Ok(DoorbellStatus {
                path,
                exists: true,
                mtime: self.mtime()?,
                lines: bytes.iter().filter(|b| **b == b'\n').count(),
                problem: None,
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(DoorbellStatus {
                path,
                exists: false,
                mtime: None,
                lines: 0,
                problem: None,
            }),
            Err(e) => Err(e).with_context(|| format!("doorbell {}", self.path.display())),
        }
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

/// An in-memory doorbell whose mtime is the given clock's time at the last ring.
pub struct MemoryDoorbell {
    clock: Arc<dyn Clock>,
    state: Mutex<Option<(Millis, usize)>>,
    path: PathBuf,
}

impl MemoryDoorbell {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        MemoryDoorbell {
            clock,
            state: Mutex::new(None),
            path: PathBuf::from("(memory)"),
        }
    }
}

impl Doorbell for MemoryDoorbell {
    fn ring(&self, _line: &str) -> Result<()> {
        let now = self.clock.now_ms();
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let lines = s.map(|(_, n)| n).unwrap_or(0) + 1;
        *s = Some((now, lines));
        Ok(())
    }

    fn mtime(&self) -> Result<Option<Millis>> {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        Ok(s.map(|(t, _)| t))
    }

    fn remove(&self) -> Result<bool> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        Ok(s.take().is_some())
    }

    fn status(&self) -> Result<DoorbellStatus> {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        Ok(DoorbellStatus {
            path: self.path.display().to_string(),
            exists: s.is_some(),
            mtime: s.map(|(t, _)| t),
            lines: s.map(|(_, n)| n).unwrap_or(0),
            problem: None,
        })
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn file_doorbell_appends_and_removes() {
        let dir = tempfile::tempdir().unwrap();
        let d = FileDoorbell::new(dir.path());
        assert!(!d.status().unwrap().exists);
        d.ring("a").unwrap();
        d.ring("b\nc\u{1b}[2J\u{1}\u{202e}").unwrap();
        let s = d.status().unwrap();
        assert!(s.exists);
        assert_eq!(s.lines, 2);
        // One line a ring, and nothing a terminal would act on.
        assert_eq!(
            fs::read_to_string(d.path()).unwrap(),
            "a\nb c\\u{1b}[2J\\u{1}\\u{202e}\n"
        );
        assert!(s.mtime.is_some());
        let mode = fs::metadata(d.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o660);
        assert!(d.remove().unwrap());
        assert!(!d.remove().unwrap());
        assert_eq!(d.mtime().unwrap(), None);
    }

    #[test]
    fn memory_doorbell_uses_clock() {
        let clock = Arc::new(ManualClock::new(5_000));
        let d = MemoryDoorbell::new(clock.clone());
        d.ring("x").unwrap();
        clock.set(9_000);
        d.ring("y").unwrap();
        assert_eq!(d.mtime().unwrap(), Some(9_000));
        assert_eq!(d.status().unwrap().lines, 2);
        assert!(d.remove().unwrap());
        assert_eq!(d.mtime().unwrap(), None);
    }
}
