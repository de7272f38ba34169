//! The local broker registry: a broker started on this machine leaves a copy of its
//! certificate under `brokers/PORT.pem` in the registry directory, and a client connecting
//! to a loopback address with no `--ca` trusts the certificate registered for that port.
//! Verification stays on. A client trusts a registered certificate only if the `brokers`
//! directory and the file belong to this user and no one else can write them, so what it
//! trusts was put there by a broker of this user.
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
    if let Some(dir) = path.parent()
        && !dir.exists()
    {
        std::fs::create_dir_all(dir)?;
        // Only the directory made here is restricted: never one the user named.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
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
    if let Some(path) = certificate_path(port)
        && std::fs::read(&path).is_ok_and(|held| held == cert_pem)
    {
        let _ = std::fs::remove_file(path);
    }
}

/// The registered certificate of the local broker on `port`, if there is one.
pub fn lookup(port: u16) -> Option<PathBuf> {
    let path = certificate_path(port).filter(|p| p.is_file())?;
    let dir = path.parent()?;
    (private(dir) && private(&path)).then_some(path)
}

/// True if `path` belongs to this user and only this user can write it.
#[cfg(unix)]
fn private(path: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (Ok(meta), Ok(me)) = (std::fs::metadata(path), std::fs::metadata("/proc/self")) else {
        return false;
    };
    meta.uid() == me.uid() && meta.mode() & 0o022 == 0
}

#[cfg(not(unix))]
fn private(_path: &std::path::Path) -> bool {
    true
}
