"""What rewinds cost the derived history: ``messages()`` on a session with 1,000 rewinds against
the same on sessions without them, measured in one run.

    python benchmarks/rewind.py [--turns 2000] [--rounds 5]

Three JSONL sessions: **rewound** holds ``--turns`` turns where every other turn is rewound by
the marker after it (``--turns / 2`` rewinds, 1,000 by default; its history holds the other
half); **plain** holds the same ``--turns`` turns without rewinds (the same log, minus the
markers); **short** holds only the turns the rewound one keeps (the same history). For each,
``messages()`` is taken cold (a new store object opening the log) and from the events alone
(``agentsession.derive.messages`` on ``read()``'s list); each case keeps its best round. The
ratio is the rewound session's time over the plain one's [target <= 1.5].
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from _workload import best

import agentsession as ags
from agentsession.derive import messages


def build(store: ags.BaseStore, sid: str, turns: int, rewind_every_other: bool, keep: bool) -> None:
    session = store.get(sid)
    for i in range(turns):
        if keep and not rewind_every_other and i % 2:
            continue
        with session.turn() as turn:
            turn.user(f"question {i} " + "x" * 200)
            turn.assistant(f"answer {i} " + "y" * 400)
        if rewind_every_other and i % 2:
            session.rewind(to_seq=session.latest_seq - 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="agentsession-rewind-"))
    try:
        with ags.open_store(work) as store:
            build(store, "rewound", args.turns, True, False)
            build(store, "plain", args.turns, False, False)
            build(store, "short", args.turns, False, True)
        logs = {}
        with ags.open_store(work) as store:
            for sid in ("rewound", "plain", "short"):
                logs[sid] = store.get(sid).read()
        sizes = {sid: len(messages(events)) for sid, events in logs.items()}
        assert sizes["rewound"] == sizes["short"] == args.turns
        rewinds = sum(e.type == "session/rewind" for e in logs["rewound"])

        def cold(sid: str) -> None:
            with ags.open_store(work) as store:
                store.get(sid).messages()

        results = {}
        for sid in ("rewound", "plain", "short"):
            results[sid] = (
                best(lambda sid=sid: cold(sid), args.rounds),
                best(lambda sid=sid: messages(logs[sid]), args.rounds),
            )
        print(f"{args.turns} turns; 'rewound' has {rewinds} rewinds; best of {args.rounds}\n")
        print(f"{'session':<10}{'events':>8}{'messages':>10}{'cold ms':>10}{'derive ms':>11}")
        for sid, (cold_s, derive_s) in results.items():
            print(
                f"{sid:<10}{len(logs[sid]):>8}{sizes[sid]:>10}"
                f"{cold_s * 1000:>10.1f}{derive_s * 1000:>11.1f}"
            )
        print()
        for base in ("plain", "short"):
            cold_ratio = results["rewound"][0] / results[base][0]
            derive_ratio = results["rewound"][1] / results[base][1]
            target = "<= 1.50" if base == "plain" else ""
            print(
                f"rewound / {base:<6} cold {cold_ratio:5.2f}   derive {derive_ratio:5.2f}   "
                f"{target}"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
