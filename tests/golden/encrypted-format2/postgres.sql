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
    eid text,
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

INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 1, 'turn/start', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b31222c22626f78223a22655978427330777a353247477165673642432f4c642f67444f4b58623364674f306a553376574478484e6b325a6c49744f6667426566424f48452f763861623937784b314963564441736a764647685243394e756b35705363753931336e736d6b4a71634c2f5a702b50752f79773d3d227d', NULL, NULL, '01a2347d40db700080008adc9ff471ca');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 2, 'user/message', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b31222c22626f78223a2245366f44744b5038564d7245614a4251784a4c68464a7848337a4d6235534f6d424e54356475443332727232632f616c485856513561646973306235684b547a474577736c5a545666494e2f384c6a497155576a76537657474f6a6562336a35435735386d354348654f59544241334e3533682b3673466a566d4c427a614c332f2f633363376172496c457859325a35655839695a354c6e73326a426a593345566150787a414d4e506870734359304834724e575667426a394634496d5575414263636548634245442b6f77346251635273426e746674367a2f547959785759227d', NULL, NULL, '01a2347d40f5700080008edc9ff471ca');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 3, 'step/start', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b31222c22626f78223a2253353633595947324544317a4c6d337a52326e49425949514e6a4758334b514e6d73506a5856335075576438457833753832576f534244464d32716d78513471454b3741354347696f573958484b353667424a68786776327341514b65496b4e444a65676f6e2b6f4b4b774c79577a7830374a6e6d316a39227d', NULL, NULL, '01a2347d410a7000800092dc9ff471ca');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 4, 'assistant/message', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b31222c22626f78223a224a492b4639717044315331716433684f4c464174485458793568592b6c757262576e446a3461624e5874424f4842496470566d656b56387649704477725541477931664a455437754161547a704d35305544306575733547336579585747684f6b78477569685452543372795532764c5a2b5458745538616d6831684f6d705971624153345638364b71384d3031796e752b2f4763454a59497433784262796566344f744a6b7468737530673335594f376f584664705367656467794d327a395432763056507a6d56772f4d47697a2f6670415775752b647668754a4e6c4454747a6a50642b5459325946724452676b227d', NULL, NULL, '01a2347d410f7000800096dc9ff471ca');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 5, 'tool/result', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b31222c22626f78223a22574a52485570427175483047505a4b633936575946736e546434756e7272724e3150505130522b796a78424730635956684c6d566d306751585a68796c663358347947576c366e62577a2b6c45756d5066452f34574648326d3871472b5036356f717363746d56734c6571426378414d586d7568313065644d4748755074614a49747558646e374f6842445848613963434b4a39414d44724e4743615455653858576f4238744c45766969754b514d635a4758614f6148747a413d3d227d', NULL, NULL, '01a2347d4118700080009adc9ff471ca');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 6, 'step/end', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b31222c22626f78223a222f4d68574567563259395756567170566a6e6b664d50465a396f64455a2b4833735956317a797471427a4f356f4a3544487a4653556863576b756849382f714b6b6c6b784a5a4747665a436379313466695358766f63386f3678636b41682f32764b6b5151484537566651593757615255354d4744673647227d', NULL, NULL, '01a2347d411f700080009edc9ff471ca');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 7, 'assistant/message', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b31222c22626f78223a224c75306d62485949754a345573597a69796d49325649354a69444464796a786c4e504d3947486b484e5138687a57426b2f6667594b626553356a434f565a4151582b42622f396d57514968574348455356746a4559334e675076596f4e424a532f65646c6e2b692b6b72573774496b4479476a4e597646575874336d6332492f433762574154567354575a38515337783841784a427563626b4947774f5a757957574c63436b743952786c76753631754e37306e6b38667233686d706662326a46784c546538332b3278344b433762773557502f623674694652722b2b356b3d227d', NULL, NULL, '01a2347d412b70008000a2dc9ff471ca');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 8, 'turn/end', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b31222c22626f78223a22793664774650356578434857706c356c6b66646d71384936666d3962424673523232314f4c734e7839434448425861743350737476374756522b382b514e5869764c4b2f5442796b624b70385a38433167626b484f75796c423347782f567271725a3138716f73642f42723647714b756a72476f3733363232673d3d227d', NULL, NULL, '01a2347d413070008000a6dc9ff471ca');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 9, 'turn/start', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b32222c22626f78223a224f764e43434e2b4750695a7937706b6c58615a6e6d45637a364f6e456a536f6871595931644e6d647237543446684149397a656b56714f533432724b784d6c454d6a367775592b5354524b52547970684f5054726f424f4a5952495268745670354c47467a4c49777365437973773d3d227d', NULL, NULL, '01a2347d415470008000aadc9ff471ca');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 10, 'user/message', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b32222c22626f78223a224e4b3543356e41564965514e4270385670305147577a44504538626c335a5533306a5648626a4d584549614a48664a6f446a613657386a434669426272756258636f2b675754413352642f74516f42525874457058345976586c304e3236533077444a534d6b574d32515779754c39316a67334c423953324b72493638705a734a67494e73656b5a3857712b626d34714c796c463046344b4f44534a73342f79516443516138357072316f625a36646d3651692f46696c3071773d3d227d', NULL, NULL, '01a2347d416770008000aedc9ff471ca');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 11, 'assistant/message', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b32222c22626f78223a22717169364f796357374d4b42777a7442714d49634d795a4c7038443837686a6d2b41484474706372334c62383678766f723344636c4448366b786c746441655864463268485a4a3174306b6673696d6c6f4d4c2f4e53512b6a746b6754346570352b4d7031566e6139496a5361717636376a69612b524776714f2f4b4d596b757630345a585a4a5744556d38766b302f743848326a4a776d7237373259446f4d556e486a455836646f413239784f4d33345132326232432f6c78554e7066734e574258666c6a57552f71733d227d', NULL, NULL, '01a2347d418070008000b2dc9ff471ca');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 12, 'turn/end', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b32222c22626f78223a226273343974586f61394a39697332716573426b586e7254667869557339556e64707a6258676b6b586b61685177532b615167653741714e4b6a3741366756753359707a597536506c374e7752702b447332527651507764316639574f3234415670363946594b434b4937426f42566779766a41744f51754946773d3d227d', NULL, NULL, '01a2347d418470008000b6dc9ff471ca');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:shredded', 1, 'turn/start', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b31222c22626f78223a226d784e726f31596441516e4b444a497579772f4f436175486c445564374d525654786d355864347a35666b4b42767539712f3334357a72395139507973312b4e632b683046424548372b6838376957735430386b7465552f673743437549496f6b76544e7145724f376b4a5168673d3d227d', NULL, NULL, '01a2347d419870008000badc9ff471ca');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:shredded', 2, 'user/message', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b31222c22626f78223a22706f547945376878506e452f476739364230425a3275384a4c5847705a48687a5a635a41497537556c525562686a7356556e4e6f454566783856642b7846434e6f614d775856327a78654c51642f2b42596b5162346d594e674b6d334d75784b34742b75502f48326a6e58356d74386376566947635134546a52395a5a416d732f346b6278724e344572482f77364d566e2b4c345132315264524d424657453841633353666943634959744361786942354f6553414a685a3652306670773d3d227d', NULL, NULL, '01a2347d41bf70008000bedc9ff471ca');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:shredded', 3, 'assistant/message', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b31222c22626f78223a22753338737163435679586d3965316f50593531394d6346726f69733337665952706b68647a33534631464530334d6979743935795a783255394834543143494a52684a475954524b4b4f4e477676354f63784e6f42674c4366394a785932653730692b66542f4250574e41784d795a4d4c74367368584b664d36757a45524266497277415a4b6e765839314b6d4544417466467342382b696f467a73474f2b447174317759744b54456e72463052524b75514442394e425563786365227d', NULL, NULL, '01a2347d41d370008000c2dc9ff471ca');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:shredded', 4, 'turn/end', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b31222c22626f78223a225968567946752b4e504d73743671465779346f6d6a69773539435448633756566e61704d654433715a42326735555632716c476c376b7a6d723652364650473468434375565472566e4f7333616a795a424a56506f4967696d753256736263704873356365652f49344969585174694c5166696e7a79484e79773d3d227d', NULL, NULL, '01a2347d41e470008000c6dc9ff471ca');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:shredded', 5, 'agentsession/shred', '', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b31222c22626f78223a225556614a6f37637a4c7054574f554479394d46556966484e696368725148316d787537616c76464b76503851385a466b4c69733d227d', NULL, NULL, '01a2347d41fc70008000cadc9ff471ca');


--
-- Data for Name: meta; Type: TABLE DATA; Schema: agentsession_golden_enc; Owner: -
--

INSERT INTO agentsession_golden_enc.meta VALUES ('crypto', 'store', '{"v":1,"kdf":{"name":"scrypt","n":32768,"r":8,"p":1,"salt":"ALVN75vRwdNGT3goo5+rfw=="},"key":"moqJlzkPaQ78MbBWa847RkXl2O4owFAsznhSVg0Om1LXBkt6azR/5CcEFtb6s9kx7CarwsIKggCSP7Iv"}', '2026-01-02 03:04:05+00');
INSERT INTO agentsession_golden_enc.meta VALUES ('crypto-session', 'golden:chat', 't5iaPN3GMRwNyMqu26qWqRnaJgJhE2HvQl1AHHNGQ1bXs2eJCJv1wGhIYmSC6nHr0FJw+Dn0hmmKyYGg', '2026-01-02 03:04:05+00');
INSERT INTO agentsession_golden_enc.meta VALUES ('crypto-active', 'golden:chat', 'k2', '2026-01-02 03:04:05+00');
INSERT INTO agentsession_golden_enc.meta VALUES ('crypto-session', 'golden:shredded', 'shredded', '2026-01-02 03:04:05+00');


--
-- Data for Name: schema_migrations; Type: TABLE DATA; Schema: agentsession_golden_enc; Owner: -
--

INSERT INTO agentsession_golden_enc.schema_migrations VALUES (1, 'sessions, events and meta tables', '2026-12-02 02:02:32.923305+00');
INSERT INTO agentsession_golden_enc.schema_migrations VALUES (2, 'sessions.life: a number that changes when a session is deleted and created again', '2026-12-02 02:02:32.923305+00');
INSERT INTO agentsession_golden_enc.schema_migrations VALUES (3, 'events.data and events.meta as bytea: payloads stored byte-exact; json_of, events_json', '2026-12-02 02:02:32.923305+00');
INSERT INTO agentsession_golden_enc.schema_migrations VALUES (4, 'events.eid: the event''s id (NULL for events stored before), to recognise retries', '2026-12-02 02:02:32.923305+00');


--
-- Data for Name: sessions; Type: TABLE DATA; Schema: agentsession_golden_enc; Owner: -
--

INSERT INTO agentsession_golden_enc.sessions VALUES ('golden:chat', '2026-01-02 03:04:05+00', '2026-01-02 03:04:05+00', 12, 0, '{}', 1);
INSERT INTO agentsession_golden_enc.sessions VALUES ('golden:shredded', '2026-01-02 03:04:05+00', '2026-01-02 03:04:05+00', 5, 0, '{}', 2);


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


