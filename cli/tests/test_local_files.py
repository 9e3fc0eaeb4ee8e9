"""The local files `exp create` sends: the tasks file read by YAML 1.2 core-schema rules (names and
env values as written, no anchors), and both files sized before they are read."""
from __future__ import annotations

import os

import pytest

from cli import exp as exp_module
from cli.errors import CLIError
from cli.exit_codes import ExitCode
from cli.exp import CONFIG_MAX_BYTES, TASKS_MAX_BYTES, read_config_file, read_tasks_file
from cli.tasks_yaml import Yaml12Loader, parse_tasks
from core.limits.boundedyaml import BoundedComposerMixin
from core.testing import count_calls


def _refusal(text: str) -> str:
    with pytest.raises(CLIError) as err:
        parse_tasks(text, "tasks.yaml")
    assert err.value.code is ExitCode.USAGE
    return err.value.message


# --- YAML 1.2 core schema ------------------------------------------------------------------------

def test_env_values_reach_the_task_exactly_as_written():
    data = parse_tasks(
        "main:\n"
        "  command: run\n"
        "  envs:\n"
        "    FLAG: on\n"            # YAML 1.1: true
        "    VERSION: 3.10\n"       # YAML 1.1 and 1.2: the float 3.1
        "    PORTS: 22:22\n"        # YAML 1.1: sexagesimal 1342
        "    MODE: 0755\n"          # YAML 1.1: octal 493
        "    LR: .inf\n"            # a float infinity, which JSON cannot carry
        "    ANSWER: no\n"          # YAML 1.1: false
        "    BIG: 1e3\n"            # a float 1000.0
        "    HEX: 0x1F\n"
        "    DAY: 2024-01-01\n"     # YAML 1.1: a date
        "    NOTHING: null\n"
        "    EMPTY:\n"
        "    TRUE_: true\n"
        "    QUOTED: '0755'\n"
        "    BLOCK: |\n"
        "      line one\n"
        "      line two\n", "tasks.yaml")
    assert data["main"]["envs"] == {
        "FLAG": "on", "VERSION": "3.10", "PORTS": "22:22", "MODE": "0755", "LR": ".inf",
        "ANSWER": "no", "BIG": "1e3", "HEX": "0x1F", "DAY": "2024-01-01", "NOTHING": "null",
        "EMPTY": "", "TRUE_": "true", "QUOTED": "0755", "BLOCK": "line one\nline two\n"}


def test_names_are_taken_as_written():
    data = parse_tasks("on: {command: a, envs: {TRUE: 1, NULL: 2, Y: 3}}\n"
                       "1: {command: b}\nnull: {command: c}\n", "tasks.yaml")
    assert list(data) == ["on", "1", "null"]
    assert data["on"]["envs"] == {"TRUE": "1", "NULL": "2", "Y": "3"}


def test_other_values_follow_the_yaml_1_2_core_schema():
    data = parse_tasks("main: {command: 0755, replica: 8, device_count: null, image: yes,\n"
                       "       device_type: 3.10, device_topo: 2x2x2, a: 0o17, b: 0x1f, c: True,\n"
                       "       d: ~, e: 1_000, f: 0b11, g: 1:30, h: .5, i: 1e3, j: Off}\n",
                       "tasks.yaml")
    assert data["main"] == {
        "command": 755, "replica": 8, "device_count": None, "image": "yes",
        "device_type": 3.1, "device_topo": "2x2x2", "a": 15, "b": 31, "c": True, "d": None,
        "e": "1_000", "f": "0b11", "g": "1:30", "h": 0.5, "i": 1000.0, "j": "Off"}


@pytest.mark.parametrize("field", ["replica", "device_count"])
@pytest.mark.parametrize("written,problem", [
    ("010", "010 has a leading zero, which YAML 1.1 reads as octal (8) and YAML 1.2 as decimal "
            "(10); write the number without leading zeros, e.g. 10"),
    ("09", "09 has a leading zero"),
    ("-007", "-007 has a leading zero, which YAML 1.1 reads as octal (-7) and YAML 1.2 as "
             "decimal (-7); write the number without leading zeros, e.g. -7"),
    ("0o10", "0o10 is not a decimal integer; write it in decimal (8)"),
    ("0x10", "0x10 is not a decimal integer; write it in decimal (16)"),
    ("!!int 010", "010 has a leading zero"),
])
def test_integer_fields_take_decimal_integers_only(field, written, problem):
    message = _refusal(f"main:\n  command: run\n  {field}: {written}\n")
    assert message.startswith("tasks file tasks.yaml, line 3, column ")
    assert f": main.{field}: {problem}" in message


@pytest.mark.parametrize("written", ["0", "1", "+4", "1024"])
def test_decimal_integers_are_accepted(written):
    assert parse_tasks(f"main: {{command: x, replica: {written}}}", "t")["main"]["replica"] == \
        int(written)


@pytest.mark.parametrize("written", [".inf", "-.Inf", "+.INF", ".nan", ".NaN", "1e999",
                                     "!!float .inf"])
def test_non_finite_numbers_are_refused_naming_the_field(written):
    message = _refusal(f"main:\n  command: run\n  replica: 1\n  extra: {written}\n")
    assert message.startswith("tasks file tasks.yaml, line 4, column 10: main.extra: ")
    assert "is not a finite number and cannot be sent" in message
    assert "write a finite number" in message


def test_anchors_and_aliases_are_refused_before_anything_expands(monkeypatch):
    # The "billion laughs": 9 aliases per level, 9 levels, about 400 million strings.
    levels = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for index in range(1, 10):
        prev, name = chr(96 + index), chr(97 + index)
        levels.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    text = "\n".join(levels) + "\n"
    assert len(text) < 700
    events = count_calls(monkeypatch, Yaml12Loader, "get_event")
    nodes = count_calls(monkeypatch, BoundedComposerMixin, "compose_node")
    message = _refusal(text)
    # Nothing expanded: at most one parser event and one composed node per character.
    assert 0 < nodes.calls <= len(text) and 0 < events.calls <= len(text)
    assert message == ("tasks file tasks.yaml, line 1, column 4: a: the anchor &a is not "
                       "accepted: a tasks file takes no anchors (&name) or aliases (*name); "
                       "write the value out")


@pytest.mark.parametrize("text,where", [
    ("main: {command: x, envs: &e {A: 1}}\n", "line 1, column 26: main.envs: the anchor &e"),
    ("main: {command: &c x}\nother: {command: *c}\n",
     "line 1, column 17: main.command: the anchor &c"),
    ("main: {command: x}\nother: *m\n", "line 2, column 8: other: the alias *m is not accepted"),
    ("main: {command: x, envs: {A: *undefined}}\n", "main.envs.A: the alias *undefined"),
    ("&r main: {command: x}\n", "line 1, column 1: the anchor &r"),
])
def test_every_anchor_or_alias_is_refused_where_it_is(text, where):
    message = _refusal(text)
    assert where in message
    assert "write the value out" in message


def test_deep_nesting_is_refused_without_a_recursion_error():
    message = _refusal("main: {command: x, extra: " + "[" * 10_000 + "]" * 10_000 + "}\n")
    assert "the file nests deeper than 32 levels" in message


@pytest.mark.parametrize("text,problem", [
    ("main: {command: x, envs: {D: !!int 5}}\n",
     "main.envs.D: the tag !!int is not accepted on an env value"),
    ("main: {command: x, envs: !!set {A, B}}\n", "main.envs: a YAML !!set cannot be sent"),
    ("main: {command: x, image: !!binary aGk=}\n", "main.image: the tag !!binary makes a YAML "
                                                   "bytes, which cannot be sent"),
    ("main: {command: x, replica: !!bool yes}\n", "'yes' is not a YAML 1.2 boolean"),
    ("main: {command: x}\nmain: {command: y}\n",
     "line 2, column 1: found duplicate key 'main' (first at line 1)"),
    ("main: {command: x, envs: {A: 1, 'A': 2}}\n", "main.envs: found duplicate key 'A'"),
    ("main: {command: x, envs: {[A]: 1}}\n", "main.envs: an env name must be a plain name"),
    ("main: {command: '\x1b[2J'}\n", "character #x001b at offset 17 is not allowed in YAML"),
])
def test_tags_keys_and_characters_that_cannot_be_sent_are_refused(text, problem):
    assert problem in _refusal(text)


def test_an_explicit_str_tag_on_an_env_value_is_fine():
    assert parse_tasks("main: {command: x, envs: {V: !!str 3.10}}", "t")["main"]["envs"] == \
        {"V": "3.10"}


# --- sizes and kinds of files --------------------------------------------------------------------

def test_the_cli_config_limit_is_the_servers(settings):
    assert CONFIG_MAX_BYTES == settings.FALCON_CONFIG_MAX_BYTES == 131_053


def test_a_config_at_the_limit_is_read_and_one_byte_more_is_refused(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_bytes(b"x" * CONFIG_MAX_BYTES)
    assert len(read_config_file(str(path))) == CONFIG_MAX_BYTES
    path.write_bytes(b"x" * (CONFIG_MAX_BYTES + 1))
    with pytest.raises(CLIError) as err:
        read_config_file(str(path))
    assert err.value.code is ExitCode.USAGE
    assert err.value.message.startswith(f"config file {path} is 131,054 bytes; the server "
                                        "accepts a config")
    assert err.value.message.endswith("of at most 131,053 bytes")


def test_a_tasks_file_over_its_limit_is_refused_before_it_is_read(tmp_path, monkeypatch):
    path = tmp_path / "tasks.yaml"
    with open(path, "wb") as handle:  # sparse: 1 GiB on paper, nothing on disk
        handle.truncate(1024 ** 3)

    def no_read(*_args):
        raise AssertionError("the file was read")

    monkeypatch.setattr(os, "read", no_read)
    with pytest.raises(CLIError) as err:
        read_tasks_file(str(path))
    assert err.value.message == (f"tasks file {path} is 1,073,741,824 bytes; a tasks file may "
                                 f"hold at most {TASKS_MAX_BYTES:,} bytes")


def test_a_file_that_grows_after_the_stat_is_read_only_to_the_limit_plus_one(tmp_path,
                                                                            monkeypatch):
    path = tmp_path / "config.yaml"
    path.write_bytes(b"small\n")
    real_fstat, real_read = os.fstat, os.read
    asked: list[int] = []

    def fstat_then_grow(fd):
        result = real_fstat(fd)
        with open(path, "ab") as handle:  # grows between the size check and the read
            handle.write(b"y" * (3 * CONFIG_MAX_BYTES))
        return result

    def counting_read(fd, size):
        asked.append(size)
        return real_read(fd, size)

    monkeypatch.setattr(os, "fstat", fstat_then_grow)
    monkeypatch.setattr(os, "read", counting_read)
    with pytest.raises(CLIError) as err:
        read_config_file(str(path))
    assert err.value.message.startswith(f"config file {path} is over 131,053 bytes")
    assert sum(asked) == CONFIG_MAX_BYTES + 1


@pytest.mark.parametrize("reader,what", [(read_config_file, "config file"),
                                         (read_tasks_file, "tasks file")])
def test_devices_and_fifos_are_refused_without_being_opened(tmp_path, reader, what):
    with pytest.raises(CLIError) as err:
        reader("/dev/zero")
    assert err.value.code is ExitCode.USAGE
    assert err.value.message == (f"{what} /dev/zero is a character device, whose size cannot be "
                                 "known before reading it; save the content to a regular file "
                                 "and pass that")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opening it to read would wait for a writer forever
    with pytest.raises(CLIError) as err:
        reader(str(fifo))
    assert err.value.code is ExitCode.USAGE
    assert err.value.message.startswith(f"{what} {fifo} is a FIFO (pipe), whose size cannot")
    with pytest.raises(CLIError) as err:
        reader(str(tmp_path))
    assert err.value.message == f"{what} {tmp_path}: is a directory, not a file"


def test_exp_create_with_config_dev_zero_is_a_usage_error(tmp_path):
    from click.testing import CliRunner

    from cli.env import Environment
    from cli.main import falcon

    tasks = tmp_path / "tasks.yaml"
    tasks.write_text("main: {command: x}\n")
    result = CliRunner().invoke(
        falcon, ["exp", "create", "--name", "n", "--cluster", "c", "--type", "t",
                 "--role-to-task-spec", str(tasks), "--config", "/dev/zero"],
        obj=Environment(environ={}, config_dir=tmp_path / "cfg"))
    assert result.exit_code == ExitCode.USAGE
    assert result.stderr.startswith("error: config file /dev/zero is a character device")
    assert exp_module.TASKS_MAX_BYTES == 1024 * 1024
