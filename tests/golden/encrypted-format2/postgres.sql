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

INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 1, 'turn/start', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b31222c22626f78223a224452466b565836364e6c4e674b466a2f6f36436d6a477845746f3756446f71444274543674385747776d675238746f2b2f32307364363746572f496c34722f7a2f634d5a785733376a43466739437a454d4543754f796c2f6c72434239574a6b475456666e736e6b3278305a66673d3d227d', NULL, NULL, '01a2346e8e03700080008b2b72ae3db4');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 2, 'user/message', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b31222c22626f78223a223935494d6e3236704c7a677a5738654a4376702f6d543539547a5557694464795663622b31675351703865347464446b7a5053784d705676496f313667472b73312f447a37577965347155536a536374676d525a4875595972797977765768766c7a486f3667344965504847554d6e79726549545a652f726f335553314777677a30636f4b4e69314d324344756267336f375633534e4969715532624f423631635a6148336c596b576a6946767050756a4c723557624f704234737777726a446a7a395433653930766447395070634b4c50425459774a703259684d78703769227d', NULL, NULL, '01a2346e8e1b700080008f2b72ae3db4');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 3, 'step/start', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b31222c22626f78223a224e415a505078724a79685552375a3179794934556333615244617931447a63555a657148492f7a4758654c426850354a593434547372336e53476a6c576570662f39726e7a535251505339357863784e45696d5968562b49762f47424338624e4e6345487a6d534b67697369742f3275464b51335a4e3565227d', NULL, NULL, '01a2346e8e2b70008000932b72ae3db4');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 4, 'assistant/message', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b31222c22626f78223a226c7256543833377531307a63616f2b3976345378356d61382f584d72726f48376a4c52375150424471726852572f514d7630766d514e6e36486850315674567857474f79634f31643674504a797352354e533171744c49787747736d63484e41666a4539376968494274786f715956575831632f3044376b56374c56705278587a4577493731596566626143343841732b49754c78634336586c37657950344a542f6c7a784f54766e774d726e506f7156722f34596837535a53616453556c354570324c7a48667a2f53554f5350514457555a67572b5039585737394551523367724f6c442f582f6661346861517a6b227d', NULL, NULL, '01a2346e8e3370008000972b72ae3db4');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 5, 'tool/result', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b31222c22626f78223a222f436d7744556a73476768796a47686e686165314a384e6742484f693078626a755357424f76646c5354623678505631743536466355466a3945504839304a33466464523361333461516e3051576a346d67574a6b506566382b4f776f337141374d776a644855777178735965735349784a6876714d47333774316d626839696a61413036644d7a5379424f4b4733304a2b4452486e69336f4d2f6749516d6d4f6637724f6a53613172596244435448755634716754723431673d3d227d', NULL, NULL, '01a2346e8e3f700080009b2b72ae3db4');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 6, 'step/end', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b31222c22626f78223a226d6461714e356176683779613657664e5857594b4b6e4d6e625434536a51467259756645356d754d44444f4c574a6144792f79707a6e474f4d4a316f5954663174584c7456615174504c68537865685a54675864316d54566e456d6b735a55324573315473735454357477684a3948396271652b2f4a344a227d', NULL, NULL, '01a2346e8e4b700080009f2b72ae3db4');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 7, 'assistant/message', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b31222c22626f78223a22534c43316d57514e6c4742616f72496e4b6e4f4a787a2f33436254694d5365675a33673650574274706566336735515579394e436e657377722b314b73552f393054364b456e533746504472382f4772516868317531387062516665336962744c764b39697639394d4869344a486c42634a496d677a7069796c5366752b395049396f4752595577644b4a434f552b552f64377959594a624759436954554d7154425448745043526354576a796a4235436b6a465244696835316548535954624651644777625a494975373443424d32792b5a61797445317553334b6642553d227d', NULL, NULL, '01a2346e8e5770008000a32b72ae3db4');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 8, 'turn/end', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b31222c22626f78223a2237524c2f4775546b34714e4b677562787a472b4b7a48504371636570735634684b65362b6a62366c2f79636955693157436158413867764579622b777564794a3843594b4e52586b393063735063784551784e6c376137334e59496c535a68346375547a2b57762f32664c70736b32414551396b6638643544773d3d227d', NULL, NULL, '01a2346e8e6370008000a72b72ae3db4');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 9, 'turn/start', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b32222c22626f78223a2264323932325169356745447147447441756a47785752534658476d4769704f61426f46326f3866496749704641497173786447326967524434536d32742f3038373372476936496f503767372b6c7177566f52562b5654455642623732624a32627a68394e4a44646453715635413d3d227d', NULL, NULL, '01a2346e8e7b70008000ab2b72ae3db4');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 10, 'user/message', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b32222c22626f78223a22654f6732746d4d794e705844617978463755395162667a3239725950687155744b3678546641554755546f716451684c2b754b48375071676d784e43645a7a54446b4d2b31386b554567587653695077412f4e723058724f31365476547a446433327673624f766f442f4b336e564b702b613538744172514a69617a69384e7a4938704f6348652b7369545344772b7075337966533650524c7072314e5958654d745471676d314b4f656b54504d5273526e6a7a3770666975773d3d227d', NULL, NULL, '01a2346e8e8770008000af2b72ae3db4');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 11, 'assistant/message', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b32222c22626f78223a222f3076725a4e476335486c6769784b2b48713942687846664b737a4c774f4d65686431342b433472777650484b724d5351515933534b67746e5157626b77476c547839736169316752455376677041744968377270637238572f344942714a5243765a526a52766674454e732f53366a73693234724b753051656d5431334a7279344d2f432f32335a552f712f41632b554f54764a565272692f7931655363684d38756b396a4762505742385576712f5872674e7a6d5032743749646750346f737834314839342f5451383d227d', NULL, NULL, '01a2346e8e8b70008000b32b72ae3db4');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 12, 'turn/end', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b32222c22626f78223a22556c385366632b2b5878787a59634f37674f6935686f7864314a3735734c56446857525472316e6d4836536f3944734c6c4850576d6b4e376b6c4533673570732b36646c59647837516e4e5447704a6f34556256302f753935655a704571304d42357454636651616d4b6c36436a75536b4356477a71355444673d3d227d', NULL, NULL, '01a2346e8e9770008000b72b72ae3db4');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:shredded', 1, 'turn/start', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b31222c22626f78223a22416a30684977303447434850732b676f70775a5363416c65354c6133737a694a6730637432796c7147744f5a61674a4f55556d3571584562493265567a445a7353722b474266475369704562564c746769306852673230464b32526577676e43625a543074445a53736f55456a413d3d227d', NULL, NULL, '01a2346e8ea870008000bb2b72ae3db4');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:shredded', 2, 'user/message', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b31222c22626f78223a223141594c746b635449542b476b646c34736931542b784c316f655843785839682f467472496d4e425567446f48533236492f3435394c6b4d30394e3553526166496a64566e71676461466a4b70763174366458494c38756c6835325a47716e4e503052445063526c5a73756e646f4f5562324752356f714841414f57367679587664344648466d2b55417069384535596a525862784e614270686b7773366b6d5663462f665375375a71737077763144776b4646584a754c567930686a413d3d227d', NULL, NULL, '01a2346e8ebf70008000bf2b72ae3db4');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:shredded', 3, 'assistant/message', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b31222c22626f78223a22416d524448395a31375334344347715572764a2f3171727357633031625778456d5a6f4842474a6a3653796756314642445131462b2b414a5344734d596b346a2b5a466d474f517045587a484672583145723670504b56722f6d7639795759536a4e78474c5571313159696f486f4a6532634a56443667486677583673427844673965446842485a47394a304648424c4f5a632f62736e695a6335484977533855317547506c556c7337656a42474f4876597759575464587843384b227d', NULL, NULL, '01a2346e8ed070008000c32b72ae3db4');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:shredded', 4, 'turn/end', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b31222c22626f78223a227a5644304d5769476b6a57696f6c756b5a76396a3132666d305733757933726148676f332f4b73324137307952764e485446693049363874646d42486e69555a70344c6d33785a7a734a556f6b4647636c35696934473431385646514d4c3533516d6f4947356f4b6f51677965386e394858476c4178742b4d413d3d227d', NULL, NULL, '01a2346e8ee170008000c72b72ae3db4');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:shredded', 5, 'agentsession/shred', '', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a322c226b6964223a226b31222c22626f78223a222b7064674b54794f3541714b6b37434e4f353630796b724362656670766e6c3442315071676d734f356f50435575684d4939733d227d', NULL, NULL, '01a2346e8eeb70008000cb2b72ae3db4');


--
-- Data for Name: meta; Type: TABLE DATA; Schema: agentsession_golden_enc; Owner: -
--

INSERT INTO agentsession_golden_enc.meta VALUES ('crypto', 'store', '{"v":1,"kdf":{"name":"scrypt","n":32768,"r":8,"p":1,"salt":"j6kQm4X93Ivpe/0wOsH/Gw=="},"key":"jYPgbj5ztF0rUDg9x4Q4p+4qtiyG/hNoml50sCwozRMSWyKInsEjdRjLpyhG1TbkMSTGi4GZGNzHG+xl"}', '2026-01-02 03:04:05+00');
INSERT INTO agentsession_golden_enc.meta VALUES ('crypto-session', 'golden:chat', 'eQrYBvrkLaPYHcgyVGj/nErA86fBtPDGz9ukznf4JhaN1kj3MUbQdI5vXBJzVva5eg8gADpR2/soUBTT', '2026-01-02 03:04:05+00');
INSERT INTO agentsession_golden_enc.meta VALUES ('crypto-active', 'golden:chat', 'k2', '2026-01-02 03:04:05+00');
INSERT INTO agentsession_golden_enc.meta VALUES ('crypto-session', 'golden:shredded', 'shredded', '2026-01-02 03:04:05+00');


--
-- Data for Name: schema_migrations; Type: TABLE DATA; Schema: agentsession_golden_enc; Owner: -
--

INSERT INTO agentsession_golden_enc.schema_migrations VALUES (1, 'sessions, events and meta tables', '2026-12-02 01:46:29.411326+00');
INSERT INTO agentsession_golden_enc.schema_migrations VALUES (2, 'sessions.life: a number that changes when a session is deleted and created again', '2026-12-02 01:46:29.411326+00');
INSERT INTO agentsession_golden_enc.schema_migrations VALUES (3, 'events.data and events.meta as bytea: payloads stored byte-exact; json_of, events_json', '2026-12-02 01:46:29.411326+00');
INSERT INTO agentsession_golden_enc.schema_migrations VALUES (4, 'events.eid: the event''s id (NULL for events stored before), to recognise retries', '2026-12-02 01:46:29.411326+00');


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


