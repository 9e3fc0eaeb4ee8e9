"""The SVG charts of the admin pages: marks, values with units, escaping, odd numbers."""
from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest

from core.http.charts import MAX_MARKS, Mark, bar_chart, escape, format_quantity, unit_of

SVG = "{http://www.w3.org/2000/svg}"


def _marks(svg: str) -> list[ET.Element]:
    root = ET.fromstring(svg)  # well-formed XML, or this raises
    return [e for e in root.iter(f"{SVG}rect") if e.get("class") == "falcon-mark"]


def test_one_mark_per_finite_value_with_label_value_and_tooltip():
    svg = bar_chart("gflops mean", [Mark("exp 1", 120.5, highlight=True), Mark("exp 2", 98.25),
                                    Mark("exp 3", 0)], unit="GFLOP/s")
    marks = _marks(svg)
    assert [m.get("data-label") for m in marks] == ["exp 1", "exp 2", "exp 3"]
    assert [float(m.get("data-value")) for m in marks] == [120.5, 98.25, 0.0]
    assert marks[0].get("fill") != marks[1].get("fill")  # the baseline stands out
    assert marks[0].find(f"{SVG}title").text == "exp 1: 120.5 GFLOP/s"
    # The longest bar is the largest value; every bar lies inside the picture.
    widths = [float(m.get("width")) for m in marks]
    assert widths[0] > widths[1] > widths[2]
    assert all(float(m.get("x")) + float(m.get("width")) <= float(ET.fromstring(svg)
                                                                  .get("width")) for m in marks)


def test_missing_and_non_finite_values_get_no_bar_and_say_so():
    svg = bar_chart("p50", [Mark("a", None), Mark("b", math.nan), Mark("c", math.inf),
                            Mark("d", 2.0)])
    assert [m.get("data-label") for m in _marks(svg)] == ["d"]
    texts = ["".join(t.itertext()) for t in ET.fromstring(svg).iter(f"{SVG}text")]
    assert "missing" in texts and "nan" in texts and "inf" in texts


def test_negative_values_extend_left_of_zero():
    marks = _marks(bar_chart("change", [Mark("up", 5.0), Mark("down", -5.0)], unit="%"))
    up, down = marks
    assert float(down.get("x")) + float(down.get("width")) == pytest.approx(float(up.get("x")))


def test_hostile_text_is_drawn_as_text_never_as_markup():
    hostile = '"><svg onload=alert(1)><script>alert(2)</script>'
    svg = bar_chart(hostile, [Mark(hostile, 1.0), Mark("x\x00\x1b", 2.0)], unit="<u>")
    assert "<script" not in svg and "<svg onload" not in svg
    root = ET.fromstring(svg)
    assert root.get("aria-label") == hostile
    assert _marks(svg)[0].get("data-label") == hostile
    assert _marks(svg)[1].get("data-label") == "x"  # control characters XML forbids are gone
    assert escape("a&b'c") == "a&amp;b&#x27;c"


def test_long_labels_are_cut_with_the_whole_label_in_the_tooltip():
    label = "experiment-" + "x" * 80
    root = ET.fromstring(bar_chart("t", [Mark(label, 1.0)]))
    label_text = [t for t in root.iter(f"{SVG}text") if t.find(f"{SVG}title") is not None][0]
    assert label_text.find(f"{SVG}title").text == label
    assert "".join(label_text.itertext()).endswith("…")


def test_at_most_max_marks_are_drawn():
    assert len(_marks(bar_chart("t", [Mark(str(i), i + 1) for i in range(MAX_MARKS + 5)]))) \
        == MAX_MARKS


@pytest.mark.parametrize(("value", "unit", "shown"), [
    (12.5, "us", "12.5 µs"), (1500, "us", "1.5 ms"), (2_500_000, "us", "2.5 s"),
    (0.25, "s", "250 ms"), (3, "ms", "3 ms"), (1536, "B", "1.5 KiB"), (512, "B", "512 B"),
    (3 * 1024 ** 3, "B", "3 GiB"), (123.456, "GFLOP/s", "123.5 GFLOP/s"), (1234, "", "1,234"),
    (12_345.0, "", "12.35 k"), (2.5e9, "op/s", "2.5 Gop/s"), (-40_000, "", "-40 k"),
    (None, "", "missing"), (math.nan, "us", "nan"), (-math.inf, "", "-inf"),
    (0.000123, "", "0.000123"),
])
def test_numbers_are_formatted_with_their_units(value, unit, shown):
    assert format_quantity(value, unit) == shown


@pytest.mark.parametrize(("field", "unit"), [("self_us", "us"), ("latency_ms", "ms"),
                                             ("wall_seconds", "s"), ("output_bytes", "B"),
                                             ("bytes", "B"), ("gflops", "GFLOP/s"), ("count", "")])
def test_units_from_field_names(field, unit):
    assert unit_of(field) == unit
