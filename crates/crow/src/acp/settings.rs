//! An ACP session's settings in the store: what the editor changes (mode, model, approval
//! level, "always" answers) written to the session's row, and read back on load.

use std::collections::BTreeMap;
use std::sync::Arc;

use crow_acp::{RunnerError, SettingChange, SettingsSink};
use crow_core::{SessionInfo, SessionStore, StoreError};
use crow_store::SqliteStore;

use super::{APPROVE_OPTION, failed, failed_any, settings_for};
use crate::config::LoadedConfig;
use crate::sessions;

/// A session's settings written to its row in the store as the user changes them: the mode
/// is the `agent` column, the model the provider/model columns (and its endpoint), the
/// approval level and "always" answers are options of the settings JSON.
pub(super) struct StoreSink {
    pub(super) store: Arc<SqliteStore>,
    pub(super) id: String,
    pub(super) loaded: Arc<LoadedConfig>,
}

impl StoreSink {
    /// Changes the settings JSON, keeping what this change does not touch (read just
    /// before: another process may have changed other settings of the session).
    fn update(&self, edit: impl FnOnce(&mut crow_core::SessionSettings)) -> Result<(), StoreError> {
        let mut settings = self.store.session(&self.id)?.settings;
        edit(&mut settings);
        self.store.set_settings(&self.id, &settings)
    }
}

impl SettingsSink for StoreSink {
    fn save(&self, change: &SettingChange) -> Result<(), RunnerError> {
        match change {
            SettingChange::Mode(mode) => self.store.set_agent(&self.id, mode),
            SettingChange::Model(model) => {
                let chosen = settings_for(&self.loaded, model).map_err(|e| failed_any(&e))?;
                self.store
                    .set_model(&self.id, &chosen.name, &chosen.model)
                    .and_then(|()| self.update(|s| s.base_url = Some(chosen.base_url.clone())))
            }
            SettingChange::Approve(level) => self.update(|s| {
                s.options.insert(APPROVE_OPTION.to_owned(), level.clone());
            }),
            SettingChange::Effort(effort) => self.update(|s| {
                if effort == crow_acp::EFFORT_DEFAULT {
                    s.options.remove(sessions::EFFORT_OPTION);
                } else {
                    s.options
                        .insert(sessions::EFFORT_OPTION.to_owned(), effort.clone());
                }
            }),
            SettingChange::Remember { tool, allow } => {
                self.update(|s| sessions::remember_always(s, tool, *allow))
            }
        }
        .map_err(failed)
    }
}

/// The approval level and "always" answers stored with a session.
pub(super) fn stored_answers(info: &SessionInfo) -> (Option<String>, BTreeMap<String, bool>) {
    (
        info.settings.options.get(APPROVE_OPTION).cloned(),
        sessions::stored_always(&info.settings),
    )
}
