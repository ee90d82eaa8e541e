//! Language servers (`--lsp-only`): what waiting for a warm pylsp's diagnostics adds to an
//! `edit_file` call, in process. Each edit alternately introduces an undefined name and fixes
//! it; the same edits through the bare tool are the baseline, and a `.txt` edit through the
//! wrapped tool shows the cost when no server serves the file. pylsp (PyPI, pinned in
//! tests/lsp-servers/requirements.txt) is installed there first when missing. Much of a
//! pylsp figure is its own 0.5 s lint debounce, not crow.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use crow_core::{AllowAll, Tool, ToolContext, ToolStatus};
use crow_lsp::{LspManager, LspSettings, ServerConfig, WithDiagnostics};
use serde_json::json;

use crate::stats::summarize;
use crate::table::{Row, Section, Unit};

const TITLE: &str =
    "17. language servers (`edit_file` with a warm pylsp, in process, median over edits)";

/// tests/lsp-servers/python, installed from PyPI when missing.
fn pylsp() -> Result<PathBuf> {
    let servers = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/lsp-servers");
    let target = servers.join("python");
    if !target.join("pylsp").exists() {
        let status = std::process::Command::new("python3")
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--target",
            ])
            .arg(&target)
            .arg("-r")
            .arg(servers.join("requirements.txt"))
            .status()
            .context("cannot run python3 -m pip")?;
        ensure!(status.success(), "installing pylsp failed");
    }
    Ok(target.canonicalize()?)
}

fn ctx(root: &Path) -> ToolContext {
    ToolContext {
        session_id: "bench".into(),
        agent: "build".into(),
        call_id: "c".into(),
        cwd: root.to_path_buf(),
        project_root: root.to_path_buf(),
        cancel: tokio_util::sync::CancellationToken::new(),
        permission: Arc::new(AllowAll),
        events: tokio::sync::mpsc::unbounded_channel().0,
        client: None,
        steering: None,
    }
}

pub fn measure(edits: usize, progress: &mut dyn FnMut(&str)) -> Result<Section> {
    let python = pylsp()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(run(edits, &python, progress))
}

async fn run(edits: usize, python: &Path, progress: &mut dyn FnMut(&str)) -> Result<Section> {
    let dir = tempfile::tempdir()?;
    let root = dir.path().canonicalize()?;
    std::fs::write(root.join("a.py"), "x = 1\nprint(x)\n")?;
    std::fs::write(root.join("b.py"), "x = 1\nprint(x)\n")?;
    std::fs::write(root.join("notes.txt"), "x\n")?;
    let mut env = crow_core::EnvPolicy::default();
    env.set
        .insert("PYTHONPATH".into(), python.display().to_string());
    let lsp = Arc::new(LspManager::new(LspSettings {
        servers: vec![ServerConfig {
            name: "pylsp".into(),
            command: "python3".into(),
            args: vec!["-m".into(), "pylsp".into()],
            extensions: vec!["py".into()],
            root_markers: vec![],
            initialization_options: None,
        }],
        wait: Duration::from_secs(2),
        warnings: false,
        env,
    }));
    let bare: Arc<dyn Tool> = Arc::new(crow_tools::EditFileTool::new(
        crow_tools::ToolOptions::default(),
    ));
    let wrapped = WithDiagnostics::new(bare.clone(), lsp.clone());
    let ctx = ctx(&root);
    let edit = |path: &str, broken: bool| {
        let (old, new) = if broken {
            ("print(x)", "print(undefined_thing)")
        } else {
            ("print(undefined_thing)", "print(x)")
        };
        json!({"path": path, "old_string": old, "new_string": new})
    };
    // Unmeasured: the server starts and lints the file once.
    wrapped.execute(edit("a.py", true), &ctx).await;
    wrapped.execute(edit("a.py", false), &ctx).await;
    let (mut base, mut broke, mut fixed, mut text) = (vec![], vec![], vec![], vec![]);
    for i in 0..edits {
        progress(&format!("lsp: edit {}/{edits}", i + 1));
        for broken in [true, false] {
            let t = Instant::now();
            let r = bare.execute(edit("b.py", broken), &ctx).await;
            base.push(t.elapsed().as_secs_f64() * 1000.0);
            ensure!(r.status == ToolStatus::Success, "bare edit: {}", r.output);
            let t = Instant::now();
            let r = wrapped.execute(edit("a.py", broken), &ctx).await;
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            ensure!(
                r.metadata.diagnostics.is_empty() != broken,
                "pylsp did not report the edit's error in time: {}",
                r.output
            );
            if broken {
                broke.push(ms)
            } else {
                fixed.push(ms)
            }
        }
        let (old, new) = if i % 2 == 0 {
            ("x\n", "y\n")
        } else {
            ("y\n", "x\n")
        };
        let t = Instant::now();
        wrapped
            .execute(
                json!({"path": "notes.txt", "old_string": old, "new_string": new}),
                &ctx,
            )
            .await;
        text.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    lsp.shutdown().await;
    Ok(Section {
        title: TITLE.into(),
        rows: vec![
            Row::stats("edit_file alone", summarize(&base), Unit::Ms),
            Row::stats(
                "with pylsp: an edit introducing an error",
                summarize(&broke),
                Unit::Ms,
            )
            .note("includes pylsp's 0.5 s lint debounce and crow's 150 ms settle"),
            Row::stats("with pylsp: an edit fixing it", summarize(&fixed), Unit::Ms),
            Row::stats(
                "servers configured, a .txt edit (no server)",
                summarize(&text),
                Unit::Ms,
            ),
        ],
    })
}
