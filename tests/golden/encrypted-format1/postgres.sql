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

INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 1, 'turn/start', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b31222c22626f78223a2242564a387162414f63697a55346839766f4e59745371454e77773862665550666c704469514a72493435366553675845514b31327a76437542306e3356485941354a4d772f376f615a772f2f396b6461467a7a756d4f6e66396d676e706c57744d54694c454970795967616873513d3d227d', NULL, NULL, '01a234687148700080008816b431337a');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 2, 'user/message', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b31222c22626f78223a22522b4b4f4663336c546c304749433057794758486367765738665853386e697144446c51644933475076582b436a4c42334b694d6c6d43756d3943482b3144482b724e35794f3364622f5161794d687572744c497a5a6e7a6b53507058787a73746c725a2f426e2b5878795576765766636a743859352f4547317156722b52524d72373964714b355a4d4b396b55522f7338316b49495a38396f41725237316f385251314a446d70514a75553365672f714c4e73597a3035586f5139474d306d684359455855506e6b764e536e4c36304f4445786b592f704b2b5a7477354171227d', NULL, NULL, '01a234687155700080008c16b431337a');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 3, 'step/start', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b31222c22626f78223a225856766f704955477a4f5649656f462b6a4143697a6162643666374b674931444d504b6959784254736a783870696f65393233504d50307164664c49566d4e525835786b52362b32784b796c686753686f48662b637030764f34647a6272722f6f357a38696a4a336a78504459686d436364597045686232227d', NULL, NULL, '01a23468715f700080009016b431337a');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 4, 'assistant/message', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b31222c22626f78223a22637779376c6b725275517936433259646f7739477a4c3438396342477a3048646d624e624b7a7065536843383267612b6b4141676d70794f55314f56494f32524e44476c71654f6e6c316c32616f3255476d73692f437553473759474c3131485a687931714155496f51477946726a45594e4971697a7962394376682f434750684b44315638446b443374616a394e75333762434b6936334f5934326e63616a52756a6b72645459474a67397177357058735672673668314f643469515a6b56456a7132316578546f652f6544356c3066496d7461707035457776775966325764576b4d4c79674e67446a746f754348227d', NULL, NULL, '01a234687163700080009416b431337a');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 5, 'tool/result', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b31222c22626f78223a225365695543464b48745a482f58772f61307731594c36692b6663376e66664869694c713558375274344a636269416f6a57433833554d696b6b476e35724835426e523633794335756e514a7949742f516f506554472b786f34515333616946784d77666a2b314c555a6957597230706a35756e7733462f7a434c646c70523072472f4b6951417a78416f69666741377547486c33667049796731444e4e2b6e533063367a637468615771447635476c515a434942676437784b513d3d227d', NULL, NULL, '01a23468716f700080009816b431337a');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 6, 'step/end', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b31222c22626f78223a226761426d4344535661644a64642f615538364b2b4b6963642f365a6875396d5a723249507656477777423555584832776b72765a4d4456376f5a4645505439484c31314c4974345a72476a6a474741543037646b7863716f694e442b4e6278626a746345775552787a5450706b704d69413830752b416d4a227d', NULL, NULL, '01a234687177700080009c16b431337a');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 7, 'assistant/message', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b31222c22626f78223a22315a54774b642f2f616c2b703069535176326a6b786a66586446626f526930736a4f4457544f7242716345313463652b5a7964324248693361587153784f30707853784777706f2f556268744774674f68727a39666c69423966694942636e447572324353666b696f4b7439564b7849614952696e4137704f704f766d557a6c677431413662394f3674447a733558772b514f67357774507a696769512f7a6a353937594c5879306e6d5a7a734145565a6a51676657515443516349687a774734724a4c30503266676d506f61534d4c4e693176615547432b61326c5a6f633d227d', NULL, NULL, '01a23468717d70008000a016b431337a');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 8, 'turn/end', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b31222c22626f78223a22765a6d4b68353068343341664943373962756e636d49736254437a3773544a6d2f67736c46535651534d3562766d673065685a5448625963395a70436d57426a536f334649544f433361315343717a7546467941324c6e454a75504943626b6a4e57713057582b726d556364736b4569536d58764d79693774513d3d227d', NULL, NULL, '01a23468718670008000a416b431337a');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 9, 'turn/start', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b32222c22626f78223a22583141384c4d4f6e596336682f4d34496766636f62556a42686f3733564c497a487133692f625a66724941375757445261536937416e434a33462f6851796e6e58494858666837686e65577947374c7131576f57357563732f4c736e375974465a6f2f554744465470764c3934773d3d227d', NULL, NULL, '01a23468718f70008000a816b431337a');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 10, 'user/message', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b32222c22626f78223a2271436f46732f34746471394f4f7855466b76484430554e746c396938765854614570382f583148585970376c7546795369372f374c4d4f4c776236304d717a356a4d2b66366469716f31377836644d7978413476377a4a54527a6251517747684369374d427351436f645142484d444d59754f73545048615852535451337a314a6537714c41423356554b53726e47524659584c55737a416e50546e4a70637056435a4248677468332b453869675961687031685872636f75773d3d227d', NULL, NULL, '01a23468719770008000ac16b431337a');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 11, 'assistant/message', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b32222c22626f78223a225277696f323755686956495a6157586f744d515a444d30432f49654e4a50756b4a2f7159395a4b305a4a6138777838715676654657506959627254616561673869795873574f376f6236534e696e476454666171436b3037582b6b655868757872462b4954706f47454c597864646f73556779784a4f6377634d707630746b5071473847786243546d4d72533876446f6d2b6f61554e5242463255436f5257376347526741484b6d6c454f6d5a62627056394a5145646555723666613771704e51416161496e4b355a44383d227d', NULL, NULL, '01a2346871a770008000b016b431337a');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:chat', 12, 'turn/end', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b32222c22626f78223a226b7856544c4250366b56612b524b6275506d413266576450574c616d30516b2b4462654f71474b2b414f6c6d49617a766d4f586b4c4943624a7771536d4f2b6c436e52692b734239436a722b694a634b47303762712f46624f55567033304445496a5132384c4550335747704d4b4b70572b6b7a346a4a3243673d3d227d', NULL, NULL, '01a2346871ab70008000b416b431337a');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:shredded', 1, 'turn/start', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b31222c22626f78223a227850515854796344736b316f46677551684e306b5567485744434f546a43374279436f6d5645624b4c697a67727972426b77464b3871475a35337a6c394e4371524f4f56496e6c3459456f466b444a753274686c436e35574e627565554d793145704b6330744e4c6b524b7047773d3d227d', NULL, NULL, '01a2346871b470008000b816b431337a');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:shredded', 2, 'user/message', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b31222c22626f78223a225179516462737154554477307451684859594e5037353373694f364c52374c4f31633072495552364b4754334a3446676d4b7938546f79666e794d36554e74456a63764c6f75576c4853413847613856493971614f2f666a50504b6a414645426c37714e72584637564d75314c63384f58514e716b774a51694a546a4d53597a794d4c74504f77616d4531524a766c7a56434165416b544755566c4f654e574452504c696948664d78624e6766552b4177514f4837496a4a4f63457954773d3d227d', NULL, NULL, '01a2346871c370008000bc16b431337a');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:shredded', 3, 'assistant/message', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b31222c22626f78223a22326a495a736139534743435a65745466715053782b4441524463784442446d37697a4b4f6c534d6b33362b534f617a51395730595836454a5273674d426b49474c576d78415755546f356764534b2b4f577a397a554d47734f47305159615a4d564434377241434348514f55752f6e6252505075424e6575626b6d42486144764979614c346755675167664a6756646e7a7939526e4b477a305a65534b466149486a2b4a55594d797679655661684d6e66367664346c6f313976474e227d', NULL, NULL, '01a2346871cb70008000c016b431337a');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:shredded', 4, 'turn/end', 'coder', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b31222c22626f78223a227850304c344d693143566876734351444d55315567334d2b4f592b58394c753757737448424a48556d4c645746523367367932503956492f736b68414677716d2b6761354e5a734f69563970753454383371326b6a6d694e36714e5973364241666a57505150786c5737347955723141553072387169356647773d3d227d', NULL, NULL, '01a2346871cf70008000c416b431337a');
INSERT INTO agentsession_golden_enc.events VALUES ('golden:shredded', 5, 'agentsession/shred', '', '', '2026-01-02 03:04:05+00', '\x7b227365616c6564223a312c226b6964223a226b31222c22626f78223a2263494c714f77304f364a42586d6f6b333061784f4844544b6e79643139786d7543647367695a645857765741666574767338633d227d', NULL, NULL, '01a2346871d370008000c816b431337a');


--
-- Data for Name: meta; Type: TABLE DATA; Schema: agentsession_golden_enc; Owner: -
--

INSERT INTO agentsession_golden_enc.meta VALUES ('crypto', 'store', '{"v":1,"kdf":{"name":"scrypt","n":32768,"r":8,"p":1,"salt":"bZWR/N6ROyHrdGCiuRC2JQ=="},"key":"uPcWzw4cDl0eZFjlFjlDe8unA42oXyQJZ6SWluArUT6p6/5yhWltbxF5epPcNHCuSxa3THDd1AEzmPui"}', '2026-01-02 03:04:05+00');
INSERT INTO agentsession_golden_enc.meta VALUES ('crypto-session', 'golden:chat', 'LLWDj4CnzKDwhJCRuY3wOxYYURXvY/BQNgHPlWzG9XHdZntWs4q6KuMnimsPFSbn8z2M8Q13kG1cMBIh', '2026-01-02 03:04:05+00');
INSERT INTO agentsession_golden_enc.meta VALUES ('crypto-active', 'golden:chat', 'k2', '2026-01-02 03:04:05+00');
INSERT INTO agentsession_golden_enc.meta VALUES ('crypto-session', 'golden:shredded', 'shredded', '2026-01-02 03:04:05+00');


--
-- Data for Name: schema_migrations; Type: TABLE DATA; Schema: agentsession_golden_enc; Owner: -
--

INSERT INTO agentsession_golden_enc.schema_migrations VALUES (1, 'sessions, events and meta tables', '2026-12-02 01:39:49.393209+00');
INSERT INTO agentsession_golden_enc.schema_migrations VALUES (2, 'sessions.life: a number that changes when a session is deleted and created again', '2026-12-02 01:39:49.393209+00');
INSERT INTO agentsession_golden_enc.schema_migrations VALUES (3, 'events.data and events.meta as bytea: payloads stored byte-exact; json_of, events_json', '2026-12-02 01:39:49.393209+00');
INSERT INTO agentsession_golden_enc.schema_migrations VALUES (4, 'events.eid: the event''s id (NULL for events stored before), to recognise retries', '2026-12-02 01:39:49.393209+00');


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


