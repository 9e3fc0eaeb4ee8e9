"""The local files `exp create` sends: both files sized before they are read."""
from __future__ import annotations

import os

import pytest

from cli import exp as exp_module
from cli.errors import CLIError
from cli.exit_codes import ExitCode
from cli.exp import CONFIG_MAX_BYTES, TASKS_MAX_BYTES, read_config_file, read_tasks_file


# --- sizes and kinds of files ---------------------------------------------------------------------

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
