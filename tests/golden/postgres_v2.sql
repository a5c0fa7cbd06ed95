-- A PostgreSQL store at schema version 2 (data and meta as JSONB, raw_event for NUL and lone
-- surrogates, sessions.life), with data, as agentsession 0.1 before migration 3 wrote it.
--
-- Made by running agentsession at git commit 91f335a (LATEST_VERSION == 2) against
-- schema agentsession_golden_v2 (four sessions: a compacted chat with tool calls, unicode and
-- meta; payloads JSONB normalised; events that only raw_event could hold; a session deleted
-- and created again), then:
--   pg_dump --schema=agentsession_golden_v2 --inserts --no-owner --no-privileges \
--           --no-tablespaces test
-- with pg_dump's psql-only \restrict lines removed. tests/test_postgres.py loads it into a
-- fresh schema (replacing the name agentsession_golden_v2) and opens it with the current code.
-- Never edit it: it is what version 2 wrote.
--
-- PostgreSQL database dump
--


-- Dumped from database version 15.20 (Debian 15.20-0+deb12u1)
-- Dumped by pg_dump version 15.20 (Debian 15.20-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: agentsession_golden_v2; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA agentsession_golden_v2;


SET default_table_access_method = heap;

--
-- Name: events; Type: TABLE; Schema: agentsession_golden_v2; Owner: -
--

CREATE TABLE agentsession_golden_v2.events (
    session_id text NOT NULL COLLATE pg_catalog."C",
    seq bigint NOT NULL,
    type text NOT NULL,
    agent text DEFAULT ''::text NOT NULL,
    "user" text DEFAULT ''::text NOT NULL,
    "time" timestamp with time zone NOT NULL,
    data jsonb,
    meta jsonb,
    raw_event bytea,
    CONSTRAINT events_seq_check CHECK ((seq > 0))
);


--
-- Name: meta; Type: TABLE; Schema: agentsession_golden_v2; Owner: -
--

CREATE TABLE agentsession_golden_v2.meta (
    kind text NOT NULL COLLATE pg_catalog."C",
    key text NOT NULL COLLATE pg_catalog."C",
    value text NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: schema_migrations; Type: TABLE; Schema: agentsession_golden_v2; Owner: -
--

CREATE TABLE agentsession_golden_v2.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: session_lives; Type: SEQUENCE; Schema: agentsession_golden_v2; Owner: -
--

CREATE SEQUENCE agentsession_golden_v2.session_lives
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: sessions; Type: TABLE; Schema: agentsession_golden_v2; Owner: -
--

CREATE TABLE agentsession_golden_v2.sessions (
    id text NOT NULL COLLATE pg_catalog."C",
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    last_seq bigint NOT NULL,
    compaction_seq bigint DEFAULT 0 NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    life bigint DEFAULT nextval('agentsession_golden_v2.session_lives'::regclass) NOT NULL,
    CONSTRAINT sessions_last_seq_check CHECK ((last_seq > 0))
);


--
-- Data for Name: events; Type: TABLE DATA; Schema: agentsession_golden_v2; Owner: -
--

INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 1, 'turn/start', 'coder', '', '2026-03-01 09:00:02.123456+00', '{}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 2, 'user/message', 'coder', 'U1', '2026-03-01 09:00:03.123456+00', '{"role": "user", "parts": [{"text": "question 0: héllo ☃ 😀 \"quoted\" \\ back\tslash", "type": "text"}]}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 3, 'step/start', 'coder', '', '2026-03-01 09:00:04.123456+00', '{"step": 0}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 4, 'assistant/message', 'coder', '', '2026-03-01 09:00:05.123456+00', '{"role": "assistant", "toolCalls": [{"id": "call-0", "name": "read_file", "arguments": {"path": "src/0.py", "limit": 200}}]}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 5, 'tool/result', 'coder', '', '2026-03-01 09:00:06.123456+00', '{"name": "read_file", "callId": "call-0", "content": "contents of file 0\nline 2"}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 6, 'step/end', 'coder', '', '2026-03-01 09:00:07.123456+00', '{"step": 0}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 7, 'step/start', 'coder', '', '2026-03-01 09:00:08.123456+00', '{"step": 1}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 8, 'assistant/message', 'coder', '', '2026-03-01 09:00:09.123456+00', '{"role": "assistant", "parts": [{"text": "answer 0", "type": "text"}]}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 9, 'step/end', 'coder', '', '2026-03-01 09:00:10.123456+00', '{"step": 1}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 10, 'turn/end', 'coder', '', '2026-03-01 09:00:11.123456+00', '{"steps": 2}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 11, 'turn/start', 'coder', '', '2026-03-01 09:00:12.123456+00', '{}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 12, 'user/message', 'coder', 'U1', '2026-03-01 09:00:13.123456+00', '{"role": "user", "parts": [{"text": "question 1: héllo ☃ 😀 \"quoted\" \\ back\tslash", "type": "text"}]}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 13, 'step/start', 'coder', '', '2026-03-01 09:00:14.123456+00', '{"step": 0}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 14, 'assistant/message', 'coder', '', '2026-03-01 09:00:15.123456+00', '{"role": "assistant", "toolCalls": [{"id": "call-1", "name": "read_file", "arguments": {"path": "src/1.py", "limit": 200}}]}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 15, 'tool/result', 'coder', '', '2026-03-01 09:00:16.123456+00', '{"name": "read_file", "callId": "call-1", "content": "contents of file 1\nline 2"}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 16, 'step/end', 'coder', '', '2026-03-01 09:00:17.123456+00', '{"step": 0}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 17, 'step/start', 'coder', '', '2026-03-01 09:00:18.123456+00', '{"step": 1}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 18, 'assistant/message', 'coder', '', '2026-03-01 09:00:19.123456+00', '{"role": "assistant", "parts": [{"text": "answer 1", "type": "text"}]}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 19, 'step/end', 'coder', '', '2026-03-01 09:00:20.123456+00', '{"step": 1}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 20, 'turn/end', 'coder', '', '2026-03-01 09:00:21.123456+00', '{"steps": 2}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 21, 'turn/start', 'coder', '', '2026-03-01 09:00:22.123456+00', '{}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 22, 'user/message', 'coder', 'U1', '2026-03-01 09:00:23.123456+00', '{"role": "user", "parts": [{"text": "question 2: héllo ☃ 😀 \"quoted\" \\ back\tslash", "type": "text"}]}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 23, 'step/start', 'coder', '', '2026-03-01 09:00:24.123456+00', '{"step": 0}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 24, 'assistant/message', 'coder', '', '2026-03-01 09:00:25.123456+00', '{"role": "assistant", "toolCalls": [{"id": "call-2", "name": "read_file", "arguments": {"path": "src/2.py", "limit": 200}}]}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 25, 'tool/result', 'coder', '', '2026-03-01 09:00:26.123456+00', '{"name": "read_file", "callId": "call-2", "content": "contents of file 2\nline 2"}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 26, 'step/end', 'coder', '', '2026-03-01 09:00:27.123456+00', '{"step": 0}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 27, 'step/start', 'coder', '', '2026-03-01 09:00:28.123456+00', '{"step": 1}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 28, 'assistant/message', 'coder', '', '2026-03-01 09:00:29.123456+00', '{"role": "assistant", "parts": [{"text": "answer 2", "type": "text"}]}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 29, 'step/end', 'coder', '', '2026-03-01 09:00:30.123456+00', '{"step": 1}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 30, 'turn/end', 'coder', '', '2026-03-01 09:00:31.123456+00', '{"steps": 2}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 31, 'session/compaction', '', '', '2026-03-01 09:00:32.123456+00', '{"summary": {"role": "user", "parts": [{"text": "summary of the first turns", "type": "text"}]}, "firstKeptSeq": 21, "retainedTail": [{"role": "user", "parts": [{"text": "question 2: héllo ☃ 😀 \"quoted\" \\ back\tslash", "type": "text"}]}, {"role": "assistant", "toolCalls": [{"id": "call-2", "name": "read_file", "arguments": {"path": "src/2.py", "limit": 200}}]}, {"role": "tool", "toolResults": [{"name": "read_file", "callId": "call-2", "content": "contents of file 2\nline 2"}]}, {"role": "assistant", "parts": [{"text": "answer 2", "type": "text"}]}], "retainedAgents": ["coder", "coder", "coder", "coder"], "retainedTurnStarts": [0]}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 32, 'turn/start', 'coder', '', '2026-03-01 09:00:33.123456+00', '{}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 33, 'user/message', 'coder', 'U1', '2026-03-01 09:00:34.123456+00', '{"role": "user", "parts": [{"text": "after the compaction", "type": "text"}]}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 34, 'step/start', 'coder', '', '2026-03-01 09:00:35.123456+00', '{"step": 0}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 35, 'assistant/message', 'coder', '', '2026-03-01 09:00:36.123456+00', '{"role": "assistant", "parts": [{"text": "still here", "type": "text"}]}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 36, 'step/end', 'coder', '', '2026-03-01 09:00:37.123456+00', '{"step": 0}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 37, 'turn/end', 'coder', '', '2026-03-01 09:00:38.123456+00', '{"steps": 1}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:chat', 38, 'user/message', 'coder', 'U1', '2026-03-01 09:00:39.123456+00', '{"role": "user", "parts": [{"text": "with meta", "type": "text"}]}', '{"platform": {"ts": "1712345678.9", "ü": [1, 2.5, null]}, "logical_chars": 12004}', NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:numbers', 1, 'app/numbers', '', '', '2026-03-01 09:00:41.123456+00', '{"a": 12345678901234567890123, "e": 100, "m": 1.50, "s": "x", "z": 1, "neg": 0.0}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:numbers', 2, 'app/empty', '', '', '2026-03-01 09:00:42.123456+00', 'null', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:numbers', 3, 'app/list', '', '', '2026-03-01 09:00:43.123456+00', '[3, 2, 1, {"a": false, "b": true}]', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:odd', 1, 'user/message', 'a', '', '2026-03-01 09:00:45.123456+00', NULL, NULL, '\x7b2274797065223a22757365722f6d657373616765222c226167656e74223a2261222c2274696d65223a22323032362d30332d30315430393a30303a34352e3132333435365a222c2264617461223a7b22726f6c65223a2275736572222c227061727473223a5b7b2274797065223a2274657874222c2274657874223a226e756c5c7530303030696e73696465227d5d7d7d');
INSERT INTO agentsession_golden_v2.events VALUES ('golden:odd', 2, 'app/odd', '', 'u�', '2026-03-01 09:00:46.123456+00', NULL, NULL, '\x7b2274797065223a226170702f6f6464222c2275736572223a22755c7564633030222c2274696d65223a22323032362d30332d30315430393a30303a34362e3132333435365a222c2264617461223a7b2273223a226c6f6e65205c756438303020737572726f67617465227d7d');
INSERT INTO agentsession_golden_v2.events VALUES ('golden:odd', 3, 'app/plain', '', '', '2026-03-01 09:00:47.123456+00', NULL, NULL, '\x7b2274797065223a226170702f706c61696e222c2274696d65223a22323032362d30332d30315430393a30303a34372e3132333435365a222c2264617461223a7b226f6b223a747275657d2c226d657461223a7b226e6f7465223a226e756c5c75303030306d657461227d7d');
INSERT INTO agentsession_golden_v2.events VALUES ('golden:again', 1, 'app/second-life', '', '', '2026-03-01 09:00:51.123456+00', '{"n": 2}', NULL, NULL);
INSERT INTO agentsession_golden_v2.events VALUES ('golden:again', 2, 'app/second-life', '', '', '2026-03-01 09:00:52.123456+00', '{"n": 3}', NULL, NULL);


--
-- Data for Name: meta; Type: TABLE DATA; Schema: agentsession_golden_v2; Owner: -
--

INSERT INTO agentsession_golden_v2.meta VALUES ('bind', 'golden:chat', 'coder', '2026-03-01 09:00:53.123456+00');
INSERT INTO agentsession_golden_v2.meta VALUES ('pointer', 'cli', 'golden:chat', '2026-03-01 09:00:54.123456+00');


--
-- Data for Name: schema_migrations; Type: TABLE DATA; Schema: agentsession_golden_v2; Owner: -
--

INSERT INTO agentsession_golden_v2.schema_migrations VALUES (1, 'sessions, events and meta tables', '2026-12-01 01:45:30.638497+00');
INSERT INTO agentsession_golden_v2.schema_migrations VALUES (2, 'sessions.life: a number that changes when a session is deleted and created again', '2026-12-01 01:45:30.638497+00');


--
-- Data for Name: sessions; Type: TABLE DATA; Schema: agentsession_golden_v2; Owner: -
--

INSERT INTO agentsession_golden_v2.sessions VALUES ('golden:chat', '2026-03-01 09:00:02.123456+00', '2026-03-01 09:00:39.123456+00', 38, 31, '{}', 1);
INSERT INTO agentsession_golden_v2.sessions VALUES ('golden:numbers', '2026-03-01 09:00:41.123456+00', '2026-03-01 09:00:43.123456+00', 3, 0, '{}', 39);
INSERT INTO agentsession_golden_v2.sessions VALUES ('golden:odd', '2026-03-01 09:00:45.123456+00', '2026-03-01 09:00:47.123456+00', 3, 0, '{}', 42);
INSERT INTO agentsession_golden_v2.sessions VALUES ('golden:again', '2026-03-01 09:00:51.123456+00', '2026-03-01 09:00:52.123456+00', 2, 0, '{}', 46);


--
-- Name: session_lives; Type: SEQUENCE SET; Schema: agentsession_golden_v2; Owner: -
--

SELECT pg_catalog.setval('agentsession_golden_v2.session_lives', 47, true);


--
-- Name: events events_pkey; Type: CONSTRAINT; Schema: agentsession_golden_v2; Owner: -
--

ALTER TABLE ONLY agentsession_golden_v2.events
    ADD CONSTRAINT events_pkey PRIMARY KEY (session_id, seq);


--
-- Name: meta meta_pkey; Type: CONSTRAINT; Schema: agentsession_golden_v2; Owner: -
--

ALTER TABLE ONLY agentsession_golden_v2.meta
    ADD CONSTRAINT meta_pkey PRIMARY KEY (kind, key);


--
-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: agentsession_golden_v2; Owner: -
--

ALTER TABLE ONLY agentsession_golden_v2.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);


--
-- Name: sessions sessions_pkey; Type: CONSTRAINT; Schema: agentsession_golden_v2; Owner: -
--

ALTER TABLE ONLY agentsession_golden_v2.sessions
    ADD CONSTRAINT sessions_pkey PRIMARY KEY (id);


--
-- Name: sessions_updated_at_idx; Type: INDEX; Schema: agentsession_golden_v2; Owner: -
--

CREATE INDEX sessions_updated_at_idx ON agentsession_golden_v2.sessions USING btree (updated_at DESC, id DESC);


--
-- PostgreSQL database dump complete
--


