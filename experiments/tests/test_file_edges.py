"""Artifact files at their edges, over HTTP and the CLI: names no file system can hold, and
downloads of two experiments' files of the same name into one folder."""
from __future__ import annotations

import pytest

from core.processes.safefs import NAME_MAX_BYTES, PATH_MAX_BYTES
from experiments.tests.factories import make_exp
from experiments.tests.test_exp_files import EXPS, alice, gcs_server, put, store_root  # noqa: F401

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("name,limit", [
    ("a" * (NAME_MAX_BYTES + 1), NAME_MAX_BYTES),
    ("main/" + "\u00e9" * 128, NAME_MAX_BYTES),  # 128 characters, 256 bytes
    ("/".join(["d" * 200] * 5) + "/x", None),     # each part fits, 1,006 bytes in all
])
def test_a_file_name_over_the_file_systems_limits_is_a_404_naming_the_limit(
        auth_api, alice, store_root, tmp_path, name, limit):
    """An artifact file name over 255 bytes answered 500 ("File name too long")."""
    exp = make_exp(creator=alice, name="long-names")
    put(f"{exp.artifact_path}/main/f.txt", b"data", tmp_path)
    res = auth_api.get(f"{EXPS}/{exp.pk}/artifacts/file", {"name": name})
    if limit is None:  # within every limit: simply no such file
        assert res.status_code == 404, res.content
        return
    # No file can have that name: a 404 naming the limit (a valid name as the schema has it).
    assert res.status_code == 404, res.content
    assert f"at most {limit} bytes" in res.json()["detail"]


def test_a_path_over_4096_bytes_is_refused_by_the_name_check():
    from core.processes.safefs import UnsafeName, name_parts

    with pytest.raises(UnsafeName, match=f"at most {PATH_MAX_BYTES} bytes"):
        name_parts("/".join(["d" * 250] * 17))


@pytest.mark.parametrize("name", ["main", "main/f.txt/x", "main/f.txt/"])
def test_a_folder_or_a_file_used_as_a_folder_is_no_file(auth_api, alice, tmp_path, name):
    """EISDIR and ENOTDIR from the file system are a 404 (or a 400 for an empty component),
    never a 500."""
    exp = make_exp(creator=alice, name="odd-names")
    put(f"{exp.artifact_path}/main/f.txt", b"data", tmp_path)
    res = auth_api.get(f"{EXPS}/{exp.pk}/artifacts/file", {"name": name})
    assert res.status_code in (400, 404), res.content


def test_the_listing_gives_a_validator_and_if_range_honours_it(auth_api, alice, store_root,
                                                               tmp_path):
    """Two experiments' files of the same name and size have different ETags; a Range sent
    with another version's ETag as If-Range gets the whole file (200), RFC 9110 13.1.5."""
    one = make_exp(creator=alice, name="one")
    two = make_exp(creator=alice, name="two")
    put(f"{one.artifact_path}/main/t.bin", b"1" * 100, tmp_path)
    put(f"{two.artifact_path}/main/t.bin", b"2" * 100, tmp_path)
    [listed_one] = auth_api.get(f"{EXPS}/{one.pk}/artifacts").json()["results"]
    [listed_two] = auth_api.get(f"{EXPS}/{two.pk}/artifacts").json()["results"]
    assert listed_one["etag"].startswith('"') and listed_one["etag"] != listed_two["etag"]

    url = f"{EXPS}/{two.pk}/artifacts/file"
    whole = auth_api.get(url, {"name": "main/t.bin"})
    assert whole["ETag"] == listed_two["etag"]
    other = auth_api.get(url, {"name": "main/t.bin"}, HTTP_RANGE="bytes=40-",
                         HTTP_IF_RANGE=listed_one["etag"])
    assert other.status_code == 200 and b"".join(other.streaming_content) == b"2" * 100
    same = auth_api.get(url, {"name": "main/t.bin"}, HTTP_RANGE="bytes=40-",
                        HTTP_IF_RANGE=listed_two["etag"])
    assert same.status_code == 206 and b"".join(same.streaming_content) == b"2" * 60
    weak = auth_api.get(url, {"name": "main/t.bin"}, HTTP_RANGE="bytes=40-",
                        HTTP_IF_RANGE="W/" + listed_two["etag"])
    assert weak.status_code == 200

    # A rewrite under the same name is another version.
    put(f"{two.artifact_path}/main/t.bin", b"3" * 100, tmp_path)
    [relisted] = auth_api.get(f"{EXPS}/{two.pk}/artifacts").json()["results"]
    assert relisted["etag"] != listed_two["etag"]
    stale = auth_api.get(url, {"name": "main/t.bin"}, HTTP_RANGE="bytes=40-",
                         HTTP_IF_RANGE=listed_two["etag"])
    assert stale.status_code == 200 and b"".join(stale.streaming_content) == b"3" * 100
