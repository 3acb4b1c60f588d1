//! The key files the CLI reads or makes, in one place: the key that seals tenants'
//! secrets (`warden serve`), and the Ed25519 key that signs audit exports and bundles
//! (`warden serve`, `warden audit`, `warden bundle`). A key Warden makes is written once,
//! readable by its owner only.

use std::path::Path;

use anyhow::{Context, Result};

use warden::app::SecretKey;
use warden::audit::AuditKey;

use super::usage;

/// The audit signing key's file under Warden's home.
const AUDIT_KEY_FILE: &str = "audit-signing.key";
/// The secrets key's file under Warden's home.
const SECRET_KEY_FILE: &str = "secret.key";

/// `eprintln!` that cannot panic (`warden serve` keeps SIGPIPE ignored).
fn say(line: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// The key that seals tenants' secrets: from `file` (`--secret-key-file`), the variable
/// named `env` (`--secret-key-env`), or `$WARDEN_HOME/secret.key` (made on first start).
pub(super) fn secret_key(file: Option<&Path>, env: &str, home: &Path) -> Result<SecretKey> {
    let from_file = |file: &Path| -> Result<SecretKey> {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read the secrets key file {}", file.display()))?;
        SecretKey::from_hex(&text).map_err(|e| usage(format!("{}: {e}", file.display())))
    };
    if let Some(file) = file {
        return from_file(file);
    }
    if let Some(text) = std::env::var(env).ok().filter(|v| !v.is_empty()) {
        return SecretKey::from_hex(&text).map_err(|e| usage(format!("${env}: {e}")));
    }
    let file = home.join(SECRET_KEY_FILE);
    if file.exists() {
        return from_file(&file);
    }
    let key = SecretKey::generate();
    write_private(&file, &key.to_hex())
        .with_context(|| format!("cannot create the secrets key file {}", file.display()))?;
    say(format_args!(
        "warden: created {} to seal tenants' secrets; keep it, and keep it apart from backups \
         of the database (or give your own with --secret-key-file)",
        file.display()
    ));
    Ok(key)
}

/// An Ed25519 signing key from `file` (64 hex digits of its seed): audit exports' and
/// bundles' keys alike.
pub(super) fn read_key(file: &Path) -> Result<AuditKey> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read the signing key file {}", file.display()))?;
    AuditKey::from_hex(&text).map_err(|e| usage(format!("{}: {e}", file.display())))
}

/// The audit signing key: from `file`, or `$WARDEN_HOME/audit-signing.key`, which is
/// made (readable by its owner only) the first time it is needed.
pub(super) fn audit_key(home: &Path, file: Option<&Path>) -> Result<AuditKey> {
    if let Some(file) = file {
        return read_key(file);
    }
    let file = home.join(AUDIT_KEY_FILE);
    if file.exists() {
        return read_key(&file);
    }
    std::fs::create_dir_all(home)
        .with_context(|| format!("cannot create the folder {}", home.display()))?;
    let key = AuditKey::generate();
    write_private(&file, &key.to_hex()).with_context(|| {
        format!(
            "cannot create the audit signing key file {}",
            file.display()
        )
    })?;
    say(format_args!(
        "warden: created {} to sign audit exports; keep it, and publish its public key \
         (`warden audit pubkey`: {})",
        file.display(),
        key.public_key()
    ));
    Ok(key)
}

/// Writes a new file only its owner can read.
pub(super) fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()
}
