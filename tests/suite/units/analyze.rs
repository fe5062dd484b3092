//! The rendered units, checked offline by systemd-analyze: they verify clean, and the system
//! services' exposure stays at most 2.0.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{scratch, text, BIN, REPO_UNITS};
use fleetagent::units::{self, Scope};

fn write_units(dir: &Path, files: &[(String, String)]) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    files
        .iter()
        .map(|(name, body)| {
            let p = dir.join(name);
            std::fs::write(&p, body).unwrap();
            p
        })
        .collect()
}

#[track_caller]
fn assert_verifies(scope: Scope, files: &[PathBuf], runtime_dir: &Path) {
    let mut cmd = Command::new("systemd-analyze");
    if scope == Scope::User {
        // A user-scope verify looks up the runtime dir even though it starts no manager.
        cmd.arg("--user").env("XDG_RUNTIME_DIR", runtime_dir);
    }
    let out = cmd
        .arg("verify")
        .args(files)
        .output()
        .expect("systemd-analyze runs");
    let stderr = text(&out.stderr);
    assert!(
        out.status.success(),
        "systemd-analyze verify ({scope:?}) failed: {stderr}"
    );
    // Unknown keys and misplaced options are only warnings (rc 0): any output is a finding.
    assert!(
        stderr.trim().is_empty(),
        "systemd-analyze verify ({scope:?}) warned:\n{stderr}"
    );
}

#[test]
fn rendered_units_pass_systemd_analyze_verify() {
    let tmp = scratch();
    let runtime = tmp.path().join("runtime");
    std::fs::create_dir(&runtime).unwrap();
    // verify fails when the ExecStart= binary is missing: render with the real one.
    let cases = [
        (
            Scope::System,
            units::render(
                Scope::System,
                Path::new(BIN),
                Path::new(units::DEFAULT_CONFIG),
                Path::new(units::DEFAULT_STATE_DIR),
                600,
            ),
        ),
        (
            Scope::System,
            units::render_with(&units::UnitParams {
                scope: Scope::System,
                bin: BIN.into(),
                config: "/srv/fleetagent/config.toml".into(),
                state_dir: "/srv/fleetagent/state".into(),
                deadline_secs: 900,
                extra_write_paths: vec!["/var/lib/prometheus/node-exporter".into()],
                extra_credentials: vec!["curio_db_password".into()],
            }),
        ),
        (
            Scope::User,
            units::render(
                Scope::User,
                Path::new(BIN),
                &tmp.path().join("config.toml"),
                &tmp.path().join("state"),
                600,
            ),
        ),
        (
            Scope::User,
            units::render(
                Scope::User,
                Path::new(BIN),
                Path::new("/home/op/.config/fleetagent/config.toml"),
                Path::new("/home/op/.local/state/fleetagent"),
                600,
            ),
        ),
    ];
    for (i, (scope, files)) in cases.iter().enumerate() {
        assert_eq!(files.len(), 5);
        let written = write_units(&tmp.path().join(format!("case{i}")), files);
        assert_verifies(*scope, &written, &runtime);
    }
}

/// `Overall exposure level for fleetagent.service: 1.1 OK`
fn exposure(stdout: &str) -> f64 {
    stdout
        .lines()
        .find_map(|l| l.split_once("Overall exposure level for "))
        .and_then(|(_, rest)| rest.split_once(": "))
        .and_then(|(_, v)| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in:\n{stdout}"))
}

#[test]
fn system_services_expose_at_most_2_0() {
    let tmp = scratch();
    let files = units::render(
        Scope::System,
        Path::new(units::DEFAULT_BIN),
        Path::new(units::DEFAULT_CONFIG),
        Path::new(units::DEFAULT_STATE_DIR),
        600,
    );
    let written = write_units(tmp.path(), &files);
    for name in [units::SERVICE, units::POLL_SERVICE] {
        // The repo file itself is what gets installed (with other paths).
        let repo = Path::new(REPO_UNITS).join(name);
        for file in [
            repo,
            written.iter().find(|p| p.ends_with(name)).unwrap().clone(),
        ] {
            let out = Command::new("systemd-analyze")
                .args(["security", "--offline=true", "--threshold=20", "--no-pager"])
                .arg(&file)
                .output()
                .expect("systemd-analyze runs");
            let score = exposure(&text(&out.stdout));
            println!("{}: exposure {score}", file.display());
            assert!(
                out.status.success() && score <= 2.0,
                "{} scores {score} (> 2.0 or rc {:?}):\n{}",
                file.display(),
                out.status.code(),
                text(&out.stdout)
            );
        }
    }
}
