//! `crow hooks list`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;

use crate::config::{self, Overrides};

#[derive(Subcommand)]
pub enum HooksCommand {
    /// Every hook, per event: matcher, command, timeout and the file it comes from; and the
    /// project's hooks not used until you trust it
    List {
        /// Count the project's own hooks as `--trust-project` would for one run
        #[arg(long)]
        trust_project: bool,
    },
}

pub fn command(command: HooksCommand, project_root: &Path) -> Result<ExitCode> {
    match command {
        HooksCommand::List { trust_project } => {
            let flags = Overrides {
                trust_project,
                ..Overrides::default()
            };
            let loaded = config::load(project_root, &flags)?;
            let set = crow_app::hooks::load(&loaded)?;
            out!("{}", crow_app::hooks::describe(&set));
            Ok(ExitCode::SUCCESS)
        }
    }
}
