"""Attacks on the artifact files and on the YAML reader, through the public interfaces.

Links planted in an artifact folder (to a secret file outside, to `/`, to the parent, in an
intermediate folder), a FIFO, a folder swapped for a link between listing and reading and during
a walk, a replica log replaced by a link, links in the CLI's download folder: listing, sizes,
reading, downloading, manifests, log copies and purge never leave the folder, and the secret's
bytes appear nowhere while its file survives. Alias chains, billion laughs and deep nesting in
configs: `GET /api/v1/exps/diff` answers 400 naming the limit, fast.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from artifacts.services import artifact_update_status
from artifacts.store import local_path, replica_log_url, store_for
from core.limits import boundedyaml
from core.processes import safefs
from core.testing import count_calls
from experiments.tests.factories import make_exp
from experiments.tests.test_exp_files import finish, start, wait_for

EXPS = "/api/v1/exps"
SECRET = b"root:x:0:0:THE-SECRET-BYTES:/root:/bin/bash\n"


@pytest.fixture
def alice(db):
    from accounts.issuer import local_subject
    from accounts.tests.factories import UserFactory

    return UserFactory(user_id=local_subject("alice@example.com"), email="alice@example.com")


@pytest.fixture
def outside(tmp_path) -> Path:
    """A folder outside every artifact folder holding the secret."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_bytes(SECRET)
    return folder


def plant(exp, outside: Path) -> Path:
    """Give the experiment's artifact folder one real file and every kind of trap."""
    root = local_path(exp.artifact_path)
    main = root / "main"
    main.mkdir(parents=True)
    (main / "ok.txt").write_bytes(b"fine\n")
    (main / "passwd").symlink_to(outside / "secret.txt")
    (main / "root").symlink_to("/")
    (main / "up").symlink_to("..")
    (main / "linkdir").symlink_to(outside)
    (main / "self").symlink_to("ok.txt")  # even a link inside the folder is not followed
    os.mkfifo(main / "fifo")
    return root


def body(res) -> bytes:
    return b"".join(res.streaming_content) if res.streaming else res.content


def test_links_and_special_files_are_skipped_by_listing_and_refused_by_reading(
        auth_api, alice, outside):
    exp = make_exp(creator=alice, name="traps")
    plant(exp, outside)
    url = f"{EXPS}/{exp.pk}/artifacts"

    listing = auth_api.get(url, {"page_size": 1000})
    assert listing.status_code == 200
    assert [f["name"] for f in listing.json()["results"]] == ["main/ok.txt"]
    for name in ("main/passwd", "main/root/etc/passwd", "main/up/main/ok.txt",
                 "main/linkdir/secret.txt", "main/self", "main/fifo", "main"):
        res = auth_api.get(f"{url}/file", {"name": name})
        assert res.status_code == 404, name
        assert res.json()["code"] == "not_found"
        assert b"THE-SECRET" not in body(res)
    for name in ("../outside/secret.txt", "/etc/passwd", "main//ok.txt", "./main/ok.txt"):
        res = auth_api.get(f"{url}/file", {"name": name})
        assert res.status_code == 400 and "name" in res.json(), name
    assert body(auth_api.get(f"{url}/file", {"name": "main/ok.txt"})) == b"fine\n"

    artifact, _ = artifact_update_status(artifact_id=exp.artifact.pk, status="Succeeded")
    assert (artifact.file_count, artifact.total_bytes) == (1, 5)  # the manifest: one file
    assert (outside / "secret.txt").read_bytes() == SECRET


def test_an_artifact_folder_replaced_by_a_link_lists_nothing(auth_api, alice, outside):
    exp = make_exp(creator=alice, name="swapped-root")
    local_path(exp.artifact_path).parent.mkdir(parents=True, exist_ok=True)
    local_path(exp.artifact_path).symlink_to(outside)
    url = f"{EXPS}/{exp.pk}/artifacts"
    assert auth_api.get(url).json()["results"] == []
    assert auth_api.get(f"{url}/file", {"name": "secret.txt"}).status_code == 404


def test_a_folder_swapped_for_a_link_between_listing_and_reading_is_not_followed(
        auth_api, alice, outside):
    exp = make_exp(creator=alice, name="race-read")
    data = local_path(exp.artifact_path) / "main" / "data"
    data.mkdir(parents=True)
    (data / "secret.txt").write_bytes(b"public\n")
    url = f"{EXPS}/{exp.pk}/artifacts"
    assert [f["name"] for f in auth_api.get(url).json()["results"]] == ["main/data/secret.txt"]

    (data / "secret.txt").unlink()
    data.rmdir()
    data.symlink_to(outside)  # the listed name now leads outside through a folder link
    res = auth_api.get(f"{url}/file", {"name": "main/data/secret.txt"})
    assert res.status_code == 404 and b"THE-SECRET" not in body(res)


def test_a_folder_swapped_for_a_link_during_a_walk_is_not_followed(auth_api, alice, outside,
                                                                   monkeypatch):
    exp = make_exp(creator=alice, name="race-walk")
    root = local_path(exp.artifact_path)
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "secret.txt").write_bytes(b"x")
    real = safefs._list_dir
    swapped = []

    def list_then_swap(fd):
        files, dirs = real(fd)
        if "sub" in dirs and not swapped:  # the root was listed: `sub` was a folder then
            (root / "sub" / "secret.txt").unlink()
            (root / "sub").rmdir()
            (root / "sub").symlink_to(outside)
            swapped.append(True)
        return files, dirs

    monkeypatch.setattr(safefs, "_list_dir", list_then_swap)
    listing = auth_api.get(f"{EXPS}/{exp.pk}/artifacts").json()
    assert swapped and listing["results"] == []


def test_purge_deletes_the_links_and_never_their_targets(auth_api, alice, outside):
    exp = make_exp(creator=alice, name="purge-links")
    root = plant(exp, outside)
    logs = local_path(replica_log_url(exp.artifact_path, "main", 0)).parent
    logs.mkdir(parents=True)
    (logs / "replica-0.log").symlink_to(outside / "secret.txt")
    finish(exp, "Succeeded")
    assert auth_api.delete(f"{EXPS}/{exp.pk}?purge=true").status_code == 204
    assert not root.exists() and not logs.exists()
    assert (outside / "secret.txt").read_bytes() == SECRET
    assert os.path.isdir("/etc")


def test_a_stored_log_that_is_a_link_is_no_log(auth_api, alice, outside):
    exp = make_exp(creator=alice, name="log-link")
    log = local_path(replica_log_url(exp.artifact_path, "main", 0))
    log.parent.mkdir(parents=True)
    log.symlink_to(outside / "secret.txt")
    finish(exp, "Succeeded")
    res = auth_api.get(f"{EXPS}/{exp.pk}/logs")
    assert res.status_code == 404 and b"THE-SECRET" not in res.content


def test_a_task_that_replaces_its_log_by_a_link_leaks_nothing(auth_api, alice, outside):
    """A real task on the local backend swaps its own log for a link to the secret: neither
    the live read, nor the copy made when it ends, nor the failure message carry the secret."""
    from controllers.cluster_backends import LocalBackend
    from experiments.files import local_state_dir
    from jobs.models import Job

    exp = make_exp(creator=alice, name="task-link", command="true")
    job = Job.objects.select_related("experiment").get(experiment_id=exp.pk)
    state = local_state_dir(job.cluster_name)
    from experiments.tests.test_exp_files import job_view

    name = LocalBackend(state).name_of(job_view(job))
    command = (f'rm -f "{state}/{name}/replica-0.log"; '
               f'ln -s "{outside}/secret.txt" "{state}/{name}/replica-0.log"; exit 3')
    job.task_spec = {**job.task_spec, "command": command}
    job.save(update_fields=["task_spec"])
    backend, view = start(exp)
    observed = wait_for(lambda: (o := backend.observe([view])[view.id]).terminal and o,
                        what="the replica to end")
    assert "THE-SECRET" not in (observed.message or "") + (observed.reason or "")
    res = auth_api.get(f"{EXPS}/{exp.pk}/logs")
    assert b"THE-SECRET" not in res.content
    copy = replica_log_url(exp.artifact_path, "main", 0)
    wait_for(lambda: store_for(copy).size_of(copy) is not None, what="the log copy")
    assert store_for(copy).read_range(copy) == b""  # the link was not copied through
    assert (outside / "secret.txt").read_bytes() == SECRET


def test_fetch_tree_copies_no_link(alice, outside, tmp_path):
    """The analyzer's scratch copy of an artifact (`fetch_tree`) holds only the real file."""
    exp = make_exp(creator=alice, name="fetch")
    plant(exp, outside)
    dest = tmp_path / "scratch"
    assert store_for(exp.artifact_path).fetch_tree(exp.artifact_path, dest) == 1
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*")) == [
        "main", "main/ok.txt"]


def test_cli_download_never_writes_through_a_link_in_dir(alice, outside, tmp_path):
    """`falcon exp artifacts --download DIR`: a link already in DIR is refused, not written
    through; a name from the server with `..` or `/` is refused before anything is written."""
    from cli.errors import CLIError
    from cli.exit_codes import ExitCode
    from cli.exp.files import _download

    class Client:
        def stream_to(self, path, fh, params, headers):
            fh.write(b"EVIL")
            return 200

    dest = tmp_path / "dl"
    (dest / "main").mkdir(parents=True)
    (dest / "main" / "ok.txt").symlink_to(outside / "secret.txt")
    (dest / "linked").symlink_to(outside)
    for name, code in (("main/ok.txt", ExitCode.USAGE), ("linked/secret.txt", ExitCode.USAGE),
                       ("../outside/secret.txt", ExitCode.INVALID),
                       (str(outside / "secret.txt"), ExitCode.INVALID)):
        with pytest.raises(CLIError) as caught:
            _download(None, Client(), 1, [{"name": name, "size": 4}], str(dest))
        assert caught.value.code == code, name
    assert (outside / "secret.txt").read_bytes() == SECRET
    assert sorted(os.listdir(outside)) == ["secret.txt"]


# -- item 4: a user's YAML is read under one bounded rule -------------------------------------

def alias_chain(levels: int = 9) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def laughs_mapping(levels: int = 9) -> str:
    lines = ["l0: &l0 {a: lol, b: lol, c: lol, d: lol, e: lol, f: lol, g: lol, h: lol}"]
    lines += [f"l{i}: &l{i} {{" + ", ".join(f"k{j}: *l{i - 1}" for j in range(8)) + "}"
              for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("config, limit", [
    (alias_chain(), "alias"), (laughs_mapping(), "alias"),
    ("x: " + "[" * 10_000 + "]" * 10_000 + "\n", "deeper than 32 levels")])
def test_diff_of_a_config_the_reader_refuses_is_a_fast_400(auth_api, alice, config, limit,
                                                            monkeypatch):
    """Refused while the reader composes it, before anything expands: the reader takes at
    most one parser event and composes at most one node per character of the two configs
    (linear), where the alias chain used to be walked as 10**9 values for a minute."""
    plain = make_exp(creator=alice, name="plain", config="a: 1\n")
    bomb = make_exp(creator=alice, name="bomb", config=config)
    events = count_calls(monkeypatch, boundedyaml.BoundedSafeLoader, "get_event")
    nodes = count_calls(monkeypatch, boundedyaml.BoundedComposerMixin, "compose_node")
    res = auth_api.get(f"{EXPS}/diff", {"ids": f"{plain.pk},{bomb.pk}"})
    assert res.status_code == 400, res.content
    assert res.json()["code"] == "invalid"
    message = res.json()["config"][0]
    assert f"experiment {bomb.pk}" in message and limit in message
    assert 0 < nodes.calls <= len(config) + len("a: 1\n")
    assert 0 < events.calls <= len(config) + len("a: 1\n")


def test_the_tasks_file_and_the_diff_share_the_rule():
    from cli.tasks_yaml import Yaml12Loader

    assert issubclass(Yaml12Loader, boundedyaml.BoundedComposerMixin)
    with pytest.raises(boundedyaml.YamlLimitError) as caught:
        boundedyaml.load(alias_chain())
    assert caught.value.limit == "aliases" and (caught.value.line, caught.value.column) == (1, 5)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=st.sampled_from(list("ab:- \n[]{},&*!|>'\"#%@`?\t0.~")), max_size=80))
def test_the_reader_returns_or_raises_its_one_error(text):
    try:
        boundedyaml.load(text)
    except boundedyaml.YamlLimitError:
        pass
