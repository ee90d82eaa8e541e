//! The interactive terminal's slash commands. The session commands every front end has
//! (`/compact`, `/context`) run through `session_cmd`; the project's custom commands through
//! `slash`; the rest choose what the session runs with (composition, level, model, mode),
//! move between sessions, or show more of what is on screen.

use std::sync::{Arc, Mutex};

use crow_core::{Mode, SessionFilter, SessionInfo, SessionStore};

use super::App;
use super::gate::GateState;
use crate::sessions;

/// The built-in commands: name, what it does.
const BUILTIN: &[(&str, &str)] = &[
    ("/help", "this list"),
    (
        "/agent",
        "show or switch the composition: /agent build-judge",
    ),
    (
        "/level",
        "show or set the autonomy level -1..5 (/level default clears it)",
    ),
    ("/model", "show or switch the model: /model PROVIDER/MODEL"),
    (
        "/effort",
        "show or set how hard the model thinks: minimal, low, medium, high, default",
    ),
    (
        "/mode",
        "show or set what runs without asking: read-only, ask, auto-edit, full-auto",
    ),
    ("/compact", "fold the history now: /compact [what to keep]"),
    ("/context", "what the next request carries"),
    (
        "/undo",
        "revert the files of the agent's last turn (again: the one before): /undo [force]",
    ),
    ("/redo", "re-apply what /undo reverted: /redo [force]"),
    (
        "/attempts",
        "best of N in worktrees: /attempts N [--check CMD] PROMPT (as crow run --attempts)",
    ),
    (
        "/expand",
        "a tool call's whole output or diff: /expand [N] (Ctrl-O: the last)",
    ),
    ("/thinking", "the last thinking in full"),
    (
        "/hooks",
        "the hooks that run, from which files (as crow hooks list)",
    ),
    ("/sessions", "this project's sessions"),
    ("/resume", "continue another session: /resume ID"),
    ("/new", "start a new session"),
    ("/clear", "start a new session (Ctrl-L clears the screen)"),
    (
        "/init",
        "set up crow here: .crow/config.toml and AGENTS.md (as crow init)",
    ),
    ("/exit", "leave (the session is saved)"),
    ("/quit", "leave, as /exit"),
];

const MODE_OPTION: &str = "mode";

/// Everything `/` completes to: the built-ins, then the project's and user's commands.
pub fn completions(root: &std::path::Path) -> Vec<(String, String)> {
    let mut all: Vec<(String, String)> = BUILTIN
        .iter()
        .map(|(n, d)| ((*n).to_owned(), (*d).to_owned()))
        .collect();
    for command in crate::slash::load(root).commands.into_values() {
        let about = command.description.unwrap_or_default();
        all.push((format!("/{}", command.name), about));
    }
    all
}

/// Runs `line` if it is a command; `false`: it is a prompt after all.
pub async fn handle(app: &mut App, line: &str) -> bool {
    let text = line.trim();
    let (name, arg) = match text.split_once(char::is_whitespace) {
        Some((name, arg)) => (name, arg.trim()),
        None => (text, ""),
    };
    // A path such as `/usr/bin/env is missing` is a prompt.
    if name[1..].contains('/') {
        return false;
    }
    let busy = app.running.is_some();
    match name {
        "/help" | "/?" => help(app),
        "/expand" => app.view.expand(arg.parse().ok()),
        "/thinking" => app.view.thinking(),
        "/hooks" => hooks(app),
        "/mode" => mode(app, arg),
        "/exit" | "/quit" => {
            app.cancel_turn();
            app.quit_when_idle();
        }
        _ if busy => {
            app.view.info(&format!(
                "{name} waits for the turn to end (Esc cancels it)"
            ));
        }
        "/agent" => agent(app, arg),
        "/level" => level(app, arg),
        "/model" => model(app, arg).await,
        "/effort" => effort(app, arg),
        "/new" | "/clear" => {
            app.driver.detach().await;
            app.context_tokens = 0;
            // "Always" was for that session; the mode chosen here stays.
            if let Ok(gate) = app.gate.lock() {
                gate.always.clear();
            }
            app.view.info("new session: the next prompt starts it");
        }
        "/sessions" => list_sessions(app),
        "/init" => {
            // Typing it is the yes `crow init` asks for.
            let root = app.driver.composer().project_root.clone();
            let mut said = Vec::new();
            match crate::init::init_project(&root, |_| Ok(true), |l| said.push(l.to_owned())) {
                Ok(()) => app.view.info(&said.join("\n")),
                Err(e) => app.view.error(&format!("{e:#}")),
            }
        }
        "/resume" => resume(app, arg),
        "/attempts" => attempts(app, arg),
        "/compact" | "/context" | "/undo" | "/redo" => session_command(app, text).await,
        _ => {
            let commands = crate::slash::load(&app.driver.composer().project_root);
            match crate::slash::expand_invocation(text, &commands) {
                Some(Ok(invoked)) => {
                    if invoked.model.is_some() {
                        app.view
                            .info("this command names a model: it runs with the session's here");
                    }
                    app.start_turn_echo(invoked.prompt, invoked.agent, true);
                }
                Some(Err(message)) => app.view.error(&message),
                None => app
                    .view
                    .error(&format!("unknown command {name}: /help lists them")),
            }
        }
    }
    app.refresh_status();
    true
}

/// What `crow hooks list` shows, for the hooks this session runs.
fn hooks(app: &mut App) {
    let text = match app.driver.composer().hook_runner() {
        Some(runner) => crow_app::hooks::describe(runner.hook_set()),
        None => "no hooks are configured (crow hooks list says where they are read from)".into(),
    };
    for line in text.lines() {
        app.view.info(line);
    }
}

fn help(app: &mut App) {
    let mut lines: Vec<String> = completions(&app.driver.composer().project_root)
        .into_iter()
        .map(|(name, about)| format!("  {name:<11} {about}"))
        .collect();
    lines.push(
        "  keys: Alt-Enter or a trailing \\ for a new line · Tab completes /commands and @files · \
         Esc or Ctrl-C cancels a turn · Shift-Tab cycles the mode · Ctrl-O expands the last tool call · \
         Ctrl-R searches history · Ctrl-D leaves"
            .into(),
    );
    lines.push("  typed while the agent works: queued, delivered at its next step".into());
    lines.push(
        "  !command runs a command yourself (sandboxed as the agent's bash); its output goes \
         with your next prompt"
            .into(),
    );
    app.view.plain(&lines.join("\n"));
}

fn agent(app: &mut App, arg: &str) {
    if arg.is_empty() {
        let names: Vec<String> = app
            .driver
            .composer()
            .catalog
            .compositions
            .values()
            .map(|c| {
                let mark = if c.name == app.driver.composition() {
                    "●"
                } else {
                    " "
                };
                format!("  {mark} {:<14} {}", c.name, c.description)
            })
            .collect();
        app.view.plain(&names.join("\n"));
        return;
    }
    match app.driver.set_composition(arg) {
        Ok(()) => {
            let crew = app.driver.crew();
            app.view.show_agents(crew.coagent().is_some());
            let team = match crew.coagent() {
                Some(co) => format!(
                    "{} + {} ({})",
                    crew.primary().name,
                    co.name,
                    crew.flow().label()
                ),
                None => crew.primary().name.clone(),
            };
            app.view.info(&format!("composition {arg}: {team}"));
        }
        Err(e) => app.view.error(&format!("{e:#}")),
    }
}

fn level(app: &mut App, arg: &str) {
    if arg.is_empty() {
        let text = match app.driver.level() {
            Some(level) => format!("level {level} (set for this session)"),
            None => format!(
                "the composition's flow: {}",
                app.driver.crew().flow().label()
            ),
        };
        app.view.info(&text);
        return;
    }
    let level = if arg == "default" {
        None
    } else {
        match arg.parse::<i8>() {
            Ok(n) if (-1..=5).contains(&n) => Some(n),
            _ => return app.view.error("a level is -1..5, or `default`"),
        }
    };
    match app.driver.set_level(level) {
        Ok(()) => {
            app.view.show_agents(app.driver.crew().coagent().is_some());
            app.view
                .info(&format!("flow: {}", app.driver.crew().flow().label()));
        }
        Err(e) => app.view.error(&format!("{e:#}")),
    }
}

/// `/model`: what the providers serve (asked, as `crow models` does); `/model [PROVIDER/]MODEL`
/// switches to a model the provider serves, and refuses one it does not.
async fn model(app: &mut App, arg: &str) {
    let current = app.driver.composer().default_provider.clone();
    if arg.is_empty() {
        let mut lines = vec![format!("  ● {}/{}", current.name, current.model)];
        for served in crow_app::models::served(&app.loaded.config, &current).await {
            let name = &served.name;
            match served.models {
                Ok(models) if models.is_empty() => {
                    lines.push(format!("    {name}: no models listed"));
                }
                Ok(models) => lines.extend(
                    models
                        .into_iter()
                        .filter(|m| !(*name == current.name && m.id == current.model))
                        .map(|m| format!("    {name}/{}", m.id)),
                ),
                Err(e) => {
                    lines.push(format!("    {name}: cannot list ({e}); configured:"));
                    if let Some(pc) = app.loaded.config.providers.get(name) {
                        for model in pc.model.iter().chain(pc.models.keys()) {
                            lines.push(format!("    {name}/{model}"));
                        }
                    }
                }
            }
        }
        lines.push("  switch: /model MODEL (this provider) or /model PROVIDER/MODEL".to_owned());
        app.view.plain(&lines.join("\n"));
        return;
    }
    let config = &app.loaded.config;
    let named = arg.split_once('/').map(|(p, _)| p);
    let (provider, model) = match arg.split_once('/') {
        Some((p, m)) if config.providers.contains_key(p) => (p.to_owned(), m.to_owned()),
        _ => (current.name.clone(), arg.to_owned()),
    };
    // A provider the configuration gained since the session started is not in its config.
    if let Some(p) = named.filter(|p| !config.providers.contains_key(*p)) {
        let flags = crate::config::Overrides {
            trust_project: app.loaded.trusted,
            ..Default::default()
        };
        let now = crate::config::load(&app.driver.composer().project_root, &flags);
        if now.is_ok_and(|now| now.config.providers.contains_key(p)) {
            return app.view.error(&format!(
                "provider '{p}' was added to the configuration after this session started: \
                 start crow again to use it (crow --continue keeps this conversation)"
            ));
        }
    }
    // The same endpoint when the provider stays; another provider's own otherwise.
    let base_url = (provider == current.name).then(|| current.base_url.clone());
    let settings = match crate::wiring::provider_settings(
        config,
        &provider,
        base_url.as_deref(),
        Some(&model),
    ) {
        Ok(settings) => settings,
        Err(e) => return app.view.error(&format!("{e:#}")),
    };
    match crow_app::models::list(&settings).await {
        Ok(served) if !served.is_empty() && !served.iter().any(|m| m.id == model) => {
            let guess = crate::config::closest(&model, served.iter().map(|m| m.id.as_str()))
                .map(|best| format!(" (did you mean {provider}/{best}?)"))
                .unwrap_or_default();
            return app.view.error(&format!(
                "{provider} does not serve '{model}'{guess}: /model lists what each provider serves"
            ));
        }
        Ok(_) => {}
        // A server that cannot list may still serve it: the first request will tell.
        Err(e) => app.view.warn(&format!(
            "cannot ask {provider} for its models ({e}); switching anyway"
        )),
    }
    let effort = app.driver.composer().effort();
    if rebuild(app, settings, effort) {
        app.view.info(&format!("model {provider}/{model}"));
    }
}

/// `/effort [LEVEL|default]`: how hard the session's models think, kept with the session.
fn effort(app: &mut App, arg: &str) {
    let current = app
        .driver
        .composer()
        .effort()
        .map_or("default (as configured)", |e| e.as_str());
    if arg.is_empty() {
        return app.view.plain(&format!(
            "  reasoning effort: {current}\n  /effort minimal | low | medium | high | default"
        ));
    }
    let effort = if arg.eq_ignore_ascii_case("default") {
        None
    } else {
        match arg.parse::<crow_providers::ReasoningEffort>() {
            Ok(effort) => Some(effort),
            Err(e) => return app.view.error(&e),
        }
    };
    let mut settings = app.driver.composer().default_provider.clone();
    // `default` goes back to what the configuration says for this provider and model.
    settings.reasoning_effort = match effort {
        Some(effort) => Some(effort),
        None => crate::wiring::provider_settings(
            &app.loaded.config,
            &settings.name,
            Some(&settings.base_url),
            Some(&settings.model),
        )
        .ok()
        .and_then(|s| s.reasoning_effort),
    };
    if rebuild(app, settings, effort) {
        let shown = effort.map_or("default (as configured)", |e| e.as_str());
        app.view.info(&format!("reasoning effort {shown}"));
    }
}

/// The session on another model or effort (the driver keeps everything else); true when
/// the crew could be built.
fn rebuild(
    app: &mut App,
    settings: crow_providers::ProviderSettings,
    effort: Option<crow_providers::ReasoningEffort>,
) -> bool {
    match app.driver.set_model(settings, effort) {
        Ok(()) => {
            app.context_tokens = 0;
            true
        }
        Err(e) => {
            app.view.error(&format!("{e:#}"));
            false
        }
    }
}

fn mode(app: &mut App, arg: &str) {
    let current = app
        .gate
        .lock()
        .ok()
        .and_then(|g| g.mode)
        .unwrap_or(app.driver.composer().policy().mode);
    let next = match arg {
        "" => {
            return app.view.info(&format!(
                "mode {} · choose one of {}",
                current.name(),
                Mode::NAMES.join(", ")
            ));
        }
        "next" => {
            let names = Mode::NAMES;
            let i = names.iter().position(|n| *n == current.name()).unwrap_or(0);
            Mode::parse(names[(i + 1) % names.len()])
        }
        name => Mode::parse(name),
    };
    let Some(next) = next else {
        return app
            .view
            .error(&format!("no mode {arg}: one of {}", Mode::NAMES.join(", ")));
    };
    if let Ok(mut gate) = app.gate.lock() {
        gate.mode = Some(next);
    }
    save_answers(app);
    app.view.info(&format!("mode {}", next.name()));
}

fn list_sessions(app: &mut App) {
    let filter = SessionFilter {
        project_root: Some(app.driver.composer().project_root.clone()),
        limit: Some(15),
    };
    match app.store.list_sessions(&filter) {
        Ok(list) if list.is_empty() => app.view.info("no sessions in this project yet"),
        Ok(list) => {
            let lines: Vec<String> = list
                .iter()
                .map(|s| {
                    let mark = if app.driver.id() == Some(s.id.as_str()) {
                        "●"
                    } else {
                        " "
                    };
                    format!(
                        "  {mark} {}  {}  {:<12} {}",
                        &s.id[..s.id.len().min(8)],
                        s.updated_at.format("%Y-%m-%d %H:%M"),
                        s.agent,
                        s.title
                    )
                })
                .collect();
            app.view
                .plain(&format!("{}\n  /resume ID continues one", lines.join("\n")));
        }
        Err(e) => app.view.error(&e.to_string()),
    }
}

fn resume(app: &mut App, arg: &str) {
    if arg.is_empty() {
        return list_sessions(app);
    }
    let found = sessions::find_resumed(
        &app.store,
        &sessions::Resume::Id(arg.to_owned()),
        &app.driver.composer().project_root,
    );
    let opened = found.and_then(|info| app.open(info));
    if let Err(e) = opened {
        app.view.error(&format!("{e:#}"));
    }
}

/// `/compact` and `/context`, as every front end runs them.
async fn session_command(app: &mut App, text: &str) {
    let Some(command) = crate::session_cmd::parse(text) else {
        return app
            .view
            .error("usage: /compact [focus], /context, /undo [force] or /redo [force]");
    };
    if app.driver.session().is_none() {
        return app
            .view
            .info("nothing yet: the session starts with your first prompt");
    }
    let cancel = tokio_util::sync::CancellationToken::new();
    match app
        .driver
        .command(&command, &app.events, &cancel, None)
        .await
    {
        Ok(reply) => app.view.plain(&reply.text),
        Err(e) => app.view.error(&format!("{e:#}")),
    }
}

/// A stored session's "always" answers and mode, back in the gate.
pub fn restore_answers(gate: &Arc<Mutex<GateState>>, info: &SessionInfo) {
    let Ok(mut state) = gate.lock() else { return };
    // Another session's answers do not carry over.
    state.always.clear();
    state.mode = None;
    state.always.extend(sessions::stored_always(&info.settings));
    if let Some(mode) = info.settings.options.get(MODE_OPTION) {
        state.mode = Mode::parse(mode);
    }
}

/// Keeps the gate's "always" answers and mode with the session.
pub fn save_answers(app: &mut App) {
    let Some(id) = app.driver.id() else { return };
    let Ok(mut info) = app.store.session(id) else {
        return;
    };
    if let Ok(state) = app.gate.lock() {
        for (key, allowed) in &state.always.answers() {
            sessions::remember_always(&mut info.settings, key, *allowed);
        }
        if let Some(mode) = state.mode {
            info.settings
                .options
                .insert(MODE_OPTION.to_owned(), mode.name().to_owned());
        }
    }
    if let Err(e) = app.store.set_settings(id, &info.settings) {
        app.view.warn(&format!("not saved with the session: {e}"));
    }
}

/// `/attempts N [--check CMD] PROMPT`: `crow run --attempts` with this session's choices.
fn attempts(app: &mut App, arg: &str) {
    let request = match super::attempts::parse(arg) {
        Ok(request) => request,
        Err(usage) => return app.view.error(&usage),
    };
    let composer = app.driver.composer();
    let chosen = &composer.default_provider;
    let mut args = vec![
        "run".to_owned(),
        "--attempts".to_owned(),
        request.count.to_string(),
        "--agent".to_owned(),
        app.driver.composition().to_owned(),
        "--provider".to_owned(),
        chosen.name.clone(),
        "--model".to_owned(),
        chosen.model.clone(),
        "--base-url".to_owned(),
        chosen.base_url.clone(),
    ];
    if let Some(level) = app.driver.level() {
        args.push(format!("--level={level}"));
    }
    if let Some(effort) = composer.effort() {
        args.extend(["--effort".to_owned(), effort.as_str().to_owned()]);
    }
    if composer.trusted() {
        args.push("--trust-project".to_owned());
    }
    if let Some(check) = &request.check {
        args.extend(["--check".to_owned(), check.clone()]);
    }
    args.extend(["--".to_owned(), request.prompt.clone()]);
    let cancel = tokio_util::sync::CancellationToken::new();
    let shown = format!("/attempts {}", arg.trim());
    match super::attempts::start(args, shown, cancel.clone(), app.shell_done.clone()) {
        Ok(()) => {
            app.view.info(&format!(
                "{} attempts in worktrees; Esc stops them all (the applied change is undone with crow undo, from the shell)",
                request.count
            ));
            app.running = Some(super::Running {
                cancel,
                started: std::time::Instant::now(),
            });
        }
        Err(e) => app.view.error(&e),
    }
}
