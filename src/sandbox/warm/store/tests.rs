//! The warm-state store: budget, eviction, sweeping and shipped states.

use super::super::delta::{BaseRef, DeltaShape};
use super::*;

fn store(budget: u64) -> (tempfile::TempDir, WarmStore) {
    let home = tempfile::tempdir().unwrap();
    let store = WarmStore::new(home.path(), "snapshot".into(), ByteSize(budget));
    (home, store)
}

/// A warm state whose delta takes `bytes`.
fn prepared(bytes: usize) -> Prepared {
    Prepared {
        record: Record::Warm {
            base: BaseRef {
                identity: "snapshot".into(),
                image_len: 4096,
                crc32: 1,
            },
            memory_pages: 1,
            memory_len: 4096,
            globals: Vec::new(),
            delta: DeltaShape {
                pages: 1,
                runs: 1,
                compressed: bytes as u64,
            },
            prepared_ms: 1,
            fuel: 1,
        },
        payload: Some(vec![7; bytes]),
    }
}

fn keys(store: &WarmStore) -> Vec<String> {
    let mut keys: Vec<String> = store
        .states()
        .unwrap()
        .iter()
        .map(|s| s.path.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    keys.sort();
    keys
}

fn used(store: &WarmStore, key: &str, seconds_ago: u64) {
    File::options()
        .write(true)
        .open(store.path(key))
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_secs(seconds_ago))
        .unwrap();
}

#[test]
fn a_stored_state_reads_back_with_its_delta() {
    let (_home, store) = store(1 << 20);
    let Warmth::Warm(state) = store.store("a", prepared(5000)).unwrap() else {
        panic!("stored cold")
    };
    assert!(store.present(&state));
    let (record, delta, len) = store.read("a", true).unwrap().unwrap();
    assert!(matches!(record, Record::Warm { .. }));
    assert_eq!(delta, vec![7; 5000]);
    assert_eq!(len, state.disk_bytes);
}

#[test]
fn a_shipped_state_is_copied_into_the_home_and_the_bundle_left_as_it_was() {
    let (bundle, maker) = store(1 << 20);
    maker.store("a", prepared(5000)).unwrap();
    let shipped = maker.dir().to_owned();
    let listing = || {
        let mut names: Vec<_> = std::fs::read_dir(&shipped)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        names
    };
    let before = listing();
    let (home, device) = store(1 << 20);
    let device = device.with_shipped(shipped.clone());
    let (record, delta, _) = device.read("a", true).unwrap().unwrap();
    assert!(matches!(record, Record::Warm { .. }));
    assert_eq!(delta, vec![7; 5000]);
    assert!(home.path().join("warm/a.warm").is_file());
    // Another key, shipped by no one: none, and nothing copied.
    assert!(device.read("b", false).unwrap().is_none());
    assert_eq!(keys(&device), ["a"]);
    assert_eq!(listing(), before);
    drop(bundle);
}

#[test]
fn storing_past_the_budget_evicts_the_least_recently_used_first() {
    // Room for three states of ~40 KiB (each takes ten 4 KiB blocks).
    let (_home, store) = store(140 * 1024);
    for key in ["a", "b", "c"] {
        store.store(key, prepared(40_000)).unwrap();
    }
    // Used longest ago: b, then a, then c.
    used(&store, "b", 300);
    used(&store, "a", 200);
    used(&store, "c", 100);
    store.store("d", prepared(40_000)).unwrap();
    assert_eq!(keys(&store), ["a", "c", "d"]);
    store.store("e", prepared(40_000)).unwrap();
    assert_eq!(keys(&store), ["c", "d", "e"]);
    assert!(store.usage().unwrap().1 <= store.budget().as_u64());
}

#[test]
fn a_state_larger_than_the_whole_budget_is_not_stored_and_runs_cold() {
    let (_home, store) = store(64 * 1024);
    store.store("small", prepared(1000)).unwrap();
    let Warmth::Cold(reason) = store.store("big", prepared(100_000)).unwrap() else {
        panic!("a state over the budget was stored")
    };
    assert!(reason.message.contains("--warm-budget"), "{reason}");
    // Nothing was evicted for it.
    assert_eq!(keys(&store), ["small"]);
}

#[test]
fn a_lowered_budget_is_enforced_at_start() {
    let (home, store) = store(1 << 20);
    for key in ["a", "b", "c"] {
        store.store(key, prepared(40_000)).unwrap();
    }
    used(&store, "a", 300);
    let lowered = WarmStore::new(home.path(), "snapshot".into(), ByteSize(100 * 1024));
    let swept = lowered.sweep().unwrap();
    assert_eq!(swept.evicted, 1);
    assert_eq!(keys(&lowered), ["b", "c"]);
}

#[test]
fn leftovers_of_interrupted_preparations_go_at_start_and_one_being_written_stays() {
    let (_home, store) = store(1 << 20);
    store.store("kept", prepared(100)).unwrap();
    let dir = store.dir().to_owned();
    // A writer that died: its temporary file is unlocked.
    std::fs::write(dir.join(".tmp-dead"), b"half a state").unwrap();
    // The first format's files.
    std::fs::write(dir.join("old.json"), b"{}").unwrap();
    std::fs::write(dir.join("old.mem"), b"image").unwrap();
    // A writer still at work holds its lock.
    let writing = dir.join(".tmp-alive");
    let held = File::create(&writing).unwrap();
    rustix::fs::flock(&held, rustix::fs::FlockOperation::LockExclusive).unwrap();

    let swept = store.sweep().unwrap();
    assert_eq!(swept.leftovers, 3);
    assert_eq!(swept.kept, 1);
    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, [".tmp-alive", "kept.warm"]);
    drop(held);
    store.sweep().unwrap();
    assert!(!writing.exists());
}

#[test]
fn a_state_cut_short_is_removed_when_read() {
    let (_home, store) = store(1 << 20);
    store.store("cut", prepared(5000)).unwrap();
    let path = store.path("cut");
    let len = std::fs::metadata(&path).unwrap().len();
    File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len - 10)
        .unwrap();
    assert!(store.read("cut", true).unwrap().is_none());
    assert!(!path.exists());
}

#[test]
fn touching_a_state_marks_it_used_at_most_once_a_minute() {
    let (_home, store) = store(1 << 20);
    let Warmth::Warm(state) = store.store("a", prepared(100)).unwrap() else {
        panic!("stored cold")
    };
    used(&store, "a", 3600);
    let age = || {
        SystemTime::now()
            .duration_since(
                std::fs::metadata(store.path("a"))
                    .unwrap()
                    .modified()
                    .unwrap(),
            )
            .unwrap()
    };
    // Just stored by this process: its use is already recorded.
    store.touch(&state);
    assert!(age() >= Duration::from_secs(3599));
    store.touched().clear();
    store.touch(&state);
    assert!(age() < Duration::from_secs(60));
}

#[test]
fn each_owner_has_a_folder_and_evicts_its_own_states_past_half_the_budget() {
    // Room for six states of ~40 KiB; an owner may take half: three.
    let (_home, store) = store(250 * 1024);
    let (a, b) = (
        store.owner_dir(&ShareKey::new("tenant_a")).unwrap(),
        store.owner_dir(&ShareKey::new("tenant_b")).unwrap(),
    );
    assert_ne!(a, b);
    assert_eq!(a.parent(), Some(store.dir()));
    let key = |dir: &Path, n: &str| format!("{}/{n}", dir.file_name().unwrap().to_string_lossy());
    store.store(&key(&b, "b1"), prepared(40_000)).unwrap();
    used(&store, &key(&b, "b1"), 1000);
    for n in ["a1", "a2", "a3"] {
        store.store(&key(&a, n), prepared(40_000)).unwrap();
    }
    used(&store, &key(&a, "a2"), 500);
    // A fourth of a's evicts a's least recently used, not b's older one.
    store.store(&key(&a, "a4"), prepared(40_000)).unwrap();
    assert_eq!(keys(&store), ["a1", "a3", "a4", "b1"]);
    assert!(store.path(&key(&a, "a4")).starts_with(&a));
}

#[test]
fn a_tools_key_names_its_owners_folder() {
    let (_home, store) = store(1 << 20);
    let tool = crate::sandbox::ToolFolder::temporary("t.py", "def t():\n    return 1\n").unwrap();
    let owner = ShareKey::new("tenant_a");
    let key = store.key(&tool, None, &owner).unwrap();
    let folder = store.owner_dir(&owner).unwrap();
    assert!(store.path(&key).starts_with(&folder), "{key}");
    let other = store.key(&tool, None, &ShareKey::new("tenant_b")).unwrap();
    assert_ne!(
        std::path::Path::new(&key).parent(),
        std::path::Path::new(&other).parent()
    );
}

#[test]
fn a_new_build_forgets_only_the_states_of_an_earlier_build_of_its_name() {
    let (_home, store) = store(1 << 20);
    let with_base = |identity: &str, crc32: u32| {
        let mut state = prepared(100);
        if let Record::Warm { base, .. } = &mut state.record {
            *base = BaseRef {
                identity: identity.into(),
                image_len: 4096,
                crc32,
            };
        }
        state
    };
    store.store("same-image", with_base("snapshot", 1)).unwrap();
    store
        .store("earlier-build", with_base("snapshot", 2))
        .unwrap();
    store
        .store("other-snapshot", with_base("other", 2))
        .unwrap();
    let running = BaseRef {
        identity: "snapshot".into(),
        image_len: 4096,
        crc32: 1,
    };
    assert_eq!(store.forget_other_images(&running).unwrap(), 1);
    assert_eq!(keys(&store), ["other-snapshot", "same-image"]);
    assert_eq!(store.forget_other_images(&running).unwrap(), 0);
}
