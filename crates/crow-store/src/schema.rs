//! The database schema: embedded, versioned migrations applied on open.
//!
//! The version lives in SQLite's `user_version` header field and the file is stamped with an
//! `application_id`, so a crow database is recognised without reading any table. A database
//! whose version is newer than [`SCHEMA_VERSION`] is refused before anything is written (not
//! even the journal mode), so an older crow never rewrites a newer crow's file.

/// `application_id` of a crow database ("CROW" in ASCII).
pub const APPLICATION_ID: i32 = 0x4352_4f57;

/// Migration `i` takes the schema from version `i` to `i + 1`. Append only: never edit a
/// migration that has shipped.
pub const MIGRATIONS: &[&str] = &[
    // 1: sessions, per-agent histories, usage per model call, system prompts by hash.
    r#"
    CREATE TABLE sessions (
        id           TEXT PRIMARY KEY NOT NULL,
        project_root TEXT NOT NULL,
        cwd          TEXT NOT NULL,
        title        TEXT NOT NULL,
        agent        TEXT NOT NULL,
        provider     TEXT NOT NULL,
        model        TEXT NOT NULL,
        status       TEXT NOT NULL,
        created_at   TEXT NOT NULL,
        updated_at   TEXT NOT NULL
    );
    CREATE INDEX sessions_by_project ON sessions (project_root, updated_at);
    CREATE INDEX sessions_by_update ON sessions (updated_at);

    -- One row per history entry. (session_id, agent, seq) orders one agent's history; the
    -- rowid orders the whole session's timeline across agents.
    CREATE TABLE entries (
        id         INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        agent      TEXT NOT NULL,
        seq        INTEGER NOT NULL,
        kind       TEXT NOT NULL,
        payload    TEXT NOT NULL,
        partial    INTEGER NOT NULL DEFAULT 0,
        ts         TEXT NOT NULL,
        UNIQUE (session_id, agent, seq)
    );

    CREATE TABLE usage (
        id                 INTEGER PRIMARY KEY,
        session_id         TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        agent              TEXT NOT NULL,
        model              TEXT NOT NULL,
        input_tokens       INTEGER NOT NULL,
        output_tokens      INTEGER NOT NULL,
        reasoning_tokens   INTEGER NOT NULL,
        cache_read_tokens  INTEGER NOT NULL,
        cache_write_tokens INTEGER NOT NULL,
        duration_ms        INTEGER NOT NULL,
        ts                 TEXT NOT NULL
    );
    CREATE INDEX usage_by_session ON usage (session_id);

    -- Rendered system prompts, stored once by SHA-256 of their text.
    CREATE TABLE prompts (
        hash       TEXT PRIMARY KEY NOT NULL,
        text       TEXT NOT NULL,
        created_at TEXT NOT NULL
    );

    -- The prompt each agent of a session was started with.
    CREATE TABLE session_agents (
        session_id  TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        agent       TEXT NOT NULL,
        prompt_hash TEXT NOT NULL REFERENCES prompts (hash),
        PRIMARY KEY (session_id, agent)
    );
    "#,
    // 2: the autonomy level a session was given (`--level`), kept for resumes.
    r#"
    ALTER TABLE sessions ADD COLUMN level INTEGER;
    "#,
    // 3: what else the user chose for the session (endpoint, approvals), as JSON.
    r#"
    ALTER TABLE sessions ADD COLUMN settings TEXT NOT NULL DEFAULT '{}';
    "#,
    // 4: the session a fork was made from (NULL: not a fork, or an older row).
    r#"
    ALTER TABLE sessions ADD COLUMN parent_id TEXT;
    "#,
];

/// The schema version this crow writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;
