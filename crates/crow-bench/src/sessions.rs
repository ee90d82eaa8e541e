//! Whole `crow run --json` processes against the in-process mock: per-iteration overhead,
//! wall time and peak RSS, first-request size and prefix stability, parallel tools, and
//! `crow --version` start-up.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, ensure};
use crow_testkit::{MockLlm, RecordedRequest, Reply, Scenario};
use serde_json::json;

use crate::child::ChildRun;
use crate::stats::{slope, summarize};
use crate::table::{Row, Section, Target, Unit};
use crate::{Bench, prefix};

/// The file the `read_file` sessions read: a couple of KiB, like a small source file.
const READ_FILE: &str = "notes.txt";

/// What each iteration of a session asks crow to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Work {
    /// A command that only reads: no snapshots around it.
    Echo,
    /// A command that changes a file: a snapshot before and after it.
    Append,
    ReadFile,
}

impl Work {
    /// Every kind, in the order the sections list them.
    const ALL: [Work; 3] = [Work::Echo, Work::Append, Work::ReadFile];

    fn label(self) -> &'static str {
        match self {
            Work::Echo => "bash echo",
            Work::Append => "bash echo >> file",
            Work::ReadFile => "read_file",
        }
    }

    fn reply(self, i: usize) -> Reply {
        let bash = |command: String| Reply::tool_call("bash", json!({ "command": command }));
        match self {
            Work::Echo => bash(format!("echo step {i}")),
            Work::Append => bash(format!("echo step {i} >> {APPENDED}")),
            Work::ReadFile => Reply::tool_call("read_file", json!({"path": READ_FILE})),
        }
    }
}

/// The file `bash echo >> file` appends a line to at each step.
const APPENDED: &str = "steps.log";

/// `n` iterations of `work`, then a closing text answer (so `n` + 1 model calls).
pub fn scenario(work: Work, n: usize) -> Scenario {
    let mut scenario = Scenario::new();
    for i in 0..n {
        scenario = scenario.reply(work.reply(i));
    }
    scenario.reply(Reply::text("done"))
}

/// A project directory for sessions, with the file `read_file` reads.
pub fn project() -> Result<tempfile::TempDir> {
    let dir = tempfile::tempdir().context("cannot create a temporary project")?;
    let line = "let answer = compute(41) + 1; // a line of a small source file\n";
    std::fs::write(dir.path().join(READ_FILE), line.repeat(32))?;
    // The scripted sessions repeat one read by design; loop detection would stop them. In the
    // user config of the bench's HOME, so a project config a measurement writes keeps it.
    let user = dir.path().join(".home/.config/crow");
    std::fs::create_dir_all(&user)?;
    std::fs::write(user.join("config.toml"), "doom_loop_threshold = 0\n")?;
    Ok(dir)
}

/// What a measured `crow` must not inherit: the user's config, keys and model choices.
pub const UNSET: &[&str] = &[
    "CROW_CONFIG_DIR",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "CROW_PROVIDER",
    "CROW_MODEL",
    "CROW_LOG",
    "CROW_HOME",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_BEARER_TOKEN_BEDROCK",
];

/// `crow` in `dir` with HOME and XDG dirs inside it, so no user config or key leaks in.
pub fn crow_command(crow: &Path, dir: &Path) -> Command {
    let mut cmd = Command::new(crow);
    let home = dir.join(".home");
    cmd.current_dir(dir)
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("NO_COLOR", "1")
        // The finish step runs detached after a completed task; the memory section measures
        // it on purpose, the others must not count its request.
        .env("CROW_MEMORY_FINISH", "off");
    for var in UNSET {
        cmd.env_remove(var);
    }
    cmd
}

/// `crow run --json` against an OpenAI-compatible `base_url`.
pub fn crow_run(crow: &Path, dir: &Path, base_url: &str) -> Command {
    let mut cmd = crow_command(crow, dir);
    cmd.args([
        "run",
        "--json",
        "--provider",
        "openai",
        "--model",
        "mock-model",
    ])
    .args(["--base-url", base_url])
    .args(["--max-iterations", "1000", "do the task"]);
    cmd
}

/// One session: a fresh mock serving `scenario`, one crow process, the mock's request log
/// and the TCP connections it accepted.
pub fn session(
    bench: &Bench,
    dir: &Path,
    scenario: Scenario,
) -> Result<(ChildRun, Vec<RecordedRequest>, u64)> {
    let mock = bench
        .rt
        .block_on(MockLlm::start(scenario))
        .context("cannot start the mock model")?;
    let run = bench.spawn(&crow_run(&bench.crow, dir, &mock.openai_base_url()))?;
    let requests = mock.requests();
    let connections = mock.connections();
    drop(mock);
    run.ensure_success("crow run")?;
    Ok((run, requests, connections))
}

/// A session over the Anthropic Messages API (a project config selects it).
/// The wire APIs besides OpenAI's that section 4 measures.
#[derive(Clone, Copy)]
enum OtherApi {
    Anthropic,
    Ollama,
    Responses,
    Gemini,
    /// Vertex AI's Gemini models (a service-account key traded at the mock's token endpoint).
    Vertex,
    /// Amazon Bedrock's ConverseStream (SigV4, binary event stream).
    Bedrock,
}

fn api_session(bench: &Bench, n: usize, api: OtherApi) -> Result<Vec<RecordedRequest>> {
    let dir = project()?;
    let mock = bench
        .rt
        .block_on(MockLlm::start(scenario(Work::Echo, n)))
        .context("cannot start the mock model")?;
    std::fs::create_dir_all(dir.path().join(".crow"))?;
    let provider = match api {
        OtherApi::Anthropic => format!(
            "provider = \"claude\"\n[providers.claude]\ntype = \"anthropic\"\nbase_url = \"{}\"\n\
             model = \"claude-mock\"\napi_key_env = \"CROW_BENCH_ANTHROPIC_KEY\"\n",
            mock.base_url()
        ),
        OtherApi::Responses => format!(
            "provider = \"oai\"\n[providers.oai]\ntype = \"openai\"\nwire_api = \"responses\"\n\
             base_url = \"{}\"\nmodel = \"gpt-5-mini\"\n",
            mock.openai_base_url()
        ),
        OtherApi::Ollama => format!(
            "provider = \"local\"\n[providers.local]\ntype = \"ollama\"\nbase_url = \"{}\"\n\
             model = \"mock-model\"\n",
            mock.base_url()
        ),
        OtherApi::Gemini => format!(
            "provider = \"gm\"\n[providers.gm]\ntype = \"gemini\"\nbase_url = \"{}\"\n\
             model = \"gemini-2.5-flash\"\n",
            mock.gemini_base_url()
        ),
        OtherApi::Vertex => {
            let key = dir.path().join(".home/service-account.json");
            std::fs::create_dir_all(dir.path().join(".home"))?;
            std::fs::write(&key, crow_testkit::service_account_json(&mock.token_uri()))?;
            format!(
                "provider = \"vx\"\n[providers.vx]\ntype = \"vertex\"\nbase_url = \"{}\"\n\
                 project = \"bench\"\nlocation = \"us-central1\"\nmodel = \"gemini-2.5-flash\"\n\
                 credentials_file = \"{}\"\n",
                mock.vertex_base_url(),
                key.display()
            )
        }
        OtherApi::Bedrock => format!(
            "provider = \"br\"\n[providers.br]\ntype = \"bedrock\"\nbase_url = \"{}\"\n\
             region = \"us-east-1\"\nmodel = \"us.anthropic.claude-sonnet-4-5-20250929-v1:0\"\n",
            mock.base_url()
        ),
    };
    std::fs::write(dir.path().join(".crow/config.toml"), provider)?;
    let mut cmd = crow_command(&bench.crow, dir.path());
    cmd.env("CROW_BENCH_ANTHROPIC_KEY", "bench-key-not-secret")
        .env("AWS_ACCESS_KEY_ID", "AKIDBENCH")
        .env("AWS_SECRET_ACCESS_KEY", "bench-secret-not-secret")
        .args([
            "run",
            "--json",
            "--trust-project",
            "--max-iterations",
            "1000",
            "do the task",
        ]);
    let run = bench.spawn(&cmd)?;
    let requests = mock.requests();
    drop(mock);
    run.ensure_success(match api {
        OtherApi::Anthropic => "crow run (Anthropic)",
        OtherApi::Ollama => "crow run (Ollama)",
        OtherApi::Responses => "crow run (Responses)",
        OtherApi::Gemini => "crow run (Gemini)",
        OtherApi::Vertex => "crow run (Vertex AI)",
        OtherApi::Bedrock => "crow run (Bedrock)",
    })?;
    Ok(requests)
}

/// First request bytes and the share of byte-stable consecutive pairs of one session.
fn stability(
    requests: &[RecordedRequest],
    strip: fn(&[u8]) -> Vec<u8>,
) -> (f64, f64, usize, usize) {
    let (mut stable, mut pairs) = (0usize, 0usize);
    for pair in requests.windows(2) {
        pairs += 1;
        stable += usize::from(prefix::stable(
            &strip(&pair[0].raw_body),
            &strip(&pair[1].raw_body),
        ));
    }
    let share = if pairs == 0 {
        f64::NAN
    } else {
        100.0 * stable as f64 / pairs as f64
    };
    let first = requests
        .first()
        .map_or(f64::NAN, |r| r.raw_body.len() as f64);
    (first, share, stable, pairs)
}

/// Anthropic's prompt-cache breakpoints (`cache_control`) sit on the newest block of each
/// request, so they move by design; everything else must stay byte-stable.
fn without_breakpoints(raw: &[u8]) -> Vec<u8> {
    without(raw, br#","cache_control":{"type":"ephemeral"}"#)
}

/// A Bedrock body without its cache points (the last one moves to the newest message).
fn without_cache_points(raw: &[u8]) -> Vec<u8> {
    without(raw, br#",{"cachePoint":{"type":"default"}}"#)
}

/// `raw` with every `marker` cut out.
fn without(raw: &[u8], marker: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut at = 0;
    while at < raw.len() {
        if raw[at..].starts_with(marker) {
            at += marker.len();
        } else {
            out.push(raw[at]);
            at += 1;
        }
    }
    out
}

/// Sections 1, 2 and 4: sessions of N iterations of each kind of work.
pub fn measure(bench: &Bench, progress: &mut dyn FnMut(&str)) -> Result<[Section; 3]> {
    let (overhead, walls, first_request, stable, pairs) = own_sessions(bench, progress)?;
    let requests = requests(bench, &first_request, stable, pairs)?;
    Ok([overhead, walls, requests])
}

/// Sections 1 and 2 alone (`--sessions-only`): the OpenAI sessions, not the other wire APIs.
pub fn measure_walls(bench: &Bench, progress: &mut dyn FnMut(&str)) -> Result<[Section; 2]> {
    let (overhead, walls, ..) = own_sessions(bench, progress)?;
    Ok([overhead, walls])
}

/// Sections 1 and 2, and what section 4 takes from the same sessions: the first request
/// bodies' sizes and how many consecutive pairs kept a byte-stable prefix (of how many).
fn own_sessions(
    bench: &Bench,
    progress: &mut dyn FnMut(&str),
) -> Result<(Section, Section, Vec<f64>, usize, usize)> {
    let config = &bench.config;
    let dir = project()?;
    let ns = config.iterations;
    // A first, unmeasured session loads the binary into the page cache.
    session(bench, dir.path(), scenario(Work::Echo, 1))?;

    let mut walls: BTreeMap<(Work, usize), Vec<f64>> = BTreeMap::new();
    let mut rss: BTreeMap<(Work, usize), Vec<f64>> = BTreeMap::new();
    let mut first_request: Vec<f64> = Vec::new();
    let (mut stable, mut pairs) = (0usize, 0usize);
    for run in 0..config.runs {
        progress(&format!("sessions: run {}/{}", run + 1, config.runs));
        // Interleaved, so slow spells of a shared machine hit every N alike.
        for work in Work::ALL {
            for &n in &ns {
                let (child, requests, _) = session(bench, dir.path(), scenario(work, n))?;
                let ends = child.events("tool_call_end");
                ensure!(
                    ends.len() == n && ends.iter().all(|(_, e)| e["result"]["status"] == "success"),
                    "{} ×{n}: expected {n} successful tool calls, got {:?}",
                    work.label(),
                    ends.iter()
                        .map(|(_, e)| &e["result"]["status"])
                        .collect::<Vec<_>>()
                );
                walls.entry((work, n)).or_default().push(child.wall_ms());
                rss.entry((work, n)).or_default().push(child.max_rss_mib());
                if let Some(first) = requests.first() {
                    first_request.push(first.raw_body.len() as f64);
                }
                for pair in requests.windows(2) {
                    pairs += 1;
                    stable += usize::from(prefix::stable(&pair[0].raw_body, &pair[1].raw_body));
                }
            }
        }
    }

    let [n1, n2, n3] = ns;
    let mut overhead = Vec::new();
    let mut wall_rows = Vec::new();
    for work in Work::ALL {
        let at = |n: usize| walls.get(&(work, n)).cloned().unwrap_or_default();
        let per_iteration: Vec<f64> = at(n3)
            .iter()
            .zip(at(n2))
            .map(|(hi, lo)| (hi - lo) / (n3 - n2) as f64)
            .collect();
        let points: Vec<(f64, f64)> = ns
            .iter()
            .flat_map(|&n| at(n).into_iter().map(move |w| (n as f64, w)))
            .collect();
        let fit = slope(&points).map_or("—".to_owned(), |s| Unit::Ms.format(s));
        overhead.push(
            Row::stats(
                format!("{}: (wall ×{n3} − wall ×{n2}) / {}", work.label(), n3 - n2),
                summarize(&per_iteration),
                Unit::Ms,
            )
            // Issue 43: a tool step with the sandbox on costs at most 4 ms.
            .target(Target::at_most(4.0, Unit::Ms))
            .note(format!(
                "least-squares slope over ×{n1}/×{n2}/×{n3}: {fit} per iteration"
            )),
        );
        for &n in &ns {
            let mut row = Row::stats(
                format!("{} ×{n}: wall", work.label()),
                summarize(&at(n)),
                Unit::Ms,
            );
            if work == Work::Echo && n == 1 {
                row = row
                    .target(Target::at_most(60.0, Unit::Ms))
                    .note("one tool call + closing answer");
            }
            wall_rows.push(row);
        }
        for &n in &[n1, n3] {
            let samples = rss.get(&(work, n)).cloned().unwrap_or_default();
            wall_rows.push(
                // Issue 43's goal. Most of the peak is crow's own code pages: a
                // link-order.txt that no longer names the release's functions shows here first
                // (23 MiB against 11), and `scripts/link-order` renews it.
                Row::stats(
                    format!("{} ×{n}: peak RSS", work.label()),
                    summarize(&samples),
                    Unit::MiB,
                )
                .target(Target::at_most(15.0, Unit::MiB)),
            );
        }
    }

    Ok((
        Section {
            title: "1. per-iteration overhead (whole `crow run --json` sessions against the mock)"
                .into(),
            rows: overhead,
        },
        Section {
            title: "2. session wall time and peak RSS (N iterations + a closing answer)".into(),
            rows: wall_rows,
        },
        first_request,
        stable,
        pairs,
    ))
}

/// Section 4: the first request's size and prefix stability, from the OpenAI sessions'
/// figures and one session of the longest length on each other wire API.
fn requests(bench: &Bench, first_request: &[f64], stable: usize, pairs: usize) -> Result<Section> {
    let [_, _, n3] = bench.config.iterations;
    let anthropic = api_session(bench, n3, OtherApi::Anthropic)?;
    let (a_first, a_share, a_stable, a_pairs) = stability(&anthropic, without_breakpoints);
    let ollama = api_session(bench, n3, OtherApi::Ollama)?;
    let (o_first, o_share, o_stable, o_pairs) = stability(&ollama, <[u8]>::to_vec);
    let responses = api_session(bench, n3, OtherApi::Responses)?;
    let (r_first, r_share, r_stable, r_pairs) = stability(&responses, <[u8]>::to_vec);
    let gemini = api_session(bench, n3, OtherApi::Gemini)?;
    let (g_first, g_share, g_stable, g_pairs) = stability(&gemini, <[u8]>::to_vec);
    let vertex = api_session(bench, n3, OtherApi::Vertex)?;
    let (v_first, v_share, v_stable, v_pairs) = stability(&vertex, <[u8]>::to_vec);
    let bedrock = api_session(bench, n3, OtherApi::Bedrock)?;
    let (b_first, b_share, b_stable, b_pairs) = stability(&bedrock, without_cache_points);
    let share = if pairs == 0 {
        f64::NAN
    } else {
        100.0 * stable as f64 / pairs as f64
    };
    let requests = vec![
        Row::stats("first request body", summarize(first_request), Unit::Bytes)
            .target(Target::at_most(15.0 * 1024.0, Unit::Bytes))
            .note("system prompt + every built-in tool schema + the task"),
        Row::single("consecutive requests with a byte-stable prefix", share, Unit::Percent)
            .target(Target::at_least_percent(100.0))
            .note(format!("{stable} of {pairs} pairs: same bytes around `messages`, earlier messages a byte prefix")),
        Row::single("Anthropic API: first request body", a_first, Unit::Bytes)
            .target(Target::at_most(15.0 * 1024.0, Unit::Bytes)),
        Row::single("Anthropic API: byte-stable prefix", a_share, Unit::Percent)
            .target(Target::at_least_percent(100.0))
            .note(format!(
                "{a_stable} of {a_pairs} pairs of one ×{n3} session, its moving cache_control breakpoints set aside"
            )),
        Row::single("Ollama API: first request body", o_first, Unit::Bytes)
            .target(Target::at_most(15.0 * 1024.0, Unit::Bytes)),
        Row::single("Ollama API: byte-stable prefix", o_share, Unit::Percent)
            .target(Target::at_least_percent(100.0))
            .note(format!("{o_stable} of {o_pairs} pairs of one ×{n3} session")),
        Row::single("OpenAI Responses API: first request body", r_first, Unit::Bytes)
            .target(Target::at_most(15.0 * 1024.0, Unit::Bytes)),
        Row::single("OpenAI Responses API: byte-stable prefix", r_share, Unit::Percent)
            .target(Target::at_least_percent(100.0))
            .note(format!("{r_stable} of {r_pairs} pairs of one ×{n3} session (reasoning items included)")),
        Row::single("Gemini API: first request body", g_first, Unit::Bytes)
            .target(Target::at_most(15.0 * 1024.0, Unit::Bytes)),
        Row::single("Gemini API: byte-stable prefix", g_share, Unit::Percent)
            .target(Target::at_least_percent(100.0))
            .note(format!("{g_stable} of {g_pairs} pairs of one ×{n3} session")),
        Row::single("Vertex AI (Gemini): first request body", v_first, Unit::Bytes)
            .target(Target::at_most(15.0 * 1024.0, Unit::Bytes)),
        Row::single("Vertex AI (Gemini): byte-stable prefix", v_share, Unit::Percent)
            .target(Target::at_least_percent(100.0))
            .note(format!("{v_stable} of {v_pairs} pairs of one ×{n3} session")),
        Row::single("Bedrock Converse: first request body", b_first, Unit::Bytes)
            .target(Target::at_most(15.0 * 1024.0, Unit::Bytes)),
        Row::single("Bedrock Converse: byte-stable prefix", b_share, Unit::Percent)
            .target(Target::at_least_percent(100.0))
            .note(format!(
                "{b_stable} of {b_pairs} pairs of one ×{n3} session, its moving cache point set aside"
            )),
    ];
    Ok(Section {
        title: "4. requests (from the mock's log; OpenAI wire format unless named)".into(),
        rows: requests,
    })
}

/// Section 3: `crow --version`, beside the cost of spawning `/bin/true`.
pub fn startup(bench: &Bench) -> Result<Section> {
    let dir = tempfile::tempdir()?;
    let mut version = Vec::new();
    let mut version_rss = Vec::new();
    let mut floor = Vec::new();
    for _ in 0..bench.config.version_runs {
        let run = bench.spawn(crow_command(&bench.crow, dir.path()).arg("--version"))?;
        run.ensure_success("crow --version")?;
        version.push(run.wall_ms());
        version_rss.push(run.max_rss_mib());
        if let Ok(run) = bench.spawn(&Command::new("true")) {
            floor.push(run.wall_ms());
        }
    }
    Ok(Section {
        title: "3. start-up".into(),
        rows: vec![
            Row::stats("crow --version", summarize(&version), Unit::Ms)
                .target(Target::at_most(5.0, Unit::Ms)),
            Row::stats(
                "crow --version: peak RSS",
                summarize(&version_rss),
                Unit::MiB,
            ),
            Row::stats("spawn floor: `true`", summarize(&floor), Unit::Ms)
                .note("fork+exec+wait of a trivial program on this machine"),
        ],
    })
}

/// Section 8: one response asking for four `sleep`s; they should overlap.
pub fn parallel(bench: &Bench) -> Result<Section> {
    let secs = bench.config.parallel_sleep_secs;
    let dir = project()?;
    let command = json!({ "command": format!("sleep {secs}") });
    let mut reply = Reply::default();
    for _ in 0..4 {
        reply = reply.with_tool_call("bash", command.clone());
    }
    let mut tool_phase = Vec::new();
    let mut walls = Vec::new();
    for _ in 0..bench.config.parallel_runs {
        let scenario = Scenario::new()
            .reply(reply.clone())
            .reply(Reply::text("done"));
        let (run, _, _) = session(bench, dir.path(), scenario)?;
        let starts = run.events("tool_call_start");
        let ends = run.events("tool_call_end");
        ensure!(
            ends.len() == 4,
            "expected 4 tool results, got {}",
            ends.len()
        );
        if let (Some((first, _)), Some((last, _))) = (starts.first(), ends.last()) {
            tool_phase.push(last.duration_since(*first).as_secs_f64() * 1000.0);
        }
        walls.push(run.wall_ms());
    }
    let sleep_ms = secs * 1000.0;
    Ok(Section {
        title: "8. parallel tools".into(),
        rows: vec![
            Row::stats(
                format!("4 × `sleep {secs}` in one response: first start → last end"),
                summarize(&tool_phase),
                Unit::Ms,
            )
            .target(Target {
                max: sleep_ms * 1.1,
                label: format!(
                    "≈ {} (≤ {})",
                    Unit::Ms.format_round(sleep_ms),
                    Unit::Ms.format_round(sleep_ms * 1.1)
                ),
            })
            .note(format!(
                "serial would be {}",
                Unit::Ms.format(4.0 * sleep_ms)
            )),
            Row::stats("  …whole session", summarize(&walls), Unit::Ms),
        ],
    })
}
