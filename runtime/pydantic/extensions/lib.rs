//! The Pydantic runtime's native extensions in one static library (see Cargo.toml).
//! Naming each crate links it: its `#[pymodule]` init function (`PyInit__pydantic_core`,
//! `PyInit_jiter`, `PyInit_rpds`, `PyInit_orjson`) is then in the archive for
//! warden_entry.c's inittab.
extern crate _pydantic_core;
extern crate jiter_python;
extern crate orjson;
extern crate rpds;
