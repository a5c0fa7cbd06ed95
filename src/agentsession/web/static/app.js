// agentsession serve: the sessions page and the transcript page.
//
// Safety: every stored text reaches the DOM through textContent or an attribute set by this
// script; the only HTML inserted is the server's Markdown rendering (markdown-it-py with raw
// HTML off and links restricted to http(s)/mailto). Links this script builds always start with
// "session?id=" (ids percent-encoded), so a stored id cannot become a javascript: URL. The
// page's Content-Security-Policy forbids inline scripts and styles besides.
"use strict";

(function () {
  // -- helpers ---------------------------------------------------------------------------------

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function svg(tag, attrs) {
    const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
    return node;
  }

  function append(parent, ...children) {
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      parent.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return parent;
  }

  function sessionHref(id, seq) {
    return "session?id=" + encodeURIComponent(id) + (seq ? "#seq-" + Number(seq) : "");
  }

  function sessionLink(id, seq) {
    const a = el("a", "mono", id);
    a.href = sessionHref(id, seq);
    return a;
  }

  function fmtNum(n) {
    return n === null || n === undefined ? "?" : Number(n).toLocaleString("en-US");
  }

  function fmtTime(iso) {
    if (!iso) return "-";
    const d = new Date(iso);
    if (isNaN(d.getTime())) return "-";
    return d.toISOString().replace("T", " ").slice(0, 19);
  }

  function fmtSize(n) {
    if (!n) return "-";
    let value = n;
    for (const unit of ["B", "KB", "MB"]) {
      if (value < 1024) return unit === "B" ? value + " B" : value.toFixed(1) + " " + unit;
      value /= 1024;
    }
    return value.toFixed(1) + " GB";
  }

  function fmtMs(ms) {
    if (ms < 1000) return Math.round(ms) + " ms";
    if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
    return (ms / 60000).toFixed(1) + " min";
  }

  function plural(n, word) {
    return fmtNum(n) + " " + word + (n === 1 ? "" : "s");
  }

  async function getJSON(url) {
    const response = await fetch(url, {
      credentials: "same-origin",
      headers: { Accept: "application/json" },
    });
    if (!response.ok) {
      let message = response.status + " " + response.statusText;
      try {
        const body = await response.json();
        if (body && body.error) message = String(body.error);
      } catch (_) { /* not JSON */ }
      throw new Error(message);
    }
    return response.json();
  }

  // getJSON, or null once the error is shown.
  async function getJSONOrShow(url) {
    try {
      return await getJSON(url);
    } catch (error) {
      showError(error);
      return null;
    }
  }

  function showError(error) {
    const box = document.getElementById("error");
    if (!box) return;
    box.textContent = String(error && error.message ? error.message : error);
    box.hidden = false;
  }

  function badge(kind, text, title) {
    const b = el("span", "badge " + kind, text);
    if (title) b.title = title;
    return b;
  }

  // The token arrives once in the address (?token=...); the server answered with a cookie, so
  // the address bar and the history need not keep it.
  (function dropTokenFromAddress() {
    const params = new URLSearchParams(location.search);
    if (!params.has("token")) return;
    params.delete("token");
    const query = params.toString();
    history.replaceState(null, "", location.pathname + (query ? "?" + query : "") + location.hash);
  })();

  // -- the sessions page -----------------------------------------------------------------------

  // A store that keeps a catalog (api/store says so) is listed from it: pages by cursor ("more
  // sessions" appends the next), filters by status, tag, tenant, user and agent, and a search
  // box when it keeps a search index. Any other store keeps the listing's offset pages.
  function sessionsPage() {
    const params = new URLSearchParams(location.search);
    const state = {
      q: params.get("q") || "",
      agent: params.get("agent") || "",
      offset: Math.max(0, parseInt(params.get("offset") || "0", 10) || 0),
      limit: 50,
      status: params.get("status") || "",
      tag: params.get("tag") || "",
      tenant: params.get("tenant") || "",
      user: params.get("user") || "",
      search: params.get("search") || "",
    };
    const inputs = {};
    for (const name of ["q", "agent", "status", "tag", "tenant", "user", "search"]) {
      inputs[name] = document.getElementById(name);
      inputs[name].value = state[name];
    }
    const body = document.getElementById("session-rows");
    const table = document.getElementById("sessions");
    const prev = document.getElementById("prev");
    const next = document.getElementById("next");
    const pagerBox = document.getElementById("pager");
    const moreBox = document.getElementById("more-box");
    const hitsBox = document.getElementById("hits-box");
    const hitList = document.getElementById("hits");
    const moreHits = document.getElementById("more-hits");
    let features = { catalog: false, searchable: false };
    let generation = 0;
    let searchGeneration = 0;
    let timer = 0;
    let cursor = null;      // the catalog's next page
    let shown = 0;          // sessions shown from the catalog
    let hitsCursor = null;  // the search's next page
    let hitsShown = 0;

    function remember() {
      const p = new URLSearchParams();
      for (const name of ["q", "agent", "status", "tag", "tenant", "user", "search"]) {
        if (state[name]) p.set(name, state[name]);
      }
      if (state.offset && !features.catalog) p.set("offset", String(state.offset));
      const query = p.toString();
      history.replaceState(null, "", location.pathname + (query ? "?" + query : ""));
    }

    // The catalog filters as query parameters (a tag box of "a, b" asks for both tags).
    function filterParams() {
      const p = new URLSearchParams();
      for (const name of ["status", "tenant", "user", "agent"]) if (state[name]) p.set(name, state[name]);
      for (const tag of state.tag.split(",")) if (tag.trim()) p.append("tag", tag.trim());
      return p;
    }

    // One row of the table; returns its cells that the badges fill in.
    function addSession(s, encrypted) {
      const tr = el("tr");
      tr.dataset.sessionId = s.id;
      const id = el("td", "id");
      id.appendChild(sessionLink(s.id));
      if (s.title) id.appendChild(el("span", "title", s.title));
      const turns = el("td", "num turns", s.turns === undefined ? "…" : fmtNum(s.turns));
      const status = el("td", "status");
      if (encrypted) status.appendChild(badge("encrypted", "encrypted"));
      if (s.status && s.status !== "idle") {
        status.appendChild(badge("status-" + s.status, s.status.replace("_", " ")));
      }
      for (const tag of s.tags || []) status.appendChild(badge("tag", tag, "tag"));
      status.appendChild(badge("pending", "…"));
      append(
        tr, id, el("td", "num", fmtNum(s.events)), turns, el("td", "mono", fmtTime(s.last_activity)),
        el("td", "num", fmtSize(s.size)), status,
      );
      body.appendChild(tr);
      return { turns, status };
    }

    async function load() {
      if (features.catalog) return loadCatalog(false);
      const mine = ++generation;
      remember();
      const p = new URLSearchParams({
        q: state.q, agent: state.agent, offset: String(state.offset), limit: String(state.limit),
      });
      const page = await getJSONOrShow("api/sessions?" + p.toString());
      if (!page || mine !== generation) return;
      document.getElementById("error").hidden = true;
      document.getElementById("store").textContent = page.store;
      body.replaceChildren();
      const cells = new Map();
      for (const s of page.sessions) cells.set(s.id, addSession(s, page.encrypted));
      document.getElementById("empty").hidden = page.sessions.length > 0;
      const first = page.sessions.length ? page.offset + 1 : 0;
      const last = page.offset + page.sessions.length;
      const of = page.total === null ? "" : " of " + fmtNum(page.total);
      document.getElementById("page").textContent = fmtNum(first) + "–" + fmtNum(last) + of;
      document.getElementById("count").textContent =
        page.total === null ? "" : plural(page.total, "session");
      prev.disabled = page.offset === 0;
      next.disabled = !page.more;
      if (page.sessions.length) loadBadges(mine, cells);
    }

    // The catalog's first page (as many sessions as are shown, when the list is reloaded),
    // or with `more` the page after the last one shown.
    async function loadCatalog(more) {
      const mine = more ? generation : ++generation;
      remember();
      const p = filterParams();
      if (state.q) p.set("q", state.q);
      if (more) p.set("cursor", cursor);
      p.set("limit", String(more ? state.limit : Math.min(500, Math.max(state.limit, shown))));
      const page = await getJSONOrShow("api/catalog?" + p.toString());
      if (!page || mine !== generation) return;
      document.getElementById("error").hidden = true;
      document.getElementById("store").textContent = page.store;
      if (!more) {
        body.replaceChildren();
        shown = 0;
      }
      const cells = new Map();
      for (const s of page.sessions) cells.set(s.id, addSession(s, page.encrypted));
      shown += page.sessions.length;
      cursor = page.next_cursor;
      document.getElementById("empty").hidden = shown > 0;
      document.getElementById("count").textContent =
        plural(shown, "session") + (cursor ? " shown, more below" : "");
      moreBox.hidden = !cursor || !hitsBox.hidden;
      if (page.sessions.length) loadBadges(mine, cells);
    }

    // Badges need each session's events: asked for the visible sessions only, after the list.
    async function loadBadges(mine, cells) {
      const p = new URLSearchParams();
      for (const id of cells.keys()) p.append("id", id);
      const found = await getJSONOrShow("api/badges?" + p.toString());
      if (!found || mine !== generation) return;
      for (const [id, cell] of cells) {
        const b = found[id];
        cell.status.querySelectorAll(".pending").forEach((n) => n.remove());
        if (!b) { if (cell.turns.textContent === "…") cell.turns.textContent = "-"; continue; }
        cell.turns.textContent = fmtNum(b.turns);
        if (b.incomplete) cell.status.appendChild(badge("incomplete", "incomplete turn",
          plural(b.incomplete, "turn") + " a crash left open: agentsession repair closes it"));
        if (b.recovered) cell.status.appendChild(badge("recovered", "recovered",
          plural(b.recovered, "repair") + " of a crashed turn"));
        if (b.compacted) cell.status.appendChild(badge("compacted", "compacted",
          plural(b.compacted, "compaction marker")));
        if (b.children) cell.status.appendChild(badge("children", plural(b.children, "child"),
          "subagent sessions forked from it"));
        if (b.parent) cell.status.appendChild(badge("child", "child of " + b.parent));
      }
    }

    // -- search ------------------------------------------------------------------------------

    const WORD = /[\p{L}\p{N}_]+/gu;
    // A word as the search compares it (as agentsession.listing.words does: accents removed,
    // case folded).
    function norm(word) {
      return word.normalize("NFKD").replace(/\p{M}/gu, "").toLowerCase().normalize("NFKC");
    }

    // A snippet's text with each "[word]" of the query in a <mark> (brackets the stored text
    // holds around other words stay as they are); text nodes only, never HTML.
    function snippetNodes(snippet, words) {
      const box = el("div", "snippet");
      const mark = /(?<![\p{L}\p{N}_])\[([\p{L}\p{N}_]+)\](?![\p{L}\p{N}_])/gu;
      let pos = 0;
      for (const m of snippet.matchAll(mark)) {
        if (!words.has(norm(m[1]))) continue;
        box.appendChild(document.createTextNode(snippet.slice(pos, m.index)));
        box.appendChild(el("mark", "", m[1]));
        pos = m.index + m[0].length;
      }
      box.appendChild(document.createTextNode(snippet.slice(pos)));
      return box;
    }

    function hitItem(hit, words) {
      const li = el("li", "hit");
      li.dataset.sessionId = hit.session_id;
      li.dataset.seq = String(hit.seq);
      const link = sessionLink(hit.session_id, hit.seq);
      link.title = "the event in its session";
      append(li, link, el("span", "at", "seq " + hit.seq), " ", badge("role", hit.role));
      if (hit.rewound) li.appendChild(badge("compacted", "rewound", "a rewind went back past it"));
      if (hit.compacted) li.appendChild(badge("compacted", "compacted",
        "before the session's latest compaction: the model sees its summary"));
      li.appendChild(snippetNodes(hit.snippet || "", words));
      return li;
    }

    function showList(listShown) {
      hitsBox.hidden = listShown;
      table.hidden = !listShown;
      document.getElementById("empty").hidden = !listShown || shown > 0 || !features.catalog;
      pagerBox.hidden = !listShown || features.catalog;
      moreBox.hidden = !listShown || !cursor;
    }

    async function runSearch(more) {
      const text = state.search.trim();
      remember();
      if (!text) {
        ++searchGeneration;
        document.getElementById("hits-count").textContent = "";
        showList(true);
        return;
      }
      const mine = more ? searchGeneration : ++searchGeneration;
      const p = filterParams();
      p.set("q", text);
      if (more) p.set("cursor", hitsCursor);
      const page = await getJSONOrShow("api/search?" + p.toString());
      if (!page || mine !== searchGeneration) return;
      document.getElementById("error").hidden = true;
      const words = new Set((text.match(WORD) || []).map(norm));
      if (!more) {
        hitList.replaceChildren();
        hitsShown = 0;
      }
      for (const hit of page.hits) hitList.appendChild(hitItem(hit, words));
      hitsShown += page.hits.length;
      hitsCursor = page.next_cursor;
      moreHits.hidden = !hitsCursor;
      document.getElementById("no-hits").hidden = hitsShown > 0;
      document.getElementById("hits-count").textContent =
        plural(hitsShown, "hit") + (hitsCursor ? " shown, more below" : "");
      showList(false);
    }

    function later() {
      clearTimeout(timer);
      timer = setTimeout(() => {
        state.offset = 0;
        cursor = null;
        shown = 0;
        load();
        if (state.search.trim()) runSearch(false);
      }, 250);
    }
    for (const name of ["q", "agent", "tag", "tenant", "user"]) {
      inputs[name].addEventListener("input", () => { state[name] = inputs[name].value.trim(); later(); });
    }
    inputs.status.addEventListener("change", () => { state.status = inputs.status.value; later(); });
    let searchTimer = 0;
    inputs.search.addEventListener("input", () => {
      state.search = inputs.search.value;
      clearTimeout(searchTimer);
      searchTimer = setTimeout(() => runSearch(false), 250);
    });
    for (const id of ["filters", "search-form"]) {
      document.getElementById(id).addEventListener("submit", (e) => e.preventDefault());
    }
    prev.addEventListener("click", () => { state.offset = Math.max(0, state.offset - state.limit); load(); });
    next.addEventListener("click", () => { state.offset += state.limit; load(); });
    document.getElementById("more-sessions").addEventListener("click", () => loadCatalog(true));
    moreHits.addEventListener("click", () => runSearch(true));

    (async function start() {
      const found = await getJSONOrShow("api/store");
      if (found) features = found;
      document.getElementById("catalog-filters").hidden = !features.catalog;
      document.getElementById("search-form").hidden = !features.searchable;
      pagerBox.hidden = features.catalog;
      if (features.catalog) {
        inputs.agent.title = "Sessions with events of this agent (the catalog's agents)";
      }
      await load();
      if (features.searchable && state.search.trim()) runSearch(false);
      liveList(load);
    })();
  }

  // The live list: the store-wide feed (the stream app's stream/sessions, docs/web.md). A
  // change reloads the page of the list shown, its filter and offset kept, at most every
  // 250 ms; so does a reconnection (a deletion while away is not resumed).
  function liveList(load) {
    const live = document.getElementById("live");
    let timer = 0;
    let last = 0;
    let opened = false;
    function changed() {
      if (timer) return;
      timer = setTimeout(() => { timer = 0; last = Date.now(); load(); },
        Math.max(0, last + 250 - Date.now()));
    }
    const source = new EventSource("stream/sessions");
    source.addEventListener("open", () => {
      live.textContent = "● live";
      live.classList.add("on");
      if (opened) changed();
      opened = true;
    });
    source.addEventListener("error", () => {
      live.classList.remove("on");
      live.textContent = source.readyState === EventSource.CLOSED ? "○ not live" : "○ reconnecting";
    });
    source.addEventListener("change", changed);
    source.addEventListener("reload", changed);
  }

  // -- the transcript page ---------------------------------------------------------------------

  const FOLD_CHARS = 600;
  const FOLD_LINES = 12;

  function folded(text, label) {
    const lines = text.split("\n");
    if (text.length <= FOLD_CHARS && lines.length <= FOLD_LINES) return el("pre", "text", text);
    const details = el("details", "fold");
    const first = lines[0].length > 90 ? lines[0].slice(0, 89) + "…" : lines[0];
    append(details, el("summary", null, label + " · " + fmtNum(text.length) + " chars · " + first),
      el("pre", "text", text));
    return details;
  }

  function prettyJSON(text) {
    try {
      return JSON.stringify(JSON.parse(text), null, 2);
    } catch (_) {
      return text;
    }
  }

  function markdown(html, fallback) {
    const box = el("div", "md");
    if (html) {
      // Server-rendered: markdown-it-py without raw HTML, links checked (see docs/web.md).
      box.innerHTML = html;
    } else {
      box.appendChild(el("span", "text", fallback));
    }
    return box;
  }

  // A tool call: its head (name and id) and its arguments, folded when long.
  function callView(call) {
    const box = el("div", "call");
    const head = el("div", "head");
    append(head, "→ ", el("strong", null, call.name), " [" + call.id + "]");
    append(box, head, folded(prettyJSON(call.arguments), "arguments"));
    return { box, head };
  }

  function thinkingBlock(text, chars) {
    const details = el("details", "thinking");
    append(details, el("summary", null, "thinking · " + fmtNum(chars || text.length) + " chars"),
      el("pre", "text", text));
    return details;
  }

  function transcriptPage() {
    const params = new URLSearchParams(location.search);
    const sessionId = params.get("id");
    const rowsBox = document.getElementById("rows");
    const messagesBox = document.getElementById("messages");
    const more = document.getElementById("more");
    const progress = document.getElementById("progress");
    const live = document.getElementById("live");
    if (!sessionId) {
      showError("no session id in the address (?id=...)");
      return;
    }
    document.title = "agentsession · " + sessionId;
    document.getElementById("title").textContent = sessionId;
    const enc = encodeURIComponent(sessionId);

    // The rows shown, as blocks: the open turn and step take the rows that follow.
    const pager = { after: 0, done: false, loading: false, latest: 0 };
    let openTurn = null;
    let openStep = null;
    const calls = new Map();      // call id -> {box, time} of calls not answered yet
    const started = new Map();    // call id -> time of its tool/call event
    let view = "stored";
    let targetShown = false;
    // Each life of the session shown counts one: deleted and created again, the session is
    // shown anew, and what the requests of the life before bring back is dropped.
    let life = 0;
    let source = null;      // the live tail's EventSource
    let retryTimer = 0;

    function containerFor(row) {
      if (row.depth === 0) {
        openTurn = null;
        openStep = null;
      }
      if (openStep) return openStep.body;
      if (openTurn) return openTurn.body;
      return rowsBox;
    }

    function rowBox(row, content, extraClass) {
      const box = el("div", "row " + row.kind + (extraClass ? " " + extraClass : ""));
      if (row.integration) box.classList.add("integration");
      box.id = "seq-" + row.seq;
      box.dataset.kind = row.kind;
      const seq = el("button", "seq", String(row.seq));
      seq.type = "button";
      seq.title = "show the stored event (raw JSON)";
      seq.addEventListener("click", () => toggleRaw(box, row.seq));
      content.classList.add("content");
      append(box, seq, content);
      return box;
    }

    async function toggleRaw(box, seq) {
      const shown = box.querySelector(":scope > pre.raw");
      if (shown) { shown.remove(); return; }
      const pre = el("pre", "raw", "loading…");
      box.appendChild(pre);
      try {
        const response = await fetch("api/session/event?id=" + enc + "&seq=" + seq, {
          credentials: "same-origin",
        });
        pre.textContent = await response.text();
      } catch (error) {
        pre.textContent = String(error);
      }
    }

    // Whom a row names (the rule of agentsession.view.speaker, which `agentsession show` uses
    // too): a message's author; else the event's agent, except for a user message.
    function who(row) {
      const name = row.kind === "user_message" ? row.author : row.author || row.agent;
      return name ? el("span", "agent", "(" + name + ")") : null;
    }

    function stepHint(step, text) {
      step.hints.push(text);
      step.hint.textContent = " · " + step.hints.join(" · ");
    }

    function resultContent(row) {
      const box = el("div", "result" + (row.is_error || row.interrupted ? " error" : ""));
      const head = el("div", "head");
      append(head, el("span", "mark", row.is_error || row.interrupted ? "✗ " : "← "),
        el("span", "mono", row.name + " [" + row.call_id + "]"));
      for (const [key, value] of Object.entries(row.audit || {})) {
        head.appendChild(el("span", "audit", key + "=" + value));
      }
      append(box, head, folded(row.content || "", "result"));
      return box;
    }

    function callBlock(call, time) {
      const { box, head } = callView(call);
      box.dataset.callId = call.id;
      const took = el("span", "took");
      head.appendChild(took);
      const results = el("div", "results");
      box.appendChild(results);
      calls.set(call.id, { results, took, time });
      return box;
    }

    function rowContent(row) {
      const c = el("div");
      switch (row.kind) {
        case "user_message":
          append(c, el("span", "label user", "user" + (row.user ? " " + row.user : "")), who(row),
            markdown(row.html, row.text));
          return c;
        case "assistant_message": {
          append(c, el("span", "label assistant", "assistant"), who(row));
          if (row.thinking) c.appendChild(thinkingBlock(row.thinking, row.thinking_chars));
          if (row.text) c.appendChild(markdown(row.html, row.text));
          for (const call of row.tool_calls || []) c.appendChild(callBlock(call, row.time));
          if (!row.text && !(row.tool_calls || []).length && !row.thinking) {
            c.appendChild(el("span", "dim", "(empty)"));
          }
          return c;
        }
        case "tool_call":
          started.set(row.call_id, row.time);
          c.appendChild(el("span", "dim", "tool call started: " + row.name + " [" + row.call_id + "]"));
          return c;
        case "usage": {
          // Input counts the cached tokens: the cache figures are a part of it.
          let text = "usage: " + fmtNum(row.input_tokens) + " in";
          if (row.cache_read_tokens || row.cache_write_tokens) {
            text += " (of which " + fmtNum(row.cache_read_tokens) + " cache read, " +
              fmtNum(row.cache_write_tokens) + " cache write)";
          }
          text += " / " + fmtNum(row.output_tokens) + " out";
          c.appendChild(el("span", "dim", text));
          return c;
        }
        case "todo_update": {
          const list = el("ul", "todo");
          for (const item of row.items || []) {
            list.appendChild(el("li", null, (item.done ? "☑ " : "☐ ") + item.title +
              (item.status && !item.done ? " (" + item.status + ")" : "")));
          }
          append(c, el("span", "label", "todos"), list);
          return c;
        }
        case "compaction":
          c.className = "banner compaction";
          append(c, el("span", "tag", "COMPACTION"),
            row.compaction_kind + ": history before seq " + row.first_kept_seq + " replaced; " +
            plural(row.kept_messages, "message") + " kept" +
            (row.tokens_before ? " · " + fmtNum(row.tokens_before) + " tokens before" : ""));
          if (row.summary) c.appendChild(el("pre", "text", row.summary));
          return c;
        case "recovery":
          c.className = "banner recovery";
          append(c, el("span", "tag", "RECOVERY"),
            "the turn from seq " + row.turn_start_seq + " was cut off: " +
            plural(row.orphan_results, "tool call") + " answered as interrupted, " +
            (row.closed_step >= 0 ? "closed step " + row.closed_step : "no open step") +
            (row.reason ? " · " + row.reason : ""));
          return c;
        case "rewind":
          c.className = "banner rewind";
          append(c, el("span", "tag", "REWIND"), row.rewind_kind, who(row),
            ": history back to seq " + row.to_seq + " (what followed it is greyed: out of the " +
            "history the model sees, still in the log)" + (row.reason ? " · " + row.reason : ""));
          return c;
        case "branch":
          // Where this branch leaves its origin: the rows above are the origin's events.
          c.className = "banner branch";
          append(c, el("span", "tag", "BRANCH"), "of session ",
            sessionLink(row.origin, row.origin_seq), row.origin_seq
              ? " at its seq " + row.origin_seq + ": the rows above are its events (shared), " +
                "the rows below this branch's own"
              : " at its start: nothing shared, the rows below are this branch's own");
          return c;
        case "subagent_start":
          append(c, el("span", "label", "subagent " + row.subagent),
            "started" + (row.background ? " (in the background)" : "") + " in session ",
            row.child_session ? sessionLink(row.child_session) : "?",
            row.task ? ": " + row.task : "");
          return c;
        case "subagent_end": {
          let what = row.status || "ended";
          if (row.status === "merged") what = "merged from session";
          else if (row.status === "discarded") what = "discarded: session";
          else what += " · session";
          append(c, el("span", "label", "subagent " + row.subagent), what + " ",
            row.child_session ? sessionLink(row.child_session) : "?");
          if (row.merge_mode === "messages") c.appendChild(document.createTextNode(
            ": " + plural(row.merged_messages, "message") + " written here"));
          if (row.summary) c.appendChild(el("pre", "text", row.summary));
          if (row.error) c.appendChild(el("pre", "text error", row.error));
          return c;
        }
        case "fork":
          c.className = "banner fork";
          append(c, el("span", "tag", "FORK"), "child of session ",
            sessionLink(row.parent, row.parent_seq), " at its seq " + row.parent_seq +
            (row.subagent ? " for subagent " + row.subagent : "") + " · " +
            plural(row.inherited_messages, "message") + " inherited");
          if (row.task) c.appendChild(el("pre", "text", row.task));
          return c;
        case "merge":
          c.className = "banner merge";
          append(c, el("span", "tag", "MERGED"), "into session ",
            sessionLink(row.parent, row.parent_seq),
            ": " + (row.mode === "summary" ? "a summary" : plural(row.messages, "message")) +
            ", ending at its seq " + row.parent_seq);
          return c;
        case "discard":
          c.className = "banner discard";
          append(c, el("span", "tag", "DISCARDED"), "session ",
            sessionLink(row.parent, row.parent_seq), " noted it at its seq " + row.parent_seq +
            (row.reason ? ": " + row.reason : ""));
          return c;
        case "skill_load":
          append(c, el("span", "label", "skill " + row.name), "loaded" +
            (row.description ? ": " + row.description : ""));
          if (row.body) c.appendChild(folded(row.body, "instructions"));
          return c;
        case "run_finish":
          append(c, el("span", "label", "run " + row.status));
          if (row.summary) c.appendChild(el("pre", "text", row.summary));
          return c;
        case "event":
          append(c, el("span", "dim mono", row.type), who(row));
          if (row.integration) {
            // An integration's own record of an item (a question or an answer alike): folded,
            // whatever its length, as the typed rows beside it show what it says.
            const details = el("details", "fold");
            const data = row.data || "";
            append(details, el("summary", null, "item · " + fmtNum(data.length) + " chars · " +
              (data.length > 90 ? data.slice(0, 89) + "…" : data)), el("pre", "text", prettyJSON(data)));
            c.appendChild(details);
          } else {
            c.appendChild(folded(prettyJSON(row.data || ""), "payload"));
          }
          return c;
        default:
          c.appendChild(el("span", "dim", row.kind));
          return c;
      }
    }

    // Integration records (adk/, langchain/, openai_agents/, pydantic_ai/) repeat what the typed rows
    // beside them say: once the session shows a typed message, they are hidden unless asked for.
    const TYPED = new Set(["user_message", "assistant_message", "tool_result"]);
    let integrationRows = 0;

    function noteRow(row) {
      if (TYPED.has(row.kind)) rowsBox.classList.add("typed");
      if (row.integration) integrationRows += 1;
      updateIntegrationToggle();
    }

    function updateIntegrationToggle() {
      const button = document.getElementById("integration");
      const showing = rowsBox.classList.contains("show-integration");
      button.hidden = view !== "stored" || integrationRows === 0 ||
        !rowsBox.classList.contains("typed");
      button.textContent = (showing ? "hide " : "show ") +
        plural(integrationRows, "integration record");
      button.setAttribute("aria-pressed", String(showing));
    }

    // Rewinds: every row shown, in seq order, with the seq a rewind marker goes back to (null
    // for any other event, -1 for a marker that names no earlier seq). A row is greyed
    // ("rewound") when the history no longer holds its event, as the rows shown tell it: the
    // server marks each row as of the last row of its page, and a later rewind greys (or, when
    // it undoes one, brings back) rows shown before, so the page walks the path again.
    const path = [];
    let rewindPending = false;

    function notePath(row, node) {
      const marker = row.kind === "rewind";
      const valid = marker && row.to_seq >= 0 && row.to_seq < row.seq;
      path.push({ seq: row.seq, target: marker ? (valid ? row.to_seq : -1) : null });
      if (row.rewound) node.classList.add("rewound");
      if (marker && !rewindPending) {
        rewindPending = true;
        queueMicrotask(() => { rewindPending = false; markRewound(); });
      }
    }

    // The rule of agentsession.derive.live_events, walked back from the last row shown: an
    // event extends the history before it; a marker makes it the one right after its seq.
    function markRewound() {
      const kept = new Set();
      let i = path.length - 1;
      while (i >= 0) {
        const { seq, target } = path[i];
        kept.add(seq);
        if (target === null || target < 0) { i -= 1; continue; }
        let low = 0;
        let high = i;  // the last index before i whose seq is at most target
        while (low < high) {
          const mid = (low + high) >> 1;
          if (path[mid].seq <= target) low = mid + 1; else high = mid;
        }
        i = low - 1;
      }
      for (const { seq } of path) {
        const node = document.getElementById("seq-" + seq);
        if (node) node.classList.toggle("rewound", !kept.has(seq));
      }
    }

    function addRow(row) {
      pager.after = Math.max(pager.after, row.seq);
      noteRow(row);
      const node = placeRow(row);
      if (node) notePath(row, node);
      if (node && branchPoints.has(row.seq)) noteBranches(node, branchPoints.get(row.seq));
    }

    // The branches that leave this session at a seq (its branch index, from the header):
    // the row of that seq says so, linking to each branch where it leaves.
    const branchPoints = new Map();  // seq -> branches leaving right after it

    function noteBranches(node, branches) {
      for (const branch of branches) {
        const note = el("div", "branch-note");
        append(note, "↳ branch ", sessionLink(branch.id, branch.seq + 1), " leaves here");
        node.appendChild(note);
      }
    }

    // Puts the row on the page; returns its element (a turn's or step's block for their
    // start).
    function placeRow(row) {
      if (row.kind === "turn_start") {
        openStep = null;
        const details = el("details", "turn");
        details.open = true;
        details.id = "seq-" + row.seq;
        const summary = el("summary");
        const totals = el("span", "dim");
        append(summary, "turn", row.agent ? " (" + row.agent + ")" : "",
          row.user ? " · user " + row.user : "", " · " + fmtTime(row.time) + " · seq " + row.seq, " ",
          totals, el("span", "rewound-note", " · rewound: out of the history"));
        const body = el("div", "body");
        append(details, summary, body);
        rowsBox.appendChild(details);
        openTurn = { details, body, totals };
        return details;
      }
      if (row.kind === "step_start") {
        const parent = openTurn ? openTurn.body : rowsBox;
        const details = el("details", "step");
        details.id = "seq-" + row.seq;
        const summary = el("summary");
        const hint = el("span", "hint");
        append(summary, "step " + row.step, hint);
        const body = el("div", "body");
        append(details, summary, body);
        parent.appendChild(details);
        openStep = { details, body, hint, hints: [] };
        return details;
      }
      if (row.kind === "step_end") {
        const box = rowBox(row, el("span", "dim", "end of step " + row.step));
        if (openStep) {
          openStep.body.appendChild(box);
          openStep = null;
        } else {
          containerFor(row).appendChild(box);
        }
        return box;
      }
      if (row.kind === "turn_end") {
        openStep = null;
        const failed = row.error_type || row.error_message;
        let text = "end of turn · " + plural(row.steps, "step");
        if (row.input_tokens || row.output_tokens) {
          text += " · " + fmtNum(row.input_tokens) + " in / " + fmtNum(row.output_tokens) + " out tokens";
        }
        if (failed) text += " · failed: " + (row.error_type + " " + row.error_message).trim();
        const content = el("span", "turn-end" + (failed ? " failed" : ""), text);
        const box = rowBox(row, content);
        if (openTurn) {
          openTurn.body.appendChild(box);
          openTurn.totals.textContent = "· " + text.replace("end of turn · ", "");
          openTurn = null;
        } else {
          rowsBox.appendChild(box);
        }
        return box;
      }
      const target = containerFor(row);
      if (row.kind === "tool_result" && calls.has(row.call_id)) {
        // Paired with its call: the result's row goes under the call that asked for it.
        const call = calls.get(row.call_id);
        calls.delete(row.call_id);
        const begin = started.get(row.call_id) || call.time;
        started.delete(row.call_id);
        if (row.interrupted) {
          // A crash cut it off: its result is the repair's stand-in, written at the repair.
          call.took.textContent = "interrupted";
          call.took.classList.add("interrupted");
          call.took.title = "cut off by a crash: the result is the stand-in a repair wrote, " +
            "so the call has no duration";
        } else if (begin && row.time) {
          const ms = new Date(row.time) - new Date(begin);
          if (ms >= 0) call.took.textContent = "took " + fmtMs(ms);
        }
        const box = rowBox(row, resultContent(row));
        call.results.appendChild(box);
        return box;
      }
      const content = row.kind === "tool_result" ? resultContent(row) : rowContent(row);
      const box = rowBox(row, content);
      target.appendChild(box);
      if (openStep && target === openStep.body) {
        if (row.kind === "assistant_message") {
          for (const call of row.tool_calls || []) stepHint(openStep, "→ " + call.name);
          if (!(row.tool_calls || []).length && row.text) {
            stepHint(openStep, row.text.length > 60 ? row.text.slice(0, 59) + "…" : row.text);
          }
        } else if (row.kind === "usage") {
          stepHint(openStep, fmtNum(row.input_tokens) + " in / " + fmtNum(row.output_tokens) + " out");
        }
      }
      return box;
    }

    function updateProgress() {
      progress.textContent = fmtNum(pager.after) + " of " + plural(pager.latest, "event") + " shown";
      more.hidden = view !== "stored" || pager.done;
    }

    function revealTarget() {
      if (targetShown || !location.hash.startsWith("#seq-")) return;
      const node = document.getElementById(location.hash.slice(1));
      if (!node) return;
      targetShown = true;
      for (let p = node.parentElement; p; p = p.parentElement) {
        if (p.tagName === "DETAILS") p.open = true;
      }
      node.classList.add("target");
      node.scrollIntoView({ block: "center" });
    }

    function nearViewport(node) {
      const box = node.getBoundingClientRect();
      return box.top < window.innerHeight + 600;
    }

    async function loadMore() {
      if (pager.loading || pager.done) return;
      const mine = life;
      pager.loading = true;
      let progressed = false;
      try {
        const page = await getJSON("api/session/rows?id=" + enc + "&after=" + pager.after);
        if (mine !== life) return;
        for (const row of page.rows) if (row.seq > pager.after) addRow(row);
        progressed = page.next_after > pager.after || page.rows.length > 0;
        pager.after = Math.max(pager.after, page.next_after);
        pager.latest = Math.max(pager.latest, page.latest_seq);
        // The live tail may have announced events after the page was read.
        pager.done = page.done && !(progressed && pager.latest > pager.after);
        rowsBox.dataset.loaded = String(pager.after);
      } catch (error) {
        if (mine === life) showError(error);
      } finally {
        if (mine === life) {
          pager.loading = false;
          updateProgress();
          revealTarget();
        }
      }
      if (mine !== life || !progressed || pager.done || view !== "stored") return;
      const wanted = !targetShown && location.hash.startsWith("#seq-") &&
        Number(location.hash.slice(5)) > pager.after;
      if (wanted || nearViewport(more)) loadMore();
    }

    // Load the next page when the button at the end comes into view.
    if ("IntersectionObserver" in window) {
      new IntersectionObserver((entries) => {
        if (entries.some((e) => e.isIntersecting) && view === "stored") loadMore();
      }, { rootMargin: "600px" }).observe(more);
    }
    more.addEventListener("click", () => (view === "stored" ? loadMore() : loadMessages(false)));

    // -- the header, the charts --------------------------------------------------------------

    // The header; null when the session was shown anew meanwhile.
    async function loadSummary() {
      const mine = life;
      const s = await getJSON("api/session?id=" + enc);
      if (mine !== life) return null;
      pager.latest = Math.max(pager.latest, s.latest_seq);
      const meta = document.getElementById("meta");
      meta.textContent = plural(s.latest_seq, "event") + " · " + s.location +
        (s.agent_id ? " · agent " + s.agent_id : "") + (s.model ? " · model " + s.model : "");
      if (s.encrypted) document.getElementById("badges").appendChild(badge("encrypted", "encrypted"));
      if (s.parent) {
        const p = document.getElementById("parent");
        append(p, "← child of session ", sessionLink(s.parent, s.fork_point),
          ", forked at its seq " + s.fork_point);
        p.hidden = false;
      }
      if (s.origin || s.branches.length) branchSwitcher(s);
      if (s.children.length) {
        const box = document.getElementById("children");
        const list = el("ul");
        for (const child of s.children) {
          const li = el("li");
          append(li, sessionLink(child.id), " · " + (child.agent || "subagent") + " · " + child.state +
            " · forked at seq " + child.fork_seq);
          list.appendChild(li);
        }
        append(box, el("span", null, plural(s.children.length, "child session") + ":"), list);
        box.hidden = false;
      }
      return s;
    }

    // The branch switcher, for a branch or a session with branches: this session, its origin
    // (opened at the seq the branch leaves it) and its branches (opened where each leaves
    // this one); choosing one opens it.
    function branchSwitcher(s) {
      const box = document.getElementById("branching");
      const select = el("select");
      select.id = "branch";
      select.autocomplete = "off";  // Back shows this session chosen, not the one left for
      select.appendChild(new Option("this session: " + s.id, "", true, true));
      if (s.origin) {
        const option = new Option("origin: " + s.origin.id + " at seq " + s.origin.seq,
          sessionHref(s.origin.id, s.origin.seq));
        option.dataset.session = s.origin.id;
        select.appendChild(option);
      }
      for (const branch of s.branches) {
        const option = new Option(branch.id + " (from seq " + branch.seq + ")",
          sessionHref(branch.id, branch.seq + 1));
        option.dataset.session = branch.id;
        select.appendChild(option);
        if (!branchPoints.has(branch.seq)) branchPoints.set(branch.seq, []);
        branchPoints.get(branch.seq).push(branch);
      }
      select.addEventListener("change", () => {
        if (select.value) location.href = select.value;
      });
      const label = el("label", "switcher");
      const n = s.branches.length;
      const own = n === 1 ? "1 branch" : fmtNum(n) + " branches";
      const what = s.origin ? "a branch" + (n ? " with " + own : "") : own;
      append(label, what + ": ", select);
      box.appendChild(label);
      box.hidden = false;
    }

    function drawBars(figure, bars, options) {
      figure.querySelectorAll("svg, .legend, .none").forEach((n) => n.remove());
      if (!bars.length) {
        figure.appendChild(el("p", "none dim", options.empty));
        return;
      }
      const width = Math.max(300, figure.clientWidth - 20);
      const height = 140;
      const pad = { left: 44, bottom: 16, top: 6 };
      const max = Math.max(1, ...bars.map((b) => b.segments.reduce((a, s) => a + s.value, 0)));
      const step = Math.min(36, (width - pad.left) / bars.length);
      const barWidth = Math.max(1, Math.min(24, step * 0.8));
      const chart = svg("svg", { viewBox: "0 0 " + width + " " + height, width, height,
        role: "img", "aria-label": options.label });
      chart.appendChild(svg("line", { x1: pad.left, y1: height - pad.bottom, x2: width,
        y2: height - pad.bottom, class: "axis" }));
      const top = svg("text", { x: 2, y: pad.top + 8 });
      top.textContent = options.format(max);
      const zero = svg("text", { x: 2, y: height - pad.bottom });
      zero.textContent = "0";
      append(chart, top, zero);
      const scale = (height - pad.bottom - pad.top) / max;
      bars.forEach((bar, i) => {
        let y = height - pad.bottom;
        const x = pad.left + i * step + (step - barWidth) / 2;
        const group = svg("g", { class: "bar" });
        const title = svg("title");
        title.textContent = bar.title;
        group.appendChild(title);
        for (const segment of bar.segments) {
          if (segment.value <= 0) continue;
          const h = Math.max(1, segment.value * scale);
          y -= h;
          group.appendChild(svg("rect", { x, y, width: barWidth, height: h, class: segment.cls }));
        }
        chart.appendChild(group);
      });
      figure.appendChild(chart);
      const legend = el("div", "legend");
      for (const [cls, name] of options.legend) {
        append(legend, el("span", "swatch s-" + cls), name);
      }
      if (options.note) append(legend, " · " + options.note);
      figure.appendChild(legend);
    }

    let statsTimer = 0;
    async function loadStats() {
      const mine = life;
      const stats = await getJSONOrShow("api/session/stats?id=" + enc);
      if (!stats || mine !== life) return;
      // Input counts the cached tokens (as the converters report it): a bar stacks the input
      // not cached, the cache read and the cache write (together the input), then the output.
      const group = stats.grouped_by === "message" ? "message" : "turn";
      const turns = stats.turns.map((t, i) => ({
        title: group + " " + (i + 1) + " (seq " + t.seq + "): " + fmtNum(t.input) + " in (" +
          fmtNum(t.cache_read) + " cache read, " + fmtNum(t.cache_write) + " cache write), " +
          fmtNum(t.output) + " out",
        segments: [
          { value: t.uncached, cls: "b-input" }, { value: t.cache_read, cls: "b-cache-read" },
          { value: t.cache_write, cls: "b-cache-write" }, { value: t.output, cls: "b-output" },
        ],
      }));
      const tokensChart = document.getElementById("tokens-chart");
      tokensChart.querySelector("figcaption").textContent = "tokens per " + group;
      drawBars(tokensChart, stats.usage ? turns : [], {
        label: "tokens per " + group, empty: "no usage recorded", format: fmtNum,
        legend: [["input", "input, not cached"], ["cache-read", "cache read"],
          ["cache-write", "cache write"], ["output", "output"]],
        note: plural(stats.turns.length, group) +
          (group === "message" ? " (no turn markers: grouped by user message)" : ""),
      });
      const limit = 300;
      let tools = stats.tools;
      let note = plural(tools.length, "call");
      if (stats.interrupted.length) {
        note += " · " + fmtNum(stats.interrupted.length) + " interrupted, not timed";
      }
      if (tools.length > limit) {
        const keep = new Set([...tools].sort((a, b) => b.ms - a.ms).slice(0, limit));
        tools = tools.filter((t) => keep.has(t));
        note += ", the " + limit + " longest shown";
      }
      drawBars(document.getElementById("tools-chart"), tools.map((t) => ({
        title: t.name + " [" + t.call_id + "] seq " + t.seq + ": " + fmtMs(t.ms),
        segments: [{ value: t.ms, cls: "b-tool" }],
      })), {
        label: "tool-call durations", empty: "no tool call with a known duration",
        format: fmtMs, legend: [["tool", "duration"]], note,
      });
      const select = document.getElementById("agent");
      const current = select.value;
      select.replaceChildren(new Option("every agent", ""));
      for (const agent of stats.agents) select.appendChild(new Option(agent, agent));
      select.value = stats.agents.includes(current) ? current : "";
    }

    // -- what the model sees ----------------------------------------------------------------

    const messagesState = { offset: 0, more: false };

    function messageBox(m) {
      const box = el("div", "msg role-" + m.role);
      box.dataset.index = String(m.index);
      append(box, el("span", "label " + m.role, m.role), m.author ? el("span", "agent", "(" + m.author + ")") : null);
      if (m.thinking) box.appendChild(thinkingBlock(m.thinking));
      if (m.text) box.appendChild(markdown(m.html, m.text));
      for (const note of m.attachments) box.appendChild(el("div", "dim", "[" + note + "]"));
      for (const call of m.tool_calls) box.appendChild(callView(call).box);
      for (const r of m.tool_results) {
        box.appendChild(resultContent({ ...r, interrupted: r.audit.decision === "interrupted" }));
      }
      return box;
    }

    async function loadMessages(reset) {
      if (reset) {
        messagesBox.replaceChildren();
        messagesState.offset = 0;
      }
      const agent = document.getElementById("agent").value;
      const mine = life;
      try {
        const page = await getJSON("api/session/messages?id=" + enc + "&agent=" +
          encodeURIComponent(agent) + "&offset=" + messagesState.offset);
        if (mine !== life) return;
        if (!page.total) messagesBox.appendChild(el("p", "empty", "No messages: the model would see an empty history."));
        for (const m of page.messages) messagesBox.appendChild(messageBox(m));
        messagesState.offset += page.messages.length;
        messagesState.more = page.more;
        progress.textContent = plural(page.total, "message") + " in the history" +
          (agent ? " of agent " + agent : "");
        more.hidden = !page.more;
      } catch (error) {
        showError(error);
      }
    }

    function setView(next) {
      view = next;
      const stored = next === "stored";
      document.getElementById("view-stored").classList.toggle("on", stored);
      document.getElementById("view-model").classList.toggle("on", !stored);
      document.getElementById("view-stored").setAttribute("aria-pressed", String(stored));
      document.getElementById("view-model").setAttribute("aria-pressed", String(!stored));
      document.getElementById("agent-pick").hidden = stored;
      document.getElementById("expand").hidden = !stored;
      document.getElementById("collapse").hidden = !stored;
      updateIntegrationToggle();
      rowsBox.hidden = !stored;
      messagesBox.hidden = stored;
      if (stored) updateProgress();
      else loadMessages(true);
    }

    document.getElementById("view-stored").addEventListener("click", () => setView("stored"));
    document.getElementById("view-model").addEventListener("click", () => setView("model"));
    document.getElementById("agent").addEventListener("change", () => loadMessages(true));
    document.getElementById("expand").addEventListener("click", () =>
      rowsBox.querySelectorAll("details.step").forEach((d) => { d.open = true; }));
    document.getElementById("integration").addEventListener("click", () => {
      rowsBox.classList.toggle("show-integration");
      updateIntegrationToggle();
    });
    document.getElementById("collapse").addEventListener("click", () =>
      rowsBox.querySelectorAll("details.step").forEach((d) => { d.open = false; }));

    // -- the live tail ----------------------------------------------------------------------

    // The stream (the stream app mounted at stream/, docs/web.md) after seq `after` (null:
    // after the latest seq), whose event the page saw as `mark`. A reconnecting EventSource
    // resumes after the last id it got (Last-Event-ID): every connection starts with "start",
    // naming the seq it goes on after and the mark of the event there, and another mark than
    // the one the page saw there means the session was deleted and created again meanwhile.
    function follow(after, mark) {
      const mine = life;
      const current = new EventSource("stream/?id=" + enc +
        (after === null ? "" : "&after=" + after));
      source = current;
      let seen = { seq: after, mark };  // the last event the stream brought
      current.addEventListener("open", () => {
        if (mine !== life) return;
        live.textContent = "● live";
        live.classList.add("on");
      });
      current.addEventListener("error", () => {
        if (mine !== life) return;
        live.textContent = "○ reconnecting";
        live.classList.remove("on");
        // Refused for good (the session is gone, say): show it anew in a moment.
        if (current.readyState === EventSource.CLOSED) {
          clearTimeout(retryTimer);
          retryTimer = setTimeout(begin, 2000);
        }
      });
      current.addEventListener("start", (message) => {
        if (mine !== life) return;
        const start = JSON.parse(message.data);
        if (seen.seq === null) {
          seen = { seq: start.after, mark: start.mark };
        } else if (start.after !== seen.seq || start.mark !== seen.mark) {
          begin();  // another life of the session than the one shown
          return;
        }
        pager.latest = Math.max(pager.latest, start.latest_seq);
        updateProgress();
      });
      current.addEventListener("reset", () => {
        if (mine === life) begin();
      });
      current.addEventListener("reload", () => {
        if (mine !== life) return;
        // The page fell behind the session by more than the server keeps for it: the pager
        // brings the rows it missed, and a new stream goes on from the latest seq.
        current.close();
        pager.done = false;
        updateProgress();
        loadMore();
        follow(null, null);
      });
      current.addEventListener("row", (message) => {
        if (mine !== life) return;
        const row = JSON.parse(message.data);
        seen = { seq: row.seq, mark: row.mark };
        const batch = { rows: [row], next_after: row.seq };
        pager.latest = Math.max(pager.latest, batch.next_after);
        if (pager.done && !pager.loading) {
          const fresh = batch.rows.filter((r) => r.seq > pager.after);
          if (fresh.length && fresh[0].seq <= pager.after + 1) {
            const atBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 80;
            for (const row of fresh) addRow(row);
            pager.after = Math.max(pager.after, batch.next_after);
            rowsBox.dataset.loaded = String(pager.after);
            if (atBottom && view === "stored") window.scrollTo(0, document.body.scrollHeight);
          } else if (fresh.length) {
            pager.done = false;  // a gap: the pager fetches what is missing
            loadMore();
          }
        } else {
          pager.done = false;
        }
        updateProgress();
        if (batch.rows.some((r) => r.kind === "turn_end" || r.kind === "usage")) {
          clearTimeout(statsTimer);
          statsTimer = setTimeout(loadStats, 1500);
        }
      });
    }

    // Forget everything shown: the page starts a new life of the session.
    function forget() {
      life += 1;
      clearTimeout(retryTimer);
      clearTimeout(statsTimer);
      if (source) source.close();
      source = null;
      Object.assign(pager, { after: 0, done: false, loading: false, latest: 0 });
      openTurn = null;
      openStep = null;
      calls.clear();
      started.clear();
      path.length = 0;
      rowsBox.replaceChildren();
      rowsBox.classList.remove("typed");
      integrationRows = 0;
      updateIntegrationToggle();
      delete rowsBox.dataset.loaded;
      messagesBox.replaceChildren();
      messagesState.offset = 0;
      branchPoints.clear();
      for (const id of ["meta", "badges", "parent", "children", "branching"]) {
        document.getElementById(id).replaceChildren();
      }
      document.getElementById("parent").hidden = true;
      document.getElementById("children").hidden = true;
      document.getElementById("branching").hidden = true;
      document.getElementById("error").hidden = true;
    }

    // Show the session: its header, its first page of rows, then its live tail and charts.
    // Run again, from nothing, when the live tail reports that the session was deleted or
    // created again.
    async function begin() {
      const again = life > 0;
      forget();
      const mine = life;
      let summary;
      try {
        summary = await loadSummary();
      } catch (error) {
        if (mine !== life) return;
        showError(error);
        if (again) {
          // Deleted and not created again yet: look again in a moment.
          live.textContent = "○ waiting for the session";
          live.classList.remove("on");
          retryTimer = setTimeout(begin, 2000);
        } else {
          live.textContent = "";
        }
        return;
      }
      if (!summary || mine !== life) return;
      await loadMore();
      if (mine !== life) return;
      follow(summary.latest_seq, summary.latest_mark);
      loadStats();
      if (view === "model") loadMessages(true);
    }

    begin();
  }

  if (document.body.dataset.page === "sessions") sessionsPage();
  else if (document.body.dataset.page === "session") transcriptPage();
})();
