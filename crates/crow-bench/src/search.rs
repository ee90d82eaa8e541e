//! Section 7: crow's `grep` and `glob` tools over a generated tree, beside ripgrep.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, ensure};
use crow_core::{AllowAll, Tool, ToolContext};
use crow_tools::{GlobTool, GrepTool, ToolOptions};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::Bench;
use crate::stats::summarize;
use crate::table::{Row, Section, Unit};

/// Files per directory of the generated tree.
const PER_DIR: usize = 200;
/// One file in this many holds a match for the grep pattern.
const NEEDLE_EVERY: usize = 1000;
const EXTENSIONS: [&str; 4] = ["rs", "txt", "md", "py"];

/// Writes `files` small text files under `root`; returns how many hold a needle.
pub fn generate_tree(root: &Path, files: usize) -> Result<usize> {
    generate_tree_in(root, files, PER_DIR)
}

/// [`generate_tree`] with `per_dir` files in each directory.
pub fn generate_tree_in(root: &Path, files: usize, per_dir: usize) -> Result<usize> {
    let body = "fn helper(x: u32) -> u32 {\n    // an ordinary line of code\n    x * 2 + 1\n}\n";
    let mut needles = 0;
    for i in 0..files {
        if i % per_dir == 0 {
            std::fs::create_dir_all(root.join(format!("d{:03}", i / per_dir)))?;
        }
        let mut text = format!("// file {i}\n{}", body.repeat(3));
        if i % NEEDLE_EVERY == 0 {
            text.push_str(&format!("const MARKER: &str = \"needle_{i}\";\n"));
            needles += 1;
        }
        std::fs::write(root.join(tree_file(i, per_dir)), text)?;
    }
    Ok(needles)
}

/// The path of the generated tree's file number `i`, relative to its root.
pub fn tree_file(i: usize, per_dir: usize) -> String {
    let ext = EXTENSIONS[i % EXTENSIONS.len()];
    format!("d{:03}/f{i:05}.{ext}", i / per_dir)
}

fn context(root: &Path) -> ToolContext {
    ToolContext {
        session_id: "bench".into(),
        agent: "bench".into(),
        call_id: "bench".into(),
        cwd: root.to_path_buf(),
        project_root: root.to_path_buf(),
        cancel: CancellationToken::new(),
        permission: Arc::new(AllowAll),
        // Nobody listens: these tools report no progress.
        events: tokio::sync::mpsc::unbounded_channel().0,
        // Files are read from disk, not through an editor.
        client: None,
        steering: None,
    }
}

/// Times `runs` calls of a tool (after one warm-up), checking each result.
fn time_tool(
    bench: &Bench,
    tool: &dyn Tool,
    input: &Value,
    ctx: &ToolContext,
    check: &dyn Fn(&str) -> bool,
) -> Result<Vec<f64>> {
    let mut samples = Vec::new();
    for i in 0..=bench.config.search_runs {
        let started = Instant::now();
        let result = bench.rt.block_on(tool.execute(input.clone(), ctx));
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        ensure!(
            result.is_success() && check(&result.output),
            "{} {input} gave an unexpected result: {}",
            tool.name(),
            result.output.chars().take(300).collect::<String>()
        );
        if i > 0 {
            samples.push(ms);
        }
    }
    Ok(samples)
}

/// Times `runs` runs of `rg` (after one warm-up); `None` when rg is not installed.
fn time_rg(bench: &Bench, root: &Path, args: &[&str]) -> Option<Vec<f64>> {
    let mut samples = Vec::new();
    for i in 0..=bench.config.search_runs {
        let started = Instant::now();
        let out = Command::new("rg")
            .args(args)
            .current_dir(root)
            .output()
            .ok()?;
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        // rg exits 1 when nothing matched; both are fine here.
        if out.status.code().is_none_or(|c| c > 1) {
            return None;
        }
        if i > 0 {
            samples.push(ms);
        }
    }
    Some(samples)
}

pub fn measure(bench: &Bench, progress: &mut dyn FnMut(&str)) -> Result<Section> {
    let files = bench.config.tree_files;
    let tree = tempfile::tempdir().context("cannot create the search tree")?;
    // Canonical, as the tools compare resolved paths against the project root.
    let root = std::fs::canonicalize(tree.path())?;
    progress(&format!("search: generating {files} files"));
    let needles = generate_tree(&root, files)?;
    let ctx = context(&root);
    let options = ToolOptions::default();
    let rs_files = files.div_ceil(EXTENSIONS.len());

    progress("search: grep and glob");
    let pattern = "needle_[0-9]+";
    let grep = time_tool(
        bench,
        &GrepTool::new(options.clone()),
        &json!({ "pattern": pattern }),
        &ctx,
        &|out| out.lines().filter(|l| l.contains("needle_")).count() == needles,
    )?;
    let glob = time_tool(
        bench,
        &GlobTool::new(options),
        &json!({ "pattern": "*.rs" }),
        &ctx,
        &|out| rs_files <= 200 || out.contains(&format!("of {rs_files} files")),
    )?;
    let rg_grep = time_rg(bench, &root, &["-n", pattern]);
    let rg_files = time_rg(bench, &root, &["--files", "-g", "*.rs"]);

    let mut rows = vec![
        Row::stats(
            format!("grep tool: `{pattern}` over {files} files"),
            summarize(&grep),
            Unit::Ms,
        )
        .note(format!("{needles} matching files")),
        Row::stats(
            format!("glob tool: `*.rs` over {files} files"),
            summarize(&glob),
            Unit::Ms,
        )
        .note(format!("{rs_files} matches, sorted newest first")),
    ];
    let no_rg = "rg not installed";
    rows.push(match rg_grep {
        Some(s) => Row::stats(format!("  rg -n `{pattern}`"), summarize(&s), Unit::Ms)
            .note("ripgrep, all cores, as a process"),
        None => Row::missing(format!("  rg -n `{pattern}`"), no_rg),
    });
    rows.push(match rg_files {
        Some(s) => Row::stats("  rg --files -g '*.rs'", summarize(&s), Unit::Ms)
            .note("ripgrep, no sort by time"),
        None => Row::missing("  rg --files -g '*.rs'", no_rg),
    });
    Ok(Section {
        title: format!(
            "7. search over a generated tree of {files} files (tools called in-process)"
        ),
        rows,
    })
}
