//! Build script: asks the linker to lay out the functions a `trigger` process executes next to
//! each other (the list is src/trigger.order, made by scripts/order-symbols).
//!
//! `trigger` runs on every state change, and most of its time is the kernel mapping the pages
//! of a 16 MB binary. The functions it runs are spread over the whole text, so each start
//! touched some 60 separate 64 KB windows; placed together they fit in about 16
//! (docs/testing.md, "trigger"). The layout changes nothing else: a name the list does not
//! know, or a list gone stale after a compiler upgrade, only leaves the default order.
//!
//! Only where the linker is known to be LLD, which understands `--symbol-ordering-file`: Rust
//! 1.90 and later link x86_64-unknown-linux-gnu with its own LLD unless told to use another
//! linker. Anywhere else the build is the plain one.

// Cargo reads a build script's instructions from its stdout.
#![allow(clippy::disallowed_macros)]

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/trigger.order");
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    if !links_with_rust_lld() {
        return;
    }
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let list = Path::new(&dir).join("src").join("trigger.order");
    if !list.is_file() {
        return;
    }
    println!(
        "cargo:rustc-link-arg-bin=fleetagent=-Wl,--symbol-ordering-file={}",
        list.display()
    );
    println!("cargo:rustc-link-arg-bin=fleetagent=-Wl,--no-warn-symbol-ordering");
}

/// True when this build links with the LLD that rustc ships: the target is
/// x86_64-unknown-linux-gnu, rustc is 1.90 or later, and neither the configuration
/// (`linker = ...`, which cargo passes as RUSTC_LINKER) nor RUSTFLAGS name another linker.
fn links_with_rust_lld() -> bool {
    if std::env::var("TARGET").as_deref() != Ok("x86_64-unknown-linux-gnu") {
        return false;
    }
    if std::env::var_os("RUSTC_LINKER").is_some() {
        return false;
    }
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    if flags.contains("linker") || flags.contains("link-self-contained") {
        return false;
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let Ok(out) = Command::new(rustc).arg("--version").output() else {
        return false;
    };
    // "rustc 1.95.0 (59807616e 2026-04-14)"
    let version = String::from_utf8_lossy(&out.stdout);
    let mut parts = version
        .split_whitespace()
        .nth(1)
        .unwrap_or("")
        .split('.')
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (1, 90)
}
