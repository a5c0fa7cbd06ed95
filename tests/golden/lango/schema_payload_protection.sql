-- lango's sessions and messages tables after payload protection was added
-- (internal/ent/schema/message.go at commit 006c775): the broker can encrypt a message's content
-- into content_ciphertext (the content column then holds a redacted projection of at most 512
-- bytes) and its tool calls into tool_calls_ciphertext (tool_calls then keeps only id, name and
-- thoughtSignature). Written out as ent's migration (Atlas, SQLite dialect) creates them;
-- field.Bytes -> blob, field.Int -> integer. No foreign key (schema.WithForeignKeys(false)).
CREATE TABLE `sessions` (`id` integer NOT NULL PRIMARY KEY AUTOINCREMENT, `key` text NOT NULL, `agent_id` text NULL, `channel_type` text NULL, `channel_id` text NULL, `model` text NULL, `metadata` json NULL, `created_at` datetime NOT NULL, `updated_at` datetime NOT NULL);
CREATE UNIQUE INDEX `sessions_key_key` ON `sessions` (`key`);
CREATE INDEX `session_updated_at` ON `sessions` (`updated_at`);
CREATE TABLE `messages` (`id` integer NOT NULL PRIMARY KEY AUTOINCREMENT, `role` text NOT NULL, `content` text NOT NULL, `content_ciphertext` blob NULL, `content_nonce` blob NULL, `content_key_version` integer NULL, `timestamp` datetime NOT NULL, `tool_calls` json NULL, `tool_calls_ciphertext` blob NULL, `tool_calls_nonce` blob NULL, `tool_calls_key_version` integer NULL, `author` text NULL DEFAULT '', `session_messages` integer NULL);
