//! Tests of `warden::schema`.

mod arguments;
mod bounds;
mod check;
mod derive;
mod export;
mod fixtures;
mod fuzz;
mod health;
mod hostile;
mod props;

use warden::schema::{DeriveOptions, Derived, derive};

/// Derives `source` as file `tool.py`.
pub fn derive_ok(source: &str) -> Derived {
    match derive(source, &opts("tool")) {
        Ok(d) => d,
        Err(e) => panic!("derive failed: {e}\n{:#?}", e.diagnostics()),
    }
}

pub fn opts(stem: &str) -> DeriveOptions {
    DeriveOptions {
        file_stem: stem.to_string(),
        function: None,
    }
}
