"""Sources to import, written by the real libraries (the OpenAI Agents SDK, ADK, LangGraph) and
by hand after Claude Code's documented transcript format, each with the broken shapes healing
fixes. Run as ``python tests/import_sources.py STEP PATH`` for the steps that must run in a
process of their own (a run killed mid-tool)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIXED_TIME = "2026-01-02 03:04:05"


def _example(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _python(step: str, path: Path, *, killed: bool) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, __file__, step, str(path)], env=env, capture_output=True, timeout=300
    )
    if killed:
        assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    else:
        assert proc.returncode == 0, proc.stderr.decode()


# ---------------------------------------------------------------------------------------------
# The OpenAI Agents SDK.


def _openai_killed(path: str) -> None:
    """A ``Runner`` with a scripted model whose tool needs approval: the run pauses with the
    function call stored and the process is killed before anyone approves it."""
    from agents import Agent, Runner, SQLiteSession, function_tool
    from openai.types.responses import ResponseFunctionToolCall

    ex = _example("openai_agents_example")

    @function_tool(needs_approval=True)
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"Sunny in {city}"

    call = ResponseFunctionToolCall(
        id="fc_1",
        call_id="call_1",
        name="get_weather",
        arguments='{"city":"Paris"}',
        type="function_call",
    )
    model = ex.ScriptedModel([[ex.say("Hello!", "msg_1")], [call]])
    agent = Agent(name="helper", model=model, tools=[get_weather])

    async def main() -> None:
        session = SQLiteSession("killed", path)
        await Runner.run(agent, "hi", session=session)
        await Runner.run(agent, "weather in Paris?", session=session)
        os.kill(os.getpid(), signal.SIGKILL)  # mid-tool: the call awaits its approval

    asyncio.run(main())


def _openai_resumed(path: str) -> None:
    """The user comes back to the killed session: a new run appends after the orphan call."""
    from agents import Agent, Runner, SQLiteSession

    ex = _example("openai_agents_example")
    model = ex.ScriptedModel([[ex.say("Still here.", "msg_2")]])
    agent = Agent(name="helper", model=model)

    async def main() -> None:
        await Runner.run(agent, "still there?", session=SQLiteSession("killed", path))
        broken = SQLiteSession("broken", path)
        await broken.add_items(
            [
                {"role": "user", "content": "look two things up"},
                {"type": "function_call", "call_id": "c0", "name": "lookup", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c0", "output": "first"},
                {"type": "function_call", "call_id": "c0", "name": "lookup", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c0", "output": "second"},
                {"type": "function_call_output", "call_id": "ghost", "output": "from nowhere"},
                {"role": "user", "content": "and the slow one?"},
                {"type": "function_call", "call_id": "slow", "name": "slow", "arguments": "{}"},
                {"role": "user", "content": "hello?"},
                {"type": "function_call_output", "call_id": "slow", "output": "done at last"},
                {"role": "assistant", "content": "Done."},
                {"role": "user", "content": "bye"},
            ]
        )

    asyncio.run(main())


def openai_agents_db(path: Path) -> Path:
    """``conversations.db``: session ``killed`` (a real run killed mid-tool, then resumed) and
    session ``broken`` (a duplicate call id, an orphan output, a late output, a truncated last
    item)."""
    _python("openai-killed", path, killed=True)
    _python("openai-resumed", path, killed=False)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE agent_messages SET created_at = ?", (FIXED_TIME,))
        (last,) = conn.execute(
            "SELECT max(id) FROM agent_messages WHERE session_id = 'broken'"
        ).fetchone()
        conn.execute(
            "INSERT INTO agent_messages (session_id, message_data, created_at) VALUES (?, ?, ?)",
            ("broken", '{"role": "user", "content": "cut sh', FIXED_TIME),
        )
        del last
    conn.close()
    return path


def openai_advanced_db(path: Path) -> Path:
    """An ``AdvancedSQLiteSession`` database: session ``adv`` with two turns and their usage,
    and the branch ``retry`` made from its second turn, which went another way."""
    from agents import Agent, Runner
    from agents.extensions.memory import AdvancedSQLiteSession
    from agents.items import ModelResponse
    from agents.usage import Usage

    ex = _example("openai_agents_example")

    class Counted(ex.ScriptedModel):  # type: ignore[misc,name-defined]
        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            made = await super().get_response(*args, **kwargs)
            made.usage = Usage(requests=1, input_tokens=7, output_tokens=3, total_tokens=10)
            return made

    async def main() -> None:
        session = AdvancedSQLiteSession(session_id="adv", db_path=str(path), create_tables=True)
        outputs = [[ex.say("One.", "m1")], [ex.say("Two.", "m2")], [ex.say("Two again.", "m3")]]
        agent = Agent(name="helper", model=Counted(outputs))
        for text in ("first", "second"):
            await session.store_run_usage(await Runner.run(agent, text, session=session))
        await session.create_branch_from_turn(2, branch_name="retry")
        result = await Runner.run(agent, "second, differently", session=session)
        await session.store_run_usage(result)
        session.close()

    asyncio.run(main())
    return path


# ---------------------------------------------------------------------------------------------
# Google ADK.


def _legacy_adk_tables(path: Path) -> None:
    """Create ADK's older schema (``google.adk.sessions.schemas.v0``: pickled event actions)
    in a new SQLite file: ADK's ``DatabaseSessionService`` then finds it and writes that
    shape, as ADK 1.19 to 1.21 did."""
    from google.adk.sessions.schemas.v0 import Base
    from sqlalchemy import create_engine

    engine = create_engine(f"sqlite:///{path}")
    try:
        Base.metadata.create_all(engine)
    finally:
        engine.dispose()


def adk_db(path: Path, url: str | None = None, *, legacy: bool = False) -> str:
    """An ADK ``DatabaseSessionService`` database written by ADK's ``Runner`` with a scripted
    LLM: session ``s1`` whose model called a tool that never answered (a long-running tool),
    then went on, and a stale function response; session ``s2`` rewound by ADK to before its
    second invocation; app and user state. ``url`` (a PostgreSQL URL) instead of the file;
    ``legacy``: in ADK's older schema (v0), written by ADK itself."""
    if legacy:
        _legacy_adk_tables(path)
    from google.adk.agents import LlmAgent
    from google.adk.events import Event as AdkEvent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import Runner
    from google.adk.sessions import DatabaseSessionService
    from google.adk.tools.long_running_tool import LongRunningFunctionTool
    from google.genai import types

    script = [
        types.Content(
            role="model",
            parts=[
                types.Part(
                    function_call=types.FunctionCall(
                        id="adk-call-1", name="approve", args={"amount": 10}
                    )
                )
            ],
        ),
        types.Content(role="model", parts=[types.Part(text="Waiting for approval.")]),
        types.Content(role="model", parts=[types.Part(text="First answer.")]),
        types.Content(role="model", parts=[types.Part(text="Second answer, taken back.")]),
    ]

    class ScriptedLlm(BaseLlm):
        model: str = "scripted"

        async def generate_content_async(self, llm_request: Any, stream: bool = False) -> Any:
            yield LlmResponse(
                content=script.pop(0),
                usage_metadata=types.GenerateContentResponseUsageMetadata(
                    prompt_token_count=5, candidates_token_count=3, total_token_count=8
                ),
            )

    def approve(amount: int) -> None:
        """Ask for approval; the answer comes later (it never does)."""
        return None

    agent = LlmAgent(
        name="helper", model=ScriptedLlm(), tools=[LongRunningFunctionTool(func=approve)]
    )
    db_url = url or f"sqlite+aiosqlite:///{path}"

    async def main() -> None:
        service = DatabaseSessionService(db_url)
        runner = Runner(agent=agent, app_name="shop", session_service=service)
        session = await service.create_session(
            app_name="shop",
            user_id="ada",
            session_id="s1",
            state={"app:currency": "EUR", "user:name": "Ada", "cart": 1},
        )
        for text in ("pay 10", "hello?"):
            async for _ in runner.run_async(
                user_id="ada",
                session_id=session.id,
                new_message=types.Content(role="user", parts=[types.Part(text=text)]),
            ):
                pass
        # A function response for a call no event made (a stale delivery).
        session = await service.get_session(app_name="shop", user_id="ada", session_id="s1")
        assert session is not None
        stale = AdkEvent(
            invocation_id="stale",
            author="helper",
            content=types.Content(
                role="user",
                parts=[
                    types.Part(
                        function_response=types.FunctionResponse(
                            id="nobody", name="approve", response={"result": "late"}
                        )
                    )
                ],
            ),
        )
        await service.append_event(session, stale)
        # Session s2: two invocations, then ADK's rewind to before the second.
        await service.create_session(app_name="shop", user_id="ada", session_id="s2")
        for text in ("first", "second"):
            async for _ in runner.run_async(
                user_id="ada",
                session_id="s2",
                new_message=types.Content(role="user", parts=[types.Part(text=text)]),
            ):
                pass
        s2 = await service.get_session(app_name="shop", user_id="ada", session_id="s2")
        assert s2 is not None
        await runner.rewind_async(
            user_id="ada", session_id="s2", rewind_before_invocation_id=s2.events[-1].invocation_id
        )
        await service.close() if hasattr(service, "close") else None

    asyncio.run(main())
    return url or str(path)


def adk_compaction_app() -> Any:
    """An ADK ``App`` with an ``EventsCompactionConfig`` (every 2 invocations, no overlap; the
    summariser an ``LlmEventSummarizer``) over a scripted LLM that echoes (``re: <text>``) and
    summarises as ``Summary: the user said one and two.``"""
    import warnings

    from google.adk.agents import LlmAgent
    from google.adk.apps.app import App, EventsCompactionConfig
    from google.adk.apps.llm_event_summarizer import LlmEventSummarizer
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_response import LlmResponse
    from google.genai import types

    class EchoLlm(BaseLlm):
        model: str = "echo"

        async def generate_content_async(self, llm_request: Any, stream: bool = False) -> Any:
            last = llm_request.contents[-1]
            text = "".join(p.text or "" for p in last.parts or [])
            if "conversation_history" in text or "ummar" in text:  # the summariser's prompt
                reply = "Summary: the user said one and two."
            else:
                reply = f"re: {text}"
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=reply)]))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ADK marks its compaction config experimental
        return App(
            name="shop",
            root_agent=LlmAgent(name="helper", model=EchoLlm()),
            events_compaction_config=EventsCompactionConfig(
                compaction_interval=2, overlap_size=0, summarizer=LlmEventSummarizer(llm=EchoLlm())
            ),
        )


def adk_compacted_db(path: Path, *, legacy: bool = False) -> str:
    """An ADK ``DatabaseSessionService`` database written by ADK's ``Runner`` for
    :func:`adk_compaction_app`: session ``c1`` with three invocations, ADK's own compaction
    event after the second summarising the first two. ``legacy``: in ADK's older schema
    (v0)."""
    from google.adk.runners import Runner
    from google.adk.sessions import DatabaseSessionService
    from google.genai import types

    if legacy:
        _legacy_adk_tables(path)
    app = adk_compaction_app()

    async def main() -> None:
        service = DatabaseSessionService(f"sqlite+aiosqlite:///{path}")
        runner = Runner(app=app, session_service=service)
        await service.create_session(app_name="shop", user_id="ada", session_id="c1")
        for text in ("one", "two", "three"):
            async for _ in runner.run_async(
                user_id="ada",
                session_id="c1",
                new_message=types.Content(role="user", parts=[types.Part(text=text)]),
            ):
                pass
        await service.close()

    asyncio.run(main())
    return str(path)


# ---------------------------------------------------------------------------------------------
# LangGraph.


def langgraph_db(path: Path | None = None, conn: Any = None) -> None:
    """A ``SqliteSaver`` database (or the ``PostgresSaver`` on ``conn``) written by a
    ``StateGraph`` whose tool node was interrupted (``interrupt()`` inside the tool: the run
    stops with the model's tool calls stored and no result), then thread ``done`` that ran to
    the end."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.types import interrupt

    def model(state):  # type: ignore[no-untyped-def]  # LangGraph reads the hints
        last = state["messages"][-1]
        if isinstance(last, ToolMessage):
            return {"messages": [AIMessage("It is sunny.", id="ai-2")]}
        calls = [
            {"name": "weather", "args": {"city": "Paris"}, "id": "tc-1"},
            {"name": "weather", "args": {"city": "Rome"}, "id": "tc-2"},
        ]
        return {"messages": [AIMessage("", tool_calls=calls, id="ai-1")]}

    def tools(state):  # type: ignore[no-untyped-def]
        last = state["messages"][-1]
        out = []
        for call in last.tool_calls:
            if call["args"]["city"] == "Rome" and state.get("stop", True):
                interrupt("approve Rome?")
            out.append(ToolMessage(f"sunny in {call['args']['city']}", tool_call_id=call["id"]))
        return {"messages": out}

    def route(state):  # type: ignore[no-untyped-def]
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_node("tools", tools)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", route)
    builder.add_edge("tools", "model")
    if conn is None:
        from langgraph.checkpoint.sqlite import SqliteSaver

        assert path is not None
        with SqliteSaver.from_conn_string(str(path)) as saver:
            _run_graph(builder, saver, HumanMessage)
    else:
        from langgraph.checkpoint.postgres import PostgresSaver

        saver = PostgresSaver(conn)
        saver.setup()
        _run_graph(builder, saver, HumanMessage)


def langgraph_forked_db(path: Path | None = None, conn: Any = None) -> None:
    """A ``SqliteSaver`` database whose thread ``forked`` has diverging checkpoints, written by
    a ``StateGraph``: two turns, then time travel back to the checkpoint after the first turn,
    where ``update_state`` puts another second question and the graph runs on from it (the
    first second turn stays in the old checkpoints); then, from the old line's last checkpoint,
    one more turn (a line that extends the old one); and thread ``straight`` that never
    forks. ``conn``: on the ``PostgresSaver`` of that connection instead of a file."""
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, MessagesState, StateGraph

    def model(state):  # type: ignore[no-untyped-def]  # LangGraph reads the hints
        last = state["messages"][-1]
        return {"messages": [AIMessage(f"re: {last.content}", id=f"ai-{last.id}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_edge(START, "model")
    builder.add_edge("model", END)
    if conn is None:
        assert path is not None
        with SqliteSaver.from_conn_string(str(path)) as saver:
            _fork_thread(builder, saver, HumanMessage)
    else:
        from langgraph.checkpoint.postgres import PostgresSaver

        saver = PostgresSaver(conn)
        saver.setup()
        _fork_thread(builder, saver, HumanMessage)


def _fork_thread(builder: Any, saver: Any, human: Any) -> None:
    """Run the forked and the straight thread of :func:`langgraph_forked_db` on ``saver``."""
    HumanMessage = human
    graph = builder.compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "forked"}}
    graph.invoke({"messages": [HumanMessage("first question", id="h-1")]}, config)
    graph.invoke({"messages": [HumanMessage("second question", id="h-2")]}, config)
    old_tip = graph.get_state(config).config
    after_first = next(
        s.config
        for s in graph.get_state_history(config)
        if [m.id for m in s.values.get("messages", [])] == ["h-1", "ai-h-1"] and not s.next
    )
    forked = graph.update_state(
        after_first,
        {"messages": [HumanMessage("another second question", id="h-2b")]},
        as_node="__start__",
    )
    graph.invoke(None, forked)
    new_tip = graph.get_state(config).config
    # The old line goes on: a turn from its last checkpoint (its earlier tip becomes part
    # of it), then the new line again, so that it stays the thread's latest.
    graph.invoke({"messages": [HumanMessage("third question", id="h-3")]}, old_tip)
    graph.invoke({"messages": [HumanMessage("and a third one", id="h-3b")]}, new_tip)
    straight: Any = {"configurable": {"thread_id": "straight"}}
    graph.invoke({"messages": [HumanMessage("hello", id="s-1")]}, straight)


def _run_graph(builder: Any, saver: Any, human: Any) -> None:
    graph = builder.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "interrupted"}}
    graph.invoke({"messages": [human("weather in Paris and Rome?", id="h-1")]}, config)


# ---------------------------------------------------------------------------------------------
# Claude Code (hand-written after the documented format).


def _entry(kind: str, uuid: str, parent: str | None, message: Any, **more: Any) -> dict[str, Any]:
    return {
        "type": kind,
        "uuid": uuid,
        "parentUuid": parent,
        "sessionId": "sess-1",
        "timestamp": f"2026-01-02T03:04:{int(uuid[-2:]):02d}.000Z",
        "isSidechain": False,
        "cwd": "/home/me/app",
        "message": message,
        **more,
    }


def _use(tool_id: str, name: str, msg_id: str) -> dict[str, Any]:
    return {
        "id": msg_id,
        "role": "assistant",
        "model": "claude-sonnet-4",
        "content": [{"type": "tool_use", "id": tool_id, "name": name, "input": {}}],
        "usage": {"input_tokens": 10, "output_tokens": 2},
    }


def _text(text: str, msg_id: str) -> dict[str, Any]:
    return {
        "id": msg_id,
        "role": "assistant",
        "model": "claude-sonnet-4",
        "content": [{"type": "text", "text": text}],
        "usage": {"input_tokens": 12, "output_tokens": 3},
    }


def _result(tool_id: str, text: str) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": text}],
    }


def claude_code_dir(root: Path) -> Path:
    """``~/.claude/projects/-home-me-app``: ``sess-1.jsonl`` with two tool uses of one model
    message written one block per line, a subagent (Task) whose result arrives after the main
    conversation went on and after inline sidechain entries, an orphan tool use, an orphan
    result, a repeated tool id, and a torn last line; its subagent's transcript."""
    project = root / "-home-me-app"
    (project / "sess-1" / "subagents").mkdir(parents=True)
    lines = [
        {"type": "summary", "summary": "weather", "leafUuid": "u-00"},
        _entry("user", "u-01", None, {"role": "user", "content": "check Paris and Rome"}),
        _entry("assistant", "u-02", "u-01", _use("toolu_a", "Read", "msg_1")),
        _entry("assistant", "u-03", "u-02", _use("toolu_b", "Read", "msg_1")),
        _entry("user", "u-04", "u-03", _result("toolu_a", "Paris: sunny")),
        _entry("user", "u-05", "u-04", _result("toolu_b", "Rome: rain")),
        _entry("assistant", "u-06", "u-05", _use("toolu_task", "Task", "msg_2")),
        _entry(
            "user",
            "u-07",
            "u-06",
            {"role": "user", "content": "research the forecast"},
            isSidechain=True,
        ),
        _entry("assistant", "u-08", "u-07", _text("Forecast: fine.", "msg_sub"), isSidechain=True),
        _entry("user", "u-09", "u-06", {"role": "user", "content": "are you done?"}),
        _entry("user", "u-10", "u-09", _result("toolu_task", "The forecast is fine.")),
        _entry("assistant", "u-11", "u-10", _use("toolu_a", "Read", "msg_3")),
        _entry("user", "u-12", "u-11", _result("toolu_a", "Paris again: sunny")),
        _entry("user", "u-13", "u-12", _result("toolu_ghost", "nobody asked")),
        _entry("assistant", "u-14", "u-13", _use("toolu_cut", "Bash", "msg_4")),
        _entry("user", "u-15", "u-14", {"role": "user", "content": "stop"}),
        _entry("assistant", "u-16", "u-15", _text("Stopped.", "msg_5")),
    ]
    text = "".join(json.dumps(line) + "\n" for line in lines) + '{"type": "user", "uuid": "u-1'
    (project / "sess-1.jsonl").write_text(text)
    sub = [
        _entry(
            "user",
            "s-01",
            None,
            {"role": "user", "content": "research the forecast"},
            isSidechain=True,
        ),
        _entry(
            "assistant", "s-02", "s-01", _use("toolu_s", "WebFetch", "msg_s1"), isSidechain=True
        ),
    ]
    (project / "sess-1" / "subagents" / "agent-abc.jsonl").write_text(
        "".join(json.dumps(line) + "\n" for line in sub)
    )
    return project


if __name__ == "__main__":
    step, where = sys.argv[1], sys.argv[2]
    {"openai-killed": _openai_killed, "openai-resumed": _openai_resumed}[step](where)
