-- An encrypted PostgreSQL store (schema version 3), made by tests/golden/encrypted/make.py
-- with the passphrase in that script, then:
--   pg_dump --schema=agentsession_golden_enc --inserts --no-owner --no-privileges \
--           --no-tablespaces <db>
-- with pg_dump's psql-only \restrict lines removed. tests/test_encryption_golden.py loads it
-- into a fresh schema (replacing the name agentsession_golden_enc) and opens it with the passphrase.
-- Never edit it: it is what this version wrote.
--
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
-- Name: agentsession_golden_enc; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA agentsession_golden_enc;


--
-- Name: json_of(bytea); Type: FUNCTION; Schema: agentsession_golden_enc; Owner: -
--

CREATE FUNCTION agentsession_golden_enc.json_of(payload bytea) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
            BEGIN
                RETURN convert_from(payload, 'UTF8')::jsonb;
            EXCEPTION WHEN others THEN
                RETURN NULL;
            END
            $$;


SET default_table_access_method = heap;

--
-- Name: events; Type: TABLE; Schema: agentsession_golden_enc; Owner: -
--

CREATE TABLE agentsession_golden_enc.events (
    session_id text NOT NULL COLLATE pg_catalog."C",
    seq bigint NOT NULL,
    type text NOT NULL,
    agent text DEFAULT ''::text NOT NULL,
    "user" text DEFAULT ''::text NOT NULL,
    "time" timestamp with time zone NOT NULL,
    data bytea,
    meta bytea,
    raw_event bytea,
    CONSTRAINT events_seq_check CHECK ((seq > 0))
);


--
-- Name: events_json; Type: VIEW; Schema: agentsession_golden_enc; Owner: -
--

CREATE VIEW agentsession_golden_enc.events_json AS
 SELECT events.session_id,
    events.seq,
    events.type,
    events.agent,
    events."user",
    events."time",
    agentsession_golden_enc.json_of(events.data) AS data,
    agentsession_golden_enc.json_of(events.meta) AS meta
   FROM agentsession_golden_enc.events;


--
-- Name: meta; Type: TABLE; Schema: agentsession_golden_enc; Owner: -
--

CREATE TABLE agentsession_golden_enc.meta (
    kind text NOT NULL COLLATE pg_catalog."C",
    key text NOT NULL COLLATE pg_catalog."C",
    value text NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: schema_migrations; Type: TABLE; Schema: agentsession_golden_enc; Owner: -
--

CREATE TABLE agentsession_golden_enc.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: session_lives; Type: SEQUENCE; Schema: agentsession_golden_enc; Owner: -
--

CREATE SEQUENCE agentsession_golden_enc.session_lives
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: sessions; Type: TABLE; Schema: agentsession_golden_enc; Owner: -
--

CREATE TABLE agentsession_golden_enc.sessions (
    id text NOT NULL COLLATE pg_catalog."C",
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    last_seq bigint NOT NULL,
    compaction_seq bigint DEFAULT 0 NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    life bigint DEFAULT nextval('agentsession_golden_enc.session_lives'::regclass) NOT NULL,
    CONSTRAINT sessions_last_seq_check CHECK ((last_seq > 0))
);


--
-- Data for Name: events; Type: TABLE DATA; Schema: agentsession_golden_enc; Owner: -
--

INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 1, 'turn/start', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b31222c22626f78223a224f6e34366f797a524e6a62734a794b68315a31794a7a423054547174684433312f35684145354932796d366172766a2f63394d3d227d', NULL, NULL);
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 2, 'user/message', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b31222c22626f78223a223639536d4157694a4771616b344c374c6e79377770375a753573743530424656736439346f4579715365326754497a39666e647530694f744f6450335864424836794b495953774c31646d3342796839356d6850595749385144394238477a4c443851397130737133384554626f7a545464676443597462775630433457594f7a314837657564694b36695335477651486255706c4f4b6b4b397a566c75596f4e564136227d', NULL, NULL);
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 3, 'step/start', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b31222c22626f78223a22714248326a34504a4f6f666d64556c3031564341333476364b624e562f68745a3935367732757a79456a45776773614b42426547364a596e646f385368673d3d227d', NULL, NULL);
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 4, 'assistant/message', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b31222c22626f78223a224b49632f4f566a427077516a38484b344a7478444f4a33526c5155344e36775a686a66762f48706e4a49324f726c5157716e55664f504f4c6b41416971467147577a302f6c4e416a536e316a32435052435078334d534f6574532b7850655a756f6146376d7a462b4e4f695635675177416956474d45306e4c6a6b6d626931684355692b5149796244736653744664672b386e4d534130734773685658455652485a7762562f3677314d3765532f6e4b2f326f7854773d3d227d', NULL, NULL);
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 5, 'tool/result', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b31222c22626f78223a22506d4541756e7a472b537779476a68794d59316f47552f756b4644416372713457672f36565370692b596a34326c694a3935366439572f376d57592b30395168642b374b324f6863764d396c33583275647a3279795056646d546b752b4678766b4e6b54354d412b5043684466585a5279346a314f427552654634536e59593d227d', NULL, NULL);
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 6, 'step/end', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b31222c22626f78223a2248583230646e5031476f346130494d664c486271594a766e7339676e776c667533684279484970676758324a5748367442396873746d37325755486e70513d3d227d', NULL, NULL);
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 7, 'assistant/message', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b31222c22626f78223a22344f5a564e52622f452b7956385866596f77474d754f4e4763442b61555356374c786851394b76723138755678795545435836657071315951506c6a6a64654e556b38762b503245764c6e72776d572f58336649774b443549786e56504863585372575745344f6342486645542b7a327a55313578456d30734b6976596e5a375a72536e3878664f4b7a3465685665374c327a682f7a774553764768457a6f6a36336947227d', NULL, NULL);
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 8, 'turn/end', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b31222c22626f78223a224375644f41766f35345a523777535456664534334b6461747758332b4d36786e63554c322f414a53634458417a577a316a2f584c5174735952466c7a666b673d227d', NULL, NULL);
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 9, 'turn/start', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b32222c22626f78223a2278595a73442b51764e677559776d6f6a4d5a4d736e4d763533506c5351734736676c6c74444964316e6f5238676d52433642593d227d', NULL, NULL);
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 10, 'user/message', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b32222c22626f78223a22574456344f646758626a4c6c6f72775a5a764c3270444146314546593554542b662f4a7a4c68576e72462f456d584a794f517643354c59697036355775596a7a505172354a4645564a77705848515134323647426744573743466456634c496a456d554c5535373555563667697a326c6f4364664358614d4c68506a326b513d227d', NULL, NULL);
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 11, 'assistant/message', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b32222c22626f78223a22522f4a336f5257775067382f2f6e6956772f73795056754879644a75576749334933432b454b6c456e38714f7a4e772f4741794935464373476362394c415a616576585138417168633055644e2f7661623242386d3563364c41383376632f63365178554a784e79376331684c67334a62666f6a4132363131364c773658504255316f7377752b743734487a48753337227d', NULL, NULL);
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 12, 'turn/end', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b32222c22626f78223a226150644a392f6964687364754f52423152567052514e3738747642502b486b724d67516d39374157724f4e7969574c796850693566643151395a59743546493d227d', NULL, NULL);
INSERT INTO agentsession_golden_enc.events VALUES ('golden:shredded', 1, 'turn/start', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b31222c22626f78223a2242326d67556f585a6e744e686d6f317551485467484670617968544c50396e70634b68575a5a42324e33567655505342766b773d227d', NULL, NULL);
INSERT INTO agentsession_golden_enc.events VALUES ('golden:shredded', 2, 'user/message', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b31222c22626f78223a227634677650352b4579697755386e41615a574865584c6b6d4e54486d46506772784b2b43655a6d4d4c335658334f4162334d5a6661686b4c52554b426851334e784c5753576439374b794766656e7355586e5978652f44754e2f462f79757149776d38582f7964415149695a524c766b4e784c796e465a4559345775625056632b35413d227d', NULL, NULL);
INSERT INTO agentsession_golden_enc.events VALUES ('golden:shredded', 3, 'assistant/message', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b31222c22626f78223a22436a38754d544d6b2b4733357553616b5968516c5142686d36766276793076756d4b34523371496b7a4a75425a686c48624e3851666855324278764e344c4e4a4946694e42672f75616d306d334350615359646f4753556b7548776376617747384a2b326a6d33344330783777476362666b7047596346373036444c4141695637673d3d227d', NULL, NULL);
INSERT INTO agentsession_golden_enc.events VALUES ('golden:shredded', 4, 'turn/end', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b31222c22626f78223a22794f354b42586c38533639736462366c79336e4a644e394931795756766a4d5347676365777668516774626545786864676d554155666838373569687770673d227d', NULL, NULL);


--
-- Data for Name: meta; Type: TABLE DATA; Schema: agentsession_golden_enc; Owner: -
--

INSERT INTO agentsession_golden_enc.meta VALUES ('crypto', 'store', '{"v":1,"kdf":{"name":"scrypt","n":32768,"r":8,"p":1,"salt":"pNEirUfEFdBrF8yFCcCcPg=="},"key":"TRHi2bTtxzRRNpNBpsxROyBvHhb9DoyH7KuJoiWvHom37oG2U1L15p+3WkFQSnf5z9VnBonV9Euru2kv"}', '2026-01-02 03:04:05+00');
INSERT INTO agentsession_golden_enc.meta VALUES ('crypto-session', 'golden:chat', 'M/b8mFsCeXiR2r8Vyf6DCDo2DSmJEc6VmyuFH1ixhHmjdmzbx2yz8ufRCvIkCGDTh2USX7wsLZbucuAe', '2026-01-02 03:04:05+00');
INSERT INTO agentsession_golden_enc.meta VALUES ('crypto-active', 'golden:chat', 'k2', '2026-01-02 03:04:05+00');
INSERT INTO agentsession_golden_enc.meta VALUES ('crypto-session', 'golden:shredded', 'shredded', '2026-01-02 03:04:05+00');


--
-- Data for Name: schema_migrations; Type: TABLE DATA; Schema: agentsession_golden_enc; Owner: -
--

INSERT INTO agentsession_golden_enc.schema_migrations VALUES (1, 'sessions, events and meta tables', '2026-12-01 02:32:03.622753+00');
INSERT INTO agentsession_golden_enc.schema_migrations VALUES (2, 'sessions.life: a number that changes when a session is deleted and created again', '2026-12-01 02:32:03.622753+00');
INSERT INTO agentsession_golden_enc.schema_migrations VALUES (3, 'events.data and events.meta as bytea: payloads stored byte-exact; json_of, events_json', '2026-12-01 02:32:03.622753+00');


--
-- Data for Name: sessions; Type: TABLE DATA; Schema: agentsession_golden_enc; Owner: -
--

INSERT INTO agentsession_golden_enc.sessions VALUES ('golden:chat', '2026-01-02 03:04:05+00', '2026-01-02 03:04:05+00', 12, 0, '{}', 1);
INSERT INTO agentsession_golden_enc.sessions VALUES ('golden:shredded', '2026-01-02 03:04:05+00', '2026-01-02 03:04:05+00', 4, 0, '{}', 2);


--
-- Name: session_lives; Type: SEQUENCE SET; Schema: agentsession_golden_enc; Owner: -
--

SELECT pg_catalog.setval('agentsession_golden_enc.session_lives', 2, true);


--
-- Name: events events_pkey; Type: CONSTRAINT; Schema: agentsession_golden_enc; Owner: -
--

ALTER TABLE ONLY agentsession_golden_enc.events
    ADD CONSTRAINT events_pkey PRIMARY KEY (session_id, seq);


--
-- Name: meta meta_pkey; Type: CONSTRAINT; Schema: agentsession_golden_enc; Owner: -
--

ALTER TABLE ONLY agentsession_golden_enc.meta
    ADD CONSTRAINT meta_pkey PRIMARY KEY (kind, key);


--
-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: agentsession_golden_enc; Owner: -
--

ALTER TABLE ONLY agentsession_golden_enc.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);


--
-- Name: sessions sessions_pkey; Type: CONSTRAINT; Schema: agentsession_golden_enc; Owner: -
--

ALTER TABLE ONLY agentsession_golden_enc.sessions
    ADD CONSTRAINT sessions_pkey PRIMARY KEY (id);


--
-- Name: sessions_updated_at_idx; Type: INDEX; Schema: agentsession_golden_enc; Owner: -
--

CREATE INDEX sessions_updated_at_idx ON agentsession_golden_enc.sessions USING btree (updated_at DESC, id DESC);


--
-- PostgreSQL database dump complete
--


