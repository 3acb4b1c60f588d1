//! The limits' parsing, defaults and checks.

use super::*;

#[test]
fn fuel_accepts_separators_and_suffixes() {
    assert_eq!("2_000_000_000".parse(), Ok(Fuel(2_000_000_000)));
    assert_eq!("2G".parse(), Ok(Fuel(2_000_000_000)));
    assert_eq!("150M".parse(), Ok(Fuel(150_000_000)));
    assert!("0".parse::<Fuel>().is_err());
    assert!("-5".parse::<Fuel>().is_err());
    assert!("99999999999999999999G".parse::<Fuel>().is_err());
    assert_eq!(Fuel(2_000_000_000).to_string(), "2_000_000_000");
}

#[test]
fn sizes_and_durations_parse_human_strings() {
    assert_eq!(parse_size("256MiB"), Ok(ByteSize::mib(256)));
    assert_eq!(parse_size("1048576"), Ok(ByteSize::mib(1)));
    assert!(parse_size("lots").is_err());
    assert_eq!(parse_size("0"), Ok(ByteSize::b(0)));
    assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
    assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
    assert!(parse_duration("soon").is_err());
}

#[test]
fn defaults_read_back_from_their_display() {
    // The CLI shows each default with Display and parses it back.
    assert_eq!(DEFAULT_FUEL.to_string().parse(), Ok(DEFAULT_FUEL));
    assert_eq!(
        DEFAULT_RETURN_CHARS.to_string().parse(),
        Ok(DEFAULT_RETURN_CHARS)
    );
    assert_eq!(
        DEFAULT_OPEN_FILES.to_string().parse(),
        Ok(DEFAULT_OPEN_FILES)
    );
    assert_eq!(
        DEFAULT_FILES_CREATED.to_string().parse(),
        Ok(DEFAULT_FILES_CREATED)
    );
    for size in [
        DEFAULT_MEMORY,
        DEFAULT_STDOUT,
        DEFAULT_STDERR,
        DEFAULT_DISK_WRITE,
    ] {
        assert_eq!(parse_size(&size.to_string()), Ok(size));
    }
    let shown = humantime::format_duration(DEFAULT_DEADLINE).to_string();
    assert_eq!(parse_duration(&shown), Ok(DEFAULT_DEADLINE));
    assert_eq!("50_000".parse(), Ok(CharLimit(50_000)));
    assert!("0".parse::<CharLimit>().is_err());
}

#[test]
fn only_the_output_and_disk_caps_may_be_zero() {
    let none_allowed = Limits {
        stdout: ByteSize::b(0),
        stderr: ByteSize::b(0),
        disk_write: ByteSize::b(0),
        files_created: FileCount(0),
        ..Limits::default()
    };
    assert_eq!(none_allowed.check(), Ok(()));
    let at_minimum = Limits {
        fuel: MIN_FUEL,
        deadline: MIN_DEADLINE,
        memory: MIN_MEMORY,
        return_chars: MIN_RETURN_CHARS,
        open_files: MIN_OPEN_FILES,
        ..none_allowed
    };
    assert_eq!(at_minimum.check(), Ok(()));
    let below: [(&str, Limits); 5] = [
        (
            "fuel",
            Limits {
                fuel: Fuel(0),
                ..at_minimum
            },
        ),
        (
            "deadline_ms",
            Limits {
                deadline: Duration::from_micros(999),
                ..at_minimum
            },
        ),
        (
            "memory_bytes",
            Limits {
                memory: ByteSize::b(MIN_MEMORY.as_u64() - 1),
                ..at_minimum
            },
        ),
        (
            "return_char_limit",
            Limits {
                return_chars: CharLimit(0),
                ..at_minimum
            },
        ),
        (
            "open_files",
            Limits {
                open_files: FileCount(0),
                ..at_minimum
            },
        ),
    ];
    for (name, limits) in below {
        match limits.check() {
            Err(LimitError::BelowMinimum { limit, .. }) => assert_eq!(limit, name),
            other => panic!("{name}: {other:?}"),
        }
    }
    // The flag parsers apply the same rule.
    assert_eq!("0".parse(), Ok(FileCount(0)));
    assert!(parse_open_files("0").is_err());
    assert_eq!(parse_open_files("1"), Ok(MIN_OPEN_FILES));
    assert!("0".parse::<Fuel>().is_err());
    assert!("0".parse::<CharLimit>().is_err());
    assert_eq!(parse_memory("40MiB"), Ok(MIN_MEMORY));
    let refused = parse_memory("39MiB").unwrap_err().to_string();
    assert!(
        refused.contains("below the minimum of 40.0 MiB"),
        "{refused}"
    );
    assert_eq!(parse_deadline("1ms"), Ok(MIN_DEADLINE));
    assert!(parse_deadline("999us").is_err());
}

#[test]
fn bounded_by_takes_the_lower_of_each() {
    let tool = Limits {
        fuel: Fuel(10),
        memory: ByteSize::gib(1),
        ..Limits::default()
    };
    let ceilings = Limits {
        fuel: Fuel(100),
        memory: ByteSize::mib(64),
        ..Limits::default()
    };
    let bounded = tool.bounded_by(&ceilings);
    assert_eq!(bounded.fuel, Fuel(10));
    assert_eq!(bounded.memory, ByteSize::mib(64));
}

#[test]
fn limits_stored_before_the_file_limits_read_back_unchanged() {
    let stored = r#"{"fuel":2000000000,"deadline_ms":10000,"memory_bytes":268435456,"stdout_bytes":1048576,"stderr_bytes":1048576,"return_char_limit":50000}"#;
    let limits: Limits = serde_json::from_str(stored).unwrap();
    assert_eq!(limits, Limits::default());
    assert_eq!(serde_json::to_string(&limits).unwrap(), stored);
    let raised = Limits {
        open_files: FileCount(512),
        ..Limits::default()
    };
    assert!(
        serde_json::to_string(&raised)
            .unwrap()
            .contains(r#""open_files":512"#)
    );
    assert_eq!("1_000".parse(), Ok(FileCount(1000)));
}
