//! Exports that let the host read an instance's whole state and hand it to a new module.
//!
//! A per-tool warm state ([`crate::sandbox::warm`]) is the runtime's memory and globals after the
//! tool has been imported. The memory is exported already; the globals (the C stack
//! pointer, ...) are not, and neither is wasi-libc's `__wasilibc_reset_preopens`, which
//! forgets the folders an instance has seen so that a snapshot taken after file access
//! still reads each later instance's own folders. This module adds those exports to the
//! pinned runtime, before Warden's own snapshot is built from it: exports are metadata,
//! so the compiled code is unchanged.

use std::collections::BTreeMap;

use wasm_encoder::{ExportKind, ExportSection, Module, RawSection};
use wasmparser::{ExternalKind, KnownCustom, Name, Parser, Payload, TypeRef};

/// The start of the exports of mutable globals; the global's index follows.
pub const GLOBAL_EXPORT_PREFIX: &str = "warden.global.";

/// The export of mutable global `index`.
pub fn global_export(index: u32) -> String {
    format!("{GLOBAL_EXPORT_PREFIX}{index}")
}

/// The export of wasi-libc's `__wasilibc_reset_preopens`.
pub const RESET_PREOPENS: &str = "warden.reset_preopens";

/// The wasi-libc function, found by the module's name section.
const RESET_PREOPENS_FUNCTION: &str = "__wasilibc_reset_preopens";

/// The runtime cannot be given the exports.
#[derive(Debug, thiserror::Error)]
pub enum StateExportsError {
    /// The module does not parse.
    #[error("the runtime module does not parse: {0}")]
    Parse(#[from] wasmparser::BinaryReaderError),
    /// wasi-libc's reset function is not named in the module.
    #[error(
        "the runtime has no function named {RESET_PREOPENS_FUNCTION} in its name section, \
         which per-tool warm states need"
    )]
    NoResetPreopens,
    /// An added export's name is taken.
    #[error("the runtime already exports {0}")]
    Taken(String),
}

/// `wasm` with every mutable global it defines exported as [`global_export`] and
/// wasi-libc's preopen reset exported as [`RESET_PREOPENS`]. Every other section is
/// copied byte for byte.
pub fn add(wasm: &[u8]) -> Result<Vec<u8>, StateExportsError> {
    let mut imported_globals = 0u32;
    let mut mutable_globals = Vec::new();
    let mut reset = None;
    let mut exports: Vec<(String, ExternalKind, u32)> = Vec::new();
    let mut has_export_section = false;
    for payload in Parser::new(0).parse_all(wasm) {
        match payload? {
            Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    if matches!(import?.ty, TypeRef::Global(_)) {
                        imported_globals += 1;
                    }
                }
            }
            Payload::GlobalSection(reader) => {
                for (i, global) in reader.into_iter().enumerate() {
                    if global?.ty.mutable {
                        mutable_globals.push(imported_globals + index(i));
                    }
                }
            }
            Payload::ExportSection(reader) => {
                has_export_section = true;
                for export in reader {
                    let export = export?;
                    exports.push((export.name.to_owned(), export.kind, export.index));
                }
            }
            Payload::CustomSection(reader) => {
                if let KnownCustom::Name(names) = reader.as_known() {
                    for name in names {
                        if let Name::Function(map) = name? {
                            for naming in map {
                                let naming = naming?;
                                if naming.name == RESET_PREOPENS_FUNCTION {
                                    reset = Some(naming.index);
                                }
                            }
                        }
                    }
                }
            }
            _ => {}
        }
    }
    let reset = reset.ok_or(StateExportsError::NoResetPreopens)?;

    let mut added: BTreeMap<String, (ExportKind, u32)> = BTreeMap::new();
    added.insert(RESET_PREOPENS.to_owned(), (ExportKind::Func, reset));
    for global in mutable_globals {
        added.insert(global_export(global), (ExportKind::Global, global));
    }
    let mut section = ExportSection::new();
    for (name, kind, index) in &exports {
        if added.contains_key(name) {
            return Err(StateExportsError::Taken(name.clone()));
        }
        section.export(name, export_kind(*kind), *index);
    }
    for (name, (kind, index)) in &added {
        section.export(name, *kind, *index);
    }

    let mut module = Module::new();
    let mut wrote_exports = !has_export_section;
    for payload in Parser::new(0).parse_all(wasm) {
        let payload = payload?;
        let Some((id, range)) = payload.as_section() else {
            continue;
        };
        if matches!(payload, Payload::ExportSection(_)) {
            module.section(&section);
            wrote_exports = true;
            continue;
        }
        // A module without exports gets its export section where the format puts it:
        // after the globals (and tags), before the start, element, data count, code and
        // data sections.
        if !wrote_exports && (START_SECTION_ID..=DATA_COUNT_SECTION_ID).contains(&id) {
            module.section(&section);
            wrote_exports = true;
        }
        module.section(&RawSection {
            id,
            data: &wasm[range],
        });
    }
    if !wrote_exports {
        module.section(&section);
    }
    Ok(module.finish())
}

const START_SECTION_ID: u8 = 8;
const DATA_COUNT_SECTION_ID: u8 = 12;

fn export_kind(kind: ExternalKind) -> ExportKind {
    match kind {
        ExternalKind::Func | ExternalKind::FuncExact => ExportKind::Func,
        ExternalKind::Table => ExportKind::Table,
        ExternalKind::Memory => ExportKind::Memory,
        ExternalKind::Global => ExportKind::Global,
        ExternalKind::Tag => ExportKind::Tag,
    }
}

fn index(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A module with an import, two globals (one mutable), a named reset function and
    /// an export, as wat; custom sections (the name section) come last.
    fn sample() -> Vec<u8> {
        wat::parse_str(
            r#"(module
                (import "env" "g" (global i32))
                (global $sp (mut i32) (i32.const 1024))
                (global $k i32 (i32.const 7))
                (memory (export "memory") 1)
                (func $__wasilibc_reset_preopens)
                (func $other (export "other") (result i32) global.get $sp))"#,
        )
        .unwrap()
    }

    #[test]
    fn mutable_globals_and_the_reset_are_exported_and_nothing_else_changes() {
        let wasm = sample();
        let out = add(&wasm).unwrap();
        let mut exports = Vec::new();
        let mut code = Vec::new();
        for payload in Parser::new(0).parse_all(&out) {
            match payload.unwrap() {
                Payload::ExportSection(r) => {
                    for e in r {
                        let e = e.unwrap();
                        exports.push((e.name.to_owned(), e.index));
                    }
                }
                Payload::CodeSectionStart { range, .. } => code.push(out[range].to_vec()),
                _ => {}
            }
        }
        // Global 0 is imported; global 1 is the mutable one; function 0 is the reset.
        assert_eq!(
            exports,
            [
                ("memory".to_owned(), 0),
                ("other".to_owned(), 1),
                ("warden.global.1".to_owned(), 1),
                ("warden.reset_preopens".to_owned(), 0),
            ]
        );
        let original_code: Vec<Vec<u8>> = Parser::new(0)
            .parse_all(&wasm)
            .filter_map(|p| match p.unwrap() {
                Payload::CodeSectionStart { range, .. } => Some(wasm[range].to_vec()),
                _ => None,
            })
            .collect();
        assert_eq!(code, original_code);
        wasmparser::validate(&out).unwrap();
    }

    #[test]
    fn tags_before_globals_and_modules_without_exports_stay_valid() {
        // Tags (section 13) come before globals (6) in the binary.
        for wat in [
            r#"(module (tag $t) (global $g (mut i32) (i32.const 0)) (memory 1)
                (func $__wasilibc_reset_preopens) (export "m" (memory 0)))"#,
            r#"(module (global $g (mut i32) (i32.const 0))
                (func $__wasilibc_reset_preopens) (func $f) (start $f))"#,
        ] {
            let out = add(&wat::parse_str(wat).unwrap()).unwrap();
            wasmparser::Validator::new_with_features(wasmparser::WasmFeatures::all())
                .validate_all(&out)
                .unwrap();
        }
    }

    #[test]
    fn a_module_without_the_reset_function_is_refused() {
        let wasm = wat::parse_str("(module (func $f))").unwrap();
        assert!(matches!(
            add(&wasm),
            Err(StateExportsError::NoResetPreopens)
        ));
    }
}
