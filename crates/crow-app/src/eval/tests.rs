#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::report::{self, wilson};
use super::*;

fn write(dir: &Path, name: &str, toml: &str) {
    std::fs::create_dir_all(dir.join(name)).unwrap();
    std::fs::write(dir.join(name).join(TASK_FILE), toml).unwrap();
}

#[test]
fn a_folder_of_tasks_is_read_sorted_with_defaults() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "b-rename",
        "prompt = \"rename\"\ncheck = \"true\"\ntimeout = 30\ntags = [\"refactor\"]\n",
    );
    write(
        dir.path(),
        "a-fix",
        "prompt = \"fix it\"\ncheck = \"make test\"\nsetup = \"make\"\n",
    );
    std::fs::create_dir_all(dir.path().join("notes")).unwrap();
    let tasks = load_tasks(dir.path()).unwrap();
    let names: Vec<&str> = tasks.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a-fix", "b-rename"]);
    assert_eq!(tasks[0].timeout, DEFAULT_TIMEOUT);
    assert_eq!(tasks[0].mode, "full-auto");
    assert_eq!(tasks[0].setup.as_deref(), Some("make"));
    assert_eq!(tasks[0].source, Source::Folder(dir.path().join("a-fix")));
    assert_eq!(tasks[1].timeout, Duration::from_secs(30));
    assert_eq!(tasks[1].tags, ["refactor"]);
}

#[test]
fn bad_tasks_say_what_is_wrong_and_where() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "t", "prompt = \"x\"\n");
    let e = format!("{:#}", load_tasks(dir.path()).unwrap_err());
    assert!(e.contains("task.toml") && e.contains("check"), "{e}");

    write(
        dir.path(),
        "t",
        "prompt = \"x\"\ncheck = \"y\"\nmode = \"yolo\"\n",
    );
    let e = format!("{:#}", load_tasks(dir.path()).unwrap_err());
    assert!(e.contains("'yolo' is not a mode"), "{e}");

    write(
        dir.path(),
        "t",
        "prompt = \"x\"\ncheck = \"y\"\nrepo = \".\"\n",
    );
    let e = format!("{:#}", load_tasks(dir.path()).unwrap_err());
    assert!(e.contains("`repo` and `commit` go together"), "{e}");

    write(
        dir.path(),
        "t",
        "prompt = \"x\"\ncheck = \"y\"\nrepo = \".\"\ncommit = \"--upload-pack=evil\"\n",
    );
    let e = format!("{:#}", load_tasks(dir.path()).unwrap_err());
    assert!(e.contains("is not a commit"), "{e}");

    write(
        dir.path(),
        "t",
        "prompt = \"x\"\ncheck = \"y\"\nchek = \"z\"\n",
    );
    let e = format!("{:#}", load_tasks(dir.path()).unwrap_err());
    assert!(e.contains("chek"), "an unknown key is named: {e}");

    let empty = tempfile::tempdir().unwrap();
    let e = format!("{:#}", load_tasks(empty.path()).unwrap_err());
    assert!(e.contains("holds no task"), "{e}");
}

#[test]
fn a_jsonl_file_names_its_tasks_and_resolves_paths_against_itself() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tasks.jsonl");
    std::fs::write(
        &file,
        "{\"name\": \"one\", \"prompt\": \"p\", \"check\": \"c\", \"dir\": \"proj\"}\n\n{\"name\": \"two\", \"prompt\": \"p\", \"check\": \"c\", \"repo\": \"r\", \"commit\": \"abc\"}\n",
    )
    .unwrap();
    let tasks = load_tasks(&file).unwrap();
    assert_eq!(tasks[0].source, Source::Folder(dir.path().join("proj")));
    assert_eq!(
        tasks[1].source,
        Source::Git {
            repo: dir.path().join("r"),
            commit: "abc".to_owned()
        }
    );
    std::fs::write(&file, "{\"prompt\": \"p\", \"check\": \"c\"}\n").unwrap();
    let e = format!("{:#}", load_tasks(&file).unwrap_err());
    assert!(e.contains("line 1") && e.contains("`name`"), "{e}");
    std::fs::write(
        &file,
        "{\"name\": \"../up\", \"prompt\": \"p\", \"check\": \"c\"}\n",
    )
    .unwrap();
    let e = format!("{:#}", load_tasks(&file).unwrap_err());
    assert!(e.contains("cannot name a task"), "{e}");
}

fn tasks(names: &[&str]) -> Vec<Task> {
    names
        .iter()
        .map(|n| Task {
            name: (*n).to_owned(),
            prompt: "p".to_owned(),
            check: "true".to_owned(),
            setup: None,
            timeout: DEFAULT_TIMEOUT,
            tags: Vec::new(),
            mode: "full-auto".to_owned(),
            source: Source::Empty,
        })
        .collect()
}

#[test]
fn the_plan_is_every_combination_and_shards_split_it_disjointly() {
    let setups = Setup::matrix(
        &["build".to_owned(), "build-judge".to_owned()],
        &[0, 4],
        &[],
    );
    assert_eq!(setups.len(), 4);
    assert_eq!(setups[1].label(), "build L4");
    let all = plan(&tasks(&["a", "b", "c"]), &setups, 2);
    assert_eq!(all.len(), 3 * 4 * 2);
    let keys: HashSet<String> = all.iter().map(Planned::key).collect();
    assert_eq!(keys.len(), all.len(), "every run has its own key");

    let shards: Vec<Vec<Planned>> = (1..=3)
        .map(|k| {
            format!("{k}/3")
                .parse::<Shard>()
                .unwrap()
                .select(all.clone())
        })
        .collect();
    let mut seen = HashSet::new();
    for shard in &shards {
        assert!(shard.len() == 8, "even parts: {}", shard.len());
        for run in shard {
            assert!(seen.insert(run.key()), "a run is in two shards");
        }
    }
    assert_eq!(seen, keys, "together the shards are the plan");
    for bad in ["0/3", "4/3", "3", "a/b", "1/0"] {
        assert!(bad.parse::<Shard>().is_err(), "{bad}");
    }
}

fn record(task: &str, agent: &str, passed: bool, tokens: u64, cost: Option<f64>) -> Record {
    Record {
        task: task.to_owned(),
        agent: agent.to_owned(),
        level: None,
        model: None,
        repeat: 1,
        passed,
        exit: "complete".to_owned(),
        exit_code: Some(0),
        turns: 3,
        review_rounds: u32::from(agent != "build"),
        tool_calls: 2,
        tokens: Tokens {
            input: tokens,
            output: 10,
            cached: 0,
        },
        cost,
        seconds: 1.5,
        session_id: None,
        tags: Vec::new(),
        note: None,
    }
}

#[test]
fn results_resume_where_they_stopped_and_a_torn_line_is_run_again() {
    let dir = tempfile::tempdir().unwrap();
    let done = record("a", "build", true, 100, None);
    let line = serde_json::to_string(&done).unwrap();
    std::fs::write(
        dir.path().join(RESULTS_FILE),
        format!("{line}\n{{\"task\": \"b\", \"agent\": \"bui"),
    )
    .unwrap();
    let read = read_results(dir.path()).unwrap();
    assert_eq!(read, [done]);
    let setups = Setup::matrix(&["build".to_owned()], &[], &[]);
    let left = missing(plan(&tasks(&["a", "b"]), &setups, 1), &read);
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].task, "b");
    assert!(read_results(&dir.path().join("none")).unwrap().is_empty());
}

#[test]
fn the_wilson_interval_is_honest_at_the_edges() {
    let (lo, hi) = wilson(0, 4);
    assert!(lo == 0.0 && (hi - 0.49).abs() < 0.01, "{lo} {hi}");
    let (lo, hi) = wilson(4, 4);
    assert!((lo - 0.51).abs() < 0.01 && hi == 1.0, "{lo} {hi}");
    let (lo, hi) = wilson(50, 100);
    assert!((lo - 0.404).abs() < 0.01 && (hi - 0.596).abs() < 0.01);
    assert_eq!(wilson(0, 0), (0.0, 1.0));
}

#[test]
fn the_report_tables_each_configuration_and_each_task() {
    let records = [
        record("a", "build", true, 1000, Some(0.01)),
        record("b", "build", false, 3000, Some(0.03)),
        record("a", "build-judge", true, 2000, Some(0.02)),
        record("b", "build-judge", true, 4000, Some(0.04)),
    ];
    let summaries = report::summarize(&records);
    assert_eq!(summaries.len(), 2);
    assert_eq!((summaries[0].passed, summaries[0].runs), (1, 2));
    assert_eq!(summaries[0].median_tokens, 2010.0);
    assert_eq!(summaries[1].median_cost, Some(0.03));
    let md = report::markdown(&records);
    insta::assert_snapshot!(md);
    let chart = report::svg(&summaries);
    assert!(chart.starts_with("<svg") && chart.trim_end().ends_with("</svg>"));
    assert_eq!(chart.matches("class=\"configuration\"").count(), 2);
    assert!(chart.contains("median cost per run"));
    let other = [record("a", "build", true, 900, None)];
    let compared = report::compare(&records, &other, "before", "after");
    assert!(
        compared.contains("| build | 50% (1/2) | 100% (1/1) | +50 points |"),
        "{compared}"
    );
    assert!(compared.contains("| build-judge | 100% (2/2) | – | – |"));
}

#[test]
fn a_task_copy_keeps_links_as_links_and_leaves_the_task_file_behind() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "the user's secret\n").unwrap();
    let task = tempfile::tempdir().unwrap();
    std::fs::write(
        task.path().join(TASK_FILE),
        "prompt = \"p\"\ncheck = \"c\"\n",
    )
    .unwrap();
    std::fs::create_dir_all(task.path().join("src/deep")).unwrap();
    std::fs::write(task.path().join("src/deep/task.toml"), "mine").unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret"), task.path().join("link")).unwrap();
    std::os::unix::fs::symlink(outside.path(), task.path().join("src/out")).unwrap();
    let copy = tempfile::tempdir().unwrap();
    runner::copy_tree(task.path(), copy.path(), true).unwrap();
    assert!(!copy.path().join(TASK_FILE).exists());
    assert_eq!(
        std::fs::read_to_string(copy.path().join("src/deep/task.toml")).unwrap(),
        "mine",
        "only the top task file is the task's"
    );
    // Links are copied as links: nothing is read from where they point.
    for link in ["link", "src/out"] {
        let meta = std::fs::symlink_metadata(copy.path().join(link)).unwrap();
        assert!(meta.file_type().is_symlink(), "{link}");
    }
    assert_eq!(
        std::fs::read_link(copy.path().join("src/out")).unwrap(),
        outside.path(),
        "the link, not a copy of what it points to"
    );
}
