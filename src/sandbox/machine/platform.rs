//! What a compiled module is compiled for, and whether this host can run it.
//!
//! A compiled runtime (`.cwasm`) is machine code for one **target** (a triple such as
//! `x86_64-unknown-linux-gnu`) and one **CPU level**: a named, explicit set of
//! instruction-set extensions Cranelift may use. Warden never lets the compiler infer
//! the build host's own CPU flags, so a module compiled on one machine runs on every
//! machine of its level, and the cache's name says which level it is.
//!
//! The levels (a small, closed set; each is a list of Cranelift ISA flags):
//!
//! | target  | level         | extensions                                          | e.g.                         |
//! |---------|---------------|-----------------------------------------------------|------------------------------|
//! | x86-64  | `baseline`    | SSE2 (x86-64-v1)                                    | any x86-64                   |
//! | x86-64  | `x86-64-v2`   | + SSE3, SSSE3, SSE4.1, SSE4.2, POPCNT, CMPXCHG16B    | Atom/Celeron since 2013      |
//! | x86-64  | `x86-64-v3`   | + AVX, AVX2, BMI1, BMI2, FMA, LZCNT                  | Haswell (2013), Zen          |
//! | x86-64  | `x86-64-v4`   | + AVX-512 F, DQ, VL                                  | Skylake-SP, Zen 4            |
//! | aarch64 | `baseline`    | Armv8.0 (no LSE atomics)                             | Raspberry Pi 4 (Cortex-A72)  |
//! | aarch64 | `neoverse-n1` | + LSE, FP16, DotProd (Armv8.2)                       | Graviton 2, Ampere, Pi 5     |
//!
//! A developer machine's default ([`CpuLevel::host`]) is the highest level whose every
//! extension the host offers. `WARDEN_CPU_CEILING=LEVEL` makes this process act as if the
//! host offered no more than LEVEL (for its default, and for wasmtime's check of a
//! loaded module): run a bundle on a newer machine as the oldest device would.

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

/// The variable that caps the CPU level this process believes the host offers.
pub const CPU_CEILING_VAR: &str = "WARDEN_CPU_CEILING";

/// A target or CPU level Warden does not know, or cannot run here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlatformError {
    /// The target triple is not one Warden builds bundles for.
    #[error(
        "unsupported target {given:?}: use x86_64-unknown-linux-gnu or \
         aarch64-unknown-linux-gnu"
    )]
    Target {
        /// What was given.
        given: String,
    },
    /// The CPU level is not one of the target's levels.
    #[error("unknown CPU level {given:?} for {target}: use one of {known}")]
    Cpu {
        /// What was given.
        given: String,
        /// The target it was asked for.
        target: String,
        /// The levels of that target, comma-separated.
        known: String,
    },
}

/// An instruction-set architecture Warden compiles for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// x86-64.
    X86_64,
    /// 64-bit Arm.
    Aarch64,
}

/// A named set of CPU extensions compiled code may use (see the module's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuLevel {
    arch: Arch,
    name: &'static str,
    /// Cranelift's ISA flags, all of which are enabled for this level.
    flags: &'static [&'static str],
    /// For each flag, the name `std::arch` detects it by (same order).
    detect: &'static [&'static str],
}

/// x86-64's extensions as Cranelift names them, in the order the levels add them:
/// x86-64-v2 takes the first 6, x86-64-v3 the first 12, x86-64-v4 all 15.
const X86_FLAGS: [&str; 15] = [
    "has_sse3",
    "has_ssse3",
    "has_sse41",
    "has_sse42",
    "has_popcnt",
    "has_cmpxchg16b",
    "has_avx",
    "has_avx2",
    "has_bmi1",
    "has_bmi2",
    "has_fma",
    "has_lzcnt",
    "has_avx512f",
    "has_avx512dq",
    "has_avx512vl",
];
/// The same extensions as `std::arch` detects them (same order).
const X86_DETECT: [&str; 15] = [
    "sse3",
    "ssse3",
    "sse4.1",
    "sse4.2",
    "popcnt",
    "cmpxchg16b",
    "avx",
    "avx2",
    "bmi1",
    "bmi2",
    "fma",
    "lzcnt",
    "avx512f",
    "avx512dq",
    "avx512vl",
];

/// An x86-64 level: the first `n` extensions.
const fn x86_level(name: &'static str, n: usize) -> CpuLevel {
    CpuLevel {
        arch: Arch::X86_64,
        name,
        flags: X86_FLAGS.as_slice().split_at(n).0,
        detect: X86_DETECT.as_slice().split_at(n).0,
    }
}

/// Every level, lowest first within each architecture.
pub const LEVELS: &[CpuLevel] = &[
    x86_level("baseline", 0),
    x86_level("x86-64-v2", 6),
    x86_level("x86-64-v3", 12),
    x86_level("x86-64-v4", 15),
    CpuLevel {
        arch: Arch::Aarch64,
        name: "baseline",
        flags: &[],
        detect: &[],
    },
    CpuLevel {
        arch: Arch::Aarch64,
        name: "neoverse-n1",
        flags: &["has_lse", "has_fp16", "has_dotprod"],
        detect: &["lse", "fp16", "dotprod"],
    },
];

impl CpuLevel {
    /// The level's name, as `--cpu` takes it.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The Cranelift ISA flags this level enables.
    pub fn flags(&self) -> &'static [&'static str] {
        self.flags
    }

    /// The level called `name` on `arch`.
    pub fn named(arch: Arch, name: &str) -> Option<CpuLevel> {
        LEVELS
            .iter()
            .find(|l| l.arch == arch && l.name == name)
            .copied()
    }

    /// The highest level of this host's architecture whose every extension the host
    /// offers (below [`CPU_CEILING_VAR`] when that is set).
    pub fn host() -> CpuLevel {
        let arch = host_arch();
        let mut best = LEVELS
            .iter()
            .find(|l| l.arch == arch)
            .copied()
            .unwrap_or(LEVELS[0]);
        for level in LEVELS.iter().filter(|l| l.arch == arch) {
            if level.detect.iter().all(|f| host_has(f) == Some(true)) {
                best = *level;
            }
        }
        best
    }
}

impl fmt::Display for CpuLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// A target triple and a CPU level of its architecture: what one compiled runtime is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Platform {
    target: String,
    arch: Arch,
    cpu: CpuLevel,
}

impl Platform {
    /// `target` (a supported triple) at CPU level `cpu`.
    pub fn new(target: &str, cpu: &str) -> Result<Platform, PlatformError> {
        let arch = arch_of(target)?;
        let level = CpuLevel::named(arch, cpu).ok_or_else(|| PlatformError::Cpu {
            given: cpu.to_owned(),
            target: target.to_owned(),
            known: levels_of(arch),
        })?;
        Ok(Platform {
            target: target.to_owned(),
            arch,
            cpu: level,
        })
    }

    /// This host's target at the host's level ([`CpuLevel::host`]): a developer
    /// machine's default.
    pub fn host() -> Platform {
        Platform {
            target: host_target().to_owned(),
            arch: host_arch(),
            cpu: CpuLevel::host(),
        }
    }

    /// This host's target at the level called `cpu`.
    pub fn host_at(cpu: &str) -> Result<Platform, PlatformError> {
        Platform::new(host_target(), cpu)
    }

    /// The target triple.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The CPU level.
    pub fn cpu(&self) -> CpuLevel {
        self.cpu
    }

    /// Whether code for this platform runs on this host's architecture and system.
    pub fn is_host_target(&self) -> bool {
        self.target == host_target()
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.target, self.cpu.name)
    }
}

/// The levels of `target`'s architecture, comma-separated (for messages).
pub fn levels_for(target: &str) -> Result<String, PlatformError> {
    Ok(levels_of(arch_of(target)?))
}

fn levels_of(arch: Arch) -> String {
    LEVELS
        .iter()
        .filter(|l| l.arch == arch)
        .map(|l| l.name)
        .collect::<Vec<_>>()
        .join(", ")
}

fn arch_of(target: &str) -> Result<Arch, PlatformError> {
    let bad = || PlatformError::Target {
        given: target.to_owned(),
    };
    let triple = target_lexicon::Triple::from_str(target).map_err(|_| bad())?;
    if triple.operating_system != target_lexicon::OperatingSystem::Linux {
        return Err(bad());
    }
    match triple.architecture {
        target_lexicon::Architecture::X86_64 => Ok(Arch::X86_64),
        target_lexicon::Architecture::Aarch64(_) => Ok(Arch::Aarch64),
        _ => Err(bad()),
    }
}

/// The triple this binary runs on (e.g. `x86_64-unknown-linux-gnu`).
pub fn host_target() -> &'static str {
    static HOST: OnceLock<String> = OnceLock::new();
    HOST.get_or_init(|| target_lexicon::Triple::host().to_string())
}

fn host_arch() -> Arch {
    if cfg!(target_arch = "aarch64") {
        Arch::Aarch64
    } else {
        Arch::X86_64
    }
}

/// The level named by [`CPU_CEILING_VAR`], read once; an unknown name is ignored with a
/// warning (the host's own features then decide).
fn ceiling() -> Option<CpuLevel> {
    static CEILING: OnceLock<Option<CpuLevel>> = OnceLock::new();
    *CEILING.get_or_init(|| {
        let name = std::env::var(CPU_CEILING_VAR).ok()?;
        let level = CpuLevel::named(host_arch(), &name);
        if level.is_none() {
            tracing::warn!(
                "{CPU_CEILING_VAR}={name:?} is not a CPU level of this host's architecture \
                 ({}); ignored",
                levels_of(host_arch())
            );
        }
        level
    })
}

/// Whether the host offers the extension `std::arch` calls `feature`, as wasmtime asks
/// when it checks a compiled module: `None` for a name this function does not know. A
/// feature above [`CPU_CEILING_VAR`]'s level counts as absent.
pub fn host_has(feature: &str) -> Option<bool> {
    if let Some(ceiling) = ceiling()
        && LEVELS
            .iter()
            .any(|l| l.arch == ceiling.arch && l.detect.contains(&feature))
        && !ceiling.detect.contains(&feature)
    {
        return Some(false);
    }
    detect(feature)
}

#[cfg(target_arch = "x86_64")]
fn detect(feature: &str) -> Option<bool> {
    use std::arch::is_x86_feature_detected as has;
    Some(match feature {
        "cmpxchg16b" => has!("cmpxchg16b"),
        "sse3" => has!("sse3"),
        "ssse3" => has!("ssse3"),
        "sse4.1" => has!("sse4.1"),
        "sse4.2" => has!("sse4.2"),
        "popcnt" => has!("popcnt"),
        "avx" => has!("avx"),
        "avx2" => has!("avx2"),
        "fma" => has!("fma"),
        "bmi1" => has!("bmi1"),
        "bmi2" => has!("bmi2"),
        "lzcnt" => has!("lzcnt"),
        "avx512f" => has!("avx512f"),
        "avx512dq" => has!("avx512dq"),
        "avx512vl" => has!("avx512vl"),
        "avx512bitalg" => has!("avx512bitalg"),
        "avx512vbmi" => has!("avx512vbmi"),
        "avx512vnni" => has!("avx512vnni"),
        "avxvnni" => has!("avxvnni"),
        _ => return None,
    })
}

#[cfg(target_arch = "aarch64")]
fn detect(feature: &str) -> Option<bool> {
    use std::arch::is_aarch64_feature_detected as has;
    Some(match feature {
        "lse" => has!("lse"),
        "paca" => has!("paca"),
        "fp16" => has!("fp16"),
        "dotprod" => has!("dotprod"),
        "i8mm" => has!("i8mm"),
        _ => return None,
    })
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn detect(_feature: &str) -> Option<bool> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_level_detects_each_of_its_flags() {
        for level in LEVELS {
            assert_eq!(level.flags.len(), level.detect.len(), "{}", level.name);
        }
    }

    #[test]
    fn a_level_includes_the_levels_below_it() {
        for arch in [Arch::X86_64, Arch::Aarch64] {
            let levels: Vec<_> = LEVELS.iter().filter(|l| l.arch == arch).collect();
            for pair in levels.windows(2) {
                for flag in pair[0].flags {
                    assert!(
                        pair[1].flags.contains(flag),
                        "{} lacks {flag}",
                        pair[1].name
                    );
                }
            }
        }
    }

    #[test]
    fn platforms_parse_and_refuse() {
        let p = Platform::new("aarch64-unknown-linux-gnu", "neoverse-n1").unwrap();
        assert_eq!(p.to_string(), "aarch64-unknown-linux-gnu-neoverse-n1");
        assert_eq!(p.cpu().flags(), ["has_lse", "has_fp16", "has_dotprod"]);
        assert!(matches!(
            Platform::new("aarch64-unknown-linux-gnu", "x86-64-v3"),
            Err(PlatformError::Cpu { .. })
        ));
        assert!(matches!(
            Platform::new("x86_64-pc-windows-msvc", "baseline"),
            Err(PlatformError::Target { .. })
        ));
        assert!(Platform::host().is_host_target());
    }
}
