"""Falcon's built-in Data Analyzer plugins.

A plugin is an executable (any language) kept in the plugin folder of the analyzer image, which
is on PATH. The Data Analyzer runs it over the artifact files of a finished experiment; it reads
its input files and writes ONE JSONL file (one JSON object per line) named after the plugin.

Calling convention, shared by every plugin::

    NAME --input PATH [--input PATH ...] --output FILE.jsonl

* ``--input`` is a file or a directory searched recursively for the files the plugin
  understands. Without it the plugin reads ``$FALCON_INPUT_DIR``.
* ``--output`` is the JSONL result. Without it the plugin writes ``$FALCON_RESULT_FILE``, and
  without that too, stdout. The result is written to ``FILE.tmp`` and renamed, so a failed run
  leaves no partial result.
* Exit status: 0 on success (also when the output is flagged incomplete or truncated), 1 when
  every input failed to parse (stderr names the file and the byte offset), 2 when there was no
  usable input (stderr names the path and what was expected).
* Progress and warnings go to stderr (the analysis' output.log).

Every result starts with a header record ``{"kind": "meta", "plugin": ..., "version": 1,
"inputs": [...]}``; every following record has a ``"kind"``. Times are in microseconds (fields
ending in ``_us``), sizes in bytes (``_bytes``). docs/plugins.md documents each plugin's records.

This package imports no Django: the plugins run in their own image.
"""
