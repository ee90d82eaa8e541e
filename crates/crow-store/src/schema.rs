//! The database schema: embedded, versioned migrations applied on open.
//!
//! The version lives in SQLite's `user_version` header field and the file is stamped with an
//! `application_id`, so a crow database is recognised without reading any table. A database
//! whose version is newer than [`SCHEMA_VERSION`] is refused before anything is written (not
//! even the journal mode), so an older crow never rewrites a newer crow's file.
//!
//! Tables: `sessions` (id, project root, cwd, title, agent or composition, provider, model, status,
//! times, the `--level`, a `settings` JSON of endpoint and front-end options, and `parent_id`, the
//! session a fork came from); `entries` (session, agent, seq, kind, the `EntryKind` as JSON,
//! partial flag, timestamp; rowid order is the session's timeline); `usage` (one row per model
//! call); `prompts` (system prompts by SHA-256) and `session_agents`. Schema 5 adds memory
//! (`memory.rs`): `learnings`, `memory_runs`, and the FTS5 indexes `learnings_fts` and
//! `entries_fts`, whose content is the view `entry_text`, so no conversation text is stored twice.
//! Deleted rows are overwritten (`secure_delete`, FTS5 `secure-delete`).

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
    // 5: memory — learnings the finish step extracts, and full-text search (FTS5, BM25) over
    // learnings and over every session's entries. The entries index reads its text through a
    // view, so no conversation text is stored twice; triggers keep both indexes current.
    r#"
    CREATE TABLE learnings (
        id            INTEGER PRIMARY KEY,
        project_root  TEXT NOT NULL,
        global        INTEGER NOT NULL DEFAULT 0,
        session_id    TEXT,
        kind          TEXT NOT NULL,
        text          TEXT NOT NULL,
        files         TEXT NOT NULL DEFAULT '[]',
        first_entry   INTEGER,
        last_entry    INTEGER,
        source        TEXT NOT NULL DEFAULT 'finish',
        superseded_by INTEGER,
        created_at    TEXT NOT NULL,
        updated_at    TEXT NOT NULL
    );
    CREATE INDEX learnings_by_project ON learnings (project_root, superseded_by);
    CREATE INDEX learnings_by_session ON learnings (session_id);
    CREATE VIRTUAL TABLE learnings_fts USING fts5 (
        text, files, content = 'learnings', content_rowid = 'id',
        tokenize = 'unicode61 remove_diacritics 2'
    );
    CREATE TRIGGER learnings_fts_insert AFTER INSERT ON learnings BEGIN
        INSERT INTO learnings_fts (rowid, text, files) VALUES (new.id, new.text, new.files);
    END;
    CREATE TRIGGER learnings_fts_delete AFTER DELETE ON learnings BEGIN
        INSERT INTO learnings_fts (learnings_fts, rowid, text, files)
        VALUES ('delete', old.id, old.text, old.files);
    END;
    CREATE TRIGGER learnings_fts_update AFTER UPDATE OF text, files ON learnings BEGIN
        INSERT INTO learnings_fts (learnings_fts, rowid, text, files)
        VALUES ('delete', old.id, old.text, old.files);
        INSERT INTO learnings_fts (rowid, text, files) VALUES (new.id, new.text, new.files);
    END;

    -- One row per finish step: which entries it read, how it ended, what it said.
    CREATE TABLE memory_runs (
        id          INTEGER PRIMARY KEY,
        session_id  TEXT NOT NULL,
        last_entry  INTEGER NOT NULL,
        status      TEXT NOT NULL,
        detail      TEXT NOT NULL DEFAULT '',
        ts          TEXT NOT NULL
    );
    CREATE INDEX memory_runs_by_session ON memory_runs (session_id, last_entry);

    CREATE VIEW entry_text (id, text) AS
    SELECT id, CASE kind
        WHEN 'user' THEN json_extract(payload, '$.content')
        WHEN 'assistant_text' THEN json_extract(payload, '$.content')
        WHEN 'tool_call' THEN json_extract(payload, '$.name') || ' ' || json_extract(payload, '$.arguments')
        WHEN 'tool_result' THEN json_extract(payload, '$.output')
        WHEN 'handoff' THEN json_extract(payload, '$.prompt')
    END FROM entries;
    CREATE VIRTUAL TABLE entries_fts USING fts5 (
        text, content = 'entry_text', content_rowid = 'id',
        tokenize = 'unicode61 remove_diacritics 2'
    );
    CREATE TRIGGER entries_fts_insert AFTER INSERT ON entries
    WHEN new.kind IN ('user', 'assistant_text', 'tool_call', 'tool_result', 'handoff') BEGIN
        INSERT INTO entries_fts (rowid, text) SELECT id, text FROM entry_text WHERE id = new.id;
    END;
    CREATE TRIGGER entries_fts_delete BEFORE DELETE ON entries
    WHEN old.kind IN ('user', 'assistant_text', 'tool_call', 'tool_result', 'handoff') BEGIN
        INSERT INTO entries_fts (entries_fts, rowid, text)
        SELECT 'delete', id, text FROM entry_text WHERE id = old.id;
    END;
    INSERT INTO entries_fts (rowid, text) SELECT id, text FROM entry_text WHERE text IS NOT NULL;
    "#,
];

/// The schema version this crow writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;
