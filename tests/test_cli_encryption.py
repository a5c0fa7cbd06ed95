"""The command line on encrypted stores: --key-file and AGENTSESSION_PASSPHRASE, the error
and exit status of a wrong or missing key, rekey, shred, and copy in and out of encryption."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

import agentsession as ags
from agentsession.cli import Secret, cli, read_key_file
from agentsession.cli import _output as cli_output
from agentsession.crypto import EncryptionError

from .test_cli import fill

PASSPHRASE = "Cli-Distinctive-Passphrase 42"
NEW_PASSPHRASE = "Cli-New-Passphrase 43"


def run(
    store: Path | str,
    *args: str,
    env: dict[str, str] | None = None,
    input: str | None = None,
) -> tuple[int, str, str]:
    result = CliRunner().invoke(
        cli,
        ["--store", str(store), *args],
        input=input,
        env={"COLUMNS": "200", "AGENTSESSION_PASSPHRASE": "", **(env or {})},
    )
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "store.key"
    path.write_text(PASSPHRASE + "\n", encoding="utf-8")
    return path


@pytest.fixture
def plain_dir(tmp_path: Path) -> Path:
    fill(tmp_path / "plain").close()
    return tmp_path / "plain"


@pytest.fixture
def encrypted_dir(tmp_path: Path, plain_dir: Path, key_file: Path) -> Path:
    target = tmp_path / "encrypted"
    code, _, err = run(
        plain_dir, "copy", str(plain_dir), str(target), "--dst-key-file", str(key_file)
    )
    assert code == 0, err
    return target


def is_sealed_store(directory: Path) -> bool:
    lines = [line for p in directory.glob("*.jsonl") for line in p.read_bytes().splitlines()]
    return bool(lines) and all(b'"data":{"sealed":2,' in line for line in lines)


# -- the key options --------------------------------------------------------------------------


def test_the_key_file_or_the_environment_opens_an_encrypted_store(
    encrypted_dir: Path, key_file: Path
) -> None:
    assert is_sealed_store(encrypted_dir)
    code, out, _ = run(encrypted_dir, "--key-file", str(key_file), "ls", "--json")
    assert code == 0
    assert sorted(json.loads(line)["id"] for line in out.splitlines()) == [
        "cli:long",
        "slack:C001",
        "slack:C002",
    ]
    code, out, _ = run(
        encrypted_dir,
        "messages",
        "slack:C001",
        "--json",
        env={"AGENTSESSION_PASSPHRASE": PASSPHRASE},
    )
    assert code == 0 and json.loads(out)[0]["parts"][0]["text"] == "Fix the failing test"
    # --key-file wins over the environment.
    code, _, _ = run(
        encrypted_dir, "--key-file", str(key_file), "ls", env={"AGENTSESSION_PASSPHRASE": "wrong"}
    )
    assert code == 0


def test_a_missing_or_wrong_key_is_one_line_and_exit_1_without_the_secret(
    encrypted_dir: Path, tmp_path: Path
) -> None:
    code, out, err = run(encrypted_dir, "show", "slack:C001")
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and err.startswith("Error: ")
    assert "is encrypted" in err and "--key-file PATH or AGENTSESSION_PASSPHRASE" in err
    wrong = tmp_path / "wrong.key"
    wrong.write_text("Not-The-Passphrase\n")
    for args, env in [
        (["--key-file", str(wrong), "ls"], {}),
        (["ls"], {"AGENTSESSION_PASSPHRASE": "Not-The-Passphrase"}),
        (["--debug", "--key-file", str(wrong), "ls"], {}),
    ]:
        code, out, err = run(encrypted_dir, *args, env=env)
        assert code == 1 and out == "", args
        assert "Error: wrong passphrase for the encrypted store" in err
        assert "Not-The-Passphrase" not in err and PASSPHRASE not in err


def test_a_key_file_with_64_hex_digits_is_a_raw_key(tmp_path: Path) -> None:
    key = bytes(range(32))
    with ags.open_store(tmp_path / "s", key=key) as store:
        store.get("k").append(ags.Event.new("test/x", {"n": 1}))
    hex_file = tmp_path / "raw.key"
    hex_file.write_text(key.hex() + "\n")
    assert read_key_file(str(hex_file)) == Secret(key=key, source=f"the key file {hex_file}")
    code, out, err = run(tmp_path / "s", "--key-file", str(hex_file), "show", "k", "--json")
    assert code == 0, err
    assert json.loads(out)["data"] == {"n": 1}
    # A passphrase given for a raw-key store is refused, saying so.
    code, _, err = run(tmp_path / "s", "ls", env={"AGENTSESSION_PASSPHRASE": key.hex()})
    assert code == 1 and "raw key, not a passphrase" in err


def test_key_files_that_hold_no_key_are_usage_errors_that_do_not_echo_them(
    tmp_path: Path, encrypted_dir: Path
) -> None:
    cases = {
        "empty.key": b"\n",
        "binary.key": b"\xff\xfe" + b"Secret-Bytes" + b"\x00" * 18,
        "huge.key": b"Secret-Bytes" * 400,
    }
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        code, out, err = run(encrypted_dir, "--key-file", str(tmp_path / name), "ls")
        assert code == 2 and out == "", name
        assert f"the key file {tmp_path / name}" in err and "Secret-Bytes" not in err
    code, _, err = run(encrypted_dir, "--key-file", str(tmp_path / "absent.key"), "ls")
    assert code == 2 and "cannot read the key file" in err


def test_a_secret_prints_neither_passphrase_nor_key() -> None:
    assert PASSPHRASE not in repr(Secret(passphrase=PASSPHRASE, source="x"))
    assert bytes(range(32)).hex() not in repr(Secret(key=bytes(range(32))))
    assert "passphrase" not in Secret(passphrase=PASSPHRASE).options().keys() - {"passphrase"}
    assert not Secret() and Secret(passphrase="p") and Secret(key=bytes(32))


def test_a_key_given_for_a_plain_store_is_refused_and_makes_nothing_encrypted(
    plain_dir: Path, key_file: Path
) -> None:
    code, out, err = run(plain_dir, "--key-file", str(key_file), "ls")
    assert code == 2 and out == ""
    assert "is not encrypted, but a passphrase was given" in err
    empty = plain_dir.parent / "empty"
    empty.mkdir()
    code, _, err = run(empty, "ls", env={"AGENTSESSION_PASSPHRASE": PASSPHRASE})
    assert code == 2 and "is not encrypted" in err
    assert not (empty / ".meta").exists()  # a read never makes a store encrypted
    code, _, _ = run(plain_dir, "ls")
    assert code == 0


def test_every_command_that_reads_the_store_uses_the_key(
    encrypted_dir: Path, key_file: Path
) -> None:
    k = ["--key-file", str(key_file)]
    for args in [
        ["ls", "--json"],
        ["stats", "--json"],
        ["stats", "--json", "slack:C002"],
        ["show", "--json", "slack:C001"],
        ["tail", "--json", "-n", "2", "cli:long"],
        ["messages", "--json", "slack:C002"],
        ["repair", "--all", "--dry-run", "--json"],
        ["compact", "cli:long", "--summary", "S", "--keep-turns", "1", "--json"],
        ["repair", "slack:C002", "--json"],
        ["rm", "-y", "--json", "cli:long"],
    ]:
        code, out, err = run(encrypted_dir, *k, *args)
        assert code == 0, (args, err)
        assert out.strip(), args
        code, _, err = run(encrypted_dir, *args)
        assert code in (1, 4) and "Error:" in err, args
    assert is_sealed_store(encrypted_dir)


# -- rekey ------------------------------------------------------------------------------------


def test_rekey_from_a_file_changes_the_passphrase(
    encrypted_dir: Path, key_file: Path, tmp_path: Path
) -> None:
    new_file = tmp_path / "new.key"
    new_file.write_text(NEW_PASSPHRASE)
    code, out, err = run(
        encrypted_dir,
        "--key-file",
        str(key_file),
        "rekey",
        "--new-key-file",
        str(new_file),
        "--json",
    )
    assert code == 0, err
    assert json.loads(out) == {
        "store": str(encrypted_dir.resolve()),
        "changed": True,
        "new": "passphrase",
    }
    assert run(encrypted_dir, "--key-file", str(key_file), "ls")[0] == 1
    assert run(encrypted_dir, "--key-file", str(new_file), "ls")[0] == 0


def test_rekey_asks_twice_with_hidden_input_on_a_terminal_and_needs_a_file_elsewhere(
    encrypted_dir: Path, key_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, err = run(encrypted_dir, "--key-file", str(key_file), "rekey")
    assert code == 2 and "--new-key-file" in err
    monkeypatch.setattr(cli_output, "is_terminal", lambda stream: True)
    code, out, err = run(
        encrypted_dir, "--key-file", str(key_file), "rekey", input=f"{NEW_PASSPHRASE}\nmistyped\n"
    )
    assert code != 0 and "do not match" in err.lower()
    assert run(encrypted_dir, "--key-file", str(key_file), "ls")[0] == 0  # unchanged
    code, out, err = run(
        encrypted_dir,
        "--key-file",
        str(key_file),
        "rekey",
        input=f"{NEW_PASSPHRASE}\n{NEW_PASSPHRASE}\n",
    )
    assert code == 0, err
    assert NEW_PASSPHRASE not in out + err  # hidden input is not echoed
    assert out == f"changed the passphrase of {encrypted_dir.resolve()}\n"
    code, _, _ = run(encrypted_dir, "ls", env={"AGENTSESSION_PASSPHRASE": NEW_PASSPHRASE})
    assert code == 0


def test_rekey_needs_the_current_key_and_an_encrypted_store(
    encrypted_dir: Path, plain_dir: Path, key_file: Path
) -> None:
    code, _, err = run(encrypted_dir, "rekey", "--new-key-file", str(key_file))
    assert code == 2 and "rekey needs the store's passphrase" in err
    code, _, err = run(
        plain_dir, "--key-file", str(key_file), "rekey", "--new-key-file", str(key_file)
    )
    assert code == 2 and "not encrypted" in err


# -- shred ------------------------------------------------------------------------------------


def test_shred_asks_on_a_terminal_needs_yes_elsewhere_and_destroys_the_key(
    encrypted_dir: Path, key_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    k = ["--key-file", str(key_file)]
    code, _, err = run(encrypted_dir, *k, "shred", "slack:C002")
    assert code == 2 and "-y/--yes" in err
    monkeypatch.setattr(cli_output, "is_terminal", lambda stream: True)
    code, out, err = run(encrypted_dir, *k, "shred", "slack:C002", input="n\n")
    assert code == 1 and "Shred 1 session(s) for good" in err and err.endswith("nothing shredded\n")
    assert run(encrypted_dir, *k, "show", "slack:C002")[0] == 0
    code, out, err = run(encrypted_dir, *k, "shred", "slack:C002", input="y\n")
    assert (code, out) == (0, "shredded slack:C002\n")
    code, _, err = run(encrypted_dir, *k, "show", "slack:C002")
    assert code == 1 and "shredded" in err
    # The log stays listed; the other sessions read.
    code, out, _ = run(encrypted_dir, *k, "ls", "--json")
    assert "slack:C002" in out
    assert run(encrypted_dir, *k, "show", "slack:C001")[0] == 0


def test_shred_json_reads_ids_from_stdin_and_refuses_unknown_ids(
    encrypted_dir: Path, key_file: Path, plain_dir: Path
) -> None:
    k = ["--key-file", str(key_file)]
    code, _, err = run(encrypted_dir, *k, "shred", "-y", "slack:C002", "nope")
    assert code == 4 and "nope" in err
    assert run(encrypted_dir, *k, "show", "slack:C002")[0] == 0  # nothing shredded
    code, out, err = run(
        encrypted_dir, *k, "shred", "-y", "--json", "-", input="slack:C002\ncli:long\n"
    )
    assert code == 0, err
    assert [json.loads(line) for line in out.splitlines()] == [
        {"session_id": "slack:C002", "shredded": True},
        {"session_id": "cli:long", "shredded": True},
    ]
    code, _, err = run(plain_dir, "shred", "-y", "slack:C002")
    assert code == 2 and "shred needs the store's passphrase" in err


def test_repair_and_copy_of_a_whole_store_pass_over_a_shredded_session(
    encrypted_dir: Path, key_file: Path, tmp_path: Path
) -> None:
    k = ["--key-file", str(key_file)]
    assert run(encrypted_dir, *k, "shred", "-y", "slack:C002")[0] == 0
    code, out, err = run(encrypted_dir, *k, "repair", "--all")
    assert (code, out) == (0, "nothing to repair\n"), err
    code, out, err = run(encrypted_dir, *k, "repair", "slack:C002", "--json")
    assert code == 0, err
    assert json.loads(out) == {
        "session_id": "slack:C002", "status": "shredded", "turns": [], "error": ""
    }
    code, out, err = run(encrypted_dir, *k, "copy", str(encrypted_dir), str(tmp_path / "c"))
    assert code == 0, err
    assert out.rstrip().endswith("; left out 1 shredded (slack:C002)")
    copied = ags.open_store(tmp_path / "c", create=False)
    assert not copied.exists("slack:C002") and copied.exists("slack:C001")
    code, _, err = run(
        encrypted_dir, *k, "copy", str(encrypted_dir), str(tmp_path / "d"), "--id", "slack:C002"
    )
    assert code == 1 and "shredded" in err


# -- copy -------------------------------------------------------------------------------------


def test_copy_encrypts_a_plain_store_and_back(
    plain_dir: Path, encrypted_dir: Path, key_file: Path, tmp_path: Path
) -> None:
    back = tmp_path / "back"
    code, out, err = run(
        encrypted_dir, "--key-file", str(key_file), "copy", str(encrypted_dir), str(back), "--json"
    )
    assert code == 0, err
    assert json.loads(out)["sessions"] == 3
    assert not (back / ".meta" / "crypto").exists()
    for name in ("slack_C001.jsonl", "slack_C002.jsonl", "cli_long.jsonl"):
        plain_events = [json.loads(line) for line in (plain_dir / name).read_bytes().splitlines()]
        back_events = [json.loads(line) for line in (back / name).read_bytes().splitlines()]
        assert [(e["seq"], e["type"], e["data"]) for e in back_events] == [
            (e["seq"], e["type"], e["data"]) for e in plain_events
        ], name


def test_copy_from_one_encrypted_store_to_another_with_its_own_passphrase(
    encrypted_dir: Path, key_file: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    code, _, err = run(
        encrypted_dir,
        "--key-file",
        str(key_file),
        "copy",
        str(encrypted_dir),
        str(other),
        env={"AGENTSESSION_DST_PASSPHRASE": NEW_PASSPHRASE},
    )
    assert code == 0, err
    assert is_sealed_store(other)
    with ags.open_store(other, create=False, passphrase=NEW_PASSPHRASE) as store:
        assert store.get("slack:C001").messages()[0].text == "Fix the failing test"
    with pytest.raises(EncryptionError):
        ags.open_store(other, create=False, passphrase=PASSPHRASE)
    # Into an encrypted destination without its key: the error says how to give it.
    code, _, err = run(
        encrypted_dir, "--key-file", str(key_file), "copy", str(encrypted_dir), str(other)
    )
    assert code == 1 and "--dst-key-file PATH or AGENTSESSION_DST_PASSPHRASE" in err


def test_copy_into_a_plain_store_that_has_sessions_refuses_to_encrypt_it(
    plain_dir: Path, key_file: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    assert run(plain_dir, "copy", str(plain_dir), str(other), "--id", "cli:long")[0] == 0
    code, _, err = run(
        plain_dir,
        "copy",
        str(plain_dir),
        str(other),
        "--id",
        "slack:C001",
        "--dst-key-file",
        str(key_file),
    )
    assert code == 1 and "unencrypted sessions" in err


def test_import_writes_into_an_encrypted_store_with_the_global_key(
    tmp_path: Path, key_file: Path
) -> None:
    source = Path(__file__).parent / "golden" / "agentkit_dir"
    target = tmp_path / "imported"
    code, _, err = run(
        target, "--key-file", str(key_file), "import", "agentkit", str(source), "--json"
    )
    assert code == 0, err
    assert is_sealed_store(target)
    code, out, _ = run(target, "--key-file", str(key_file), "ls", "--json")
    assert code == 0 and out.strip()


def test_the_new_commands_have_help_with_examples_and_json() -> None:
    for name in ("rekey", "shred"):
        result = CliRunner().invoke(cli, [name, "-h"])
        assert result.exit_code == 0 and "Usage:" in result.stdout
        lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
        examples = lines[len(lines) - lines[::-1].index("Examples:") :]
        assert examples and all("agentsession" in line and name in line for line in examples)
        assert "--json" in result.stdout
    top = CliRunner().invoke(cli, ["-h"]).stdout
    assert "--key-file" in top and "AGENTSESSION_PASSPHRASE" in top


def test_the_cli_logs_no_secret(
    encrypted_dir: Path, key_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    for args, expected in (
        (["--debug", "ls"], 1),
        (["--debug", "--key-file", str(key_file), "ls"], 0),
    ):
        code, out, err = run(encrypted_dir, *args)
        assert code == expected and PASSPHRASE not in out + err
    assert all(PASSPHRASE not in record.getMessage() for record in caplog.records)
    assert os.environ.get("AGENTSESSION_PASSPHRASE") in (None, "")


@pytest.mark.parametrize(
    "damage",
    [{"n": 3}, {"n": -1}, {"n": 2**40}, {"r": 0}, {"p": 0}, {"n": "32768"}, {"n": True}],
)
def test_a_damaged_kdf_record_is_one_error_line_not_a_traceback(
    encrypted_dir: Path, damage: dict[str, object]
) -> None:
    """Damaged or hostile scrypt parameters in the store record are refused before the KDF runs
    (bounded memory and time): EncryptionError from open_store, exit 1 on the command line."""
    record_file = encrypted_dir / ".meta" / "crypto" / "store.json"
    entry = json.loads(record_file.read_text())
    record = json.loads(entry["value"])
    record["kdf"].update(damage)
    entry["value"] = json.dumps(record)
    record_file.write_text(json.dumps(entry))
    with pytest.raises(EncryptionError, match="KDF parameters") as caught:
        ags.open_store(encrypted_dir, create=False, passphrase=PASSPHRASE)
    assert PASSPHRASE not in str(caught.value)
    code, out, err = run(encrypted_dir, "ls", env={"AGENTSESSION_PASSPHRASE": PASSPHRASE})
    assert code == 1
    assert err.startswith("Error: ") and "KDF parameters" in err
    assert "Traceback" not in err + out and PASSPHRASE not in err + out
