#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crow_core::{ChangeKind, FileChange, Snapshotter};
use crow_snapshot::{Options, SnapshotStore, remove_snapshots};

/// Every file and directory under `dir` (path, mode, content), as one comparable value.
fn tree(dir: &Path) -> BTreeMap<String, (u32, Vec<u8>)> {
    fn go(root: &Path, dir: &Path, out: &mut BTreeMap<String, (u32, Vec<u8>)>) {
        for item in fs::read_dir(dir).unwrap() {
            let item = item.unwrap();
            let meta = fs::symlink_metadata(item.path()).unwrap();
            let rel = item
                .path()
                .strip_prefix(root)
                .unwrap()
                .display()
                .to_string();
            let mode = meta.permissions().mode();
            if meta.is_dir() {
                out.insert(rel + "/", (mode, Vec::new()));
                go(root, &item.path(), out);
            } else if meta.file_type().is_symlink() {
                let target = fs::read_link(item.path()).unwrap();
                out.insert(rel, (mode, target.display().to_string().into_bytes()));
            } else {
                out.insert(rel, (mode, fs::read(item.path()).unwrap()));
            }
        }
    }
    let mut out = BTreeMap::new();
    go(dir, dir, &mut out);
    out
}

fn change(path: &str, kind: ChangeKind) -> FileChange {
    FileChange {
        path: path.into(),
        kind,
    }
}

struct Fixture {
    _tmp: tempfile::TempDir,
    project: std::path::PathBuf,
    base: std::path::PathBuf,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("project");
    let base = tmp.path().join("data/snapshots");
    fs::create_dir_all(project.join("src")).unwrap();
    fs::write(project.join("src/main.rs"), "fn main() {}\n").unwrap();
    fs::write(project.join("README.md"), "hello\n").unwrap();
    fs::write(project.join("gone.txt"), "soon deleted\n").unwrap();
    fs::write(project.join("bin.dat"), [0u8, 159, 146, 150, 255, 0, 1]).unwrap();
    fs::set_permissions(project.join("README.md"), fs::Permissions::from_mode(0o755)).unwrap();
    Fixture {
        project: project.canonicalize().unwrap(),
        base,
        _tmp: tmp,
    }
}

#[test]
fn undo_and_redo_restore_the_tree_byte_for_byte() {
    let f = fixture();
    let store = SnapshotStore::open(&f.base, &f.project, Options::default()).unwrap();
    let original = tree(&f.project);
    let before = store.take().unwrap();

    // What an agent's turn might do: edit, create (in a new directory), delete, binary.
    fs::write(
        f.project.join("src/main.rs"),
        "fn main() { println!(\"hi\"); }\n",
    )
    .unwrap();
    fs::create_dir_all(f.project.join("new/deep")).unwrap();
    fs::write(f.project.join("new/deep/file.txt"), "created\n").unwrap();
    fs::remove_file(f.project.join("gone.txt")).unwrap();
    fs::write(f.project.join("bin.dat"), [1u8, 2, 3, 0, 255]).unwrap();
    let changed = tree(&f.project);
    let after = store.take().unwrap();

    assert_eq!(
        store.diff(&before, &after).unwrap(),
        vec![
            change("bin.dat", ChangeKind::Modified),
            change("gone.txt", ChangeKind::Deleted),
            change("new/deep/file.txt", ChangeKind::Created),
            change("src/main.rs", ChangeKind::Modified),
        ]
    );

    let undone = store.revert(&after, &before, false).unwrap();
    assert!(undone.conflicts.is_empty() && undone.unrestorable.is_empty());
    assert_eq!(undone.restored.len(), 4);
    assert_eq!(
        tree(&f.project),
        original,
        "undo gives back the tree exactly"
    );

    let redone = store.revert(&before, &after, false).unwrap();
    assert_eq!(redone.restored.len(), 4);
    assert_eq!(tree(&f.project), changed, "redo brings the change back");
}

#[test]
fn a_hand_edit_since_the_turn_is_a_conflict_and_nothing_is_written() {
    let f = fixture();
    let store = SnapshotStore::open(&f.base, &f.project, Options::default()).unwrap();
    let before = store.take().unwrap();
    fs::write(f.project.join("README.md"), "agent\n").unwrap();
    fs::write(f.project.join("src/main.rs"), "agent\n").unwrap();
    let after = store.take().unwrap();
    // The user edits one of them by hand (same size: only the content tells).
    fs::write(f.project.join("README.md"), "human\n").unwrap();
    let edited = tree(&f.project);

    let refused = store.revert(&after, &before, false).unwrap();
    assert_eq!(
        refused.conflicts,
        vec![Path::new("README.md").to_path_buf()]
    );
    assert!(refused.restored.is_empty());
    assert_eq!(tree(&f.project), edited, "not half applied");

    let forced = store.revert(&after, &before, true).unwrap();
    assert_eq!(forced.restored.len(), 2);
    assert_eq!(
        fs::read_to_string(f.project.join("README.md")).unwrap(),
        "hello\n"
    );
}

#[test]
fn a_change_right_after_a_snapshot_is_seen_despite_the_stat_cache() {
    let f = fixture();
    let store = SnapshotStore::open(&f.base, &f.project, Options::default()).unwrap();
    let first = store.take().unwrap();
    // Same size, same second: only reading the file shows it changed.
    fs::write(f.project.join("README.md"), "HELLO\n").unwrap();
    let second = store.take().unwrap();
    assert_ne!(first, second);
    assert_eq!(
        store.diff(&first, &second).unwrap(),
        vec![change("README.md", ChangeKind::Modified)]
    );
    // Unchanged tree: the same id again.
    assert_eq!(store.take().unwrap(), second);
    // A new process (a fresh store on the same directory) finds the snapshots, and its own
    // of the same tree has the same content (its id may differ: a delta's id names its chain).
    let again = SnapshotStore::open(&f.base, &f.project, Options::default()).unwrap();
    let third = again.take().unwrap();
    assert!(again.diff(&second, &third).unwrap().is_empty());
    assert_eq!(
        again.diff(&first, &third).unwrap(),
        vec![change("README.md", ChangeKind::Modified)]
    );
}

#[test]
fn ignored_large_and_git_files_are_handled_and_noted() {
    let f = fixture();
    fs::create_dir_all(f.project.join(".git/objects")).unwrap();
    fs::write(f.project.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    fs::write(f.project.join(".gitignore"), "target/\n").unwrap();
    fs::create_dir_all(f.project.join("target")).unwrap();
    fs::write(f.project.join("target/out.o"), "build output").unwrap();
    fs::write(f.project.join("big.bin"), vec![7u8; 2000]).unwrap();
    let store = SnapshotStore::open(
        &f.base,
        &f.project,
        Options {
            max_file_bytes: 1000,
        },
    )
    .unwrap();
    let (before, manifest) = store.snapshot().unwrap();
    let paths: Vec<&str> = manifest.files.keys().map(String::as_str).collect();
    assert_eq!(
        paths,
        [
            ".gitignore",
            "README.md",
            "big.bin",
            "bin.dat",
            "gone.txt",
            "src/main.rs"
        ]
    );
    let big = &manifest.files["big.bin"];
    assert!(big.hash.is_none());
    assert!(big.skipped.as_deref().unwrap().contains("larger than 1000"));

    fs::write(f.project.join("big.bin"), vec![8u8; 3000]).unwrap();
    fs::write(f.project.join("target/out.o"), "rebuilt").unwrap();
    let after = store.take().unwrap();
    assert_eq!(
        store.diff(&before, &after).unwrap(),
        vec![change("big.bin", ChangeKind::Modified)],
        "a large file's change is seen; an ignored one's is not"
    );
    let undone = store.revert(&after, &before, false).unwrap();
    assert_eq!(undone.unrestorable.len(), 1);
    assert_eq!(undone.unrestorable[0].0, Path::new("big.bin"));
    assert_eq!(fs::read(f.project.join("big.bin")).unwrap().len(), 3000);
}

#[test]
fn the_store_is_private_and_pruning_keeps_what_a_kept_snapshot_uses() {
    let f = fixture();
    let store = SnapshotStore::open(&f.base, &f.project, Options::default()).unwrap();
    let one = store.take().unwrap();
    fs::write(f.project.join("extra.txt"), "only in two\n").unwrap();
    let two = store.take().unwrap();
    let dir = store.dir().to_path_buf();
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir.join("blobs")), 0o700);
    assert_eq!(mode(&dir.join("manifests")), 0o700);
    assert_eq!(mode(&dir.join(format!("manifests/{one}.json"))), 0o600);
    let blob = |content: &str| {
        let hash = sha(content.as_bytes());
        dir.join("blobs").join(&hash[..2]).join(&hash[2..])
    };
    assert_eq!(mode(&blob("hello\n")), 0o600);

    let pruned = remove_snapshots(&f.base, &f.project, &HashSet::from([two.clone()])).unwrap();
    assert_eq!(pruned.manifests, 1);
    assert_eq!(pruned.blobs, 1, "only the blob of extra.txt");
    assert!(!blob("only in two\n").exists());
    assert!(blob("hello\n").exists(), "kept: snapshot one uses it");
    assert!(store.diff(&one, &two).is_err() || store.manifest(&two).is_ok());
    // The store notices the prune: the next snapshot stores extra.txt's content again.
    let three = store.take().unwrap();
    assert!(
        store
            .manifest(&three)
            .unwrap()
            .files
            .contains_key("extra.txt")
    );
    assert!(blob("only in two\n").exists());
    assert_eq!(
        store.diff(&one, &three).unwrap(),
        vec![change("extra.txt", ChangeKind::Created)]
    );
}

fn sha(data: &[u8]) -> String {
    use std::fmt::Write as _;
    let digest = <sha2::Sha256 as sha2::Digest>::digest(data);
    digest.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[test]
fn empty_directories_are_restored_removed_and_named() {
    let f = fixture();
    fs::create_dir_all(f.project.join("empty")).unwrap();
    fs::create_dir_all(f.project.join("nest/inner")).unwrap();
    let store = SnapshotStore::open(&f.base, &f.project, Options::default()).unwrap();
    let original = tree(&f.project);
    let before = store.take().unwrap();

    // The turn: `rmdir empty`, `rm -r nest`, `mkdir -p made/deeper`.
    fs::remove_dir(f.project.join("empty")).unwrap();
    fs::remove_dir_all(f.project.join("nest")).unwrap();
    fs::create_dir_all(f.project.join("made/deeper")).unwrap();
    let changed = tree(&f.project);
    let after = store.take().unwrap();
    assert_eq!(
        store.diff(&before, &after).unwrap(),
        vec![
            change("empty/", ChangeKind::Deleted),
            change("made/deeper/", ChangeKind::Created),
            change("nest/inner/", ChangeKind::Deleted),
        ]
    );

    let undone = store.revert(&after, &before, false).unwrap();
    assert!(undone.conflicts.is_empty(), "{:?}", undone.conflicts);
    assert_eq!(
        undone.restored.len(),
        3,
        "each named: {:?}",
        undone.restored
    );
    assert_eq!(tree(&f.project), original, "empty directories included");

    let redone = store.revert(&before, &after, false).unwrap();
    assert_eq!(tree(&f.project), changed);
    assert_eq!(redone.restored.len(), 3);

    // Something put by hand into a directory the undo would remove: a conflict.
    fs::write(f.project.join("made/deeper/mine.txt"), "mine\n").unwrap();
    // And a file where an empty directory would come back.
    fs::write(f.project.join("empty"), "a file now\n").unwrap();
    let refused = store.revert(&after, &before, false).unwrap();
    assert_eq!(
        refused.conflicts,
        vec![
            std::path::PathBuf::from("empty/"),
            std::path::PathBuf::from("made/deeper/")
        ]
    );
    assert!(refused.restored.is_empty());
    assert!(f.project.join("made/deeper/mine.txt").exists() && !f.project.join("nest").exists());
}

#[test]
fn a_tree_without_empty_directories_keeps_its_manifest_id() {
    // Manifests written before empty directories were recorded stay equal (no "d" key).
    let f = fixture();
    let store = SnapshotStore::open(&f.base, &f.project, Options::default()).unwrap();
    let id = store.take().unwrap();
    let manifest = fs::read_to_string(
        walk_manifests(&f.base)
            .into_iter()
            .find(|p| p.ends_with(&format!("{id}.json")))
            .unwrap(),
    )
    .unwrap();
    assert!(!manifest.contains("\"d\""), "{manifest}");
}

fn walk_manifests(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for item in fs::read_dir(dir).unwrap().flatten() {
        if item.path().is_dir() {
            out.extend(walk_manifests(&item.path()));
        } else {
            out.push(item.path().display().to_string());
        }
    }
    out
}

/// A revert killed half-way (what `kill -9` during `crow undo` leaves: some files restored,
/// a temporary file, the journal) is finished by the next one: the files already restored
/// are not conflicts, the rest are restored, and the temporary file goes.
#[test]
fn an_undo_cut_off_half_way_is_finished_by_the_next() {
    let f = fixture();
    let store = SnapshotStore::open(&f.base, &f.project, Options::default()).unwrap();
    let original = tree(&f.project);
    let before = store.take().unwrap();
    fs::write(f.project.join("README.md"), "agent\n").unwrap();
    fs::write(f.project.join("src/main.rs"), "agent\n").unwrap();
    fs::remove_file(f.project.join("gone.txt")).unwrap();
    let after = store.take().unwrap();

    // The killed undo: README.md restored, gone.txt half-written, main.rs not reached.
    fs::write(f.project.join("README.md"), "hello\n").unwrap();
    fs::set_permissions(
        f.project.join("README.md"),
        fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let leftover = f.project.join(".tmp-4242-7-gone.txt");
    fs::write(&leftover, "soon").unwrap();
    let journal = serde_json::json!({
        "pid": 4242,
        "paths": [
            f.project.join("README.md"),
            f.project.join("gone.txt"),
            f.project.join("src/main.rs"),
        ],
    });
    fs::write(store.dir().join("journal.json"), journal.to_string()).unwrap();

    let finished = store.revert(&after, &before, false).unwrap();
    assert!(finished.conflicts.is_empty(), "{:?}", finished.conflicts);
    assert!(finished.resumed);
    assert_eq!(finished.restored.len(), 3);
    assert!(!leftover.exists(), "the temporary file is gone");
    assert_eq!(tree(&f.project), original);
    assert!(!store.dir().join("journal.json").exists());

    // A revert that ran to its end leaves no journal, and the next is not "resumed".
    let redone = store.revert(&before, &after, false).unwrap();
    assert!(!redone.resumed && redone.conflicts.is_empty());
    assert!(!store.dir().join("journal.json").exists());
}

/// The watch's incremental snapshots against the oracle, a fresh store's full walk, after
/// each of many changes of every kind: files created, edited (twice within one timestamp
/// tick too), removed, renamed; directories created with files, emptied, removed, renamed;
/// an ignored directory filled; a `.gitignore` that changes what is ignored.
#[test]
fn incremental_snapshots_match_a_full_walk_after_every_kind_of_change() {
    let f = fixture();
    let store = SnapshotStore::open(&f.base, &f.project, Options::default()).unwrap();
    fs::write(f.project.join(".gitignore"), "target/\n").unwrap();
    let p = |rel: &str| f.project.join(rel);
    let ops: Vec<Box<dyn Fn()>> = vec![
        Box::new(|| fs::write(p("src/lib.rs"), "pub fn a() {}\n").unwrap()),
        Box::new(|| {
            fs::write(p("src/lib.rs"), "pub fn b() {}\n").unwrap();
            fs::write(p("src/lib.rs"), "pub fn c() {}\n").unwrap();
        }),
        Box::new(|| {
            fs::create_dir_all(p("pkg/deep/er")).unwrap();
            fs::write(p("pkg/deep/er/x.txt"), "x").unwrap();
            fs::write(p("pkg/top.txt"), "t").unwrap();
        }),
        Box::new(|| fs::remove_file(p("pkg/deep/er/x.txt")).unwrap()),
        Box::new(|| fs::rename(p("pkg"), p("pkg2")).unwrap()),
        Box::new(|| fs::create_dir_all(p("empty/one")).unwrap()),
        Box::new(|| fs::remove_dir_all(p("empty")).unwrap()),
        Box::new(|| {
            fs::create_dir_all(p("target/debug")).unwrap();
            fs::write(p("target/debug/big.o"), "object").unwrap();
        }),
        Box::new(|| fs::rename(p("README.md"), p("src/README.md")).unwrap()),
        Box::new(|| {
            fs::set_permissions(p("src/main.rs"), fs::Permissions::from_mode(0o700)).unwrap()
        }),
        Box::new(|| std::os::unix::fs::symlink("src/main.rs", p("link")).unwrap()),
        Box::new(|| fs::write(p(".gitignore"), "target/\n*.txt\n").unwrap()),
        Box::new(|| fs::write(p("pkg2/deep/er/y.txt"), "ignored now").unwrap()),
        Box::new(|| fs::write(p(".gitignore"), "target/\n").unwrap()),
        Box::new(|| fs::remove_dir_all(p("pkg2")).unwrap()),
        Box::new(|| {}),
    ];
    let mut last = store.take().unwrap();
    for (i, op) in ops.iter().enumerate() {
        op();
        let id = store.take().unwrap();
        let oracle_base = f.base.parent().unwrap().join(format!("oracle{i}"));
        let oracle = SnapshotStore::open(&oracle_base, &f.project, Options::default()).unwrap();
        let expected = oracle.snapshot().unwrap().1;
        let got = store.manifest(&id).unwrap();
        assert_eq!(*got, *expected, "after change {i}");
        if i == ops.len() - 1 {
            assert_eq!(id, last, "an unchanged tree keeps its id");
        }
        last = id;
    }
    assert!(store.walks().incremental > 0, "{:?}", store.walks());
}

/// Snapshots after small changes are stored as deltas on the one before; pruning keeps every
/// base a kept snapshot builds on, and a snapshot whose base went is an error, not a wrong tree.
#[test]
fn deltas_load_as_whole_trees_and_pruning_keeps_their_bases() {
    let f = fixture();
    let store = SnapshotStore::open(&f.base, &f.project, Options::default()).unwrap();
    let one = store.take().unwrap();
    let mut ids = vec![one.clone()];
    for i in 0..5 {
        fs::write(f.project.join(format!("n{i}.txt")), format!("{i}\n")).unwrap();
        ids.push(store.take().unwrap());
    }
    let dir = store.dir().to_path_buf();
    let last = ids.last().unwrap().clone();
    let text = fs::read_to_string(dir.join(format!("manifests/{last}.json"))).unwrap();
    assert!(text.contains("\"base\""), "a delta: {text}");
    assert!(text.len() < 400, "only the change: {text}");
    // A new process loads it as the whole tree.
    let other = SnapshotStore::open(&f.base, &f.project, Options::default()).unwrap();
    let whole = other.manifest(&last).unwrap();
    assert_eq!(whole.files.len(), 4 + 5);
    assert!(other.diff(&one, &last).unwrap().len() == 5);

    // Removing the middle ones (a deleted session's) keeps them where the last builds on them.
    let middle: HashSet<String> = ids[1..5].iter().cloned().collect();
    let pruned = remove_snapshots(&f.base, &f.project, &middle).unwrap();
    assert_eq!(pruned.manifests, 0, "all are bases of the last");
    let fresh = SnapshotStore::open(&f.base, &f.project, Options::default()).unwrap();
    assert_eq!(fresh.manifest(&last).unwrap().files.len(), 9);
    // Removing the last too: then the chain goes, and its blobs with it.
    let all: HashSet<String> = ids[1..].iter().cloned().collect();
    let pruned = remove_snapshots(&f.base, &f.project, &all).unwrap();
    assert_eq!(pruned.manifests, 5);
    assert_eq!(pruned.blobs, 5);
    let fresh = SnapshotStore::open(&f.base, &f.project, Options::default()).unwrap();
    assert!(fresh.manifest(&one).is_ok());
    assert!(fresh.manifest(&last).is_err());
}

/// A delta holding a file too large to store (its entry carries an `i128` time) loads.
#[test]
fn a_delta_with_a_skipped_file_loads() {
    let f = fixture();
    let options = Options { max_file_bytes: 10 };
    let store = SnapshotStore::open(&f.base, &f.project, options.clone()).unwrap();
    let one = store.take().unwrap();
    fs::write(f.project.join("big.bin"), vec![1u8; 100]).unwrap();
    let two = store.take().unwrap();
    let other = SnapshotStore::open(&f.base, &f.project, options).unwrap();
    let whole = other.manifest(&two).unwrap();
    assert!(whole.files["big.bin"].skipped.is_some());
    assert_eq!(
        other.diff(&one, &two).unwrap(),
        vec![change("big.bin", ChangeKind::Created)]
    );
}

/// A hostile repository's symlinked directory pointing outside the project: the snapshot
/// records the link, never what is behind it, and the watch does not follow it — a file
/// written out there changes no snapshot.
#[test]
fn a_symlinked_directory_out_of_the_project_is_recorded_as_a_link_and_never_followed() {
    let f = fixture();
    let outside = f.base.parent().unwrap().join("outside");
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("secret.txt"), "secret").unwrap();
    std::os::unix::fs::symlink(&outside, f.project.join("out")).unwrap();
    let store = SnapshotStore::open(&f.base, &f.project, Options::default()).unwrap();
    let first = store.take().unwrap();
    let manifest = store.manifest(&first).unwrap();
    assert!(manifest.files["out"].link);
    assert!(
        manifest.files.keys().all(|p| !p.starts_with("out/")),
        "{:?}",
        manifest.files.keys()
    );
    fs::write(outside.join("new.txt"), "more").unwrap();
    fs::write(outside.join("secret.txt"), "changed").unwrap();
    assert_eq!(
        store.take().unwrap(),
        first,
        "nothing in the project changed"
    );
    // Renaming the link's target away and back is outside too.
    fs::rename(&outside, outside.with_extension("moved")).unwrap();
    assert_eq!(store.take().unwrap(), first);
}

/// A first snapshot of many files writes one pack, not a file per content: undo reads from
/// it in a new process, a prune removes it whole once nothing uses it, and what an
/// interrupted write left (a temporary pack, a pack without its index) is swept.
#[test]
fn a_first_snapshot_of_many_files_is_one_pack_that_undo_reads_and_pruning_removes() {
    let f = fixture();
    for i in 0..100 {
        fs::write(
            f.project.join(format!("src/f{i:03}.rs")),
            format!("// {i}\n"),
        )
        .unwrap();
    }
    let store = SnapshotStore::open(&f.base, &f.project, Options::default()).unwrap();
    let before = store.take().unwrap();
    let dir = store.dir().to_path_buf();
    let packs = dir.join("packs");
    let names: Vec<String> = fs::read_dir(&packs)
        .unwrap()
        .map(|i| i.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "one pack and its index: {names:?}");
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&packs), 0o700);
    for name in &names {
        assert_eq!(mode(&packs.join(name)), 0o600, "{name}");
    }
    let loose = fs::read_dir(dir.join("blobs")).unwrap().count();
    assert_eq!(loose, 0, "nothing stored loose");

    // A step changes three files; a new process (a `crow undo`) puts them back.
    fs::write(f.project.join("src/f007.rs"), "changed\n").unwrap();
    fs::remove_file(f.project.join("src/f042.rs")).unwrap();
    fs::write(f.project.join("src/new.rs"), "new\n").unwrap();
    let after = store.take().unwrap();
    drop(store);
    let store = SnapshotStore::open(&f.base, &f.project, Options::default()).unwrap();
    let only: HashSet<std::path::PathBuf> = ["src/f007.rs", "src/f042.rs", "src/new.rs"]
        .into_iter()
        .map(Into::into)
        .collect();
    let reverted = store
        .revert_only(&after, &before, Some(&only), false)
        .unwrap();
    assert_eq!(reverted.restored.len(), 3, "{reverted:?}");
    assert!(reverted.conflicts.is_empty() && reverted.unrestorable.is_empty());
    assert_eq!(
        fs::read_to_string(f.project.join("src/f007.rs")).unwrap(),
        "// 7\n"
    );
    assert_eq!(
        fs::read_to_string(f.project.join("src/f042.rs")).unwrap(),
        "// 42\n"
    );
    assert!(!f.project.join("src/new.rs").exists());

    // Leftovers of a killed write, then every snapshot removed: the packs go too.
    fs::write(packs.join(".tmp-1-0.pack"), "partial").unwrap();
    fs::write(
        packs.join("0123456789abcdef0123456789abcdef.pack"),
        "no index",
    )
    .unwrap();
    let all: HashSet<String> = crow_snapshot::snapshot_ids(&f.base, &f.project);
    let pruned = remove_snapshots(&f.base, &f.project, &all).unwrap();
    assert!(pruned.blobs >= 100, "{pruned:?}");
    assert_eq!(fs::read_dir(&packs).unwrap().count(), 0, "no pack left");
}

#[test]
fn a_snapshot_ahead_watches_only_a_large_project_and_misses_nothing_either_way() {
    use crow_snapshot::Ahead;
    let f = fixture();
    // A first session in a small project: the contents stored, no watch.
    let store = SnapshotStore::open(&f.base, &f.project, Options::default()).unwrap();
    assert_eq!(store.snapshot_ahead().unwrap(), Ahead::Unwatched);
    let ahead = store.walks();
    // Edited between the snapshot ahead and the first step: without a watch the step walks
    // the tree again and sees it.
    fs::write(f.project.join("README.md"), "HELLO\n").unwrap();
    let (_, first) = store.snapshot().unwrap();
    assert_eq!(store.walks().full, ahead.full + 1);
    assert_eq!(
        first.files["README.md"].hash.as_deref(),
        Some(sha(b"HELLO\n").as_str())
    );
    drop(store);

    // A later session in the same small project: nothing ahead, the first step walks.
    let store = SnapshotStore::open(&f.base, &f.project, Options::default()).unwrap();
    assert_eq!(store.snapshot_ahead().unwrap(), Ahead::Nothing);
    assert_eq!(store.walks().full, 0);
    drop(store);

    // The project grows past the size where a watch pays: a first session of it (a fresh
    // store) counts that many names and reads it watched; the first step finds it as read.
    for dir in 0..11 {
        let dir = f.project.join(format!("pkg{dir}"));
        fs::create_dir_all(&dir).unwrap();
        for file in 0..100 {
            fs::write(dir.join(format!("{file}.txt")), format!("{file}\n")).unwrap();
        }
    }
    let base = f.base.with_file_name("other");
    let store = SnapshotStore::open(&base, &f.project, Options::default()).unwrap();
    assert_eq!(store.snapshot_ahead().unwrap(), Ahead::Watched);
    assert_eq!(store.walks().full, 1);
    store.snapshot().unwrap();
    assert_eq!(store.walks().unchanged, 1);
    // A change after it is seen by the watch.
    fs::write(f.project.join("pkg3/7.txt"), "changed\n").unwrap();
    let (_, after) = store.snapshot().unwrap();
    assert_eq!(store.walks().incremental, 1);
    assert_eq!(
        after.files["pkg3/7.txt"].hash.as_deref(),
        Some(sha(b"changed\n").as_str())
    );
    drop(store);
    // A later session knows it is large by its stat cache: watched ahead, in one walk.
    let store = SnapshotStore::open(&base, &f.project, Options::default()).unwrap();
    assert_eq!(store.snapshot_ahead().unwrap(), Ahead::Watched);
    assert_eq!(store.walks().full, 1);
}
