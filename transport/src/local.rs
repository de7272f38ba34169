//! The local broker registry: a broker started on this machine leaves a copy of its
//! certificate under `brokers/PORT.pem` in the registry directory, and a client connecting
//! to a loopback address with no `--ca` trusts the certificate registered for that port.
//! Verification stays on: only this user can write the directory, so a client trusts what
//! a broker of this user put there.
//!
//! The directory is `$PADRES_LOCAL_DIR` if set, else `$XDG_RUNTIME_DIR/padres`, else
//! `$HOME/.cache/padres`.

use std::path::PathBuf;

/// The registry directory, if one can be named.
pub fn registry_dir() -> Option<PathBuf> {
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    env("PADRES_LOCAL_DIR")
        .or_else(|| env("XDG_RUNTIME_DIR").map(|d| d.join("padres")))
        .or_else(|| env("HOME").map(|d| d.join(".cache").join("padres")))
}

/// Where the certificate of a local broker listening on `port` is registered.
pub fn certificate_path(port: u16) -> Option<PathBuf> {
    registry_dir().map(|d| d.join("brokers").join(format!("{port}.pem")))
}

/// Registers `cert_pem` as the certificate of the local broker on `port`; returns the file.
pub fn register(port: u16, cert_pem: &[u8]) -> std::io::Result<PathBuf> {
    let path = certificate_path(port)
        .ok_or_else(|| std::io::Error::other("no registry directory: set PADRES_LOCAL_DIR or HOME"))?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            if let Some(top) = dir.parent() {
                std::fs::set_permissions(top, std::fs::Permissions::from_mode(0o700))?;
            }
        }
    }
    // Write then rename, so a client never reads half a file.
    let partial = path.with_extension(format!("pem.{}", std::process::id()));
    std::fs::write(&partial, cert_pem)?;
    std::fs::rename(&partial, &path)?;
    Ok(path)
}

/// Removes the registration of `port` if it still holds `cert_pem` (another broker may
/// have taken the port since).
pub fn unregister(port: u16, cert_pem: &[u8]) {
    if let Some(path) = certificate_path(port) {
        if std::fs::read(&path).is_ok_and(|held| held == cert_pem) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The registered certificate of the local broker on `port`, if there is one.
pub fn lookup(port: u16) -> Option<PathBuf> {
    certificate_path(port).filter(|p| p.is_file())
}
