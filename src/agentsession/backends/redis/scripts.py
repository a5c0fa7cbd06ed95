"""The Redis backend's server-side scripts (Lua), each atomic on the server.

Every script that touches one session is given that session's keys only (``KEYS``), all in one
hash slot (``{tag}``), so it runs unchanged on Redis Cluster; the store-wide catalog keys share
another slot (``{~catalog}``), and a script touching them builds their names from the catalog
prefix it is handed (same slot, so Cluster routes it by its one declared key). On a single
server the append script also updates the store-wide catalog in the same run
(:data:`APPEND` with a catalog prefix), which makes the whole append one atomic step.

Numbers that must stay exact (times in microseconds, costs) travel as strings: Lua's
``tostring`` keeps only 14 significant digits. Costs are added as doubles in Lua and kept as
``%.17g``, which reads back in Python as the same double Python's own sum would give.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "APPEND",
    "APPEND_PLAIN",
    "CAS",
    "CATCH_UP",
    "DELETE",
    "DOCUMENTS",
    "INDEX_ROW",
    "LOCK",
    "META_ADD",
    "OPEN",
    "QUERY",
    "REBUILD",
    "REFRESH",
    "SEARCH",
    "RENEW",
    "SET_FIELDS",
    "UNLOCK",
]

_INDEX_FUNCTIONS: Final = r"""
-- A document's entries in the inverted index: ``w:<word>`` (version 1: sets of
-- ``session NUL seq``) and ``W:<word>`` (sorted sets of ``session NUL seq``, the seq in 20
-- digits so that ties list in seq order, scored by minus the word's rank in the document).
local function doc_member(sid, seq)
  return sid .. '\0' .. string.format('%020d', seq)
end

local function add_words(C, sid, words)
  for i = 1, #words, 3 do
    redis.call('ZADD', C .. 'W:' .. words[i], words[i + 2], doc_member(sid, words[i + 1]))
  end
end

local function remove_words(C, sid, words)
  for i = 1, #words, 2 do
    redis.call('SREM', C .. 'w:' .. words[i], sid .. '\0' .. words[i + 1])
    redis.call('ZREM', C .. 'W:' .. words[i], doc_member(sid, words[i + 1]))
  end
end

local function add_members(C, sid, st, user, tenant, tags, agents)
  redis.call('SADD', C .. 'f:status:' .. st, sid)
  redis.call('SADD', C .. 'f:user:' .. user, sid)
  redis.call('SADD', C .. 'f:tenant:' .. tenant, sid)
  for _, t in ipairs(tags) do redis.call('SADD', C .. 'f:tag:' .. t, sid) end
  for _, a in ipairs(agents) do redis.call('SADD', C .. 'f:agent:' .. a, sid) end
end

-- ``m``: {status, user, tenant, tags, agents} as indexed.
local function remove_members(C, sid, m)
  redis.call('SREM', C .. 'f:status:' .. m[1], sid)
  redis.call('SREM', C .. 'f:user:' .. m[2], sid)
  redis.call('SREM', C .. 'f:tenant:' .. m[3], sid)
  for _, t in ipairs(m[4]) do redis.call('SREM', C .. 'f:tag:' .. t, sid) end
  for _, a in ipairs(m[5]) do redis.call('SREM', C .. 'f:agent:' .. a, sid) end
end

-- The store-wide index of one session's row: list orders (sorted sets), filter sets, the
-- words of new documents. ``row`` is {v, status, user, tenant, tags, agents, updated,
-- created}; a row older than the one indexed (a lower version ``v``) only adds its words.
-- ``x`` keeps, per session, {v, memberships packed}.
local function index_row(C, sid, row, words)
  add_words(C, sid, words)
  local x = C .. 'x'
  local old = redis.call('HGET', x, sid)
  local prev = nil
  if old then prev = cmsgpack.unpack(old) end
  if prev and tonumber(prev[1]) >= tonumber(row[1]) then return 0 end
  redis.call('ZADD', C .. 'z:u', row[7], sid)
  local packed = cmsgpack.pack({row[2], row[3], row[4], row[5], row[6]})
  if prev and prev[2] == packed then  -- the same memberships: only the version moves
    redis.call('HSET', x, sid, cmsgpack.pack({row[1], packed}))
    return 1
  end
  if prev then remove_members(C, sid, cmsgpack.unpack(prev[2])) end
  add_members(C, sid, row[2], row[3], row[4], row[5], row[6])
  redis.call('ZADD', C .. 'z:c', row[8], sid)
  redis.call('ZADD', C .. 'z:i', 0, sid)
  redis.call('HSET', x, sid, cmsgpack.pack({row[1], packed}))
  return 1
end

local function unindex_row(C, sid, words)
  remove_words(C, sid, words)
  local x = C .. 'x'
  local old = redis.call('HGET', x, sid)
  if old then remove_members(C, sid, cmsgpack.unpack(cmsgpack.unpack(old)[2])) end
  redis.call('HDEL', x, sid)
  redis.call('ZREM', C .. 'z:u', sid)
  redis.call('ZREM', C .. 'z:c', sid)
  redis.call('ZREM', C .. 'z:i', sid)
end
"""

_ROW_FUNCTIONS: Final = r"""
local function unpacked(value)
  if value and value ~= '' then return cmsgpack.unpack(value) end
  return {}
end

-- The row state the store-wide index keeps, after a change to the session hash ``s``.
local function row_state(s)
  local f = redis.call('HMGET', s, 'v', 'status', 'user', 'tenant', 'tags', 'agents',
                       'updated', 'created')
  return {f[1] or '0', f[2] or 'idle', f[3] or '', f[4] or '', unpacked(f[5]),
          unpacked(f[6]), f[7] or '0', f[8] or '0'}
end

local function add_int(key, field, amount)
  if amount ~= 0 then redis.call('HINCRBY', key, field, amount) end
end

local function add_cost(key, field, amount)
  if amount == '0' or amount == '0.0' then return end
  local old = tonumber(redis.call('HGET', key, field) or '0')
  redis.call('HSET', key, field, string.format('%.17g', old + tonumber(amount)))
end

-- The row fields a change reads, in the order :func:`read_row` returns them.
local ROW_FIELDS = {'created', 'updated', 'user', 'title', 'status', 'compacted', 'agents',
                    'messages', 'turns'}

-- The fields of ``ROW_FIELDS`` of the session hash ``s``, by name (absent: nil).
local function read_row(s)
  local got = redis.call('HMGET', s, unpack(ROW_FIELDS))
  local f = {}
  for i, name in ipairs(ROW_FIELDS) do f[name] = got[i] or nil end
  return f
end

-- Apply a CatalogChange (msgpack: {first_us, last_us, messages, turns, usage, usage_rows,
-- agents, user, title, status, compacted_before, rewound, documents}) to the row fields of
-- the session hash ``s``, its usage rows ``u`` and its documents ``d``. ``f`` holds the
-- hash's fields of ``ROW_FIELDS`` as read (:func:`read_row`); the plain fields the change
-- sets are put in ``f`` and appended to ``writes`` (name, value pairs) for the caller's one
-- ``HSET``, the message and turn counts with them (counts far below 2^53: exact as Lua's
-- numbers); the other counters are added to in place (``HINCRBY``: exact integers).
local function apply_change(s, u, d, c, f, writes)
  local function put(name, value)
    f[name] = value
    writes[#writes + 1] = name
    writes[#writes + 1] = value
  end
  if c[1] ~= '' and not f.created then put('created', c[1]) end
  if c[2] ~= '' then put('updated', c[2]) end
  if c[3] ~= 0 then put('messages', string.format('%d', tonumber(f.messages or '0') + c[3])) end
  if c[4] ~= 0 then put('turns', string.format('%d', tonumber(f.turns or '0') + c[4])) end
  local usage = c[5]
  add_int(s, 'u_in', usage[1])
  add_int(s, 'u_out', usage[2])
  add_int(s, 'u_cr', usage[3])
  add_int(s, 'u_cw', usage[4])
  add_cost(s, 'u_cost', usage[5])
  for _, r in ipairs(c[6]) do
    local base = r[1] .. '\0' .. r[2] .. '\0'
    redis.call('HINCRBY', u, base .. 'c', r[3])
    redis.call('HINCRBY', u, base .. 'i', r[4])
    redis.call('HINCRBY', u, base .. 'o', r[5])
    redis.call('HINCRBY', u, base .. 'r', r[6])
    redis.call('HINCRBY', u, base .. 'w', r[7])
    add_cost(u, base .. '$', r[8])
  end
  if #c[7] > 0 then
    local agents = unpacked(f.agents)
    local known = {}
    for _, a in ipairs(agents) do known[a] = true end
    local grew = false
    for _, a in ipairs(c[7]) do
      if not known[a] then agents[#agents + 1] = a; known[a] = true; grew = true end
    end
    if grew then put('agents', cmsgpack.pack(agents)) end
  end
  if (not f.user or f.user == '') and c[8] ~= '' then put('user', c[8]) end
  if (not f.title or f.title == '') and c[9] ~= '' then put('title', c[9]) end
  if c[10] ~= '' and f.status ~= 'shredded' and f.status ~= 'archived' then
    put('status', c[10])
  end
  if tonumber(c[11]) > tonumber(f.compacted or '0') then put('compacted', c[11]) end
  if #c[12] > 0 then
    local rewound = unpacked(redis.call('HGET', s, 'rewound'))
    for _, r in ipairs(c[12]) do rewound[#rewound + 1] = r end
    put('rewound', cmsgpack.pack(rewound))
  end
  for _, doc in ipairs(c[13]) do
    redis.call('HSET', d, doc[1], cmsgpack.pack({doc[2], doc[3]}))
  end
end
"""

_APPEND_BODY: Final = r"""
-- KEYS: s (session hash), e (stream), i (event ids of a session key layout 2 made), d
-- (documents), u (usage rows).
-- ARGV: expiry ms (0: none), id window, catalog prefix ('' : the caller indexes), catalog
-- kept ('': no; 'r': rows; 'rd': rows and search documents), session id (the five the same
-- for every append of a session: packed once, see server.evalsha_command), after, life (''
-- none read), new life, marker seq (0: none), change (msgpack, '' none), count, then per
-- event: id, line, time (us).
-- Returns '1 <base> <life>' stored, when the script indexes; {1, base, life, row or '',
-- mark} stored, for a caller that indexes (row: packed when the change was applied; mark:
-- '', 'r' rows behind or 'd' documents behind); {0, last, life} nothing written (another
-- seq or life); {-1, last, life} an id of the batch is stored within the window.
local s = KEYS[1]
local n = tonumber(ARGV[11])
-- One read: the bookkeeping (and the row, for a change), where the ids are (``ids``: 's',
-- in this hash as '#<id>' fields; absent, in a session layout 2 made: the ``i`` hash), and
-- the batch's ids as this hash would hold them. Past ``ID_READ`` ids, the rest are read apart
-- (an unpacked list is bounded).
local want
if ARGV[10] ~= '' then
  want = {'last', 'life', 'size', 'v', 'created', 'cs', 'user', 'title', 'status', 'compacted',
          'agents', 'tenant', 'tags', 'messages', 'turns', 'ix', 'ids'}
else  -- no catalog change: the fields the append itself keeps
  want = {'last', 'life', 'size', 'v', 'created', 'cs', 'ids'}
end
local nf = #want
local ID_READ = 1000
for j = 0, math.min(n, ID_READ) - 1 do want[nf + j + 1] = '#' .. ARGV[12 + 3 * j] end
local cur = redis.call('HMGET', s, unpack(want))
local last = tonumber(cur[1] or '0')
local life = cur[2]
if ARGV[7] == '' then
  if life then return {0, last, life} end
elseif life ~= ARGV[7] then
  return {0, last, life or ''}
end
local after = tonumber(ARGV[6])
if last ~= after then return {0, last, life or ''} end
-- Everything decoded before the first write: a script that fails midway keeps what it wrote.
local change = nil
if ARGV[10] ~= '' then change = cmsgpack.unpack(ARGV[10]) end
local floor = last - tonumber(ARGV[2])
local fields = {}
local own = not life or cur[nf] == 's'  -- the ids in this hash
if own then
  -- An id stored within the window writes nothing; one stored before it (or twice in the
  -- batch) is given its new seq with the others, in the one HSET below.
  for start = 0, n - 1, ID_READ do
    local seen = cur
    local at = nf + 1 - start
    if start > 0 then
      local more = {}
      for j = start, math.min(n, start + ID_READ) - 1 do
        more[#more + 1] = '#' .. ARGV[12 + 3 * j]
      end
      seen = redis.call('HMGET', s, unpack(more))
      at = 1 - start
    end
    for j = start, math.min(n, start + ID_READ) - 1 do
      local got = seen[at + j]
      if got and ARGV[12 + 3 * j] ~= '' then
        local seq = tonumber(got)
        if seq > floor and seq <= last then return {-1, last, life or ''} end
      end
    end
  end
else
  -- A session key layout 2 made: each id taken with HSETNX in ``i`` (one command for a new
  -- id); one already stored within the window undoes the ids taken and writes nothing; one
  -- stored before the window (or twice in the batch) is given its new seq once every id was
  -- checked.
  local taken, stale = {}, {}
  for j = 0, n - 1 do
    local id = ARGV[12 + 3 * j]
    if id ~= '' then
      local seq = string.format('%d', last + j + 1)
      if redis.call('HSETNX', KEYS[3], id, seq) == 1 then
        taken[#taken + 1] = id
      else
        local seen = tonumber(redis.call('HGET', KEYS[3], id))
        if seen > floor and seen <= last then
          for _, taken_id in ipairs(taken) do redis.call('HDEL', KEYS[3], taken_id) end
          return {-1, last, life or ''}
        end
        stale[#stale + 1] = id; stale[#stale + 1] = seq
      end
    end
  end
  for i = 1, #stale, 2 do redis.call('HSET', KEYS[3], stale[i], stale[i + 1]) end
end
if not life then
  life = ARGV[8]
  fields = {'life', life, 'sid', ARGV[5], 'ids', 's'}
end
local size = tonumber(cur[3] or '0')
for j = 0, n - 1 do
  local line = ARGV[13 + 3 * j]
  redis.call('XADD', KEYS[2], string.format('%d', last + j + 1) .. '-0', 'e', line)
  size = size + #line
end
local top = string.format('%d', last + n)
local v = string.format('%d', tonumber(cur[4] or '0') + 1)
local created = cur[5] or ARGV[14]
local updated = ARGV[11 + 3 * n]
fields[#fields + 1] = 'last'; fields[#fields + 1] = top
fields[#fields + 1] = 'updated'; fields[#fields + 1] = updated
fields[#fields + 1] = 'size'; fields[#fields + 1] = string.format('%d', size)
fields[#fields + 1] = 'v'; fields[#fields + 1] = v
if not cur[5] then fields[#fields + 1] = 'created'; fields[#fields + 1] = created end
if ARGV[9] ~= '0' then fields[#fields + 1] = 'marker'; fields[#fields + 1] = ARGV[9] end
-- The catalog row holds the events up to ``cs`` (absent: every event before this append, as
-- an older writer kept it). A change is applied only where it continues the row; else, and
-- for an append without one (inside a turn), the session is marked: its row is caught up from
-- its log before the catalog is read. Search documents are never written here: the session
-- is marked, and its documents are indexed from its log before the next search.
local mark = ''
local marked = false
local kept = ARGV[4]
local C = ARGV[3]
if kept ~= '' then
  local cs = tonumber(cur[6] or cur[1] or '0')
  if change and tonumber(change[14]) == cs + 1 then
    fields[#fields + 1] = 'cs'; fields[#fields + 1] = top
    if kept == 'rd' then mark = 'd' end
  else
    change = nil
    -- On one server a row behind its log is marked (the append that left it behind marked
    -- it in its own run, and a mark goes only with the row caught up): no mark again, and
    -- its place in the list order is left (a plain list places marked sessions by their
    -- hashes; a catch-up moves it).
    marked = C ~= '' and cs < last
    if not marked then mark = 'r' end
    if not cur[6] then fields[#fields + 1] = 'cs'; fields[#fields + 1] = string.format('%d', cs) end
  end
end
local row = ''
local same = false
if change then  -- the row's fields as read, then as changed: one HSET, no read after it
  local f = {created = created, updated = updated, user = cur[7] or nil, title = cur[8] or nil,
             status = cur[9] or nil, compacted = cur[10] or nil, agents = cur[11] or nil,
             messages = cur[14] or nil, turns = cur[15] or nil}
  apply_change(s, KEYS[5], KEYS[4], change, f, fields)
  row = {v, f.status or 'idle', f.user or '', cur[12] or '', unpacked(cur[13]),
         unpacked(f.agents), f.updated, f.created}
  -- Indexed by an append before (``ix``) under the same memberships (status, user, agents;
  -- a change sets neither tenant nor tags): only the list order moves below.
  same = C ~= '' and cur[16] and f.status == cur[9] and f.user == cur[7]
         and f.agents == cur[11]
  if C ~= '' and not same then fields[#fields + 1] = 'ix'; fields[#fields + 1] = '1' end
end
if own then  -- the batch's ids, with the bookkeeping (past ID_READ of them, apart)
  local j = 0
  while j < n do
    local upto = math.min(n, j + ID_READ)
    local put = fields
    if j > 0 then put = {} end
    for k = j, upto - 1 do
      local id = ARGV[12 + 3 * k]
      if id ~= '' then
        put[#put + 1] = '#' .. id; put[#put + 1] = string.format('%d', last + k + 1)
      end
    end
    if j > 0 and #put > 0 then redis.call('HSET', s, unpack(put)) end
    j = upto
  end
end
redis.call('HSET', s, unpack(fields))
if C ~= '' then
  if same then  -- the indexed row's version may stay behind the row's: only newer ones pass
    redis.call('ZADD', C .. 'z:u', updated, ARGV[5])
  elseif change then
    index_row(C, ARGV[5], row, {})
  end
  if change then
    -- The row holds every event: a rows-behind mark, left by appends inside the turn, goes.
    if cur[6] and tonumber(cur[6]) < last then redis.call('HDEL', C .. 'm:r', ARGV[5]) end
  else
    if not marked then redis.call('ZADD', C .. 'z:u', updated, ARGV[5]) end
    if not cur[5] then  -- a new session (reindex puts back what the index lost)
      redis.call('ZADD', C .. 'z:c', 'NX', created, ARGV[5])
      redis.call('ZADD', C .. 'z:i', 'NX', 0, ARGV[5])
    end
  end
  if mark ~= '' then redis.call('HSET', C .. 'm:' .. mark, ARGV[5], top) end
end
local ttl = tonumber(ARGV[1])
if ttl > 0 then
  for k = 1, 5 do
    if k ~= 3 or not own then redis.call('PEXPIRE', KEYS[k], ttl) end
  end
end
if C ~= '' then return '1 ' .. last .. ' ' .. life end  -- one string: the least to parse
if row == '' then return {1, last, life, '', mark} end
return {1, last, life, cmsgpack.pack(row), mark}
"""

APPEND: Final = _INDEX_FUNCTIONS + _ROW_FUNCTIONS + _APPEND_BODY
"""The append with a catalog change (it applies the change to the row and, on one
server, to the store-wide index)."""

APPEND_PLAIN: Final = "local apply_change, index_row, unpacked = nil, nil, nil\n" + _APPEND_BODY
"""The append without a change: the same script without the catalog's functions, whose
definitions alone cost the server a few microseconds per run."""

INDEX_ROW: Final = (
    _INDEX_FUNCTIONS
    + r"""
-- KEYS: the catalog's x hash. ARGV: catalog prefix, session id, row (msgpack, '' none),
-- words to add (msgpack: word, seq, score), whether to remove the row instead ('1'), words
-- to remove (msgpack: word, seq), a mark to set ('r' rows behind, 'd' documents behind, ''
-- none) and its seq, the list orders' times without a row (updated, '' none; created),
-- marks whose seq is at most a seq to drop ('', 'r', 'd' or 'rd') and that seq, the seq the
-- documents are indexed through ('' unchanged), the session's hash ('' not given: on a
-- Cluster, another slot), whose words are not added once it is gone or shredded.
local C, sid = ARGV[1], ARGV[2]
if ARGV[5] == '1' then
  unindex_row(C, sid, cmsgpack.unpack(ARGV[6]))
  redis.call('HDEL', C .. 'm:r', sid)
  redis.call('HDEL', C .. 'm:d', sid)
  redis.call('HDEL', C .. 'di', sid)
  return 1
end
remove_words(C, sid, cmsgpack.unpack(ARGV[6]))
local words = cmsgpack.unpack(ARGV[4])
if ARGV[14] ~= '' and #words > 0 then
  local f = redis.call('HMGET', ARGV[14], 'life', 'status')
  if not f[1] or f[2] == 'shredded' then words = {} end
end
add_words(C, sid, words)
local done = 0
if ARGV[3] ~= '' then
  done = index_row(C, sid, cmsgpack.unpack(ARGV[3]), {})
elseif ARGV[9] ~= '' then
  redis.call('ZADD', C .. 'z:u', ARGV[9], sid)
  redis.call('ZADD', C .. 'z:c', 'NX', ARGV[10], sid)
  redis.call('ZADD', C .. 'z:i', 'NX', 0, sid)
end
if ARGV[7] ~= '' then
  local key = C .. 'm:' .. ARGV[7]
  local old = redis.call('HGET', key, sid)
  if not old or tonumber(old) < tonumber(ARGV[8]) then redis.call('HSET', key, sid, ARGV[8]) end
end
if ARGV[13] ~= '' then redis.call('HSET', C .. 'di', sid, ARGV[13]) end
for kind in string.gmatch(ARGV[11], '.') do
  local key = C .. 'm:' .. kind
  local old = redis.call('HGET', key, sid)
  if old and tonumber(old) <= tonumber(ARGV[12]) then redis.call('HDEL', key, sid) end
end
return done
"""
)

CATCH_UP: Final = (
    _ROW_FUNCTIONS
    + r"""
-- KEYS: s, d, u. ARGV: the seq the row holds as read (``cs``), change (msgpack), the seq the
-- change runs to. Applies the change of the events after the row's seq, when the row still
-- holds that seq. Returns {0} (the row moved meanwhile, or no session), else
-- {1, row (msgpack), the session's latest seq} (above the change's: appended meanwhile, the
-- row still behind).
local s = KEYS[1]
local f = redis.call('HMGET', s, 'life', 'cs', 'last')
if not f[1] or tonumber(f[2] or f[3] or '0') ~= tonumber(ARGV[1]) then return {0} end
local change = cmsgpack.unpack(ARGV[2])
local writes = {'cs', ARGV[3]}
apply_change(s, KEYS[3], KEYS[2], change, read_row(s), writes)
redis.call('HSET', s, unpack(writes))
redis.call('HINCRBY', s, 'v', 1)
return {1, cmsgpack.pack(row_state(s)), f[3] or '0'}
"""
)

DOCUMENTS: Final = r"""
-- KEYS: s, d. ARGV: seq, packed [role, text], ... Writes a session's search documents (none
-- once the session is gone or shredded). Returns 1 written, 0 not.
local f = redis.call('HMGET', KEYS[1], 'life', 'status')
if not f[1] or f[2] == 'shredded' then return 0 end
if #ARGV > 0 then redis.call('HSET', KEYS[2], unpack(ARGV)) end
return 1
"""

_JOINED: Final = r"""
-- Stream entries as three strings, so that the client parses three bulk replies, not an array
-- per entry: the entry ids joined by spaces, the lines joined by line breaks and the lines'
-- lengths joined by spaces (which locate each line even when one holds a line break).
local function joined(entries)
  local ids, lines, sizes = {}, {}, {}
  for i, entry in ipairs(entries) do
    ids[i] = entry[1]
    lines[i] = entry[2][2]
    sizes[i] = #lines[i]
  end
  return {table.concat(ids, ' '), table.concat(lines, '\n'), table.concat(sizes, ' ')}
end
"""

OPEN: Final = (
    _JOINED
    + r"""
-- KEYS: s, e. ARGV: 'tail' or 'window', the tail's size.
-- Returns {life or '', last, entries (joined, oldest first)}.
local f = redis.call('HMGET', KEYS[1], 'life', 'last', 'marker')
if not f[1] then return {'', 0, {'', '', ''}} end
local entries
if ARGV[1] == 'tail' then
  local newest = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', ARGV[2])
  entries = {}
  for i = #newest, 1, -1 do entries[#entries + 1] = newest[i] end
else
  entries = redis.call('XRANGE', KEYS[2], (f[3] or '1') .. '-0', '+')
end
return {f[1], tonumber(f[2] or '0'), joined(entries)}
"""
)

REFRESH: Final = (
    _JOINED
    + r"""
-- KEYS: s, e. ARGV: the seq seen. Returns {life or '', last, entries after it (joined)}.
local f = redis.call('HMGET', KEYS[1], 'life', 'last')
if not f[1] then return {'', 0, {'', '', ''}} end
local last = tonumber(f[2] or '0')
local entries = {}
if last > tonumber(ARGV[1]) then
  entries = redis.call('XRANGE', KEYS[2], string.format('%d', tonumber(ARGV[1]) + 1) .. '-0', '+')
end
return {f[1], last, joined(entries)}
"""
)

DELETE: Final = r"""
-- KEYS: s, e, i, d, u, the lock. Returns {had events (1/0), documents (flat seq, packed)}.
local last = tonumber(redis.call('HGET', KEYS[1], 'last') or '0')
local docs = redis.call('HGETALL', KEYS[4])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
if last > 0 then return {1, docs} end
return {0, docs}
"""

SET_FIELDS: Final = (
    _ROW_FUNCTIONS
    + r"""
-- KEYS: s, d. ARGV: title ('\0': unchanged), tags (msgpack, '\0': unchanged), user, tenant
-- ('\0': unchanged), shred ('1': clear them and drop the documents).
-- Returns {0} without a row, else {1, row (msgpack), documents dropped (flat)}.
local s = KEYS[1]
if redis.call('HEXISTS', s, 'life') == 0 or redis.call('HGET', s, 'created') == false then
  return {0}
end
local dropped = {}
if ARGV[5] == '1' then
  redis.call('HSET', s, 'status', 'shredded', 'title', '', 'title_set', '0', 'user', '',
             'tenant', '', 'tags', cmsgpack.pack({}))
  dropped = redis.call('HGETALL', KEYS[2])
  redis.call('DEL', KEYS[2])
else
  if ARGV[1] ~= '\0' then
    local set = '0'
    if ARGV[1] ~= '' then set = '1' end
    redis.call('HSET', s, 'title', ARGV[1], 'title_set', set)
  end
  if ARGV[2] ~= '\0' then redis.call('HSET', s, 'tags', ARGV[2]) end
  if ARGV[3] ~= '\0' then redis.call('HSET', s, 'user', ARGV[3]) end
  if ARGV[4] ~= '\0' then redis.call('HSET', s, 'tenant', ARGV[4]) end
end
redis.call('HINCRBY', s, 'v', 1)
return {1, cmsgpack.pack(row_state(s)), dropped}
"""
)

REBUILD: Final = (
    _ROW_FUNCTIONS
    + r"""
-- KEYS: s, d, u. ARGV: change (msgpack, '' none), title, title set, tags (msgpack), user,
-- tenant, the seq the change runs to. Replaces the row fields, usage rows and documents.
-- Returns {0} without a session, else {1, row (msgpack), old documents (flat), latest seq}.
local s = KEYS[1]
if redis.call('HEXISTS', s, 'life') == 0 then return {0} end
local change = nil
if ARGV[1] ~= '' then change = cmsgpack.unpack(ARGV[1]) end  -- decoded before any write
local old = redis.call('HGETALL', KEYS[2])
redis.call('DEL', KEYS[2], KEYS[3])
redis.call('HDEL', s, 'messages', 'turns', 'u_in', 'u_out', 'u_cr', 'u_cw', 'u_cost',
           'agents', 'user', 'title', 'title_set', 'status', 'compacted', 'rewound', 'tags',
           'tenant', 'ix')
redis.call('HSET', s, 'cs', ARGV[7])
if change then
  local writes = {}
  apply_change(s, KEYS[3], KEYS[2], change, read_row(s), writes)
  if #writes > 0 then redis.call('HSET', s, unpack(writes)) end
end
if ARGV[2] ~= '' then redis.call('HSET', s, 'title', ARGV[2], 'title_set', ARGV[3]) end
redis.call('HSET', s, 'tags', ARGV[4])
if ARGV[5] ~= '' then redis.call('HSET', s, 'user', ARGV[5]) end
if ARGV[6] ~= '' then redis.call('HSET', s, 'tenant', ARGV[6]) end
redis.call('HINCRBY', s, 'v', 1)
return {1, cmsgpack.pack(row_state(s)), old, redis.call('HGET', s, 'last') or '0'}
"""
)

QUERY: Final = r"""
-- KEYS: the order's sorted set. ARGV: catalog prefix, order ('id' or a time order), cursor
-- score ('' none), cursor id, limit, then the filter: groups of set keys (a group: count,
-- keys; a session must be in one set of every group). Returns ids in order (a time order:
-- id, score, id, score...). Ties of a time
-- are ordered by id, descending, as the server orders members (bytes): no string is compared
-- here (Lua would compare by the server's locale).
local C, order, score, sid, limit = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local source = KEYS[1]
local temp = {}
local i = 6
local inputs = {source}
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  if n == 1 then
    inputs[#inputs + 1] = ARGV[i + 1]
  else
    local g = C .. 'tmp:g' .. #inputs
    local keys = {}
    for j = 1, n do keys[j] = ARGV[i + j] end
    redis.call('SUNIONSTORE', g, unpack(keys))
    temp[#temp + 1] = g
    inputs[#inputs + 1] = g
  end
  i = i + n + 1
end
if #inputs > 1 then
  local q = C .. 'tmp:q'
  local weights = {}
  for j = 1, #inputs do weights[j] = 0 end
  weights[1] = 1
  temp[#temp + 1] = q
  local args = {q, #inputs}
  for _, k in ipairs(inputs) do args[#args + 1] = k end
  args[#args + 1] = 'WEIGHTS'
  for _, w in ipairs(weights) do args[#args + 1] = w end
  redis.call('ZINTERSTORE', unpack(args))
  source = q
end
local out = {}
if order == 'id' then
  local lo = '-'
  if score ~= '' then lo = '(' .. sid end
  out = redis.call('ZRANGEBYLEX', source, lo, '+', 'LIMIT', 0, limit)
elseif score == '' then
  out = redis.call('ZREVRANGE', source, 0, limit - 1, 'WITHSCORES')
else
  local here = redis.call('ZSCORE', source, sid)
  if here and tonumber(here) == tonumber(score) then
    local rank = redis.call('ZREVRANK', source, sid)
    out = redis.call('ZREVRANGE', source, rank + 1, rank + limit, 'WITHSCORES')
  else
    local ties = redis.call('ZREVRANGEBYSCORE', source, score, score)
    local greater = 0
    if #ties > 0 then
      local t = C .. 'tmp:t'
      for _, m in ipairs(ties) do redis.call('ZADD', t, 0, m) end
      redis.call('ZADD', t, 0, sid)
      greater = redis.call('ZREVRANK', t, sid)
      redis.call('DEL', t)
    end
    out = redis.call('ZREVRANGEBYSCORE', source, score, '-inf', 'WITHSCORES', 'LIMIT', greater,
                     limit)
  end
end
if #temp > 0 then redis.call('DEL', unpack(temp)) end
return out
"""

SEARCH: Final = r"""
-- KEYS: the first word's sorted set. ARGV: catalog prefix, lowest score ('-inf' or a number),
-- offset, count, then the words' sorted sets. Returns the documents holding every word,
-- ``member, score`` flat, by score (minus the summed ranks) then member, from the offset:
-- one word's set is read as it is, several are intersected (summing the scores) into a
-- temporary key deleted before the script returns.
local source = KEYS[1]
local n = #ARGV - 4
if n > 1 then
  source = ARGV[1] .. 'tmp:s'
  local args = {source, n}
  for j = 5, #ARGV do args[#args + 1] = ARGV[j] end
  redis.call('ZINTERSTORE', unpack(args))
end
local out = redis.call('ZRANGEBYSCORE', source, ARGV[2], '+inf', 'WITHSCORES', 'LIMIT', ARGV[3],
                       ARGV[4])
if n > 1 then redis.call('DEL', source) end
return out
"""

CAS: Final = r"""
-- KEYS: the kind's hash, the kinds set. ARGV: kind, key, expected ('' + flag), new.
-- ARGV[3]: '1' when an entry is expected, ARGV[4] its value; ARGV[5]: '1' to set, ARGV[6].
local cur = redis.call('HGET', KEYS[1], ARGV[2])
if ARGV[3] == '1' then
  if cur ~= ARGV[4] then return 0 end
elseif cur then
  return 0
end
if ARGV[5] == '1' then
  redis.call('HSET', KEYS[1], ARGV[2], ARGV[6])
  redis.call('SADD', KEYS[2], ARGV[1])
else
  redis.call('HDEL', KEYS[1], ARGV[2])
end
return 1
"""

META_ADD: Final = r"""
-- KEYS: the kind's hash, the kinds set. ARGV: kind, key, value. Returns the value stored.
if redis.call('HSETNX', KEYS[1], ARGV[2], ARGV[3]) == 1 then
  redis.call('SADD', KEYS[2], ARGV[1])
  return ARGV[3]
end
return redis.call('HGET', KEYS[1], ARGV[2])
"""

LOCK: Final = r"""
-- KEYS: the lock. ARGV: token, expiry ms. Taken (1) when free or already ours (a retried try).
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]); return 1 end
if cur then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""

RENEW: Final = r"""
-- KEYS: the lock. ARGV: token, expiry ms. 1 while ours (expiry pushed back), 0 when lost.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

UNLOCK: Final = r"""
-- KEYS: the lock. ARGV: token. Deletes the lock only while it is ours.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
