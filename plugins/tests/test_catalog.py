"""The catalog file loads, and each kind of bad entry is refused naming the entry and field."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from plugins.catalog import DEFAULT_CATALOG, Plugin, Resources, load_catalog, \
    plugins_for_artifact_type

GOOD = {"name": "x-1", "description": "d", "command": "x-1 --input a", "artifact_types": ["profiling"],
        "resources": {"cpu_request": "500m", "cpu_limit": "2", "memory_request": "512Mi",
                      "memory_limit": "2Gi"}, "timeout_seconds": 60}


def write(tmp_path: Path, entries: list) -> Path:
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump({"plugins": entries}))
    return path


def test_the_shipped_catalog_lists_the_three_builtin_plugins():
    catalog = load_catalog(DEFAULT_CATALOG)
    assert list(catalog) == ["trace-summary", "hlo-stats", "bench-summary"]
    assert [p.name for p in plugins_for_artifact_type(catalog, "profiling")] == [
        "trace-summary", "hlo-stats"]
    assert [p.name for p in plugins_for_artifact_type(catalog, "benchmark")] == ["bench-summary"]
    assert plugins_for_artifact_type(catalog, "dataset") == []
    ts = catalog["trace-summary"]
    assert ts.resources == Resources("500m", "2", "512Mi", "2Gi")
    assert ts.timeout_seconds == 1800
    assert '"$FALCON_INPUT_DIR"' in ts.command and '"$FALCON_RESULT_FILE"' in ts.command


def test_each_catalog_command_names_an_executable_in_bin():
    bin_dir = Path(DEFAULT_CATALOG).parent / "bin"
    for plugin in load_catalog().values():
        exe = bin_dir / plugin.command.split()[0]
        assert exe.is_file() and exe.stat().st_mode & 0o111, exe


def test_plugin_is_frozen():
    plugin = load_catalog()["hlo-stats"]
    assert isinstance(plugin, Plugin)
    with pytest.raises(AttributeError):
        plugin.name = "other"  # type: ignore[misc]


def bad(**changes):
    entry = copy.deepcopy(GOOD)
    for key, value in changes.items():
        if value is ...:
            del entry[key]
        else:
            entry[key] = value
    return entry


@pytest.mark.parametrize("entry, message", [
    (bad(command=...), "'x-1': missing field 'command'"),
    (bad(colour="red"), "'x-1': unknown field 'colour'"),
    (bad(name="Trace_Summary"), "'Trace_Summary': name must be"),
    (bad(name="-x"), "name must be"),
    (bad(timeout_seconds=0), "'x-1': timeout_seconds must be a positive integer"),
    (bad(timeout_seconds=-5), "timeout_seconds"),
    (bad(timeout_seconds=True), "timeout_seconds"),
    (bad(resources={**GOOD["resources"], "cpu_limit": "two"}), "resources.cpu_limit is not a "
                                                               "Kubernetes quantity"),
    (bad(resources={**GOOD["resources"], "memory_request": "512MB"}), "resources.memory_request"),
    (bad(resources={**GOOD["resources"], "memory_request": "-1Gi"}), "resources.memory_request"),
    (bad(resources={**GOOD["resources"], "gpu": "1"}), "unknown field resources.gpu"),
    (bad(resources={"cpu_request": "1"}), "missing field resources.cpu_limit"),
    (bad(resources={**GOOD["resources"], "memory_request": "4Gi"}),
     "memory_request 4Gi exceeds resources.memory_limit 2Gi"),
    (bad(artifact_types=[]), "artifact_types"),
    (bad(description=""), "description must be a non-empty string"),
    (bad(inputs="*.json"), "'x-1': inputs must be a list of globs"),
    (bad(inputs=["/etc/*.json"]), "inputs must be a list of globs relative to the artifact"),
    (bad(inputs=["../*.json"]), "inputs must be a list of globs"),
])
def test_bad_entries_are_refused_naming_entry_and_field(tmp_path, entry, message):
    with pytest.raises(ValueError, match=None) as err:
        load_catalog(write(tmp_path, [GOOD | {"name": "first"}, entry]))
    assert message in str(err.value)


def test_an_entry_without_a_name_is_named_by_position(tmp_path):
    with pytest.raises(ValueError, match=r"plugin #2: missing field 'name'"):
        load_catalog(write(tmp_path, [GOOD, bad(name=...)]))


def test_duplicate_names_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"plugin 'x-1' \(#2\): duplicate name"):
        load_catalog(write(tmp_path, [GOOD, GOOD]))


def test_not_a_catalog(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("- just a list\n")
    with pytest.raises(ValueError, match="single key 'plugins'"):
        load_catalog(path)
    path.write_text("plugins: [unclosed\n")
    with pytest.raises(ValueError, match="not valid YAML"):
        load_catalog(path)


def test_integer_quantities_are_accepted(tmp_path):
    entry = bad(resources={**GOOD["resources"], "cpu_request": 1, "cpu_limit": 2})
    assert load_catalog(write(tmp_path, [entry]))["x-1"].resources.cpu_limit == "2"


NAMES = ["t.json", "a/b/host.trace.json.gz", "X.JSON", "p/host.xplane.pb", "m.json.bak",
         "module_0001.jit_f.before_optimizations.txt", "d/x.HLO", "x.hlo.pb", "results.jsonl",
         "r/bench.csv", "notes.md", "json", "a.json/inner.bin"]


def test_each_plugins_declared_inputs_are_the_files_it_reads():
    """The catalog's globs (what offline discovery looks for) and each plugin's own file
    filter (what it reads in a folder) must agree, or discovery skips work a plugin could do
    or starts one that finds nothing."""
    from plugins import bench_summary, hlo_stats, trace_summary

    catalog = load_catalog()
    for module, name in ((trace_summary, "trace-summary"), (hlo_stats, "hlo-stats"),
                         (bench_summary, "bench-summary")):
        for rel in NAMES:
            assert catalog[name].reads(rel) == module.accepts(Path(rel)), (name, rel)


def test_inputs_are_optional_and_no_inputs_reads_every_file(tmp_path):
    plugin = load_catalog(write(tmp_path, [GOOD]))["x-1"]
    assert plugin.inputs == () and plugin.reads("anything/at.all")


@pytest.mark.parametrize("pattern, path, expected", [
    ("**/*.json", "a.json", True), ("**/*.json", "a/b/c.json", True),
    ("**/*.json", "a.json.gz", False), ("*.json", "a/b.json", False),
    ("**/bench*.json", "out/bench-1.json", True), ("**/*.txt", "A/B.TXT", True),
    ("a/?.csv", "a/1.csv", True), ("a/?.csv", "a/12.csv", False),
])
def test_glob_matches(pattern, path, expected):
    from plugins.catalog import glob_matches

    assert glob_matches(pattern, path) is expected
