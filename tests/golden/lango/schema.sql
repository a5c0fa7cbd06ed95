-- lango's sessions and messages tables (github.com/langoai/lango, v0.7.0, commit c4aaba6),
-- written out as ent's migration (Atlas, SQLite dialect) creates them from
-- internal/ent/schema/session.go and message.go (columns as in the generated
-- internal/ent/migrate/schema.go): field.String -> text, field.Text -> text, field.Time ->
-- datetime, field.JSON -> json, Optional -> NULL, Unique -> a unique index, the messages edge
-- -> the session_messages column. lango migrates with schema.WithForeignKeys(false), so the
-- foreign key messages_sessions_messages is not created.
CREATE TABLE `sessions` (`id` integer NOT NULL PRIMARY KEY AUTOINCREMENT, `key` text NOT NULL, `agent_id` text NULL, `channel_type` text NULL, `channel_id` text NULL, `model` text NULL, `metadata` json NULL, `created_at` datetime NOT NULL, `updated_at` datetime NOT NULL);
CREATE UNIQUE INDEX `sessions_key_key` ON `sessions` (`key`);
CREATE INDEX `session_updated_at` ON `sessions` (`updated_at`);
CREATE TABLE `messages` (`id` integer NOT NULL PRIMARY KEY AUTOINCREMENT, `role` text NOT NULL, `content` text NOT NULL, `timestamp` datetime NOT NULL, `tool_calls` json NULL, `author` text NULL DEFAULT '', `session_messages` integer NULL);
