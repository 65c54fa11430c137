//! Property tests of the formats read from files a worker can write — by hand: the index;
//! through gitoxide: the configuration, the start of a commit, pack indexes, packs and loose
//! objects — for any bytes (random, or a real file of git's with bytes changed), each reader returns: it
//! never panics, never loops, and never makes room for more than a small multiple of what it was
//! given.
//!
//! The last is checked by the test binary's allocator, which remembers the largest single
//! allocation each thread asks for: a parser that believed a count or a size from the file would
//! ask for far more than the file holds (a pack index once made runner ask for 85 GB).

use super::history::parents;
use super::index::{overexpands_bytes, parse, root_tree, varint};
use super::reads::SMALL_FILE;
use super::*;
use proptest::prelude::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::OnceLock;

/// The system allocator, remembering the largest allocation of each thread.
struct Largest;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
    static TOTAL: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call is the system allocator's; the thread-local is a plain `Cell` with a
// constant initialiser, which neither allocates nor has a destructor.
unsafe impl GlobalAlloc for Largest {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = LARGEST.try_with(|l| l.set(l.get().max(layout.size())));
        let _ = TOTAL.try_with(|t| t.set(t.get().saturating_add(layout.size())));
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = LARGEST.try_with(|l| l.set(l.get().max(new_size)));
        let _ = TOTAL.try_with(|t| t.set(t.get().saturating_add(new_size)));
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Largest = Largest;

/// The largest single allocation `f` asked for on this thread.
fn largest_allocation(f: impl FnOnce()) -> usize {
    LARGEST.with(|l| l.set(0));
    f();
    LARGEST.with(Cell::get)
}

/// How many bytes `f` asked for on this thread in all (freed or not).
fn total_allocation(f: impl FnOnce()) -> usize {
    TOTAL.with(|t| t.set(0));
    f();
    TOTAL.with(Cell::get)
}

/// An index of version 4 whose `n` paths each keep the whole of the one before and add a
/// byte: some 70 bytes a entry on disk, and paths of `n * (n + 1) / 2` bytes in all once
/// expanded.
fn growing_v4_index(n: u32) -> Vec<u8> {
    let mut data = b"DIRC\0\0\0\x04".to_vec();
    data.extend_from_slice(&n.to_be_bytes());
    for _ in 0..n {
        let mut entry = [0u8; 62];
        entry[24..28].copy_from_slice(&0o100644u32.to_be_bytes());
        data.extend_from_slice(&entry);
        // Strip nothing of the previous path; add one byte.
        data.extend_from_slice(b"\0a\0");
    }
    data.extend_from_slice(&[0; 20]);
    data
}

/// A planted index that expands to far more than its size is refused, not expanded: 4,000
/// entries (264 KB) would be 8 MB of paths, a 50 MB index 300 GB.
#[test]
fn a_v4_index_whose_paths_grow_past_its_size_is_refused() {
    let data = growing_v4_index(4_000);
    let mut parsed = None;
    let used = total_allocation(|| parsed = parse(&data, (0, 0)).map(|i| i.entries.len()));
    assert_eq!(parsed, None, "{used} bytes for {} of input", data.len());
    // Entries (larger than their bytes) and paths up to the reader's bound.
    assert!(
        used <= 12 * data.len() + 128 * 1024,
        "{used} bytes for {} of input",
        data.len()
    );
    // Paths of ordinary length are read.
    let small = growing_v4_index(20);
    assert_eq!(parse(&small, (0, 0)).map(|i| i.entries.len()), Some(20));
}

/// How much a parser may ask for at once, given `len` bytes: a few times the input (parsed
/// entries are larger than their bytes) and the fixed buffers of the readers.
fn allowed(len: usize) -> usize {
    4 * len + 64 * 1024
}

/// A real repository's files: its index, a pack index of its objects, a commit as stored.
struct Samples {
    index: Vec<u8>,
    pack_index: Vec<u8>,
    pack: Vec<u8>,
    /// A loose commit object as stored (zlib).
    loose: Vec<u8>,
    commit: Vec<u8>,
    config: String,
}

fn samples() -> &'static Samples {
    static SAMPLES: OnceLock<Samples> = OnceLock::new();
    SAMPLES.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let git = |args: &[&str]| super::tests::git(d, args);
        git(&["init", "-q", "-b", "main"]);
        for (i, path) in ["a.txt", "src/b.rs", "src/deep/c.md", "d"]
            .iter()
            .enumerate()
        {
            let p = d.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, format!("{i}\n")).unwrap();
        }
        git(&["add", "."]);
        git(&["commit", "-q", "-m", "one"]);
        git(&["config", "core.sharedRepository", "group"]);
        let head = git(&["rev-parse", "HEAD"]).trim().to_string();
        let loose =
            std::fs::read(d.join(".git/objects").join(&head[..2]).join(&head[2..])).unwrap();
        git(&["repack", "-adq"]);
        let pack = std::fs::read_dir(d.join(".git/objects/pack"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "idx"))
            .unwrap();
        Samples {
            index: std::fs::read(d.join(".git/index")).unwrap(),
            pack_index: std::fs::read(&pack).unwrap(),
            pack: std::fs::read(pack.with_extension("pack")).unwrap(),
            loose,
            commit: git(&["cat-file", "commit", "HEAD"]).into_bytes(),
            config: std::fs::read_to_string(d.join(".git/config")).unwrap(),
        }
    })
}

/// `base` with some bytes replaced, some cut off, or some repeated: a file nearly git's.
fn mutated(base: &'static [u8]) -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
        any::<prop::sample::Index>(),
        any::<bool>(),
    )
        .prop_map(move |(changes, cut, truncate)| {
            let mut out = base.to_vec();
            for (at, byte) in changes {
                let i = at.index(out.len());
                out[i] = byte;
            }
            if truncate {
                out.truncate(cut.index(out.len() + 1));
            }
            out
        })
}

/// Bytes of a pack index's header with a fan-out table of any values, and what follows.
fn any_pack_index() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec(any::<u32>(), 256),
        prop::collection::vec(any::<u8>(), 0..512),
    )
        .prop_map(|(fanout, rest)| {
            let mut out = vec![0xff, b't', b'O', b'c', 0, 0, 0, 2];
            for f in fanout {
                out.extend_from_slice(&f.to_be_bytes());
            }
            out.extend_from_slice(&rest);
            out
        })
}

/// An object store whose one pack has index `idx` (and the sample's pack), as a worker could
/// leave one.
fn store_with_index(idx: &[u8]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("pack");
    std::fs::create_dir(&pack).unwrap();
    std::fs::write(pack.join("pack-x.idx"), idx).unwrap();
    std::fs::write(pack.join("pack-x.pack"), &samples().pack).unwrap();
    dir
}

/// Look `oid` up in a store whose pack index holds `bytes`: the largest allocation it took.
fn look_up(bytes: &[u8], oid: &Oid) -> usize {
    let dir = store_with_index(bytes);
    largest_allocation(|| {
        if let Some(objects) = Objects::open(dir.path(), Reach::All) {
            let _ = objects.commit_or_tag(oid);
            let _ = objects.contains(oid);
        }
    })
}

/// Read loose object `oid` stored as `bytes`, as every read allows: the largest allocation.
fn read_loose(bytes: &[u8], oid: &Oid) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let name = hex(oid);
    std::fs::create_dir(dir.path().join(&name[..2])).unwrap();
    std::fs::write(dir.path().join(&name[..2]).join(&name[2..]), bytes).unwrap();
    largest_allocation(|| {
        for reach in [Reach::All, Reach::Loose(SMALL_FILE)] {
            if let Some(objects) = Objects::open(dir.path(), reach) {
                let _ = objects.commit_or_tag(oid);
            }
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn any_index_is_parsed_or_refused(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        let mut data = b"DIRC\0\0\0\x02".to_vec();
        data.extend_from_slice(&bytes);
        let used = largest_allocation(|| { let _ = parse(&data, (0, 0)); });
        prop_assert!(used <= allowed(data.len()), "{used} bytes for {} of input", data.len());
    }

    #[test]
    fn any_version_4_index_is_measured_without_expanding_it(
        bytes in prop::collection::vec(any::<u8>(), 0..2048)
    ) {
        let mut data = b"DIRC\0\0\0\x04".to_vec();
        data.extend_from_slice(&bytes);
        let used = largest_allocation(|| { let _ = overexpands_bytes(&data); });
        prop_assert!(used <= 64, "{used} bytes for {} of input", data.len());
    }

    #[test]
    fn a_changed_index_is_parsed_or_refused(data in mutated(&samples().index)) {
        let used = largest_allocation(|| { let _ = parse(&data, (0, 0)); });
        prop_assert!(used <= allowed(data.len()), "{used} bytes for {} of input", data.len());
    }

    #[test]
    fn any_pack_index_is_searched_or_refused(bytes in any_pack_index(), oid in any::<[u8; 20]>()) {
        let used = look_up(&bytes, &oid);
        prop_assert!(used <= allowed(bytes.len()), "{used} bytes for {} of input", bytes.len());
    }

    #[test]
    fn a_changed_pack_index_is_searched_or_refused(
        bytes in mutated(&samples().pack_index),
        oid in any::<[u8; 20]>(),
    ) {
        let used = look_up(&bytes, &oid);
        prop_assert!(used <= allowed(bytes.len()), "{used} bytes for {} of input", bytes.len());
    }

    #[test]
    fn a_changed_commit_gives_parents_or_nothing(body in mutated(&samples().commit)) {
        let used = largest_allocation(|| {
            let _ = parents(&body);
            let _ = root_tree(&body);
            let mut at = 0;
            let _ = varint(&body, &mut at);
        });
        prop_assert!(used <= allowed(body.len()), "{used} bytes for {} of input", body.len());
    }

    #[test]
    fn a_changed_loose_object_is_read_or_refused(bytes in mutated(&samples().loose)) {
        let used = read_loose(&bytes, &[0x11; 20]);
        prop_assert!(used <= allowed(bytes.len()), "{used} bytes for {} of input", bytes.len());
    }

    #[test]
    fn any_loose_object_is_read_or_refused(bytes in prop::collection::vec(any::<u8>(), 1..1024)) {
        let used = read_loose(&bytes, &[0x22; 20]);
        prop_assert!(used <= allowed(bytes.len()), "{used} bytes for {} of input", bytes.len());
    }

    #[test]
    fn any_configuration_is_read_or_refused(
        text in "(\\[[a-z \"\\\\.]{0,12}\\]|[a-zA-Z.]{0,8} *= *[^\\n]{0,16}|;[^\\n]{0,8}|\\\\)\\n?{0,3}",
        changed in mutated(samples().config.as_bytes()),
    ) {
        for t in [text, String::from_utf8_lossy(&changed).into_owned()] {
            let used = largest_allocation(|| { let _ = super::super::config::entries(&t); });
            prop_assert!(used <= allowed(t.len()), "{used} bytes for {} of input", t.len());
        }
    }
}

/// The pack index a worker planted: 2^32 − 1 names claimed in one bucket of a 1 KB file.
#[test]
fn a_pack_index_that_claims_every_name_is_not_believed() {
    let mut bytes = vec![0xff, b't', b'O', b'c', 0, 0, 0, 2];
    for _ in 0..256 {
        bytes.extend_from_slice(&u32::MAX.to_be_bytes());
    }
    let used = look_up(&bytes, &[0; 20]);
    assert!(used <= allowed(bytes.len()), "{used} bytes");
}

/// The real pack index still answers: every object of the sample repository is found, and one
/// that is not there is not.
#[test]
fn a_real_pack_index_finds_what_it_holds() {
    let s = samples();
    let total = u32::from_be_bytes(s.pack_index[8 + 255 * 4..8 + 256 * 4].try_into().unwrap());
    assert!(total >= 6, "{total} objects");
    let dir = store_with_index(&s.pack_index);
    let objects = Objects::open(dir.path(), Reach::All).unwrap();
    let mut commits = 0;
    for k in 0..total as usize {
        let at = 8 + 256 * 4 + k * 20;
        let oid: Oid = s.pack_index[at..at + 20].try_into().unwrap();
        assert!(objects.contains(&oid), "object {k}");
        if let Some((kind, body)) = objects.commit_or_tag(&oid) {
            assert_eq!(kind, Kind::Commit);
            assert!(body.starts_with(b"tree "));
            commits += 1;
        }
    }
    assert_eq!(commits, 1);
    assert!(!objects.contains(&[0xab; 20]));
    assert!(objects.commit_or_tag(&[0xab; 20]).is_none());
}

/// A loose object a worker planted whose header claims 64 MiB: refused before anything of that
/// size is made room for (the content read through gitoxide is bounded).
#[test]
fn a_loose_object_that_claims_a_huge_size_is_not_believed() {
    let raw = b"commit 67108864\0tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\n".to_vec();
    let bytes = miniz_oxide::deflate::compress_to_vec_zlib(&raw, 1);
    let used = read_loose(&bytes, &[0x33; 20]);
    assert!(used <= allowed(bytes.len()), "{used} bytes");
}

/// A loose object whose header claims fewer bytes than its stream holds past it, in the part
/// inflated with the header: gitoxide's inflate (gix-zlib 0.4.1) indexes past the room it made
/// for the claimed size and panics, so such an object is refused before it is asked. A worker
/// could plant one where runner reads a commit.
#[test]
fn a_loose_object_that_claims_less_than_it_holds_is_refused() {
    let raw = b"commit 2\0tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\n".to_vec();
    let bytes = miniz_oxide::deflate::compress_to_vec_zlib(&raw, 1);
    let dir = tempfile::tempdir().unwrap();
    let oid = [0x44; 20];
    let name = hex(&oid);
    std::fs::create_dir(dir.path().join(&name[..2])).unwrap();
    std::fs::write(dir.path().join(&name[..2]).join(&name[2..]), &bytes).unwrap();
    for reach in [Reach::All, Reach::Loose(SMALL_FILE)] {
        let objects = Objects::open(dir.path(), reach).unwrap();
        assert!(objects.commit_or_tag(&oid).is_none());
    }
}
